"""Tools beside the method, each run as ``python -m ellm_tools.<name>``: the report, the local
LLM server, the goal-quality tool and the benchmarks; they import ``ellm``, never the reverse."""
