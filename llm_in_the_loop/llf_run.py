"""``python -m llm_in_the_loop.llf_run [key=value ...]``: the LLM as the policy on a
language-feedback game (``llf/``, docs/llf.md)."""

from llm_in_the_loop.llf.run import main

if __name__ == "__main__":
    main()
