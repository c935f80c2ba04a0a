"""``llf-housekeep-v0``: Housekeep as a language-feedback environment (:mod:`text_game.llf`), on
the symbolic backend's high-level actions in words; feedback from the ground truth (docs/llf.md)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import gymnasium as gym

from text_game.llf import (
    NO_OP,
    Feedback,
    Instructions,
    LanguageFeedbackEnv,
    Outcome,
)
from text_game.registration import as_registered
from text_housekeep import DEFAULT_TASK, episode_count, make
from text_housekeep.backend import FAILED, PICK, PLACE
from text_housekeep.symbolic import PLACE_ACTION

_NEVER: Final = 10**9  # the game's own time limit; the contract counts the steps, no-ops included
# (what the step did, was the object's home that receptacle) -> hindsight feedback
_JUDGED: Final = {
    (PICK, True): ("hn", "The {obj} was already where it belongs, on the {rec}."),
    (PICK, False): ("hp", "You picked up the {obj}, which did not belong on the {rec}."),
    (PLACE, True): ("hp", "The {obj} belongs on the {rec}: well placed."),
    (PLACE, False): ("hn", "The {obj} does not belong on the {rec}."),
}


def unique_names(names: Sequence[str]) -> tuple[str, ...]:
    """Repeated names numbered from their second occurrence: a, a 2, b, a 3."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name} {seen[name]}")
    return tuple(out)


def HousekeepLLFEnv(**kwargs: Any) -> gym.Env:  # the name its entry point was registered under
    """``llf-housekeep-v0`` as ``gym.make`` builds it."""
    return as_registered(HousekeepLLF(**kwargs))


