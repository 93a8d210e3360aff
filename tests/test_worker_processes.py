"""The augmentation's worker processes live and die with their run (``scale/engine/workers.py``).

A real ``kill -9`` of a run on the per-image worker path: its workers end with it, none holds the run's lock,
its stdout pipe or its signal handlers, and ``--resume`` takes the lock over and finishes the run. And on every
way a run can end (finished, interrupted, non-finite loss, an error) no worker process outlives it: counted
from the kernel's process table, not from Python's bookkeeping.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from _hooks import Crash

from scale.engine.checkpoint import load_checkpoint
from scale.engine.hooks import Hook
from scale.run import main
from scale.runs.faults import EXIT_INTERRUPTED, EXIT_NONFINITE

ROOT = Path(__file__).resolve().parents[1]
TINY = ["synthetic", "--quiet", "--train-subset", "96", "--batch-size", "32", "--probe-size", "32",
        "--head-width", "16", "--head-out", "8", "--backbone-width", "4", "--image-size", "8", "--no-final-measure",
        "--threads", "1", "--augment-path", "workers"]

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads the process table in /proc "
                                "(Linux)")


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state, ppid, ...), or None once the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def children(pid: int) -> set[int]:
    """Live (not zombie) processes whose parent is ``pid``, from the kernel's process table."""
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None and st[1] == str(pid) \
                and st[0] != "Z":
            out.add(int(entry.name))
    return out


def alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] != "Z"


def _signal_mask(pid: int, field: str) -> int:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith(field + ":"))
    return int(line.split()[1], 16)


def _fd_targets(pid: int) -> dict[int, str]:
    out = {}
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            out[int(fd.name)] = os.readlink(fd)
        except OSError:
            pass
    return out


def test_kill_9_on_the_workers_path_leaves_no_orphan_no_lock_and_no_open_pipe(tmp_path, capsys):
    run_dir = tmp_path / "w"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "scale.run", *TINY, "--augment-workers", "2", "--epochs", "500",
                             "--out", str(tmp_path), "--run-name", "w"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        deadline, workers = time.time() + 120, set()
        while proc.poll() is None and time.time() < deadline and not (
                (run_dir / "metrics.jsonl").exists() and len(workers := children(proc.pid)) == 2):
            time.sleep(0.05)
        assert proc.poll() is None and len(workers) == 2, (proc.poll(), workers)
        lock = str((run_dir / ".lock").resolve())
        for w in workers:  # what a worker holds: not the lock, not the run's pipes, not its handlers
            fds = _fd_targets(w)
            assert lock not in fds.values(), fds
            assert all(fds.get(std) == os.devnull for std in (0, 1, 2)), fds
            ignored, caught = _signal_mask(w, "SigIgn"), _signal_mask(w, "SigCgt")
            for sig in (signal.SIGINT, signal.SIGTERM):
                assert ignored >> (sig - 1) & 1 and not caught >> (sig - 1) & 1, (sig, hex(ignored), hex(caught))
        os.kill(proc.pid, signal.SIGKILL)
        # the pipe reaches EOF (no worker keeps it open: `| tee` would return) and the workers end with the run
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:  # a check above failed: end the run and whatever it forked
            proc.kill()
            proc.wait()
            for w in workers:
                if alive(w):
                    os.kill(w, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    deadline = time.time() + 10
    while any(alive(w) for w in workers) and time.time() < deadline:
        time.sleep(0.05)
    orphans = [w for w in workers if alive(w)]
    for w in orphans:  # a failing check must not leave them running
        os.kill(w, signal.SIGKILL)
    assert not orphans
    # the lock is free: --resume takes it over (naming the dead holder) and finishes the run
    done = int(load_checkpoint(run_dir / "checkpoint.pt")["epoch"])
    assert main(["--resume", str(run_dir), "--quiet", "--epochs", str(done + 1)]) == 0
    err_lines = capsys.readouterr().err.splitlines()
    assert any(f"took over the lock of a run that ended without releasing it (pid {proc.pid}" in line
               for line in err_lines), err_lines
    assert not any("in use by another run" in line for line in err_lines)
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"
    assert not (run_dir / ".lock").exists()  # released and removed


class CountWorkers(Hook):
    """Records how many worker processes this process has after each step (the check cannot pass vacuously)."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def on_step_end(self, state):
        self.seen.append(len(children(os.getpid())))


class Signal(Hook):
    def __init__(self, at: int, sig: int) -> None:
        self.at, self.sig = at, sig

    def on_step_end(self, state):
        if state.global_step == self.at:
            os.kill(os.getpid(), self.sig)


class Poison(Hook):
    def on_step_end(self, state):
        if state.global_step == 2:
            with torch.no_grad():
                state.model.projector.layers[0].weight.fill_(float("nan"))


@pytest.mark.parametrize(("ending", "hook", "code"), [
    ("finished", None, 0),
    ("interrupted", Signal(2, signal.SIGINT), EXIT_INTERRUPTED),
    ("non-finite loss", Poison(), EXIT_NONFINITE),
    ("an error", Crash(at_step=2), RuntimeError),
])
def test_no_worker_process_outlives_a_run_however_it_ends(tmp_path, ending, hook, code):
    before = children(os.getpid())
    count = CountWorkers()
    argv = [*TINY, "--augment-workers", "2", "--epochs", "2", "--out", str(tmp_path), "--run-name", "r"]
    hooks = [count] + ([hook] if hook is not None else [])
    if isinstance(code, type):
        with pytest.raises(code):
            main(argv, hooks=hooks)
    else:
        assert main(argv, hooks=hooks) == code
    assert max(count.seen) >= 2 + len(before), (ending, count.seen)  # the workers did exist during the run
    assert children(os.getpid()) <= before, ending
