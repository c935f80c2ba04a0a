"""Trace's OptoPrime on the project's LM client, so its requests are cached, budgeted, retried
and counted like every other LM query (docs/optimizers.md, "Code as policy")."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Final

from lmclient.client import LMClient
from lmclient.constraints import OptoPrimeAnswer

# litellm, which opto imports, would download its price table at import time.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
with contextlib.redirect_stdout(io.StringIO()):  # opto prints its default backend on import
    from opto.optimizers import OptoPrime
    from opto.trace import bundle, node
    from opto.utils.llm import AbstractModel

log = logging.getLogger(__name__)
# What became of an OptoPrime step (docs/optimizers.md).
UPDATED, KEPT, UNPARSABLE, NO_ANSWER = "updated", "kept", "unparsable", "no_answer"
STEP_STATUSES: Final = (UPDATED, KEPT, UNPARSABLE, NO_ANSWER)
UNIT_DOCS: Final = {
    "rollout": "Plays one episode with the policy function that `code` defines and returns its "
               "return, length and whether the task was done.",
    "step": "Plays one step of the episode under way with the policy function that `code` "
            "defines and returns what it did.",
}


class ClientLLM(AbstractModel):
    """opto's LLM interface on an :class:`LMClient`; opto's own backends are never used."""

    def __init__(self, client: LMClient, variables: tuple[str, ...] = (),
                 prefix: str = "") -> None:
        self.client = client
        self.constraint = OptoPrimeAnswer("optoprime", variables=variables, prefix=prefix)
        self.last_answer: str | None = None
        super().__init__(lambda: self._create)

    def _create(self, messages: list[dict[str, str]], **_: Any) -> Any:
        if self.client.spec.endpoint == "chat":
            prompt: Any = messages
        else:  # a base model reads the messages as one text
            prompt = "\n\n".join(m["content"] for m in messages) + "\n"
        self.last_answer = self.client.complete(prompt, self.constraint)
        message = SimpleNamespace(role="assistant", content=self.last_answer or "")
        return SimpleNamespace(choices=[SimpleNamespace(message=message)])


@dataclass(frozen=True)
class StepResult:
    status: str                # one of STEP_STATUSES
    answer: str | None         # the model's answer text


class CodeOptimizer:
    """Policy code as a trainable Trace node, optimised by OptoPrime; ``play`` becomes the traced
    operation ``rollout(code)`` or ``step(code)`` whose output the feedback is about."""

    def __init__(self, client: LMClient, initial_code: str, entry: str, objective: str,
                 play: Callable[[str], str], memory_size: int = 0,
                 unit: str = "rollout") -> None:
        self.entry = entry
        self.code = node(initial_code, name="__code", trainable=True,
                         description=f"[ParameterNode] The code of the policy function {entry}.",
                         constraint=f"The code should define:\ndef {entry}(obs):")

        def traced(code: str) -> str:
            return play(code)

        # The name and docstring OptoPrime's prompt shows for the operation.
        traced.__qualname__ = unit
        traced.__doc__ = UNIT_DOCS[unit]
        self._play = bundle()(traced)
        self.llm = ClientLLM(client, (self.code.py_name,), f"def {entry}(obs):")
        self.optimizer = OptoPrime([self.code], llm=self.llm, objective=objective,
                                   memory_size=memory_size, log=False)

    @property
    def source(self) -> str:
        return str(self.code.data)

    def play(self) -> Any:
        return self._play(self.code)

    def step(self, output: Any, feedback: str) -> StepResult:
        """One OptoPrime step from ``feedback`` on ``output``."""
        before = self.source
        self.llm.last_answer = None
        self.optimizer.zero_feedback()
        self.optimizer.backward(output, feedback)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                self.optimizer.step()
            except Exception as err:  # noqa: BLE001 - opto may choke on any odd answer
                log.warning("OptoPrime could not use the answer (%s: %s); the code is kept",
                            type(err).__name__, err)
        for w in caught:
            log.debug("OptoPrime: %s", w.message)
        answer = self.llm.last_answer
        if self.source != before:
            return StepResult(UPDATED, answer)
        if answer is None:
            return StepResult(NO_ANSWER, None)
        try:
            suggested = self.optimizer.extract_llm_suggestion(answer)
        except Exception:  # noqa: BLE001 - as above: an odd answer is an unusable one
            suggested = {}
        if self.code.py_name in suggested:
            return StepResult(KEPT, answer)
        self.llm.client.count(parse_errors=1)
        return StepResult(UNPARSABLE, answer)
