"""ELLM: LLM-suggested goals as intrinsic reward for RL pretraining (Du et al., ICML 2023)."""
