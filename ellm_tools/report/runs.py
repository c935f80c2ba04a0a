"""Finding run directories, reading what they hold, and naming their method.

A run directory is what ``python train.py`` writes (see ``ellm/loop/workspace.py``; ``python -m
llm_in_the_loop.llf_run`` writes the same files for a policy that plays without training): ``config.json``
(the resolved config), one CSV per metric namespace (``train.csv``, ``eval.csv``, ``lm.csv``,
...; cumulative counters in ``lm.csv``), Crafter's ``train/stats.jsonl`` and
``eval/stats.jsonl`` (one episode per line, with the ``frame`` it ended at), ``snapshot.pt`` and
Hydra's ``train.log``. Any of them may be missing or still growing: a run that has just started
has only ``train.log`` or ``config.json``, a killed run may end in a torn line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ellm.errors import ConfigError
from ellm.games import GAMES, GameReport, find_game, game_named
from ellm.lm.config import NOVELTY_CLASSES
from ellm_tools.report.records import (
    Row,
    UnreadableRun,
    number,
    read_config,
    read_csv,
    read_episodes,
)

# Files any version of train.py writes into a run directory early on.
RUN_MARKERS: tuple[str, ...] = ("config.json", "train.csv", "eval.csv", "snapshot.pt", "train.log",
                                "train/stats.jsonl", "eval/stats.jsonl")
_SKIP_DIRS = frozenset({"buffer", "tb", "wandb", "train", "eval", ".hydra"})

# config.yaml defaults of the keys the report reads: a run from an older version whose
# config.json lacks one of them is read as if it had the default.
DEFAULTS: dict[str, Any] = {
    "seed": 1,
    "num_train_frames": 5_000_000,
    "eval_every_frames": 25_000,
    "num_eval_episodes": 10,
    "use_extr_rew": False,
    "env_spec.name": "CrafterTextEnv-v1",
    "env_spec.single_task": None,
    "env_spec.lm_spec.lm_class": "SimpleOracle",
    "env_spec.lm_spec.lm": "gpt-4o-mini",
    "env_spec.lm_spec.dummy_lm": False,
    "agent._target_": "ellm.agent.DQNAgent",
    "agent.train_eps_min": 0.01,
    "agent.train_eps_max": 1.0,
    "agent.eval_eps": 0.001,
    "agent.use_language": False,
    "agent.noveld": False,
}

# Agent classes (last part of agent._target_) of the exploration baselines.
BASELINE_AGENTS: dict[str, str] = {"RNDAgent": "RND", "ICMAPTAgent": "APT", "APTAgent": "APT",
                                   "ICMAgent": "ICM", "NovelDAgent": "NovelD"}
GPT_CLASSES = frozenset({"GPTLanguageModel", "GPTHousekeep"})
RANDOM = "Random actions"
EXTRINSIC = "Extrinsic reward"
# The ``method`` a run records in config.json (ellm.method) and its label; ELLM runs are
# labelled by the LM that answered (:func:`ellm_label`). Runs of versions before ``method=``
# recorded ellm-oracle / ellm-llm / ellm-dummy, or nothing: they are read as before.
METHOD_LABELS: dict[str, str] = {
    "ellm-oracle": "ELLM-oracle", "ellm-dummy": "ELLM-dummy-LM", "novelty": "Novelty",
    "rnd": "RND", "noveld": "NovelD", "apt": "APT", "extrinsic": EXTRINSIC, "random": RANDOM,
    "e3b": "E3B", "zero": "Zero reward (control)",
    # Language-feedback runs (llm_in_the_loop.llf_run): a policy that plays, never trained.
    "scripted-policy": "Scripted policy (follows fp)", "random-policy": "Random policy (text)",
}

MAX_LABEL = 200  # characters of a method's name
# Text-Crafter's action spaces other than the paper's 139 names, named in a run's label.
ACTION_SPACE_LABELS: dict[str, str] = {"easier": "27 actions", "crafter": "17 actions"}
# The game whose achievements the report scores (Crafter's score and success rates).
SCORED = next(g.report for g in GAMES if g.report.scores_achievements)


class NotARunDir(ValueError):
    """A path given to the report that is neither a run directory nor holds any."""


def cfg_get(config: Mapping[str, Any], key: str) -> Any:
    """``config[a][b]...`` for a dotted ``key``; the config.yaml default when it is missing."""
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return DEFAULTS.get(key)
        node = node[part]
    return node


# Games the training loop does not run (a gymnasium control task, Meta-World) that a run
# recorded as its ``game``, labelled by its recorded ``game_label``: one report view each.
_OTHER_GAMES: dict[tuple[str, str], GameReport] = {}


def game_of(config: Mapping[str, Any]) -> GameReport:
    """How to show the game a run ran on: as recorded (``game``), else (older runs) from its env
    name; an unknown env name is read as the default game, Crafter."""
    if "game" in config:
        game = game_named(config["game"])
        if game is None:
            name = str(config["game"])
            key = (name, str(config.get("game_label", name)))
            return _OTHER_GAMES.setdefault(key, GameReport(*key))
        return game.report
    try:
        return find_game(cfg_get(config, "env_spec.name")).report
    except ConfigError:
        return GAMES[0].report


def is_random(config: Mapping[str, Any]) -> bool:
    """The random-action reference: epsilon 1 while training and evaluating."""
    return all(number(cfg_get(config, f"agent.{k}")) == 1.0
               for k in ("train_eps_min", "train_eps_max", "eval_eps"))


def baseline(config: Mapping[str, Any]) -> str | None:
    """The exploration baseline a run's agent implements (from ``agent._target_``), or None."""
    target = str(cfg_get(config, "agent._target_"))
    cls = target.rsplit(".", 1)[-1]
    if cls in BASELINE_AGENTS:
        return BASELINE_AGENTS[cls]
    return cls.removesuffix("Agent") if target.startswith("baselines.") else None


