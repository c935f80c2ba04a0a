"""Policies for the language-feedback environments (``llf-crafter-v0``, ``llf-housekeep-v0``):
the LLM as the policy, and two references (docs/llf.md, "The policies")."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from lmclient.client import LMClient
from lmclient.constraints import Choice
from text_game.llf import NO_OP, normalise_action

if TYPE_CHECKING:
    from ellm.games.crafter.state import TextState

SYSTEM: Final = ("You act in a text game. Read the instruction, the recent turns and the current "
                 "observation, then reply with exactly one action from the instruction and "
                 "nothing else.")
_PREFIX = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)]|action\s*:|answer\s*:|>)\s*", re.IGNORECASE)
_QUOTED = re.compile(r'"([^"]+)"')


@dataclass(frozen=True)
class Turn:
    observation: str
    action: str
    feedback: str | None


def parse_action(answer: str, actions: Sequence[str]) -> str | None:
    """The action an answer's first line names, or None (docs/llf.md, "The policies")."""
    line = next((ln for ln in answer.splitlines() if ln.strip()), "")
    line = normalise_action(_PREFIX.sub("", line))
    if line in actions:
        return line
    found = [(m.start(), -len(a), a) for a in actions
             if (m := re.search(rf"(?<![a-z]){re.escape(a)}(?![a-z])", line))]
    return min(found)[2] if found else None


class LLMPolicy:
    """The language model as the policy."""

    def __init__(self, client: LMClient, history: int = 4) -> None:
        if history < 0:
            raise ValueError(f"history={history!r} is invalid: expected an integer >= 0")
        self.client = client
        self.actions: tuple[str, ...] = ()
        self.turns: deque[Turn] = deque(maxlen=history or None)
        self.history = history
        self.instruction = ""
        self._last: tuple[str, str] | None = None
        self.fallbacks = 0
        self.constraint = Choice("action", field="action")

    def reset(self, obs: dict[str, Any], actions: Sequence[str]) -> None:
        self.actions = tuple(actions)
        self.constraint = Choice("action", options=self.actions, field="action")
        self.instruction = obs["instruction"] or ""
        self.turns.clear()
        self._last = None

    def act(self, obs: dict[str, Any]) -> str:
        if self._last is not None and self.history:
            self.turns.append(Turn(*self._last, obs["feedback"]))
        answer = self.client.complete(self.prompt(obs["observation"]), self.constraint)
        action = None
        if answer is not None:  # None: API error, spent budget or cache-only miss (counted)
            action = parse_action(answer, self.actions)
            if action is None:
                self.client.counters.parse_errors += 1
        if action is None:
            self.fallbacks += 1
            action = NO_OP
        self._last = (obs["observation"], action)
        return action

    def prompt_text(self, observation: str) -> str:
        lines = [self.instruction, ""]
        for turn in self.turns:
            lines += [f"Observation: {turn.observation}", f"Action: {turn.action}"]
            if turn.feedback:
                lines.append(f"Feedback: {turn.feedback}")
            lines.append("")
        lines += [f"Observation: {observation}", "Action:"]
        return "\n".join(lines)

    def prompt(self, observation: str) -> str | list[dict[str, str]]:
        text = self.prompt_text(observation)
        if self.client.spec.endpoint == "chat":
            return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
        return text

    def metrics(self) -> dict[str, float]:
        return {**self.client.metrics(), "fallbacks": float(self.fallbacks)}


def _crafter_state(observation: str) -> TextState:
    """The text state SimpleOracle reads, from a ``llf-crafter-v0`` observation."""
    from ellm.games.crafter.state import TextState

    caption = " ".join(re.findall(r"You (?:see|are targeting) [^.]*\.", observation))
    counts: dict[str, int] = {}
    held = re.search(r"Inventory: ([^.]*)\.", observation)
    for item in (held.group(1).split(", ") if held and held.group(1) != "empty" else []):
        n, _, name = item.partition(" ")
        counts[name.replace(" ", "_")] = int(n)
    status = "You feel sleepy." if re.search(r"energy [0-8]/9", observation) else ""
    return TextState(caption, status=status, inventory_counts=counts)


class ScriptedPolicy:
    """Follows the ``fp`` feedback: what perfect feedback-following scores."""

    def __init__(self, fallback: Callable[[str], str | None] | None = None) -> None:
        # Crafter's oracle is its game plug-in's, which loads the method's games: only here.
        from ellm.games.crafter.oracle import SimpleOracle

        self.actions: tuple[str, ...] = ()
        self.oracle = SimpleOracle(paper_setting=False, novelty_bonus=False)
        self.fallback = fallback or self._oracle_goal
        self.followed = self.fallbacks = 0

    def reset(self, obs: dict[str, Any], actions: Sequence[str]) -> None:
        self.actions = tuple(actions)

    def act(self, obs: dict[str, Any]) -> str:
        advised = [a for a in _QUOTED.findall(obs["feedback"] or "")
                   if normalise_action(a) in self.actions]
        if advised:
            self.followed += 1
            return normalise_action(advised[-1])
        self.fallbacks += 1
        return self.fallback(obs["observation"]) or NO_OP

    def _oracle_goal(self, observation: str) -> str | None:
        goals = self.oracle.suggest(_crafter_state(observation))
        return next((g for g in goals if g in self.actions), None)

    def metrics(self) -> dict[str, float]:
        return {"followed": float(self.followed), "fallbacks": float(self.fallbacks)}


class RandomPolicy:

    def __init__(self, seed: int) -> None:
        self.actions: tuple[str, ...] = ()
        self.rng = np.random.default_rng(seed)

    def reset(self, obs: dict[str, Any], actions: Sequence[str]) -> None:
        self.actions = tuple(actions)

    def act(self, obs: dict[str, Any]) -> str:
        return self.actions[int(self.rng.integers(len(self.actions)))]

    def metrics(self) -> dict[str, float]:
        return {}
