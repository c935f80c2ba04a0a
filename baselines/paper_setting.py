"""RND, NovelD and APT as the original computed them (the paper setting; docs/fidelity.md).
They read the DQN encoder's features without gradients (the original let them flow into the
Q-network through the TD target) and give one reward per transition for its n-step return."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from baselines.intrinsic import IntrinsicReward, RunningMeanStd

CLIP = 5.0
Features = Mapping[str, tuple[torch.Tensor, torch.Tensor]]  # input -> (s, s') encoder features


def _orthogonal(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.orthogonal_(module.weight)
        nn.init.zeros_(module.bias)


def original_normaliser() -> RunningMeanStd:
    return RunningMeanStd(prior_count=1e-4)


class FeatureReward(IntrinsicReward):
    """The paper setting's plug-ins: one reward per transition from the encoder's features."""

    stats: RunningMeanStd

    def __init__(self, name: str, read: Callable[[Any], Features],
                 device: str | torch.device) -> None:
        super().__init__(name, read)
        self.device = device

    def compute(self, batch: Any) -> tuple[torch.Tensor, dict[str, Any]]:
        raw, reward, terms = self.reward(self.read(batch))
        # The batch's own spread beside the cumulative one: their ratio is the normaliser's
        # memory, which makes the paper setting's reward rise (docs/baselines.md).
        return reward, {f"{self.name}_raw": raw.mean().detach(),
                        f"{self.name}_raw_std": self.stats.std,
                        f"{self.name}_raw_batch_std": raw.float().std(unbiased=False).detach(),
                        **{f"{self.name}_{name}_raw": v for name, v in terms.items()},
                        "intrinsic_reward": reward.mean().detach(),
                        "intrinsic_return": reward.mean().detach()}

    def update(self, batch: Any) -> dict[str, Any]:
        features, _ = self.read_again(batch)
        losses = self.learn(features, batch.action.to(self.device, torch.long))
        return {f"{self.name}_{k}": v for k, v in losses.items()}

    def reward(self, features: Features) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        """(raw [N], reward [N], each input's mean raw term) of each transition."""
        raise NotImplementedError

    def learn(self, features: Features, action: torch.Tensor) -> dict[str, Any]:
        raise NotImplementedError


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
        x = self.normalize(features).clamp(-CLIP, CLIP)
        return (self.target(x) - self.predictor(x)).pow(2).mean(dim=1)


class PaperRND(FeatureReward):
    """RND / NovelD on encoder features, one module per input (``pixel``, ``language``)."""

    def __init__(self, name: str, read: Callable[[Any], Features],
                 feature_dims: Mapping[str, int], weights: Mapping[str, float], *,
                 hidden_dim: int, rep_dim: int, lr: float, noveld: bool, alpha: float,
                 device: str | torch.device) -> None:
        super().__init__(name, read, device)
        self.modules = {name: FeatureRND(dim, hidden_dim, rep_dim).to(device).train()
                        for name, dim in feature_dims.items()}
        self.weights = dict(weights)
        self.optimizer = torch.optim.Adam(
            [p for m in self.modules.values() for p in m.predictor.parameters()], lr=lr)
        self.noveld, self.alpha = noveld, float(alpha)
        self.stats = original_normaliser()

    def reward(self, features: Features) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        with torch.no_grad():
            raw, terms = 0.0, {}
            for name, (obs, next_obs) in features.items():
                error = self.modules[name].error(obs)
                if self.noveld:
                    error = torch.relu(self.modules[name].error(next_obs) - self.alpha * error)
                raw = raw + self.weights[name] * error
                terms[name] = error.mean().detach()
            self.stats.update(raw)
            return raw, raw / (self.stats.std + 1e-8), terms

    def learn(self, features: Features, action: torch.Tensor) -> dict[str, Any]:
        """One predictor step on the batch's states s; each module's loss."""
        losses = {name: self.modules[name].error(obs).mean()
                  for name, (obs, _) in features.items()}
        self.optimizer.zero_grad(set_to_none=True)
        sum(losses.values()).backward()
        self.optimizer.step()
        return {f"{name}_loss": loss.detach() for name, loss in losses.items()}

    def state_dict(self) -> dict[str, Any]:
        return {"modules": {n: m.state_dict() for n, m in self.modules.items()},
                "optimizer": self.optimizer.state_dict(), "stats": self.stats.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for name, module in self.modules.items():
            module.load_state_dict(state["modules"][name])
        self.optimizer.load_state_dict(state["optimizer"])
        self.stats.load_state_dict(state["stats"])


KNN_CLIP = 1e-4  # the original's knn_clip


class FeatureICM(nn.Module):
    """ICM on encoder features; the inverse model classifies the action where the original
    regressed its index through a tanh (the documented fix, ELLM.md section 6)."""

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
        """Per-sample forward L2 error and inverse cross-entropy; the encoder learns from both."""
        phi, phi_next = self.encoder(obs), self.encoder(next_obs)
        onehot = nn.functional.one_hot(action, self.num_actions).to(phi.dtype)
        predicted = self.forward_net(torch.cat([phi, onehot], dim=1))
        forward = torch.linalg.vector_norm(phi_next - predicted, dim=1)
        logits = self.inverse_net(torch.cat([phi, phi_next], dim=1))
        return forward, nn.functional.cross_entropy(logits, action, reduction="none")


class ParticleEntropy:
    """The original's particle-based entropy, whose k nearest particles include the particle
    itself (at distance 0)."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.stats = original_normaliser()

    def __call__(self, rep: torch.Tensor) -> torch.Tensor:
        distances = torch.cdist(rep, rep, compute_mode="donot_use_mm_for_euclid_dist")
        nearest = distances.topk(min(self.k, len(rep)), dim=1, largest=False).values
        self.stats.update(nearest)
        scaled = torch.clamp(nearest / self.stats.mean - KNN_CLIP, min=0.0)
        return torch.log1p(scaled.mean(dim=1))


class PaperAPT(FeatureReward):
    """APT on encoder features, one ICM per input; as in the original, every input's particles
    come from the *pixel* ICM and share one running mean, the language ICM trained but unread."""

    def __init__(self, name: str, read: Callable[[Any], Features],
                 feature_dims: Mapping[str, int], weights: Mapping[str, float], *,
                 num_actions: int, hidden_dim: int, rep_dim: int, lr: float, knn_k: int,
                 device: str | torch.device) -> None:
        super().__init__(name, read, device)
        self.modules = {name: FeatureICM(dim, num_actions, hidden_dim, rep_dim).to(device)
                        for name, dim in feature_dims.items()}
        self.weights = dict(weights)
        self.optimizer = torch.optim.Adam(
            [p for m in self.modules.values() for p in m.parameters()], lr=lr)
        self.entropy = ParticleEntropy(knn_k)

    @property
    def stats(self) -> RunningMeanStd:  # type: ignore[override]
        return self.entropy.stats

    def reward(self, features: Features) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        with torch.no_grad():
            total, terms = 0.0, {}
            encoder = self.modules["pixel"].encoder
            for name, (_, next_obs) in features.items():
                term = self.entropy(encoder(next_obs))
                total = total + self.weights[name] * term
                terms[name] = term.mean().detach()
            return total, total, terms

    def learn(self, features: Features, action: torch.Tensor) -> dict[str, Any]:
        out, total = {}, 0.0
        for name, (obs, next_obs) in features.items():
            forward, inverse = self.modules[name].losses(obs, action, next_obs)
            total = total + forward.mean() + inverse.mean()
            out[f"{name}_forward_loss"] = forward.mean().detach()
            out[f"{name}_inverse_loss"] = inverse.mean().detach()
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