def uses_lm(config: Mapping[str, Any]) -> bool:
    """True when the LM suggester's goals drive the reward (ELLM runs and the Novelty baseline)."""
    if "uses_lm" in config:
        return bool(config["uses_lm"])
    if "method" in config:
        return (str(config["method"]).startswith("ellm")
                or config["method"] in ("novelty", "llm-policy"))
    return not (is_random(config) or baseline(config) is not None
                or cfg_get(config, "env_spec.name") == "CrafterReward-v1")


def method_name(config: Mapping[str, Any], group_by: Iterable[str] = ()) -> str:
    """The method a run's config stands for, e.g. ``ELLM-oracle``, ``Novelty``, ``RND``,
    ``APT``, ``Extrinsic reward``, ``Random actions``; ``Housekeep: `` in front for Housekeep
    runs, `` [task]`` behind for single-task runs, `` key=value`` for each ``group_by`` key."""
    if not config:
        name = "unknown (no config.json)"
    elif is_random(config):  # epsilon 1 throughout acts at random, whatever the method
        name = RANDOM
    elif "method" in config:
        name = _recorded_method(config)
    elif baseline(config) is not None:
        name = str(baseline(config))
        if name == "RND" and cfg_get(config, "agent.noveld"):
            name = "NovelD"
        if language_input(config):
            name += " + language"
    elif cfg_get(config, "env_spec.name") == "CrafterReward-v1":
        name = EXTRINSIC
    else:
        name = _lm_method(config)
    if name not in (RANDOM, EXTRINSIC) and cfg_get(config, "use_extr_rew"):
        name += " + extrinsic"
    space = cfg_get(config, "env_spec.action_space_type") if config else None
    if space in ACTION_SPACE_LABELS and config.get("engine") != "craftax":
        name += f" ({ACTION_SPACE_LABELS[space]})"
    if config and game_of(config).label:
        name = f"{game_of(config).label}: {name}"
    task = cfg_get(config, "env_spec.single_task") if config else None
    if task:
        name += f" [{task}]"
    if config and config.get("expl_agent_path"):
        name += ", guided"
    elif config and isinstance(config.get("pretrained"), Mapping):
        name += f", finetuned from {_pretrained_label(config['pretrained'])}"
    elif config and config.get("finetune_snapshot") and config.get("snapshot_path"):
        name += ", finetuned"
    for key in group_by:
        name += f" {key}={cfg_get(config, key)}"
    # A run's own words: long enough to tell methods apart, short enough for a legend.
    return name if len(name) <= MAX_LABEL else name[:MAX_LABEL - 3] + "..."


def _pretrained_label(pretrained: Mapping[str, Any]) -> str:
    """The method a Craftax run's finetuned weights were pretrained with, as its record says."""
    method = str(pretrained.get("method"))
    if method == "ellm":
        return {"oracle": "ELLM-oracle", "llm": "ELLM-LLM"}.get(
            str(pretrained.get("goal_source")), "ELLM")
    return METHOD_LABELS.get(method, method)


