"""The torch engine's agent: the goal-conditioned DQN, its networks and what it reads of a step."""

from ellm.agent.dqn import DQNAgent

__all__ = ["DQNAgent"]  # config.yaml's agent._target_, and that of every recorded config
