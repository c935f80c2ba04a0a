"""Play one Text-Crafter episode with random good actions and print it as text.

    python -m text_crafter.demo [--env CrafterTextEnv-v1] [--seed 0] [--steps 60]
"""

from __future__ import annotations

import argparse

import numpy as np

from text_crafter.actions import GOOD_ACTIONS
from text_crafter.env import ENV_SPECS, make


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CrafterTextEnv-v1", choices=sorted(ENV_SPECS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args(argv)
    env = make(args.env, seed=args.seed)
    obs, _ = env.reset()
    rng = np.random.default_rng(args.seed)
    good = [env.action_names.index(name) for name in GOOD_ACTIONS if name in env.action_names]
    print(f"[reset] {obs['text_obs']}")
    for t in range(1, args.steps + 1):
        obs, reward, terminated, truncated, info = env.step(int(rng.choice(good)))
        done = " (episode over)" if terminated or truncated else ""
        print(f"[{t:3d}] {info['action_name']:<22} -> {info['transition_caption'] or '-':<22}"
              f" reward {reward:.0f}{done}\n      {obs['text_obs']}")
        if terminated or truncated:
            break


if __name__ == "__main__":
    main()
