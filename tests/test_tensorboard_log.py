"""``--log tensorboard`` (``scale.engine.hooks.TensorBoardLog``): the scalars of metrics.jsonl and the curvature
records,
each at its optimiser step, exactly once across a kill and a resume; bad values and a missing package refused
with one line (exit 2) before anything is written; only rank 0 writes.

The writer is a recorder injected where ``SummaryWriter`` would be (``scale.engine.hooks.summary_writer_class``), so the
tests need no tensorboard; the last test reads real event files back where the package is installed."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest
from _hooks import Crash

from scale.engine import hooks
from scale.run import build_parser, main
from scale.runs.config_file import read_config_file

TINY = ["synthetic", "--quiet", "--no-final-measure", "--train-subset", "96", "--batch-size", "32", "--probe-size",
        "32", "--head-width", "16", "--head-out", "8", "--backbone-width", "4", "--image-size", "8", "--epochs", "2",
        "--method", "simclr", "--track-hessian-every", "2"]  # 3 steps per epoch; H_eff at steps 2, 4, 6
TIMING = ("images_per_s", "epoch_seconds", "hess_seconds", "curvature/seconds")  # differ between two runs


class Recorder:
    """Stands for ``SummaryWriter``: keeps every ``add_scalar`` and, as the real one does, leaves an events
    file in ``log_dir``."""

    made: ClassVar[list[Recorder]] = []

    def __init__(self, log_dir: str, purge_step: int | None = None) -> None:
        self.log_dir, self.purge_step, self.calls, self.closed = Path(log_dir), purge_step, [], False
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (self.log_dir / f"events.out.tfevents.{len(Recorder.made)}").write_bytes(b"")
        Recorder.made.append(self)

    def add_scalar(self, tag: str, value: float, global_step: int) -> None:
        self.calls.append((tag, value, global_step))

    def flush(self) -> None: ...

    def close(self) -> None:
        self.closed = True


@pytest.fixture()
def recorder(monkeypatch):
    Recorder.made = []
    monkeypatch.setattr(hooks, "summary_writer_class", lambda: Recorder)
    return Recorder


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def expected(run_dir: Path) -> list[tuple[str, float, int]]:
    """What the log must hold: every numeric entry of metrics.jsonl at its step (but the tracker's copies,
    ``hess_*``), every curvature record's."""
    out = [(k, float(v), r["step"]) for r in _jsonl(run_dir / "metrics.jsonl") for k, v in r.items()
           if k != "step" and not k.startswith("hess_") and isinstance(v, (int, float)) and not isinstance(v, bool)]
    out += [(f"curvature/{k}", float(v), r["step"]) for r in _jsonl(run_dir / "curvature.jsonl") for k, v in r.items()
            if k not in ("step", "epoch") and isinstance(v, (int, float)) and not isinstance(v, bool)]
    return out


def visible(writers: list[Recorder]) -> list[tuple[str, float, int]]:
    """What TensorBoard shows: a writer opened with ``purge_step`` P hides the earlier writers' steps >= P."""
    shown: list[tuple[str, float, int]] = []
    for w in writers:
        if w.purge_step is not None:
            shown = [c for c in shown if c[2] < w.purge_step]
        shown += w.calls
    return shown


def _same(a: list[tuple[str, float, int]], b: list[tuple[str, float, int]]) -> None:
    assert sorted((t, s) for t, _, s in a) == sorted((t, s) for t, _, s in b)  # each (tag, step) once, none missing
    assert sorted(c for c in a if c[0] not in TIMING) == sorted(c for c in b if c[0] not in TIMING)


def test_the_log_holds_metrics_jsonl_and_the_curvature_records(tmp_path, recorder):
    assert main([*TINY, "--out", str(tmp_path), "--run-name", "full", "--log", "tensorboard"]) == 0
    run = tmp_path / "full"
    (w,) = recorder.made
    assert w.log_dir == run / "tensorboard" and w.purge_step is None and w.closed
    assert len(w.calls) == len(set((t, s) for t, _, s in w.calls))  # no (tag, step) twice
    assert sorted(w.calls) == sorted(expected(run))  # the very numbers, at their steps
    steps = {t: sorted(s for tag, _, s in w.calls if tag == t) for t in ("loss", "lr", "curvature/lambda_min")}
    assert steps == {"loss": [3, 6], "lr": [3, 6], "curvature/lambda_min": [2, 4, 6]}
    assert "hess_lambda_min" in _jsonl(run / "metrics.jsonl")[0]  # kept in metrics.jsonl ...
    assert not [t for t, _, _ in w.calls if t.startswith("hess_")]  # ... but one tag per quantity in the log
    assert ("curvature/lambda_min", _jsonl(run / "metrics.jsonl")[0]["hess_lambda_min"], 2) in w.calls


