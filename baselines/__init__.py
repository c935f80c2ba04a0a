"""Intrinsic-motivation baselines (RND, NovelD, APT) on ELLM's agent and training loop."""