def _recorded_method(config: Mapping[str, Any]) -> str:
    method = str(config["method"])
    if "method_label" in config:  # a run that names itself (the LLM optimisers)
        return str(config["method_label"])
    if method in ("ellm", "ellm-llm", "ellm-pixels"):
        name = ellm_label(config) + _agent_inputs(config)
    elif method == "llm-policy":
        name = (f"LLM policy {cfg_get(config, 'env_spec.lm_spec.lm')}, feedback "
                f"{cfg_get(config, 'env_spec.feedback_type')}")
    else:
        name = METHOD_LABELS.get(method, method)
    if method in ("rnd", "noveld", "apt") and language_input(config):
        name += " + language"
    return name


def language_input(config: Mapping[str, Any]) -> bool:
    """Whether a baseline had a language module: as the run recorded it (``language_input``,
    resolved by the agent), else as ``agent.use_language`` resolves (``auto``: where the
    language state is stored, ``use_language_state=sbert``)."""
    if "language_input" in config:
        return bool(config["language_input"])
    value = cfg_get(config, "agent.use_language")
    if value == "auto":
        return "sbert" in (cfg_get(config, "agent.use_language_state"),
                           config.get("use_language_state"))
    return value is True or str(value).lower() == "true"


def ellm_label(config: Mapping[str, Any]) -> str:
    """An ELLM run named by the LM that answered: ELLM-oracle, ELLM-dummy-LM, ELLM-<model>."""
    lm_class = str(cfg_get(config, "env_spec.lm_spec.lm_class"))
    if lm_class in GPT_CLASSES:
        if cfg_get(config, "env_spec.lm_spec.dummy_lm"):
            return "ELLM-dummy-LM"
        return f"ELLM-{cfg_get(config, 'env_spec.lm_spec.lm')}"
    return "ELLM-oracle" if lm_class.startswith("SimpleOracle") else f"ELLM-{lm_class}"


# What an ELLM agent saw besides pixels (use_goal, language state) -> its label's suffix; the
# paper's goal-conditioned agent with the language state has none.
_INPUTS: dict[tuple[bool, bool], str] = {
    (True, True): "", (False, False): " (pixels)", (False, True): " (language state, no goal)",
    (True, False): " (goal, pixels)"}


def _agent_inputs(config: Mapping[str, Any]) -> str:
    # Craftax's agent always sees the goal; a record without the keys is read as before.
    if config.get("engine") == "craftax" or "use_goal" not in config:
        return ""
    goal = cfg_get(config, "use_goal") is True or str(cfg_get(config, "use_goal")) == "True"
    return _INPUTS[goal, cfg_get(config, "use_language_state") == "sbert"]


def _lm_method(config: Mapping[str, Any]) -> str:
    """An old run with no recorded method: Novelty by its LM class, else ELLM."""
    lm_class = str(cfg_get(config, "env_spec.lm_spec.lm_class"))
    return "Novelty" if lm_class in NOVELTY_CLASSES else ellm_label(config) + _agent_inputs(config)


@dataclass
class Run:
    """One run directory's data; every list is empty when its file does not exist (yet)."""

    path: Path
    config: dict[str, Any]
    method: str
    csvs: dict[str, list[Row]] = field(default_factory=dict)   # namespace -> rows
    train_episodes: list[dict[str, float]] = field(default_factory=list)
    eval_episodes: list[dict[str, float]] = field(default_factory=list)
    name: str = ""

    @property
    def seed(self) -> int | None:
        seed = cfg_get(self.config, "seed") if self.config else None
        return int(seed) if number(seed) is not None else None

    @property
    def game(self) -> GameReport:
        return game_of(self.config)

    @property
    def uses_lm(self) -> bool:
        return bool(self.config) and uses_lm(self.config)

    @property
    def frames(self) -> int:
        """Frames trained so far, from the last thing logged."""
        last = [rows[-1]["frame"] for rows in self.csvs.values() if rows]
        last += [ep["frame"] for ep in self.train_episodes[-1:] if "frame" in ep]
        return int(max(last, default=0))

    @property
    def target_frames(self) -> int:
        return int(cfg_get(self.config, "num_train_frames"))

    @property
    def has_data(self) -> bool:
        return bool(self.train_episodes or self.eval_episodes
                    or any(self.csvs.values()))

    @property
    def episodes(self) -> int:
        """Training episodes played so far, for runs that count them (``iteration.csv``)."""
        rows = self.csvs.get("iteration", [])
        return int(rows[-1].get("episodes", 0)) if rows else 0

    @property
    def status(self) -> str:
        if not self.has_data:
            return "no data yet"
        if "num_train_episodes" in self.config:  # an optimiser's budget is episodes
            target = int(self.config["num_train_episodes"])
            done = f"{self.episodes:,} / {target:,} episodes"
            return f"complete ({done})" if self.episodes >= target else f"partial ({done})"
        if self.target_frames == 0:  # a policy that plays without training (LLF runs)
            return f"evaluation only ({self.frames:,} env steps)"
        done = f"{self.frames:,} / {self.target_frames:,} frames"
        if not self.eval_episodes and not self.csvs.get("eval"):
            return f"in progress, no evaluation yet ({done})"
        if self.frames < self.target_frames:
            return f"partial ({done})"
        return f"complete ({done})"


