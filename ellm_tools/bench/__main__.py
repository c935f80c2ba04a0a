"""Speed of the training loop, measured side by side in one process.

    python -m ellm_tools.bench [--frames 1500] [--updates 60] [--workers 1] [key=value ...]
    python -m ellm_tools.bench --side-by-side [--frames 3000] [key=value ...]
    python -m ellm_tools.bench --lm [--frames 1000] [--lm-url URL] [key=value ...]
    python -m ellm_tools.bench --slots 2 [--requests 16]
    python -m ellm_tools.bench --actors N[,N...] [--stub-learner] [--frames 1500] [--rounds 1]
        [--actor-overrides key=value ...] [key=value ...]
    python -m ellm_tools.bench --late [--prefill 250000] [--frames 1500] [--rounds 1] [key=value ...]
    python -m ellm_tools.bench --craftax [--seeds 5] [--chunks 4] [--frames 1500] [key=value ...]

Each mode measures its settings in one sitting, so that the machine's load falls on all alike;
what each measures and its target: README.md, "Benchmarks", docs/scale.md, docs/lm.md (``--lm``,
``--slots``) and docs/craftax.md. Extra ``key=value`` arguments are Hydra overrides.
"""

from __future__ import annotations

import argparse

from ellm_tools.bench.common import BASE
from ellm_tools.bench.lm import lm_cost, serve_slots
from ellm_tools.bench.loop import loop_costs, side_by_side


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ellm_tools.bench",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=1500,
                        help="frames per timed phase (with --actors: measured per run)")
    parser.add_argument("--updates", type=int, default=60, help="updates in the update phase")
    parser.add_argument("--workers", type=int, default=1, help="replay_buffer_num_workers")
    parser.add_argument("--side-by-side", action="store_true",
                        help="default-settings train.py runs: one alone, then two together")
    parser.add_argument("--lm", action="store_true",
                        help="oracle vs local LLM, blocking and non-blocking (train.py runs)")
    parser.add_argument("--lm-url", default=None,
                        help="with --lm: an OpenAI-compatible server to use instead of starting "
                        "the packaged one")
    parser.add_argument("--slots", type=int, default=0,
                        help="the local LLM server: one slot against this many (answers/s)")
    parser.add_argument("--requests", type=int, default=16,
                        help="with --slots: concurrent requests")
    parser.add_argument("--actors", default="",
                        help="one process against this many actors, or several counts "
                        "separated by commas (train.py runs)")
    parser.add_argument("--actor-overrides", nargs="*", default=[],
                        help="with --actors: key=value overrides for the actor runs only, e.g. "
                        "precision=bf16 compile=true")
    parser.add_argument("--stub-learner", action="store_true",
                        help="with --actors: no updates, the main process only stores")
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --actors: runs of each setting, in turn; with --late: "
                        "rounds of (early, late) windows")
    parser.add_argument("--late", action="store_true",
                        help="the late phase (epsilon at its floor, pre-filled replay, "
                        "evaluations and snapshots) beside the early one, and the 5M projection")
    parser.add_argument("--prefill", type=int, default=250_000,
                        help="with --late: transitions in the replay before the timed rounds")
    parser.add_argument("--craftax", action="store_true",
                        help="the Craftax engine's frames/s against the torch loop's")
    parser.add_argument("--seeds", type=int, default=5, help="--craftax: seeds vmapped")
    parser.add_argument("--chunks", type=int, default=4, help="--craftax: chunks timed")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    if args.craftax:
        from ellm_tools.bench.craftax import craftax_bench

        if args.seeds < 1 or args.chunks < 1:
            parser.error("--craftax needs --seeds >= 1 and --chunks >= 1")
        craftax_bench(args.seeds, args.chunks, args.frames, args.overrides)
        return
    if args.late:
        from ellm_tools.bench.late import late_phase, report

        if args.rounds < 1 or args.prefill < 0 or args.frames < 1:
            parser.error("--late needs --rounds >= 1, --prefill >= 0 and --frames >= 1")
        report(late_phase(args.frames, args.rounds, args.prefill, args.overrides), args.frames)
        return
    if args.actors:
        from ellm_tools.bench.actors import actors_bench

        try:
            counts = [int(n) for n in args.actors.split(",")]
        except ValueError:
            counts = []
        if not counts or min(counts) < 2 or args.rounds < 1:
            parser.error("--actors needs integers >= 2 (e.g. 2 or 4,8,12) and --rounds one >= 1")
        actors_bench(counts, max(args.frames, 800), args.rounds, args.stub_learner,
                     args.overrides, args.actor_overrides)
        return
    if args.slots:
        if args.slots < 2 or args.requests < 1:
            parser.error("--slots needs an integer >= 2 and --requests one >= 1")
        serve_slots(args.slots, args.requests)
        return
    if args.lm:
        lm_cost(args.frames, args.lm_url, args.overrides)
        return
    if args.side_by_side:
        side_by_side(max(args.frames, 3000), args.overrides)
        return
    loop_costs(args.frames, args.updates,
               BASE + [f"replay_buffer_num_workers={args.workers}"] + args.overrides)


if __name__ == "__main__":
    main()
