"""`env_spec.lm_spec` validated into a typed spec that holds no secret (keys in docs/lm.md)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from ellm.lm.pricing import is_openai_endpoint

LM_CLASSES: Final = ("SimpleOracle", "GPTLanguageModel", "BaselineModel")
LM_CLASS_ALIASES: Final = {
    "GPTHousekeep": "GPTLanguageModel",
    "SimpleOracleHousekeep": "SimpleOracle",
    "BaselineHousekeep": "BaselineModel",
    "BaselineLM": "BaselineModel",
}
ENDPOINTS: Final = ("chat", "completions")
# Whose answers a cached answer may stand for: the same endpoint, or opted in, any.
CACHE_SCOPES: Final = ("endpoint", "model")
CONSTRAINED: Final = ("auto", "true", "false")
OPENAI_API_URL: Final = "https://api.openai.com/v1"
SECRET_KEYS: Final = ("openai_key",)
DEFAULT_MODEL: Final = "gpt-4o-mini"
PREFIX: Final = "env_spec.lm_spec"


@dataclass(frozen=True)
class LMSpec:
    """Validated ``env_spec.lm_spec``; its defaults are config.yaml's (a test holds them equal)
    and docs/lm.md's. Holds no secret."""

    lm_class: str = "SimpleOracle"
    lm: str = DEFAULT_MODEL
    prompt: str = "BulletPrompt"
    prompt_file: str | None = None
    temperature: float = 0.1
    max_tokens: int = 200
    stop: str | None = "\n\n"
    budget: float = 1.0
    openai_org: str | None = None
    max_num_goals: int | None = None
    dummy_lm: bool = False
    prob_threshold: float = 0.5
    novelty_bonus: bool = True
    base_url: str | None = None
    endpoint: str = "chat"
    timeout: float = 30.0
    max_retries: int = 3
    backoff: float = 1.0
    max_backoff: float = 30.0
    cache_dir: str | None = None
    cache_only: bool = False
    price: tuple[float, float] | None = None
    strict_parsing: bool = False
    blocking: bool = True
    max_in_flight: int = 4
    cache_scope: str = "endpoint"
    constrained: str = "auto"

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (safe to log: no key)."""
        out = asdict(self)
        out["max_num_goals"] = "all" if self.max_num_goals is None else self.max_num_goals
        out["price"] = list(self.price) if self.price is not None else None
        return out


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"{PREFIX}.{name} must be true or false, got {value!r}")


def _number(name: str, value: Any, *, minimum: float = 0.0, integer: bool = False) -> Any:
    kind = "an integer" if integer else "a number"
    try:
        if isinstance(value, bool):
            raise TypeError(value)
        number = int(value) if integer else float(value)
        if integer and float(value) != number:
            raise ValueError(value)
    except (TypeError, ValueError):
        raise ValueError(f"{PREFIX}.{name} must be {kind}, got {value!r}") from None
    if number < minimum:
        raise ValueError(f"{PREFIX}.{name} must be >= {minimum}, got {value!r}")
    return number


def _optional_str(name: str, value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(  # noqa: TRY004 - every bad config value is a ValueError
            f"{PREFIX}.{name} must be a string or null, got {value!r}")
    return _unicode(name, value)


def _unicode(name: str, value: str) -> str:
    """``value`` unless it holds lone surrogates, which no request, log or cache row could carry."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{PREFIX}.{name} must be valid UTF-8 text, got {value!r}") from None
    return value


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{PREFIX}.{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _constrained(value: Any) -> str:
    """``auto``, ``true`` or ``false`` (YAML and Hydra turn true/false into booleans)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str) and value.lower() in CONSTRAINED:
        return value.lower()
    raise ValueError(f"{PREFIX}.constrained must be one of {', '.join(CONSTRAINED)}, "
                     f"got {value!r}")


def canonical_lm_class(name: Any) -> str:
    """Map an original class name (or alias) to one of :data:`LM_CLASSES`."""
    name = LM_CLASS_ALIASES.get(name, name)
    if name not in LM_CLASSES:
        valid = ", ".join(LM_CLASSES + tuple(LM_CLASS_ALIASES))
        raise ValueError(f"unknown {PREFIX}.lm_class {name!r}; valid classes: {valid}")
    return name


def _max_num_goals(value: Any) -> int | None:
    if value is None or (isinstance(value, str) and value.lower() == "all"):
        return None
    return _number("max_num_goals", value, minimum=1, integer=True)


def _price(value: Any) -> tuple[float, float] | None:
    if value is None:
        return None
    try:
        price_in, price_out = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{PREFIX}.price must be [input $/1M tokens, output $/1M tokens], "
                         f"got {value!r}") from None
    if not (0 <= price_in < math.inf and 0 <= price_out < math.inf):
        raise ValueError(f"{PREFIX}.price must be non-negative finite numbers, got {value!r}")
    return price_in, price_out


def parse_lm_spec(raw: Mapping[str, Any]) -> LMSpec:
    """Validate an ``env_spec.lm_spec`` mapping into an LMSpec; unknown keys raise (typos)."""
    raw = dict(raw)
    known = {f for f in LMSpec.__dataclass_fields__} | set(SECRET_KEYS) | {"all_goals"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)} in {PREFIX}; valid keys: "
                         f"{', '.join(sorted(known))}")
    d = LMSpec()
    get = raw.get
    model = get("lm", d.lm)
    if not isinstance(model, str) or not model.strip():
        raise ValueError(f"{PREFIX}.lm must be a model name, got {model!r}")
    threshold = _number("prob_threshold", get("prob_threshold", d.prob_threshold))
    if threshold > 1:
        raise ValueError(f"{PREFIX}.prob_threshold must be in [0, 1], got {threshold}")
    return LMSpec(
        lm_class=canonical_lm_class(get("lm_class", d.lm_class)),
        lm=_unicode("lm", model.strip()),
        prompt=str(get("prompt", d.prompt)),
        prompt_file=_optional_str("prompt_file", get("prompt_file")),
        temperature=_number("temperature", get("temperature", d.temperature)),
        max_tokens=_number("max_tokens", get("max_tokens", d.max_tokens), minimum=1, integer=True),
        stop=_optional_str("stop", get("stop", d.stop)),
        budget=_number("budget", get("budget", d.budget)),
        openai_org=_optional_str("openai_org", get("openai_org")),
        max_num_goals=_max_num_goals(get("max_num_goals", "all")),
        dummy_lm=_bool("dummy_lm", get("dummy_lm", d.dummy_lm)),
        prob_threshold=threshold,
        novelty_bonus=_bool("novelty_bonus", get("novelty_bonus", d.novelty_bonus)),
        base_url=_optional_str("base_url", get("base_url")),
        endpoint=_choice("endpoint", get("endpoint", d.endpoint), ENDPOINTS),
        timeout=_number("timeout", get("timeout", d.timeout), minimum=0.001),
        max_retries=_number("max_retries", get("max_retries", d.max_retries), integer=True),
        backoff=_number("backoff", get("backoff", d.backoff)),
        max_backoff=_number("max_backoff", get("max_backoff", d.max_backoff)),
        cache_dir=_optional_str("cache_dir", get("cache_dir")),
        cache_only=_bool("cache_only", get("cache_only", d.cache_only)),
        strict_parsing=_bool("strict_parsing", get("strict_parsing", d.strict_parsing)),
        price=_price(get("price")),
        blocking=_bool("blocking", get("blocking", d.blocking)),
        max_in_flight=_number("max_in_flight", get("max_in_flight", d.max_in_flight),
                              minimum=1, integer=True),
        cache_scope=_choice("cache_scope", get("cache_scope", d.cache_scope), CACHE_SCOPES),
        constrained=_constrained(get("constrained", d.constrained)),
    )


# train.py moves a legacy ``openai_key=`` override here so it never reaches Hydra's logs.
LEGACY_KEY_ENV = "ELLM_LEGACY_OPENAI_KEY"


def adopt_config_key(raw: Mapping[str, Any]) -> bool:
    """A deprecated ``openai_key`` set in a config file goes where train.py puts one given on
    the command line, so that clients built from the parsed spec (which holds no secret) find
    it; True if there was one."""
    key = raw.get("openai_key")
    if not key:
        return False
    os.environ.setdefault(LEGACY_KEY_ENV, str(key))
    return True


def resolve_api_key(raw: Mapping[str, Any], base_url: str | None) -> str | None:
    """The API key for the endpoint, or None. ``OPENAI_API_KEY`` is never sent to another host."""
    env = "OPENAI_API_KEY" if is_openai_endpoint(base_url) else "ELLM_LM_API_KEY"
    key = (os.environ.get(env) or raw.get("openai_key")
           or os.environ.get(LEGACY_KEY_ENV) or None)
    return str(key) if key else None


def redact_lm_spec(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of an ``lm_spec`` mapping with secret entries removed (for saved configs)."""
    return {k: v for k, v in dict(raw).items() if k not in SECRET_KEYS}


def api_url(base_url: str | None) -> str:
    """The endpoint answers come from, spelled one way, without credentials (keys caches, ledgers).
    """
    url = base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_API_URL
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return url.strip().rstrip("/")
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    scheme = parts.scheme.lower()
    if port is not None and (scheme, port) not in (("http", 80), ("https", 443)):
        host = f"{host}:{port}"
    return f"{scheme}://{host}{parts.path.rstrip('/')}"


def default_cache_dir() -> Path:
    """``$ELLM_CACHE_DIR`` if set, else ``~/.cache/ellm`` (never inside the source tree)."""
    env = os.environ.get("ELLM_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ellm"
