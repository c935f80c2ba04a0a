"""Dollar cost of API calls: USD per 1M tokens (input, output), OpenAI's table of August 2025.

An explicit ``env_spec.lm_spec.price`` always wins over this table.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlparse

PRICES_CHECKED: Final = "2025-08"
PRICES_PER_MTOK: Final[dict[str, tuple[float, float]]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-5-nano": (0.05, 0.40),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5": (1.25, 10.00),
    "o3-mini": (1.10, 4.40),
    "o1-preview": (15.00, 60.00),
    "gpt-3.5-turbo-instruct": (1.50, 2.00),
    "gpt-3.5-turbo": (0.50, 1.50),
    "davinci-002": (2.00, 2.00),
    "babbage-002": (0.40, 0.40),
}
# Models the original ELLM used that OpenAI no longer serves (cached answers still replay).
RETIRED_MODELS: Final = (
    "code-davinci-002", "code-cushman-001", "text-davinci-001", "text-davinci-002",
    "text-davinci-003", "text-curie-001", "text-babbage-001", "text-ada-001",
)
OPENAI_HOST: Final = "api.openai.com"


LOOPBACK_HOSTS: Final = ("localhost", "::1")


def is_openai_endpoint(base_url: str | None) -> bool:
    """True for OpenAI's own API (no ``base_url`` or one on api.openai.com)."""
    return base_url is None or urlparse(base_url).hostname == OPENAI_HOST


def is_loopback_endpoint(base_url: str | None) -> bool:
    """True for a server on this machine (localhost, 127.0.0.0/8, ::1): it costs nothing."""
    if base_url is None:
        return False
    host = urlparse(base_url).hostname or ""
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def table_price(model: str) -> tuple[float, float] | None:
    """Price of ``model`` (dated snapshots match their family); None when unknown."""
    if model in PRICES_PER_MTOK:
        return PRICES_PER_MTOK[model]
    matches = [name for name in PRICES_PER_MTOK if model.startswith(name + "-")]
    return PRICES_PER_MTOK[max(matches, key=len)] if matches else None


def resolve_price(model: str, base_url: str | None,
                  explicit: tuple[float, float] | None = None) -> tuple[float, float]:
    """The (input, output) $/1M-token price of the budget. An unknown model on OpenAI's API raises:
    better stop than run with a budget that cannot be enforced.
    """
    if explicit is not None:
        return explicit
    if is_loopback_endpoint(base_url):
        return (0.0, 0.0)
    price = table_price(model)
    if price is not None:
        return price
    if model in RETIRED_MODELS or not is_openai_endpoint(base_url):
        return (0.0, 0.0)
    raise ValueError(
        f"no price known for model {model!r} on the OpenAI API (table checked {PRICES_CHECKED}: "
        f"{', '.join(PRICES_PER_MTOK)}); set env_spec.lm_spec.price=[input,output] in $ per 1M "
        "tokens so the budget can be enforced")


def cost(price: tuple[float, float], prompt_tokens: int, completion_tokens: int) -> float:
    """Dollars for one call."""
    return (price[0] * prompt_tokens + price[1] * completion_tokens) / 1e6
