"""Craftax-Classic with captions, as pure functions over its state (vmapped by the caller).

``Craftax-Classic-v1`` writes the original's caption wording (the paper setting), ``-v2``
natural English, as ``CrafterTextEnv-v1``/``-v2`` do. Episodes end on death or lava
(terminated) or after ``length`` steps (truncated); the caller restarts them in fresh worlds
(:meth:`CraftaxEnv.restart`)."""

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
    """One step of one environment, before any restart."""

    obs: jax.Array
    state: object
    caption: Caption
    reward: jax.Array       # Craftax's reward: +1 per new achievement, +-0.1 per health point
    terminated: jax.Array   # died or walked into lava: the value of what follows is 0
    truncated: jax.Array    # the time limit: bootstrapped through
    phrase: jax.Array       # the transition's phrase index, or NO_PHRASE
    achievements: jax.Array  # bool[22] unlocked this episode, as it stood at this step
    length: jax.Array       # steps into the episode after this one
    position: jax.Array     # the player's cell after the action


class Worlds(NamedTuple):
    """Fresh worlds waiting for environments whose episode ended (batched)."""

    obs: jax.Array
    state: object
    caption: Caption


class CraftaxEnv:
    """Craftax-Classic's symbolic game with captions and an episode limit of ``length``."""

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
        """The world map's shape (rows, columns)."""
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
        """(obs, state, caption) of a batch after its ended episodes restart in ``worlds``,
        taken in turn from ``used`` on, and the new count used. Generating a world for every
        env at every step, as an auto-reset does, would cost more than the game itself."""
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
