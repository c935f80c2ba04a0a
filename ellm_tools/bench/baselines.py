"""Cost of one update of each baseline against ELLM's DQN, measured side by side in one process.

    python -m ellm_tools.bench.baselines [--updates 30] [--batch-size 64] [--precision bf16]
        [--compile]

Paper and fixed settings at config.yaml's sizes, interleaved round by round so that the machine's
load hits them alike.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from baselines.icm_apt import ICMAPTAgent
from baselines.rnd import RNDAgent
from ellm.agent.dqn import DQNAgent
from ellm.replay import EpisodeStart, ReplayStorage, Row, StringTable, make_replay_loader

NUM_ACTIONS = 139
OBS_SHAPE = (4, 84, 84)


def _replay(replay_dir: Path, episodes: int = 8, length: int = 100) -> None:
    rng = np.random.default_rng(0)
    storage = ReplayStorage(replay_dir, StringTable(replay_dir / "strings.jsonl"))
    for _ in range(episodes):
        storage.add_first(EpisodeStart(rng.integers(0, 256, (84, 84), dtype=np.uint8), "", ""))
        for t in range(1, length + 1):
            storage.add(Row(rng.integers(0, 256, (84, 84), dtype=np.uint8),
                            int(rng.integers(NUM_ACTIONS)), 0.0, 1.0, "", "", t == length))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ellm_tools.bench.baselines",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="every agent's precision, as the config key")
    parser.add_argument("--compile", action="store_true", help="every agent with compile=true")
    args = parser.parse_args(argv)
    common = {"seed": 0, "nstep": 3, "precision": args.precision, "compile": args.compile}
    agents = {
        "DQN (ELLM)": DQNAgent(OBS_SHAPE, NUM_ACTIONS, paper_setting=True, **common),
        "RND, paper": RNDAgent(OBS_SHAPE, NUM_ACTIONS, paper_setting=True, **common),
        "NovelD, paper": RNDAgent(OBS_SHAPE, NUM_ACTIONS, paper_setting=True, noveld=True,
                                  **common),
        "APT, paper": ICMAPTAgent(OBS_SHAPE, NUM_ACTIONS, paper_setting=True, **common),
        "RND, fixed": RNDAgent(OBS_SHAPE, NUM_ACTIONS, **common),
        "APT, fixed": ICMAPTAgent(OBS_SHAPE, NUM_ACTIONS, **common),
    }
    times: dict[str, list[float]] = {name: [] for name in agents}
    with tempfile.TemporaryDirectory() as tmp:
        _replay(Path(tmp))
        batches = make_replay_loader(
            Path(tmp), capacity=10**6, batch_size=args.batch_size, num_workers=0, nstep=3,
            discount=0.99, frame_stack=4, clip_reward=True, save_buffer=True, seed=0)
        for step in range(args.updates + 2):
            batch = next(batches)
            for name, agent in agents.items():
                start = time.perf_counter()
                agent.update(batch, step)
                if step >= 2:  # the first updates pay lazy initialisation and compilation
                    times[name].append(time.perf_counter() - start)
    base = statistics.median(times["DQN (ELLM)"])
    print(f"torch threads: {torch.get_num_threads()}; batch {args.batch_size}; "
          f"precision {args.precision}; compile {args.compile}; "
          f"{args.updates} updates each, interleaved")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:14s}: {1e3 * median:7.1f} ms/update = {median / base:.2f}x the DQN's")


if __name__ == "__main__":
    main()
