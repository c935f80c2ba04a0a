"""Same-seed runs before and after a refactor: do they log the same values?

    python scripts/same_seed.py run --repo CHECKOUT --out DIGEST.json [--only NAME ...]
    python scripts/same_seed.py compare BEFORE.json AFTER.json

``run`` trains each configuration of :data:`RUNS` for a few thousand frames with ``train.py`` of
``CHECKOUT`` (seed 1, one torch thread; every method of both engines) and writes a digest: every
CSV row of the run dir (and of its seeds' dirs), without the columns that measure time. ``compare`` prints, per run, whether the two digests are
equal and the first difference. The 2-actor run is timing-dependent (the actors run ahead of
the learner), so for it only the columns are compared.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SHORT = ["num_train_frames=2000", "num_seed_frames=500", "eval_every_frames=1000",
         "num_eval_episodes=2", "env_spec.length=200", "env_spec.housekeep_length=200",
         "replay_buffer_num_workers=0", "batch_size=32", "torch_threads=1", "progress=false",
         "agent.critic_target_update_every_steps=400", "agent.train_eps_decay_steps=1500",
         "seed=1"]
ELLM = ["env_spec.use_sbert=True", "use_goal=True", "use_language_state=sbert",
        "env_spec.lm_spec.lm_class=SimpleOracle"]
RUNS: dict[str, list[str]] = {
    "ellm_oracle": ELLM,
    "novelty": [*ELLM[:3], "env_spec.lm_spec.lm_class=BaselineModel"],
    "rnd": ["method=rnd"],
    "rnd_fixed": ["method=rnd", "env_spec.name=CrafterTextEnv-v2"],
    "apt": ["method=apt"],
    "random": ["method=random"],
    "housekeep_oracle": ["env_spec.name=Housekeep", "env_spec.use_sbert=True",
                         "use_language_state=sbert", "env_spec.use_language_state=True",
                         "env_spec.lm_spec.lm_class=SimpleOracle"],
    "ellm_oracle_2_actors": [*ELLM, "num_actors=2", "actor_sync_frames=100"],
}
# The Craftax engine refuses the torch engine's keys: its runs have their own short config, and
# every method of it is run (all seeds' CSVs, ``seed<k>/*.csv``, are compared).
CRAFTAX_SHORT = ["env_spec.name=Craftax-Classic-v1", "craftax.num_envs=8", "craftax.num_steps=8",
                 "craftax.hidden=32", "craftax.updates_per_chunk=2", "craftax.minibatches=2",
                 "craftax.reset_worlds=2", "num_train_frames=512", "eval_every_frames=256",
                 "num_eval_episodes=2", "env_spec.length=40", "progress=false", "seeds=2",
                 "seed=1"]
CRAFTAX_METHODS = ("ellm", "novelty", "rnd", "noveld", "e3b", "extrinsic", "zero", "random")
RUNS.update({f"craftax_{m}": [f"method={m}"] for m in CRAFTAX_METHODS})
TIMING_DEPENDENT = {"ellm_oracle_2_actors"}
TIME_WORDS = ("fps", "time", "latency", "wall", "elapsed", "_s")


def timed(column: str) -> bool:
    return column.startswith("time/") or any(word in column for word in TIME_WORDS)


def digest(run_dir: Path) -> dict[str, list[dict[str, str]]]:
    out = {}
    for path in sorted(run_dir.rglob("*.csv")):
        if path.name == "time.csv":  # each section's share of the wall time: all of it timing
            continue
        with path.open(newline="") as f:
            out[str(path.relative_to(run_dir))] = [{k: v for k, v in row.items() if not timed(k)}
                                                   for row in csv.DictReader(f)]
    return out


def run(repo: Path, out: Path, only: list[str]) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, overrides in RUNS.items():
            if only and name not in only:
                continue
            run_dir = Path(tmp) / name
            proc = subprocess.run(
                [sys.executable, str(repo / "train.py"),
                 *(CRAFTAX_SHORT if name.startswith("craftax_") else SHORT), *overrides,
                 f"hydra.run.dir={run_dir}"], cwd=tmp, capture_output=True, text=True,
                env={**env, "ELLM_CACHE_DIR": str(Path(tmp) / "lm_cache")}, check=False)
            if proc.returncode != 0:
                raise SystemExit(f"{name} failed:\n{proc.stderr[-3000:]}")
            result[name] = digest(run_dir)
            print(f"{name}: {sum(len(rows) for rows in result[name].values())} rows", flush=True)
    out.write_text(json.dumps(result, sort_keys=True))


def compare(before: dict, after: dict) -> bool:
    same = True
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a is None or b is None:
            print(f"{name}: only in {'after' if a is None else 'before'}")
            same = False
            continue
        if name in TIMING_DEPENDENT:
            a = {f: sorted(rows[0]) if rows else [] for f, rows in a.items()}
            b = {f: sorted(rows[0]) if rows else [] for f, rows in b.items()}
        a, b = ({f: rows for f, rows in d.items() if f != "time.csv"} for d in (a, b))
        if a == b:
            print(f"{name}: identical")
            continue
        same = False
        for f in sorted(set(a) | set(b)):
            if a.get(f) != b.get(f):
                rows_a, rows_b = a.get(f) or [], b.get(f) or []
                first = next((i for i, (x, y) in enumerate(zip(rows_a, rows_b)) if x != y),
                             min(len(rows_a), len(rows_b)))
                print(f"{name}: {f} differs ({len(rows_a)} vs {len(rows_b)} rows; "
                      f"first at row {first})")
                break
    return same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--only", nargs="*", default=[])
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "run":
        run(args.repo.resolve(), args.out.resolve(), args.only)
    else:
        same = compare(json.loads(args.before.read_text()), json.loads(args.after.read_text()))
        raise SystemExit(0 if same else 1)


if __name__ == "__main__":
    main()
