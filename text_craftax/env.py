"""Craftax-Classic with captions, as pure functions over its state (vmapped by the caller);
``-v1`` writes the original's caption wording, ``-v2`` natural English, as Text-Crafter's ids."""

from __future__ import annotations

from typing import Final, NamedTuple

import jax
import jax.numpy as jnp
from craftax.craftax_classic.constants import Achievement, BlockType
from craftax.craftax_classic.envs.craftax_symbolic_env import (
    CraftaxClassicSymbolicEnvNoAutoReset,
)

from text_craftax.captions import Caption, caption, transition_phrase

ENV_IDS: Final = {"Craftax-Classic-v1": 1, "Craftax-Classic-v2": 2}
ACHIEVEMENTS: Final = tuple(a.name.lower() for a in Achievement)


class Step(NamedTuple):

    obs: jax.Array
    state: object
    caption: Caption
    reward: jax.Array
    terminated: jax.Array   # died or walked into lava: the value of what follows is 0
    truncated: jax.Array    # the time limit: bootstrapped through
    phrase: jax.Array
    achievements: jax.Array
    length: jax.Array
    position: jax.Array


class Worlds(NamedTuple):
    """Fresh worlds waiting for environments whose episode ended (batched)."""

    obs: jax.Array
    state: object
    caption: Caption


class CraftaxEnv:

    def __init__(self, env_id: str, length: int) -> None:
        if env_id not in ENV_IDS:
            raise ValueError(f"unknown Craftax env id {env_id!r}; valid ids: {sorted(ENV_IDS)}")
        self.env_id = env_id
        self.version = ENV_IDS[env_id]
        self._env = CraftaxClassicSymbolicEnvNoAutoReset()
        self.params = self._env.default_params.replace(max_timesteps=int(length))
        self.num_actions = self._env.num_actions
        self.obs_size = int(self._env.observation_space(self.params).shape[0])

    @property
    def map_shape(self) -> tuple[int, ...]:
        return tuple(self._env.default_static_params().map_size)

    def reset(self, key: jax.Array) -> tuple[jax.Array, object, Caption]:
        obs, state = self._env.reset_env(key, self.params)
        return obs, state, caption(state)

    def step(self, key: jax.Array, state, action: jax.Array) -> Step:
        obs, after, reward, _, _ = self._env.step_env(key, state, action, self.params)
        in_lava = after.map[after.player_position[0], after.player_position[1]] \
            == BlockType.LAVA.value
        terminated = (after.player_health <= 0) | in_lava
        truncated = ~terminated & (after.timestep >= self.params.max_timesteps)
        return Step(obs=obs, state=after, caption=caption(after),
                    reward=jnp.asarray(reward, jnp.float32),
                    terminated=terminated, truncated=truncated,
                    phrase=transition_phrase(state, action, after),
                    achievements=after.achievements, length=after.timestep,
                    position=after.player_position)

    def worlds(self, key: jax.Array, count: int) -> Worlds:
        obs, state, cap = jax.vmap(self.reset)(jax.random.split(key, count))
        return Worlds(obs, state, cap)

    @staticmethod
    def restart(steps: Step, done: jax.Array, worlds: Worlds, used: jax.Array
                ) -> tuple[jax.Array, object, Caption, jax.Array]:
        """(obs, state, caption) after the ended episodes restart in ``worlds``, taken in turn from
        ``used`` on, and the new ``used``. Worlds are made ahead: one for every env at every step,
        as an auto-reset makes, would cost more than the game itself."""
        count = worlds.obs.shape[0]
        pick = (used + jnp.cumsum(done) - 1) % count
        take = lambda new, old: jnp.where(
            done.reshape(-1, *([1] * (old.ndim - 1))), new[pick], old)
        obs = take(worlds.obs, steps.obs)
        state = jax.tree_util.tree_map(take, worlds.state, steps.state)
        cap = jax.tree_util.tree_map(take, worlds.caption, steps.caption)
        return obs, state, cap, used + done.sum()


def make(env_id: str, length: int = 10000) -> CraftaxEnv:
    return CraftaxEnv(env_id, length)
