"""Three systems that put an LLM into learning without ELLM's DQN and its training loop:

- LLM as policy on the language-feedback games (``llf-crafter-v0``, ``llf-housekeep-v0``):
  :mod:`llm_in_the_loop.llf` (the policies), ``python -m llm_in_the_loop.llf_run`` (docs/llf.md);
- LLM policy search, the LLM proposing a small policy's parameters from the returns so far:
  :mod:`llm_in_the_loop.policy_search`, :mod:`llm_in_the_loop.search_policies`,
  ``python -m llm_in_the_loop.policy_search_run`` (docs/optimizers.md);
- LLM code as policy, the LLM rewriting a policy function from feedback (Trace's OptoPrime):
  :mod:`llm_in_the_loop.code_policy`, ``python -m llm_in_the_loop.code_policy_run``.

Beside them: the sandbox the written code runs in (:mod:`llm_in_the_loop.sandbox`), the adapter
from Trace to the project's LM client (:mod:`llm_in_the_loop.opto_llm`), Meta-World pick-place
with feedback (:mod:`llm_in_the_loop.metaworld_feedback`) and the optimisers' LM usage metrics
(:mod:`llm_in_the_loop.optim_log`). The entry points' configs are in ``llm_in_the_loop/conf/`` (``llf.yaml``, ...).
The exploration baselines that plug into the training loop are in :mod:`baselines`.
"""

import gymnasium as _gym

if "llf-metaworld-pick-place-v2" not in _gym.registry:
    # Text fields and None feedback are the LLF contract, not gymnasium's checks'.
    _gym.register(id="llf-metaworld-pick-place-v2",
                  entry_point="llm_in_the_loop.metaworld_llf:make", disable_env_checker=True,
                  order_enforce=False)
