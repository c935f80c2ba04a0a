"""``python -m ellm_tools.report`` on run directories of tiny real training runs (one Hydra multirun:
2 methods x 2 seeds), checked against numbers recomputed here from the runs' own files; plus
runs with no data, runs in progress, old configs, Housekeep runs and the CPU preset."""

from __future__ import annotations

import csv
import json
import math
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import crafter
import pytest
from conftest import run_train, train_env

from ellm_tools.report import NotARunDir, UnreadableRun, build_report, load_runs, method_name
from ellm_tools.report.aggregate import lm_totals
from ellm_tools.report.runs import Run

ROOT = Path(__file__).resolve().parents[1]
ACHIEVEMENTS = list(crafter.constants.achievements)
TINY = ["num_train_frames=40", "num_seed_frames=40", "eval_every_frames=20",
        "num_eval_episodes=1", "env_spec.length=20", "replay_buffer_num_workers=0",
        "batch_size=8", "agent.hidden_dim=16", "progress=false", "save_buffer=false"]
METHODS = {"SimpleOracle": "ELLM-oracle", "BaselineModel": "Novelty"}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """One multirun (one process, so imports are paid once): oracle ELLM and Novelty x 2 seeds."""
    cwd = tmp_path_factory.mktemp("sweep")
    run_train(cwd, "-m", "env_spec.use_sbert=True", "use_goal=True", "use_language_state=sbert",
              "env_spec.lm_spec.lm_class=SimpleOracle,BaselineModel", "seed=1,2",
              "exp_name=SWEEP", *TINY, timeout=500)
    (found,) = sorted(cwd.glob("exp_local/*/SWEEP_*"))
    return found


def run_dirs(sweep: Path) -> list[Path]:
    return sorted(p for p in sweep.iterdir() if (p / "config.json").exists())


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def unlocked(episode: dict) -> int:
    return sum(episode.get(f"achievement_{a}", 0) > 0 for a in ACHIEVEMENTS)


def score(episodes: list[dict]) -> float:
    """Crafter score written out again: geometric mean of (1 + success rate %) minus 1."""
    rates = [100 * sum(ep[f"achievement_{a}"] > 0 for ep in episodes) / len(episodes)
             for a in ACHIEVEMENTS]
    return math.exp(sum(math.log(1 + r) for r in rates) / len(rates)) - 1


def method_of(run_dir: Path) -> str:
    config = json.loads((run_dir / "config.json").read_text())
    return METHODS[config["env_spec"]["lm_spec"]["lm_class"]]


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("buffer", "snapshot.pt"))
    return dst


def figure(out: Path, name: str) -> dict:
    assert (out / f"{name}.png").stat().st_size > 1000
    return json.loads((out / f"{name}.json").read_text())


# ------------------------------------------------------------------------ real runs
@pytest.mark.e2e
def test_eval_curve_has_one_line_per_method_with_both_seeds(sweep, tmp_path):
    report = build_report([sweep], tmp_path)
    data = figure(tmp_path, "achievements_eval")
    series = {s["method"]: s for s in data["series"]}
    assert set(series) == {"ELLM-oracle", "Novelty"}
    for method, s in series.items():
        dirs = [d for d in run_dirs(sweep) if method_of(d) == method]
        assert len(dirs) == 2 and len(s["runs"]) == 2
        assert s["frames"] == [0, 20, 40] and s["n_runs"] == [2, 2, 2]
        per_run = [{ep["frame"]: unlocked(ep) for ep in jsonl(d / "eval" / "stats.jsonl")}
                   for d in dirs]  # one eval episode per evaluation
        for i, frame in enumerate(s["frames"]):
            values = [r[frame] for r in per_run]
            assert s["mean"][i] == pytest.approx(sum(values) / 2)
            assert s["min"][i] == min(values) and s["max"][i] == max(values)
    assert {r.seed for r in report.runs} == {1, 2}
    assert sorted(r.method for r in report.runs) == ["ELLM-oracle"] * 2 + ["Novelty"] * 2


@pytest.mark.e2e
def test_train_curve_bins_training_episodes(sweep, tmp_path):
    build_report([sweep], tmp_path)
    for s in figure(tmp_path, "achievements_train")["series"]:
        assert s["frames"] == [20, 40]  # bins of eval_every_frames; one 20-step episode each
        for name, points in s["runs"].items():
            episodes = jsonl(sweep / name.split("/")[-1] / "train" / "stats.jsonl")
            assert {int(k): v for k, v in points.items()} == {
                ep["frame"]: unlocked(ep) for ep in episodes}


