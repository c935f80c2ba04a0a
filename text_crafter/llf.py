"""``llf-crafter-v0``: Crafter as a language-feedback environment (LLF-Bench's interface,
:mod:`text_game.llf`); tasks, observation, reward and feedback are in docs/llf.md."""

from __future__ import annotations

from typing import Any, Final

import gymnasium as gym
from crafter import constants

from text_crafter import actions as acts
from text_crafter import captions
from text_crafter.env import CrafterTextEnv
from text_crafter.guide import Advice, Guide, article, offset_words, thing_at
from text_crafter.stats import ACHIEVEMENTS
from text_crafter.tasks import SINGLE_TASKS, TASK_CHAINS, task_chain
from text_game.llf import (
    NO_OP,
    Feedback,
    Instructions,
    LanguageFeedbackEnv,
    Outcome,
)
from text_game.registration import as_registered

OPEN_TASK: Final = "unlock as many achievements as you can"
# Custom tasks in words, and whether each is judged by its chain done in order.
TASK_WORDS: Final = {
    "plant row": "plant a sapling right next to another plant",
    "make workshop": "place a crafting table right next to another crafting table",
    "chop grass with wood pickaxe": "chop grass while carrying a wood pickaxe",
    "survival": "stay alive until the episode ends",
    "vegetarianism": "drink water, then chop grass",
    "deforestation": "chop five trees",
    "work and sleep": "chop a tree, then sleep, then place a crafting table",
    "gardening": "chop grass, then chop a tree, then place a plant",
    "wilderness survival": "sleep, then chop grass, then attack a zombie",
}
_IN_ORDER: Final = ("vegetarianism", "deforestation", "work and sleep", "gardening",
                    "wilderness survival")
# The open task's order of achievements (roughly the tech tree), and the action of each.
CURRICULUM: Final = {
    "collect_wood": "chop tree", "place_table": "place crafting table",
    "make_wood_pickaxe": "make wood pickaxe", "make_wood_sword": "make wood sword",
    "collect_drink": "drink water", "eat_cow": "attack cow", "collect_sapling": "chop grass",
    "place_plant": "place plant", "collect_stone": "mine stone", "place_stone": "place stone",
    "make_stone_pickaxe": "make stone pickaxe", "make_stone_sword": "make stone sword",
    "collect_coal": "mine coal", "place_furnace": "place furnace", "defeat_zombie":
    "attack zombie", "defeat_skeleton": "attack skeleton", "wake_up": "sleep",
    "eat_plant": "eat plant", "collect_iron": "mine iron", "make_iron_pickaxe":
    "make iron pickaxe", "make_iron_sword": "make iron sword", "collect_diamond": "mine diamond",
}
LOW: Final = 3  # food, drink or energy at or below this is worth a warning
_DANGER: Final = {"zombie": 3, "skeleton": 4, "lava": 2}  # warn within this many steps


def task_words(task: str | None) -> str:
    if task is None:
        return OPEN_TASK
    return TASK_WORDS.get(task, f'"{task}"')


def CrafterLLFEnv(**kwargs: Any) -> gym.Env:  # the name its entry point was registered under
    return as_registered(CrafterLLF(**kwargs))


