"""scale.curvature.tracking inside tiny training runs: records against a direct dense computation on the same
probe, what is written (curvature.jsonl, hess_* in metrics.jsonl, summary, plot, report), the
Spearman summary, and exact reproduction of the curvature records after a kill and a resume.

Tolerances are relative to the spectral scale ``max |lambda|`` of the matrix at hand.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from _hooks import Crash

import mini.loss_hessians as loss_hessians
import scale.curvature.layout as layout
import scale.curvature.tracking as tracking
from scale.curvature.operators import EffectiveHessian
from scale.curvature.tracking import HessianTracker, probe_objective, spearman
from scale.engine.checkpoint import load_checkpoint, save_checkpoint
from scale.run import main

EIG_TOL = 1e-8  # lambda_min / lambda_max against eigvalsh of the dense H_eff, relative to its scale
TINY = ["synthetic", "--quiet", "--train-subset", "96", "--batch-size", "32", "--probe-size", "32",
        "--head-width", "16", "--head-out", "8", "--backbone-width", "4", "--image-size", "8", "--epochs", "2"]
VOLATILE = {"seconds", "hess_seconds", "images_per_s", "epoch_seconds"}  # clocks, not results


def _jsonl(path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k not in VOLATILE} for line in path.read_text().splitlines()]


class DenseChecked(HessianTracker):
    """The tracker, plus an independent reference at every measurement: the matrix-free operator of
    ``scale.curvature.operators`` made dense (N products) and ``eigvalsh``, on the same probe and state."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.reference: list[dict] = []

    def track(self, state):
        rec = super().track(state)
        z, h = state.embed(self.probe_x)
        target_h = None
        if state.target is not None:  # byol: the target network's embeddings, eval mode, then restored
            was = state.target.training
            target_h = state.target.eval()(self.probe_x)[1].double()
            state.target.train(was)
        loss = probe_objective(state.config.method, state.model, h.double(), target_h, state.config.temperature)
        E = EffectiveHessian(z, state.model.projector, loss, dtype=torch.float64)
        eig = torch.linalg.eigvalsh(E.H.dense()).numpy()
        norm_M = float(torch.linalg.eigvalsh(E.M.dense()).abs().max())
        self.reference.append({"eig": eig, "M_over_H": norm_M / abs(eig).max()})
        return rec


@pytest.mark.parametrize(("method", "path", "expected"), [
    ("simsiam", "auto", "blocks"), ("byol", "auto", "blocks"), ("simclr", "auto", "closed-form"),
    ("simclr", "factored", "factored"), ("vicreg", "matrix-free", "matrix-free"),
    ("simsiam", "block-lanczos", "block-lanczos"),
])
def test_records_match_dense_eigvalsh_and_are_written(tmp_path, method, path, expected):
    run_dir = tmp_path / "run"
    tracker = DenseChecked("epoch", probe_pairs=4, run_dir=run_dir, path=path)
    assert main([*TINY, "--method", method, "--out", str(tmp_path), "--run-name", "run"], hooks=[tracker]) == 0
    assert len(tracker.records) == 2 == len(tracker.reference)
    for rec, ref in zip(tracker.records, tracker.reference):
        eig = ref["eig"]
        scale = abs(eig).max()
        assert rec["path"] == expected and rec["N"] == len(eig) == 8 * 32 and rec["dtype"] == "float64"
        assert abs(rec["lambda_min"] - eig[0]) <= EIG_TOL * scale, (rec["lambda_min"], eig[0])
        assert abs(rec["lambda_max"] - eig[-1]) <= EIG_TOL * scale, (rec["lambda_max"], eig[-1])
        true_negative = int((eig < -rec["rel_floor"] * scale).sum())
        if expected == "blocks":  # the whole spectrum: the count is exact
            assert rec["n_negative"] == true_negative and rec["n_negative_is"] == "exact (blocks)"
        else:  # converged Ritz values: a lower bound
            assert rec["n_negative"] <= true_negative and "lower bound" in rec["n_negative_is"]
        if expected != "matrix-free":  # spectral norms: |M| exact from the blocks, or from per-block Lanczos ends
            assert abs(rec["M_over_H"] - ref["M_over_H"]) <= EIG_TOL * max(ref["M_over_H"], 1.0)
        else:
            assert "Hutchinson" in rec["M_over_H_is"] and rec["M_over_H"] >= 0
        pd = eig[0] > rec["rel_floor"] * scale
        assert (rec["condition"] is None) == (not pd)
        if expected == "block-lanczos":  # every end certified by its measured residual, |M|'s too
            assert rec["converged_min"] and rec["converged_max"] and rec["converged_M"]
    # what the run wrote: every record, the last of each epoch in metrics.jsonl, summary and plot
    assert _jsonl(run_dir / "curvature.jsonl") == [{k: v for k, v in r.items() if k not in VOLATILE}
                                                   for r in tracker.records]
    metrics = _jsonl(run_dir / "metrics.jsonl")
    assert [m["hess_lambda_min"] for m in metrics] == [r["lambda_min"] for r in tracker.records]
    assert [m["hess_n_negative"] for m in metrics] == [r["n_negative"] for r in tracker.records]
    summary = json.loads((run_dir / "curvature_summary.json").read_text())
    assert summary["n_measurements"] == 2 and summary["cadence"] == "epoch"
    assert (run_dir / "curvature.png").read_bytes()[:4] == b"\x89PNG"


