"""Pieces shared by the intrinsic-reward baselines: the module seam, running statistics, the
n-step window of a replay batch and the n-step intrinsic return.

An intrinsic-reward module scores one-step transitions ``s -> s'``:

- ``compute(batch)`` returns the raw score and the normalised reward of each transition (no
  gradients); it folds the raw scores into the module's running statistic first, so the
  normaliser always includes the batch being scored.
- ``update(batch)`` takes one gradient step of the module's own networks and returns its losses.

Inputs are whatever the module's encoder reads: uint8 frame stacks ``[N, S, H, W]`` for a pixel
module, frozen sentence embeddings ``[N, D]`` for a language module.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

import torch
from torch import nn

from ellm.networks import ImageEncoder


class Transitions(NamedTuple):
    """One-step transitions ``s -> s'`` (leading dimension N)."""

    obs: torch.Tensor  # module input for s
    action: torch.Tensor  # int64 [N], the action taken in s; -1 where unknown
    next_obs: torch.Tensor  # module input for s'
    # int64 [N] or None: particle-based rewards compare a state only with states of its own group
    # (the agent groups by position in the n-step window, see IntrinsicAgent)
    group: torch.Tensor | None = None


class RewardOutput(NamedTuple):
    raw: torch.Tensor  # [N] the module's score before normalisation
    reward: torch.Tensor  # [N] the normalised reward the agent adds up


class IntrinsicReward(Protocol):
    """The seam a baseline plugs into :class:`baselines.agent.IntrinsicAgent`."""

    def compute(self, batch: Transitions) -> RewardOutput: ...

    def update(self, batch: Transitions) -> dict[str, float]: ...

    def statistics(self) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class RunningMeanStd:
    """Mean and (population) variance of every value seen so far, merged batch by batch with
    Chan et al.'s parallel formula, so the result equals the statistic of all values at once."""

    def __init__(self) -> None:
        self.count = 0
        self.mean = 0.0
        self.m2 = 0.0  # sum of squared deviations from the mean

    def update(self, values: torch.Tensor) -> None:
        x = values.detach().reshape(-1).to("cpu", torch.float64)
        n = x.numel()
        if n == 0:
            return
        batch_mean = float(x.mean())
        batch_m2 = float(((x - batch_mean) ** 2).sum())
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean += delta * n / total
        self.m2 += batch_m2 + delta * delta * self.count * n / total
        self.count = total

    @property
    def var(self) -> float:
        return self.m2 / self.count if self.count else 0.0

    @property
    def std(self) -> float:
        return math.sqrt(self.var)

    def state_dict(self) -> dict[str, float]:
        return {"count": self.count, "mean": self.mean, "m2": self.m2}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        self.count = int(state["count"])
        self.mean = float(state["mean"])
        self.m2 = float(state["m2"])


EPS = 1e-8  # floor of a normaliser (a constant batch has std 0)


def input_encoder(input_shape: tuple[int, ...], out_dim: int) -> nn.Module:
    """Nature-DQN conv encoder for frame stacks ``(S, H, W)``, a Linear layer for ``(D,)``."""
    if len(input_shape) == 3:
        return ImageEncoder(input_shape, out_dim)  # type: ignore[arg-type]
    if len(input_shape) == 1:
        return nn.Linear(input_shape[0], out_dim)
    raise ValueError(f"unsupported intrinsic-reward input shape {input_shape}")


def mlp(in_dim: int, hidden_dim: int, out_dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, out_dim))


def window_stacks(obs: torch.Tensor, next_obs: torch.Tensor, n_steps: torch.Tensor,
                  nstep: int) -> torch.Tensor:
    """Frame stacks of every state of the n-step window, rebuilt from ``obs`` and ``next_obs``.

    For a sample starting at step i with k = ``n_steps`` reward steps, ``obs`` holds frames
    i-S..i-1 and ``next_obs`` frames i-S+k..i-1+k (S = stack size); as k <= S their union is
    every frame i-S..i-1+k. Returns uint8 ``[B, nstep + 1, S, H, W]`` whose entry j is the stack
    ending at i-1+j, entries past k repeating the stack at i-1+k (entry 0 is ``obs``, entry k
    is ``next_obs``). Frames before the episode start are already padded in both stacks.
    """
    batch, stack = obs.shape[:2]
    k = n_steps.to(obs.device, torch.long).reshape(batch, 1, 1)
    if int(k.max()) > stack:
        raise ValueError(f"n-step window of {int(k.max())} steps is longer than the frame stack "
                         f"({stack}): the batch does not hold the intermediate frames")
    offset = torch.minimum(torch.arange(nstep + 1, device=obs.device)[None, :, None], k)
    m = offset + torch.arange(stack, device=obs.device)  # [B, nstep+1, S]: frame i-S+m
    source = torch.where(m < stack, m, m - k + stack)  # its index in cat([obs, next_obs])
    frames = torch.cat([obs, next_obs], dim=1)
    return frames[torch.arange(batch, device=obs.device)[:, None, None], source]


def nstep_intrinsic_return(rewards: torch.Tensor, n_steps: torch.Tensor,
                           gamma: float) -> torch.Tensor:
    """sum_{j<k} gamma^j rewards[:, j] for ``rewards`` [B, nstep] and k = ``n_steps`` [B].

    This is the replay's n-step sum (:func:`ellm.replay.nstep_targets`) with every continuation
    flag inside the window equal to 1, which holds for any sampled window: an episode ends at
    its first terminal step, so only the window's last step can be terminal, and that flag only
    enters the bootstrap discount.
    """
    n = rewards.shape[1]
    steps = torch.arange(n, device=rewards.device)
    used = steps[None, :] < n_steps.to(rewards.device)[:, None]
    weights = gamma ** steps.to(rewards.dtype)
    return (rewards * used * weights).sum(dim=1)
