"""A goal-conditioned PQN (Gallici et al. 2024, "Simplifying Deep Temporal Difference
Learning"): a Q-network with LayerNorm, trained on lambda-returns of the rollout just collected
by many environments, with no replay and no target network."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax


@dataclass(frozen=True)
class PQNConfig:
    """The learner's hyperparameters (``craftax.*`` in config.yaml documents each)."""

    hidden: int = 256
    layers: int = 2
    lr: float = 3e-4
    max_grad_norm: float = 10.0
    gamma: float = 0.99
    lam: float = 0.65
    epochs: int = 1
    minibatches: int = 4


class QNetwork(nn.Module):
    """Q-values from the observation and, when given, the shown goals' embedding."""

    num_actions: int
    hidden: int
    layers: int

    @nn.compact
    def __call__(self, obs: jax.Array, goal: jax.Array | None = None) -> jax.Array:
        x = obs if goal is None else jnp.concatenate([obs, goal], axis=-1)
        for _ in range(self.layers):
            x = nn.relu(nn.LayerNorm()(nn.Dense(self.hidden)(x)))
        return nn.Dense(self.num_actions)(x)


class Batch(NamedTuple):
    """One rollout, time-major: [T, N, ...]."""

    obs: jax.Array
    goal: jax.Array | None
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array
    done: jax.Array        # terminated or truncated: the next row starts a new episode
    next_q: jax.Array      # max_a Q(s_{t+1}, g_{t+1}) of the true next state (0 if terminated)


def optimizer(cfg: PQNConfig) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), optax.adam(cfg.lr))


def lambda_returns(batch: Batch, gamma: float, lam: float) -> jax.Array:
    """Peng's Q(lambda) targets; an episode's end cuts the trace (terminated: no bootstrap;
    truncated: bootstrap from the true next state)."""
    cont = 1.0 - batch.terminated.astype(jnp.float32)

    def back(later, row):
        reward, next_q, c, done = row
        blended = jnp.where(done, next_q, lam * later + (1 - lam) * next_q)
        ret = reward + gamma * c * blended
        return ret, ret

    last = batch.reward[-1] + gamma * cont[-1] * batch.next_q[-1]
    _, rets = jax.lax.scan(back, last, (batch.reward[:-1], batch.next_q[:-1], cont[:-1],
                                        batch.done[:-1]), reverse=True)
    return jnp.concatenate([rets, last[None]], axis=0)


def update(net: QNetwork, cfg: PQNConfig, tx: optax.GradientTransformation, params, opt_state,
           batch: Batch, targets: jax.Array, key: jax.Array):
    """``cfg.epochs`` passes of ``cfg.minibatches`` minibatches; (params, opt state, loss)."""
    flat = jax.tree_util.tree_map(lambda x: x.reshape(-1, *x.shape[2:]),
                                  (batch.obs, batch.goal, batch.action))
    flat_targets = targets.reshape(-1)
    size = flat_targets.shape[0]

    def loss_fn(p, obs, goal, action, target):
        q = net.apply(p, obs, goal)
        chosen = jnp.take_along_axis(q, action[:, None], axis=-1)[:, 0]
        return 0.5 * jnp.mean((chosen - jax.lax.stop_gradient(target)) ** 2)

    def minibatch(carry, idx):
        p, o = carry
        obs, goal, action = jax.tree_util.tree_map(lambda x: x[idx], flat)
        loss, grads = jax.value_and_grad(loss_fn)(p, obs, goal, action, flat_targets[idx])
        updates, o = tx.update(grads, o, p)
        return (optax.apply_updates(p, updates), o), loss

    def epoch(carry, k):
        order = jax.random.permutation(k, size).reshape(cfg.minibatches, -1)
        return jax.lax.scan(minibatch, carry, order)

    (params, opt_state), losses = jax.lax.scan(epoch, (params, opt_state),
                                               jax.random.split(key, cfg.epochs))
    return params, opt_state, losses.mean()


def epsilon(frame: jax.Array, start: float, end: float, decay_frames: float) -> jax.Array:
    """Linear from ``start`` to ``end`` over ``decay_frames`` frames of this seed."""
    frac = jnp.clip(frame / jnp.maximum(decay_frames, 1.0), 0.0, 1.0)
    return start + frac * (end - start)
