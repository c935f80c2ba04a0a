"""The options of ellm's DQN and the learner choices the paper setting makes differently."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ellm.errors import ConfigError
from ellm.run import schema


@dataclass(frozen=True)
class AgentOptions:
    """The ``agent`` keys of ellm's DQN (documented in ``config.yaml``)."""

    lr: float = schema.positive(6.25e-5)
    use_image: bool = schema.boolean(True)
    use_goal: bool = schema.boolean(False)
    use_language_state: str | None = schema.one_of(None, "sbert", default=None)
    goal_encoder_type: str = schema.one_of("sbert", default="sbert")
    finetune_settings: str = schema.one_of("train_all", "linear", "critic", default="train_all")
    other_model_prob: float = schema.probability(0.5)
    update_every_steps: int = schema.integer(1, 4)
    critic_target_update_every_steps: int = schema.integer(1, 8000)
    critic_target_tau: float = schema.valid(
        "a number in (0, 1]", lambda v: schema.is_num(v) and 0 < v <= 1, 1.0)
    train_eps_decay_steps: int = schema.integer(0, 1_000_000)
    train_eps_min: float = schema.probability(0.01)
    train_eps_max: float = schema.probability(1.0)
    eval_eps: float = schema.probability(0.001)
    hidden_dim: int = schema.integer(1, 512, high=schema.MAX_WIDTH)
    reward_scale: float = schema.number(1.0)
    debug: bool = schema.boolean(False)
    joint_text: bool | str = schema.boolean_or_auto("auto")
    reinit_text_encoder: bool | str = schema.boolean_or_auto("auto")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if f.type == "float":
                object.__setattr__(self, f.name, float(getattr(self, f.name)))
        if self.train_eps_min > self.train_eps_max:
            raise ConfigError(f"agent.train_eps_min={self.train_eps_min} is invalid: expected at "
                              f"most agent.train_eps_max={self.train_eps_max}")
        if not (self.use_image or self.use_language_state or self.use_goal):
            raise ConfigError("agent.use_image, agent.use_language_state and agent.use_goal are "
                              "all off: the agent needs at least one input")

    def check_run(self, *, frame_stack: int, nstep: int, batch_size: int | None) -> None:
        """Checks against the run's keys (none for the DQN; subclasses add theirs)."""


# Agent keys the config accepts and the agent ignores (ellm.run.spec.IGNORED_KEYS says why).
IGNORED_OPTIONS = ("use_tb", "use_wandb", "vocab")


@dataclass(frozen=True)
class LearnerSetting:
    """The learner's choices that the paper setting (docs/fidelity.md) makes differently."""

    shared_encoder: bool
    text_input: str | None
    reinit_text_encoder: bool
    feature_rewards: bool

    @classmethod
    def choose(cls, paper_setting: bool, o: AgentOptions) -> LearnerSetting:
        text = None
        if o.use_language_state or o.use_goal:
            both = o.use_language_state == "sbert" and o.use_goal
            joint = both and (paper_setting if o.joint_text == "auto" else bool(o.joint_text))
            text = "joint" if joint else "paper" if paper_setting else "separate"
        reinit = paper_setting if o.reinit_text_encoder == "auto" else o.reinit_text_encoder
        return cls(paper_setting, text, bool(reinit), feature_rewards=paper_setting)


__all__ = ["IGNORED_OPTIONS", "AgentOptions", "LearnerSetting"]
