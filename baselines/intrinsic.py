"""What the intrinsic-reward plug-ins share. A plug-in reads a batch once, in ``compute``, before
the TD step moves the DQN encoder, and ``update`` reuses that reading."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol

import torch
from torch import nn

from ellm.agent.networks import ImageEncoder
from ellm.agent.precision import autocast

EPS = 1e-8  # floor of a normaliser (a constant batch has std 0)


class RunningMeanStd:
    """Count, mean and variance of every value seen; with ``prior_count``, from a prior of mean 0
    and variance 1, merged as the original did so the paper setting's numbers are its numbers."""

    def __init__(self, prior_count: float = 0) -> None:
        self.prior_count = prior_count
        self.count = prior_count
        self.mean = 0.0
        self.m2 = float(prior_count)  # sum of squared deviations: variance 1 per prior value

    def update(self, values: torch.Tensor) -> None:
        x = values.detach().reshape(-1).to("cpu", torch.float64)
        n = x.numel()
        if n == 0:
            return
        batch_mean = float(x.mean())
        total = self.count + n
        delta = batch_mean - self.mean
        if self.prior_count:
            spread = (self.var * self.count + float(x.var(unbiased=False)) * n
                      + delta**2 * self.count * n / total)
        else:
            spread = self.m2 + (float(((x - batch_mean) ** 2).sum())
                                + delta * delta * self.count * n / total)
        self.mean += delta * n / total
        self.m2 = spread
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
        self.count = state["count"]
        self.mean = float(state["mean"])
        # Snapshots before the merge of the two normalisers kept the prior one's variance.
        self.m2 = float(state["m2"] if "m2" in state else state["var"] * state["count"])


class Transitions(NamedTuple):
    """One-step transitions ``s -> s'`` (leading dimension N)."""

    obs: torch.Tensor
    action: torch.Tensor  # -1 where unknown
    next_obs: torch.Tensor
    group: torch.Tensor | None = None  # particles meet only their group's (the window position)


class RewardOutput(NamedTuple):
    raw: torch.Tensor
    reward: torch.Tensor
    kept: Any = None  # computed with gradients on the kept rows, for the next ``learn``


class Scorer(Protocol):
    """One input's networks of a :class:`WindowReward` (RND's target and predictor, APT's ICM)."""

    def score(self, batch: Transitions, keep: torch.Tensor | None = None) -> RewardOutput:
        """Raw and normalised rewards, the batch counted in the normaliser first; ``keep``: the
        rows the next ``learn`` trains on, whose gradient work ``kept`` may carry to it."""

    def learn(self, batch: Transitions, kept: Any = None) -> dict[str, Any]:
        """One gradient step on the batch; its losses."""

    def statistics(self) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class IntrinsicReward:
    """A plug-in's ``name`` (its metrics' prefix) and ``read(batch)``, kept for ``update``."""

    per_step = False

    def __init__(self, name: str, read: Callable[[Any], Any]) -> None:
        self.name = name
        self._read = read
        self._last: tuple[Any, Any, Any] | None = None  # (batch, what was read, what was kept)

    def read(self, batch: Any) -> Any:
        self._last = (batch, self._read(batch), None)
        return self._last[1]

    def keep(self, batch: Any, kept: Any) -> None:
        if self._last is not None and self._last[0] is batch:
            self._last = (batch, self._last[1], kept)

    def read_again(self, batch: Any) -> tuple[Any, Any]:
        """What ``compute`` read and kept of this batch, before the TD step; else a fresh read."""
        last, self._last = self._last, None
        if last is not None and last[0] is batch:
            return last[1], last[2]
        return self._read(batch), None


