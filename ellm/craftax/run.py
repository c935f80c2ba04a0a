"""A Craftax run on the host: the compiled loop called chunk by chunk; between chunks, each seed's
records (docs/craftax.md), the LLM's answers, evaluations and snapshots."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ellm.conf import resumes
from ellm.craftax.loop import Engine, SeedState, Tables, stack_seeds, to_host
from ellm.craftax.options import MAX_SEEDS, CraftaxSpec
from ellm.craftax.pqn import QNetwork
from ellm.craftax.snapshot import (
    SNAPSHOT,
    leaf_shape,
    load_params,
    load_snapshot,
    read_meta,
    save_snapshot,
    snapshot_file,
)
from ellm.games.craftax import goals as G
from ellm.games.craftax.game import (
    ACHIEVEMENTS,
    StatsWriter,
    crafter_score,
    describe,
    make,
    success_rates,
)
from ellm.games.craftax.reward import reward_table
from ellm.run.checkpoint import CheckpointError
from ellm.run.command_line import write_record
from ellm.run.config import redacted
from ellm.run.logger import Logger

log = logging.getLogger("ellm")
NOT_WAKE_UP = [i for i, name in enumerate(ACHIEVEMENTS) if name != "wake_up"]
MAX_RECORD_BYTES = 1 << 20  # a run's config.json read for its commit at most
MAX_ASKS_PER_CHUNK = 4096  # new captions sent to the LLM between two chunks at most


class CraftaxRun:
    """``python train.py env_spec.name=Craftax-Classic-v1 method=...``: see docs/craftax.md."""

    def __init__(self, spec: CraftaxSpec, run_dir: Path) -> None:
        self.spec, self.run_dir, basics = spec, Path(run_dir), spec.basics
        self.env = make(spec.env_id, spec.length)
        self.resumed = resumed = resumes(basics.snapshot_path, basics.finetune_snapshot)
        if resumed and not (self.run_dir / SNAPSHOT).exists():
            raise CheckpointError(f"snapshot_path={basics.snapshot_path}: no {SNAPSHOT} in "
                                  f"{self.run_dir} to resume (a Craftax run dir holds one)")
        self.pretrained = self._pretrained(resumed)
        if self.pretrained and self.pretrained["goal_input"]:
            self.spec = replace(self.spec, loop=replace(self.spec.loop, goal_input=True))
        spec = self.spec
        self.engine = Engine(self.env, spec.loop)
        self.table = G.GoalTable(spec.options.goal_table_size)
        self.suggester = self._suggester()
        self.tables = self._tables()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.frame = 0
        states = stack_seeds([strong(self.engine.init(jax.random.PRNGKey(seed),
                                                      self.tables.goal_emb.shape[1]))
                              for seed in spec.seeds])
        if self.pretrained and not resumed:
            # Weights only: a fresh optimiser, epsilon schedule and worlds, as from scratch.
            states = states._replace(params=load_params(
                Path(self.pretrained["snapshot"]), states.params, spec.seeds,
                self.pretrained["seeds"]))
            log.info("finetuning the weights of %s (%s, frame %d per seed)",
                     self.pretrained["snapshot"], self.pretrained["method"],
                     self.pretrained["frame"])
        self.lm_counts = {"fallback_steps": 0.0, "steps": 0.0, "oov_goals": 0.0,
                          "answers": 0.0}
        if resumed:
            states, self.frame, extra = load_snapshot(self.run_dir / SNAPSHOT, states,
                                                      self.record())
            self.lm_counts.update(extra.get("lm_counts", {}))
            if "goal_keys" in extra:
                self.table.load({"keys": extra["goal_keys"], "masks": extra["goal_masks"]})
                self.tables = self.tables._replace(goal_table=self.table.arrays())
            log.info("resuming %s from its snapshot at frame %d per seed", self.run_dir,
                     self.frame)
        self.states = shard_seeds(states)
        write_record(self.run_dir, self.record())
        keep = self.frame if resumed else None
        self.seed_dirs = [self.run_dir / f"seed{seed}" for seed in spec.seeds]
        self.loggers, self.train_stats, self.eval_stats = [], [], []
        for seed, path in zip(spec.seeds, self.seed_dirs, strict=True):
            path.mkdir(exist_ok=True)
            write_record(path, self.record(seed))
            self.loggers.append(Logger(path, use_tb=basics.use_tb, use_wandb=basics.use_wandb,
                                       wandb_config=self.record(seed),
                                       wandb_name=f"{basics.exp_name}-seed{seed}",
                                       resumed_at=keep, reinit=len(spec.seeds) > 1))
            self.train_stats.append(StatsWriter(path / "train" / "stats.jsonl", keep))
            self.eval_stats.append(StatsWriter(path / "eval" / "stats.jsonl", keep))
        self.compile_s = 0.0
        self.train_seconds, self.frames_trained = 0.0, 0

    # -- pieces ------------------------------------------------------------------------------
    def _suggester(self):
        if self.spec.goal_source != "llm":
            return None
        from ellm.lm import build_suggester

        spec = dict(self.spec.lm)
        if spec.get("blocking", True):
            # A chunk never waits for the LLM; between chunks, neither does the host.
            log.info("the Craftax engine asks the LLM non-blocking (env_spec.lm_spec.blocking "
                     "is not read): captions without an answer use fallback goals meanwhile")
        spec["blocking"] = False
        return build_suggester(spec, all_goals=G.GOALS,
                               paper_setting=self.spec.loop.paper_setting,
                               goal_vocabulary=G.GOALS)

    def _pretrained(self, resumed: bool) -> dict[str, Any] | None:
        """Where a finetuned run's weights came from (a resumed one's record keeps it)."""
        if resumed:
            return read_meta(self.run_dir / SNAPSHOT)["record"].get("pretrained")
        if not self.spec.finetune_from:
            return None
        path = snapshot_file(self.spec.finetune_from)
        meta = read_meta(path)
        then = meta["record"]
        seeds = then.get("seeds_trained_together")
        if then.get("engine") != "craftax" or not (
                isinstance(seeds, list) and 0 < len(seeds) <= MAX_SEEDS
                and all(isinstance(s, int) for s in seeds)):
            raise CheckpointError(f"snapshot_path={self.spec.finetune_from}: {path} was not "
                                  "written by a Craftax run")
        width = self._goal_width(path)
        return {"snapshot": str(path.resolve()), "method": then.get("method"),
                "goal_source": then.get("goal_source"),
                "env": (then.get("env_spec") or {}).get("name"), "frame": meta.get("frame"),
                "code_commit": then.get("code_commit") or recorded_commit(path.parent),
                "seeds": seeds,
                "goal_input": width > 0, "goal_dim": width}

    def _goal_width(self, path: Path) -> int:
        """The goal input's width in the snapshot's network (0: none; 384 in early runs, 24 after):
        its first layer's inputs beyond the observation's."""
        opts, obs = self.spec.options, self.env.obs_size
        net = QNetwork(self.env.num_actions, opts.hidden, opts.layers)
        leaves = jax.tree_util.tree_leaves(net.init(jax.random.PRNGKey(0), jnp.zeros((1, obs))))
        first = next(i for i, x in enumerate(leaves) if x.shape == (obs, opts.hidden))
        shape = leaf_shape(path, first)
        if len(shape) != 3 or shape[2] != opts.hidden or not obs <= shape[1] <= obs + 4096:
            raise CheckpointError(f"{path}: its network's first layer is {list(shape)}, not "
                                  f"[seeds, {obs} + goal width, {opts.hidden}]: finetune with "
                                  "the pretrained run's craftax.hidden and craftax.layers")
        return int(shape[1]) - obs

    def _tables(self) -> Tables:
        """The goals' embeddings and the reward table, with the torch engine's SBERT model."""
        uses_goals = self.spec.goal_source is not None
        if uses_goals:
            from ellm.embed import SentenceEmbedder

            embedder = SentenceEmbedder(self.spec.basics.sbert_model, device="cpu")
            goal_emb = embedder.embed(list(G.GOALS)).astype(np.float32)
            # Shown goals' mean embeddings all lie in the span of the 24 goals: coordinates in an
            # orthonormal basis of it keep every distance, in 24 numbers instead of 384.
            basis, _ = np.linalg.qr(goal_emb.T)
            goal_emb = goal_emb @ basis
            reward = reward_table(embedder, self.spec.threshold)
        else:
            # A goal-conditioned agent finetuned on the game's reward sees no goal: zeros.
            width = self.pretrained.get("goal_dim", len(G.GOALS)) \
                if self.spec.loop.goal_input else 1
            goal_emb = np.zeros((len(G.GOALS), width), np.float32)
            reward = np.zeros((1, len(G.GOALS)), np.float32)
        return Tables(self.table.arrays(), jnp.asarray(reward), jnp.asarray(goal_emb))

    def record(self, seed: int | None = None) -> dict[str, Any]:
        """What the run is: its config without secrets, its method, game and engine."""
        config = redacted(self.spec.cfg)
        config.pop("agent", None)  # the torch engine's DQN: not what this run trains
        if seed is not None:
            config["seed"] = seed
            config["seeds"] = 1
        out = {**config, "method": self.spec.method, "game": "craftax", "engine": "craftax",
               "goal_source": self.spec.goal_source, "seeds_trained_together":
               list(self.spec.seeds)}
        if self.pretrained:
            out["pretrained"] = self.pretrained
        return out

    # -- the loop ------------------------------------------------------------------------------
    def train(self) -> None:
        spec, opts = self.spec, self.spec.options
        per_chunk = opts.updates_per_chunk * opts.num_envs * opts.num_steps
        chunk = self.engine.make_chunk(opts.updates_per_chunk)
        evaluate = self.engine.make_evaluate(max(spec.eval_episodes, 1), spec.length)
        compiled = None
        # A snapshot follows an evaluation: a resumed run has evaluated its frame already.
        next_eval = self.frame + spec.eval_every if self.resumed else 0
        last_line = 0.0
        while True:
            if spec.eval_episodes and self.frame >= next_eval:
                self._evaluate(evaluate)
                next_eval += spec.eval_every
                self._snapshot()
            if self.frame >= spec.frames:
                break
            if compiled is None:  # not before it is needed: a run with nothing left only evaluates
                start = time.monotonic()
                compiled = chunk.lower(self.states, self.tables).compile()
                self.compile_s = time.monotonic() - start
                log.info("compiled the training chunk in %.1f s (%d updates, %d frames per seed)",
                         self.compile_s, opts.updates_per_chunk, per_chunk)
            t0 = time.monotonic()
            self.states, (metrics, records) = compiled(self.states, self.tables)
            metrics, records = to_host((metrics, records))
            seconds = time.monotonic() - t0
            self.train_seconds += seconds
            self.frames_trained += per_chunk
            before, self.frame = self.frame, self.frame + per_chunk
            self._write_train(metrics, records, before, per_chunk / seconds * len(spec.seeds))
            self._ask(records)
            if spec.basics.progress and (time.monotonic() - last_line
                                         >= spec.basics.progress_every_s):
                last_line = time.monotonic()
                log.info("[craftax %s] frame %d/%d per seed x %d seeds, %.0f frames/s",
                         spec.method, self.frame, spec.frames, len(spec.seeds),
                         self.frames_per_s)
        self._snapshot()
        self.close()

    @property
    def frames_per_s(self) -> float:
        """Frames per second this process trained, all seeds together, compile excluded."""
        done = self.frames_trained * len(self.spec.seeds)
        return done / self.train_seconds if self.train_seconds else 0.0

    def _write_train(self, metrics, records, before: int, fps: float) -> None:
        opts = self.spec.options
        n, t = opts.num_envs, opts.num_steps
        for i, (logger, stats) in enumerate(zip(self.loggers, self.train_stats, strict=True)):
            rec = {k: v[i] for k, v in records.items()}
            done = rec["done"]  # [K, T, N]
            frames = before + (np.arange(done.shape[0])[:, None] * t
                               + np.arange(t)[None, :] + 1) * n  # frame at each step's end
            episodes = []
            for k, step, env in zip(*np.nonzero(done), strict=True):
                episodes.append(episode_row(rec["achievements"][k, step, env],
                                            rec["length"][k, step, env],
                                            rec["ep_extrinsic"][k, step, env],
                                            rec["coverage"][k, step, env],
                                            int(frames[k, step])))
                stats.write(compact(episodes[-1]))
            row = {f"train/{k}": float(np.mean(v[i])) for k, v in metrics.items()
                   if k not in ("goal_hits", "fallback_steps")}
            row["train/fps"] = fps
            row["train/goal_hits"] = float(np.sum(metrics["goal_hits"][i]))
            if episodes:
                row["train/episodes"] = float(len(episodes))
                row["train/achievements"] = float(np.mean([e["achievements"] for e in episodes]))
                row["train/episode_length"] = float(np.mean([e["length"] for e in episodes]))
                row["train/game_return"] = float(np.mean([e["reward"] for e in episodes]))
                row["train/goal_return"] = float(np.mean(
                    rec["ep_goal"][np.nonzero(done)]))
            logger.log(row, self.frame)
        if self.spec.goal_source == "llm":
            fell = float(records["fallback"].sum())
            self.lm_counts["fallback_steps"] += fell
            self.lm_counts["steps"] += float(records["fallback"].size)
            self._log_lm()

    def _log_lm(self) -> None:
        metrics = dict(self.suggester.metrics())
        counts = self.lm_counts
        row = {f"lm/{k}": float(v) for k, v in metrics.items()}
        row.update({"lm/fallback_steps": counts["fallback_steps"],
                    "lm/fallback_share": counts["fallback_steps"] / max(counts["steps"], 1.0),
                    "lm/table_entries": float(self.table.entries),
                    "lm/oov_goals": counts["oov_goals"]})
        for logger in self.loggers:
            logger.log(row, self.frame)

    def _ask(self, records) -> None:
        """Ask the LLM about the captions that fell back; answers fill the goal table."""
        if self.suggester is None:
            return
        from ellm.games.crafter.state import TextState

        keys = records["lm_key"][records["fallback"]]
        if not len(keys):
            return
        changed = False
        client = getattr(self.suggester, "client", None)
        for key in np.unique(keys, axis=0)[:MAX_ASKS_PER_CHUNK]:
            if tuple(key) in self.table:
                continue
            text = describe(G.key_features(key), 1 if self.spec.loop.paper_setting else 2)
            state = TextState(caption=text["caption"], inventory=text["inventory"],
                              status=text["status"])
            fell_before = getattr(self.suggester, "fallback_steps", 0)
            errors_before = client.counters.api_errors if client is not None else 0
            goals = self.suggester.raw_goals(state)
            if getattr(self.suggester, "fallback_steps", 0) > fell_before:
                continue  # asked in the background: a later chunk reads the answer
            if client is not None and client.counters.api_errors > errors_before:
                continue  # no answer: asked again at the caption's next visit
            indices, outside = G.goal_indices(goals)
            self.lm_counts["oov_goals"] += outside
            self.lm_counts["answers"] += 1
            changed |= self.table.put(tuple(int(k) for k in key), indices)
        if changed:
            self.tables = self.tables._replace(goal_table=self.table.arrays())

    def _evaluate(self, evaluate) -> None:
        spec = self.spec
        keys = jnp.stack([jax.random.fold_in(jax.random.PRNGKey(seed), self.frame)
                          for seed in spec.seeds])
        out, lm = to_host(evaluate(self.states, self.tables, keys))
        for i, (logger, stats) in enumerate(zip(self.loggers, self.eval_stats, strict=True)):
            episodes = [episode_row(out["achievements"][i, e], out["length"][i, e],
                                    out["ep_extrinsic"][i, e], out["coverage"][i, e],
                                    self.frame) for e in range(spec.eval_episodes)]
            for ep in episodes:
                stats.write(ep)
            logger.log(eval_metrics(episodes, out["ep_goal"][i]), self.frame)
        if self.spec.goal_source == "llm":
            self._ask(lm)

    def _snapshot(self) -> None:
        if not self.spec.basics.save_snapshot:
            return
        extra = {"lm_counts": self.lm_counts}
        if self.spec.goal_source == "llm":
            extra.update(goal_keys=self.table.keys, goal_masks=self.table.masks)
        save_snapshot(self.run_dir / SNAPSHOT, self.states, self.frame, self.record(), extra)

    def close(self) -> None:
        if self.suggester is not None:
            self.suggester.close()
            self._log_lm()
        for logger in self.loggers:
            logger.close()

    def closing_message(self) -> str:
        spec = self.spec
        lines = [(f"Craftax run done: {spec.method} on {spec.env_id}, {len(spec.seeds)} seed(s) "
                  f"x {self.frame} frames, {self.frames_per_s:.0f} training frames/s (compile "
                  f"{self.compile_s:.0f} s excluded)"), f"records: {self.run_dir}/seed*/"]
        if self.suggester is not None:
            m = self.suggester.metrics()
            share = self.lm_counts["fallback_steps"] / max(self.lm_counts["steps"], 1.0)
            lines.append(f"LM: {m.get('api_calls', 0):.0f} calls, {m.get('cache_hits', 0):.0f} "
                         f"cache hits, ${m.get('dollars', 0.0):.4f}; {share:.1%} of steps ran on "
                         f"fallback goals; {self.table.entries} captions in the goal table")
        lines.append(f"compare seeds and methods: python -m ellm_tools.report {self.run_dir}")
        return "\n".join(lines)


def recorded_commit(run_dir: Path) -> str | None:
    """The code commit a run dir's ``config.json`` names (None if it names none)."""
    path = run_dir / "config.json"
    try:
        if path.stat().st_size > MAX_RECORD_BYTES:
            return None
        commit = json.loads(path.read_text()).get("code_commit")
    except (OSError, ValueError, AttributeError):
        return None
    return commit if isinstance(commit, str) and len(commit) <= 64 else None


