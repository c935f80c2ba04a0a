"""Speed of Text-Crafter against raw Crafter, measured side by side in one process.

    python -m ellm_tools.bench.crafter [--steps 4000] [--rounds 5] [--seed 0]

Same seeds and actions for both; rounds alternate so machine noise hits both alike.
"""

from __future__ import annotations

import argparse
import time

import crafter
import numpy as np

from text_crafter import actions as acts
from text_crafter.env import make


def _run(text: bool, actions: list[int], seed: int) -> tuple[float, list[float]]:
    """Step a fresh env through ``actions``; return (elapsed seconds, reset durations)."""
    env = make("CrafterTextEnv-v1", seed=seed) if text else crafter.Env(length=400, seed=seed)
    resets = []
    start = time.perf_counter()
    t = time.perf_counter()
    env.reset()
    resets.append(time.perf_counter() - t)
    for action in actions:
        if text:
            _, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
        else:
            _, _, done, _ = env.step(action)
        if done:
            t = time.perf_counter()
            env.reset()
            resets.append(time.perf_counter() - t)
    return time.perf_counter() - start, resets


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ellm_tools.bench.crafter",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4000, help="steps per env per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    text_actions = rng.integers(len(acts.HARDER_ACTIONS), size=args.steps).tolist()
    upstream = {name: i for i, name in enumerate(crafter.constants.actions)}
    raw_actions = [upstream[acts.UPSTREAM.get(acts.HARDER_ACTIONS[a], ("noop", None))[0]]
                   for a in text_actions]

    crafter.Env(seed=args.seed).reset()  # pay numba's JIT before timing

    totals = {"raw": 0.0, "text": 0.0}
    resets: dict[str, list[float]] = {"raw": [], "text": []}
    for _ in range(args.rounds):
        for key, seq in (("raw", raw_actions), ("text", text_actions)):
            elapsed, reset_times = _run(key == "text", seq, args.seed)
            totals[key] += elapsed
            resets[key] += reset_times

    n = args.steps * args.rounds
    raw_sps, text_sps = n / totals["raw"], n / totals["text"]
    print(f"steps per env: {n} ({args.rounds} alternating rounds of {args.steps})")
    print(f"raw crafter.Env        : {raw_sps:8.1f} steps/s, reset {1e3 * np.mean(resets['raw']):6.1f} ms")
    print(f"CrafterTextEnv-v1      : {text_sps:8.1f} steps/s, reset {1e3 * np.mean(resets['text']):6.1f} ms")
    print(f"ratio text / raw       : {text_sps / raw_sps:8.3f}  (target >= 0.9)")


if __name__ == "__main__":
    main()
