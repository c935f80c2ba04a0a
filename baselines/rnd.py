"""RND and NovelD (ELLM.md section 6): ``agent=rnd`` / ``agent=noveld``, or the original
``agent._target_=baselines.rnd.RNDAgent [+agent.noveld=True] [+agent.use_language=True]``.

Random network distillation: a fixed, randomly initialised target network and a trained
predictor read the same input; the prediction error err(s) = mean_f (pred(s)_f - target(s)_f)^2
is high on states unlike those trained on. Rewards of a transition s -> s':

- RND:    raw = err(s')
- NovelD: raw = relu(err(s') - alpha * err(s)), both errors from the same module, so in one
          feature space (``noveld_alpha`` = alpha, 0.5)

and reward = raw / running std of the raw values seen so far. The pixel module reads the frame
stacks; with ``use_language`` a second module reads the frozen sentence embedding of the
language state (weight ``language_weight``). Pixel-only RND needs no text at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from baselines.agent import IntrinsicAgent, check_option, is_number
from baselines.intrinsic import EPS, RewardOutput, RunningMeanStd, Transitions, input_encoder
from baselines.paper import PaperRND


class RND:
    """One RND module: target and predictor are ``input encoder -> ReLU -> Linear`` networks
    (the predictor one hidden layer deeper); only the predictor is trained (Adam at ``lr``)."""

    def __init__(self, input_shape: tuple[int, ...], hidden_dim: int, rep_dim: int, lr: float,
                 noveld: bool = False, alpha: float = 0.5, device: str | torch.device = "cpu"):
        self.target = nn.Sequential(
            input_encoder(input_shape, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, rep_dim),
        ).to(device).requires_grad_(False)
        self.predictor = nn.Sequential(
            input_encoder(input_shape, hidden_dim), nn.ReLU(),
            nn.Linear(hidden_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, rep_dim),
        ).to(device)
        self.optimizer = torch.optim.Adam(self.predictor.parameters(), lr=lr)
        self.noveld, self.alpha = noveld, float(alpha)
        self.stats = RunningMeanStd()

    def error(self, x: torch.Tensor) -> torch.Tensor:
        """Per-sample prediction error [N] (differentiable in the predictor)."""
        return (self.predictor(x) - self.target(x)).pow(2).mean(dim=1)

    @torch.no_grad()
    def raw_reward(self, batch: Transitions) -> torch.Tensor:
        novelty = self.error(batch.next_obs)
        if self.noveld:
            novelty = F.relu(novelty - self.alpha * self.error(batch.obs))
        return novelty

    def compute(self, batch: Transitions) -> RewardOutput:
        raw = self.raw_reward(batch)
        self.stats.update(raw)
        return RewardOutput(raw, raw / max(self.stats.std, EPS))

    def update(self, batch: Transitions) -> dict[str, float]:
        """One predictor step towards the target on the batch's next states."""
        loss = self.error(batch.next_obs).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.item()}

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


class RNDAgent(IntrinsicAgent):
    """ELLM's DQN trained on the RND (or NovelD) reward; see :class:`IntrinsicAgent` for the
    shared options. Extra: ``noveld`` (False), ``noveld_alpha`` (0.5)."""

    def __init__(self, *args: Any, noveld: bool = False, noveld_alpha: float = 1.0,
                 **kwargs: Any):
        check_option("noveld", noveld, isinstance(noveld, bool), "true or false")
        check_option("noveld_alpha", noveld_alpha, is_number(noveld_alpha) and noveld_alpha >= 0,
                     "a number >= 0")
        self.noveld, self.noveld_alpha = noveld, float(noveld_alpha)
        self.method = "noveld" if noveld else "rnd"
        super().__init__(*args, **kwargs)

    def make_paper_module(self, feature_dims: Mapping[str, int]) -> PaperRND:
        return PaperRND(feature_dims, self.weights, self.hidden_dim, self.rep_dim,
                        self.intrinsic_lr, self.noveld, self.noveld_alpha, self.device)

    def make_module(self, input_shape: tuple[int, ...]) -> RND:
        return RND(input_shape, self.hidden_dim, self.rep_dim, self.intrinsic_lr,
                   self.noveld, self.noveld_alpha, self.device)

    def intrinsic_config(self) -> dict[str, Any]:
        return {**super().intrinsic_config(), "agent.noveld": self.noveld}