class WindowReward(IntrinsicReward):
    """The fixed setting: every step of the n-step window scored and discounted into the return
    (docs/baselines.md), the networks in the learner's precision, losses and rewards in fp32."""

    def __init__(self, name: str, read: Callable[[Any], Mapping[str, torch.Tensor]],
                 scorers: Mapping[str, Scorer], weights: Mapping[str, float], *, nstep: int,
                 gamma: float, device: torch.device, precision: str = "fp32") -> None:
        super().__init__(name, read)
        self.scorers, self.weights = dict(scorers), dict(weights)
        self.nstep, self.gamma, self.device = nstep, gamma, device
        self.precision = precision

    def compute(self, batch: Any) -> tuple[torch.Tensor, dict[str, Any]]:
        inputs = self.read(batch)
        n_steps = batch.n_steps.to(self.device, torch.long)
        steps = torch.arange(self.nstep, device=self.device)
        rows, j = (steps[None, :] < n_steps[:, None]).nonzero(as_tuple=True)
        rewards = torch.zeros(len(n_steps), self.nstep, device=self.device)
        metrics: dict[str, float] = {}
        action = torch.where(j == 0, batch.action.to(self.device, torch.long)[rows], -1)
        # Every window has a first step, so the j == 0 rows are, in order, what ``update`` learns.
        first, kept = j == 0, {}
        for name, x in inputs.items():
            with autocast(self.device, self.precision):
                out = self.scorers[name].score(Transitions(x[rows, j], action, x[rows, j + 1], j),
                                               keep=first)
            kept[name] = out.kept
            rewards[rows, j] += self.weights[name] * out.reward
            prefix = f"{self.name}_{name}"
            metrics[f"{prefix}_raw"] = out.raw.mean().detach()
            metrics[f"{prefix}_reward"] = out.reward.mean().detach()
            metrics.update({f"{prefix}_{k}": v
                            for k, v in self.scorers[name].statistics().items()})
        metrics["intrinsic_reward"] = rewards[rows, j].mean().detach()
        self.keep(batch, kept)
        returns = nstep_intrinsic_return(rewards, batch.n_steps.to(self.device), self.gamma)
        metrics["intrinsic_return"] = returns.mean().detach()
        return returns, metrics

    def update(self, batch: Any) -> dict[str, Any]:
        action = batch.action.to(self.device, torch.long)
        metrics = {}
        inputs, kept = self.read_again(batch)
        kept = kept or {}
        for name, x in inputs.items():
            with autocast(self.device, self.precision):
                losses = self.scorers[name].learn(Transitions(x[:, 0], action, x[:, 1]),
                                                  kept=kept.get(name))
            metrics.update({f"{self.name}_{name}_{k}": v for k, v in losses.items()})
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {name: scorer.state_dict() for name, scorer in self.scorers.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for name, scorer in self.scorers.items():
            scorer.load_state_dict(state[name])


def forward_keeping(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                    keep: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``fn(x)``, and ``fn(x[keep])`` with its graph from a call of its own, as ``learn`` makes."""
    if keep is None:
        with torch.no_grad():
            return fn(x), None
    kept = fn(x[keep])
    out = kept.detach().new_empty((len(x), *kept.shape[1:]))
    out[keep] = kept.detach()
    if not keep.all():
        with torch.no_grad():
            out[~keep] = fn(x[~keep])
    return out, kept


def input_encoder(input_shape: tuple[int, ...], out_dim: int, compile: bool = False) -> nn.Module:
    """A conv encoder for frame stacks (compiled in place: its keys stay), a Linear for vectors."""
    if len(input_shape) == 3:
        encoder = ImageEncoder(input_shape, out_dim)  # type: ignore[arg-type]
        if compile:
            encoder.compile()
        return encoder
    if len(input_shape) == 1:
        return nn.Linear(input_shape[0], out_dim)
    raise ValueError(f"unsupported intrinsic-reward input shape {input_shape}")


def mlp(in_dim: int, hidden_dim: int, out_dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, out_dim))


def window_stacks(obs: torch.Tensor, next_obs: torch.Tensor, n_steps: torch.Tensor,
                  nstep: int) -> torch.Tensor:
    """The stack ending at each step of the n-step window, ``[B, nstep + 1, S, H, W]``: with
    k <= S steps, ``obs`` and ``next_obs`` together hold every frame of the window."""
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
    """sum_{j<k} gamma^j rewards[:, j]: the replay's n-step sum with no flag, as only a window's
    last step can be terminal and its flag enters only the bootstrap discount."""
    n = rewards.shape[1]
    steps = torch.arange(n, device=rewards.device)
    used = steps[None, :] < n_steps.to(rewards.device)[:, None]
    weights = gamma ** steps.to(rewards.dtype)
    return (rewards * used * weights).sum(dim=1)