def episode_row(achieved, length, extrinsic, coverage, frame: int) -> dict[str, Any]:
    """One episode in Crafter's ``stats.jsonl`` format, with what ended it counted."""
    row = {"length": int(length), "reward": round(float(extrinsic), 1),
           **{f"achievement_{name}": int(bool(a)) for name, a in zip(ACHIEVEMENTS, achieved,
                                                                     strict=True)},
           "coverage": int(coverage), "frame": int(frame)}
    row["achievements"] = int(np.sum(achieved))
    return row


def compact(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` without its achievements at 0 (readers take a missing one as 0): a million
    training frames write thousands of episodes per seed."""
    return {k: v for k, v in row.items() if not (k.startswith("achievement_") and v == 0)}


def eval_metrics(episodes: list[dict[str, Any]], goal_returns) -> dict[str, float]:
    """``eval/`` and ``achievements/`` metrics of a set of episodes."""
    rates = success_rates(episodes)
    without = [e["achievements"] - e["achievement_wake_up"] for e in episodes]
    return {
        "eval/episode_reward": float(np.mean([e["achievements"] for e in episodes])),
        "eval/achievements_without_wake_up": float(np.mean(without)),
        "eval/score": crafter_score(rates),
        "eval/coverage": float(np.mean([e["coverage"] for e in episodes])),
        "eval/episode_length": float(np.mean([e["length"] for e in episodes])),
        "eval/game_return": float(np.mean([e["reward"] for e in episodes])),
        "eval/goal_return": float(np.mean(goal_returns)),
        **{f"achievements/{name}": rate for name, rate in rates.items()},
    }


def strong(tree):
    """``tree`` with no weakly typed leaf, so the first compiled call returns what it takes."""
    return jax.tree_util.tree_map(lambda x: jnp.array(x, dtype=jnp.asarray(x).dtype), tree)


def shard_seeds(states: SeedState) -> SeedState:
    """The seeds spread over the devices JAX sees (GSPMD partitions the vmapped loop)."""
    devices = jax.devices()
    seeds = jax.tree_util.tree_leaves(states)[0].shape[0]
    count = max(d for d in range(1, len(devices) + 1) if seeds % d == 0)
    if count == 1:
        return states
    mesh = jax.sharding.Mesh(np.array(devices[:count]), ("seed",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("seed"))
    log.info("%d seeds sharded over %d devices", seeds, count)
    return jax.device_put(states, sharding)

