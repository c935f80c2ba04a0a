"""The LLM as the policy on the language-feedback games (docs/llf.md); config ``conf/llf.yaml``."""
