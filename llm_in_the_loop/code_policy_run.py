"""``python -m llm_in_the_loop.code_policy_run [key=value ...]``: code as policy, rewritten by
Trace's OptoPrime (``code_policy/``, docs/optimizers.md)."""

from llm_in_the_loop.code_policy.run import main

if __name__ == "__main__":
    main()
