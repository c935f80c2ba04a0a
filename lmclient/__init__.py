"""An OpenAI-compatible LLM client: answers cached, budgeted, retried, checked and constrained.

It knows no game and no training method, and imports nothing of the project around it
(tests/test_layout_lm.py). Its modules are imported by name (``lmclient.client.LMClient``), so
that importing :mod:`lmclient.errors` alone stays cheap. docs/lm.md describes what it does.
"""
