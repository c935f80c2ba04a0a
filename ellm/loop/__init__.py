"""The torch engine's loop: one training loop over a collector, one rollout, evaluation."""
