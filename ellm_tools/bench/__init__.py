"""The benchmarks: each measures one part of the project, in one sitting, and prints it.

    python -m ellm_tools.bench [--side-by-side|--lm|--slots N|--actors N|--late|--craftax] ...
    python -m ellm_tools.bench.replay [--memory SIZES]   # the replay: bytes, sampling, memory
    python -m ellm_tools.bench.baselines                 # an update of each baseline vs the DQN
    python -m ellm_tools.bench.sandbox                   # the policy-code sandbox
    python -m ellm_tools.bench.crafter                   # Text-Crafter against raw Crafter
    python -m ellm_tools.bench.housekeep                 # Text-Housekeep's symbolic backend

The front door (``__main__``) times the training loop (:mod:`.loop`), a real LM's cost and the
local server's slots (:mod:`.lm`), actors (:mod:`.actors`), a run's late phase (:mod:`.late`) and
the Craftax engine (:mod:`.craftax`); :mod:`.common` and :mod:`.replay_data` hold what several
benches share. They import the method and the games; nothing imports them.
"""
