"""What an OpenAI-compatible server answered, checked before it is used, counted or cached.

A server can answer anything with HTTP 200, so only well-formed bodies become answers, and a
lying one is charged at least the bounds (docs/lm.md, "Answers the client does not trust").
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

from lmclient.cache import CachedAnswer
from lmclient.spec import api_url

MISSING_LOGPROB: Final = -100.0
MAX_PROMPT_TOKENS: Final = 10_000_000
LOGPROB_SLACK: Final = 1e-3
_SURROGATES: Final = re.compile("[\ud800-\udfff]")


class InvalidAnswer(ValueError):
    """An answer that breaks the protocol; charge ``prompt_tokens`` and ``completion_tokens``."""

    def __init__(self, problem: str, prompt_tokens: int, completion_tokens: int) -> None:
        super().__init__(problem)
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens


class _Bad(ValueError):
    """One part of a body is not what the protocol says."""


def read_answer(body: bytes, *, chat: bool, logprobs: bool, prompt_bound: int,
                max_tokens: int) -> CachedAnswer:
    """The answer in a chat or completions response ``body``; InvalidAnswer for anything else."""
    tokens = (prompt_bound, max_tokens)
    try:
        data = _json_object(body)
        tokens = _usage(data.get("usage"), max_tokens) or tokens
        choice = _first_choice(data)
        text, payload = _text(choice, chat), None
        if logprobs:
            top = _top_logprobs(choice, chat)
            payload = None if top is None else {"top_logprobs": top}
        status = "ok" if payload is not None or text.strip() else "malformed"
    except _Bad as bad:
        raise InvalidAnswer(str(bad), max(tokens[0], prompt_bound), max_tokens) from None
    return CachedAnswer(status, text, payload, *tokens)


def served_models(body: bytes) -> list[tuple[str, str]]:
    """(model name, owner) of each model of a ``GET /models`` body; InvalidAnswer otherwise."""
    try:
        data = _json_object(body).get("data")
        if not isinstance(data, list):
            raise _Bad(f"data is {_show(data)}, not a list")
    except _Bad as bad:
        raise InvalidAnswer(str(bad), 0, 0) from None
    models = []
    for entry in data:
        name = entry.get("id") if isinstance(entry, dict) else None
        if isinstance(name, str) and name and _is_text(name):
            owner = entry.get("owned_by")
            models.append((name, owner if isinstance(owner, str) and _is_text(owner) else ""))
    return models


def prompt_token_bound(prompt: Any) -> int:
    """At least the prompt's token count: a byte-level tokenizer's token holds at least one byte."""
    return len(json.dumps(prompt, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def sendable(prompt: Any) -> Any:
    """``prompt`` with lone surrogates replaced by U+FFFD: no HTTP body can carry them."""
    if isinstance(prompt, str):
        return _SURROGATES.sub("\ufffd", prompt)
    return [{k: sendable(v) if isinstance(v, str) else v for k, v in message.items()}
            for message in prompt]


def yes_probability_from(payload: dict[str, Any]) -> float:
    """Renormalised P(yes) from ``{"top_logprobs": {token: logprob}}``."""
    top: dict[str, float] = payload["top_logprobs"]

    def logprob(word: str) -> float:
        values = [lp for tok, lp in top.items() if tok.strip().lower() == word]
        if not values:
            return MISSING_LOGPROB
        peak = max(values)
        return peak + math.log(sum(math.exp(v - peak) for v in values))

    yes, no = logprob("yes"), logprob("no")
    peak = max(yes, no)
    return math.exp(yes - peak) / (math.exp(yes - peak) + math.exp(no - peak))


def retry_after(headers: Any) -> float:
    """Seconds from Retry-After-Ms / Retry-After (0 when absent or not a number)."""
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                continue
    return 0.0


def failure(error: Exception) -> str:
    """What went wrong with a request, naming its URL; a dropped connection reads as such."""
    request = getattr(error, "request", None)
    url = getattr(request, "url", None)
    if url is None:
        return f"{type(error).__name__}: {error}"
    where = api_url(str(url))
    causes = []
    cause: BaseException | None = error
    while cause is not None and len(causes) < 10:
        causes.append(cause)
        cause = cause.__cause__ or cause.__context__
    last = causes[-1]
    names = {type(c).__name__ for c in causes}
    if "ReadError" in names or any("disconnected" in str(c) for c in causes):
        return f"the server at {where} closed the connection without answering ({last})"
    if type(error).__name__ == "APITimeoutError":
        return f"no answer from {where} in time ({last})"
    if len(causes) > 1:
        return f"{type(error).__name__} at {where}: {last}"
    return f"{type(error).__name__} at {where}: {error}"


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as err:
        raise _Bad(f"the body is not JSON ({_show(body)}: {type(err).__name__})") from None
    if not isinstance(data, dict):
        raise _Bad(f"the body is {_show(data)}, not a JSON object")
    return data


def _usage(usage: Any, max_tokens: int) -> tuple[int, int] | None:
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise _Bad(f"usage is {_show(usage)}, not an object")
    return (_count(usage, "prompt_tokens", MAX_PROMPT_TOKENS),
            _count(usage, "completion_tokens", max_tokens))


def _count(usage: dict[str, Any], name: str, bound: int) -> int:
    value = usage.get(name)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= bound:
        raise _Bad(f"usage.{name} is {_show(value)}, not a token count in [0, {bound}]")
    return value


def _first_choice(data: dict[str, Any]) -> dict[str, Any]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise _Bad(f"choices is {_show(choices)}, not a non-empty list")
    if not isinstance(choices[0], dict):
        raise _Bad(f"choices[0] is {_show(choices[0])}, not an object")
    return choices[0]


def _text(choice: dict[str, Any], chat: bool) -> str:
    """The answer's text; "" for a null ``content`` (a well-formed answer with no text)."""
    if chat:
        message, where = choice.get("message"), "choices[0].message.content"
        if not isinstance(message, dict):
            raise _Bad(f"choices[0].message is {_show(message)}, not an object")
        text = message.get("content")
    else:
        text, where = choice.get("text"), "choices[0].text"
    if text is None:
        return ""
    if not isinstance(text, str) or not _is_text(text):
        raise _Bad(f"{where} is {_show(text)}, not a valid string")
    return text


