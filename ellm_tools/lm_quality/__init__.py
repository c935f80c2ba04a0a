"""What a goal suggester is worth, in a minute: ``python -m ellm_tools.lm_quality``.

    python -m ellm_tools.lm_quality [states=N] [out=DIR] [key=value ...]

``key=value`` are the overrides of ``train.py`` (``env_spec.lm_spec.*``, ``env_spec.name``,
``seed``, ...), composed from the same ``config.yaml`` and checked by the same code, so a bad key
stops with the same message and exit code. The suggester is built as training builds it.

Crafter: ``states`` text states from random and oracle-guided play (:mod:`.states`), each asked
once; the goals are scored against the oracle's feasible set (:mod:`.score`). Housekeep
(``env_spec.name=Housekeep``): ``states`` yes/no questions of the configured scene, scored
against the episodes' ground truth. Writes ``DIR/quality.md`` (a table row) and
``DIR/quality.json`` (every number, the sample's make-up, the LM spec without secrets).

Unless ``env_spec.lm_spec.cache_dir`` is set, answers are cached in ``DIR/lm_cache``, not in the
training cache: a first run measures the model, a rerun into the same ``DIR`` replays it.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import OmegaConf

from ellm.games.crafter.oracle import SimpleOracle
from ellm.run.checkpoint import CheckpointError
from ellm.run.config import RunSpec, redacted, validate
from ellm_tools.lm_quality import score
from ellm_tools.lm_quality.states import sample_crafter_states, sample_housekeep_questions
from lmclient.client import LMConfigError

ROOT = Path(__file__).resolve().parents[2]  # config.yaml
CONFIG_ERROR = 2  # as train.py
log = logging.getLogger(__name__)
DEFAULT_STATES = 200
DEFAULT_OUT = "lm_quality"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        states, out, overrides = _own_args(argv)
        spec, game, suggester = prepare(overrides, out)
    except (ValueError, LMConfigError) as err:  # ConfigError and Hydra's errors are ValueErrors
        print(f"error: {err}", file=sys.stderr)
        return CONFIG_ERROR
    run(spec, game, suggester, states, out)
    print((out / "quality.md").read_text(), end="")
    return 0


def _own_args(argv: list[str]) -> tuple[int, Path, list[str]]:
    states, out, overrides = DEFAULT_STATES, Path(DEFAULT_OUT), []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key == "states":
            try:
                states = int(value)
            except ValueError:
                states = 0
            if states < 1:
                raise ValueError(f"states={value!r} is invalid: expected an integer >= 1")
        elif sep and key == "out":
            out = Path(value).expanduser()
        else:
            overrides.append(arg)
    return states, out, overrides


def compose_config(overrides: list[str], out: Path) -> RunSpec:
    """``config.yaml`` with ``overrides``, validated as ``train.py`` does."""
    try:
        with initialize_config_dir(str(ROOT), version_base="1.3"):
            cfg = compose("config", overrides=overrides)
        if not cfg.env_spec.lm_spec.cache_dir:
            cfg = OmegaConf.merge(
                cfg, {"env_spec": {"lm_spec": {"cache_dir": str(out / "lm_cache")}}})
        if cfg.env_spec.lm_spec.blocking is False:
            # Non-blocking, a state's first answer is the episode's fallback goals while the LM
            # computes: the tool would score the fallbacks, not the model.
            log.warning("env_spec.lm_spec.blocking=false: the quality tool asks each state and "
                        "waits for its answer, so it measures with blocking=true (training "
                        "overrides are otherwise kept)")
            cfg = OmegaConf.merge(cfg, {"env_spec": {"lm_spec": {"blocking": True}}})
        return validate(cfg)
    except (HydraException, CheckpointError) as err:
        raise ValueError(str(err)) from err


def prepare(overrides: list[str], out: Path) -> tuple[RunSpec, Any, Any]:
    """(config parsed, game, suggester) of ``overrides``, the suggester built as training
    builds it."""
    run = compose_config(overrides, out)
    goals, _ = run.game.goals(run, None, goal_reward=True)  # as training asks
    return run, run.game, goals.suggester


def label(spec: Any, suggester: Any) -> str:
    """The table row's name: the suggester and, for a language model, the model it asked."""
    if spec.lm_class == "Novelty":
        return "Novelty"
    if spec.lm_class == "SimpleOracle":
        return "SimpleOracle"
    if spec.dummy_lm:
        return "GPTLanguageModel, dummy_lm"
    client = getattr(suggester, "client", None) or getattr(
        getattr(suggester, "answerer", None), "client", None)
    model = client.spec.lm if client is not None else spec.lm
    constrained = ", constrained" if client is not None and client.constrained else ""
    return f"GPTLanguageModel, {model} ({spec.endpoint}{constrained})"


