"""How each kind of server is asked for a constrained answer, and which kind a server is."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from typing import Any, Final

from lmclient.pricing import is_openai_endpoint

DIALECTS: Final = ("openai", "vllm", "llama.cpp")
OWNERS: Final = {"vllm": "vllm", "llamacpp": "llama.cpp", "me": "llama.cpp"}
# OpenAI chat models with structured outputs; the exceptions came before the feature.
OPENAI_STRUCTURED: Final = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4")
OPENAI_UNSTRUCTURED: Final = ("gpt-4o-2024-05-13", "o1-mini", "o1-preview", "gpt-4o-audio",
                              "gpt-4o-realtime", "gpt-4o-search")
# OpenAI's reasoning models refuse ``max_tokens``, ``stop`` and temperature != 1.
REASONING_MODELS: Final = ("o1", "o3", "o4", "gpt-5")
NOT_REASONING: Final = ("gpt-5-chat",)
NO_SYSTEM_ROLE: Final = ("o1-preview", "o1-mini")
VLLM_STRUCTURED_OUTPUTS: Final = (0, 10, 2)
_FIELDS: Final = re.compile(r"response_format|json_schema|schema|grammar|structured_outputs|"
                            r"guided_", re.IGNORECASE)


def openai_model_is_structured(model: str) -> bool:
    if model.startswith(OPENAI_UNSTRUCTURED):
        return False
    return any(model == p or model.startswith(f"{p}-") for p in OPENAI_STRUCTURED)


def is_reasoning_model(model: str) -> bool:
    """True for a model of :data:`REASONING_MODELS` (a name or a dated or sized variant)."""
    if model.startswith(NOT_REASONING):
        return False
    return any(model == p or model.startswith(f"{p}-") for p in REASONING_MODELS)


def sampling_fields(model: str, chat: bool, max_tokens: int, temperature: float,
                    stop: Any) -> dict[str, Any]:
    """Sampling kwargs for ``model``: a reasoning model takes only ``max_completion_tokens``."""
    if chat and is_reasoning_model(model):
        return {"max_completion_tokens": max_tokens}
    fields: dict[str, Any] = {"max_tokens": max_tokens, "temperature": temperature}
    if stop:
        fields["stop"] = stop
    return fields


def chat_messages(model: str, messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """``messages`` with the system message made a user one for :data:`NO_SYSTEM_ROLE` models."""
    if not model.startswith(NO_SYSTEM_ROLE):
        return messages
    return [{**m, "role": "user"} if m.get("role") == "system" else m for m in messages]


def auto_dialect(base_url: str | None, endpoint: str, model: str,
                 owners: list[str]) -> str | None:
    """The dialect ``constrained=auto`` uses; None: off."""
    if is_openai_endpoint(base_url):
        return "openai" if endpoint == "chat" and openai_model_is_structured(model) else None
    kinds = {OWNERS[o] for o in owners if o in OWNERS}
    return kinds.pop() if len(kinds) == 1 else None


def forced_dialect(base_url: str | None, owners: list[str]) -> str:
    """The dialect ``constrained=true`` uses: the server's, else OpenAI's interface."""
    kinds = {OWNERS[o] for o in owners if o in OWNERS}
    if not is_openai_endpoint(base_url) and len(kinds) == 1:
        return kinds.pop()
    return "openai"


def vllm_version(base_url: str, timeout: float) -> tuple[int, ...] | None:
    """vLLM's version from ``GET /version`` beside ``/v1``; None when it does not say."""
    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        with urllib.request.urlopen(f"{root}/version", timeout=timeout) as response:
            text = json.load(response).get("version", "")
    except (OSError, ValueError, AttributeError):
        return None
    numbers = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", str(text))
    return None if numbers is None else tuple(int(n or 0) for n in numbers.groups())


def request_fields(constraint: dict[str, Any], dialect: str,
                   version: tuple[int, ...] | None = None) -> dict[str, Any]:
    """The ``openai`` call's kwargs that carry ``constraint`` in ``dialect``."""
    schema = constraint["schema"]
    if dialect == "llama.cpp":
        return {"extra_body": {"grammar": constraint["grammar"]}}
    if dialect == "vllm":
        if version is not None and version < VLLM_STRUCTURED_OUTPUTS:
            return {"extra_body": {"guided_json": schema}}
        return {"extra_body": {"structured_outputs": {"json": schema}}}
    return {"response_format": {"type": "json_schema", "json_schema": {
        "name": constraint["name"], "schema": schema, "strict": True}}}


def names_constraint(message: str) -> bool:
    """True when an error message names a constraint field: the server refused the field."""
    return _FIELDS.search(message) is not None
