"""The OpenAI-compatible client: cache first, then a budgeted, bounded-retry API call.

The API key is kept only to mask it in errors: never in a repr, a log, the cache or a config.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from lmclient.answers import (
    InvalidAnswer,
    failure,
    prompt_token_bound,
    read_answer,
    retry_after,
    sendable,
    yes_probability_from,
)
from lmclient.budget import ledger_for
from lmclient.cache import (
    ANY_ENDPOINT,
    AnswerCache,
    CachedAnswer,
    CacheError,
    make_key,
    sampling_params,
)
from lmclient.constraints import YES_NO, Constraint, yes_no_word
from lmclient.counters import LMCounters
from lmclient.dialects import (
    chat_messages,
    is_reasoning_model,
    names_constraint,
    request_fields,
    sampling_fields,
)
from lmclient.pricing import cost, is_loopback_endpoint, is_openai_endpoint, resolve_price
from lmclient.setup import (
    adopt_served_model,
    check_retired_model,
    constraining,
    list_models,
    make_openai,
)
from lmclient.spec import ClientSpec, api_url

log = logging.getLogger("ellm.lm")
# One INFO line per HTTP request would bury the console; the lm/ metrics count them.
for _noisy in ("httpx", "httpx2", "httpcore", "openai"):
    logging.getLogger(_noisy).setLevel(logging.WARNING)

_said: set[str] = set()


def log_once(level: int, message: str, *args: Any) -> None:
    """Log ``message % args`` once per process (training and evaluation share a client set-up)."""
    text = message % args
    if text not in _said:
        _said.add(text)
        log.log(level, "%s", text)


DUMMY_ANSWER: Final = "- chop tree\n- drink water\n- attack cow\n- place crafting table\n"
DUMMY_YES_PROBABILITY: Final = 1.0
TOP_LOGPROBS: Final = 5
YES_NO_TOKENS: Final = 8
RETRYABLE_STATUS: Final = (408, 409, 429)
FATAL_STATUS: Final = (401, 403, 404)
# The largest answer body read, capped whatever max_tokens says.
BODY_BYTES_BASE: Final = 64 * 1024
BODY_BYTES_PER_TOKEN: Final = 2 * 1024
BODY_BYTES_CAP: Final = 8 * 1024 * 1024
Prompt = str | list[dict[str, str]]


def body_limit(max_tokens: int) -> int:
    """The most bytes an answer of ``max_tokens`` tokens may take (see the constants)."""
    return min(BODY_BYTES_CAP, BODY_BYTES_BASE + BODY_BYTES_PER_TOKEN * max(1, int(max_tokens)))


class RequestTimeout(Exception):
    """No whole answer within the request's deadline (connect, send and the whole body)."""


class AnswerTooLarge(Exception):
    """The answer's body grew past :func:`body_limit`: refused while it streamed."""


class LMConfigError(RuntimeError):
    """The API refused the configuration itself (bad key, no access, unknown model)."""


class ConstraintRefused(RuntimeError):
    """The server refused a request's constraint field; the request is to be asked free."""


