"""Prompts for open goal generation and the parser of their answers (ELLM.md §3).

``BulletPrompt`` keeps the original few-shot structure in our own words.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ellm.lm.base import TextState, normalise_goal

PROMPT_NAMES: Final = ("BulletPrompt",)
VALID_VERBS: Final = ("sleep", "eat", "attack", "chop", "drink", "place", "make", "mine")
BULLETS: Final = ("-", "*", "\u2022")
# What one answer may give, constrained or not: goals are a short "verb object" (the longest the
# games name has 20 characters), and every goal an answer gives is embedded at every step that
# shows it (40,000 goals in a 349 KB answer slowed training 200-fold).
MAX_GOALS_PER_ANSWER: Final = 64
MAX_GOAL_CHARS: Final = 100

BULLET_TEMPLATE: Final = (
    f"Valid actions: {', '.join(VALID_VERBS)}.\n"
    "You are playing a survival crafting game. Given what you see and what you carry, "
    "list the best things to do next, one per line, each written as \"- verb object\".\n"
    "\n"
    "You see plant, skeleton, and tree. You are targeting tree. What do you do?\n"
    "- eat plant\n"
    "- chop tree\n"
    "- attack skeleton\n"
    "\n"
    "You see cow, diamond, grass, and water. You are targeting water. "
    "You have in your inventory plant. What do you do?\n"
    "- drink water\n"
    "- chop grass\n"
    "- attack cow\n"
    "- place plant\n"
    "\n"
    "{state} What do you do?\n"
)
CHAT_SYSTEM: Final = ("You suggest actions for a game player. Reply only with lines of the "
                      "form \"- verb object\", nothing else.")


def state_description(state: TextState) -> str:
    """Caption, inventory, and "You feel sleepy." when sleepy (the original names no other need)."""
    parts = [state.caption, state.inventory]
    if "sleepy" in state.status.lower():
        parts.append("You feel sleepy.")
    return " ".join(p.strip() for p in parts if p and p.strip())


@dataclass(frozen=True)
class BulletPrompt:
    """Few-shot bullet prompt; ``template`` has one ``{state}`` placeholder."""

    template: str = BULLET_TEMPLATE

    def __post_init__(self) -> None:
        if self.template.count("{state}") != 1:
            raise ValueError("a prompt template needs exactly one {state} placeholder")

    def text(self, state: TextState) -> str:
        """The completions-endpoint prompt."""
        return self.template.replace("{state}", state_description(state))

    def messages(self, state: TextState) -> list[dict[str, str]]:
        """The chat-endpoint messages: a short system instruction, then the same text."""
        return [{"role": "system", "content": CHAT_SYSTEM},
                {"role": "user", "content": self.text(state)}]


def load_prompt(name: str, prompt_file: str | Path | None = None) -> BulletPrompt:
    """The prompt called ``name``, optionally with a template from ``prompt_file``."""
    if name not in PROMPT_NAMES:
        raise ValueError(f"unknown env_spec.lm_spec.prompt {name!r}; valid prompts: "
                         f"{', '.join(PROMPT_NAMES)}")
    if prompt_file is None:
        return BulletPrompt()
    path = Path(prompt_file).expanduser()
    try:
        template = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ValueError(f"cannot read env_spec.lm_spec.prompt_file {path}: {err}") from err
    try:
        return BulletPrompt(template)
    except ValueError as err:
        raise ValueError(f"bad prompt template {path}: {err}") from err


def parse_bullets(answer: str, strict: bool = False) -> list[str] | None:
    """Goals from the first block of "- verb object" lines; None when there is none.

    A non-bullet line ends the list: small models go on inventing a next example. A goal over
    ``MAX_GOAL_CHARS`` is skipped, and the list ends at ``MAX_GOALS_PER_ANSWER`` goals.
    """
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
