"""``scale.runs.rundir.RunLock``: a finished run leaves no ``.lock``, and removing it cannot let two runs hold
the same directory (a run that opened the file just before its holder removed it opens the path again)."""

from __future__ import annotations

import os

import pytest

from scale.runs import rundir
from scale.runs.faults import ConfigError
from scale.runs.rundir import LOCK_NAME, RunLock


def test_release_removes_the_lock_file_and_an_empty_directory_it_created(tmp_path):
    run_dir = tmp_path / "new"
    lock = RunLock(run_dir)
    assert (run_dir / LOCK_NAME).is_file()
    (run_dir / "config.json").write_text("{}")
    lock.release()
    assert not (run_dir / LOCK_NAME).exists() and (run_dir / "config.json").is_file()
    RunLock(tmp_path / "empty").release()
    assert not (tmp_path / "empty").exists()


def test_a_run_that_opened_the_removed_lock_file_locks_the_path_again(tmp_path, monkeypatch):
    first = RunLock(tmp_path)
    opened = os.open

    def open_then_release(path, flags, mode=0o777):
        fd = opened(path, flags, mode)
        if first.fd >= 0:  # the holder finishes between this run's open and its flock
            first.release()
        return fd

    monkeypatch.setattr(rundir.os, "open", open_then_release)
    second = RunLock(tmp_path)  # its first fd points at the removed file: it must not count as the lock
    monkeypatch.undo()
    assert second._is_current() and (tmp_path / LOCK_NAME).is_file()
    with pytest.raises(ConfigError, match="in use by another run"):
        RunLock(tmp_path)  # a third run finds the second holding the file at the path
    second.release()
    RunLock(tmp_path).release()