def test_step_cadence_and_report_through_the_command_line(tmp_path):
    assert main([*TINY, "--method", "simclr", "--out", str(tmp_path), "--run-name", "r",
                 "--track-hessian-every", "2"]) == 0
    records = _jsonl(tmp_path / "r" / "curvature.jsonl")
    assert [r["step"] for r in records] == [2, 4, 6]  # 3 steps per epoch, 2 epochs
    assert all(r["probe_rows"] == 32 and r["path"] == "closed-form" for r in records)  # a tiny head: no J formed
    assert "Curvature of H_eff" in (tmp_path / "r" / "report.md").read_text()
    assert main([*TINY, "--out", str(tmp_path), "--run-name", "bad", "--track-hessian-every", "0"]) == 2


def test_spearman_summary():
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)  # 1 - 6 * 2 / (4 * 15)
    assert spearman([1, 2], [2, 1]) is None and spearman([1, 1, 1], [1, 2, 3]) is None

    def rec(z_std, condition, lambda_min=1.0):
        return {"z_std": z_std, "condition": condition, "lambda_min": lambda_min, "scale": 2.0, "probe_rows": 8}

    t = HessianTracker()
    t.records = [rec(0.1, 10.0), rec(0.2, 5.0), rec(0.3, 2.0), rec(0.4, None, -1.0)]
    s = t.summary()
    assert s["spearman_zstd_condition"] == pytest.approx(-1.0) and s["spearman_points"] == 3
    assert s["negative_lambda_min_fraction"] == pytest.approx(0.25)
    t.records = [rec(0.1 * i, None, -1.0) for i in range(1, 5)]  # never positive definite
    s = t.summary()
    assert s["spearman_zstd_condition"] is None and s["spearman_points"] == 0
    assert s["negative_lambda_min_fraction"] == 1.0
    with pytest.raises(ValueError, match="path"):
        HessianTracker(path="dense")



