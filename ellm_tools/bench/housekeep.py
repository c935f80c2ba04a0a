"""Speed of Text-Housekeep on the symbolic backend (random actions, resets included).

    python -m ellm_tools.bench.housekeep [--task pomaria_2_int] [--ep-num 0] [--steps 20000]
                                         [--action-mode lowlevel] [--length 1000] [--seed 0]

Prints env steps/s (text layer + backend + picture) and, separately, the backend alone.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from text_housekeep import DEFAULT_TASK, HousekeepDataError, load_episode, make
from text_housekeep.symbolic import ACTION_MODES, SymbolicBackend


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ellm_tools.bench.housekeep")
    parser.add_argument("--task", default=DEFAULT_TASK)
    parser.add_argument("--ep-num", type=int, default=0)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--action-mode", default="lowlevel", choices=ACTION_MODES)
    parser.add_argument("--length", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    try:
        env = make(args.task, args.ep_num, action_mode=args.action_mode, length=args.length)
        episode = load_episode(args.task, args.ep_num)
    except HousekeepDataError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    actions = np.random.default_rng(args.seed).integers(0, env.action_space.n, size=args.steps)
    env.reset()
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    env_rate = args.steps / (time.perf_counter() - start)

    backend = SymbolicBackend(episode, args.action_mode)
    start = time.perf_counter()
    for i, action in enumerate(actions):
        if i % args.length == 0:
            backend.reset()
        backend.step(action)
    backend_rate = args.steps / (time.perf_counter() - start)
    print(f"{args.task} ep_num {args.ep_num} ({args.action_mode}, {args.steps} random steps): "
          f"env {env_rate:.0f} steps/s, backend alone {backend_rate:.0f} steps/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