def is_run_dir(path: Path) -> bool:
    return any((path / marker).exists() for marker in RUN_MARKERS)


def find_run_dirs(path: str | Path) -> list[Path]:
    """``path`` itself if it is a run directory, else every run directory below it (a Hydra
    sweep dir ``<date>/<name>_<time>/<n>_seed<k>``, a date dir or a whole ``exp_local``)."""
    path = Path(path)
    if not path.exists():
        raise NotARunDir(f"{str(path)!r} does not exist")
    if not path.is_dir():
        raise NotARunDir(f"{str(path)!r} is a file, not a run directory (expected a directory "
                         f"holding {', '.join(RUN_MARKERS[:3])}, ...)")
    # A Craftax run trains several seeds at once and keeps each one's records in seed<k>/.
    seeds = sorted(p for p in path.glob("seed*") if p.is_dir() and (p / "config.json").is_file())
    if seeds:
        return seeds
    if is_run_dir(path):
        return [path]
    found: list[Path] = []
    for child in sorted(p for p in path.iterdir() if p.is_dir() and p.name not in _SKIP_DIRS):
        if is_run_dir(child):
            found.append(child)
        else:
            found.extend(_below(child))
    if not found:
        raise NotARunDir(
            f"{str(path)!r} is not a run directory and holds none: no {', '.join(RUN_MARKERS)} "
            "in it or below it (a run directory is what `python train.py` writes under "
            "./exp_local/<date>/<exp_name>_<time>)")
    return found


def _below(path: Path) -> list[Path]:
    try:
        return find_run_dirs(path)
    except NotARunDir:
        return []


def load_run(path: str | Path, group_by: Iterable[str] = ()) -> Run:
    """Everything the report needs from one run directory (tolerates missing files); raises
    :class:`UnreadableRun` for records that are not what a run writes."""
    path = Path(path)
    if not is_run_dir(path):
        raise NotARunDir(f"{str(path)!r} is not a run directory: none of {', '.join(RUN_MARKERS)}")
    try:
        config = read_config(path / "config.json") if inside(path, path / "config.json") else {}
        csvs = {p.stem: read_csv(p) for p in sorted(path.glob("*.csv")) if inside(path, p)}
        stats = {split: read_episodes(path / split / "stats.jsonl")
                 if inside(path, path / split / "stats.jsonl") else []
                 for split in ("train", "eval")}
    except UnreadableRun as exc:
        exc.run = path
        raise
    return Run(path=path, config=config, method=method_name(config, group_by), csvs=csvs,
               train_episodes=stats["train"], eval_episodes=stats["eval"],
               name=f"{path.parent.name}/{path.name}")


def inside(run_dir: Path, file: Path) -> bool:
    """``file`` is a plain file of ``run_dir`` reached through no symlink: a run directory
    someone sent may link to files outside it, which the report never reads or copies."""
    try:
        relative = file.relative_to(run_dir)
    except ValueError:
        return False
    here = run_dir
    for part in relative.parts:
        here = here / part
        if here.is_symlink():
            return False
    return file.is_file()


def load_runs(paths: Iterable[str | Path], group_by: Iterable[str] = (),
              skipped: list[UnreadableRun] | None = None) -> list[Run]:
    """Runs under every path (run or sweep directories), each directory once, in path order.
    A run whose records cannot be read raises :class:`UnreadableRun`, or, with ``skipped``
    given, is left out and its error appended there."""
    seen: dict[Path, None] = {}
    for path in paths:
        for run_dir in find_run_dirs(path):
            seen.setdefault(run_dir.resolve(), None)
    group_by = tuple(group_by)
    runs = []
    for run_dir in seen:
        try:
            runs.append(load_run(run_dir, group_by))
        except UnreadableRun as exc:
            if skipped is None:
                raise
            skipped.append(exc)
    return runs
