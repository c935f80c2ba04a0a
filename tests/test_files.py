"""ellm.run.atomic.atomic_write: the one way the run's files (snapshots, episodes, CSVs, config.json,
text embeddings) are written, so a crash leaves the old file or the new one."""

from __future__ import annotations

import os

import pytest

from ellm.run.atomic import atomic_write


def test_the_new_file_replaces_the_old_one_only_when_complete(tmp_path) -> None:
    path = tmp_path / "train.csv"
    path.write_text("old\n")
    with atomic_write(path, "w", newline="", sync_dir=True) as f:
        f.write("new\n")
        assert path.read_text() == "old\n"  # not yet: the body writes the temp file
        assert f.name == str(tmp_path / f".train.csv.{os.getpid()}.tmp")
    assert path.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.csv"]


def test_an_error_mid_write_keeps_the_old_file_and_removes_the_temp_file(tmp_path) -> None:
    path = tmp_path / "snapshot.pt"
    path.write_bytes(b"old")
    tmp = tmp_path / ".snapshot.pt.tmp"
    with pytest.raises(KeyboardInterrupt), atomic_write(path, tmp=tmp) as f:
        f.write(b"half")
        raise KeyboardInterrupt
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snapshot.pt"]
    with atomic_write(tmp_path / "fresh.bin", tmp=tmp) as f:  # a new file, a named temp file
        f.write(b"x")
    assert (tmp_path / "fresh.bin").read_bytes() == b"x" and not tmp.exists()


def test_a_link_at_the_temp_files_name_is_replaced_not_written_through(tmp_path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("someone else's")
    path = tmp_path / "report.md"
    (tmp_path / f".report.md.{os.getpid()}.tmp").symlink_to(victim)
    with atomic_write(path, "w") as f:
        f.write("new\n")
    assert victim.read_text() == "someone else's"
    assert path.read_text() == "new\n" and not path.is_symlink()
