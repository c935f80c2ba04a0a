"""IntrinsicAgent: ELLM's goal-conditioned DQN trained on an intrinsic reward computed per batch.

The LM reward stored in the replay is not used: for every sampled n-step transition the agent
scores each step of its window with its intrinsic-reward modules and trains the unchanged
DQN update (:meth:`ellm.agent.DQNAgent.update`) on

    R = sum_{j<k} gamma^j * r_int(s_{i-1+j} -> s_{i+j})  [+ extr_rew_weight * G]

where k is the batch's ``n_steps``, ``r_int`` the sum of the modules' normalised rewards
(the pixel module with weight 1, the language module with ``language_weight``), and G the
replay's n-step sum of the (clipped) game reward, ``batch.game_reward``, added only with
``use_extr_rew=True``. The loop stores that game reward beside the LM reward for every step, so
it reaches the batch summed exactly like the reward (same gamma, same window). R is then
bootstrapped with the batch's ``discount`` = gamma^k times the termination flag, so intrinsic,
extrinsic and bootstrap terms all count the same k steps. Intrinsic rewards are not clipped
(they are already normalised).

The states s_{i-1} .. s_{i-1+k} of the window come from the batch itself: their frame stacks
are rebuilt from ``obs`` and ``next_obs`` (:func:`baselines.intrinsic.window_stacks`, which
needs ``nstep <= frame_stack``), their texts from ``window_text_obs``. Particle-based rewards
compare a state only with the states at the same window position in the other samples, never
with the neighbouring states of its own trajectory.

Each update scores the batch with the modules as they are, takes the DQN step, then one
gradient step of each module on the batch's first transitions (s_{i-1}, a_i, s_i).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from baselines.intrinsic import (
    IntrinsicReward,
    Transitions,
    nstep_intrinsic_return,
    window_stacks,
)
from ellm.agent import DQNAgent


def check_option(key: str, value: Any, ok: bool, expected: str) -> None:
    if not ok:
        raise ValueError(f"agent.{key}={value!r}: expected {expected}")


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class IntrinsicAgent(DQNAgent):
    """A DQNAgent whose TD reward is the intrinsic n-step return (see module docstring).

    Extra keyword arguments (all optional, the original ``+agent.<key>=`` spelling):
    ``use_language`` (add a module on the language-state embedding; needs
    ``use_language_state=sbert``), ``language_weight`` (its reward's weight, 0.5),
    ``extr_rew_weight`` (the game reward's weight with ``use_extr_rew=True``, 1.0),
    ``rep_dim`` (the modules' feature width, 512), ``intrinsic_lr`` (the modules' Adam learning
    rate, 1e-4). Subclasses build the modules in :meth:`make_module`.
    """

    method: str = "intrinsic"  # prefix of the metric names

    def __init__(
        self,
        *args: Any,
        use_language: bool | str = "auto",
        language_weight: float = 0.5,
        extr_rew_weight: float = 1.0,
        rep_dim: int = 512,
        intrinsic_lr: float = 1e-4,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        check_option("use_language", use_language,
                     isinstance(use_language, bool) or use_language == "auto",
                     "true, false or auto")
        if use_language == "auto":  # the original's default (True) wherever it could run
            use_language = self.use_language_state == "sbert"
        check_option("language_weight", language_weight,
                     is_number(language_weight) and language_weight >= 0, "a number >= 0")
        check_option("extr_rew_weight", extr_rew_weight, is_number(extr_rew_weight), "a number")
        check_option("rep_dim", rep_dim, isinstance(rep_dim, int) and rep_dim >= 1,
                     "a positive integer")
        check_option("intrinsic_lr", intrinsic_lr, is_number(intrinsic_lr) and intrinsic_lr > 0,
                     "a positive number")
        if use_language and self.use_language_state != "sbert":
            raise ValueError("agent.use_language=True needs use_language_state=sbert: the "
                             "language state is stored in the replay only then")
        if self.nstep > self.obs_shape[0]:
            raise ValueError(f"nstep={self.nstep} is larger than frame_stack={self.obs_shape[0]}:"
                             " the baselines rebuild every state of the n-step window from the "
                             "batch's two frame stacks, which needs nstep <= frame_stack")
        self.use_language = use_language
        self.language_weight = float(language_weight)
        self.extr_rew_weight = float(extr_rew_weight)
        self.rep_dim = rep_dim
        self.intrinsic_lr = float(intrinsic_lr)
        inputs = {"pixel": self.obs_shape}
        if use_language:
            inputs["language"] = (self.text_dim,)
        self.weights = {"pixel": 1.0, "language": self.language_weight}
        self.intrinsic: dict[str, IntrinsicReward] = {}
        self.paper_module: Any = None  # the original's computation (baselines/paper.py)
        with torch.random.fork_rng(devices=[]):
            seed = kwargs.get("seed")
            if seed is not None:
                torch.manual_seed(seed + 1)
            if self.paper_setting:
                dims = {name: self.hidden_dim for name in inputs}
                self.paper_module = self.make_paper_module(dims)
            if self.paper_module is None:
                for name, shape in inputs.items():
                    self.intrinsic[name] = self.make_module(tuple(shape))

    def make_module(self, input_shape: tuple[int, ...]) -> IntrinsicReward:
        """The intrinsic-reward module for inputs of ``input_shape`` ((S, H, W) or (D,))."""
        raise NotImplementedError

    def make_paper_module(self, feature_dims: Mapping[str, int]) -> Any:
        """The original's computation on encoder features (``paper_setting``), or None where it
        is not reproduced yet: the agent then uses :meth:`make_module`'s (docs/fidelity.md)."""
        return None

    def intrinsic_config(self) -> dict[str, Any]:
        """Config values that fix the modules' shapes and meaning (checked on resume)."""
        return {"agent.use_language": self.use_language, "agent.rep_dim": self.rep_dim,
                "paper_setting": self.paper_module is not None}

    # ------------------------------------------------------------------ learning
    def window_inputs(self, batch: Any) -> dict[str, torch.Tensor]:
        """Each module's input for the window's states: [B, nstep + 1, ...]."""
        n_steps = batch.n_steps.to(self.device)
        inputs = {"pixel": window_stacks(batch.obs.to(self.device),
                                         batch.next_obs.to(self.device), n_steps, self.nstep)}
        if self.use_language:
            inputs["language"] = self.embed_ids(batch.window_text_obs)
        return inputs

    def intrinsic_rewards(self, batch: Any, inputs: Mapping[str, torch.Tensor]
                          ) -> tuple[torch.Tensor, dict[str, float]]:
        """Weighted intrinsic reward of each window step, [B, nstep] (0 past k), and metrics;
        ``inputs`` from :meth:`window_inputs`."""
        n_steps = batch.n_steps.to(self.device, torch.long)
        steps = torch.arange(self.nstep, device=self.device)
        rows, j = (steps[None, :] < n_steps[:, None]).nonzero(as_tuple=True)
        first = j == 0
        rewards = torch.zeros(len(n_steps), self.nstep, device=self.device)
        metrics: dict[str, float] = {}
        action = torch.where(first, batch.action.to(self.device, torch.long)[rows], -1)
        for name, x in inputs.items():
            out = self.intrinsic[name].compute(
                Transitions(x[rows, j], action, x[rows, j + 1], group=j))
            rewards[rows, j] += self.weights[name] * out.reward
            prefix = f"{self.method}_{name}"
            metrics[f"{prefix}_raw"] = out.raw.mean().item()
            metrics[f"{prefix}_reward"] = out.reward.mean().item()
            metrics.update({f"{prefix}_{k}": v
                            for k, v in self.intrinsic[name].statistics().items()})
        metrics["intrinsic_reward"] = rewards[rows, j].mean().item()
        return rewards, metrics

    @torch.no_grad()
    def encoder_features(self, batch: Any) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """(s, s') features of the online DQN encoder: fused, or, with ``use_language``, the
        image and language-state features apart (as the original's baselines read them)."""
        obs = batch.obs.to(self.device) if self.use_image else None
        next_obs = batch.next_obs.to(self.device) if self.use_image else None
        text = self._batch_text(batch)
        if self.use_language:
            return {"pixel": (self.online.image_encoder(obs), self.online.image_encoder(next_obs)),
                    "language": (self.online.language_proj(text.language),
                                 self.online.language_proj(text.next_language))}
        return {"pixel": (self.online.features(obs, text.language, text.goal),
                          self.online.features(next_obs, text.next_language, text.next_goal))}

    def paper_update(self, batch: Any, step: int) -> dict[str, float]:
        """One reward per sample on encoder features, replacing the n-step reward."""
        features = self.encoder_features(batch)
        raw, reward, terms = self.paper_module.reward(features)
        metrics = {f"{self.method}_raw": raw.mean().item(),
                   f"{self.method}_raw_std": self.paper_module.stats.std,
                   **{f"{self.method}_{name}_raw": v for name, v in terms.items()},
                   "intrinsic_reward": reward.mean().item(),
                   "intrinsic_return": reward.mean().item()}
        game = batch.game_reward.to(self.device, torch.float32)
        metrics["game_return"] = game.mean().item()
        if self.use_extr_rew:
            reward = reward + self.extr_rew_weight * game
        metrics.update(super().update(batch._replace(reward=reward), step))
        losses = self.paper_module.update(features, batch.action.to(self.device, torch.long))
        metrics.update({f"{self.method}_{k}": v for k, v in losses.items()})
        return metrics

    def update(self, batch: Any, step: int) -> dict[str, float]:
        """Score the batch, one DQN step on the combined n-step reward, one step per module."""
        if self.paper_module is not None:
            return self.paper_update(batch, step)
        inputs = self.window_inputs(batch)
        rewards, metrics = self.intrinsic_rewards(batch, inputs)
        n_steps = batch.n_steps.to(self.device)
        reward = nstep_intrinsic_return(rewards, n_steps, self.discount)
        metrics["intrinsic_return"] = reward.mean().item()
        game = batch.game_reward.to(self.device, torch.float32)
        metrics["game_return"] = game.mean().item()
        if self.use_extr_rew:
            reward = reward + self.extr_rew_weight * game
        metrics.update(super().update(batch._replace(reward=reward), step))
        action = batch.action.to(self.device, torch.long)
        for name, x in inputs.items():
            losses = self.intrinsic[name].update(Transitions(x[:, 0], action, x[:, 1]))
            metrics.update({f"{self.method}_{name}_{k}": v for k, v in losses.items()})
        return metrics

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["intrinsic"] = {
            "config": self.intrinsic_config(),
            "modules": {name: module.state_dict() for name, module in self.intrinsic.items()},
        }
        if self.paper_module is not None:
            state["intrinsic"]["paper"] = self.paper_module.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume: the DQN state plus every module's networks, optimiser and statistics."""
        saved = state.get("intrinsic") if isinstance(state, Mapping) else None
        if saved is not None:
            mine = self.intrinsic_config()
            diffs = [f"{k}: checkpoint={saved['config'].get(k)!r}, this agent={mine.get(k)!r}"
                     for k in sorted(set(saved["config"]) | set(mine))
                     if saved["config"].get(k) != mine.get(k)]
            if diffs:
                raise ValueError("checkpoint does not match this agent's config: "
                                 + "; ".join(diffs))
        super().load_state_dict(state)  # also checks agent._target_ (a DQN snapshot fails here)
        if saved is None:
            raise ValueError(f"checkpoint has no intrinsic-reward state for {type(self).__name__}")
        for name, module in self.intrinsic.items():
            module.load_state_dict(saved["modules"][name])
        if self.paper_module is not None:
            self.paper_module.load_state_dict(saved["paper"])

    # load_weights (finetuning) is inherited: only the Q-network; the modules start fresh.
