"""``python -m ellm_tools.report`` on run directories from anyone: it deletes nothing it did not
write in the same call, writes through no symlink, skips a run it cannot read (naming the file
and line) and reports the rest, and escapes the runs' own words in report.md."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path

import pytest

from ellm_tools.report import UnreadableRun, build_report, load_runs
from ellm_tools.report.__main__ import main
from ellm_tools.report.summary import md


def sent_run(root: Path, name: str, label: str, **config) -> Path:
    """A run dir with two training episodes logged and one evaluation, labelled ``label``."""
    run = root / name
    (run / "train").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"method": "sent", "method_label": label,
                                                 "seed": 1, **config}, indent=2))
    (run / "train.csv").write_text("frame,episode_reward\n100,1.0\n200,2.0\n")
    (run / "eval.csv").write_text("frame,episode_reward\n200,1.5\n")
    (run / "train" / "stats.jsonl").write_text('{"length": 100, "reward": 1.0, "frame": 100}\n')
    return run


def files_under(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file() and not p.is_symlink()}


# ------------------------------------------------------------ nothing deleted, nothing followed
def test_a_second_copy_into_the_same_out_keeps_the_copies_an_earlier_report_made(tmp_path):
    out = tmp_path / "out"
    first = sent_run(tmp_path / "first", "run", "Sent")
    assert main([str(tmp_path / "first"), "--out", str(out), "--copy-runs"]) == 0
    copies = out / "runs"
    kept = files_under(copies)
    assert sorted(kept) == ["Sent_seed1/config.json", "Sent_seed1/eval.csv",
                            "Sent_seed1/train.csv", "Sent_seed1/train/stats.jsonl"]
    # Another run of the same label and seed (another experiment): a copy of its own.
    other = sent_run(tmp_path / "second", "run", "Sent")
    (other / "train.csv").write_text("frame,episode_reward\n100,5.0\n")
    assert main([str(tmp_path / "second"), "--out", str(out), "--copy-runs"]) == 0
    assert {k: v for k, v in files_under(copies).items() if k.startswith("Sent_seed1/")} == kept
    assert (copies / "Sent_seed1_2" / "train.csv").read_text() == "frame,episode_reward\n100,5.0\n"
    report = json.loads((out / "report.json").read_text())
    assert [r["path"] for r in report["runs"]] == ["runs/Sent_seed1_2"]
    # The first run again, unchanged: reported from its earlier copy, no third copy made.
    assert main([str(first), "--out", str(out), "--copy-runs"]) == 0
    assert sorted(p.name for p in copies.iterdir()) == ["Sent_seed1", "Sent_seed1_2"]
    assert json.loads((out / "report.json").read_text())["runs"][0]["path"] == "runs/Sent_seed1"
    # What sits at a copy's name and is not that copy (a link, a file) stays as it is.
    (copies / "Sent_seed1").rename(tmp_path / "moved")
    (copies / "Sent_seed1").symlink_to(tmp_path / "moved", target_is_directory=True)
    (first / "train.csv").write_text("frame,episode_reward\n100,1.0\n200,2.0\n300,3.0\n")
    assert main([str(first), "--out", str(out), "--copy-runs"]) == 0
    assert (copies / "Sent_seed1").is_symlink() and files_under(tmp_path / "moved") == {
        k.removeprefix("Sent_seed1/"): v for k, v in kept.items() if k.startswith("Sent_seed1/")}
    assert (copies / "Sent_seed1_3" / "train.csv").read_text().endswith("300,3.0\n")


@pytest.mark.parametrize("copy_runs", [False, True])
def test_a_report_link_in_the_run_dir_is_refused_not_followed(tmp_path, capsys, copy_runs):
    run = sent_run(tmp_path, "run", "Sent")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "report").symlink_to(elsewhere, target_is_directory=True)
    assert main([str(run), *(["--copy-runs"] if copy_runs else [])]) == 2
    assert "is a symlink" in capsys.readouterr().err
    assert list(elsewhere.iterdir()) == [] and (run / "report").is_symlink()
    # --out given as a link, or as a file: refused as well.
    (tmp_path / "linked").symlink_to(elsewhere, target_is_directory=True)
    assert main([str(run), "--out", str(tmp_path / "linked")]) == 2
    (tmp_path / "file").write_text("a user's file")
    assert main([str(run), "--out", str(tmp_path / "file")]) == 2
    assert list(elsewhere.iterdir()) == [] and (tmp_path / "file").read_text() == "a user's file"


def test_a_link_planted_at_a_temp_file_name_is_not_written_through(tmp_path):
    run = sent_run(tmp_path, "run", "Sent")
    out = run / "report"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("not the report's")
    for name in ("report.md", "report.json", "achievements_train.png", "achievements_train.json"):
        (out / f".{name}.{os.getpid()}.tmp").symlink_to(victim)
    assert main([str(run)]) == 0
    assert victim.read_text() == "not the report's"
    assert "Sent" in (out / "report.md").read_text() and not (out / "report.md").is_symlink()


# ------------------------------------------------------------ a run it cannot read is skipped
NESTED = "[" * 100_000 + "]" * 100_000
UNREADABLE = {  # file -> (its text, the line named)
    "frame=inf": ("train.csv", "frame,episode_reward\n100,1.0\ninf,2.0\n", 3),
    "seed=1e999": ("config.json", '{\n  "method": "sent",\n  "seed": 1e999\n}', 3),
    "a 20 MB field": ("train.csv", "frame,episode_reward\n1,1\n2," + "9" * 20_000_000 + "\n", 3),
    "nested JSON": ("train/stats.jsonl", '{"frame": 1}\n' + NESTED + "\n", 2),
    "a 5000-digit frame": ("eval/stats.jsonl", '{"frame": ' + "9" * 5000 + "}\n", 1),
    "a huge frame": ("eval.csv", "frame,episode_reward\n1e300,1\n", 2),
    "a negative frame": ("train/stats.jsonl", '{"frame": -5}\n', 1),
    "a row of too many cells": ("train.csv", "frame,episode_reward\n1,2,3\n2,1\n", 2),
    "episodes=nan": ("iteration.csv", "frame,episodes,return\n1,1,1\n2,nan,1\n", 3),
    "no budget": ("config.json", '{"method": "sent", "num_train_frames": "5M"}', 1),
    "no evaluations": ("config.json", '{"method": "sent", "eval_every_frames": 0}', 1),
    "a config in pieces": ("config.json", '{"method":\n "sent",\n', 3),
    "a config list": ("config.json", "[1, 2]", None),
}


@pytest.mark.parametrize("case", list(UNREADABLE))
def test_a_run_it_cannot_read_is_skipped_naming_the_file_and_line(tmp_path, capsys, case):
    file, text, line = UNREADABLE[case]
    sent_run(tmp_path / "sent", "good", "Good")
    bad = sent_run(tmp_path / "sent", "bad", "Bad")
    (bad / file).parent.mkdir(exist_ok=True)
    (bad / file).write_text(text)
    assert main([str(tmp_path / "sent"), "--out", str(tmp_path / "out")]) == 0
    warning = capsys.readouterr().err
    where = f"{bad / file} line {line}:" if line else f"{bad / file}:"
    assert f"warning: run skipped, its records cannot be read: {where}" in warning, warning
    summary = (tmp_path / "out" / "report.md").read_text()
    assert "| Good | 1 | 200 |" in summary and "| Bad |" not in summary
    assert f"- sent/bad/{file}{f' line {line}' if line else ''}: " in summary
    # Read alone, the run raises the same error; with --copy-runs it is skipped and not copied.
    with pytest.raises(UnreadableRun):
        load_runs([bad])
    assert main([str(tmp_path / "sent"), "--out", str(tmp_path / "out2"), "--copy-runs"]) == 0
    assert where in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "out2" / "runs").iterdir()] == ["Good_seed1"]


def test_a_file_larger_than_any_run_writes_is_not_read(tmp_path, monkeypatch):
    from ellm_tools.report import records

    monkeypatch.setattr(records, "MAX_FILE_BYTES", 1000)
    sent_run(tmp_path, "good", "Good")
    big = sent_run(tmp_path, "big", "Big")
    (big / "lm.csv").write_text("frame,queries\n" + "1,1\n" * 500)
    report = build_report([tmp_path], tmp_path / "out")
    assert [r.method for r in report.runs] == ["Good"]
    (skipped,) = report.skipped
    assert skipped.file == big / "lm.csv" and "larger than" in skipped.why


# Values a run's files could hold in place of what the loggers write.
ODD_VALUES = [float("inf"), float("-inf"), float("nan"), 1e308, -1e308, 10**30, -5, 0, 1.5,
              True, None, "x", "", [], {}, [1], {"a": {"b": [1]}}, "$\\frac{$", "a" * 3000,
              "../../../escape", "# h\n<b>"]
ODD_CELLS = ["inf", "-inf", "nan", "", "x", "1e308", "-1e308", "1e999", "-3", "9" * 5000, "1.5"]
CONFIG_KEYS = ["seed", "num_train_frames", "eval_every_frames", "num_train_episodes", "method",
               "method_label", "game", "game_label", "expl_agent_path", "finetune_snapshot",
               "snapshot_path", "uses_lm", "language_input", "use_extr_rew", "env_spec.name",
               "env_spec.single_task", "env_spec.lm_spec.lm_class", "env_spec.lm_spec.lm",
               "agent._target_", "agent.eval_eps", "agent.use_language", "env_spec", "agent"]
COLUMNS = ["frame", "episode_reward", "episodes", "return", "iteration", "top_action_share",
           "coverage", "queries", "api_calls", "tokens", "dollars", "rearrange_success"]


def odd_run(run: Path, rng: random.Random) -> None:
    """A run whose config, CSVs and episodes hold values drawn from the odd ones above."""
    config = {"seed": 1, "num_train_frames": 300, "eval_every_frames": 100, "method": "ellm",
              "env_spec": {"name": "CrafterTextEnv-v1", "lm_spec": {"lm_class": "SimpleOracle"}}}
    for _ in range(rng.randint(1, 3)):
        *parents, last = rng.choice(CONFIG_KEYS).split(".")
        node = config
        for part in parents:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[last] = rng.choice([*ODD_VALUES, "mountaincar", "housekeep", "rnd", "ellm-oracle"])
    (run / "train").mkdir(parents=True)
    (run / "eval").mkdir()
    (run / "config.json").write_text(json.dumps(config))
    for namespace in ("train", "eval", "iteration", "lm"):
        columns = ["frame", *rng.sample(COLUMNS[1:], rng.randint(1, 4))]
        rows = [",".join(rng.choice(ODD_CELLS) if rng.random() < 0.3 else str(100 * (i + 1))
                         for _ in columns) for i in range(rng.randint(0, 4))]
        (run / f"{namespace}.csv").write_text("\n".join([",".join(columns), *rows]) + "\n")
    for split in ("train", "eval"):
        episodes = []
        for i in range(rng.randint(0, 4)):
            episode = {"frame": 100 * (i + 1), "length": 5, "achievement_collect_wood": 1}
            episode[rng.choice([*episode, "top_action_share", "coverage"])] = rng.choice(ODD_VALUES)
            episodes.append(json.dumps(episode))
        (run / split / "stats.jsonl").write_text("\n".join(episodes) + "\n")


@pytest.mark.parametrize("seed", range(12))
def test_odd_values_anywhere_in_a_run_never_stop_the_report(tmp_path, seed):
    rng = random.Random(seed)
    sent_run(tmp_path / "runs", "good", "Good")
    for i in range(3):
        odd_run(tmp_path / "runs" / f"odd{i}", rng)
    report = build_report([tmp_path / "runs"], tmp_path / "out")
    assert "Good" in [r.method for r in report.runs]
    assert len(report.runs) + len(report.skipped) == 4
    assert {p.parent for p in (tmp_path / "out").rglob("*")} == {tmp_path / "out"}
    assert not list(tmp_path.parent.glob("escape*"))
    json.loads((tmp_path / "out" / "report.json").read_text())


# ------------------------------------------------------------ the runs' words are escaped
def test_labels_are_escaped_for_markdown_and_html(tmp_path):
    label = "# Title\n| a | b |\n<script>x</script> & `code` *bold* _em_ [link](http://x) $m$"
    hostile = sent_run(tmp_path / "runs", "x|y`z", label)
    no_data = tmp_path / "runs" / "n|`d"
    shutil.copytree(hostile, no_data)
    for f in ("train.csv", "eval.csv", "train/stats.jsonl"):
        (no_data / f).unlink()
    sent_run(tmp_path / "runs", "listed", "- item")
    sent_run(tmp_path / "runs", "numbered", "1. item", seed=2)
    report = build_report([tmp_path / "runs"], tmp_path / "out")
    summary = report.summary.read_text()
    headings = [line for line in summary.splitlines() if line.startswith("#")]
    assert all(h == "# ELLM run report" or h.startswith("## ") for h in headings), headings
    assert "Title" not in "".join(headings) and "<script>" not in summary and "<b>" not in summary
    assert "&lt;script&gt;x&lt;/script&gt; &amp; \\`code\\` \\*bold\\* \\_em\\_" in summary
    assert "\\[link\\](http://x) \\$m\\$" in summary
    # Every row of the runs table has its five cells; a pipe in a label or a name is escaped.
    table = summary.split("## Runs")[1].split("\n\n")[1].splitlines()
    assert all(len(re.split(r"(?<!\\)\|", row)) == 7 for row in table), table
    assert "| ``runs/x\\|y`z`` |" in summary
    assert "| \\- item |" in summary and "| 1\\. item |" in summary
    assert "Runs with no data yet (listed above, left out of figures and tables): ``runs/n|`d``." \
        in summary


@pytest.mark.parametrize("text, escaped", [
    ("ELLM-oracle", "ELLM-oracle"), ("exp_name=A", "exp_name=A"), ("_a_", "\\_a\\_"),
    ("a\nb\r\u2028c", "a b c"), ("#x", "\\#x"), ("+x", "\\+x"), ("3) x", "3\\) x"),
    ("a|b", "a\\|b"), ("<i>&amp;", "&lt;i&gt;&amp;amp;"), ("~~s~~", "\\~\\~s\\~\\~"),
    ("a\\b", "a\\\\b")])
def test_md_escapes_what_would_be_markup(text, escaped):
    assert md(text) == escaped


def test_a_game_name_a_run_recorded_never_names_a_file_outside_out(tmp_path):
    run = tmp_path / "runs" / "0_seed1"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({
        "method": "policy-search-random", "method_label": "$\\frac{$ search",
        "game": "../../escape", "seed": 1, "num_train_episodes": 2}))
    (run / "iteration.csv").write_text("frame,iteration,episodes,return\n90,1,1,-5.0\n"
                                       "180,2,2,10.0\n")
    report = build_report([tmp_path / "runs"], tmp_path / "out")
    assert report.figures["escape_return"] == tmp_path / "out" / "escape_return.png"
    assert not list(tmp_path.parent.glob("escape*")) and not list(tmp_path.glob("escape*"))
