"""Policy search with an LLM as the optimiser, after ProPS (docs/optimizers.md); config
``conf/policy_search.yaml``, named experiments in ``conf/experiment/``."""
