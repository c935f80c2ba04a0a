"""Tools beside the method, each run as ``python -m ellm_tools.<name>``: the run report
(``report``), the packaged local LLM server and its llama.cpp loading (``serve``, ``llama``,
``llama_grammar``), the goal-quality tool (``lm_quality``), and the benches of the loop, the
actors, the replay and its memory, the baselines and the policy-code sandbox (``bench``,
``bench_late``, ``bench_actors``, ``bench_replay``, ``replay_memory``, ``bench_baselines``,
``bench_sandbox``). They import ``ellm`` (and ``llm_in_the_loop``); neither imports them."""