class HousekeepLLF(LanguageFeedbackEnv):

    # A step puts at most one object right (+1) or wrong (-1).
    reward_range = (-1.0, 1.0)

    def __init__(self, task: str = DEFAULT_TASK, ep_num: int | None = None,
                 instruction_type: str = "b", feedback_type: Any = "a", length: int = 100,
                 data_dir: str | Path | None = None, visual: bool = False,
                 render_mode: str | None = None):
        super().__init__(instruction_type, feedback_type, length, visual, render_mode)
        self.task = task
        self.data_dir = data_dir
        self.count = episode_count(task, Path(data_dir) if data_dir is not None else None)
        if ep_num is not None and not 0 <= ep_num < self.count:
            raise ValueError(f"ep_num={ep_num!r} is invalid: scene {task} has {self.count} "
                             f"episodes (0..{self.count - 1}), or null for one drawn per reset")
        self.ep_num = ep_num

    def _frame(self) -> Any:
        return self.game.render()

    def _start(self, seed: int | None, options: dict | None):
        ep = self.ep_num if self.ep_num is not None else int(self.np_random.integers(self.count))
        self.game = make(self.task, ep, action_mode="highlevel", length=_NEVER,
                         data_dir=self.data_dir, version=2, render_mode=self.render_mode)
        self.episode = self.game.episode
        self.recs = unique_names(self.game.receptacle_names)
        self.objs = unique_names(self.game.object_names)
        go = [f"go to {r}" for r in self.recs]
        pick = [f"pick {o}" for o in self.objs]
        self.actions = (NO_OP, *go, *pick, PLACE_ACTION)
        backend = list(self.game.action_names)  # go to <key>..., pick <key>..., place
        self._index = dict(zip((*go, *pick, PLACE_ACTION), range(len(backend)), strict=True))
        _, info = self.game.reset()
        self.view = info["view"]
        self._steps = 0
        self._seen: dict[int, None] = dict.fromkeys(self.view.visible_objects)
        self._no_room: set[tuple[int, int]] = set()
        return self._observe(), self._instructions(), {"episode": ep, "scene": self.task}

    def _play(self, action: str) -> Outcome:
        feedback = Feedback()
        reward, success = 0.0, False
        if action != NO_OP:
            held_before = self.view.held
            _, reward, success, _, info = self.game.step(self._index[action])
            self.view = info["view"]
            self._seen.update(dict.fromkeys(self.view.visible_objects))
            if self.view.held is not None:
                self._seen.setdefault(self.view.held)
            self._judge(action, info["event"], held_before, feedback)
        self._steps += 1
        truncated = self._steps >= self.length and not success
        feedback.r = f"You received a reward of {reward:g}." if reward else "You received no reward."
        if success:
            feedback.add("hp", "Every object is where it belongs: the house is tidy.")
        elif not truncated:
            feedback.fp = self._future_positive()
            feedback.fn = self._future_negative()
        out: dict[str, Any] = {"at": self._at_name(), "held": self._held_name()}
        if success or truncated:
            out["episode_stats"] = {**self.game.episode_stats(), "length": self._steps}
        return Outcome(self._observe(), reward, success, truncated, success, feedback, out)

    def _judge(self, action: str, event: Any, held_before: int | None,
               feedback: Feedback) -> None:
        """``hp`` / ``hn`` of what the step did, from the ground truth."""
        if event.kind in (PICK, PLACE):
            kind, text = _JUDGED[event.kind, self._correct(event.obj, event.rec)]
            feedback.add(kind, text.format(obj=self.objs[event.obj], rec=self.recs[event.rec]))
        elif event.kind == FAILED:
            if event.reason == "no room on the receptacle" and held_before is not None:
                self._no_room.add((held_before, event.rec))
            feedback.add("hn", f'"{action}" failed: {event.reason}.')

    def _correct(self, obj: int, rec: int | None) -> bool:
        return rec is not None and rec in self.episode.correct[obj]

    def _at(self) -> int | None:
        return self.game.backend.at

    def _at_name(self) -> str | None:
        return None if self._at() is None else self.recs[self._at()]

    def _held_name(self) -> str | None:
        return None if self.view.held is None else self.objs[self.view.held]

    def _destination(self, obj: int) -> int:
        """A correct receptacle for ``obj`` that has not been found full, the one it is at
        first."""
        correct = sorted(self.episode.correct[obj])
        roomy = [r for r in correct if (obj, r) not in self._no_room] or correct
        return self._at() if self._at() in roomy else roomy[0]

    def _future_positive(self) -> str | None:
        at, held = self._at(), self.view.held
        if held is not None:
            rec = self._destination(held)
            obj = self.objs[held]
            if rec == at:
                return f'The {obj} belongs on the {self.recs[rec]}, where you are: do "place".'
            return (f"The {obj} belongs on the {self.recs[rec]}: "
                    f'"go to {self.recs[rec]}".')
        misplaced = [o for o, r in enumerate(self.view.mapping) if not self._correct(o, r)]
        if not misplaced:
            return None
        obj = next((o for o in misplaced if self.view.mapping[o] == at), misplaced[0])
        rec = self.view.mapping[obj]
        if rec == at:
            return (f"The {self.objs[obj]} here does not belong on the {self.recs[rec]}: "
                    f'"pick {self.objs[obj]}".')
        return (f"The {self.objs[obj]} is on the {self.recs[rec]}, where it does not belong: "
                f'"go to {self.recs[rec]}".')

    def _future_negative(self) -> str | None:
        at, held = self._at(), self.view.held
        if at is None:
            return None
        if held is not None and not self._correct(held, at):
            return (f'Do not "place" the {self.objs[held]} here: it does not belong on the '
                    f"{self.recs[at]}.")
        tidy = [self.objs[o] for o, r in enumerate(self.view.mapping)
                if r == at and self._correct(o, r)]
        if held is None and tidy:
            return f"Do not pick the {', '.join(tidy)}: already where it belongs."
        return None

    def _observe(self) -> str:
        at, held = self._at_name(), self._held_name()
        here = [self.objs[o] for o, r in enumerate(self.view.mapping)
                if r is not None and r == self._at()]
        parts = [f"You are at the {at}." if at else "You are at no receptacle yet."]
        if at:
            parts.append(f"On it: {', '.join(here)}." if here else "Nothing lies on it.")
        parts.append(f"You hold the {held}." if held else "Your hands are empty.")
        seen = [f"{self.objs[o]} on the {self.recs[self.view.mapping[o]]}" for o in self._seen
                if self.view.mapping[o] is not None]
        if seen:
            parts.append(f"Objects seen and where they are: {'; '.join(seen)}.")
        parts.append(f"Steps left: {self.length - self._steps}.")
        return " ".join(parts)

    def _instructions(self) -> Instructions:
        objects = ", ".join(self.objs)
        recs = ", ".join(self.recs)
        actions = ('Each turn, answer with exactly one action: "go to <receptacle>", '
                   '"pick <object>" (from the receptacle you are at), "place" (what you hold, on '
                   f'the receptacle you are at) or "{NO_OP}". Receptacles: {recs}.')
        basic = (f"Tidy this house: the {objects} are out of place. Put each on a receptacle "
                 f"where it belongs and end with empty hands. {actions}")
        truth = [f"{self.objs[o]}: " + " or ".join(self.recs[r] for r in sorted(correct))
                 for o, correct in enumerate(self.episode.correct[:len(self.objs)])]
        half = truth[:(len(truth) + 1) // 2]
        return Instructions(basic, f"{basic} Where some objects belong: {'; '.join(half)}.",
                            f"{basic} Where each object belongs: {'; '.join(truth)}.")
