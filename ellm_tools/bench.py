"""Speed of the training loop, measured side by side in one process.

    python -m ellm_tools.bench [--frames 1500] [--updates 60] [--workers 1] [key=value ...]
    python -m ellm_tools.bench --side-by-side [--frames 3000] [key=value ...]
    python -m ellm_tools.bench --lm [--frames 1000] [--lm-url URL] [key=value ...]
    python -m ellm_tools.bench --slots 2 [--requests 16]
    python -m ellm_tools.bench --actors N[,N...] [--stub-learner] [--frames 1500] [--rounds 1]
        [--actor-overrides key=value ...] [key=value ...]
    python -m ellm_tools.bench --late [--prefill 250000] [--frames 1500] [--rounds 1] [key=value ...]
    python -m ellm_tools.bench --craftax [--seeds 5] [--chunks 4] [--frames 1500] [key=value ...]

1. env cost: seconds per frame of the loop without updates (act, Text-Crafter step, LM goals,
   SBERT reward, frame preprocessing, replay storage), measured before and after the full loop
   and averaged (it falls as the caption and SBERT caches warm up);
2. update cost: seconds per DQN update on a batch from the replay loader (sampling included);
3. full loop: frames/s with updates every ``update_every_steps`` frames.

The bound implied by (1) and (2) is ``1 / (env + update / update_every_steps)`` frames/s; the
loop's frames/s is printed as a fraction of it (target >= 0.8). Also prints bytes per stored
transition on disk and in RAM. Extra ``key=value`` arguments are Hydra overrides.

``--side-by-side`` instead runs ``train.py`` with the default settings (no thread variables in
the environment) once alone, then twice at the same time, and prints each run's frames/s
(training episodes after the first, updates on) against the run alone (target: each of two
side-by-side runs >= 0.4x of one run alone).

``--lm`` measures what a real language model costs the loop: ``train.py`` with the oracle, then
with the packaged local LLM (``python -m ellm_tools.serve``, started here unless ``--lm-url`` names
a running OpenAI-compatible server) asked blocking, then non-blocking
(``env_spec.lm_spec.blocking=false``), one after the other in one sitting, each with an empty LM
cache and no updates (the seed frames cover the run), so the LM's share is not diluted. It prints
each run's frames/s (training episodes after the first, the model already loaded) against the
oracle's (target for non-blocking: >= 0.8x), and the LM calls, fallback steps and waiting time.

``--slots N`` measures the local server's concurrency (``python -m ellm_tools.serve --parallel``):
the same ``--requests`` distinct prompts, all sent at once, answered by one slot with N threads,
then by N slots of one thread each (the same CPU threads in total); it prints answers/s of each
and their ratio.

``--actors N`` runs ``train.py`` with one process and with ``N`` actors (or each of several
counts, ``--actors 4,8,12``) in one sitting and prints frames/s of each, the ratios, updates per
frame and the bound implied by the measured update and actor costs; ``--actor-overrides``
applies only to the actor runs (the fastest setting against the fp32 one-process loop); with
``--stub-learner`` the main process makes no update (:mod:`ellm_tools.bench_actors`, docs/scale.md).

``--craftax`` measures the Craftax engine's training frames/s (ELLM-oracle and RND, compile
excluded and reported apart) beside the torch loop's, in one process (:mod:`ellm_tools.bench_craftax`).

``--late`` measures a run's late phase, in one process or with ``num_actors=N``: epsilon at
its floor, full-length episodes, the replay pre-filled to ``--prefill`` transitions, evaluations
and snapshots at the schedule's share, beside its early phase (epsilon 1), ``--rounds`` rounds;
it prints the median and spread, the memory, and the 5M-frame time projected from the
schedule's phases (:mod:`ellm_tools.bench_late`).
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[1]
BASE = [
    "env_spec.use_sbert=True", "use_goal=True", "use_language_state=sbert",
    "env_spec.lm_spec.lm_class=SimpleOracle", "device=cpu", "progress=false",
    "num_eval_episodes=0", "save_snapshot=false", "eval_every_frames=100000000",
]


def _compose(overrides: list[str]):
    with initialize_config_dir(str(ROOT), version_base="1.3"):
        return compose("config", overrides=overrides)


def _workspace(overrides: list[str], run_dir: Path):
    from ellm.workspace import Workspace

    return Workspace(_compose(overrides), run_dir)


def _train_more(ws, frames: int) -> None:
    """Continue ``ws`` up to ``frames`` total frames. ``train()`` resets the env, so the episode
    the previous call left open is dropped by reopening the replay storage."""
    from ellm.replay import ReplayStorage

    ws.storage = ReplayStorage(ws.storage.replay_dir, ws.strings)
    ws.cfg.num_train_frames = frames
    ws.train()


SIDE_BY_SIDE = [
    *BASE[:4], "env_spec.length=100", "num_seed_frames=200", "num_eval_episodes=0",
    "save_snapshot=false", "eval_every_frames=100000000", "progress=false",
]


def _run_fps(run_dir: Path) -> float:
    """Mean frames/s of a run's training episodes after the first (start-up excluded)."""
    with (run_dir / "train.csv").open() as f:
        fps = [float(row["fps"]) for row in csv.DictReader(f)][1:]
    return sum(fps) / max(len(fps), 1)


