#!/usr/bin/env bash
# Set up ./.venv if needed, then run a short real ELLM training run on the CPU with the
# rule-based oracle LM (offline). Extra arguments are Hydra overrides, e.g. seed=2.
# The main job needs no local LLM server: skip compiling llama.cpp (the test command adds it).
export ELLM_EXTRAS="${ELLM_EXTRAS:-dev,wandb,report}"
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
exec python train.py \
  env_spec.use_sbert=True use_goal=True use_language_state=sbert \
  env_spec.lm_spec.lm_class=SimpleOracle \
  device=cpu num_train_frames=12000 num_seed_frames=2000 \
  eval_every_frames=6000 num_eval_episodes=2 replay_buffer_num_workers=1 \
  agent.train_eps_decay_steps=10000 exp_name=quickstart "$@"