class LMClient:
    """Cached, budgeted access to one model on one endpoint (see docs/lm.md)."""

    def __init__(self, spec: ClientSpec, *, api_key: str | None, cache: AnswerCache | None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.spec = spec
        self.cache = cache
        self.counters = LMCounters()
        self._count_lock = threading.Lock()
        self._sleep = sleep
        self.ledger = ledger_for(spec.base_url)
        self.scope = ANY_ENDPOINT if spec.cache_scope == "model" else api_url(spec.base_url)
        self._rng = random.Random(0)
        self._secret = api_key or ""
        self.cache_only = check_retired_model(spec, cache, self.scope, spec.cache_only)
        self._openai = None if self.offline else make_openai(spec, api_key)
        served: list[tuple[str, str]] = []
        if self._openai is not None and not is_openai_endpoint(spec.base_url):
            served = list_models(self._openai, spec, self._scrub)
            self.spec = adopt_served_model(spec, [name for name, _ in served], log_once)
        self.constraining = constraining(self.spec, [owner for _, owner in served],
                                         self.offline)
        self.refused = False
        if spec.constrained != "false":
            log_once(logging.INFO, "constrained answers (env_spec.lm_spec.constrained=%s) at "
                     "%s: %s", spec.constrained, spec.base_url or "OpenAI",
                     self.constraining.describe())
        if (not self.offline and spec.endpoint == "chat" and is_reasoning_model(self.spec.lm)
                and spec.temperature != 1.0):
            # Such a model samples at temperature 1 only: running at another would be a lie.
            raise ValueError(f"model {self.spec.lm!r} samples at temperature 1 only; set "
                             f"env_spec.lm_spec.temperature=1 (it is {spec.temperature:g})")
        self.price = (0.0, 0.0) if self.offline else resolve_price(
            self.spec.lm, spec.base_url, spec.price)
        if (not self.offline and spec.price is None and self.price == (0.0, 0.0)
                and not is_loopback_endpoint(spec.base_url)):
            # A remote server we hold no price for costs $0 to the budget: the run must say so.
            log_once(logging.WARNING, "no price known for model %r at %s: its calls count as "
                     "$0, so env_spec.lm_spec.budget does not limit them; set "
                     "env_spec.lm_spec.price=[input,output] ($ per 1M tokens) to enforce it",
                     self.spec.lm, spec.base_url or "OpenAI")

    @property
    def offline(self) -> bool:
        """True when no API call can ever be made (dummy answers or cache-only replay)."""
        return self.spec.dummy_lm or self.cache_only

    @property
    def budget_exhausted(self) -> bool:
        """True once this process has spent ``budget`` dollars on this client's endpoint."""
        return self.ledger.dollars >= self.spec.budget

    @property
    def constrained(self) -> bool:
        """True while requests carry their constraint (on, and not refused by the server)."""
        return self.constraining.on and not self.refused

    def __repr__(self) -> str:
        return (f"LMClient(model={self.spec.lm!r}, endpoint={self.spec.endpoint!r}, "
                f"base_url={self.spec.base_url!r}, scope={self.scope!r}, cache={self.cache!r}, "
                f"cache_only={self.cache_only}, dummy={self.spec.dummy_lm}, "
                f"constrained={self.constraining.describe()})")

    def metrics(self) -> dict[str, float]:
        with self._count_lock:
            out = self.counters.as_metrics()
        out["budget_spent"] = self.ledger.dollars
        out["budget_exhausted"] = float(self.budget_exhausted)
        return out

    def complete(self, prompt: Prompt, constraint: Constraint | None = None) -> str | None:
        """The model's answer to ``prompt``; None when no answer could be had."""
        self.count(queries=1)
        if self.spec.dummy_lm:
            return DUMMY_ANSWER
        answer, params = self._answer(prompt, self.text_params(constraint))
        return None if answer is None else self.checked(answer.text, constraint, params)

    def yes_probability(self, prompt: str) -> float | None:
        """Renormalised P(yes) = e^y / (e^y + e^n) from the top logprobs (ELLM.md / HOUSEKEEP §1).
        """
        self.count(queries=1)
        if self.spec.dummy_lm:
            return DUMMY_YES_PROBABILITY
        chat = self.spec.endpoint == "chat"
        request: Prompt = [{"role": "user", "content": prompt}] if chat else prompt
        constraint = YES_NO if self.constrained else None
        params = sampling_params(max_tokens=YES_NO_TOKENS if constraint else 1,
                                 temperature=self.spec.temperature, logprobs=TOP_LOGPROBS,
                                 constraint=constraint and constraint.key())
        answer, params = self._answer(request, params)
        if answer is None:
            return None
        if answer.payload is not None:
            return yes_probability_from(answer.payload)
        word = None
        if "constraint" in params:
            word = yes_no_word(self.checked(answer.text, YES_NO, params))
        if word is None:
            self.count(parse_errors=1)
            return None
        return 1.0 if word == "Yes" else 0.0

    def is_yes(self, prompt: str) -> bool | None:
        """P(yes) > ``prob_threshold`` (HOUSEKEEP.md §1); None when no answer could be had."""
        probability = self.yes_probability(prompt)
        return None if probability is None else probability > self.spec.prob_threshold

    # The steps of a query, also used one by one by the non-blocking mode.
    def _answer(self, prompt: Prompt, params: dict[str, Any]
                ) -> tuple[CachedAnswer | None, dict[str, Any]]:
        """The answer and the parameters it was asked with (less a constraint the server refused).
        """
        key = self.request_key(prompt, params)
        cached = self.lookup(key)
        if cached is not None or self.cache_only or not self.may_send():
            return cached, params
        try:
            return self.fetch(key, prompt, params), params
        except ConstraintRefused:
            return self._answer(prompt, {k: v for k, v in params.items() if k != "constraint"})

    def text_params(self, constraint: Constraint | None = None) -> dict[str, Any]:
        """Sampling parameters of a text query; with its constraint while constraints are on."""
        return sampling_params(max_tokens=self.spec.max_tokens,
                               temperature=self.spec.temperature, stop=self.spec.stop,
                               constraint=constraint.key() if constraint and self.constrained
                               else None)

    def checked(self, text: str, constraint: Constraint | None, params: dict[str, Any]) -> str:
        """The text form of an answer, read through its constraint when it was asked with one."""
        if constraint is None or "constraint" not in params:
            return text
        read = constraint.read(text)
        if read is None:
            self.count(constraint_violations=1)
            return text
        return read

    def request_key(self, prompt: Prompt, params: dict[str, Any]) -> str:
        """The cache key of ``prompt`` with ``params`` (endpoint-scoped unless cache_scope=model).
        """
        return make_key(self.spec.endpoint, self.spec.lm, prompt, params, scope=self.scope)

    def lookup(self, key: str) -> CachedAnswer | None:
        """The cached answer of ``key`` or None."""
        cached = None
        if self.cache is not None:
            try:
                cached = self.cache.get(key)
            except CacheError as err:
                log_once(logging.WARNING, "%s: answering as if it were not cached", err)
        if cached is not None:
            self.count(cache_hits=1)
        elif self.cache is not None or self.cache_only:
            self.count(cache_misses=1)
        return cached

    def may_send(self) -> bool:
        """False, counted as a budget refusal, when the budget is spent."""
        if not self.budget_exhausted:
            return True
        self.count(budget_refusals=1)
        if not self.ledger.warned:
            self.ledger.warned = True
            log.warning("LM budget of $%.2f spent ($%.4f at %s): no more API calls this run; "
                        "cached answers are still served", self.spec.budget,
                        self.ledger.dollars, self.spec.base_url or "OpenAI")
        return False

    def fetch(self, key: str, prompt: Prompt, params: dict[str, Any],
              stop: threading.Event | None = None) -> CachedAnswer | None:
        """Ask the API, charge the usage and cache the answer; a breach is charged the most."""
        body = self._call_with_retries(prompt, params, stop)
        if body is None:
            return None
        try:
            answer = read_answer(body, chat=self.spec.endpoint == "chat",
                                 logprobs="logprobs" in params, max_tokens=params["max_tokens"],
                                 prompt_bound=prompt_token_bound(prompt))
        except InvalidAnswer as bad:
            self._charge(bad.prompt_tokens, bad.completion_tokens)
            self._error(f"the answer of {api_url(self.spec.base_url)} breaks the OpenAI "
                        f"protocol, so it is neither used nor cached: {bad}")
            return None
        self._charge(answer.prompt_tokens, answer.completion_tokens)
        if self.cache is None:
            return answer
        try:
            return self.cache.put(key, kind=self.spec.endpoint, model=self.spec.lm,
                                  prompt=prompt, params=params, answer=answer, scope=self.scope)
        except CacheError as err:
            log_once(logging.WARNING, "%s: answers are used but not cached", err)
            return answer

    def count(self, **increments: float) -> None:
        """Add to the named counters (thread-safe)."""
        with self._count_lock:
            for name, value in increments.items():
                setattr(self.counters, name, getattr(self.counters, name) + value)

    def _call_with_retries(self, prompt: Prompt, params: dict[str, Any],
                           stop: threading.Event | None = None) -> bytes | None:
        """One request with bounded retries and capped backoff; None when it still fails."""
        import openai

        attempts = self.spec.max_retries + 1
        for attempt in range(attempts):
            if attempt and stop is not None and stop.is_set():
                attempts = attempt
                break
            self.count(api_calls=1, retries=1 if attempt else 0)
            start = time.monotonic()
            try:
                return self._request(prompt, params)
            except openai.APIStatusError as err:
                if "constraint" in params and self._refuses(err):
                    raise ConstraintRefused(str(err)) from None
                if err.status_code in FATAL_STATUS:
                    raise LMConfigError(self._scrub(
                        f"the LM endpoint refused the request (HTTP {err.status_code}) for "
                        f"model {self.spec.lm!r} at {self.spec.base_url or 'OpenAI'}: {err}"
                    )) from None
                if not (err.status_code in RETRYABLE_STATUS or err.status_code >= 500):
                    self._error(f"HTTP {err.status_code}, not retried: {err}")
                    return None
                error: Exception = err
            except (openai.APIConnectionError, RequestTimeout) as err:
                error = err
            except AnswerTooLarge as err:
                self._error(f"{err}; not used, not cached, not retried")
                return None
            finally:
                self.count(latency_s=time.monotonic() - start)
            if attempt + 1 < attempts:
                if stop is None:
                    self._sleep(self._delay(attempt, error))
                else:
                    stop.wait(self._delay(attempt, error))
        self._error(f"giving up after {attempts} attempt(s): {failure(error)}")
        return None

    def _refuses(self, err: Exception) -> bool:
        """Whether ``err`` refuses the constraint field; if so, constraints are off for the run."""
        status = getattr(err, "status_code", 0)
        if status in FATAL_STATUS or status in RETRYABLE_STATUS or not names_constraint(
                str(err)):
            return False
        with self._count_lock:
            first, self.refused = not self.refused, True
        if first:
            self.count(constraint_refused=1)
            log_once(logging.WARNING, "%s refused the constrained answer format (%s, HTTP %d: "
                     "%s): answers are asked free and parsed leniently for the rest of the run "
                     "(lm/constraint_refused)", self.spec.base_url or "OpenAI",
                     self.constraining.dialect, status, self._scrub(str(err))[:300])
        return True

    def _delay(self, attempt: int, error: Exception) -> float:
        delay = self.spec.backoff * 2 ** attempt * (0.5 + 0.5 * self._rng.random())
        response = getattr(error, "response", None)
        if response is not None:
            delay = max(delay, retry_after(response.headers))
        return min(delay, self.spec.max_backoff)

    def _request(self, prompt: Prompt, params: dict[str, Any]) -> bytes:
        """The body of a successful (2xx) answer, unread: :func:`read_answer` checks it."""
        if self._openai is None:
            raise RuntimeError("LMClient: API request attempted in offline mode")
        chat = self.spec.endpoint == "chat"
        kwargs: dict[str, Any] = {"model": self.spec.lm, **sampling_fields(
            self.spec.lm, chat, params["max_tokens"], params["temperature"], params.get("stop"))}
        if "constraint" in params:
            kwargs.update(request_fields(params["constraint"], self.constraining.dialect or
                                         "openai", self.constraining.version))
            self.count(constrained_requests=1)
        if chat:
            if "logprobs" in params:
                kwargs.update(logprobs=True, top_logprobs=params["logprobs"])
            api = self._openai.chat.completions
            kwargs["messages"] = chat_messages(self.spec.lm, sendable(prompt))
        else:
            if "logprobs" in params:
                kwargs["logprobs"] = params["logprobs"]
            api, kwargs["prompt"] = self._openai.completions, sendable(prompt)
        return self._bounded(lambda: api.with_streaming_response.create(**kwargs),
                             body_limit(params["max_tokens"]))

    def _bounded(self, open_stream: Callable[[], Any], limit: int) -> bytes:
        """A streamed body read in its own thread, so one deadline bounds the whole request."""
        done, cancelled = threading.Event(), threading.Event()
        out: dict[str, Any] = {}

        def read() -> None:
            try:
                with open_stream() as response:
                    chunks, size = [], 0
                    for chunk in response.iter_bytes():
                        size += len(chunk)
                        if cancelled.is_set():
                            return
                        if size > limit:
                            raise AnswerTooLarge(
                                f"the answer of {api_url(self.spec.base_url)} is over "
                                f"{limit:,} bytes (the bound for max_tokens)")
                        chunks.append(chunk)
                    out["body"] = b"".join(chunks)
            except BaseException as err:  # noqa: BLE001 - raised again in the caller's thread
                out["error"] = err
            finally:
                done.set()

        threading.Thread(target=read, name="ellm-lm-request", daemon=True).start()
        if not done.wait(self.spec.timeout):
            cancelled.set()
            raise RequestTimeout(f"no whole answer from {api_url(self.spec.base_url)} within "
                                 f"{self.spec.timeout:g} s (env_spec.lm_spec.timeout)")
        if "error" in out:
            raise out["error"]
        return out["body"]

    def _charge(self, prompt_tokens: int, completion_tokens: int) -> None:
        """Count checked token counts (finite, >= 0) and their price into the budget."""
        dollars = cost(self.price, prompt_tokens, completion_tokens)
        self.count(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                   dollars=dollars)
        self.ledger.charge(dollars)

    def _error(self, message: str) -> None:
        with self._count_lock:
            self.counters.api_errors += 1
            n = self.counters.api_errors
        if n & (n - 1) == 0:
            log.warning("LM API error #%d (model %s): %s", n, self.spec.lm, self._scrub(message))

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text
