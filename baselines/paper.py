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

    def update(self, features: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
               action: torch.Tensor | None = None) -> dict[str, float]:
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


# ---------------------------------------------------------------------------- APT
KNN_CLIP = 1e-4  # the original's knn_clip


class FeatureICM(nn.Module):
    """ICM on encoder features: an MLP encoder, a forward model on (phi(s), one-hot a) and an
    inverse classifier on (phi(s), phi(s')). The original regressed the action index through a
    tanh; a classifier over the discrete actions is the documented fix (ELLM.md section 6)."""

    def __init__(self, feature_dim: int, num_actions: int, hidden_dim: int, rep_dim: int):
        super().__init__()
        self.num_actions = num_actions
        self.encoder = nn.Sequential(nn.Linear(feature_dim, hidden_dim), nn.ReLU(),
                                     nn.Linear(hidden_dim, rep_dim))
        self.forward_net = nn.Sequential(nn.Linear(rep_dim + num_actions, hidden_dim), nn.ReLU(),
                                         nn.Linear(hidden_dim, rep_dim))
        self.inverse_net = nn.Sequential(nn.Linear(2 * rep_dim, hidden_dim), nn.ReLU(),
                                         nn.Linear(hidden_dim, num_actions))
        self.apply(_orthogonal)

    def losses(self, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """(forward error [N]: the L2 distance, inverse cross-entropy [N]); the encoder learns
        from both, as the original's did."""
        phi, phi_next = self.encoder(obs), self.encoder(next_obs)
        onehot = nn.functional.one_hot(action, self.num_actions).to(phi.dtype)
        predicted = self.forward_net(torch.cat([phi, onehot], dim=1))
        forward = torch.linalg.vector_norm(phi_next - predicted, dim=1)
        logits = self.inverse_net(torch.cat([phi, phi_next], dim=1))
        return forward, nn.functional.cross_entropy(logits, action, reduction="none")


class ParticleEntropy:
    """The original's particle-based entropy: the distances from each particle to its k nearest
    particles of the batch (itself included, at distance 0), divided by their running mean,
    less ``KNN_CLIP`` (floored at 0), averaged over the k, then log(1 + .)."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.stats = PriorRunningVariance()  # the running mean is its ``mean``

    def __call__(self, rep: torch.Tensor) -> torch.Tensor:
        distances = torch.cdist(rep, rep, compute_mode="donot_use_mm_for_euclid_dist")
        nearest = distances.topk(min(self.k, len(rep)), dim=1, largest=False).values
        self.stats.update(nearest)
        scaled = torch.clamp(nearest / self.stats.mean - KNN_CLIP, min=0.0)
        return torch.log1p(scaled.mean(dim=1))


class PaperAPT:
    """APT on encoder features, one ICM per input. As in the original, the particles of every
    input are the *pixel* ICM's representation of its features, and one running mean serves
    all of them; the language ICM is trained but only the pixel encoder is read."""

    def __init__(self, feature_dims: Mapping[str, int], weights: Mapping[str, float],
                 num_actions: int, hidden_dim: int, rep_dim: int, lr: float, knn_k: int,
                 device: str | torch.device) -> None:
        self.modules = {name: FeatureICM(dim, num_actions, hidden_dim, rep_dim).to(device)
                        for name, dim in feature_dims.items()}
        self.weights = dict(weights)
        self.optimizer = torch.optim.Adam(
            [p for m in self.modules.values() for p in m.parameters()], lr=lr)
        self.entropy = ParticleEntropy(knn_k)

    @property
    def stats(self) -> PriorRunningVariance:
        return self.entropy.stats

    def reward(self, features: Mapping[str, tuple[torch.Tensor, torch.Tensor]]
               ) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """(raw [N], reward [N], each input's mean term): the entropy reward of s'."""
        with torch.no_grad():
            total, terms = 0.0, {}
            encoder = self.modules["pixel"].encoder
            for name, (_, next_obs) in features.items():
                term = self.entropy(encoder(next_obs))
                total = total + self.weights[name] * term
                terms[name] = term.mean().item()
            return total, total, terms

    def update(self, features: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
               action: torch.Tensor) -> dict[str, float]:
        """One ICM step on the batch's transitions s -> s'; each input's losses."""
        out, total = {}, 0.0
        for name, (obs, next_obs) in features.items():
            forward, inverse = self.modules[name].losses(obs, action, next_obs)
            total = total + forward.mean() + inverse.mean()
            out[f"{name}_forward_loss"] = forward.mean().item()
            out[f"{name}_inverse_loss"] = inverse.mean().item()
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        self.optimizer.step()
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"modules": {n: m.state_dict() for n, m in self.modules.items()},
                "optimizer": self.optimizer.state_dict(),
                "stats": self.entropy.stats.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for name, module in self.modules.items():
            module.load_state_dict(state["modules"][name])
        self.optimizer.load_state_dict(state["optimizer"])
        self.entropy.stats.load_state_dict(state["stats"])
