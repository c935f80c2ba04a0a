"""RND and NovelD (ELLM.md section 6, docs/baselines.md): ``method=rnd`` / ``method=noveld``.
NovelD takes err(s') and err(s) from the same networks, so both lie in one feature space."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

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
)
from baselines.paper_setting import PaperRND
from ellm.agent.options import AgentOptions
from ellm.run.schema import boolean, non_negative


class RND:
    """One input's fixed target and trained predictor: a :class:`~baselines.intrinsic.Scorer`."""

    def __init__(self, input_shape: tuple[int, ...], hidden_dim: int, rep_dim: int, lr: float,
                 noveld: bool = False, alpha: float = 0.5, device: str | torch.device = "cpu",
                 compile: bool = False):
        self.target = nn.Sequential(
            input_encoder(input_shape, hidden_dim, compile), nn.ReLU(),
            nn.Linear(hidden_dim, rep_dim),
        ).to(device).requires_grad_(False)
        self.predictor = nn.Sequential(
            input_encoder(input_shape, hidden_dim, compile), nn.ReLU(),
            nn.Linear(hidden_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, rep_dim),
        ).to(device)
        self.optimizer = torch.optim.Adam(self.predictor.parameters(), lr=lr)
        self.noveld, self.alpha = noveld, float(alpha)
        self.stats = RunningMeanStd()

    def error(self, x: torch.Tensor) -> torch.Tensor:
        return (self.predictor(x).float() - self.target(x).float()).pow(2).mean(dim=1)

    def raw_reward(self, batch: Transitions,
                   keep: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Raw rewards, and the ``keep`` rows' errors with their graph, for :meth:`learn`."""
        novelty, kept = forward_keeping(self.error, batch.next_obs, keep)
        if self.noveld:
            with torch.no_grad():
                novelty = F.relu(novelty - self.alpha * self.error(batch.obs))
        return novelty, kept

    def score(self, batch: Transitions, keep: torch.Tensor | None = None) -> RewardOutput:
        raw, kept = self.raw_reward(batch, keep)
        self.stats.update(raw)
        return RewardOutput(raw, raw / max(self.stats.std, EPS), kept)

    def learn(self, batch: Transitions, kept: torch.Tensor | None = None) -> dict[str, Any]:
        """One predictor step; ``kept`` (errors from :meth:`score`) spares a forward pass."""
        if kept is not None and kept.shape != (len(batch.next_obs),):
            raise ValueError(f"kept errors of shape {tuple(kept.shape)} for a batch of "
                             f"{len(batch.next_obs)}")
        loss = (self.error(batch.next_obs) if kept is None else kept).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.detach()}

    def statistics(self) -> dict[str, float]:
        return {"raw_std": self.stats.std}

    def state_dict(self) -> dict[str, Any]:
        return {"target": self.target.state_dict(), "predictor": self.predictor.state_dict(),
                "optimizer": self.optimizer.state_dict(), "stats": self.stats.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.target.load_state_dict(state["target"])
        self.predictor.load_state_dict(state["predictor"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.stats.load_state_dict(state["stats"])


@dataclass(frozen=True)
class RNDOptions(IntrinsicOptions):
    """The ``agent`` keys of RND and NovelD (``ellm/method/rnd.yaml``)."""

    noveld: bool = boolean(False)
    noveld_alpha: float = non_negative(1.0)


class RNDAgent(IntrinsicAgent):
    """ELLM's DQN trained on the RND (or NovelD) reward."""

    Options: ClassVar[type[AgentOptions]] = RNDOptions
    options: RNDOptions

    @property
    def method(self) -> str:  # type: ignore[override]
        return "noveld" if self.options.noveld else "rnd"

    def paper_reward(self, feature_dims: Mapping[str, int]) -> PaperRND:
        o = self.options
        return PaperRND(self.method, self.encoder_features, feature_dims, self.weights,
                        hidden_dim=o.hidden_dim, rep_dim=o.rep_dim, lr=o.intrinsic_lr,
                        noveld=o.noveld, alpha=o.noveld_alpha, device=self.device)

    def scorer(self, input_shape: tuple[int, ...]) -> RND:
        o = self.options
        return RND(input_shape, o.hidden_dim, o.rep_dim, o.intrinsic_lr, o.noveld,
                   o.noveld_alpha, self.device, compile=bool(self.compile))

    def intrinsic_config(self) -> dict[str, Any]:
        return {**super().intrinsic_config(), "agent.noveld": self.options.noveld}
