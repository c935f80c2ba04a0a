"""``python -m llm_in_the_loop.policy_search_run [key=value ...]``: policy search with an LLM as
the optimiser (``policy_search/``, docs/optimizers.md)."""

from llm_in_the_loop.policy_search.run import main

if __name__ == "__main__":
    main()
