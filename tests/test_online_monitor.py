"""The online monitor of ``python -m scale.run`` (``scale.monitor.online.OnlineKnn``): kNN accuracy of z and the loss
against chance in every epoch's record, line and curves; and a run with it gives the weights and losses of a run
without it, bitwise."""

from __future__ import annotations

import json

import torch

from scale.engine.config import TrainConfig
from scale.engine.data import load_synthetic
from scale.engine.train import Trainer
from scale.geometry.probes import knn_correct
from scale.monitor.online import OnlineKnn
from scale.run import main
from scale.runs.premise import chance_loss

TINY = ["synthetic", "--train-subset", "96", "--batch-size", "32", "--probe-size", "32", "--head-width", "16",
        "--head-out", "8", "--backbone-width", "4", "--image-size", "8", "--epochs", "2"]
CFG = dict(dataset="synthetic", method="simclr", head="gelu2", head_width=16, head_out=8, epochs=2, batch_size=32,
           image_size=8, probe_size=32, backbone_width=4, train_subset=96)


def test_every_epoch_records_and_prints_knn_and_chance(tmp_path, capsys):
    assert main([*TINY, "--out", str(tmp_path), "--run-name", "r"]) == 0
    rows = [json.loads(s) for s in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(0 <= r["knn_z"] <= 100 for r in rows)
    assert 0 <= rows[0]["knn_z_initial"] <= 100 and "knn_z_initial" not in rows[1]
    chance = chance_loss(TrainConfig(**{**CFG, "method": "simclr"}))
    assert all(r["loss_chance"] == chance for r in rows)
    lines = [s for s in capsys.readouterr().out.splitlines() if s.startswith("epoch ") and "  loss " in s]
    assert len(lines) == 2 and all(f"(chance {chance:.4f})" in s and "knn z " in s for s in lines)
    assert f"knn z {rows[1]['knn_z']:.1f} %" in lines[1]


def test_knn_is_the_probe_protocol_on_the_subset():
    data = load_synthetic()
    t = Trainer(TrainConfig(**CFG), data, torch.device("cpu"), log=None)
    hook = OnlineKnn(data, bank=64, held_out=40)
    got = hook.accuracy(t.state)
    norm = t.augment.normalize
    with torch.no_grad():
        bank = t.state.embed(norm(data.train_x[:64]))[0]
        test = t.state.embed(norm(data.test_x[:40]))[0]
    want = 100 * float(knn_correct(bank, data.train_y[:64], test, data.test_y[:40], data.classes).double().mean())
    assert got == want


def fit(with_monitor: bool):
    data = load_synthetic()
    hooks = [OnlineKnn(data)] if with_monitor else []
    t = Trainer(TrainConfig(**CFG), data, torch.device("cpu"), hooks=hooks, log=None)
    state = t.fit()
    return [r["loss"] for r in state.history], t.model.state_dict(), state.history


def test_the_monitor_changes_neither_weights_nor_losses():
    losses_on, weights_on, history = fit(True)
    losses_off, weights_off, _ = fit(False)
    assert all("knn_z" in r for r in history)  # it ran
    assert losses_on == losses_off
    assert weights_on.keys() == weights_off.keys()
    assert all(torch.equal(weights_on[k], weights_off[k]) for k in weights_on)  # BatchNorm's statistics too


def test_unlabelled_or_single_class_data_has_no_online_knn():
    data = load_synthetic()
    assert OnlineKnn.applies(data)
    data.labelled = False
    assert not OnlineKnn.applies(data)
