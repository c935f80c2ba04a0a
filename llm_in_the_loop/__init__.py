"""Three systems that put an LLM into learning without ELLM's DQN and its training loop, one
subpackage each: the LLM as policy (``llf/``, docs/llf.md), LLM policy search and LLM code as
policy (``policy_search/``, ``code_policy/``, docs/optimizers.md). Each runs as ``python -m
llm_in_the_loop.llf_run`` (``policy_search_run``, ``code_policy_run``).
"""

import gymnasium as _gym

if "llf-metaworld-pick-place-v2" not in _gym.registry:
    # Text fields and None feedback are the LLF contract, not gymnasium's checks'.
    _gym.register(id="llf-metaworld-pick-place-v2",
                  entry_point="llm_in_the_loop.code_policy.metaworld_llf_env:make",
                  disable_env_checker=True, order_enforce=False)
