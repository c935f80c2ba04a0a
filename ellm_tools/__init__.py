"""Tools beside the method, each run as ``python -m ellm_tools.<name>``: the run report
(``report``), the packaged local LLM server and its llama.cpp loading (``serve``, ``llama``,
``llama_grammar``), the goal-quality tool (``lm_quality``). They import ``ellm``; ``ellm``
never imports them."""
