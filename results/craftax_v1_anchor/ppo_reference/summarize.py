"""Summarise the reference PPO runs: python summarize.py seed1.jsonl.gz seed2.jsonl.gz"""

import gzip
import json
import math
import sys

import numpy as np

WINDOW = 50_000  # env steps at the end of training


def main() -> None:
    for path in sys.argv[1:]:
        with gzip.open(path, "rt") as f:
            recs = [json.loads(line) for line in f]
        last = recs[-1]
        steps_per_update = recs[0]["env_steps"] // (recs[0]["update"] + 1)
        end = last["env_steps"]
        win = [r for r in recs if r["env_steps"] > end - WINDOW
               and not math.isnan(r.get("episode_return", math.nan))]
        ret = np.array([r["episode_return"] for r in win])
        length = np.array([r["episode_length"] for r in win])
        episodes = steps_per_update / length
        print(f"{path}: seed {last['seed']}, {last['update'] + 1} updates, {end} env steps")
        print(f"  last {WINDOW} steps: return {ret.mean():.2f} (per update), "
              f"{np.sum(episodes * ret) / episodes.sum():.2f} (per episode), "
              f"length {length.mean():.1f}")
        rates = {k.split("/")[1]: np.mean([r[k] for r in win]) for k in last
                 if k.startswith("Achievements/")}
        print("  success %:", ", ".join(f"{k} {v:.1f}" for k, v in
                                        sorted(rates.items(), key=lambda kv: -kv[1]) if v > 0))


if __name__ == "__main__":
    main()
