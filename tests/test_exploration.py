"""The exploration columns of an episode: ``coverage`` (what of the world it reached, by the
game's own measure) and ``distinct_captions``, counted by the one rollout."""

from __future__ import annotations

import numpy as np

import text_housekeep as th
from ellm.agent.inputs import AgentInputs
from ellm.games import find_game
from ellm.goals import NoGoals
from ellm.loop.rollout import Rollout
from text_crafter import make


def rollout_of(env, game_name: str) -> Rollout:
    return Rollout(env, NoGoals(), [], AgentInputs(False, False), frame_stack=1,
                   covered=find_game(game_name).covered)


def test_crafter_coverage_counts_distinct_cells_and_captions():
    env = make("CrafterTextEnv-v2", length=300, seed=3)
    rollout = rollout_of(env, "CrafterTextEnv-v2")
    rollout.reset()
    rng = np.random.default_rng(0)
    cells, captions, steps = set(), set(), 0
    while True:
        step = rollout.step(lambda _inputs: int(rng.integers(env.action_space.n)))
        steps += 1
        cells.add(tuple(int(v) for v in step.info["player_pos"]))
        if step.info["transition_caption"]:
            captions.add(step.info["transition_caption"])
        if step.last:
            break
    summary = rollout.summary()
    assert summary["coverage"] == len(cells)
    assert summary["distinct_captions"] == len(captions)
    # A random walk of 300 steps moves: more than one cell, fewer than one a step.
    assert 1 < summary["coverage"] < steps
    assert 0 < summary["distinct_captions"] < steps
    # A new episode starts counting again.
    rollout.reset()
    assert rollout.summary()["coverage"] == 0 and rollout.summary()["distinct_captions"] == 0


def test_crafter_agent_standing_still_covers_one_cell():
    env = make("CrafterTextEnv-v2", length=50, seed=3)
    rollout = rollout_of(env, "CrafterTextEnv-v2")
    rollout.reset()
    noop = env.action_names.index("do nothing")
    while not rollout.step(lambda _inputs: noop).last:
        pass
    assert rollout.summary()["coverage"] == 1
    assert rollout.summary()["distinct_captions"] == 1  # "do nothing", the one action it took


def test_housekeep_coverage_counts_objects_and_receptacles_interacted_with():
    env = th.make("pomaria_2_int", 0, action_mode="highlevel")
    rollout = rollout_of(env, "Housekeep")
    rollout.reset()

    def act(name: str):
        return rollout.step(lambda _inputs: env.action_names.index(name))

    act("go to bedroom_0-chair_1_0.urdf")
    assert rollout.summary()["coverage"] == 0  # moving reaches nothing
    act("pick shoe_1")
    assert rollout.summary()["coverage"] == 1  # the shoe
    act("go to bedroom_0-shelf_13_0.urdf")
    act("place")
    assert rollout.summary()["coverage"] == 2  # the shoe again (counted once), and the shelf
    act("pick shoe_1")
    assert rollout.summary()["coverage"] == 2  # nothing new
    summary = rollout.summary()
    assert summary["distinct_captions"] == 2  # "pick shoe", "shoe in bedroom shelf"


def test_rollout_without_a_game_measure_reports_zero_coverage():
    env = make("CrafterTextEnv-v2", length=20, seed=1)
    rollout = Rollout(env, NoGoals(), [], AgentInputs(False, False), frame_stack=1)
    rollout.reset()
    while not rollout.step(lambda _inputs: 0).last:
        pass
    assert rollout.summary()["coverage"] == 0