class CrafterLLF(LanguageFeedbackEnv):
    """Other keyword arguments go to :class:`CrafterTextEnv`."""

    def __init__(self, task: str | None = None, instruction_type: str = "b",
                 feedback_type: Any = "a", version: int = 2, length: int = 400,
                 dying: bool = True, seed: int | None = None, visual: bool = False,
                 render_mode: str | None = None, **kwargs: Any):
        super().__init__(instruction_type, feedback_type, length, visual, render_mode)
        if task is not None and task not in SINGLE_TASKS:
            raise ValueError(f"task={task!r} is invalid: expected null (unlock as many "
                             f"achievements as you can) or one of {', '.join(SINGLE_TASKS)}")
        self.task = task
        # A task pays 1 once; the open task 1 per achievement first unlocked.
        self.reward_range = (0.0, 1.0 if task is not None else float(len(ACHIEVEMENTS)))
        self.game = CrafterTextEnv(version=version, action_space_type="harder", length=length,
                                   dying=dying, seed=seed, render_mode=render_mode, **kwargs)
        self.version = version
        self.actions = tuple(self.game.action_names)  # "do nothing" is the first

    @property
    def world(self) -> Any:
        return self.game.world

    @property
    def player(self) -> Any:
        return self.game.player

    def _frame(self) -> Any:
        return self.game.render()

    def _start(self, seed: int | None, options: dict | None):
        self.game.reset(seed=seed)
        self.guide = Guide(self.game, self.np_random)
        self._chain_index = 0
        self._done = False
        return self._observe(), self._instructions(), {"task": self.task or OPEN_TASK}

    def _play(self, action: str) -> Outcome:
        before = self.player.inventory.copy()
        facing = thing_at(self.world, _ahead(self.player))
        health = before["health"]
        _, _, _, _, info = self.game.step(self.actions.index(action))
        feedback = Feedback()
        progress = self._progress(action, info, before)
        newly = info["unlocked"]
        reward = float(len(newly)) if self.task is None else float(progress == "done")
        if self.task is None and len(self.game._unlocked) == len(ACHIEVEMENTS):
            progress = "done"
        timeout = self.game._engine._step >= self.length
        dead = bool(info["dead"])
        if self.task == "survival" and timeout and not dead:
            progress, reward = "done", 1.0
        self._done = self._done or progress == "done"
        terminated = self._done or (dead and self.game.dying)
        truncated = timeout and not terminated
        feedback.r = (f"You received a reward of {reward:g}." if reward
                      else "You received no reward.")
        feedback.add("hp", self._hindsight_positive(action, info, before, newly, progress))
        feedback.add("hn", self._hindsight_negative(action, info, before, facing))
        if self.player.health < health:
            lost = health - self.player.health
            feedback.add("hn", f"You lost {lost} health (now {self.player.health}/9)"
                         f"{self._hurt_by()}.")
        if not (terminated or truncated):
            feedback.fp = self._future_positive()
            feedback.fn = self._future_negative()
        out = {"achievements": info["achievements"], "inventory": info["inventory"],
               "unlocked": newly, "task": self.task or OPEN_TASK}
        if terminated or truncated:
            out["episode_stats"] = self.game.episode_stats()
        return Outcome(self._observe(), reward, terminated, truncated, self._done, feedback, out)

    def _progress(self, action: str, info: dict, before: dict[str, int]) -> str | None:
        """"done" when this step completed the task, "step" when it completed a step of an
        in-order task, else None."""
        task, effective = self.task, bool(info["effective_success"])
        if task is None or not effective or self._done:
            return None
        around = info.get("placed_neighbours", {})
        if task == "plant row":
            return "done" if action == "place plant" and any(
                o == "plant" for _, o in around.values()) else None
        if task == "make workshop":
            return "done" if acts.same_action(action, "place crafting table") and any(
                m == "table" for m, _ in around.values()) else None
        if task == "chop grass with wood pickaxe":
            return "done" if action == "chop grass" and before["wood_pickaxe"] > 0 else None
        if task in _IN_ORDER:
            chain = TASK_CHAINS[task]
            if acts.same_action(action, chain[self._chain_index]):
                self._chain_index += 1
                return "done" if self._chain_index == len(chain) else "step"
            return None
        return "done" if acts.same_action(action, task) else None

    def _wanted(self) -> str:
        """The action the task needs next (before its prerequisites)."""
        task, inv = self.task, self.player.inventory
        if task in _IN_ORDER:
            return TASK_CHAINS[task][self._chain_index]
        if task == "plant row":
            return "place plant"
        if task == "make workshop":
            return "place crafting table"
        if task == "chop grass with wood pickaxe":
            return "chop grass" if inv["wood_pickaxe"] else "make wood pickaxe"
        if task == "survival":
            return self._need() or NO_OP
        if task is not None:
            return task
        return self._need() or NO_OP

    def _need(self) -> str | None:
        inv = self.player.inventory
        for stat, action in (("drink", "drink water"), ("food", "attack cow"),
                             ("energy", "sleep")):
            if inv[stat] <= LOW:
                return action
        return None

    def _advice(self) -> Advice:
        if self.task is not None:
            return self.guide.advise(self._wanted())
        need = self._need()
        first = None
        candidates = ([need] if need else []) + [
            step for ach, step in CURRICULUM.items() if not self.player.achievements[ach]]
        for wanted in candidates:
            advice = self.guide.advise(wanted)
            first = first or advice
            if advice.action is not None and advice.action != NO_OP:
                return advice
        return first or Advice(NO_OP, NO_OP, NO_OP, "")

    def _hindsight_positive(self, action: str, info: dict, before: dict[str, int],
                            newly: list[str], progress: str | None) -> str | None:
        parts = []
        if progress == "done":
            parts.append(f"You completed the task: {task_words(self.task)}.")
        elif progress == "step":
            chain = TASK_CHAINS[self.task]
            parts.append(f'"{action}" completed step {self._chain_index} of {len(chain)} of '
                         "your task.")
        if newly:
            parts.append("You unlocked " + ", ".join(a.replace("_", " ") for a in newly) + ".")
        gained = [f"{now - before[k]} {k.replace('_', ' ')}" for k, now in
                  self.player.inventory.items()
                  if now > before[k] and k not in ("health", "food", "drink", "energy")]
        if gained:
            parts.append("You got " + ", ".join(gained) + ".")
        quiet = action == NO_OP or action.startswith("move")
        if info["effective_success"] and not quiet and not parts:
            parts.append(f'"{action}" worked.')
        return " ".join(parts) or None

    def _hindsight_negative(self, action: str, info: dict, before: dict[str, int],
                            facing: str | None) -> str | None:
        if info["effective_success"] or action == NO_OP:
            return None
        if action not in acts.GOOD_ACTIONS:
            return f'"{action}" does nothing in this game.'
        if action.startswith("move"):
            return (f'"{action}" did not move you: the way is blocked by {_name(facing)}; '
                    "you now face it.")
        return f'"{action}" had no effect: {self._why_not(action, before, facing)}.'

    def _why_not(self, action: str, before: dict[str, int], facing: str | None) -> str:
        upstream, target = acts.UPSTREAM[action]
        if upstream == "sleep":
            return "you are not tired"
        if upstream == "do":
            tool = constants.collect.get(target, {}).get("require", {})
            missing = [k.replace("_", " ") for k, n in tool.items() if before[k] < n]
            if facing != target:
                return f"you face {_name(facing)}, not {article(target)}"
            if missing:
                return f"it needs a {missing[0]}"
            received = constants.collect.get(target, {}).get("receive", {})
            if any(before[k] >= constants.items[k]["max"] for k in received):
                return "you already carry as much of it as you can (9)"
            if target == "grass":
                return "grass gives a sapling only one time in ten: try again"
            if target == "plant":
                return "the plant is not ripe yet"
            return f"the {target} could not be used now"
        name = upstream.split("_", 1)[1]
        if upstream.startswith("place_"):
            info = constants.place[name]
            uses = info["uses"]
            if self.version == 1 and name == "table":
                uses = {"wood": 1}
            missing = [f"{n} {k}" for k, n in uses.items() if before[k] < n]
            if missing:
                return f"it needs {', '.join(missing)}"
            return f"you face {_name(facing)}; it goes on free {' or '.join(info['where'])}"
        info = constants.make[name]
        missing = [f"{n} {k}" for k, n in info["uses"].items() if before[k] < n]
        if missing:
            return f"it needs {', '.join(missing)}"
        return "it needs " + " and ".join(
            "a nearby crafting table" if s == "table" else f"a nearby {s}"
            for s in info["nearby"]) + " (within one step)"

    def _hurt_by(self) -> str:
        seen = self.guide.scan()
        close = [n for n in ("zombie", "skeleton", "arrow")
                 if n in seen and abs(seen[n][0]) + abs(seen[n][1]) <= 2]
        if close:
            return f", probably by the {close[0]} next to you"
        starving = [k for k in ("food", "drink", "energy") if self.player.inventory[k] == 0]
        return f", because your {starving[0]} is at 0" if starving else ""

    def _future_positive(self) -> str | None:
        advice = self._advice()
        action = advice.action or self.guide.explore()
        step = f'"{advice.step}"'
        if advice.action is None:
            return f"Next step: {step}, but {advice.detail}: explore, \"{action}\"."
        if advice.step == NO_OP:
            return f'Nothing is urgent: "{NO_OP}" is safe.'
        if action == advice.step:
            return f"Next step: {step}; {advice.detail}: do \"{action}\"."
        return f"Next step: {step}; {advice.detail}: \"{action}\"."

    def _future_negative(self) -> str | None:
        warnings = []
        seen = self.guide.scan()
        for name, reach in _DANGER.items():
            offset = seen.get(name)
            if offset is not None and abs(offset[0]) + abs(offset[1]) <= reach:
                where = offset_words(*offset)
                if name == "lava":
                    warnings.append(f"Lava is {where}: walking into it kills you.")
                else:
                    warnings.append(f"A {name} is {where}: it will hurt you.")
        inv = self.player.inventory
        for stat, fix in (("food", "eat"), ("drink", "drink water"), ("energy", "sleep")):
            if inv[stat] <= LOW:
                warnings.append(f"Your {stat} is low ({inv[stat]}/9): do not wait long to "
                                f"{fix}, or you will lose health.")
        return " ".join(warnings) or None

    def _observe(self) -> str:
        caption = captions.state_caption(self.world, self.player, self.game._grid, 2)
        near = [f"{_name(name)} {offset_words(*offset)}" for name, offset
                in self.guide.scan().items() if name not in ("player", "arrow")]
        inv = self.player.inventory
        items = [f"{inv[k]} {k.replace('_', ' ')}" for k in captions.INVENTORY_ITEMS if inv[k]]
        vitals = ", ".join(f"{k} {inv[k]}/9" for k in ("health", "food", "drink", "energy"))
        done = [a.replace("_", " ") for a in ACHIEVEMENTS if self.player.achievements[a]]
        parts = [caption,
                 f"Nearest: {'; '.join(near)}." if near else "",
                 f"Inventory: {', '.join(items) if items else 'empty'}.",
                 f"Vitals: {vitals}." + (" You are asleep." if self.player.sleeping else ""),
                 f"Achievements so far: {', '.join(done) if done else 'none'}.",
                 f"Steps left: {self.length - self.game._engine._step}."]
        return " ".join(p for p in parts if p)

    def _instructions(self) -> Instructions:
        listed = ", ".join(f'"{a}"' for a in acts.EASIER_ACTIONS)
        goal = task_words(self.task)
        actions = (f"Each turn, answer with exactly one action, for example {listed}. "
                   "Moving toward something you cannot walk onto turns you to face it; "
                   "actions such as \"chop tree\" act on what you face.")
        if self.task is None:
            objective = (f"Your task in this Crafter world: {goal} before the episode ends "
                         f"({self.length} steps).")
        else:
            objective = f"Your task in this Crafter world: {goal}."
        basic = f"{objective} {actions}"
        return Instructions(basic, f"{basic} {self._steps()}",
                            f"{basic} {self._rules()} {self._steps()}")

    def _steps(self) -> str:
        chain = (task_chain(self.task) if self.task is not None
                 else tuple(CURRICULUM.values()))
        return "Steps toward your task, in order: " + ", ".join(f'"{s}"' for s in chain) + "."

    def _rules(self) -> str:
        table_cost = 1 if self.version == 1 else constants.place["table"]["uses"]["wood"]
        return ("How the game works: \"chop tree\" gives wood; a crafting table costs "
                f"{table_cost} wood; wood pickaxe and sword need 1 wood each by a crafting table; "
                "stone and coal need a wood pickaxe; stone pickaxe and sword need 1 wood and 1 "
                "stone; a furnace costs 4 stone (place it by the table); iron needs a stone "
                "pickaxe; iron tools need 1 wood, 1 coal and 1 iron by a table and a furnace; "
                "diamond needs an iron pickaxe; \"chop grass\" sometimes gives a sapling, which "
                "\"place plant\" plants on grass; it ripens for \"eat plant\" after a while. "
                "Drink water, eat (\"attack cow\") and sleep when low, or you lose health; avoid "
                "lava, zombies and skeletons.")


def _ahead(player: Any) -> tuple[int, int]:
    return (player.pos[0] + player.facing[0], player.pos[1] + player.facing[1])


def _name(thing: str | None) -> str:
    if thing is None:
        return "the edge of the world"
    return "crafting table" if thing == "table" else thing
