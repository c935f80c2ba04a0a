"""Tools beside the method, each run as ``python -m ellm_tools.<name>``: the run report
(``report``), the packaged local LLM server, its models and its llama.cpp loading (``serve``,
``packaged_models``, ``llama``, ``llama_grammar``), the goal-quality tool (``lm_quality``), and
every benchmark (``bench``: the loop, a real LM, the actors, the late phase, Craftax, the replay
and its memory, the baselines, the policy-code sandbox and the games' envs). They import
``ellm`` (and ``llm_in_the_loop``); neither imports them."""
