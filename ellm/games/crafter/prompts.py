"""Crafter's few-shot prompt for open goal generation (ELLM.md §3): the original's structure in
our own words; :mod:`ellm.lm.bullets` reads the answers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ellm.games.crafter.state import TextState

PROMPT_NAMES: Final = ("BulletPrompt",)
VALID_VERBS: Final = ("sleep", "eat", "attack", "chop", "drink", "place", "make", "mine")

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
