"""RND, NovelD and APT as the original computed them (the paper setting; docs/fidelity.md rows 6-7).

The plug-ins read the DQN's own encoder features, not pixels: the fused features of the online
network, or, with ``use_language``, its image features and its language-state features apart
(taken without gradients; the original let them flow into the Q-network through the TD target).
Each sampled transition gets ONE intrinsic reward, which stands for the whole n-step intrinsic
return: the agent adds it to the replay's ``reward``.

RND / NovelD normalise the features with a BatchNorm (no affine, in training mode, as the
original left it) and clamp them to +-5 before the target and predictor MLPs:

    RND:    r = e(s) + language_weight * e_lang(s)
    NovelD: r = relu(e(s') - alpha * e(s)) + language_weight * relu(e_lang(s') - alpha * e_lang(s))

with e the predictor's mean squared error, divided by the running standard deviation of r
(a prior of mean 0 and variance 1 at count 1e-4, as the original's). APT: the particle-based
entropy of s' on an ICM's representation (:class:`ParticleEntropy`).
"""

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
    """The original's running statistic: a prior of mean 0 and variance 1 at count 1e-4."""
    return RunningMeanStd(prior_count=1e-4)


class FeatureReward(IntrinsicReward):
    """The paper setting's plug-ins: ONE reward per sampled transition, from the DQN encoder's
    features ``read(batch)`` = {input: (s, s')}; it stands for the whole n-step return.
    Subclasses compute it (:meth:`reward`) and learn (:meth:`learn`)."""

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
        """One gradient step on the batch's transitions; the losses."""
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
        """Per-sample prediction error [N]."""
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
        """Raw = the weighted prediction errors, reward = raw / running std."""
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
        self.stats = original_normaliser()  # the running mean is its ``mean``

    def __call__(self, rep: torch.Tensor) -> torch.Tensor:
        distances = torch.cdist(rep, rep, compute_mode="donot_use_mm_for_euclid_dist")
        nearest = distances.topk(min(self.k, len(rep)), dim=1, largest=False).values
        self.stats.update(nearest)
        scaled = torch.clamp(nearest / self.stats.mean - KNN_CLIP, min=0.0)
        return torch.log1p(scaled.mean(dim=1))


class PaperAPT(FeatureReward):
    """APT on encoder features, one ICM per input. As in the original, the particles of every
    input are the *pixel* ICM's representation of its features, and one running mean serves
    all of them; the language ICM is trained but only the pixel encoder is read."""

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
        """Raw = reward = the weighted entropy rewards of s'."""
        with torch.no_grad():
            total, terms = 0.0, {}
            encoder = self.modules["pixel"].encoder
            for name, (_, next_obs) in features.items():
                term = self.entropy(encoder(next_obs))
                total = total + self.weights[name] * term
                terms[name] = term.mean().detach()
            return total, total, terms

    def learn(self, features: Features, action: torch.Tensor) -> dict[str, Any]:
        """One ICM step on the batch's transitions s -> s'; each input's losses."""
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
