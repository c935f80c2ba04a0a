"""``python -m ellm_tools.bench --craftax``: the Craftax engine's training frames/s against the
torch engine's Text-Crafter loop, measured in one process, one after the other (docs/craftax.md).
"""

from __future__ import annotations

import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import jax

from ellm_tools.bench.common import BASE, compose, run_fps, workspace


def craftax_fps(method: str, seeds: int, chunks: int, overrides: list[str]) -> dict[str, float]:
    from ellm.craftax.loop import to_host
    from ellm.craftax.options import parse_spec
    from ellm.craftax.run import CraftaxRun

    cfg = compose(["env_spec.name=Craftax-Classic-v1", f"method={method}", f"seeds={seeds}",
                   "use_tb=false", "use_wandb=false", "save_snapshot=false", *overrides])
    with tempfile.TemporaryDirectory() as tmp:
        run = CraftaxRun(parse_spec(cfg), Path(tmp))
        opts = run.spec.options
        chunk = run.engine.make_chunk(opts.updates_per_chunk)
        start = time.monotonic()
        compiled = chunk.lower(run.states, run.tables).compile()
        compile_s = time.monotonic() - start
        states = run.states
        states, out = compiled(states, run.tables)
        to_host(out)  # warm-up: the first call allocates
        start = time.monotonic()
        for _ in range(chunks):
            states, out = compiled(states, run.tables)
            to_host(out)
        seconds = time.monotonic() - start
        run.close()
    frames = chunks * opts.updates_per_chunk * opts.num_envs * opts.num_steps * seeds
    return {"frames_per_s": frames / seconds, "compile_s": compile_s, "frames": frames,
            "seconds": seconds}


def torch_fps(frames: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        overrides = [*BASE, f"num_train_frames={frames}", "num_seed_frames=200",
                     "replay_buffer_num_workers=0", "env_spec.length=200"]
        ws = workspace(overrides, Path(tmp))
        ws.train()
        return run_fps(Path(tmp))


def craftax_bench(seeds: int, chunks: int, frames: int, overrides: list[str]) -> dict:
    results = {}
    for method in ("ellm", "rnd"):
        results[method] = craftax_fps(method, seeds, chunks, overrides)
        print(f"Craftax {method}: {results[method]['frames_per_s']:.0f} training frames/s "
              f"({seeds} seeds, {results[method]['frames']} frames in "
              f"{results[method]['seconds']:.1f} s), compile {results[method]['compile_s']:.1f} s",
              flush=True)
    torch = torch_fps(frames)
    print(f"torch Text-Crafter ELLM-oracle loop: {torch:.1f} training frames/s", flush=True)
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    line = {"method": "ellm", "device": jax.default_backend(),
            "craftax_frames_per_s": round(results["ellm"]["frames_per_s"], 1),
            "rnd_frames_per_s": round(results["rnd"]["frames_per_s"], 1),
            "torch_frames_per_s": round(torch, 2),
            "ratio": round(results["ellm"]["frames_per_s"] / torch, 1),
            "compile_s": round(results["ellm"]["compile_s"], 1),
            "rss_mib": round(rss_mib, 0), "seeds": seeds}
    print(json.dumps(line))
    return line


if __name__ == "__main__":
    sys.exit("run it as: python -m ellm_tools.bench --craftax [--seeds 5] [--chunks 4]")
