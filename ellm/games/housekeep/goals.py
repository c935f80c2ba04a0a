"""ELLM on Housekeep (HOUSEKEEP.md §1): closed yes/no LM questions, goals, reward, LM accuracy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ellm.goals import SuggestedGoals
from ellm.lm import LMSpec, build_client, parse_lm_spec
from ellm.lm.base import truncate
from ellm.reward import Scored, StepData
from lmclient.client import LMClient
from lmclient.counters import LMCounters
from text_housekeep import FAILED, PICK, PLACE, HousekeepView, pick_caption, place_caption

YES_NO_PREFIX = (
    "A household robot can pick up objects and place them in or on the furniture of a house. "
    "It tidies up by putting each object where people usually keep it. Answer Yes or No.\n"
    "Should you store a toothbrush in/on the bathroom sink: Yes\n"
    "Should you store a frying pan in/on the bedroom bed: No\n"
    "Should you store a novel in/on the living room shelf: Yes\n"
)
SUGGESTED_REWARD = 2.5
UNSUGGESTED_REWARD = -0.25
FAILED_REWARD = -0.2


def yes_no_prompt(item: str, receptacle: str) -> str:
    """The closed question about one (object name, receptacle name) pair."""
    return f"{YES_NO_PREFIX}Should you store a {item} in/on the {receptacle}:"


class Answerer(Protocol):
    """Answers "should object ``obj`` go on receptacle ``rec``?"; None = no answer."""

    def answer(self, view: HousekeepView, obj: int, rec: int) -> bool | None: ...

    def metrics(self) -> dict[str, float]: ...


class GroundTruthAnswers:
    """``SimpleOracle`` for Housekeep: the episode's correct mapping (its end matrix)."""

    def __init__(self) -> None:
        self.counters = LMCounters()
        self._asked: set[tuple[int, int]] = set()

    def answer(self, view: HousekeepView, obj: int, rec: int) -> bool:
        if (obj, rec) not in self._asked:
            self._asked.add((obj, rec))
            self.counters.queries += 1
        return view.is_correct(obj, rec)

    def metrics(self) -> dict[str, float]:
        return {**self.counters.as_metrics(), "budget_spent": 0.0, "budget_exhausted": 0.0}


class LMAnswers:
    """The LM's yes/no mode, asked once per distinct question per run (a deterministic answer)."""

    def __init__(self, client: LMClient) -> None:
        self.client = client
        self._memo: dict[str, bool] = {}

    def answer(self, view: HousekeepView, obj: int, rec: int) -> bool | None:
        prompt = yes_no_prompt(view.object_names[obj], view.receptacle_names[rec])
        if prompt not in self._memo:
            answer = self.client.is_yes(prompt)
            if answer is None:
                return None
            self._memo[prompt] = answer
        return self._memo[prompt]

    def metrics(self) -> dict[str, float]:
        return self.client.metrics()


@dataclass
class AnswerRecord:
    """One (object, receptacle) pair answered: the answer and the ground truth."""

    answer: bool
    truth: bool


class HousekeepSuggester:
    """Goals for a Housekeep state; ``answerer=None`` is the Novelty baseline (every pair)."""

    uses_success_gate = True

    def __init__(self, answerer: Answerer | None, *, novelty_bonus: bool = True,
                 max_num_goals: int | None = None, per_class: bool = False) -> None:
        self.answerer = answerer
        # per_class: a correct placement retires its whole class (the original's novelty).
        self.per_class = per_class
        self.novelty_bonus = novelty_bonus
        self.max_num_goals = max_num_goals
        self.answers: dict[tuple[int, int], AnswerRecord] = {}
        self._achieved: set[str] = set()
        self._done_objects: set[int | str] = set()
        self._counters = LMCounters()

    def reset(self) -> None:
        self._achieved.clear()
        self._done_objects.clear()

    def suggest(self, view: HousekeepView) -> list[str]:
        goals: list[str] = []
        if view.held is not None:
            obj = view.held
            if self._key(view, obj) not in self._done_objects:
                goals = [place_caption(view.object_names[obj], view.receptacle_names[r])
                         for r in view.seen_receptacles if self._ask(view, obj, r) is True]
        else:
            goals = [pick_caption(view.object_names[o]) for o in view.visible_objects
                     if self._key(view, o) not in self._done_objects
                     and self._ask(view, o, view.mapping[o]) is False]
        goals = [g for g in dict.fromkeys(goals) if g not in self._achieved]
        return truncate(goals, self.max_num_goals)

    def mark_achieved(self, goal: str) -> None:
        if self.novelty_bonus:
            self._achieved.add(goal)

    def mark_object_done(self, view: HousekeepView, obj: int) -> None:
        """A suggested place put ``obj`` away: no more goals about it (or its class) this episode.
        """
        if self.novelty_bonus:
            self._done_objects.add(self._key(view, obj))

    def _key(self, view: HousekeepView, obj: int) -> int | str:
        return view.object_names[obj] if self.per_class else obj

    def metrics(self) -> dict[str, float]:
        if self.answerer is None:
            return {**self._counters.as_metrics(), "budget_spent": 0.0, "budget_exhausted": 0.0}
        return self.answerer.metrics()

    def close(self) -> None:
        """Nothing to release: every yes/no query is answered before it returns."""

    def _ask(self, view: HousekeepView, obj: int, rec: int) -> bool | None:
        """The answer for (obj, rec), None when unanswered; the baseline makes every pair a goal."""
        if self.answerer is None:
            return view.held is not None
        answer = self.answerer.answer(view, obj, rec)
        if answer is not None:
            self.answers[(obj, rec)] = AnswerRecord(answer, view.is_correct(obj, rec))
        return answer