def side_by_side(frames: int, overrides: list[str]) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}  # the defaults are under test
    with tempfile.TemporaryDirectory() as tmp:

        def launch(name: str) -> tuple[subprocess.Popen, Path]:
            out = Path(tmp) / name
            cmd = [sys.executable, str(ROOT / "train.py"), *SIDE_BY_SIDE,
                   f"num_train_frames={frames}", f"hydra.run.dir={out}", *overrides]
            return subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True), out

        def finish(jobs: list[tuple[subprocess.Popen, Path]]) -> list[float]:
            for proc, _ in jobs:
                _, err = proc.communicate()
                if proc.returncode != 0:
                    raise SystemExit(f"train.py failed:\n{err[-2000:]}")
            return [_run_fps(out) for _, out in jobs]

        (alone,) = finish([launch("alone")])
        pair = finish([launch("a"), launch("b")])
    print(f"one run alone             : {alone:6.1f} frames/s")
    for name, fps in zip("ab", pair):
        print(f"run {name} beside the other  : {fps:6.1f} frames/s = {fps / alone:.2f}x of one "
              "run alone (target >= 0.4)")


LM_RUN = [*BASE[:3], "device=cpu", "progress=false", "num_eval_episodes=0",
          "save_snapshot=false", "save_buffer=false", "eval_every_frames=100000000",
          "env_spec.length=100"]


def _last_lm_row(run_dir: Path) -> dict[str, str]:
    path = run_dir / "lm.csv"
    if not path.exists():
        return {}
    with path.open() as f:
        rows = list(csv.DictReader(f))
    return rows[-1] if rows else {}


def lm_cost(frames: int, lm_url: str | None, overrides: list[str]) -> None:
    server = None
    with tempfile.TemporaryDirectory() as tmp:
        if lm_url is None:
            from ellm_tools.serve import wait_until_ready

            port = _free_port()
            lm_url = f"http://127.0.0.1:{port}/v1"
            server = subprocess.Popen(
                [sys.executable, "-m", "ellm_tools.serve", "--port", str(port),
                 "--cache-dir", str(Path(tmp) / "models")],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            wait_until_ready(lm_url, timeout=300, process=server)
        llm = ["env_spec.lm_spec.lm_class=GPTLanguageModel", f"env_spec.lm_spec.base_url={lm_url}"]
        runs = {"oracle": ["env_spec.lm_spec.lm_class=SimpleOracle"],
                "LLM, blocking": llm,
                "LLM, non-blocking": [*llm, "env_spec.lm_spec.blocking=false"]}
        results = {}
        try:
            for i, (name, extra) in enumerate(runs.items()):
                out = Path(tmp) / f"run{i}"
                env = {**os.environ, "ELLM_CACHE_DIR": str(Path(tmp) / f"cache{i}")}
                cmd = [sys.executable, str(ROOT / "train.py"), *LM_RUN, *extra,
                       f"num_train_frames={frames}", f"num_seed_frames={frames + 1}",
                       f"hydra.run.dir={out}", *overrides]
                proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True,
                                      check=False)
                if proc.returncode != 0:
                    raise SystemExit(f"train.py ({name}) failed:\n{proc.stderr[-2000:]}")
                results[name] = (_run_fps(out), _last_lm_row(out))
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=30)
    oracle_fps = results["oracle"][0]
    for name, (fps, lm) in results.items():
        line = f"{name:18s}: {fps:6.1f} frames/s = {fps / oracle_fps:.2f}x the oracle's"
        if name != "oracle":
            line += (f"; {float(lm.get('api_calls', 0)):.0f} LM calls for "
                     f"{float(lm.get('queries', 0)):.0f} queries")
            if "fallback_steps" in lm:
                line += (f", {float(lm['fallback_steps']):.0f} steps on fallback goals, "
                         f"{float(lm['wait_seconds']):.0f} s waited")
        if name == "LLM, non-blocking":
            line += " (target >= 0.8x)"
        print(line)


