"""APT on an ICM representation (ELLM.md section 6, docs/baselines.md): ``method=apt``.
The encoder learns from the inverse model only (the forward loss reads it through a
stop-gradient), so it keeps what the actions change and cannot collapse to zero that loss."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from baselines.agent import IntrinsicAgent, IntrinsicOptions
from baselines.intrinsic import (
    EPS,
    RewardOutput,
    RunningMeanStd,
    Transitions,
    forward_keeping,
    input_encoder,
    mlp,
)
from baselines.paper_setting import PaperAPT
from ellm.agent.options import AgentOptions
from ellm.errors import ConfigError
from ellm.run.schema import MAX_WIDTH, boolean_or_auto, integer, non_negative


def knn_mean_distance(x: torch.Tensor, k: int) -> torch.Tensor:
    """Mean distance from each row of ``x`` to its ``k`` nearest other rows (at most N - 1)."""
    n = x.shape[0]
    k = min(k, n - 1)
    if k < 1:
        return x.new_zeros(n)
    distances = torch.cdist(x, x, compute_mode="donot_use_mm_for_euclid_dist")
    distances.fill_diagonal_(float("inf"))
    return distances.topk(k, dim=1, largest=False).values.mean(dim=1)


class ICMLosses(NamedTuple):
    forward: torch.Tensor
    inverse: torch.Tensor
    inverse_accuracy: torch.Tensor


class ICM(nn.Module):

    def __init__(self, input_shape: tuple[int, ...], num_actions: int, hidden_dim: int,
                 rep_dim: int, compile: bool = False):
        super().__init__()
        self.num_actions = num_actions
        self.encoder = input_encoder(input_shape, rep_dim, compile)
        self.forward_model = mlp(rep_dim + num_actions, hidden_dim, rep_dim)
        self.inverse_model = mlp(2 * rep_dim, hidden_dim, num_actions)

    def losses(self, batch: Transitions, phi_next: torch.Tensor | None = None) -> ICMLosses:
        phi = self.encoder(batch.obs)
        if phi_next is None:
            phi_next = self.encoder(batch.next_obs)
        action = batch.action.long()
        onehot = F.one_hot(action, self.num_actions).to(phi.dtype)
        predicted = self.forward_model(torch.cat([phi.detach(), onehot], dim=1))
        forward = F.mse_loss(predicted, phi_next.detach())
        logits = self.inverse_model(torch.cat([phi, phi_next], dim=1))
        inverse = F.cross_entropy(logits, action)
        accuracy = (logits.argmax(dim=1) == action).float().mean()
        return ICMLosses(forward, inverse, accuracy)


class APT:
    """Particle-based entropy reward on an ICM representation: a ``Scorer``."""

    def __init__(self, input_shape: tuple[int, ...], num_actions: int, hidden_dim: int,
                 rep_dim: int, lr: float, knn_k: int = 12, device: str | torch.device = "cpu",
                 compile: bool = False):
        self.icm = ICM(input_shape, num_actions, hidden_dim, rep_dim, compile).to(device)
        self.optimizer = torch.optim.Adam(self.icm.parameters(), lr=lr)
        self.knn_k = knn_k
        self.stats = RunningMeanStd()

    def raw_reward(self, batch: Transitions,
                   keep: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """k-NN distances within each group, and the ``keep`` rows' graph, for :meth:`learn`."""
        rep, kept = forward_keeping(self.icm.encoder, batch.next_obs, keep)
        rep = rep.float()
        if batch.group is None:
            return knn_mean_distance(rep, self.knn_k), kept
        raw = rep.new_empty(rep.shape[0])
        for g in batch.group.unique():
            members = batch.group == g
            raw[members] = knn_mean_distance(rep[members], self.knn_k)
        return raw, kept

    def score(self, batch: Transitions, keep: torch.Tensor | None = None) -> RewardOutput:
        raw, kept = self.raw_reward(batch, keep)
        self.stats.update(raw)
        return RewardOutput(raw, torch.log1p(raw / max(self.stats.mean, EPS)), kept)

    def learn(self, batch: Transitions, kept: torch.Tensor | None = None) -> dict[str, Any]:
        """One ICM step; ``kept`` (next states' codes from :meth:`score`) spares a forward pass."""
        if kept is not None and len(kept) != len(batch.next_obs):
            raise ValueError(f"kept representations of {len(kept)} states for a batch of "
                             f"{len(batch.next_obs)}")
        losses = self.icm.losses(batch, phi_next=kept)
        self.optimizer.zero_grad(set_to_none=True)
        (losses.forward + losses.inverse).backward()
        self.optimizer.step()
        return {"forward_loss": losses.forward.detach(), "inverse_loss": losses.inverse.detach(),
                "inverse_accuracy": losses.inverse_accuracy.detach()}

    def statistics(self) -> dict[str, float]:
        return {"raw_mean": self.stats.mean}

    def state_dict(self) -> dict[str, Any]:
        return {"icm": self.icm.state_dict(), "optimizer": self.optimizer.state_dict(),
                "stats": self.stats.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.icm.load_state_dict(state["icm"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.stats.load_state_dict(state["stats"])


def check_batch(knn_k: int, batch_size: int) -> None:
    if batch_size <= knn_k:
        raise ConfigError(f"agent.knn_k={knn_k} needs batch_size > {knn_k}, got batch_size="
                          f"{batch_size}: lower agent.knn_k or raise batch_size")


@dataclass(frozen=True)
class APTOptions(IntrinsicOptions):
    """The ``agent`` keys of APT; the language module is off and weighs 1, as the original's."""

    use_language: bool | str = boolean_or_auto(False)
    language_weight: float = non_negative(1.0)
    knn_k: int = integer(1, 12)
    icm_hidden_dim: int = integer(1, 1024, high=MAX_WIDTH)

    def check_run(self, *, frame_stack: int, nstep: int, batch_size: int | None) -> None:
        super().check_run(frame_stack=frame_stack, nstep=nstep, batch_size=batch_size)
        if batch_size is not None:
            check_batch(self.knn_k, batch_size)


class ICMAPTAgent(IntrinsicAgent):
    """ELLM's DQN trained on the APT reward."""

    Options: ClassVar[type[AgentOptions]] = APTOptions
    options: APTOptions
    method = "apt"

    def paper_reward(self, feature_dims: Mapping[str, int]) -> PaperAPT:
        o = self.options
        return PaperAPT(self.method, self.encoder_features, feature_dims, self.weights,
                        num_actions=self.num_actions, hidden_dim=o.icm_hidden_dim,
                        rep_dim=o.rep_dim, lr=o.intrinsic_lr, knn_k=o.knn_k, device=self.device)

    def scorer(self, input_shape: tuple[int, ...]) -> APT:
        o = self.options
        return APT(input_shape, self.num_actions, o.hidden_dim, o.rep_dim, o.intrinsic_lr,
                   o.knn_k, self.device, compile=bool(self.compile))

    def update(self, batch: Any, step: int) -> dict[str, Any]:
        check_batch(self.options.knn_k, len(batch.action))  # agents built in Python
        return super().update(batch, step)
