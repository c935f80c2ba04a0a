"""``code_policy_run experiment=NAME`` (``pkg://llm_in_the_loop.experiments.code_policy``): a
package, because Hydra's ``pkg://`` reads only directories with an ``__init__.py``."""
