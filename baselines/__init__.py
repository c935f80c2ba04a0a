"""Intrinsic-motivation baselines (RND, NovelD, APT) on ELLM's agent and training loop.

Each is a :class:`~ellm.reward.BatchReward` plug-in of the DQN, with its options beside it:

- :mod:`baselines.intrinsic`: running statistics, the plug-ins' base and the fixed setting's
  n-step window (:class:`~baselines.intrinsic.WindowReward`).
- :mod:`baselines.agent`: :class:`~baselines.agent.IntrinsicAgent`, the DQN with one plug-in.
- :mod:`baselines.rnd`: RND and NovelD; :mod:`baselines.icm_apt`: APT on an ICM representation;
  :mod:`baselines.paper`: the three as the original computed them (the paper setting).

Chosen with ``agent=rnd|noveld|apt`` (``ellm/conf/agent/*.yaml``) or the original
``agent._target_=baselines.rnd.RNDAgent`` spelling; see ``docs/baselines.md``. Only plug-ins of
the training loop live here; the LLM systems that learn without it are in :mod:`llm_in_the_loop`.
"""
