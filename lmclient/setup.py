"""Setting an LM client up: its ``openai`` client, its model and its constraint dialect."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from lmclient.answers import InvalidAnswer, served_models
from lmclient.dialects import auto_dialect, forced_dialect, vllm_version
from lmclient.pricing import RETIRED_MODELS, is_openai_endpoint
from lmclient.spec import OPENAI_API_URL, ClientSpec, api_url

if TYPE_CHECKING:
    import openai

    from lmclient.cache import AnswerCache

log = logging.getLogger("ellm.lm")
LOCAL_PLACEHOLDER_KEY: Final = "no-key-needed"


@dataclass(frozen=True)
class Constraining:
    """Whether a client's requests carry their constraint, and in which dialect."""

    on: bool = False
    dialect: str | None = None
    version: tuple[int, ...] | None = None

    def describe(self) -> str:
        return (self.dialect or "on") if self.on else "off"


def make_openai(spec: ClientSpec, api_key: str | None) -> openai.OpenAI:
    """The ``openai`` client of ``spec`` (no retries of its own: the LM client retries)."""
    import openai

    if not api_key:
        if is_openai_endpoint(spec.base_url):
            raise ValueError(
                "no OpenAI API key: export OPENAI_API_KEY, or set env_spec.lm_spec.base_url "
                "to a local server, or use dummy_lm=true / cache_only=true")
        api_key = LOCAL_PLACEHOLDER_KEY
    org = spec.openai_org
    if org and org == api_key:
        log.warning("ignoring env_spec.lm_spec.openai_org: it holds the API key, not an "
                    "organisation id")
        org = None
    # Never None: the ``openai`` package would then read $OPENAI_BASE_URL behind our back and
    # send OpenAI's key there (lmclient.spec.endpoint_of resolves it on our side).
    return openai.OpenAI(api_key=api_key, organization=org,
                         base_url=spec.base_url or OPENAI_API_URL,
                         timeout=spec.timeout, max_retries=0)


def list_models(client: openai.OpenAI, spec: ClientSpec, scrub: Any) -> list[tuple[str, str]]:
    """(name, owner) of each model a non-OpenAI server lists; [] when it lists none."""
    import openai

    try:
        return served_models(client.models.with_raw_response.list().content)
    except (openai.OpenAIError, InvalidAnswer) as err:
        log.warning("could not list the models served at %s (%s): asking for %r as "
                    "configured", spec.base_url, scrub(str(err)), spec.lm)
        return []


def adopt_served_model(spec: ClientSpec, served: list[str], say_once: Any) -> ClientSpec:
    """``spec`` with the model a non-OpenAI server serves, warned, so a local model's answers
    never pass for another model's.
    """
    if spec.lm in served:
        return spec
    if len(served) == 1:
        say_once(logging.WARNING, "%s serves one model, %r, not env_spec.lm_spec.lm=%r: "
                 "asking for %r (set env_spec.lm_spec.lm=%s to silence this warning)",
                 spec.base_url, served[0], spec.lm, served[0], served[0])
        return replace(spec, lm=served[0])
    if served:
        log.warning("%s does not list the model %r (it lists %s): asking for it anyway",
                    spec.base_url, spec.lm, ", ".join(served))
    if spec.lm in RETIRED_MODELS:
        log.warning("%s is a retired OpenAI model name; sending it to %s as is",
                    spec.lm, spec.base_url)
    return spec


def constraining(spec: ClientSpec, owners: list[str], offline: bool) -> Constraining:
    """How ``spec``'s requests carry constraints; offline, ``auto`` is off."""
    if spec.constrained == "false" or (offline and spec.constrained == "auto"):
        return Constraining()
    if offline:
        return Constraining(on=True)
    if spec.constrained == "auto":
        dialect = auto_dialect(spec.base_url, spec.endpoint, spec.lm, owners)
        if dialect is None:
            return Constraining()
    else:
        dialect = forced_dialect(spec.base_url, owners)
    version = vllm_version(api_url(spec.base_url), spec.timeout) if dialect == "vllm" else None
    return Constraining(on=True, dialect=dialect, version=version)


def check_retired_model(spec: ClientSpec, cache: AnswerCache | None, scope: str,
                        cache_only: bool) -> bool:
    """Whether a retired OpenAI model may only replay cached answers; ValueError when it has none.
    """
    if spec.lm not in RETIRED_MODELS or spec.dummy_lm or cache_only:
        return cache_only
    if not is_openai_endpoint(spec.base_url):
        return False
    if cache is not None and cache.has_model(spec.lm, scope):
        log.warning("%s is retired by OpenAI: replaying its cached answers only "
                    "(cache_only=true); states not in the cache get no goals", spec.lm)
        return True
    raise ValueError(
        f"env_spec.lm_spec.lm={spec.lm} is retired by OpenAI and the cache "
        f"{cache.path if cache else '(disabled)'} holds no answer of it. "
        "Use a current model (default gpt-4o-mini), import the original answers with "
        "`python -m ellm.lm.import_cache FILE.pkl`, or set base_url to a server that "
        "serves a model under that name")