def answer_metrics(records: Sequence[Mapping[tuple[int, int], AnswerRecord]]) -> dict[str, float]:
    """The LM's answers against the ground truth over the distinct pairs in ``records``."""
    merged: dict[tuple[int, int], AnswerRecord] = {}
    for record in records:
        merged.update(record)
    rows = list(merged.values())
    yes = [r for r in rows if r.answer]
    true = [r for r in rows if r.truth]

    def ratio(num: int, den: int) -> float:
        return num / den if den else float("nan")

    return {
        "lm_pairs": float(len(rows)),
        "lm_accuracy": ratio(sum(r.answer == r.truth for r in rows), len(rows)),
        "lm_precision": ratio(sum(r.truth for r in yes), len(yes)),
        "lm_recall": ratio(sum(r.answer for r in true), len(true)),
    }


class HousekeepReward:
    """The reward table of HOUSEKEEP.md §1: (reward, matched goal or None)."""

    def __call__(self, event_kind: str, caption: str, goals: Sequence[str]
                 ) -> tuple[float, str | None]:
        if event_kind == FAILED:
            return FAILED_REWARD, None
        if event_kind in (PICK, PLACE):
            if caption in goals:
                return SUGGESTED_REWARD, caption
            return UNSUGGESTED_REWARD, None
        return 0.0, None


class HousekeepGoals(SuggestedGoals):
    """Housekeep's goal source: the suggester's placements for ``info["view"]``."""

    def __init__(self, suggester: HousekeepSuggester):
        super().__init__(suggester, lambda obs, info: info["view"])

    def observe(self, obs: Mapping[str, Any], info: Mapping[str, Any],
                achieved: Sequence[str] = ()) -> list[str]:
        if achieved and info["event"].kind == PLACE and info["transition_caption"] in achieved:
            # the suggested place just achieved put its object away
            self.suggester.mark_object_done(info["view"], info["event"].obj)
        return super().observe(obs, info, achieved)

    def answering_client(self) -> Any:
        return getattr(self.suggester.answerer, "client", None)


class HousekeepGoalReward:
    """ELLM's reward on Housekeep: the table of HousekeepReward against the goals shown."""

    name = "goal"
    per_step = True

    def __init__(self, reward: HousekeepReward | None = None, paper_setting: bool = False,
                 novelty_bonus: bool = True):
        self.table = reward or HousekeepReward()
        self.novelty_bonus = novelty_bonus
        # paper_setting: as the original, a suggested pick pays only once and retires no goal.
        self.paper_setting = paper_setting
        self.matches = 0
        self._picked: set[int] = set()

    def reset(self) -> None:
        self.matches = 0
        self._picked.clear()

    def step(self, data: StepData) -> Scored:
        info = data.info
        event = info["event"]
        value, matched = self.table(event.kind, info["transition_caption"], data.goals)
        first_pick = event.kind == PICK and event.obj not in self._picked
        if event.kind == PICK:
            self._picked.add(event.obj)
        if matched is None:
            return Scored(value)
        self.matches += 1
        if self.paper_setting and event.kind == PICK:
            return Scored(value if first_pick or not self.novelty_bonus else 0.0)
        return Scored(value, matched)

    def episode_metrics(self) -> dict[str, float]:
        return {"goal_matches": float(self.matches)}


def build_housekeep_suggester(lm_spec: LMSpec | Mapping[str, Any], *,
                              per_class: bool = False) -> HousekeepSuggester:
    """The suggester ``lm_spec.lm_class`` names (a raw mapping's aliases accepted)."""
    spec = lm_spec if isinstance(lm_spec, LMSpec) else parse_lm_spec(lm_spec)
    answerer: Answerer | None
    if spec.lm_class == "SimpleOracle":
        answerer = GroundTruthAnswers()
    elif spec.lm_class == "Novelty":
        answerer = None
    else:
        answerer = LMAnswers(build_client(lm_spec))
    return HousekeepSuggester(answerer, novelty_bonus=spec.novelty_bonus,
                              max_num_goals=spec.max_num_goals, per_class=per_class)
