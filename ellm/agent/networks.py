"""Q-network of the goal-conditioned DQN (ELLM.md section 5).

The agent feeds cached frozen sentence embeddings, so checkpoints never hold transformer
weights.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


def dueling_combine(value: torch.Tensor, advantage: torch.Tensor) -> torch.Tensor:
    """Dueling aggregation Q = V + A - mean_a(A); ``value`` [B, 1], ``advantage`` [B, A]."""
    return value + advantage - advantage.mean(dim=1, keepdim=True)


def _init_weights(module: nn.Module) -> None:
    """Orthogonal weights (ReLU gain for convolutions), zero biases."""
    if isinstance(module, nn.Conv2d):
        nn.init.orthogonal_(module.weight, gain=nn.init.calculate_gain("relu"))
        nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Linear):
        nn.init.orthogonal_(module.weight)
        nn.init.zeros_(module.bias)


class ImageEncoder(nn.Module):
    """Nature-DQN conv stack on uint8 frames, L2-normalised, then a Linear to ``out_dim``."""

    def __init__(self, obs_shape: tuple[int, int, int], out_dim: int, channels_last: bool = False):
        super().__init__()
        channels, height, width = obs_shape
        self.convs = nn.Sequential(
            nn.Conv2d(channels, 32, kernel_size=8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, kernel_size=3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            conv_dim = self.convs(torch.zeros(1, channels, height, width)).shape[1]
        self.linear = nn.Linear(conv_dim, out_dim)
        self.channels_last = channels_last

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        if frames.dtype != torch.uint8:
            raise TypeError(f"ImageEncoder expects uint8 frames, got {frames.dtype}")
        x = frames.float().div_(255.0)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        h = F.normalize(self.convs(x), dim=1)
        return self.linear(h)


def _head(hidden_dim: int, out_dim: int) -> nn.Sequential:
    """hidden -> hidden -> hidden -> out MLP (two hidden layers); the last Linear is ``[-1]``."""
    return nn.Sequential(
        nn.Linear(hidden_dim, hidden_dim),
        nn.ReLU(),
        nn.Linear(hidden_dim, hidden_dim),
        nn.ReLU(),
        nn.Linear(hidden_dim, out_dim),
    )


ENCODER_MODULES = ("image_encoder", "language_proj", "goal_proj", "fusion")


class QNetwork(nn.Module):
    """Dueling Q-network over any non-empty subset of {image, language state, goal}."""

    def __init__(
        self,
        obs_shape: tuple[int, int, int],
        num_actions: int,
        hidden_dim: int,
        use_image: bool,
        use_language_state: bool,
        use_goal: bool,
        text_dim: int,
        channels_last: bool = False,
    ):
        super().__init__()
        if not (use_image or use_language_state or use_goal):
            raise ValueError("QNetwork needs at least one input (image, language state or goal)")
        self.image_encoder = (
            ImageEncoder(obs_shape, hidden_dim, channels_last) if use_image else None
        )
        self.language_proj = nn.Linear(text_dim, hidden_dim) if use_language_state else None
        self.goal_proj = nn.Linear(text_dim, hidden_dim) if use_goal else None
        num_inputs = int(use_image) + int(use_language_state) + int(use_goal)
        self.fusion = nn.Sequential(nn.Linear(num_inputs * hidden_dim, hidden_dim), nn.ReLU())
        self.value = _head(hidden_dim, 1)
        self.advantage = _head(hidden_dim, num_actions)
        self.apply(_init_weights)
        if self.image_encoder is not None and channels_last:
            self.image_encoder.convs.to(memory_format=torch.channels_last)

    def features(
        self,
        frames: torch.Tensor | None = None,
        language: torch.Tensor | None = None,
        goal: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Fused ``[B, hidden_dim]`` features; pass exactly the inputs this network uses."""
        parts = []
        for name, module, x in (
            ("frames", self.image_encoder, frames),
            ("language", self.language_proj, language),
            ("goal", self.goal_proj, goal),
        ):
            if module is None:
                continue
            if x is None:
                raise ValueError(f"QNetwork was built with a {name} input but got none")
            parts.append(module(x))
        return self.fusion(torch.cat(parts, dim=1) if len(parts) > 1 else parts[0])

    def forward(
        self,
        frames: torch.Tensor | None = None,
        language: torch.Tensor | None = None,
        goal: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Q-values ``[B, num_actions]``."""
        return self.heads(self.features(frames, language, goal))

    def heads(self, h: torch.Tensor) -> torch.Tensor:
        """Q-values from fused features (the dueling heads alone)."""
        return dueling_combine(self.value(h), self.advantage(h))
