"""RND and NovelD as the original computed them (the paper setting; docs/fidelity.md row 6).

The modules read the DQN's own encoder features, not pixels: the fused features of the online
network, or, with ``use_language``, its image features and its language-state features apart.
A module normalises its input with a BatchNorm (no affine, in training mode, as the original
left it) and clamps it to +-5 before the target and predictor MLPs. Each sampled transition
gets ONE intrinsic reward, which replaces the replay's n-step reward:

    RND:    r = e(s) + language_weight * e_lang(s)
    NovelD: r = relu(e(s') - alpha * e(s)) + language_weight * relu(e_lang(s') - alpha * e_lang(s))

with e the predictor's mean squared error, divided by the running standard deviation of r
(a prior of mean 0 and variance 1 at count 1e-4, as the original's). The features are taken
without gradients (the original let them flow into the Q-network through the TD target).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

CLIP = 5.0


def _orthogonal(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.orthogonal_(module.weight)
        nn.init.zeros_(module.bias)


class PriorRunningVariance:
    """Running mean and variance of every value seen, starting from a prior (mean 0, variance
    1) worth ``prior_count`` values."""

    def __init__(self, prior_count: float = 1e-4) -> None:
        self.mean, self.var, self.count = 0.0, 1.0, prior_count

    def update(self, values: torch.Tensor) -> None:
        x = values.detach().reshape(-1).to("cpu", torch.float64)
        n = x.numel()
        if n == 0:
            return
        delta = float(x.mean()) - self.mean
        total = self.count + n
        self.var = (self.var * self.count + float(x.var(unbiased=False)) * n
                    + delta**2 * self.count * n / total) / total
        self.mean += delta * n / total
        self.count = total

    @property
    def std(self) -> float:
        return math.sqrt(self.var)

    def state_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        self.mean, self.var, self.count = state["mean"], state["var"], state["count"]


class FeatureRND(nn.Module):
    """Target and predictor MLPs on BatchNorm-ed, clamped encoder features."""

    def __init__(self, feature_dim: int, hidden_dim: int, rep_dim: int) -> None:
        super().__init__()
        self.normalize = nn.BatchNorm1d(feature_dim, affine=False)

        def net() -> nn.Sequential:
            return nn.Sequential(nn.Linear(feature_dim, hidden_dim), nn.ReLU(),
                                 nn.Linear(hidden_dim, hidden_dim), nn.ReLU(),
                                 nn.Linear(hidden_dim, rep_dim))

        self.predictor, self.target = net(), net()
        self.target.requires_grad_(False)
        self.apply(_orthogonal)

    def error(self, features: torch.Tensor) -> torch.Tensor:
        """Per-sample prediction error [N]."""
        x = self.normalize(features).clamp(-CLIP, CLIP)
        return (self.target(x) - self.predictor(x)).pow(2).mean(dim=1)


class PaperRND:
    """RND / NovelD on encoder features, one module per input (``pixel``, ``language``)."""

    def __init__(self, feature_dims: Mapping[str, int], weights: Mapping[str, float],
                 hidden_dim: int, rep_dim: int, lr: float, noveld: bool, alpha: float,
                 device: str | torch.device) -> None:
        self.modules = {name: FeatureRND(dim, hidden_dim, rep_dim).to(device).train()
                        for name, dim in feature_dims.items()}
        self.weights = dict(weights)
        self.optimizer = torch.optim.Adam(
            [p for m in self.modules.values() for p in m.predictor.parameters()], lr=lr)
        self.noveld, self.alpha = noveld, float(alpha)
        self.stats = PriorRunningVariance()

    def reward(self, features: Mapping[str, tuple[torch.Tensor, torch.Tensor]]
               ) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """(raw [N], normalised reward [N], each module's mean raw term) of each transition
        from its (s, s') features."""
        with torch.no_grad():
            raw, terms = 0.0, {}
            for name, (obs, next_obs) in features.items():
                error = self.modules[name].error(obs)
                if self.noveld:
                    error = torch.relu(self.modules[name].error(next_obs) - self.alpha * error)
                raw = raw + self.weights[name] * error
                terms[name] = error.mean().item()
            self.stats.update(raw)
            return raw, raw / (self.stats.std + 1e-8), terms

    def update(self, features: Mapping[str, tuple[torch.Tensor, torch.Tensor]]
               ) -> dict[str, float]:
        """One predictor step on the batch's states s; each module's loss."""
        losses = {name: self.modules[name].error(obs).mean()
                  for name, (obs, _) in features.items()}
        self.optimizer.zero_grad(set_to_none=True)
        sum(losses.values()).backward()
        self.optimizer.step()
        return {f"{name}_loss": loss.item() for name, loss in losses.items()}

    def state_dict(self) -> dict[str, Any]:
        return {"modules": {n: m.state_dict() for n, m in self.modules.items()},
                "optimizer": self.optimizer.state_dict(), "stats": self.stats.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for name, module in self.modules.items():
            module.load_state_dict(state["modules"][name])
        self.optimizer.load_state_dict(state["optimizer"])
        self.stats.load_state_dict(state["stats"])
