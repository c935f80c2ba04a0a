"""What a real language model costs the loop (``python -m ellm_tools.bench --lm``), and the local
LLM server's answers/s with one slot against several (``--slots N``)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ellm_tools.bench.common import BASE, ROOT, run_fps

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
                results[name] = (run_fps(out), _last_lm_row(out))
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
