"""The compiled training step of one seed (rollout with goals and rewards, then PQN's update);
``vmap`` runs the seeds side by side, ``scan`` chains updates into a chunk."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ellm.craftax.bonus import Bonus
from ellm.craftax.pqn import Batch, PQNConfig, QNetwork, epsilon, lambda_returns, optimizer, update
from ellm.games.craftax import goals as G
from ellm.games.craftax.game import Caption, CraftaxEnv
from ellm.games.craftax.reward import goal_reward


@dataclass(frozen=True)
class LoopConfig:
    """What one method needs of the loop (static: each choice compiles its own loop)."""

    goal_source: str | None    # oracle | llm | novelty | None
    bonus: str | None          # rnd | noveld | e3b | None
    goal_weight: float
    bonus_weight: float
    extrinsic_weight: float
    learns: bool               # False: uniform random actions, no update
    paper_setting: bool
    num_envs: int
    num_steps: int
    eps_start: float
    eps_end: float
    eps_decay_frames: float
    eval_epsilon: float
    reset_worlds: int
    pqn: PQNConfig
    # The network takes a goal embedding although no goal source shows one (it is zero): a
    # goal-conditioned agent finetuned on the game's reward.
    goal_input: bool = False


class SeedState(NamedTuple):
    """Everything one seed carries from step to step (also what a snapshot holds)."""

    params: Any
    opt_state: Any
    bonus: Any
    env_state: Any
    obs: jax.Array
    cap: Caption
    achieved: jax.Array     # bool[N, G]: goals achieved this episode (no longer shown)
    last_goals: jax.Array   # bool[N, G]: the LLM's latest answered goals this episode
    visited: jax.Array      # bool[N, H, W]: cells stood on this episode
    cov_inv: jax.Array      # E3B's inverse covariance this episode
    ep_goal: jax.Array
    ep_bonus: jax.Array
    ep_extrinsic: jax.Array
    frame: jax.Array
    key: jax.Array


class Tables(NamedTuple):
    """The constants the loop reads."""

    goal_table: G.TableArrays
    reward: jax.Array       # float[PHRASES, GOALS]
    goal_emb: jax.Array     # float[GOALS, D]


class Engine:
    """The loop of one method on one game: ``init`` a seed, ``chunk`` of updates, ``evaluate``."""

    def __init__(self, env: CraftaxEnv, cfg: LoopConfig) -> None:
        self.env, self.cfg = env, cfg
        self.net = QNetwork(env.num_actions, cfg.pqn.hidden, cfg.pqn.layers)
        self.tx = optimizer(cfg.pqn)
        self.bonus = Bonus(cfg.bonus, env.obs_size, env.num_actions) if cfg.bonus else None
        self.rules = G.rule_arrays(cfg.paper_setting)
        self.conditioned = cfg.goal_source is not None or cfg.goal_input
        self.map_shape = env.map_shape

    def init(self, key: jax.Array, goal_dim: int) -> SeedState:
        n, g = self.cfg.num_envs, len(G.GOALS)
        k_net, k_bonus, k_env, key = jax.random.split(key, 4)
        obs, env_state, cap = jax.vmap(self.env.reset)(jax.random.split(k_env, n))
        goal = jnp.zeros((1, goal_dim)) if self.conditioned else None
        params = self.net.init(k_net, obs[:1], goal)
        bonus = self.bonus.init(k_bonus) if self.bonus else ()
        cov = Bonus.new_inverse_cov(n) if self.cfg.bonus == "e3b" else jnp.zeros((n, 1, 1))
        zeros = jnp.zeros(n, jnp.float32)
        return SeedState(params, self.tx.init(params), bonus, env_state, obs, cap,
                         jnp.zeros((n, g), bool), jnp.zeros((n, g), bool),
                         jnp.zeros((n, *self.map_shape), bool), cov, zeros, zeros, zeros,
                         jnp.int32(0), key)

    def goals(self, cap: Caption, achieved, last_goals, table: G.TableArrays):
        """(shown goals, last answered goals, fell back?, caption key) of N states."""
        n = achieved.shape[0]
        keys = jax.vmap(G.caption_key)(cap)
        fallback = jnp.zeros(n, bool)
        source = self.cfg.goal_source
        if source == "oracle":
            mask = jax.vmap(G.oracle_mask, (None, 0))(self.rules, cap)
        elif source == "novelty":
            mask = jnp.ones_like(achieved)
        elif source == "llm":
            found, answered = jax.vmap(G.lookup, (None, 0))(table, keys)
            last_goals = jnp.where(found[:, None], answered, last_goals)
            mask, fallback = last_goals, ~found
        else:
            mask = jnp.zeros_like(achieved)
        return mask & ~achieved, last_goals, fallback, keys

    def goal_vector(self, mask: jax.Array, goal_emb: jax.Array) -> jax.Array | None:
        """The shown goals as one embedding: their mean (zero when none is shown)."""
        if not self.conditioned:
            return None
        count = jnp.maximum(mask.sum(-1, keepdims=True), 1)
        return (mask.astype(jnp.float32) @ goal_emb) / count

    def _act(self, params, obs, goal, key, eps):
        q = self.net.apply(params, obs, goal)
        k_explore, k_action = jax.random.split(key)
        n = obs.shape[0]
        explore = jax.random.uniform(k_explore, (n,)) < eps
        random_action = jax.random.randint(k_action, (n,), 0, self.env.num_actions)
        return jnp.where(explore, random_action, jnp.argmax(q, -1)), q.max(-1)

    def _env_step(self, s: SeedState, action, key, mask, e3b: bool = False):
        """Step every env; rewards, goal bookkeeping and episode ends."""
        n = s.obs.shape[0]
        step = jax.vmap(self.env.step)(jax.random.split(key, n), s.env_state, action)
        done = step.terminated | step.truncated
        r_goal, matched, hit = jax.vmap(goal_reward, (None, 0, 0))(self._tables.reward,
                                                                   step.phrase, mask)
        achieved = jax.vmap(G.retire)(s.achieved, matched, hit)
        rows = jnp.arange(n)
        first_visit = ~s.visited[rows, step.position[:, 0], step.position[:, 1]]
        visited = s.visited.at[rows, step.position[:, 0], step.position[:, 1]].set(True)
        coverage = visited.sum((1, 2))
        elliptical = jnp.zeros(n)
        cov_inv = s.cov_inv
        if e3b:
            phi = self.bonus.embed(s.bonus.params, step.obs)
            elliptical, cov_inv = jax.vmap(Bonus.elliptical)(s.cov_inv, phi)
            cov_inv = jnp.where(done[:, None, None], Bonus.new_inverse_cov(n), cov_inv)
        return step, done, r_goal, hit, achieved, first_visit, visited, coverage, elliptical, \
            cov_inv

    def _rollout_step(self, carry, _):
        s, worlds, used, last = carry
        tables, cfg = self._tables, self.cfg
        key, k_act, k_env = jax.random.split(s.key, 3)
        mask, last_goals, fallback, keys = self.goals(s.cap, s.achieved, s.last_goals,
                                                      tables.goal_table)
        goal = self.goal_vector(mask, tables.goal_emb)
        eps = 1.0 if not cfg.learns else epsilon(s.frame, cfg.eps_start, cfg.eps_end,
                                                  cfg.eps_decay_frames)
        action, q_max = self._act(s.params, s.obs, goal, k_act, eps)
        (step, done, r_goal, hit, achieved, first_visit, visited, coverage, elliptical,
         cov_inv) = self._env_step(s, action, k_env, mask, self.cfg.bonus == "e3b")
        keep = ~done
        obs, env_state, cap, used = self.env.restart(step, done, worlds, used)
        out = {
            "obs": s.obs, "goal": goal, "action": action, "final_obs": step.obs,
            "q_max": q_max, "r_goal": r_goal, "r_extrinsic": step.reward, "hit": hit,
            "terminated": step.terminated, "truncated": step.truncated, "done": done,
            "first_visit": first_visit.astype(jnp.float32), "elliptical": elliptical,
            "achievements": step.achievements, "length": step.length, "coverage": coverage,
            "ep_goal": s.ep_goal + r_goal, "ep_extrinsic": s.ep_extrinsic + step.reward,
            "fallback": fallback, "lm_key": keys, "eps": jnp.float32(eps),
        }
        s = s._replace(
            env_state=env_state, obs=obs, cap=cap,
            achieved=achieved & keep[:, None], last_goals=last_goals & keep[:, None],
            visited=visited & keep[:, None, None], cov_inv=cov_inv,
            ep_goal=(s.ep_goal + r_goal) * keep, ep_extrinsic=(s.ep_extrinsic + step.reward) * keep,
            frame=s.frame + s.obs.shape[0], key=key)
        # The observation (and goals) each env was truncated at: with num_steps below the episode
        # limit, at most one per env per rollout, so one forward pass of N rows values them all.
        cut = step.truncated.reshape(-1, 1)
        last = (jnp.where(cut, step.obs, last[0]),
                None if goal is None else jnp.where(cut, goal, last[1]))
        return (s, worlds, used, last), out

    def iteration(self, s: SeedState, _):
        """A rollout of ``num_steps`` steps of every env, then the update."""
        cfg, tables = self.cfg, self._tables
        key, k_worlds = jax.random.split(s.key)
        worlds = self.env.worlds(k_worlds, cfg.reset_worlds)
        empty = (jnp.zeros_like(s.obs), None if not self.conditioned else
                 jnp.zeros((s.obs.shape[0], tables.goal_emb.shape[1])))
        (s, _, _, last), traj = jax.lax.scan(
            self._rollout_step, (s._replace(key=key), worlds, jnp.int32(0), empty), None,
            cfg.num_steps)
        mask, *_ = self.goals(s.cap, s.achieved, s.last_goals, tables.goal_table)
        q_after = self.net.apply(s.params, s.obs, self.goal_vector(mask, tables.goal_emb)).max(-1)
        if cfg.num_steps < self.env.params.max_timesteps:
            q_final = self.net.apply(s.params, *last).max(-1)[None]
        else:  # an env may be truncated twice in one rollout: value every step's observation
            q_final = self.net.apply(s.params, traj["final_obs"], traj["goal"]).max(-1)
        next_q = jnp.concatenate([traj["q_max"][1:], q_after[None]], axis=0)
        next_q = jnp.where(traj["truncated"], q_final, next_q)
        metrics = {"eps": traj["eps"].mean(), "goal_reward": traj["r_goal"].mean(),
                   "extrinsic_reward": traj["r_extrinsic"].mean(),
                   "goal_hits": traj["hit"].sum(), "fallback_steps": traj["fallback"].sum()}
        bonus = jnp.zeros_like(traj["r_goal"])
        if self.bonus is not None:
            raw = self.bonus.raw(s.bonus, traj["obs"], traj["final_obs"], traj["first_visit"],
                                 traj["elliptical"])
            bonus_state, bonus = self.bonus.normalise(s.bonus, raw)
            flat = lambda x: x.reshape(-1, *x.shape[2:])
            bonus_state, metrics["bonus_loss"] = self.bonus.learn(
                bonus_state, flat(traj["obs"]), flat(traj["final_obs"]), flat(traj["action"]))
            s = s._replace(bonus=bonus_state)
            metrics["bonus_raw"] = raw.mean()
        metrics["bonus_reward"] = bonus.mean()
        reward = (cfg.goal_weight * traj["r_goal"] + cfg.bonus_weight * bonus
                  + cfg.extrinsic_weight * traj["r_extrinsic"])
        metrics["intrinsic_reward"] = (cfg.goal_weight * traj["r_goal"]
                                       + cfg.bonus_weight * bonus).mean()
        batch = Batch(traj["obs"], traj["goal"], traj["action"], reward, traj["terminated"],
                      traj["done"], next_q)
        if cfg.learns:
            key, k_update = jax.random.split(s.key)
            targets = lambda_returns(batch, cfg.pqn.gamma, cfg.pqn.lam)
            params, opt_state, metrics["loss"] = update(
                self.net, cfg.pqn, self.tx, s.params, s.opt_state, batch, targets, k_update)
            s = s._replace(params=params, opt_state=opt_state, key=key)
        records = {k: traj[k] for k in ("done", "achievements", "length", "coverage", "ep_goal",
                                        "ep_extrinsic", "fallback", "lm_key")}
        return s, (metrics, records)

    def make_chunk(self, updates: int):
        """``(states, tables) -> (states, (metrics, records))``: ``updates`` iterations."""
        def one_seed(s, tables):
            self._tables = tables
            return jax.lax.scan(self.iteration, s, None, updates)

        return jax.jit(jax.vmap(one_seed, in_axes=(0, None)), donate_argnums=0)

    def make_evaluate(self, episodes: int, length: int):
        """``(states, tables, keys) -> records``: ``episodes`` episodes per seed, each to its end."""
        def one_seed(s: SeedState, tables: Tables, key):
            self._tables = tables
            k_env, key = jax.random.split(key)
            obs, env_state, cap = jax.vmap(self.env.reset)(jax.random.split(k_env, episodes))
            n, g = episodes, len(G.GOALS)
            e = s._replace(
                env_state=env_state, obs=obs, cap=cap, achieved=jnp.zeros((n, g), bool),
                last_goals=jnp.zeros((n, g), bool),
                visited=jnp.zeros((n, *self.map_shape), bool),
                cov_inv=jnp.zeros((n, 1, 1)), ep_goal=jnp.zeros(n), ep_bonus=jnp.zeros(n),
                ep_extrinsic=jnp.zeros(n), key=key)

            def step(carry, _):
                e, finished, rec = carry
                key, k_act, k_env = jax.random.split(e.key, 3)
                mask, last_goals, fallback, keys = self.goals(e.cap, e.achieved, e.last_goals,
                                                              tables.goal_table)
                goal = self.goal_vector(mask, tables.goal_emb)
                eps = self.cfg.eval_epsilon if self.cfg.learns else 1.0
                action, _ = self._act(s.params, e.obs, goal, k_act, eps)
                step, done, r_goal, _, achieved, _, visited, coverage, _, _ = \
                    self._env_step(e, action, k_env, mask)
                ends = done & ~finished
                new = {"achievements": step.achievements, "length": step.length,
                       "coverage": coverage, "ep_goal": e.ep_goal + r_goal,
                       "ep_extrinsic": e.ep_extrinsic + step.reward}
                rec = jax.tree_util.tree_map(
                    lambda old, x: jnp.where(ends.reshape(-1, *([1] * (x.ndim - 1))), x, old),
                    rec, new)
                keep = ~done
                e = e._replace(env_state=step.state, obs=step.obs, cap=step.caption,
                               achieved=achieved & keep[:, None],
                               last_goals=last_goals & keep[:, None],
                               visited=visited & keep[:, None, None],
                               ep_goal=(e.ep_goal + r_goal) * keep,
                               ep_extrinsic=(e.ep_extrinsic + step.reward) * keep, key=key)
                return (e, finished | done, rec), {"fallback": fallback, "lm_key": keys}

            rec = {"achievements": jnp.zeros((n, len(s.env_state.achievements[0])), bool),
                   "length": jnp.zeros(n, jnp.int32), "coverage": jnp.zeros(n, jnp.int32),
                   "ep_goal": jnp.zeros(n), "ep_extrinsic": jnp.zeros(n)}
            (_, finished, rec), lm = jax.lax.scan(step, (e, jnp.zeros(n, bool), rec), None,
                                                  length)
            return {**rec, "finished": finished}, lm

        return jax.jit(jax.vmap(one_seed, in_axes=(0, None, 0)))


def stack_seeds(states: list[SeedState]) -> SeedState:
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *states)


def to_host(tree) -> Any:
    return jax.tree_util.tree_map(np.asarray, tree)
