"""The cost of the policy-code sandbox (llm_in_the_loop/code_policy/sandbox/): starts, loads, calls.

    python -m ellm_tools.bench.sandbox [--calls 1000] [--rollouts 10]

What it times: docs/optimizers.md, "The sandbox" ("Cost").
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any, Final

from llm_in_the_loop.code_policy.sandbox import ISOLATIONS, Sandbox
from llm_in_the_loop.code_policy.sandbox import bwrap as sandbox_bwrap

BENCH_POLICIES: Final = {
    "trivial": "def controller(obs):\n    return obs\n",
    "numpy controller": ("import numpy as np\ndef controller(obs):\n"
                         "    hand, puck = np.array(obs['hand_pos']), np.array(obs['puck_pos'])\n"
                         "    step = np.clip(puck - hand, -0.1, 0.1)\n"
                         "    return (hand + step).tolist() + [1.0]\n"),
}


def _calls(box: Sandbox, calls: int, pause: float) -> str:
    """Median and 90th percentile of ``calls`` calls, ``pause`` seconds apart (untimed)."""
    obs = {"hand_pos": [0.0, 0.6, 0.2], "puck_pos": [0.1, 0.7, 0.02]}
    spent = []
    for _ in range(calls):
        time.sleep(pause)
        start = time.perf_counter()
        outcome = box.call(obs)
        spent.append(time.perf_counter() - start)
        assert outcome.ok, outcome.error
    spent.sort()
    return (f"{1e6 * spent[len(spent) // 2]:.0f} us per call (90th percentile "
            f"{1e6 * spent[9 * len(spent) // 10]:.0f} us)")


def bench(calls: int) -> None:
    start = time.perf_counter()
    problem = sandbox_bwrap.problem()
    print(f"check that the OS sandbox works here: {1e3 * (time.perf_counter() - start):.0f} ms"
          f" ({problem or 'it does'}); {calls} calls each")
    for isolation in [i for i in ISOLATIONS if i != "os" or problem is None]:
        with Sandbox(timeout=5.0, isolation=isolation) as box:
            start = time.perf_counter()
            box.load(BENCH_POLICIES["trivial"], "controller")
            first = time.perf_counter() - start
            start = time.perf_counter()
            for _ in range(20):
                box.load(BENCH_POLICIES["trivial"], "controller")
            print(f"isolation={isolation}: start and first load {1e3 * first:.0f} ms, then "
                  f"{1e3 * (time.perf_counter() - start) / 20:.1f} ms per load")
            for name, code in BENCH_POLICIES.items():
                box.load(code, "controller")
                print(f"  {name}: back to back {_calls(box, calls, 0.0)}; 1 ms apart "
                      f"{_calls(box, calls, 0.001)}")


def bench_rollouts(rollouts: int) -> None:
    """A Meta-World rollout's median time, sandboxed and not (needs ``.[optim]``)."""
    from llm_in_the_loop.code_policy.targets import METAWORLD_CODE, MetaWorldTarget, sandboxed

    target = MetaWorldTarget(horizon=30, substeps=10, seed=0)
    namespace: dict[str, Any] = {}
    exec(METAWORLD_CODE, namespace)  # noqa: S102 - the project's own starting code
    times: dict[str, list[float]] = {"in the sandbox": [], "in this process": []}
    with Sandbox(timeout=5.0, isolation="os" if sandbox_bwrap.problem() is None else "none"
                 ) as box:
        box.load(METAWORLD_CODE, "controller")
        policies = {"in the sandbox": sandboxed(box),
                    "in this process": lambda obs: (namespace["controller"](obs), None)}
        for seed in range(rollouts):
            for name, policy in policies.items():
                start = time.perf_counter()
                steps = len(target.rollout(policy, seed).steps)
                times[name].append(time.perf_counter() - start)
        print(f"Meta-World rollouts of {steps} actions (isolation={box.isolation}), median of "
              f"{rollouts}: " + ", ".join(f"{name} {1e3 * sorted(t)[len(t) // 2]:.0f} ms"
                                           for name, t in times.items()))
    target.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ellm_tools.bench.sandbox",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rollouts", type=int, default=0,
                        help="also time this many Meta-World rollouts (needs '.[optim]')")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    bench(args.calls)
    if args.rollouts:
        bench_rollouts(args.rollouts)


if __name__ == "__main__":
    main()
