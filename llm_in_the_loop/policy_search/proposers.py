"""Policy search with a language model as the optimiser (after ProPS, Zhou et al., 2025): the
model reads the settings tried so far with their returns and answers the next one; the prompt,
parsing, re-asks and statuses are in docs/optimizers.md."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from llm_in_the_loop.policy_search.parameters import MAX_MAGNITUDE, ParameterBuffer, ParameterSpace
from llm_in_the_loop.policy_search.tutorial_prompt import TutorialPrompt
from lmclient.client import LMClient
from lmclient.constraints import Setting

# What became of a proposal, counted per run (docs/optimizers.md).
STATUSES: Final = ("ok", "clipped", "out_of_range", "unparsable", "no_answer", "warmup",
                    "random")
PROPOSED_STATUSES: Final = ("ok", "clipped", "out_of_range")
FALLBACK_STATUSES: Final = ("unparsable", "no_answer")
SYSTEM: Final = ("You suggest the next parameter values for a black-box optimiser. Reply with "
                 "one line of parameter values and nothing else.")
# A base model reads one worked example first: it measured better than none (docs/optimizers.md).
EXAMPLE: Final = (
    "An example, from another task: 2 parameters (a, b), each between -5 and 5.\n"
    "a=0.00, b=0.00 -> return 1.00\n"
    "a=1.00, b=0.00 -> return 3.00\n"
    "a=2.00, b=-1.00 -> return 4.50\n"
    "Setting: a=3.00, b=-1.50\n"
    "\n")
REASK: Final = "That answer names no setting. Answer again, with one line of the form: {form}"
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


@dataclass(frozen=True)
class Proposal:
    params: tuple[float, ...]
    status: str
    answer: str | None = None  # the model's (last) answer, when there was one
    reasks: int = 0            # answers that named no setting and were asked again

    @property
    def fallback(self) -> bool:
        return self.status in FALLBACK_STATUSES


def parse_proposal(answer: str, space: ParameterSpace, aliases: Sequence[str] = ()
                   ) -> tuple[list[float] | None, str]:
    """The values an answer proposes, read leniently (docs/optimizers.md, "Parsing"), not yet
    clipped, and the status ``ok`` or ``unparsable``."""
    labels = [[rf"(?<![\w.]){re.escape(n)}" for n in names]
              for names in (space.names, aliases) if names]
    labels.append([rf"(?<![\w.])params\[\s*{i}\s*\]" for i in range(space.size)])
    for label in labels:
        matches = [re.search(rf"{name}\s*[:=]\s*({_NUMBER})", answer) for name in label]
        if all(matches):
            return _bounded([float(m.group(1)) for m in matches if m])
    for line in answer.splitlines():
        numbers = re.findall(rf"(?<![\w.]){_NUMBER}", line)
        if len(numbers) == space.size:
            return _bounded([float(n) for n in numbers])
    return None, "unparsable"


def _bounded(values: list[float]) -> tuple[list[float] | None, str]:
    if all(math.isfinite(v) and abs(v) <= MAX_MAGNITUDE for v in values):
        return values, "ok"
    return None, "unparsable"


class RandomProposer:
    """Random search: every setting uniformly at random (the reference)."""

    def __init__(self, space: ParameterSpace, rng: np.random.Generator,
                 warmup: ParameterSpace | None = None) -> None:
        self.space = space
        self.warmup = warmup or space
        self.rng = rng
        self.counts: Counter[str] = Counter()

    def draw(self, status: str) -> Proposal:
        """A random setting, counted under ``status``; the warm-up draws from its own range."""
        self.counts[status] += 1
        space = self.warmup if status == "warmup" else self.space
        return Proposal(tuple(space.sample(self.rng)), status)

    def propose(self, buffer: ParameterBuffer, iteration: int) -> Proposal:
        """The setting to try at proposal ``iteration`` (1, 2, ...) after those in ``buffer``."""
        return self.draw("random")


class LLMProposer(RandomProposer):
    """The language model proposes each setting from the rendered buffer."""

    def __init__(self, client: LMClient, space: ParameterSpace, rng: np.random.Generator, *,
                 task: str, step: float, prompt_entries: int, iterations: int,
                 warmup: ParameterSpace | None = None, tutorial: TutorialPrompt | None = None,
                 reasks: int = 0, clip: bool = True) -> None:
        super().__init__(space, rng, warmup)
        self.clip = clip
        self.client = client
        self.tutorial = tutorial
        self.reasks = reasks
        self.aliases = tutorial.names if tutorial else ()
        self.task = task
        self.step = step
        self.prompt_entries = prompt_entries
        self.iterations = iterations
        # With constraints on, an answer is a number for each parameter (docs/lm.md).
        self.constraint = Setting("setting", names=space.names, low=space.low,
                                  high=space.high, decimals=space.decimals)

    def prompt_text(self, buffer: ParameterBuffer, iteration: int) -> str:
        s = self.space
        shown = len(buffer.shown(self.prompt_entries)) if len(buffer) else 0
        template = ", ".join(f"{name}=<number>" for name in s.names)
        header = (f"It has {s.size} parameters ({', '.join(s.names)}), each between "
                  f"{s.low:g} and {s.high:g}. A higher episode return is better.")
        listed = (f"Settings tried so far and their returns, lowest return first ({shown} of "
                  f"{len(buffer)}):")
        ask = (f"This is proposal {iteration} of {self.iterations}. Propose one new setting "
               f"that may beat the best return so far: change the best settings by about "
               f"{self.step:g} and now and then try a region not tried yet. Do not repeat a "
               "setting listed above.")
        return "\n".join([
            f"We are tuning a policy by trial and error. {self.task}", header, "", listed,
            buffer.render(self.prompt_entries) if len(buffer) else "(none yet)", "", ask,
            f"Answer with one line of the form: {template}",
        ])

    def prompt(self, buffer: ParameterBuffer, iteration: int) -> str | list[dict[str, str]]:
        chat = self.client.spec.endpoint == "chat"
        if self.tutorial is not None:
            text = self.tutorial.text(buffer, iteration)
            return [{"role": "user", "content": text}] if chat else f"{text}\n"
        text = self.prompt_text(buffer, iteration)
        if chat:
            return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
        return f"{EXAMPLE}{text}\nSetting:"

    def reask(self, prompt: str | list[dict[str, str]], answer: str
              ) -> str | list[dict[str, str]]:
        """``prompt``, the unusable ``answer`` and the form: a new prompt, so no cached answer."""
        names = self.aliases or self.space.names
        joiner = ": " if self.tutorial else "="
        note = REASK.format(form=", ".join(f"{n}{joiner}<number>" for n in names))
        if isinstance(prompt, list):
            return [*prompt, {"role": "assistant", "content": answer},
                    {"role": "user", "content": note}]
        return f"{prompt}{answer}\n{note}\n{'' if self.tutorial else 'Setting:'}"

    def propose(self, buffer: ParameterBuffer, iteration: int) -> Proposal:
        prompt = self.prompt(buffer, iteration)
        for asked in range(self.reasks + 1):
            answer = self.client.complete(prompt, self.constraint)
            if answer is None:  # API error after retries, spent budget: counted by the client
                return Proposal(self.draw("no_answer").params, "no_answer", reasks=asked)
            values, parsed = parse_proposal(answer, self.space, self.aliases)
            if values is not None:
                params, parsed = self.space.settle(values, self.clip)
                if params is not None:
                    self.counts[parsed] += 1
                    return Proposal(tuple(params), parsed, answer, asked)
            self.client.count(parse_errors=1)
            prompt = self.reask(prompt, answer)
        return Proposal(self.draw(parsed).params, parsed, answer, self.reasks)