def test_kill_and_resume_reproduces_curvature_records_exactly(tmp_path):
    """simclr: the factored path, whose Lanczos starts cold (seeded) at every measurement; the checkpoint carries the
    probe batch and no Ritz vectors, so the resumed run's records are bitwise the same. A checkpoint of an earlier
    version carrying warm-start vectors resumes to the same records (they are not read). Negative control: the same
    resume with the checkpoint's probe batch nudged gives a different epoch-2 record, so the equality is the
    checkpoint's doing."""
    argv = [*TINY, "--method", "simclr", "--out", str(tmp_path), "--track-hessian-every"]
    assert main([*argv, "--run-name", "full"]) == 0
    with pytest.raises(RuntimeError, match="simulated kill"):  # during epoch 2 (3 steps per epoch)
        main([*argv, "--run-name", "cut"], hooks=[Crash(at_step=4)])
    ck = load_checkpoint(tmp_path / "cut" / "checkpoint.pt")
    hook = ck["hooks"]["HessianTracker#0"]
    assert int(ck["epoch"]) == 1 and "warm" not in hook and "warm_blocks" not in hook
    assert len(_jsonl(tmp_path / "cut" / "curvature.jsonl")) == 1
    for name, change in (("old", lambda h: h.update(warm=torch.randn(h["probe_x"].numel() // 4, 2))),
                         ("nudged", lambda h: h.update(probe_x=h["probe_x"] * (1 + 1e-3)))):
        shutil.copytree(tmp_path / "cut", tmp_path / name)
        edited = load_checkpoint(tmp_path / "cut" / "checkpoint.pt")
        change(edited["hooks"]["HessianTracker#0"])
        save_checkpoint(tmp_path / name / "checkpoint.pt", edited)
    for name in ("cut", "old", "nudged"):  # the hook list lines up with the checkpoint's: a crash hook, never firing
        assert main(["--resume", str(tmp_path / name), "--quiet", "--track-hessian-every"], hooks=[Crash(-1)]) == 0
    full, cut = _jsonl(tmp_path / "full" / "curvature.jsonl"), _jsonl(tmp_path / "cut" / "curvature.jsonl")
    assert len(full) == 2 and full == cut == _jsonl(tmp_path / "old" / "curvature.jsonl")
    assert _jsonl(tmp_path / "full" / "metrics.jsonl") == _jsonl(tmp_path / "cut" / "metrics.jsonl")
    nudged = _jsonl(tmp_path / "nudged" / "curvature.jsonl")
    assert nudged[0] == full[0] and nudged[1]["lambda_min"] != full[1]["lambda_min"]


def test_whole_operator_measurements_start_cold_whatever_they_are_handed():
    """The ``factored`` and ``closed-form`` paths start Lanczos cold (a start steered by the previous measurement's
    Ritz vectors can be fooled at an eigenvalue crossing: ``tests/test_lanczos.py``): handed a previous result, a
    measurement gives the cold record bit for bit. Control: the same previous result steers ``lanczos`` itself to a
    different product count, so the equality is the measurement's refusal."""
    from scale.curvature.blocks import factored_operator
    from scale.curvature.lanczos import lanczos
    from scale.curvature.tracking import measure
    from tests.test_blockwise import _head_and_loss

    z, head, loss = _head_and_loss(6, 16, seed=3)
    strip = {"seconds"}
    for path in ("factored", "closed-form"):
        cold, first = measure(z, head, loss, block_diagonal=False, path=path)
        again, _ = measure(z, head, loss, block_diagonal=False, path=path, warm=first)
        assert {k: v for k, v in again.items() if k not in strip} == {k: v for k, v in cold.items() if k not in strip}
    op = factored_operator(z, head, loss)[0]
    assert lanczos(op, k=1, max_iter=120, warm=first).n_products != first.n_products


def test_exact_paths_refuse_heads_that_couple_samples():
    """Train-mode BatchNorm couples the rows: the block and factored paths do not apply and say so;
    ``auto`` falls back to the matrix-free operator."""
    from scale.curvature.tracking import choose_path, measure
    from scale.engine import objectives as so
    from scale.engine.heads import build_head

    head = build_head("gelu2", 4, 3, 5, batchnorm=True).double()
    z = torch.randn(6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="row-wise"):
        measure(z, head, so.vicreg, block_diagonal=False, bn_mode="train", path="factored")
    assert choose_path(z, head, block_diagonal=True, bn_mode="train") == "matrix-free"
    assert choose_path(z, head, block_diagonal=True, bn_mode="eval") == "blocks"
    assert choose_path(z, head, block_diagonal=False, bn_mode="eval") == "closed-form"  # tiny: no J worth forming


def test_operator_route_picks_each_operator_in_its_regime():
    """``scale.curvature.closed_form.operator_route``: forming ``J`` pays at the digits head (memory-bound products read
    (n, k, d) twice, cheaper than three matmuls through 256-wide layers), not at the CIFAR head (2048 wide,
    where a product through the weights costs less than reading ``J``)."""
    from scale.curvature.closed_form import operator_route

    assert operator_route(32, 128, [256, 256], 128) == "factored"  # digits: 0.26 ms against 0.46 ms per product
    assert operator_route(32, 512, [2048, 2048], 2048) == "closed-form"  # CIFAR shape
    assert operator_route(32, 512, [2048, 2048], 2048, products=1) == "closed-form"  # J never pays back
    assert operator_route(8, 4, [], 3) == "closed-form"  # one linear layer: nothing to form, nothing to read


def test_block_route_picks_each_route_in_its_regime():
    """``scale.curvature.closed_form.block_route`` (SimSiam through head and predictor, composed chain): the digits
    head's blocks are cheap to form and solve (measured 1.06x-1.68x faster than a Lanczos per block at 8-32 rows), the
    paper's 2048-wide head's are not (a Lanczos per block 3.1x-4.8x faster at 8-32 rows); what ``auto`` takes."""
    from scale.curvature.closed_form import block_route
    from scale.curvature.tracking import choose_path
    from scale.engine.heads import build_head

    assert block_route(32, 128, [256, 256, 64, 128], 2) == "blocks"  # digits: swish3 256/256/128, predictor 64
    assert block_route(8, 512, [2048, 512, 2048], 1) == "block-lanczos"  # the paper's tracker network
    assert block_route(128, 128, [256, 256, 64, 128], 2) == "block-lanczos"  # many rows: forming them all costs more
    head, pred = build_head("swish2", 512, 2048, 2048, bias=False), build_head("swish2", 2048, 2048, 512, bias=False)
    z = torch.zeros(8, 512)
    assert choose_path(z, head, block_diagonal=True, bn_mode="eval", closed_form=True, predictor=pred) == \
        "block-lanczos"
    assert choose_path(z, head, block_diagonal=True, bn_mode="eval") == "blocks"  # no closed form: blocks


def test_block_lanczos_measurements_start_cold_whatever_they_are_handed():
    """A ``block-lanczos`` measurement starts every block cold (a start steered by the previous measurement's Ritz
    vectors can fool the let-go at an eigenvalue crossing: ``tests/test_lanczos.py``): handed the previous result, it
    gives the cold measurement's record bit for bit and hands the previous result back unchanged, and the tracker's
    checkpoint carries no per-block vectors. Control: the same previous result steers ``blockwise_lanczos`` itself
    (its record would differ), so the equality is the measurement's refusal, not a previous result without effect."""
    from scale.curvature.blockwise import blockwise_lanczos
    from scale.curvature.closed_form import closed_form_operator
    from scale.curvature.tracking import measure
    from tests.test_blockwise import _head_and_loss

    z, head, loss = _head_and_loss(6, 16, seed=3)
    cold, first = measure(z, head, loss, block_diagonal=True, path="block-lanczos")
    assert first is None
    previous = blockwise_lanczos(closed_form_operator(z, head, loss)[0], 6, goal="ends")
    again, handed = measure(z, head, loss, block_diagonal=True, path="block-lanczos", warm=previous)
    assert handed is previous
    strip = {"seconds"}
    assert {k: v for k, v in again.items() if k not in strip} == {k: v for k, v in cold.items() if k not in strip}
    steered = blockwise_lanczos(closed_form_operator(z, head, loss)[0], 6, goal="ends", warm=previous)
    assert steered.warm_started and steered.n_products != previous.n_products
    assert not {"warm", "warm_blocks"} & set(HessianTracker().state_dict())


@pytest.mark.parametrize("same_bits", [False, True], ids=["layouts-round-apart", "layouts-round-alike"])
def test_a_resume_multiplies_in_the_layouts_the_run_chose(tmp_path, monkeypatch, same_bits):
    _layout_resume(tmp_path, monkeypatch, same_bits)


def test_a_resume_that_ignores_the_checkpoints_layouts_fails_the_layout_test(tmp_path, monkeypatch):
    """The mutant the layout test guards against: a resume that drops the checkpoint's answers (``adopt`` doing
    nothing). Where both layouts give the same bits, no value can show it; the layouts the resume recorded do."""
    monkeypatch.setattr(layout, "adopt", lambda saved: None)
    with pytest.raises(AssertionError):
        _layout_resume(tmp_path, monkeypatch, same_bits=True)


def _layout_resume(tmp_path, monkeypatch, same_bits: bool) -> None:
    """simsiam on 32 probe rows, the per-block Lanczos route: the closed-form products ask which layout of the
    weights is faster (``scale.curvature.layout``), a per-process measurement. The checkpoint carries the answers, so
    a resumed process whose own measurement would choose the other layout (a scripted clock here; on a real machine
    two layouts of nearly equal speed) still multiplies as the run it continues did: it takes the checkpoint's
    layout, and its records are bitwise the uninterrupted run's. Negative control: the same resume with the answers
    dropped from the checkpoint measures anew and takes the other layout (read from what it recorded, not from its
    values: whether the two layouts round apart depends on the processor and the BLAS; on an Intel Xeon with MKL they
    gave the same bits). ``same_bits``: the copies never read (``TRANSPOSED_ROWS = 0``), so both layouts give the
    same bits, as on that Xeon: the test must hold there too."""
    monkeypatch.setattr(tracking, "block_route", lambda *a, **k: "block-lanczos")  # this tiny head would form blocks
    if same_bits:
        monkeypatch.setattr(loss_hessians, "TRANSPOSED_ROWS", 0)

    def clock(copies_win: bool):
        monkeypatch.setattr(layout, "_CHOICES", {})
        def seconds(chain, D, V):  # the scripted layout a second faster a product
            return 1.0 if all(L.WT is not None for L in chain.links) == copies_win else 2.0
        monkeypatch.setattr(layout, "_product_seconds", seconds)

    def took(name: str) -> list[bool]:  # the layouts a run's tracker recorded it multiplied in (True: the copies)
        saved = load_checkpoint(tmp_path / name / "checkpoint.pt")["hooks"]["HessianTracker#0"]["layouts"]
        return [choice for *_, choice in saved]

    argv = [*TINY, "--method", "simsiam", "--out", str(tmp_path), "--track-hessian-every"]
    clock(True)
    assert main([*argv, "--run-name", "full"]) == 0
    assert any(choice for *_, choice in layout.answers())  # the products asked, and took the copies
    clock(True)
    with pytest.raises(RuntimeError, match="simulated kill"):
        main([*argv, "--run-name", "cut"], hooks=[Crash(at_step=4)])
    ck = load_checkpoint(tmp_path / "cut" / "checkpoint.pt")
    assert ck["hooks"]["HessianTracker#0"]["layouts"]
    shutil.copytree(tmp_path / "cut", tmp_path / "fresh")
    ck["hooks"]["HessianTracker#0"]["layouts"] = []
    save_checkpoint(tmp_path / "fresh" / "checkpoint.pt", ck)
    for name in ("cut", "fresh"):
        clock(False)  # a new process whose own measurement prefers the views
        assert main(["--resume", str(tmp_path / name), "--quiet", "--track-hessian-every"], hooks=[Crash(-1)]) == 0
    full, cut = _jsonl(tmp_path / "full" / "curvature.jsonl"), _jsonl(tmp_path / "cut" / "curvature.jsonl")
    strip = [{k: v for k, v in r.items() if k not in VOLATILE} for r in full]
    assert len(full) == 2 and strip == [{k: v for k, v in r.items() if k not in VOLATILE} for r in cut]
    assert took("cut") and all(took("cut"))  # the checkpoint's answer: the copies, against its own clock
    assert took("fresh") and not any(took("fresh"))  # the control measured anew and took the views
    fresh = _jsonl(tmp_path / "fresh" / "curvature.jsonl")
    assert fresh[0] == cut[0]  # measured before the cut, in the first process
    assert abs(fresh[1]["lambda_min"] - full[1]["lambda_min"]) <= EIG_TOL * full[1]["scale"]
