"""The monitor of a model trained elsewhere (``scale.monitor``): lightly's own SimCLR in a Lightning module with the
callback, a solo-learn-style module, a bare loop with the optimiser hook; its records against ``scale.EffectiveHessian``
on the saved state; bad input in one line; the records file refused through a link, nothing lost."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from _torchvision_cpu import install
from scipy.sparse.linalg import eigsh
from torch import nn

from scale import EffectiveHessian
from scale.engine.disk import NotOurs
from scale.monitor import Monitor, MonitorInputError

install()  # before lightly imports torchvision (tests/_torchvision_cpu.py says why)
pl = pytest.importorskip("pytorch_lightning")
lightly_loss = pytest.importorskip("lightly.loss")
lightly_heads = pytest.importorskip("lightly.models.modules")
from scale.monitor.lightning import GeometryCallback  # noqa: E402  (after the extra's check)

D_IN, D, K, ROWS = 32, 16, 8, 128
AGREE = 1e-6  # |lambda(monitor) - lambda(eigsh)| / scale: both converge to 1e-10 of the scale; this leaves room


def data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(4, D_IN, generator=g) * 2
    y = torch.arange(ROWS) % 4
    return centres[y] + 0.5 * torch.randn(ROWS, D_IN, generator=g), y


def views(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x + 0.1 * torch.randn_like(x), x + 0.1 * torch.randn_like(x)


def backbone() -> nn.Module:
    return nn.Sequential(nn.Linear(D_IN, 32), nn.ReLU(), nn.Linear(32, D))


class LightlySimCLR(pl.LightningModule):
    """lightly's SimCLR as its examples write it: ``backbone``, ``projection_head``, ``criterion``."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = backbone()
        self.projection_head = lightly_heads.SimCLRProjectionHead(D, 32, K)
        self.criterion = lightly_loss.NTXentLoss(temperature=0.5)

    def training_step(self, batch, batch_idx):
        x1, x2 = views(batch[0])
        h = self.projection_head(self.backbone(torch.cat([x1, x2])))
        return self.criterion(h[: len(x1)], h[len(x1):])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def fit(module: pl.LightningModule, callback: GeometryCallback, logdir) -> pl.Trainer:
    x, _ = data()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=32)
    trainer = pl.Trainer(max_epochs=2, callbacks=[callback], enable_progress_bar=False, enable_checkpointing=False,
                         enable_model_summary=False, logger=pl.loggers.CSVLogger(logdir), accelerator="cpu")
    trainer.fit(module, loader)
    return trainer


def probe_pairs() -> tuple[torch.Tensor, torch.Tensor]:
    x, _ = data(1)
    torch.manual_seed(1)
    return views(x[:12])


def test_lightly_simclr_callback_records_agree_with_effective_hessian_on_the_saved_state(tmp_path):
    torch.manual_seed(0)
    x, y = data(2)
    orbits = x[:6, None] + 0.2 * torch.linspace(-1, 1, 5)[None, :, None]
    cb = GeometryCallback(probe_pairs(), every=4, budget=1.0, labelled=(x[:96], y[:96], x[96:], y[96:]),
                          orbits=orbits)
    model = LightlySimCLR()
    fit(model, cb, tmp_path / "logs")
    recs = cb.monitor.records
    assert [r["step"] for r in recs] == [4, 8]  # 2 epochs of 4 batches, every 4 steps; the last is the trained state
    for r in recs:
        assert r["converged_min"] and r["converged_max"] and r["path"] == "matrix-free"
        assert 0 <= r["knn_z"] <= 100 and r["knn_input"] > 50  # four separated clusters
        assert r["compression"] > 0 and r["compression_control"] > 0
    # the CSV logger got them
    logged = (tmp_path / "logs" / "lightning_logs" / "version_0" / "metrics.csv").read_text()
    assert "geometry/lambda_min" in logged and "geometry/knn_z" in logged

    # the same state, saved and loaded into fresh modules, measured by scale.EffectiveHessian and SciPy's eigsh
    torch.save(model.state_dict(), tmp_path / "state.pt")
    fresh = LightlySimCLR()
    fresh.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
    fresh.eval()
    x1, x2 = probe_pairs()
    with torch.no_grad():
        z = fresh.backbone(torch.cat([x1, x2]))
    m = len(x1)
    E = EffectiveHessian(z, fresh.projection_head, lambda H: fresh.criterion(H[:m], H[m:]), dtype=torch.float64)
    lo = float(eigsh(E.to_scipy(), k=1, which="SA", tol=1e-12)[0][0])
    hi = float(eigsh(E.to_scipy(), k=1, which="LA", tol=1e-12)[0][0])
    last = recs[-1]
    scale = max(abs(lo), abs(hi))
    assert abs(last["lambda_min"] - lo) <= AGREE * scale, (last["lambda_min"], lo)
    assert abs(last["lambda_max"] - hi) <= AGREE * scale, (last["lambda_max"], hi)
    assert last["loss"] == pytest.approx(E.value, rel=1e-12)
    # negative control: the first record (an earlier state) is not the saved state's
    assert abs(recs[0]["lambda_max"] - hi) > AGREE * scale