def test_kill_and_resume_continue_the_log_without_repeating_a_step(tmp_path, recorder):
    argv = [*TINY, "--out", str(tmp_path), "--log", "tensorboard"]
    assert main([*argv, "--run-name", "full"]) == 0
    full = recorder.made[-1].calls
    # killed at step 5: the checkpoint is epoch 1's (step 3), but the step-4 curvature record was logged already
    with pytest.raises(RuntimeError, match="simulated kill"):
        main([*argv, "--run-name", "cut"], hooks=[Crash(at_step=5)])
    first = recorder.made[-1]
    assert any(s == 4 for _, _, s in first.calls)
    shutil.copytree(tmp_path / "cut", tmp_path / "fresh")
    shutil.rmtree(tmp_path / "fresh" / "tensorboard")  # as if the first process ran without --log
    resume = ["--quiet", "--track-hessian-every", "2", "--log", "tensorboard"]
    assert main(["--resume", str(tmp_path / "cut"), *resume], hooks=[Crash(-1)]) == 0
    second = recorder.made[-1]
    assert second.purge_step == 4 and min(s for _, _, s in second.calls) == 4  # appends after the checkpoint
    _same(visible([first, second]), full)
    # negative control: without the purge, step 4's records would appear twice
    assert len(first.calls + second.calls) > len(full)
    # into a folder without events: the checkpoint's history and curvature records are written first
    assert main(["--resume", str(tmp_path / "fresh"), *resume], hooks=[Crash(-1)]) == 0
    backfilled = recorder.made[-1]
    assert backfilled.purge_step is None
    _same(backfilled.calls, full)


def test_only_rank_0_writes(tmp_path):
    made = []
    hook = hooks.TensorBoardLog(tmp_path, writer=lambda **kw: made.append(kw))
    state = SimpleNamespace(rank=1, global_step=0, history=[], metrics={"step": 3, "loss": 1.0})
    for event in ("on_fit_start", "on_step_end", "on_epoch_end", "on_interrupt", "on_fit_end"):
        getattr(hook, event)(state)
    assert made == [] and not (tmp_path / "tensorboard").exists()


def _one_line_exit_2(capsys, argv, out: Path, needle: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not out.exists()


def test_bad_values_and_a_missing_package_are_refused_before_anything_is_written(tmp_path, capsys, monkeypatch):
    out = tmp_path / "runs"
    _one_line_exit_2(capsys, [*TINY, "--out", str(out), "--log", "tb"], out, "--log 'tb' is not one of: none, "
                     "tensorboard")
    recipe = tmp_path / "r.toml"
    recipe.write_text('dataset = "synthetic"\nlog = "wandb"\n')
    _one_line_exit_2(capsys, ["--config", str(recipe), "--out", str(out)], out, "--log 'wandb' is not one of")
    recipe.write_text('log = "tensorboard"\n')
    assert read_config_file(recipe, build_parser()) == {"log": "tensorboard"}
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # an import of it now fails
    _one_line_exit_2(capsys, [*TINY, "--out", str(out), "--log", "tensorboard"], out,
                     "pip install -e '.[tensorboard]'")


def test_real_event_files_read_back(tmp_path):
    """Where the extra is installed: SummaryWriter's files, read by TensorBoard's own reader, hold metrics.jsonl's
    numbers (float32) at their steps, each step once after a kill and a resume."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    argv = [*TINY, "--out", str(tmp_path), "--run-name", "cut", "--log", "tensorboard"]
    with pytest.raises(RuntimeError, match="simulated kill"):
        main(argv, hooks=[Crash(at_step=5)])
    assert main(["--resume", str(tmp_path / "cut"), "--quiet", "--track-hessian-every", "2", "--log", "tensorboard"],
                hooks=[Crash(-1)]) == 0
    acc = EventAccumulator(str(tmp_path / "cut" / "tensorboard"))
    acc.Reload()
    metrics = _jsonl(tmp_path / "cut" / "metrics.jsonl")
    loss = acc.Scalars("loss")
    assert [e.step for e in loss] == [r["step"] for r in metrics]
    assert [e.value for e in loss] == pytest.approx([r["loss"] for r in metrics], rel=1e-6)
    assert [e.step for e in acc.Scalars("curvature/lambda_min")] == [2, 4, 6]