@pytest.mark.e2e
def test_score_table_matches_the_stats_files(sweep, tmp_path):
    build_report([sweep], tmp_path)
    table = {s["method"]: s for s in json.loads((tmp_path / "report.json").read_text())["scores"]}
    assert set(table) == {"ELLM-oracle", "Novelty"}
    for method, row in table.items():
        dirs = [d for d in run_dirs(sweep) if method_of(d) == method]
        last_evals = [[ep for ep in jsonl(d / "eval" / "stats.jsonl") if ep["frame"] == 40]
                      for d in dirs]
        trains = [jsonl(d / "train" / "stats.jsonl") for d in dirs]
        assert row["eval_frames"] == [40, 40] and sorted(row["seeds"]) == [1, 2]
        assert row["eval_score"] == pytest.approx([score(e) for e in last_evals])
        assert row["train_score"] == pytest.approx([score(t) for t in trains])
        assert row["eval_achievements"] == pytest.approx(
            [sum(map(unlocked, e)) / len(e) for e in last_evals])
    bars = figure(tmp_path, "success_rates_train")
    assert bars["categories"] == ACHIEVEMENTS
    assert {s["method"]: s["n_runs"] for s in bars["series"]} == {"ELLM-oracle": 2, "Novelty": 2}
    summary = (tmp_path / "report.md").read_text()
    assert "| ELLM-oracle | 1, 2 | 40 | 40 |" in summary
    assert "`--bin-frames N` gives finer bins" in summary  # how to get finer training curves
    # Curves of a few evaluations show their points, not only straight lines between them.
    assert {s["marker"] for s in figure(tmp_path, "achievements_eval")["series"]} == {"o"}
    assert "success_rates_eval.png" in summary and "achievements_eval.png" in summary


