"""The ProPS tutorial's prompt protocol for policy search (``prompt_style=tutorial``), in our
words or a user's template (docs/optimizers.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from llm_in_the_loop.policy_search.parameters import ParameterBuffer, ParameterSpace

LETTERS: Final = "abcdefghijklmnopqr"
# The tutorial's three placeholders first, then ours.
PLACEHOLDERS: Final = ("episode_reward_buffer_string", "step_number", "search_std",
                       "iterations", "names", "answer_form", "low", "high")
_PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")
TEMPLATE: Final = """\
Help me find the global maximum of a function by proposing its inputs one at a time, within \
{{ iterations }} iterations.

How we proceed:
1. I give you the inputs tried so far, each with the function's value f({{ names }}).
2. You answer in exactly this form:
   * Line 1: the next input, '{{ answer_form }}', chosen to raise f({{ names }}).
   * Line 2: one sentence on why, given the iteration we are at.
3. I tell you the value at your input and the next iteration, and we repeat.

Keep in mind:
* Nothing is known about the form of the function, and its inputs interact.
* Explore broadly at first; as the iterations run out, concentrate on the promising regions.
* Never propose an input already tried; around the best inputs, take smaller steps.
* Explore with steps of about {{ search_std }}.
If the values stall in a local maximum, try distant inputs, then exploit what they show.
Search between {{ low }} and {{ high }}.

The inputs tried so far and their values:
{{ episode_reward_buffer_string }}
This is iteration {{ step_number }}. Answer in the form above and nothing else."""


def check_template(text: str) -> str:
    """``text`` if it is a usable template, else a ValueError saying what is wrong."""
    unknown = sorted(set(_PLACEHOLDER.findall(text)) - set(PLACEHOLDERS))
    if unknown:
        raise ValueError(f"unknown placeholder(s) {unknown}; known: {', '.join(PLACEHOLDERS)}")
    if "episode_reward_buffer_string" not in _PLACEHOLDER.findall(text):
        raise ValueError("no {{ episode_reward_buffer_string }}: the prompt would not show "
                         "the settings tried")
    return text


@dataclass(frozen=True)
class TutorialPrompt:
    """The tutorial's prompt of a run, its ``entries`` most recent settings in the order tried."""

    space: ParameterSpace
    step: float
    iterations: int
    entries: int
    template: str = TEMPLATE

    def __post_init__(self) -> None:
        if self.space.size > len(LETTERS):
            raise ValueError(f"the tutorial's prompt names at most {len(LETTERS)} parameters")
        check_template(self.template)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(LETTERS[:self.space.size])

    def history(self, buffer: ParameterBuffer) -> str:
        function = f"f({','.join(self.names)})"
        return "".join(
            "".join(f"{name}: {value:g}; " for name, value in zip(self.names, e.params))
            + f"{function}: {e.ret:.2f}\n" for e in buffer.entries[-self.entries:])

    def text(self, buffer: ParameterBuffer, iteration: int) -> str:
        """The prompt before proposal ``iteration`` (1, 2, ...); the tutorial counts from 0."""
        values = {"episode_reward_buffer_string": self.history(buffer),
                  "step_number": str(iteration - 1), "search_std": f"{self.step:g}",
                  "iterations": str(self.iterations), "names": ",".join(self.names),
                  "answer_form": ", ".join(f"{n}: " for n in self.names).rstrip(),
                  "low": f"{self.space.low:g}", "high": f"{self.space.high:g}"}
        return _PLACEHOLDER.sub(lambda m: values[m.group(1)], self.template)