def run(spec: RunSpec, game: Any, suggester: Any, states: int, out: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    paper = game.paper_setting(spec.env.name)
    seed = spec.run.seed
    start = time.monotonic()
    if game.name == "housekeep":
        questions, sample = sample_housekeep_questions(spec, states, seed)
        sampled = time.monotonic()
        scores = score.score_housekeep(suggester, questions)
        sample["yes"] = sum(q.truth for q in questions)
    else:
        samples, sample = sample_crafter_states(spec, states, seed, paper)
        sampled = time.monotonic()
        scores = score.score_crafter(suggester, samples,
                                     SimpleOracle(paper_setting=paper, novelty_bonus=False))
        sample.update(_make_up(samples))
    name = label(spec.lm, suggester)
    result = {
        "label": name, "env": spec.env.name, "game": game.name, "seed": seed,
        "paper_setting": paper, "states": states, "sample": sample, "scores": scores,
        "seconds": {"sampling": round(sampled - start, 2),
                    "asking": round(time.monotonic() - sampled, 2)},
        "lm_spec": redacted(spec.cfg)["env_spec"]["lm_spec"],
    }
    (out / "quality.json").write_text(json.dumps(_plain(result), indent=2) + "\n")
    (out / "quality.md").write_text(markdown(result))
    return result


def _make_up(samples: list) -> dict[str, int]:
    """How many sampled states show each situation the sample must hold."""
    return {
        "from_random_play": sum(s.play == "random" for s in samples),
        "from_guided_play": sum(s.play == "guided" for s in samples),
        "sees_table": sum(s.sees("table") for s in samples),
        "sees_stone": sum(s.sees("stone") for s in samples),
        "sees_furnace": sum(s.sees("furnace") for s in samples),
        "night": sum(s.night for s in samples),
    }


def markdown(result: dict[str, Any]) -> str:
    s, sample = result["scores"], result["sample"]
    if result["game"] == "housekeep":
        table = f"{score.HOUSEKEEP_HEADER}\n{score.housekeep_row(result['label'], s)}"
        made_of = (f"{sample['distinct_questions']} distinct questions in "
                   f"{sample['episodes']} episode(s); {sample['yes']} sampled have the answer yes")
    else:
        table = f"{score.CRAFTER_HEADER}\n{score.crafter_row(result['label'], s)}"
        made_of = (f"{sample['from_random_play']} from random play, {sample['from_guided_play']} "
                   f"from oracle-guided play; {sample['sees_table']} show a table, "
                   f"{sample['sees_stone']} stone, {sample['sees_furnace']} a furnace, "
                   f"{sample['night']} are at night")
    cached = (f"; {s['cache_hits']} answers came from the cache (no latency or cost)"
              if s["cache_hits"] else "")
    return (f"{table}\n\n{result['env']}, seed {result['seed']}: {made_of}. "
            f"{s['api_calls']} API requests, {s['api_errors']} API errors{cached}"
            f"{_constrained(s)}.\n")


def _constrained(s: dict[str, Any]) -> str:
    if not s.get("constrained_requests"):
        return ""
    return (f"; {s['constrained_requests']} requests carried their constraint, "
            f"{s['constraint_violations']} answers broke it")


def _plain(value: Any) -> Any:
    """JSON-safe: NaN becomes null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