@pytest.mark.e2e
def test_score_table_pools_the_last_evaluations(sweep, tmp_path):
    report = build_report([sweep], tmp_path, last_evals=2)
    for row in report.scores:
        dirs = [d for d in run_dirs(sweep) if method_of(d) == row.method]
        both = [[ep for ep in jsonl(d / "eval" / "stats.jsonl") if ep["frame"] > 0]
                for d in dirs]  # the last two evaluations: at 20 and 40
        assert [sorted({ep["frame"] for ep in e}) for e in both] == [[20, 40], [20, 40]]
        assert row.eval_frames == [40, 40] and row.eval_episodes == [2, 2]
        assert row.eval_score == pytest.approx([score(e) for e in both])
        assert row.eval_achievements == pytest.approx(
            [sum(map(unlocked, e)) / len(e) for e in both])
    summary = report.summary.read_text()
    assert "achievements / episode, last 2 evals" in summary
    assert json.loads((tmp_path / "report.json").read_text())["last_evals"] == 2
    proc = subprocess.run([sys.executable, "-m", "ellm_tools.report", str(sweep), "--out",
                           str(tmp_path / "cli"), "--last-evals", "0"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "--last-evals must be a positive" in proc.stderr


@pytest.mark.e2e
def test_lm_usage_per_million_frames(sweep, tmp_path):
    report = build_report([sweep], tmp_path)
    usage = {u.method: u for u in report.lm}
    assert set(usage) == {"ELLM-oracle", "Novelty"}
    for method, u in usage.items():
        last = [list(csv.DictReader((d / "lm.csv").open()))[-1] for d in run_dirs(sweep)
                if method_of(d) == method]
        frames = sum(int(r["frame"]) for r in last)
        assert u.runs == 2 and u.frames == frames == 80
        assert u.queries_per_1m == pytest.approx(
            sum(float(r["queries"]) for r in last) * 1e6 / frames)
        assert u.queries_per_1m > 0 and u.dollars == 0
        assert u.cache_hit_rate is None  # rule-based suggesters send nothing to a model
    assert "n/a (no LM calls)" in (tmp_path / "report.md").read_text()


@pytest.mark.e2e
def test_cli_on_sweep_and_run_dirs(sweep, tmp_path):
    one = run_dirs(sweep)[0]
    proc = subprocess.run([sys.executable, "-m", "ellm_tools.report", str(sweep), str(one),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "4 runs (4 with data)" in proc.stdout  # the run dir given twice counts once
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert sorted(r["method"] for r in report["runs"]) == ["ELLM-oracle"] * 2 + ["Novelty"] * 2
    # Runs are named as report.md names them (parent/run), never by this machine's paths.
    assert all(not r["path"].startswith("/") and r["path"].count("/") == 1 for r in report["runs"])
    assert str(tmp_path) not in (tmp_path / "out" / "report.json").read_text()
    assert set(report["figures"]) == {"achievements_eval", "achievements_train",
                                      "success_rates_eval", "success_rates_train",
                                      "collapse_top_action_share", "exploration_coverage"}
    # The collapse diagnostics, per method: each run's last evaluation and training tail.
    diagnostics = {d["method"]: d for d in report["diagnostics"]}
    assert set(diagnostics) == {"ELLM-oracle", "Novelty"}
    for row in diagnostics.values():
        assert len(row["eval"]["top_action_share"]) == 2  # one per run
        assert all(0 < v <= 1 for v in row["eval"]["top_action_share"])
        assert all(0 <= v <= 1 for v in row["train"]["noop_share"])
        assert all(0 <= v <= math.log(139) for v in row["train"]["action_entropy"])
        # Exploration: at least the start cell, at most one new cell per step (40-step episodes).
        assert all(1 <= v <= 41 for v in row["train"]["coverage"] + row["eval"]["coverage"])
        assert all(0 <= v <= 40 for v in row["eval"]["distinct_captions"])
    summary = (tmp_path / "out" / "report.md").read_text()
    assert "## Collapse diagnostics" in summary
    assert "## Exploration" in summary and "| eval coverage | eval distinct captions |" in summary


@pytest.mark.e2e
def test_copied_records_rebuild_the_same_report(sweep, tmp_path):
    """--copy-runs keeps what the report reads, small and free of this machine's paths, and a
    report rebuilt from the copies alone, the runs gone, is the same report."""
    from ellm_tools.report.__main__ import main

    runs = tmp_path / "runs_elsewhere"
    shutil.copytree(sweep, runs)
    (runs / run_dirs(runs)[0].name / "train.log").write_text(f"run dir: {runs}\n")
    assert main([str(runs), "--out", str(tmp_path / "out"), "--copy-runs"]) == 0
    copies = tmp_path / "out" / "runs"
    assert sorted(p.name for p in copies.iterdir()) == [
        "ELLM-oracle_seed1", "ELLM-oracle_seed2", "Novelty_seed1", "Novelty_seed2"]
    kept = {str(p.relative_to(copies / "Novelty_seed2"))
            for p in (copies / "Novelty_seed2").rglob("*") if p.is_file()}
    assert {"config.json", "train.csv", "eval.csv", "train/stats.jsonl",
            "eval/stats.jsonl"} <= kept
    assert not {"snapshot.pt", "train.log"} & kept and not any("buffer" in k for k in kept)
    first = (tmp_path / "out" / "report.json").read_text()
    assert str(tmp_path) not in first
    shutil.rmtree(runs)
    # Rebuilt from the copies (which are left in place), into the same folder.
    assert main([str(copies), "--out", str(tmp_path / "out"), "--copy-runs"]) == 0
    assert (tmp_path / "out" / "report.json").read_text() == first
    assert len(list(copies.iterdir())) == 4
    # A new run of a method and seed already copied, given first, never replaces the copy.
    (copies / "Novelty_seed2" / "mark.csv").write_text("frame\n1\n")  # this copy, not a new one
    assert main([str(sweep / run_dirs(sweep)[-1].name), str(copies), "--out",
                 str(tmp_path / "out"), "--copy-runs"]) == 0
    assert (copies / "Novelty_seed2" / "mark.csv").is_file()
    assert max(p.name for p in copies.iterdir()) == "Novelty_seed2_2"


@pytest.mark.e2e
def test_cli_rejects_paths_that_are_not_run_dirs(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("x")
    for path, message in (("empty", "is not a run directory and holds none"),
                          ("missing", "does not exist"), ("file.txt", "is a file")):
        proc = subprocess.run([sys.executable, "-m", "ellm_tools.report", path, "--out", "out"],
                              capture_output=True, text=True, cwd=tmp_path, timeout=120,
                              check=False)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    with pytest.raises(NotARunDir):
        load_runs([tmp_path / "empty"])


# ------------------------------------------------------------------------ partial runs
@pytest.mark.e2e
def test_run_dir_with_no_data_yet(sweep, tmp_path):
    started = tmp_path / "just_started"
    started.mkdir()
    shutil.copy(run_dirs(sweep)[0] / "config.json", started)
    (started / "train.log").write_text("")
    alone = build_report([started], tmp_path / "alone")
    assert alone.figures == {} and alone.runs[0].status == "no data yet"
    assert "No run has logged any data yet" in alone.summary.read_text()
    mixed = build_report([sweep, started], tmp_path / "mixed")
    assert "no data yet" in mixed.summary.read_text()
    data = figure(tmp_path / "mixed", "achievements_eval")
    assert sum(len(s["runs"]) for s in data["series"]) == 4


@pytest.mark.e2e
def test_run_in_progress_without_evaluation(sweep, tmp_path):
    run = copy_run(run_dirs(sweep)[0], tmp_path / "exp" / "RUNNING_1200")
    shutil.rmtree(run / "eval")
    for name in ("eval.csv", "achievements.csv"):
        (run / name).unlink()
    stats = run / "train" / "stats.jsonl"
    first = stats.read_text().splitlines()[0]
    stats.write_text(first + "\n" + first[:25])  # a line torn mid-write
    for path in run.glob("*.csv"):  # as if the run were at frame 20, mid-write
        lines = path.read_text().splitlines()
        keep = [line for line in lines[1:] if int(line.split(",")[0]) <= 20]
        torn = lines[-1][:5] if path.name == "train.csv" else ""
        path.write_text("\n".join([lines[0], *keep]) + "\n" + torn)
    report = build_report([tmp_path / "exp"], tmp_path / "out")
    (loaded,) = report.runs
    assert loaded.status.startswith("in progress, no evaluation yet (20 / 40 frames")
    assert "achievements_eval" not in report.figures
    train = figure(tmp_path / "out", "achievements_train")
    assert [s["frames"] for s in train["series"]] == [[20]]
    assert "No Crafter evaluation has run yet" in report.summary.read_text()


@pytest.mark.e2e
def test_config_from_an_older_version(sweep, tmp_path):
    run = copy_run(run_dirs(sweep)[0], tmp_path / "old")
    old = json.loads((run / "config.json").read_text())
    for key in ("agent", "use_extr_rew", "eval_every_frames", "seed"):
        del old[key]
    del old["env_spec"]["lm_spec"]
    (run / "config.json").write_text(json.dumps(old))
    report = build_report([run], tmp_path / "out")
    (loaded,) = report.runs
    assert loaded.method == "ELLM-oracle" and loaded.seed == 1  # config.yaml defaults
    # training-episode bins fall back to the default eval_every_frames (25k): one bin
    assert figure(tmp_path / "out", "achievements_train")["series"][0]["frames"] == [25000]


# ------------------------------------------------------------------------ synthetic data
@pytest.mark.e2e
def test_known_achievements_give_known_score(sweep, tmp_path):
    run = copy_run(run_dirs(sweep)[0], tmp_path / "known")
    blank = {f"achievement_{a}": 0 for a in ACHIEVEMENTS}
    episodes = [{**blank, "achievement_collect_wood": 1, "achievement_place_table": 2, "frame": 40},
                {**blank, "achievement_collect_wood": 3, "frame": 40}]
    (run / "eval" / "stats.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    report = build_report([run], tmp_path / "out")
    (row,) = report.scores
    expected = math.exp((math.log(101) + math.log(51)) / 22) - 1  # wood 100%, table 50%
    assert row.eval_score == [pytest.approx(expected)]
    assert row.eval_achievements == [1.5]
    assert row.eval_rates["collect_wood"] == 100 and row.eval_rates["place_table"] == 50
    curve = figure(tmp_path / "out", "achievements_eval")["series"][0]
    assert curve["frames"] == [40] and curve["mean"] == [1.5]


@pytest.mark.e2e
def test_housekeep_rearrangement_success(sweep, tmp_path):
    runs = []
    for i, values in enumerate(([0.2, 0.4], [0.4, 0.8])):
        run = copy_run(run_dirs(sweep)[i], tmp_path / "hk" / f"{i}_seed{i + 1}")
        config = json.loads((run / "config.json").read_text())
        config["env_spec"]["name"], config["game"] = "Housekeep", "housekeep"
        (run / "config.json").write_text(json.dumps(config))
        (run / "housekeep.csv").write_text("frame,rearrange_success,pick_success\n"
                                           f"20,{values[0]},1\n40,{values[1]},1\n")
        with (run / "train.csv").open() as f:
            rows = list(csv.DictReader(f))
        with (run / "train.csv").open("w", newline="") as f:  # per training episode: not plotted
            writer = csv.DictWriter(f, fieldnames=[*rows[0], "rearrange_success"])
            writer.writeheader()
            writer.writerows({**r, "rearrange_success": 0.9} for r in rows)
        runs.append(run)
    bare = copy_run(run_dirs(sweep)[2], tmp_path / "bare")
    config = json.loads((bare / "config.json").read_text())
    config["env_spec"]["name"], config["game"] = "Housekeep", "housekeep"
    (bare / "config.json").write_text(json.dumps(config))
    report = build_report([tmp_path / "hk"], tmp_path / "out")
    data = figure(tmp_path / "out", "housekeep_rearrange_success")
    assert data["ylabel"] == "housekeep/rearrange_success"
    curve = data["series"]
    assert [c["method"] for c in curve] == ["Housekeep: ELLM-oracle"]
    assert curve[0]["mean"] == pytest.approx([0.3, 0.6]) and curve[0]["n_runs"] == [2, 2]
    assert report.scores == []  # Housekeep runs have no Crafter score
    summary = report.summary.read_text()
    assert "No Crafter evaluation" not in summary and "## Crafter score" not in summary
    # the rearrangement metrics per method, over the last evaluation of each run
    row = ("| Housekeep: ELLM-oracle | 1, 2 | 0.60 ± 0.20 (2: 0.40, 0.80) | - | "
           "1.00 ± 0.00 (2: 1.00, 1.00) | - | - |")
    assert row in summary
    # Per-seed values in seed order, whatever the order of the paths given.
    reversed_paths = build_report(runs[::-1], tmp_path / "out_reversed")
    assert row in reversed_paths.summary.read_text()
    no_metric = build_report([bare], tmp_path / "out2")
    assert "runs log no `rearrange_success` metric" in no_metric.summary.read_text()


def test_lm_counters_add_up_across_a_resume(tmp_path):
    rows = [{"frame": 100, "queries": 10, "api_calls": 4, "cache_hits": 6, "dollars": 0.5},
            {"frame": 200, "queries": 20, "api_calls": 8, "cache_hits": 12, "dollars": 1.0},
            {"frame": 300, "queries": 5, "api_calls": 1, "cache_hits": 4, "dollars": 0.1}]
    run = Run(path=tmp_path, config={}, method="x", csvs={"lm": rows})
    frames, totals = lm_totals(run)
    assert frames == 300 and totals["queries"] == 25 and totals["cache_hits"] == 16
    assert totals["dollars"] == pytest.approx(1.1)


@pytest.mark.parametrize("config,name", [
    ({"env_spec": {"lm_spec": {"lm_class": "SimpleOracle"}}}, "ELLM-oracle"),
    ({"env_spec": {"lm_spec": {"lm_class": "BaselineModel"}}}, "Novelty"),
    ({"env_spec": {"lm_spec": {"lm_class": "GPTLanguageModel", "lm": "gpt-4o-mini"}}},
     "ELLM-gpt-4o-mini"),
    ({"env_spec": {"lm_spec": {"lm_class": "GPTLanguageModel", "dummy_lm": True}}},
     "ELLM-dummy-LM"),
    ({"agent": {"_target_": "baselines.rnd.RNDAgent"}}, "RND"),
    ({"agent": {"_target_": "baselines.rnd.RNDAgent", "noveld": True}}, "NovelD"),
    ({"agent": {"_target_": "baselines.rnd.RNDAgent", "noveld": False, "noveld_alpha": 0.5}},
     "RND"),
    ({"agent": {"_target_": "baselines.rnd.RNDAgent", "use_language": True}}, "RND + language"),
    ({"agent": {"_target_": "baselines.icm_apt.ICMAPTAgent"}, "use_extr_rew": True},
     "APT + extrinsic"),
    ({"agent": {"_target_": "baselines.count.CountAgent"}}, "Count"),
    ({"env_spec": {"name": "CrafterReward-v1"}}, "Extrinsic reward"),
    ({"env_spec": {"name": "CrafterReward-v1"},
      "agent": {"train_eps_min": 1, "train_eps_max": 1, "eval_eps": 1}}, "Random actions"),
    ({"method": "extrinsic", "env_spec": {"name": "CrafterReward-v1"},
      "agent": {"train_eps_min": 1, "train_eps_max": 1, "eval_eps": 1}}, "Random actions"),
    ({"env_spec": {"name": "Housekeep", "lm_spec": {"lm_class": "GPTHousekeep", "lm": "m"}}},
     "Housekeep: ELLM-m"),
    ({"env_spec": {"single_task": "attack cow"}}, "ELLM-oracle [attack cow]"),
    ({"env_spec": {"single_task": "attack cow"}, "finetune_snapshot": True,
      "snapshot_path": "RUN"}, "ELLM-oracle [attack cow], finetuned"),
    ({"env_spec": {"single_task": "attack cow"}, "expl_agent_path": "RUN"},
     "ELLM-oracle [attack cow], guided"),
    # method=rnd's agent.use_language is auto: language only where the language state is kept
    ({"method": "rnd", "agent": {"_target_": "baselines.rnd.RNDAgent", "use_language": "auto"}},
     "RND"),
    ({"method": "rnd", "use_language_state": "sbert",
      "agent": {"_target_": "baselines.rnd.RNDAgent", "use_language": "auto"}},
     "RND + language"),
    ({"method": "apt", "language_input": False,
      "agent": {"_target_": "baselines.icm_apt.ICMAPTAgent", "use_language": "auto"}}, "APT"),
    # What the ELLM agent saw: the paper's goal and language state are the unmarked label.
    ({"method": "ellm", "use_goal": True, "use_language_state": "sbert"}, "ELLM-oracle"),
    ({"method": "ellm-pixels", "use_goal": False, "use_language_state": None},
     "ELLM-oracle (pixels)"),
    ({"method": "ellm", "use_goal": False, "use_language_state": None}, "ELLM-oracle (pixels)"),
    ({"use_goal": False, "use_language_state": "sbert",
      "env_spec": {"name": "Housekeep", "lm_spec": {"lm_class": "GPTHousekeep", "lm": "m"}}},
     "Housekeep: ELLM-m (language state, no goal)"),
    ({}, "unknown (no config.json)"),
])
def test_method_names_from_config(config, name):
    assert method_name(config) == name


def test_runs_of_different_agents_are_never_pooled_in_silence(tmp_path):
    from ellm_tools.report.aggregate import pooling_warnings

    def run(seed, goal, method="novelty"):
        config = {"method": method, "seed": seed, "use_goal": goal,
                  "use_language_state": "sbert" if goal else None}
        return Run(tmp_path, config, method_name(config), eval_episodes=[{"frame": 0}])

    ellm = [run(1, True, "ellm"), run(2, False, "ellm")]
    assert [r.method for r in ellm] == ["ELLM-oracle", "ELLM-oracle (pixels)"]
    assert pooling_warnings(ellm) == []  # two rows
    assert pooling_warnings([run(1, True), run(2, False)]) == [
        ("Novelty: runs of different agents pooled (use_goal False, True); --group-by use_goal "
        "keeps them apart"),
        ("Novelty: runs of different agents pooled (use_language_state 'sbert', None); "
        "--group-by use_language_state keeps them apart")]


@pytest.mark.e2e
def test_group_by_adds_config_values(sweep):
    runs = load_runs([sweep], group_by=["seed"])
    assert sorted({r.method for r in runs}) == ["ELLM-oracle seed=1", "ELLM-oracle seed=2",
                                                "Novelty seed=1", "Novelty seed=2"]


# ------------------------------------------------------------------------ CPU preset
def test_cpu_presets_change_only_budget_eval_and_epsilon():
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    def flat(overrides):
        with initialize_config_dir(config_dir=str(ROOT), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
        data = OmegaConf.to_container(cfg, resolve=False)

        def walk(node, prefix=""):
            for k, v in node.items():
                if isinstance(v, dict):
                    yield from walk(v, f"{prefix}{k}.")
                else:
                    yield f"{prefix}{k}", v
        return dict(walk(data))

    paper, preset = flat([]), flat(["preset=cpu_small"])
    changed = {k: (paper.get(k), v) for k, v in preset.items() if paper.get(k) != v}
    assert changed == {
        "experiment": ("exp", "cpu_small"),
        "num_train_frames": (5_000_000, 60_000),
        "eval_every_frames": (25_000, 5_000),
        "num_eval_episodes": (10, 5),
        "agent.train_eps_decay_steps": (1_000_000, 30_000),
    }
    assert set(paper) == set(preset)
    medium = flat(["preset=cpu_medium"])
    changed = {k: (paper.get(k), v) for k, v in medium.items() if paper.get(k) != v}
    assert changed == {  # the paper's schedule in proportion: epsilon over the first fifth
        "experiment": ("exp", "cpu_medium"),
        "num_train_frames": (5_000_000, 200_000),
        "eval_every_frames": (25_000, 10_000),
        "agent.train_eps_decay_steps": (1_000_000, 40_000),
    }
    assert set(paper) == set(medium)


@pytest.mark.e2e
def test_runs_name_their_method_and_game_and_old_run_dirs_still_read(sweep, tmp_path):
    from ellm.games import GAMES
    from ellm_tools.report.runs import game_of, method_name

    for run in run_dirs(sweep):
        config = json.loads((run / "config.json").read_text())
        assert config["game"] == "crafter"
        assert config["method"] in ("ellm", "novelty")
        old = {k: v for k, v in config.items() if k not in ("method", "game", "ellm_version")}
        # Runs of versions before method= recorded ellm-oracle (or nothing): read the same.
        older = {**old, "method": {"ellm": "ellm-oracle"}.get(config["method"], "novelty")}
        assert method_name(old) == method_name(older) == method_name(config) == method_of(run)
        assert game_of(old) is game_of(config) is GAMES[0].report


@pytest.mark.e2e
def test_pooling_that_could_mislead_is_warned_about_and_experiments_can_be_kept_apart(
        sweep, tmp_path):
    oracle = [d for d in run_dirs(sweep) if method_of(d) == "ELLM-oracle"]
    short = copy_run(oracle[0], tmp_path / "mixed" / "short")
    config = json.loads((short / "config.json").read_text())
    config["num_train_frames"] = 10
    (short / "config.json").write_text(json.dumps(config))
    copy_run(oracle[1], tmp_path / "mixed" / "long")
    report = build_report([tmp_path / "mixed"], tmp_path / "out")
    assert report.warnings == [("ELLM-oracle: runs of different budgets pooled "
                                "(num_train_frames 10, 40); --group-by num_train_frames keeps "
                                "them apart")]
    assert "**Warnings:**" in report.summary.read_text()

    for name in ("A", "B"):  # the same seed in two experiments
        run = copy_run(oracle[0], tmp_path / "twice" / name)
        config = json.loads((run / "config.json").read_text())
        config["exp_name"] = name
        (run / "config.json").write_text(json.dumps(config))
    report = build_report([tmp_path / "twice"], tmp_path / "out2")
    assert report.warnings == [(f"ELLM-oracle: seed {run_seed(oracle[0])} appears more than "
                                "once; --group-by exp_name keeps experiments apart")]
    apart = build_report([tmp_path / "twice"], tmp_path / "out3", group_by=["exp_name"])
    assert apart.warnings == []
    assert sorted({r.method for r in apart.runs}) == ["ELLM-oracle exp_name=A",
                                                      "ELLM-oracle exp_name=B"]


@pytest.mark.e2e
def test_out_defaults_to_a_report_dir_inside_the_one_path(sweep, tmp_path):
    run = copy_run(run_dirs(sweep)[0], tmp_path / "run")
    proc = subprocess.run([sys.executable, "-m", "ellm_tools.report", str(run)], cwd=tmp_path,
                          env=train_env(tmp_path), capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert (run / "report" / "report.md").is_file()


def run_seed(run: Path) -> int:
    return json.loads((run / "config.json").read_text())["seed"]


# ---- a run directory someone sent cannot make the report delete, leak or write elsewhere ----
def sent_run(root: Path, name: str, label: str, **config) -> Path:
    """A run dir with a few training episodes and one evaluation, labelled ``label``."""
    run = root / name
    (run / "train").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"method": "sent", "method_label": label, **config}))
    (run / "train.csv").write_text("frame,episode_reward\n100,1.0\n200,2.0\n")
    (run / "eval.csv").write_text("frame,episode_reward\n200,1.5\n")
    (run / "train" / "stats.jsonl").write_text('{"length": 100, "reward": 1.0, "frame": 100}\n')
    return run


@pytest.mark.parametrize("label", ["..", ".", "../../escape", "/", "", ".hidden", "a" * 500])
def test_copy_runs_stays_in_its_own_directory_whatever_the_label(tmp_path, label):
    from ellm_tools.report.__main__ import main

    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    (out / "mine.txt").write_text("a user's file")
    (out / "runs" / "mine.txt").write_text("a user's file")
    sent_run(tmp_path / "sent", "run1", label)
    assert main([str(tmp_path / "sent"), "--out", str(out), "--copy-runs"]) == 0
    assert (out / "mine.txt").read_text() == "a user's file"
    assert (out / "runs" / "mine.txt").read_text() == "a user's file"
    (copy,) = [p for p in (out / "runs").iterdir() if p.is_dir()]
    assert copy.parent == out / "runs" and not copy.name.startswith(".")
    assert len(copy.name) <= 100 and (copy / "train.csv").is_file()
    assert not (tmp_path / "escape").exists()


def test_the_report_never_follows_a_symlink_out_of_a_run_or_writes_through_one(tmp_path):
    from ellm_tools.report.__main__ import main

    secret = tmp_path / "secret.csv"
    secret.write_text("frame,password\n1,hunter2\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "stats.jsonl").write_text('{"length": 1, "frame": 1, "leak": 42}\n')
    run = sent_run(tmp_path / "sent", "run1", "Sent", seed=1)
    (run / "leak.csv").symlink_to(secret)
    (run / "eval").symlink_to(outside, target_is_directory=True)
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.md"
    victim.write_text("not the report's")
    (out / "report.md").symlink_to(victim)
    (out / "report.json").symlink_to(tmp_path / "victim.json")
    assert main([str(tmp_path / "sent"), "--out", str(out), "--copy-runs"]) == 0
    assert victim.read_text() == "not the report's" and not (tmp_path / "victim.json").exists()
    assert not (out / "report.md").is_symlink() and "Sent" in (out / "report.md").read_text()
    copy = out / "runs" / "Sent_seed1"
    kept = {str(p.relative_to(copy)) for p in copy.rglob("*")}
    assert "leak.csv" not in kept and "eval/stats.jsonl" not in kept and "eval.csv" in kept
    (loaded,) = load_runs([run])
    assert "leak" not in loaded.csvs and loaded.eval_episodes == []
    # The copies' own folder as a symlink: refused, nothing written through it.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out2 = tmp_path / "out2"
    out2.mkdir()
    (out2 / "runs").symlink_to(elsewhere, target_is_directory=True)
    assert main([str(tmp_path / "sent"), "--out", str(out2), "--copy-runs"]) == 2
    assert list(elsewhere.iterdir()) == []


def test_records_that_are_not_what_runs_write_are_dropped_or_refused(tmp_path):
    run = sent_run(tmp_path, "run1", "Sent", seed=1)
    (run / "train" / "stats.jsonl").write_text(
        '[1, 2]\n"text"\n{"length": "long", "frame": 5, "reward": 1e999}\n')
    (loaded,) = load_runs([run])
    assert loaded.train_episodes == [{"frame": 5.0}]  # the one object; its numbers only
    (run / "config.json").write_text("[1, 2, 3]")
    with pytest.raises(UnreadableRun, match="holds a list, expected a JSON object"):
        load_runs([run])


# ------------------------------------------------------------------------ figures fit their data
def test_runs_that_were_only_evaluated_are_bars_not_a_line_at_one_x(tmp_path):
    from ellm_tools.report.aggregate import Curve
    from ellm_tools.report.figures import line_figure

    def at_zero(method: str, values: list[float]) -> Curve:
        runs = {f"{method}{i}": {0: v} for i, v in enumerate(values)}
        return Curve(method=method, frames=[0], mean=[statistics.mean(values)],
                     std=[statistics.pstdev(values)], min=[min(values)], max=[max(values)],
                     n_runs=[len(values)], runs=runs)

    line_figure(tmp_path / "evals.png", [at_zero("LLM policy", [1.0, 3.0]),
                                         at_zero("Scripted policy", [2.0])],
                "Achievements", "achievements / episode")
    data = figure(tmp_path, "evals")
    assert data["kind"] == "bars" and data["at"] == "frames = 0"
    assert [(s["method"], s["mean"], s["std"]) for s in data["series"]] == [
        ("LLM policy", [2.0], [1.0]), ("Scripted policy", [2.0], [0.0])]


def test_curves_against_episodes_get_whole_number_ticks(tmp_path):
    run = tmp_path / "runs" / "0_seed1"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({
        "method": "policy-search-random", "method_label": "Policy search, random settings",
        "game": "mountaincar", "game_label": "MountainCar", "seed": 1, "uses_lm": False,
        "num_train_episodes": 3}))
    (run / "iteration.csv").write_text("frame,iteration,episodes,return\n"
                                       "90,1,1,-5.0\n180,2,2,10.0\n270,3,3,40.0\n")
    report = build_report([tmp_path / "runs"], tmp_path / "out")
    assert "mountaincar_return" in report.figures
    data = figure(tmp_path / "out", "mountaincar_return")
    assert data["kind"] == "line" and data["xlabel"] == "training episodes"
    assert data["xticks"] and all(t == int(t) for t in data["xticks"]), data["xticks"]


def test_plus_minus_says_what_it_is_and_shows_the_runs():
    from ellm_tools.report.summary import GLOSSARY, _ms

    assert _ms([0.5, 0.7]) == "0.60 ± 0.10 (2: 0.50, 0.70)"  # half the gap of two runs
    assert _ms([1.0, 2.0, 3.0]) == "2.00 ± 0.82 (3: 1.00, 2.00, 3.00)"
    assert _ms([1.0, 1.0, 1.0, 1.0]) == "1.00 ± 0.00 (4)"
    assert _ms([4.9]) == "4.90 (1)"
    assert "population std over runs (ddof=0)" in GLOSSARY and "half their" in GLOSSARY


def test_figures_fit_their_titles_say_their_n_and_labels_with_commas_stay_whole(tmp_path):
    from ellm_tools.report.figures import _pyplot, fitted_title

    for label in ("ELLM-oracle [attack cow], guided", "RND"):
        run = sent_run(tmp_path / "runs", safe(label), label, num_eval_episodes=5, seed=1)
        (run / "eval.csv").write_text("frame,episode_reward,coverage\n0,0.5,3\n200,1.5,9\n")
        (run / "eval").mkdir()
        (run / "eval" / "stats.jsonl").write_text(
            '{"length": 100, "reward": 1.0, "frame": 0}\n{"length": 100, "reward": 1.0, '
            '"frame": 200, "achievement_collect_wood": 1}\n')
    report = build_report([tmp_path / "runs"], tmp_path / "out")
    for name in ("achievements_eval", "exploration_coverage"):
        assert "each point: 5 evaluation episodes of each run" in figure(tmp_path / "out", name)[
            "title"]
    assert 'methods: "ELLM-oracle \\[attack cow\\], guided", RND.' in report.summary.read_text()
    # The longest title, drawn as _save draws it, stays inside its figure.
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.set_title(fitted_title(figure(tmp_path / "out", "exploration_coverage")["title"], 7))
    fig.tight_layout()
    fig.canvas.draw()
    box = ax.title.get_window_extent(fig.canvas.get_renderer())
    assert 0 <= box.x0 and box.x1 <= fig.bbox.x1
    plt.close(fig)


def safe(label: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in label)
