"""What the replay benches sample: real Crafter episodes written as a run writes them, their
files tiled up to a size, and the sampling settings the benches share."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from ellm.replay.storage import (
    EpisodeStart,
    ReplayStorage,
    Row,
    episode_filename,
    list_episode_files,
)
from ellm.replay.strings import StringTable

GAMMA, NSTEP, STACK, BATCH = 0.99, 3, 4, 64


def crafter_frames(length: int, seed: int) -> list[np.ndarray]:
    """One random-action Crafter episode as 84x84 grayscale frames (64x64 render, resized)."""
    import crafter
    from PIL import Image

    env = crafter.Env(size=(64, 64), length=length, seed=seed)
    rgb = [env.reset()]
    rng = np.random.default_rng(seed)
    while len(rgb) <= length:
        obs, _, done, _ = env.step(int(rng.integers(env.action_space.n)))
        rgb.append(obs)
        if done:
            rgb.append(env.reset())  # keep going: only the pixels matter here
    gray = [Image.fromarray(x).convert("L").resize((84, 84), Image.BILINEAR) for x in rgb]
    return [np.asarray(g, np.uint8) for g in gray[: length + 1]]


def write_crafter_episodes(d: Path, episodes: int, length: int) -> tuple[int, float]:
    """Write ``episodes`` random-action Crafter episodes; (transitions, seconds storing them)."""
    storage = ReplayStorage(d, StringTable(d / "strings.jsonl"))
    write_s = 0.0
    for ep in range(episodes):
        frames = crafter_frames(length, seed=ep)
        t = time.perf_counter()
        storage.add_first(EpisodeStart(frames[0], f"text {ep} 0", "goal"))
        for i, f in enumerate(frames[1:], 1):
            storage.add(Row(f, i % 17, 0.1, 1.0, f"text {ep} {i % 50}", "goal", i == length))
        write_s += time.perf_counter() - t
    return storage.num_transitions, write_s


def tile_episodes(replay_dir: Path, transitions: int) -> int:
    """Hard-link the episode files under new indices until they hold ``transitions``."""
    files = list_episode_files(replay_dir)
    if not files:
        raise ValueError(f"no episode files in {replay_dir} to tile")
    held, index, i = sum(f.length for f in files), files[-1].index + 1, 0
    while held < transitions:
        f = files[i % len(files)]
        os.link(f.path, replay_dir / episode_filename(index, f.length))
        held, index, i = held + f.length, index + 1, i + 1
    return held
