"""Intrinsic-motivation baselines (RND, NovelD, APT): reward plug-ins of ELLM's DQN, chosen
with ``method=rnd|noveld|apt`` (aliases ``agent=rnd|noveld|apt``) or the original ``agent._target_`` (docs/baselines.md)."""
