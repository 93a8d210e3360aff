"""A ledger unit stopped mid-way resumes from its work folder's checkpoint (``scale.ledger.work``), and its unit
file then equals an uninterrupted run's, number for number (1 thread, CPU).

Real faults on real processes: ``python -m scale.replicate`` running one --quick E1 unit of 12 epochs is SIGKILLed
(a node lost, a job killed past its time) or sent SIGTERM (a preemption's first signal: the trainer saves mid-epoch
and exits 130) once its first checkpoint stands; the same command then resumes it (its log names the epoch it
resumed at, past 0), writes the unit file and removes the work folder. Opt-in (``LEDGER_WORK_ALL=1``): an E5 unit
SIGKILLed, and an E3E4 unit sent SIGTERM in its second training, likewise."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from scale.ledger import runner, work

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
# What differs between two runs of one unit by when and how long they ran (at any depth of the record); every value
# measured is compared.
WHEN = ("seconds", "finished_at", "curvature_seconds")
WAIT_S = 300  # a generous bound on a loaded machine (a run takes about 10 s on an idle one)
# The opt-in cases: an E5 unit (one training) and an E3E4 unit stopped in its second training (its first resumes
# as finished). About a minute each on an idle CPU: LEDGER_WORK_ALL=1 python -m pytest tests/test_ledger_work.py
ALL = bool(os.environ.get("LEDGER_WORK_ALL"))


@dataclass(frozen=True)
class Case:
    unit: str
    experiment: str
    epochs: int  # 2 steps each at --quick: long enough to be stopped between its first checkpoint and its end
    training: str = ""  # the sub-folder whose first checkpoint the stop waits for (E3E4: "normalized")

    @property
    def flags(self) -> list[str]:
        return ["--quick", "--threads", "1", "--seeds", "1", "--experiments", self.experiment, "--epochs",
                f"{self.experiment}={self.epochs}", "--units", self.unit]


E1 = Case("E1-relu2-bn0-lr0.05-collapsed-s0", "E1", 12)
OPT_IN = [Case("E5-depth2-s0", "E5", 8), Case("E3E4-s0", "E3E4", 6, "normalized")]


def _replicate(case: Case, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "scale.replicate", *case.flags, "--out", str(out)], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    said, _ = proc.communicate(timeout=WAIT_S)
    return proc.returncode, said


def _folder(case: Case, out: Path) -> Path:
    settings = runner.plan_settings("digits", True, {case.experiment: case.epochs}, "cpu", 1, seeds=1)  # --seeds 1
    key = runner.expected_keys(settings, 1)[case.unit]
    return work.work_dir(out, runner.plan_id(settings), case.unit, "cpu", 1, key)


def _without_when(x):
    if isinstance(x, dict):
        return {k: _without_when(v) for k, v in x.items() if k not in WHEN}
    return [_without_when(v) for v in x] if isinstance(x, list) else x


def _unit_text(case: Case, out: Path) -> str:
    """The unit file's record without when and how long it ran, as canonical JSON (NaN compares as text)."""
    (path,) = list((out / "units").glob(f"*--{case.unit}--*.json"))
    return json.dumps(_without_when(json.loads(path.read_text())), sort_keys=True)


def _uninterrupted(case: Case, out: Path) -> str:
    code, said = _finish(_replicate(case, out))
    assert code == 0, said
    assert "resumed" not in said and not _folder(case, out).exists()
    return _unit_text(case, out)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> str:
    return _uninterrupted(E1, tmp_path_factory.mktemp("whole") / "L")


def _stop_and_resume(case: Case, out: Path, sig: int, uninterrupted: str) -> None:
    folder = _folder(case, out)
    proc = _replicate(case, out)
    t0 = time.monotonic()
    while not (folder / case.training / "checkpoint.pt").is_file():
        assert proc.poll() is None and time.monotonic() - t0 < WAIT_S, "the unit ended before its first checkpoint"
        time.sleep(0.01)
    os.kill(proc.pid, sig)
    code, said = _finish(proc)
    assert code == (-signal.SIGKILL if sig == signal.SIGKILL else 130), said
    assert not list((out / "units").glob(f"*--{case.unit}--*.json")), "the unit ended before it was stopped"
    ck = torch.load(folder / case.training / "checkpoint.pt", weights_only=True)
    stopped_at = (int(ck["epoch"]), int(ck["step"]))
    assert 0 < stopped_at[0] < case.epochs or stopped_at[1] > 0, stopped_at

    code, said = _finish(_replicate(case, out))  # the same command again: the rerun of a requeued job
    assert code == 0, said
    assert f": resumed at epoch {stopped_at[0]} of {case.epochs} from {folder / case.training}" in said, said
    assert _unit_text(case, out) == uninterrupted
    assert not folder.exists(), "the work folder outlived its unit file"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_stopped_unit_resumes_from_its_checkpoint(sig, tmp_path, uninterrupted):
    _stop_and_resume(E1, tmp_path / "L", sig, uninterrupted)


@pytest.mark.skipif(not ALL, reason="opt-in (LEDGER_WORK_ALL=1): about a minute each")
@pytest.mark.parametrize("case", OPT_IN, ids=[c.experiment for c in OPT_IN])
def test_every_experiments_unit_resumes(case, tmp_path):
    _stop_and_resume(case, tmp_path / "stopped", signal.SIGTERM if case.training else signal.SIGKILL,
                     _uninterrupted(case, tmp_path / "whole"))


def test_a_work_folder_holding_a_users_file_is_kept(tmp_path):
    """Removal deletes only what a trainer writes there: a user's note keeps the folder (and the note) whole."""
    folder = tmp_path / "work" / "p--u--cpu-t1--k"
    (folder / "raw").mkdir(parents=True)
    for p in (folder / "checkpoint.pt", folder / "raw" / "metrics.jsonl", folder / "notes.txt"):
        p.write_text("x")
    said = work.remove(folder)
    assert said and "notes.txt" in said and (folder / "notes.txt").read_text() == "x"
    assert (folder / "checkpoint.pt").is_file() and (folder / "raw" / "metrics.jsonl").is_file()
    (folder / "notes.txt").unlink()
    assert work.remove(folder) is None and not folder.exists()


@pytest.mark.parametrize("where", ["checkpoint", "folder", "work"])
def test_a_link_in_the_work_path_is_refused_not_followed(tmp_path, capsys, where):
    """A symbolic link at the checkpoint's name, at the unit's work folder or at OUT/work is never read nor written
    through: one line, exit 2, the link's target as it was."""
    from scale import replicate as R

    out = tmp_path / "L"
    folder = _folder(E1, out)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "mine.pt").write_bytes(b"not ours")
    link = {"checkpoint": folder / "checkpoint.pt", "folder": folder, "work": folder.parent}[where]
    link.parent.mkdir(parents=True)
    link.symlink_to(elsewhere / "mine.pt" if where == "checkpoint" else elsewhere)
    assert R.main([*E1.flags, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(link) in err[0], err
    assert [p.name for p in elsewhere.iterdir()] == ["mine.pt"] and (elsewhere / "mine.pt").read_bytes() == b"not ours"
    assert link.is_symlink()
