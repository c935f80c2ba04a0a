"""`env_spec.lm_spec` validated into a typed spec that holds no secret (keys in docs/lm.md)."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from ellm.errors import ConfigError
from ellm.lm.bullets import MAX_GOALS_PER_ANSWER
from ellm.run.schema import one_of, parse, valid
from lmclient.pricing import is_openai_endpoint
from lmclient.spec import OPENAI_API_URL

LM_CLASSES: Final = ("SimpleOracle", "GPTLanguageModel", "Novelty")
LM_CLASS_ALIASES: Final = {  # the original's spellings
    "GPTHousekeep": "GPTLanguageModel",
    "SimpleOracleHousekeep": "SimpleOracle",
    "BaselineModel": "Novelty",
    "BaselineHousekeep": "Novelty",
    "BaselineLM": "Novelty",
}
NOVELTY_CLASSES: Final = frozenset(
    {"Novelty", *(name for name, to in LM_CLASS_ALIASES.items() if to == "Novelty")})
ENDPOINTS: Final = ("chat", "completions")
# Whose answers a cached answer may stand for: the same endpoint, or opted in, any.
CACHE_SCOPES: Final = ("endpoint", "model")
CONSTRAINED: Final = ("auto", "true", "false")
SECRET_KEYS: Final = ("openai_key",)
DEFAULT_MODEL: Final = "gpt-4o-mini"
PREFIX: Final = "env_spec.lm_spec"


def _text(v: Any) -> str:
    """Text a request, a log line and a cache row can all carry (no lone surrogates)."""
    if not isinstance(v, str):
        raise TypeError(v)
    v.encode("utf-8")  # a UnicodeEncodeError is a ValueError
    return v


def _optional_text(v: Any) -> str | None:
    return None if v is None or v == "" else _text(v)


def _model(v: Any) -> str:
    name = _text(v).strip()
    if not name:
        raise ValueError(v)
    return name


def _float(v: Any) -> float:
    if isinstance(v, bool):
        raise TypeError(v)
    return float(v)


def _integer(v: Any) -> int:
    if isinstance(v, bool):
        raise TypeError(v)
    n = int(v)
    if float(v) != n:
        raise ValueError(v)
    return n


def _boolean(v: Any) -> bool:
    """A boolean, or its spelling in text (``true``/``false``, any case)."""
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    raise ValueError(v)


def _all_or_integer(v: Any) -> int | None:
    return None if v is None or (isinstance(v, str) and v.lower() == "all") else _integer(v)


def _price_pair(v: Any) -> tuple[float, float] | None:
    if v is None:
        return None
    price_in, price_out = (_float(x) for x in v)
    return price_in, price_out


def _lowercase(v: Any) -> str:
    """``auto``, ``true`` or ``false`` in any case (YAML and Hydra make true/false booleans)."""
    return str(v).lower() if isinstance(v, (bool, str)) else v


def _text_field(default: str | None) -> Any:
    return valid("UTF-8 text or null", lambda v: True, default, _optional_text)


def _number_field(default: float, low: float, unit: str = "") -> Any:
    return valid(f"a number >= {low:g}{unit}", lambda v: math.isfinite(v) and v >= low, default,
                 _float)


def _integer_field(default: int, low: int) -> Any:
    return valid(f"an integer >= {low}", lambda v: v >= low, default, _integer)


def _boolean_field(default: bool) -> Any:
    return valid("true or false", lambda v: isinstance(v, bool), default, _boolean)


@dataclass(frozen=True)
class LMSpec:
    """Validated ``env_spec.lm_spec`` (``ellm.run.schema``'s style), holding no secret; its defaults
    are config.yaml's and docs/lm.md's (a test holds them equal)."""

    lm_class: str = valid(
        f"one of {', '.join(LM_CLASSES)} (or the original's {', '.join(LM_CLASS_ALIASES)})",
        lambda v: v in LM_CLASSES, "SimpleOracle", lambda v: LM_CLASS_ALIASES.get(v, v))
    lm: str = valid("a model name (non-empty UTF-8 text)", lambda v: True, DEFAULT_MODEL, _model)
    prompt: str = valid("a prompt name", lambda v: True, "BulletPrompt", str)
    prompt_file: str | None = _text_field(None)
    temperature: float = _number_field(0.1, 0)
    max_tokens: int = _integer_field(200, 1)
    stop: str | None = _text_field("\n\n")
    budget: float = _number_field(1.0, 0, " (dollars)")
    openai_org: str | None = _text_field(None)
    max_num_goals: int | None = valid(
        f"all or an integer in [1, {MAX_GOALS_PER_ANSWER}] (an answer's goals are capped there)",
        lambda v: v is None or 1 <= v <= MAX_GOALS_PER_ANSWER, None, _all_or_integer)
    dummy_lm: bool = _boolean_field(False)
    prob_threshold: float = valid("a probability in [0, 1]", lambda v: 0 <= v <= 1, 0.5, _float)
    novelty_bonus: bool = _boolean_field(True)
    base_url: str | None = _text_field(None)
    endpoint: str = one_of(*ENDPOINTS, default="chat")
    timeout: float = _number_field(30.0, 0.001, " (seconds)")
    max_retries: int = _integer_field(3, 0)
    backoff: float = _number_field(1.0, 0, " (seconds)")
    max_backoff: float = _number_field(30.0, 0, " (seconds)")
    cache_dir: str | None = _text_field(None)
    cache_only: bool = _boolean_field(False)
    price: tuple[float, float] | None = valid(
        "[input, output] dollars per 1M tokens, finite and >= 0, or null",
        lambda v: v is None or all(0 <= x < math.inf for x in v), None, _price_pair)
    strict_parsing: bool = _boolean_field(False)
    blocking: bool = _boolean_field(True)
    max_in_flight: int = _integer_field(4, 1)
    cache_scope: str = one_of(*CACHE_SCOPES, default="endpoint")
    constrained: str = valid(f"one of {', '.join(CONSTRAINED)}", lambda v: v in CONSTRAINED,
                             "auto", _lowercase)
    api_key_env: str = valid(
        "the name of an environment variable (letters, digits, _) other than OPENAI_API_KEY",
        lambda v: re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v) is not None
        and v != "OPENAI_API_KEY", "ELLM_LM_API_KEY", _text)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (safe to log: no key)."""
        out = asdict(self)
        out["max_num_goals"] = "all" if self.max_num_goals is None else self.max_num_goals
        out["price"] = list(self.price) if self.price is not None else None
        return out


def parse_lm_spec(raw: Mapping[str, Any]) -> LMSpec:
    """Validate an ``env_spec.lm_spec`` mapping into an LMSpec; unknown keys raise (typos)."""
    raw = dict(raw)
    fields = set(LMSpec.__dataclass_fields__)
    known = fields | set(SECRET_KEYS) | {"all_goals"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(unknown)} in {PREFIX}; valid keys: "
                          f"{', '.join(sorted(known))}")
    return parse(LMSpec, {k: v for k, v in raw.items() if k in fields}, f"{PREFIX}.")


