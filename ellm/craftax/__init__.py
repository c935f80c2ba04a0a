"""The Craftax engine: ELLM's training step on Craftax-Classic as one compiled JAX loop
(environment, captions, goals, the goal reward, a goal-conditioned PQN and the baselines'
rewards). The torch engine (``ellm.loop.workspace``) stays the faithful one; docs/craftax.md says
what differs."""
