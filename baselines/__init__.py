"""Intrinsic-motivation baselines (RND, NovelD, APT) on ELLM's agent and training loop.

- :mod:`baselines.intrinsic`: the reward-module seam, running statistics, n-step helpers.
- :mod:`baselines.agent`: :class:`~baselines.agent.IntrinsicAgent`, the DQN on intrinsic rewards.
- :mod:`baselines.rnd`: RND and NovelD; :mod:`baselines.icm_apt`: APT on an ICM representation.

Chosen with ``agent=rnd|noveld|apt`` (``ellm/conf/agent/*.yaml``) or the original
``agent._target_=baselines.rnd.RNDAgent`` spelling; see ``docs/baselines.md``. Only plug-ins of
the training loop live here; the LLM systems that learn without it are in :mod:`llm_in_the_loop`.
"""
