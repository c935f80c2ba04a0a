"""The baselines' rewards in the compiled loop: ``rnd``, ``noveld`` (with its episodic first-visit
term) and ``e3b`` (as in the Craftax paper), each over a running standard deviation."""

from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

NOVELD_ALPHA = 0.5     # NovelD's scale on the current state's novelty
E3B_RIDGE = 0.1        # E3B's lambda: the episode's covariance starts at lambda * I
E3B_DIM = 32
BONUS_LR = 1e-4


class Mlp(nn.Module):
    sizes: tuple[int, ...]

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for i, size in enumerate(self.sizes):
            x = nn.Dense(size)(x)
            if i < len(self.sizes) - 1:
                x = nn.relu(x)
        return x


class RunningStd(NamedTuple):
    count: jax.Array
    mean: jax.Array
    m2: jax.Array

    @staticmethod
    def new() -> RunningStd:
        return RunningStd(jnp.float32(1e-4), jnp.float32(0.0), jnp.float32(1.0))

    def update(self, x: jax.Array) -> RunningStd:
        """Chan et al.'s parallel update with the batch ``x``."""
        n, mean, var = x.size, x.mean(), x.var()
        total = self.count + n
        delta = mean - self.mean
        m2 = self.m2 + var * n + delta ** 2 * self.count * n / total
        return RunningStd(total, self.mean + delta * n / total, m2)

    @property
    def std(self) -> jax.Array:
        return jnp.sqrt(self.m2 / self.count + 1e-8)


class BonusState(NamedTuple):
    params: dict
    opt_state: optax.OptState
    stats: RunningStd


class Bonus:
    """One baseline's networks and maths; the loop holds its :class:`BonusState` per seed."""

    def __init__(self, name: str, obs_size: int, num_actions: int) -> None:
        self.name = name
        self.num_actions = num_actions
        self.tx = optax.adam(BONUS_LR)
        if name == "e3b":
            self.encoder = Mlp((256, E3B_DIM))
            self.inverse = Mlp((256, num_actions))
        else:
            self.target = Mlp((256, 128))
            self.predictor = Mlp((256, 256, 128))
        self.obs_size = obs_size

    def init(self, key: jax.Array) -> BonusState:
        obs = jnp.zeros((1, self.obs_size))
        k1, k2 = jax.random.split(key)
        if self.name == "e3b":
            params = {"encoder": self.encoder.init(k1, obs),
                      "inverse": self.inverse.init(k2, jnp.zeros((1, 2 * E3B_DIM)))}
        else:
            params = {"target": self.target.init(k1, obs), "predictor": self.predictor.init(k2, obs)}
        trained = {k: v for k, v in params.items() if k != "target"}
        return BonusState(params, self.tx.init(trained), RunningStd.new())

    def novelty(self, params: dict, obs: jax.Array) -> jax.Array:
        target = self.target.apply(params["target"], obs)
        return jnp.mean((self.predictor.apply(params["predictor"], obs) - target) ** 2, axis=-1)

    def embed(self, params: dict, obs: jax.Array) -> jax.Array:
        return self.encoder.apply(params["encoder"], obs)

    @staticmethod
    def new_inverse_cov(n: int) -> jax.Array:
        return jnp.broadcast_to(jnp.eye(E3B_DIM) / E3B_RIDGE, (n, E3B_DIM, E3B_DIM))

    @staticmethod
    def elliptical(cov_inv: jax.Array, phi: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(bonus, updated inverse covariance) of one env's step (Sherman-Morrison)."""
        u = cov_inv @ phi
        bonus = phi @ u
        return bonus, cov_inv - jnp.outer(u, u) / (1.0 + bonus)

    def raw(self, state: BonusState, obs: jax.Array, next_obs: jax.Array,
            first_visit: jax.Array, elliptical: jax.Array) -> jax.Array:
        """The raw bonus of a rollout's transitions ([T, N])."""
        if self.name == "e3b":
            return elliptical
        after = self.novelty(state.params, next_obs)
        if self.name == "rnd":
            return after
        before = self.novelty(state.params, obs)
        return jnp.maximum(after - NOVELD_ALPHA * before, 0.0) * first_visit

    def learn(self, state: BonusState, obs: jax.Array, next_obs: jax.Array,
              action: jax.Array) -> tuple[BonusState, jax.Array]:
        """One Adam step on the rollout's transitions; returns the loss."""
        params = state.params

        def loss_fn(trained):
            if self.name == "e3b":
                phi = self.embed(trained, obs)
                phi_next = self.embed(trained, next_obs)
                logits = self.inverse.apply(trained["inverse"],
                                            jnp.concatenate([phi, phi_next], -1))
                return optax.softmax_cross_entropy_with_integer_labels(logits, action).mean()
            return self.novelty({**trained, "target": params["target"]}, next_obs).mean()

        trained = {k: v for k, v in params.items() if k != "target"}
        loss, grads = jax.value_and_grad(loss_fn)(trained)
        updates, opt_state = self.tx.update(grads, state.opt_state, trained)
        new = {**params, **optax.apply_updates(trained, updates)}
        return state._replace(params=new, opt_state=opt_state), loss

    def normalise(self, state: BonusState, raw: jax.Array) -> tuple[BonusState, jax.Array]:
        stats = state.stats.update(raw)
        return state._replace(stats=stats), raw / stats.std