class SoloStyle(pl.LightningModule):
    """solo-learn's shape: ``backbone`` and ``projector`` attributes, the loss a function of the method."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = backbone()
        self.projector = nn.Sequential(nn.Linear(D, 32), nn.GELU(), nn.Linear(32, K))

    def training_step(self, batch, batch_idx):
        x1, x2 = views(batch[0])
        h = self.projector(self.backbone(torch.cat([x1, x2])))
        return lightly_loss.NTXentLoss()(h[: len(x1)], h[len(x1):])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def test_solo_learn_style_module_is_found_by_its_attributes(tmp_path):
    torch.manual_seed(0)
    cb = GeometryCallback(probe_pairs(), loss=lightly_loss.NTXentLoss(), every=8, budget=1.0)
    model = SoloStyle()
    fit(model, cb, tmp_path)
    assert cb.monitor.head is model.projector and cb.monitor.backbone is model.backbone
    (rec,) = cb.monitor.records
    assert rec["step"] == 8 and rec["converged_min"] and rec["M_over_H"] > 0  # GELU: M is not zero


def test_a_module_without_the_parts_is_told_in_one_line(tmp_path):
    class Bare(SoloStyle):
        def __init__(self) -> None:
            super().__init__()
            del self.projector
            self.mlp = nn.Linear(D, K)

    with pytest.raises(MonitorInputError) as err:
        fit(Bare(), GeometryCallback(probe_pairs(), loss=lightly_loss.NTXentLoss()), tmp_path)
    assert "no head attribute (projection_head, projector, head)" in str(err.value) and "\n" not in str(err.value)


# ----------------------------------------------------------------------------- a bare loop with the optimiser hook


def bare_loop(monitor: bool, steps: int = 6):
    probe = probe_pairs()  # drawn in both runs (it seeds the global RNG itself)
    torch.manual_seed(0)
    bb, head = backbone(), nn.Sequential(nn.Linear(D, 32), nn.BatchNorm1d(32), nn.Tanh(), nn.Linear(32, K))
    loss_fn = lightly_loss.NTXentLoss()
    opt = torch.optim.SGD([*bb.parameters(), *head.parameters()], lr=0.05)
    x, y = data()
    mon = None
    if monitor:
        mon = Monitor(bb, head, loss_fn, probe, every=3, budget=1.0, labelled=(x[:64], y[:64], x[64:], y[64:]))
        mon.attach(opt)
    losses = []
    for i in range(steps):
        x1, x2 = views(x[(i % 4) * 32 : (i % 4 + 1) * 32])  # the loop's own randomness
        h = head(bb(torch.cat([x1, x2])))
        loss = loss_fn(h[:32], h[32:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    state = {**bb.state_dict(), **{f"h.{k}": v.clone() for k, v in head.state_dict().items()}}
    return losses, state, mon, (bb, head, loss_fn, probe)


def eigsh_ends(bb: nn.Module, head: nn.Module, loss_fn, probe) -> tuple[float, float]:
    """lambda_min and lambda_max of H_eff at the modules' state: scale.EffectiveHessian and SciPy's eigsh."""
    x1, x2 = probe
    m = len(x1)
    with torch.no_grad():
        z = bb.eval()(torch.cat([x1, x2]))
    E = EffectiveHessian(z, head.eval(), lambda H: loss_fn(H[:m], H[m:]), dtype=torch.float64)
    return (float(eigsh(E.to_scipy(), k=1, which="SA", tol=1e-12)[0][0]),
            float(eigsh(E.to_scipy(), k=1, which="LA", tol=1e-12)[0][0]))


def test_bare_loop_hook_measures_and_changes_nothing_of_the_training():
    losses_on, state_on, mon, parts = bare_loop(True)
    losses_off, state_off, _, _ = bare_loop(False)
    assert [r["step"] for r in mon.records] == [0, 3]
    assert all(r["M_over_H"] > 0 and r["knn_z"] >= 0 for r in mon.records)
    assert losses_on == losses_off  # bitwise: the monitor's forks of the RNG and eval mode leave training alone
    assert state_on.keys() == state_off.keys()
    assert all(torch.equal(state_on[k], state_off[k]) for k in state_on)  # BatchNorm's running statistics too
    # the trained state's record against scale.EffectiveHessian and eigsh on the same modules
    last = mon.measure(step=6)
    lo, hi = eigsh_ends(*parts)
    scale = max(abs(lo), abs(hi))
    assert abs(last["lambda_min"] - lo) <= AGREE * scale and abs(last["lambda_max"] - hi) <= AGREE * scale


def test_budget_skips_and_counts():
    bb, head = backbone(), nn.Linear(D, K)
    mon = Monitor(bb, head, lightly_loss.NTXentLoss(), probe_pairs(), every=1, budget=1e-9)
    assert mon.step(0) is not None  # the first measurement always runs
    assert mon.step(1) is None and mon.skipped == 1


# ----------------------------------------------------------------------------- bad input: one clear line


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert text and "\n" not in text
    return text


def test_head_output_that_does_not_fit_the_loss():
    w = torch.ones(K + 3)
    bad_loss = lambda a, b: ((a - b) * w).sum()  # noqa: E731  a loss written for k = K + 3
    mon = Monitor(backbone(), nn.Linear(D, K), bad_loss, probe_pairs(), budget=1.0)
    with pytest.raises(MonitorInputError) as err:
        mon.measure()
    assert "the head's output (24, 8)" in one_line(err) and "does not fit the loss" in str(err.value)


def test_probe_batch_without_pairs():
    x1, x2 = probe_pairs()
    for probe in (x1, (x1,), (x1, x2, x1), (x1, x2[:5])):
        with pytest.raises(MonitorInputError) as err:
            Monitor(backbone(), nn.Linear(D, K), lightly_loss.NTXentLoss(), probe)
        assert "pair" in one_line(err) or "one shape" in str(err.value)


def test_model_in_eval_mode():
    bb, head = backbone(), nn.Linear(D, K)
    mon = Monitor(bb, head, lightly_loss.NTXentLoss(), probe_pairs())
    bb.eval()
    with pytest.raises(MonitorInputError) as err:
        mon.step(0)
    assert "backbone is in eval mode" in one_line(err) and "model.train()" in str(err.value)
    assert mon.records == []


# ----------------------------------------------------------------------------- the records file


def test_records_file_is_the_records(tmp_path):
    mon = Monitor(backbone(), nn.Linear(D, K), lightly_loss.NTXentLoss(), probe_pairs(), path=tmp_path / "m.jsonl")
    mon.measure(0)
    mon.measure(1)
    lines = (tmp_path / "m.jsonl").read_text().splitlines()
    assert [json.loads(s) for s in lines] == json.loads(json.dumps(mon.records))


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_records_file_through_a_link_is_refused_and_nothing_is_lost(tmp_path, link):
    target = tmp_path / "precious.txt"
    target.write_text("not the monitor's\n")
    path = tmp_path / "m.jsonl"
    (os.symlink if link == "symlink" else os.link)(target, path)
    mon = Monitor(backbone(), nn.Linear(D, K), lightly_loss.NTXentLoss(), probe_pairs(), path=path)
    with pytest.raises(NotOurs):
        mon.measure(0)
    assert target.read_text() == "not the monitor's\n"
    assert len(mon.records) == 1 and np.isfinite(mon.records[0]["lambda_max"])  # kept in memory
