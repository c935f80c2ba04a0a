"""Code as policy: Trace's OptoPrime rewrites a policy function that runs in ``sandbox/``
(docs/optimizers.md); config ``conf/code_policy.yaml``, named experiments in
``conf/experiment/``."""
