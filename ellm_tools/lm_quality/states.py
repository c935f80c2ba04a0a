"""What the LM quality benchmark asks about: Crafter states from random and oracle-guided play,
so that the sample holds what a run meets late as well as early, and Housekeep's yes/no
questions, half of them yes (docs/lm.md, "What a model is worth")."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, Final

import numpy as np

from ellm.games.crafter.goals import text_state
from ellm.games.crafter.oracle import SimpleOracle
from ellm.games.crafter.prompts import state_description
from ellm.games.crafter.state import TextState
from ellm.run.config import RunSpec
from text_crafter.actions import GOOD_ACTIONS, UPSTREAM, action_noun
from text_crafter.captions import material_name, object_name

NIGHT_DAYLIGHT: Final = 0.5  # Crafter darkens the picture below this daylight
POOL_FACTOR: Final = 3  # distinct states collected per state drawn, for each kind of play
# Many short stories rather than a few long ones, within bounds even if the pool is short.
MIN_EPISODES: Final = 2
STATES_PER_EPISODE: Final = 5
MAX_EPISODES: Final = 400
MOVES: Final = {"move left": (-1, 0), "move right": (1, 0), "move up": (0, -1),
                "move down": (0, 1)}
VIEW: Final = (9, 7)  # the local view the caption describes
WALKABLE: Final = frozenset({"grass", "sand", "path"})
NEIGHBOURS_8: Final = tuple((dx, dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1) if dx or dy)
UNREACHABLE: Final = ""
# The guide's preference among the oracle's goals: progress first, then gathering, then needs.
GUIDE_ORDER: Final = (
    "attack zombie", "make iron pickaxe", "place furnace", "make stone pickaxe",
    "make wood pickaxe", "place crafting table", "mine iron", "mine coal",
    "mine stone", "drink water", "attack cow", "chop tree", "eat plant", "sleep",
    "place plant", "mine diamond",
)
ENOUGH: Final = {"chop tree": ("wood", 4), "mine stone": ("stone", 6), "drink water": ("drink", 7),
                 "attack cow": ("food", 7), "mine coal": ("coal", 2)}


@dataclass(frozen=True)
class CrafterSample:
    state: TextState
    night: bool
    play: str  # "random" or "guided"
    episode: int
    step: int

    def sees(self, word: str) -> bool:
        return word in self.state.caption.lower()


def sample_crafter_states(spec: RunSpec, n: int, seed: int,
                          paper_setting: bool) -> tuple[list[CrafterSample], dict[str, int]]:
    """``n`` states, half random play, half guided, distinct as a prompt shows them."""
    rng = np.random.default_rng(seed)
    # Both plays choose actions by name, which Crafter's own 17 actions lack ("do", not "chop
    # tree"); the states they reach are the same game's.
    spec = replace(spec, game_options=replace(spec.game_options, action_space_type="harder"))
    drawn: list[CrafterSample] = []
    taken: set[str] = set()
    info: dict[str, int] = {}
    for offset, (play, count) in enumerate((("random", n - n // 2), ("guided", n // 2))):
        env = spec.game.make_env(spec, seed + offset)
        pool: dict[str, CrafterSample] = {}  # one state per description a suggester reads
        episodes = 0
        enough = max(MIN_EPISODES, count // STATES_PER_EPISODE)
        while (len(pool) < POOL_FACTOR * count or episodes < enough) and episodes < MAX_EPISODES:
            for sample in _episode(env, play, episodes, rng, paper_setting):
                key = state_description(sample.state)
                if key not in taken:
                    pool.setdefault(key, sample)
            episodes += 1
        env.close()
        states = list(pool.values())
        picks = sorted(rng.choice(len(states), size=min(count, len(states)), replace=False))
        drawn += [states[i] for i in picks]
        taken.update(state_description(states[i].state) for i in picks)
        info[f"{play}_episodes"] = episodes
        info[f"{play}_distinct_states"] = len(states)
    return drawn, info


def _episode(env: Any, play: str, episode: int, rng: np.random.Generator,
             paper_setting: bool) -> Iterator[CrafterSample]:
    obs, info = env.reset()
    guide = OracleGuide(env, rng, paper_setting) if play == "guided" else None
    useful = [i for i, name in enumerate(env.action_names) if name in GOOD_ACTIONS]
    step, done = 0, False
    while not done:
        state = text_state(obs, info)
        night = bool(env.world.daylight < NIGHT_DAYLIGHT)
        yield CrafterSample(state, night, play, episode, step)
        action = guide.act(state) if guide else useful[int(rng.integers(len(useful)))]
        obs, _, terminated, truncated, info = env.step(action)
        if guide:
            guide.observe(info)
        step, done = step + 1, terminated or truncated


class OracleGuide:
    """Plays toward the oracle's goals: walks next to what one names, faces it and acts; else
    walks straight a few steps, mostly in the episode's heading, never into lava."""

    EXPLORE: Final = 0.02  # chance of a random walk even with a goal
    HEADING: Final = 0.6  # chance that a walk follows the episode's heading

    def __init__(self, env: Any, rng: np.random.Generator, paper_setting: bool) -> None:
        self.env, self.rng = env, rng
        self.oracle = SimpleOracle(paper_setting=paper_setting, novelty_bonus=False)
        self._walk: list[str] = []
        self._pos: tuple[int, ...] = ()
        self._blocked = 0
        self._furnace = False  # placed one this episode
        self._heading = list(MOVES)[int(rng.integers(len(MOVES)))]

    def act(self, state: TextState) -> int:
        goal = self._choose(state)
        if goal is None or self._walk or self.rng.random() < self.EXPLORE:
            return self._id(self._wander())
        noun = action_noun(goal)
        if goal.startswith("make "):
            move = self._approach("crafting table", around=True)
        elif UPSTREAM[goal][1] is None or noun is None:  # place, sleep: where it stands
            move = None
        else:
            move = self._approach(noun)
        if move == UNREACHABLE:
            return self._id(self._wander())
        return self._id(move or goal)

    def observe(self, info: dict[str, Any]) -> None:
        """After an action that did nothing, or a second move in a row that did not move the
        player (a first may just turn it), a short random walk."""
        pos = tuple(int(v) for v in self.env.player.pos)
        if info["action_name"] in MOVES:
            self._blocked = self._blocked + 1 if pos == self._pos else 0
        else:
            self._blocked = 0
        self._pos = pos
        self._furnace |= info["action_name"] == "place furnace" and info["effective_success"]
        if self._blocked >= 2 or (not info["effective_success"]
                                  and info["action_name"] not in MOVES):
            self._walk = [self._random_move()] * int(self.rng.integers(2, 6))
            self._blocked = 0

    def _choose(self, state: TextState) -> str | None:
        counts = state.inventory_counts
        goals = set(self.oracle.suggest(state))
        for goal in GUIDE_ORDER:
            if goal not in goals:
                continue
            if goal.startswith("make ") and counts.get(goal[5:].replace(" ", "_"), 0) > 0:
                continue
            if goal in ENOUGH and counts.get(ENOUGH[goal][0], 0) >= ENOUGH[goal][1]:
                continue
            if goal == "place furnace" and "furnace" in state.caption:
                continue
            if goal == "make stone pickaxe" and not self._furnace:  # save stone for one first
                continue
            return goal
        return None

    def _approach(self, noun: str, around: bool = False) -> str | None:
        """The first move of a shortest walk in view next to the nearest reachable ``noun``:
        None when there, :data:`UNREACHABLE` when no walk in view gets there."""
        player = self.env.player
        start = (int(player.pos[0]), int(player.pos[1]))
        reach = NEIGHBOURS_8 if around else tuple(MOVES.values())
        first: dict[tuple[int, int], str | None] = {start: None}
        queue = deque([start])
        while queue:
            cell = queue.popleft()
            near = [d for d in reach if self._name((cell[0] + d[0], cell[1] + d[1])) == noun]
            if near:
                if cell != start:
                    return first[cell]
                if around or tuple(player.facing) in near:
                    return None
                return _move_name(near[0])  # turn to face it (it blocks the way)
            for name, (dx, dy) in MOVES.items():
                nxt = (cell[0] + dx, cell[1] + dy)
                if (nxt not in first and abs(nxt[0] - start[0]) <= VIEW[0] // 2
                        and abs(nxt[1] - start[1]) <= VIEW[1] // 2 and self._walkable(nxt)):
                    first[nxt] = first[cell] or name
                    queue.append(nxt)
        return UNREACHABLE

    def _name(self, cell: tuple[int, int]) -> str | None:
        material, obj = self.env.world[cell]
        if obj is not None:
            return object_name(obj)
        return material_name(material) if material else None

    def _walkable(self, cell: tuple[int, int]) -> bool:
        material, obj = self.env.world[cell]
        return obj is None and material in WALKABLE

    def _wander(self) -> str:
        if not self._walk:
            keep = self.rng.random() < self.HEADING and self._safe(MOVES[self._heading])
            move = self._heading if keep else self._random_move()
            self._walk = [move] * int(self.rng.integers(6, 20))
        return self._walk.pop()

    def _random_move(self) -> str:
        safe = [name for name, d in MOVES.items() if self._safe(d)]
        names = safe or list(MOVES)
        return names[int(self.rng.integers(len(names)))]

    def _safe(self, direction: tuple[int, int]) -> bool:
        pos = self.env.player.pos
        return self.env.world[(pos[0] + direction[0], pos[1] + direction[1])][0] != "lava"

    def _id(self, name: str) -> int:
        return self.env.action_names.index(name)


def _move_name(direction: tuple[int, int]) -> str:
    return next(name for name, d in MOVES.items() if d == direction)


@dataclass(frozen=True)
class Question:
    """One Housekeep yes/no question: the pair as the game names it, and the ground truth."""

    object_name: str
    receptacle_name: str
    truth: bool
    view: Any  # the HousekeepView it was asked in (an answerer reads names and indices)
    obj: int
    rec: int
    episode: int


def sample_housekeep_questions(spec: RunSpec, n: int,
                               seed: int) -> tuple[list[Question], dict[str, int]]:
    """``n`` distinct (object, receptacle) questions of the configured scene, half yes."""
    from text_housekeep import episode_count

    own = spec.game_options
    total = episode_count(own.housekeep_task, own.data_dir)
    pool: dict[tuple[str, str], Question] = {}
    episodes = 0
    while episodes < total and (sum(q.truth for q in pool.values()) < n // 2
                                or len(pool) < POOL_FACTOR * n):
        episode = (own.housekeep_ep_num + episodes) % total
        env = spec.game.make_env(replace(spec, game_options=replace(own, housekeep_ep_num=episode)),
                                 seed)
        _, info = env.reset()
        view = info["view"]
        for obj, obj_name in enumerate(view.object_names):
            for rec, rec_name in enumerate(view.receptacle_names):
                pool.setdefault((obj_name, rec_name), Question(
                    obj_name, rec_name, view.is_correct(obj, rec), view, obj, rec, episode))
        env.close()
        episodes += 1
    rng = np.random.default_rng(seed)
    positive = [q for q in pool.values() if q.truth]
    negative = [q for q in pool.values() if not q.truth]
    n_yes = min(len(positive), n // 2)
    n_no = min(len(negative), n - n_yes)
    chosen = [positive[i] for i in sorted(rng.choice(len(positive), n_yes, replace=False))]
    chosen += [negative[i] for i in sorted(rng.choice(len(negative), n_no, replace=False))]
    order = rng.permutation(len(chosen))
    return [chosen[i] for i in order], {"episodes": episodes, "distinct_questions": len(pool),
                                        "distinct_yes": len(positive)}
