"""The trainer through ``scale.run.main``: resume exactness, Ctrl-C, non-finite loss, hooks, every method."""

from __future__ import annotations

import json
import os
import signal

import pytest
import torch
from _hooks import Crash

from scale.engine import objectives as so
from scale.engine.checkpoint import load_checkpoint
from scale.engine.hooks import Hook
from scale.run import main
from scale.runs.summary import RunSummary

TINY = ["synthetic", "--quiet", "--train-subset", "96", "--batch-size", "32", "--probe-size", "32",
        "--head-width", "16", "--head-out", "8", "--backbone-width", "4", "--image-size", "8"]
TIMING = {"images_per_s", "epoch_seconds"}


def _metrics(run_dir) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]



class CtrlC(Hook):
    def __init__(self, at_step: int) -> None:
        self.at_step = at_step

    def on_step_end(self, state):
        if state.global_step == self.at_step:
            os.kill(os.getpid(), signal.SIGINT)  # the real signal path: handled after this step


@pytest.mark.parametrize("method", ["simclr", "byol"])
def test_resume_after_kill_reproduces_metrics_exactly(tmp_path, method):
    argv = [*TINY, "--epochs", "2", "--method", method, "--out", str(tmp_path)]
    assert main([*argv, "--run-name", "full"]) == 0
    # killed during epoch 2 (3 steps per epoch): only the epoch-1 checkpoint exists
    with pytest.raises(RuntimeError, match="simulated kill"):
        main([*argv, "--run-name", "cut"], hooks=[Crash(at_step=4)])
    assert int(load_checkpoint(tmp_path / "cut" / "checkpoint.pt")["epoch"]) == 1
    assert len(_metrics(tmp_path / "cut")) == 1
    assert main(["--resume", str(tmp_path / "cut"), "--quiet"]) == 0
    full, resumed = _metrics(tmp_path / "full"), _metrics(tmp_path / "cut")
    assert len(full) == 2 and full == resumed
    # and the weights are identical
    a = load_checkpoint(tmp_path / "full" / "checkpoint.pt")["model"]
    b = load_checkpoint(tmp_path / "cut" / "checkpoint.pt")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_ctrl_c_mid_epoch_saves_and_resumes_exactly(tmp_path, capsys):
    argv = [*TINY, "--epochs", "2", "--method", "simsiam", "--out", str(tmp_path)]
    assert main([*argv, "--run-name", "full"]) == 0
    assert main([*argv, "--run-name", "cut"], hooks=[CtrlC(at_step=2)]) == 130
    assert "--resume" in capsys.readouterr().err
    ck = load_checkpoint(tmp_path / "cut" / "checkpoint.pt")
    assert (int(ck["epoch"]), int(ck["step"])) == (0, 2)  # mid-epoch position
    assert main(["--resume", str(tmp_path / "cut"), "--quiet"]) == 0
    assert _metrics(tmp_path / "full") == _metrics(tmp_path / "cut")


class Events(Hook):
    """Records the trainer's hook events in order, with the epoch and the epoch's first step."""

    def __init__(self) -> None:
        self.log: list[tuple[str, int, int]] = []

    def on_fit_start(self, state):
        self.log.append(("fit_start", state.epoch, state.first_step))

    def on_epoch_start(self, state):
        self.log.append(("epoch_start", state.epoch, state.first_step))

    def on_step_end(self, state):
        self.log.append(("step", state.epoch, state.step))

    def on_epoch_end(self, state):
        assert state.metrics is state.history[-1] and "loss" in state.metrics  # the record, already in history
        self.log.append(("epoch_end", state.epoch, state.first_step))

    def on_interrupt(self, state):
        self.log.append(("interrupt", state.epoch, state.step))

    def on_fit_end(self, state):
        self.log.append(("fit_end", state.epoch, state.first_step))


def test_hook_events_across_ctrl_c_and_resume(tmp_path):
    """The events a hook sees, with the built-in progress bar on (no --quiet): a stop after step 2 of
    epoch 1 (3 steps per epoch), then a resume that starts at step 2; only the user's hooks (and scale.run's) are
    saved."""
    argv = [a for a in TINY if a != "--quiet"] + ["--epochs", "2", "--out", str(tmp_path), "--run-name", "cut"]
    first, second = Events(), Events()
    assert main(argv, hooks=[CtrlC(at_step=2), first]) == 130
    assert first.log == [("fit_start", 0, 0), ("epoch_start", 0, 0), ("step", 0, 0), ("step", 0, 1),
                         ("interrupt", 0, 1)]
    # the user's hooks and the ones scale.run adds to them (its online kNN keeps the initial accuracy), no built-in
    assert set(load_checkpoint(tmp_path / "cut" / "checkpoint.pt")["hooks"]) == {"CtrlC#0", "Events#0", "OnlineKnn#0"}
    assert main(["--resume", str(tmp_path / "cut"), "--quiet"], hooks=[second]) == 0
    assert second.log == [("fit_start", 0, 2), ("epoch_start", 0, 2), ("step", 0, 2), ("epoch_end", 0, 2),
                          ("epoch_start", 1, 0), ("step", 1, 0), ("step", 1, 1), ("step", 1, 2),
                          ("epoch_end", 1, 0), ("fit_end", 1, 0)]


