"""IntrinsicAgent: ELLM's DQN trained on the replay's reward plus one plug-in's n-step return,
which spans the same k steps as the replay's sum and its bootstrap (docs/baselines.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from baselines.intrinsic import IntrinsicReward, Scorer, WindowReward, window_stacks
from ellm.agent.dqn import DQNAgent, check_same
from ellm.agent.options import AgentOptions
from ellm.errors import ConfigError
from ellm.run.schema import MAX_WIDTH, boolean_or_auto, integer, non_negative, number, positive


@dataclass(frozen=True)
class IntrinsicOptions(AgentOptions):
    """The ``agent`` keys every intrinsic-reward baseline adds (``ellm/method/rnd.yaml``)."""

    use_language: bool | str = boolean_or_auto("auto")
    language_weight: float = non_negative(0.5)
    extr_rew_weight: float = number(1.0)  # read by the loop
    rep_dim: int = integer(1, 512, high=MAX_WIDTH)
    intrinsic_lr: float = positive(1e-4)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.use_language is True and self.use_language_state != "sbert":
            raise ConfigError("agent.use_language=True needs use_language_state=sbert: the "
                              "language state is stored in the replay only then")

    @property
    def language_input(self) -> bool:
        """A second module on the language state; auto: the original's True, where it can run."""
        if self.use_language == "auto":
            return self.use_language_state == "sbert"
        return bool(self.use_language)

    def check_run(self, *, frame_stack: int, nstep: int, batch_size: int | None) -> None:
        if nstep > frame_stack:
            raise ConfigError(f"nstep={nstep} is larger than frame_stack={frame_stack}: the "
                              "baselines rebuild every state of the n-step window from the "
                              "batch's two frame stacks, which needs nstep <= frame_stack")


class IntrinsicAgent(DQNAgent):
    """A DQNAgent whose subclasses build its plug-in: :meth:`scorer` or :meth:`paper_reward`."""

    Options: ClassVar[type[AgentOptions]] = IntrinsicOptions
    options: IntrinsicOptions
    method: str = "intrinsic"  # the plug-in's name: prefix of its metrics

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        o = self.options
        o.check_run(frame_stack=self.obs_shape[0], nstep=self.nstep, batch_size=None)
        self.weights = {"pixel": 1.0, "language": o.language_weight}
        seed = kwargs.get("seed")
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed + 1)
            inputs = ["pixel", "language"] if o.language_input else ["pixel"]
            if self.setting.feature_rewards:
                plugin = self.paper_reward({name: o.hidden_dim for name in inputs})
            else:
                shapes = {"pixel": self.obs_shape, "language": (self.text.dim,)}
                plugin = WindowReward(
                    self.method, self.window_inputs,
                    {name: self.scorer(shapes[name]) for name in inputs}, self.weights,
                    nstep=self.nstep, gamma=self.discount, device=self.device,
                    precision=self.precision)
        self.rewards.append(plugin)

    def scorer(self, input_shape: tuple[int, ...]) -> Scorer:
        raise NotImplementedError

    def paper_reward(self, feature_dims: Mapping[str, int]) -> IntrinsicReward:
        raise NotImplementedError

    def intrinsic_config(self) -> dict[str, Any]:
        """Config values that fix the plug-in's shapes and meaning (checked on resume)."""
        return {"agent.use_language": self.options.language_input,
                "agent.rep_dim": self.options.rep_dim,
                "paper_setting": self.setting.feature_rewards}

    def window_inputs(self, batch: Any) -> dict[str, torch.Tensor]:
        n_steps = batch.n_steps.to(self.device)
        inputs = {"pixel": window_stacks(batch.obs.to(self.device),
                                         batch.next_obs.to(self.device), n_steps, self.nstep)}
        if self.options.language_input:
            inputs["language"] = self.text.embed_ids(batch.window_text_obs)
        return inputs

    @torch.no_grad()
    def encoder_features(self, batch: Any) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """(s, s') online-encoder features; with ``use_language``, image and language apart."""
        obs = batch.obs.to(self.device) if self.options.use_image else None
        next_obs = batch.next_obs.to(self.device) if self.options.use_image else None
        text = self.text.of_batch(batch)
        if self.options.language_input:
            return {"pixel": (self.online.image_encoder(obs), self.online.image_encoder(next_obs)),
                    "language": (self.online.language_proj(text.language),
                                 self.online.language_proj(text.next_language))}
        return {"pixel": (self.online.features(obs, text.language, text.goal),
                          self.online.features(next_obs, text.next_language, text.next_goal))}

    @property
    def _state_key(self) -> str:
        return "paper" if self.setting.feature_rewards else "modules"

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["intrinsic"] = {"config": self.intrinsic_config(),
                              self._state_key: self.rewards[0].state_dict()}
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        saved = state.get("intrinsic") if isinstance(state, Mapping) else None
        if saved is not None:
            check_same(saved["config"], self.intrinsic_config())
        super().load_state_dict(state)  # also checks agent._target_ (a DQN snapshot fails here)
        if saved is None:
            raise ValueError(f"checkpoint has no intrinsic-reward state for {type(self).__name__}")
        self.rewards[0].load_state_dict(saved[self._state_key])

    # load_weights (finetuning) is inherited: only the Q-network; the plug-in starts fresh.