def serve_slots(slots: int, requests: int) -> None:
    import json
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    from ellm_tools.serve import wait_until_ready

    things = ["a tree", "a cow", "water", "stone", "a zombie", "a table", "grass", "sand",
              "a skeleton", "coal", "iron", "a furnace", "lava", "a plant", "a diamond", "a path"]
    prompts = [f"You see {things[i % len(things)]} and {things[(i * 7 + 3) % len(things)]}. "
               f"The best thing to do next is to" for i in range(requests)]
    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        for parallel, threads in ((1, slots), (slots, 1)):
            port = _free_port()
            url = f"http://127.0.0.1:{port}/v1"
            server = subprocess.Popen(
                [sys.executable, "-m", "ellm_tools.serve", "--port", str(port), "--parallel",
                 str(parallel), "--threads", str(threads), "--n-ctx", "512",
                 "--cache-dir", str(Path(tmp) / "models")],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            try:
                wait_until_ready(url, timeout=300, process=server)

                def complete(prompt: str, url: str = url) -> str:
                    body = json.dumps({"prompt": prompt, "max_tokens": 32,
                                       "temperature": 0}).encode()
                    request = urllib.request.Request(f"{url}/completions", data=body,
                                                     headers={"Content-Type": "application/json"})
                    with urllib.request.urlopen(request, timeout=600) as response:
                        return json.load(response)["choices"][0]["text"]

                complete("Warm-up.")
                start = time.perf_counter()
                with ThreadPoolExecutor(requests) as pool:
                    list(pool.map(complete, prompts))
                rates[(parallel, threads)] = requests / (time.perf_counter() - start)
            finally:
                server.terminate()
                server.wait(timeout=30)
    one, many = rates[(1, slots)], rates[(slots, 1)]
    print(f"1 slot x {slots} threads : {one:5.2f} answers/s ({requests} concurrent requests)")
    print(f"{slots} slots x 1 thread  : {many:5.2f} answers/s = {many / one:.2f}x one slot")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
        from ellm_tools.bench_craftax import craftax_bench

        if args.seeds < 1 or args.chunks < 1:
            parser.error("--craftax needs --seeds >= 1 and --chunks >= 1")
        craftax_bench(args.seeds, args.chunks, args.frames, args.overrides)
        return
    if args.late:
        from ellm_tools.bench_late import late_phase, report

        if args.rounds < 1 or args.prefill < 0 or args.frames < 1:
            parser.error("--late needs --rounds >= 1, --prefill >= 0 and --frames >= 1")
        report(late_phase(args.frames, args.rounds, args.prefill, args.overrides), args.frames)
        return
    if args.actors:
        from ellm_tools.bench_actors import actors_bench

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


def loop_costs(frames: int, updates: int, overrides: list[str]) -> None:
    """Measure (1)-(3) of the module docstring in one workspace and print them."""
    with tempfile.TemporaryDirectory() as tmp:
        # 1. no updates: seed frames cover the whole phase
        ws = _workspace(overrides + [f"num_train_frames={frames}",
                                     f"num_seed_frames={frames + 1}"], Path(tmp) / "a")
        ws.train()  # warm-up: JIT, SBERT and caption caches
        start = time.perf_counter()
        _train_more(ws, 2 * frames)
        env_before = (time.perf_counter() - start) / frames
        stored = ws.storage.num_transitions
        disk = sum(p.stat().st_size for p in (Path(tmp) / "a" / "buffer").glob("*.npz"))
        ram = ram_bytes_per_transition(Path(tmp) / "a" / "buffer", ws.cfg.nstep)

        # 2. updates alone, batches from the loader over the data just collected
        batches = iter(ws.loader)
        ws.agent.update(next(batches), 0)
        start = time.perf_counter()
        for i in range(updates):
            ws.agent.update(next(batches), i)
        update_cost = (time.perf_counter() - start) / updates

        # 3. the full loop, updates on
        every = ws.cfg.agent.update_every_steps
        ws.cfg.num_seed_frames = 0
        _train_more(ws, 3 * frames)  # the first batches pay worker start-up
        start = time.perf_counter()
        _train_more(ws, 4 * frames)
        loop_fps = frames / (time.perf_counter() - start)

        # 4. no updates again: the env cost falls as caption and SBERT caches warm up, so the
        # loop is compared with the mean of the costs measured before and after it
        ws.cfg.num_seed_frames = 10**12
        start = time.perf_counter()
        _train_more(ws, 5 * frames)
        env_after = (time.perf_counter() - start) / frames
    env_cost = (env_before + env_after) / 2
    bound = 1.0 / (env_cost + update_cost / every)
    print(f"env step (loop without updates): {1e3 * env_cost:7.2f} ms/frame "
          f"({1 / env_cost:6.1f} frames/s; {1e3 * env_before:.2f} before the loop, "
          f"{1e3 * env_after:.2f} after)")
    print(f"update (sample + DQN update)   : {1e3 * update_cost:7.2f} ms/update")
    print(f"bound, one update per {every} frames: {bound:6.1f} frames/s")
    print(f"full loop                      : {loop_fps:6.1f} frames/s = {loop_fps / bound:.2f} "
          f"of the bound (target >= 0.8)")
    print(f"stored transitions: {stored}; on disk {disk / stored:.0f} B/transition (compressed); "
          f"in a sampler's RAM {ram:.0f} B/transition")


def ram_bytes_per_transition(replay_dir: Path, nstep: int) -> float:
    """Array bytes per transition a sampler holds for the episodes in ``replay_dir``."""
    from ellm.replay.sampling import EpisodeShard
    from ellm.replay.storage import list_episode_files, load_episode

    shard = EpisodeShard(capacity=2**62, nstep=nstep, clip_reward=True)
    for f in list_episode_files(replay_dir):
        shard.add(f.index, load_episode(f.path))
    return shard.nbytes / max(shard.num_transitions, 1)


if __name__ == "__main__":
    main()
