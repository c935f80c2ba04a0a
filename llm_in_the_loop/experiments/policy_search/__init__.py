"""``policy_search_run experiment=NAME`` (``pkg://llm_in_the_loop.experiments.policy_search``):
a package, because Hydra's ``pkg://`` reads only directories with an ``__init__.py``."""