class Poison(Hook):
    def on_step_end(self, state):
        if state.global_step == 4:
            with torch.no_grad():
                state.model.projector.layers[0].weight.fill_(float("nan"))


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(tmp_path, capsys):
    code = main([*TINY, "--epochs", "3", "--out", str(tmp_path), "--run-name", "nan"], hooks=[Poison()])
    err = capsys.readouterr().err
    assert code == 3
    assert "epoch 2, step 2 of 3 (global step 5)" in err and "likely cause" in err and "learning rate" in err
    ck = load_checkpoint(tmp_path / "nan" / "checkpoint.pt")
    assert int(ck["epoch"]) == 1 and all(torch.isfinite(v).all() for v in ck["model"].values() if v.is_floating_point())
    summary = json.loads((tmp_path / "nan" / "summary.json").read_text())
    assert summary["status"] == "non-finite loss"


class Recorder(Hook):
    def __init__(self):
        self.seen, self.probes, self.epochs = [], [], []

    def on_step_end(self, state):
        assert state.x.shape[0] == 2 * 32 and state.z.shape == (64, state.model.backbone.out_dim)
        assert state.h.shape == (64, 8) and not state.h.requires_grad
        # the objective closure reproduces the step's loss from h (simclr: no stop-gradient data)
        h = state.h.clone().requires_grad_(True)
        value = state.objective(h)(h)
        torch.testing.assert_close(value, state.loss, rtol=1e-5, atol=1e-6)
        self.seen.append(state.global_step)
        self.probes.append(state.probe_x.clone())

    def on_epoch_end(self, state):
        _z, h = state.embed(state.probe_x)
        state.metrics["probe_h_norm"] = float(so.safe_norm(h).mean())
        self.epochs.append(state.epoch)


def test_hooks_see_state_and_add_metrics(tmp_path):
    rec = Recorder()
    assert main([*TINY, "--epochs", "2", "--out", str(tmp_path), "--run-name", "hooks"], hooks=[rec]) == 0
    assert rec.seen == [1, 2, 3, 4, 5, 6] and rec.epochs == [0, 1]
    assert all(torch.equal(p, rec.probes[0]) for p in rec.probes)  # fixed probe batch
    rows = _metrics(tmp_path / "hooks")
    assert all("probe_h_norm" in r for r in rows)
    for name in ("config.json", "summary.json", "report.md", "curves.png", "checkpoint.pt"):
        assert (tmp_path / "hooks" / name).is_file(), name
    summary = json.loads((tmp_path / "hooks" / "summary.json").read_text())
    assert set(summary["class_probe"]["accuracy"]) == {"z", "h"} and summary["versions"]["torch"] == torch.__version__
    typed = RunSummary.from_dict(summary)  # the typed summary the report builders read, and back
    assert typed.geometry is not None and typed.rotation_probes is not None and typed.to_dict() == summary


@pytest.mark.parametrize(
    ("method", "extra"),
    [("vicreg", []), ("barlow", []), ("simsiam", ["--init", "collapsed", "--head", "swish2"]),
     ("simclr", ["--backbone", "vit_tiny", "--backbone-width", "12", "--optimizer", "lars", "--head", "linear"])],
)
def test_methods_run(tmp_path, method, extra, capsys):
    assert main([*TINY, "--epochs", "1", "--method", method, *extra, "--out", str(tmp_path), "--run-name", "m"]) == 0
    row = _metrics(tmp_path / "m")[0]
    assert torch.isfinite(torch.tensor(row["loss"]))
    assert "linear probe" in capsys.readouterr().out


def test_the_training_layout_avoids_onednns_small_strided_1x1_convolutions():
    """``memory_format_for``: channels_last on a CPU only without a strided 1x1 convolution of fewer than
    ``ONEDNN_MIN_CHANNELS`` input channels (oneDNN's channels_last kernel for it corrupted the heap: a ResNet-18 of
    width 4 or 6, whose first shortcut is ``Conv2d(w, 2w, 1, stride=2)``); width 8 and up, an unstrided 1x1
    convolution, and a CUDA run keep channels_last. Control: width 8, the first not caught, stays channels_last."""
    from torch import nn

    from scale.engine.backbones import build_backbone
    from scale.engine.model import ONEDNN_MIN_CHANNELS, memory_format_for

    cpu = torch.device("cpu")
    for w in (2, 4, 6):
        assert memory_format_for(build_backbone("resnet18", 8, w), cpu) == torch.contiguous_format
    assert ONEDNN_MIN_CHANNELS == 8
    for w in (8, 16, 64):
        assert memory_format_for(build_backbone("resnet18", 8, w), cpu) == torch.channels_last
    assert memory_format_for(nn.Conv2d(4, 8, 1), cpu) == torch.channels_last  # unstrided: not the faulty kernel
    assert memory_format_for(build_backbone("resnet18", 8, 4), torch.device("cuda")) == torch.channels_last
