"""The answer an LLM suggester reads: goals as a list of "- verb object" lines (ELLM.md §3)."""

from __future__ import annotations

from typing import Final

from ellm.lm.base import normalise_goal

BULLETS: Final = ("-", "*", "\u2022")
# Goals are a short "verb object" (the games' longest: 20 characters), and each is embedded at
# every step that shows it (40,000 goals in a 349 KB answer slowed training 200-fold).
MAX_GOALS_PER_ANSWER: Final = 64
MAX_GOAL_CHARS: Final = 100


def parse_bullets(answer: str, strict: bool = False) -> list[str] | None:
    """Goals from the first block of "- verb object" lines, None when there is none (a non-bullet
    line ends it: small models go on inventing a next example)."""
    if strict and any(line.strip() and not line.strip().startswith("-")
                      for line in answer.splitlines()):
        return None
    goals: dict[str, None] = {}  # ordered, without repeats
    for line in answer.splitlines():
        line = line.strip()
        if line[:1] in BULLETS:
            goal = normalise_goal(line[1:])
            if goal and len(goal) <= MAX_GOAL_CHARS:
                goals[goal] = None
                if len(goals) == MAX_GOALS_PER_ANSWER:
                    break
        elif line and goals:
            break
    return list(goals) or None
