"""Driver for Craftax_Baselines ppo.py (unmodified) that logs metrics to JSONL instead of wandb.

Usage: python driver.py --out run.jsonl --seeds 1 2 3 -- <ppo.py CLI args>
  e.g. ... -- --env_name Craftax-Classic-Symbolic-v1 --total_timesteps 1e6 --num_envs 64 --num_steps 32

- The config is built by executing ppo.py's own argparse block (so every default is ppo.py's own),
  then uppercased exactly as run_ppo() does.
- Seeds: for each seed s, the training key is jax.random.split(PRNGKey(s), 1)[0], i.e. identical to
  `python ppo.py --seed s --num_repeats 1`. All seeds are vmapped in one jitted call like run_ppo does
  with --num_repeats (NUM_REPEATS is set to len(seeds)).
- Logging: ppo.py only emits its per-update metric through
  `jax.debug.callback(callback)` -> `batch_log(update_step, create_log_dict(metric, config), config)`
  when DEBUG and USE_WANDB are set. We set both and replace the module-level `ppo.batch_log` with a
  function that appends one JSON line per (update, seed). wandb.init is never called.
  The metric is ppo.py's own: mean over episodes that finished during that update's rollout.
"""
import argparse
import ast
import json
import os
import sys
import time

os.environ.setdefault("WANDB_MODE", "disabled")
SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "src")
sys.path.insert(0, SRC)

import jax
import jax.numpy as jnp
import numpy as np
import ppo  # unmodified Craftax_Baselines/ppo.py


def ppo_default_config(ppo_cli_args):
    """Run ppo.py's own `if __name__ == '__main__'` argparse code (up to parse_known_args)."""
    with open(os.path.join(SRC, "ppo.py")) as f:
        src = f.read()
    tree = ast.parse(src)
    main_if = [n for n in tree.body if isinstance(n, ast.If)][-1]
    stmts = []
    for st in main_if.body:
        stmts.append(st)
        if isinstance(st, ast.Assign) and "parse_known_args" in ast.unparse(st):
            break
    mod = ast.Module(body=stmts, type_ignores=[])
    ns = {"argparse": argparse, "sys": sys}
    old_argv = sys.argv
    sys.argv = ["ppo.py"] + list(ppo_cli_args)
    try:
        exec(compile(mod, "ppo_main_argparse", "exec"), ns)  # noqa: S102 (ppo.py's own parser)
    finally:
        sys.argv = old_argv
    if ns["rest_args"]:
        raise ValueError(f"Unknown args {ns['rest_args']}")
    return {k.upper(): v for k, v in ns["args"].__dict__.items()}


def main():
    argv = sys.argv[1:]
    if "--" in argv:
        i = argv.index("--")
        mine, ppo_args = argv[:i], argv[i + 1 :]
    else:
        mine, ppo_args = argv, []
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    a = p.parse_args(mine)

    config = ppo_default_config(ppo_args)
    config["SEED"] = a.seeds[0]
    config["NUM_REPEATS"] = len(a.seeds)
    config["DEBUG"] = True
    config["USE_WANDB"] = True  # only so that ppo.py traces its logging callback; wandb is never init'ed

    out = open(a.out, "w")  # noqa: SIM115 (written by a callback until the end of main)
    counts = {}
    t_start = [None]

    def jsonl_batch_log(update_step, log, cfg):
        update_step = int(update_step)
        idx = counts.get(update_step, 0)  # debug.callback under vmap is called per batch element, in order
        counts[update_step] = idx + 1
        rec = {
            "seed": a.seeds[idx],
            "update": update_step,
            "env_steps": (update_step + 1) * cfg["NUM_ENVS"] * cfg["NUM_STEPS"],
            "wall": time.time() - t_start[0],
        }
        for k, v in log.items():
            rec[k] = float(np.asarray(v))
        out.write(json.dumps(rec) + "\n")
        out.flush()
        if update_step % 20 == 0 or update_step == cfg["NUM_UPDATES"] - 1:
            print(f"upd {update_step} seed {rec['seed']} steps {rec['env_steps']} wall {rec['wall']:.0f}s "
                  f"ret {rec.get('episode_return', float('nan')):.3f} len {rec.get('episode_length', float('nan')):.1f}",
                  flush=True)

    ppo.batch_log = jsonl_batch_log

    # ppo.py's create_log_dict does arithmetic on the callback's arguments (jax Arrays on CPU). Convert to
    # numpy first so that no jax op is dispatched from inside the host callback (defensive; same numbers).
    # NOTE: with >1 vmapped seed the CPU run still hung (all threads in futex wait, no JSONL output);
    # with --seeds <one seed> it runs fine, so seeds were run sequentially, one process each.
    _orig_create_log_dict = ppo.create_log_dict

    def create_log_dict_np(info, cfg):
        return _orig_create_log_dict({k: np.asarray(v) for k, v in info.items()}, cfg)

    ppo.create_log_dict = create_log_dict_np

    print("CONFIG", json.dumps(config, sort_keys=True), flush=True)
    rngs = jnp.stack([jax.random.split(jax.random.PRNGKey(s), 1)[0] for s in a.seeds])
    train_jit = jax.jit(ppo.make_train(config))
    train_vmap = jax.vmap(train_jit)
    print("NUM_UPDATES", config["NUM_UPDATES"], "MINIBATCH_SIZE", config["MINIBATCH_SIZE"], flush=True)

    t_start[0] = time.time()
    res = train_vmap(rngs)
    jax.block_until_ready(res)
    t1 = time.time()
    print("Time to run experiment", t1 - t_start[0], flush=True)
    print("SPS (all seeds): ", config["TOTAL_TIMESTEPS"] * len(a.seeds) / (t1 - t_start[0]), flush=True)
    out.close()


if __name__ == "__main__":
    main()