def _top_logprobs(choice: dict[str, Any], chat: bool) -> dict[str, float] | None:
    """The top logprobs of the first position whose top tokens include "yes" or "no", else the
    first: a constrained JSON answer reaches its word after a few tokens.
    """
    logprobs = choice.get("logprobs")
    if logprobs is None:
        return None
    if not isinstance(logprobs, dict):
        raise _Bad(f"choices[0].logprobs is {_show(logprobs)}, not an object")
    positions = [_position(entry, chat) for entry in _list(logprobs, "content" if chat
                                                           else "top_logprobs")]
    positions = [top for top in positions if top is not None]
    answer = next((top for top in positions
                   if any(t.strip().lower() in ("yes", "no") for t in top)), None)
    return answer or (positions[0] if positions else None)


def _position(entry: Any, chat: bool) -> dict[str, float] | None:
    """One position's top logprobs: a chat ``content`` entry or a completions dict."""
    if chat:
        if not isinstance(entry, dict):
            raise _Bad(f"a logprobs.content entry is {_show(entry)}, not an object")
        entries = entry.get("top_logprobs")
        if entries is None:
            return None
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise _Bad(f"logprobs.content[].top_logprobs is {_show(entries)}, not a list "
                       "of objects")
        pairs = [(e.get("token"), e.get("logprob")) for e in entries]
    else:
        if entry is None:
            return None
        if not isinstance(entry, dict):
            raise _Bad(f"a logprobs.top_logprobs entry is {_show(entry)}, not an object")
        pairs = list(entry.items())
    return {_token(token): _logprob(token, value) for token, value in pairs}


def _list(logprobs: dict[str, Any], name: str) -> list[Any]:
    """``logprobs[name]``; [] when it is null."""
    values = logprobs.get(name)
    if values is None:
        return []
    if not isinstance(values, list):
        raise _Bad(f"logprobs.{name} is {_show(values)}, not a list")
    return values


def _token(token: Any) -> str:
    if not isinstance(token, str):
        raise _Bad(f"a top-logprob token is {_show(token)}, not a string")
    return token


def _logprob(token: str, value: Any) -> float:
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not -math.inf < value <= LOGPROB_SLACK):
        raise _Bad(f"the logprob of {token!r} is {_show(value)}, not a finite number <= 0")
    return float(value)


def _is_text(text: str) -> bool:
    """True unless ``text`` holds lone surrogates (no tokenizer makes them; no file stores them)."""
    return _SURROGATES.search(text) is None


def _show(value: Any) -> str:
    """A short repr: a lying server's megabyte must not fill the log."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
