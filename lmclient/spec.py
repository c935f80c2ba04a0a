"""What a client is set up with, and where it connects: the endpoint spelled one way, the cache.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final, Protocol
from urllib.parse import urlsplit

OPENAI_API_URL: Final = "https://api.openai.com/v1"


class ClientSpec(Protocol):
    """The settings a client reads (docs/lm.md names each key): a frozen dataclass, so that a
    client may ask for another ``lm`` with :func:`dataclasses.replace`. It holds no secret."""

    lm: str
    endpoint: str
    base_url: str | None
    temperature: float
    max_tokens: int
    stop: str | None
    prob_threshold: float
    budget: float
    price: tuple[float, float] | None
    openai_org: str | None
    dummy_lm: bool
    cache_only: bool
    cache_scope: str
    constrained: str
    timeout: float
    max_retries: int
    backoff: float
    max_backoff: float


def endpoint_of(base_url: str | None) -> str | None:
    """The base URL requests go to: ``base_url``, else ``$OPENAI_BASE_URL`` (which the
    ``openai`` package would read itself), else None for OpenAI's API. Resolved here once, so
    that the key, the price, the logs and the client all see the same host."""
    return base_url or os.environ.get("OPENAI_BASE_URL") or None


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