# train.py moves a legacy ``openai_key=`` override here so it never reaches Hydra's logs.
LEGACY_KEY_ENV = "ELLM_LEGACY_OPENAI_KEY"


def adopt_config_key(raw: Mapping[str, Any], spec: LMSpec) -> bool:
    """A deprecated ``openai_key`` of a config file goes where train.py puts one given on the
    command line (which wins), for clients built from the parsed spec; True if it was there."""
    key = raw.get("openai_key")
    if not key or spec.lm_class != "GPTLanguageModel":
        return False
    os.environ.setdefault(LEGACY_KEY_ENV, str(key))
    return True


def key_variable(spec: LMSpec) -> str:
    """The variable whose key goes to ``spec``'s endpoint: OPENAI_API_KEY to OpenAI's only."""
    return "OPENAI_API_KEY" if is_openai_endpoint(spec.base_url) else spec.api_key_env


def resolve_api_key(raw: Mapping[str, Any], spec: LMSpec) -> str | None:
    """The API key for ``spec``'s endpoint (its ``base_url`` resolved by
    :func:`lmclient.spec.endpoint_of`), or None. ``OPENAI_API_KEY`` and the legacy
    ``openai_key`` are OpenAI keys: they are sent to OpenAI's API host and nowhere else."""
    variable = key_variable(spec)
    key = os.environ.get(variable)
    if variable == "OPENAI_API_KEY":
        key = key or raw.get("openai_key") or os.environ.get(LEGACY_KEY_ENV)
    return str(key) if key else None


def describe_key(spec: LMSpec, key: str | None) -> str:
    """Which host gets which variable, for the start-up line (never the key itself)."""
    host = urlsplit(spec.base_url or OPENAI_API_URL).hostname or spec.base_url
    if key is None:
        return f"{host} gets no API key (${key_variable(spec)} is unset)"
    return f"{host} gets the API key in ${key_variable(spec)}"


def redact_lm_spec(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of an ``lm_spec`` mapping with secret entries removed (for saved configs)."""
    return {k: v for k, v in dict(raw).items() if k not in SECRET_KEYS}
