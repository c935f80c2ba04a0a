"""Open goal generation with a language model (ELLM.md §3, ``GPTLanguageModel``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

from ellm.lm.base import NoveltyFilter, truncate
from ellm.lm.bullets import MAX_GOALS_PER_ANSWER, parse_bullets
from lmclient.client import LMClient, Prompt
from lmclient.constraints import GoalList

# At most this many constrained goals: a small model cannot loop until max_tokens.
MAX_CONSTRAINED_GOALS: Final = 8


class GoalPrompt(Protocol):
    """A game's prompt for a state, for the completions and the chat endpoint."""

    def text(self, state: Any) -> str: ...

    def messages(self, state: Any) -> list[dict[str, str]]: ...


class GPTLanguageModel:
    """Asks the LM for goals with a few-shot bullet prompt and parses its "- verb object" lines."""

    uses_success_gate = True

    def __init__(self, client: LMClient, prompt: GoalPrompt, *,
                 novelty_bonus: bool = True, max_num_goals: int | None = None,
                 synonyms: Mapping[str, str] | None = None,
                 goal_vocabulary: Sequence[str] | None = None) -> None:
        self.client = client
        self.prompt = prompt
        self.novelty = NoveltyFilter(novelty_bonus, synonyms)
        self.max_num_goals = max_num_goals
        self.constraint = None if not goal_vocabulary else GoalList(
            "goals", vocabulary=tuple(goal_vocabulary),
            max_items=min(max_num_goals or MAX_CONSTRAINED_GOALS, MAX_GOALS_PER_ANSWER))

    def __repr__(self) -> str:
        return f"GPTLanguageModel({self.client!r})"

    def reset(self) -> None:
        self.novelty.reset()

    def mark_achieved(self, goal: str) -> None:
        self.novelty.mark(goal)

    def suggest(self, state: Any) -> list[str]:
        goals = self.raw_goals(state)
        return truncate(self.novelty.keep(goals), self.max_num_goals)

    def raw_goals(self, state: Any) -> list[str]:
        """All goals the LM gives for ``state`` (no novelty filter)."""
        answer = self.client.complete(self.request(state), self.constraint)
        if answer is None:
            return []
        return self.parse(answer)

    def request(self, state: Any) -> Prompt:
        """What is sent for ``state``: chat messages or the completion prompt."""
        if self.client.spec.endpoint == "chat":
            return self.prompt.messages(state)
        return self.prompt.text(state)

    def parse(self, answer: str) -> list[str]:
        """The goals of an answer; none (counted as a parse error) when it has no bullet."""
        goals = parse_bullets(answer, strict=self.client.spec.strict_parsing)
        if goals is None:
            self.client.count(parse_errors=1)
            return []
        return goals

    def yes_probability(self, prompt: str) -> float | None:
        return self.client.yes_probability(prompt)

    def is_yes(self, prompt: str) -> bool | None:
        return self.client.is_yes(prompt)

    def metrics(self) -> dict[str, float]:
        return self.client.metrics()

    def close(self) -> None:
        """Nothing to release: every query was answered before it returned."""
