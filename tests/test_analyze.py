"""``scale.analyze``: the paper's measurements on a model defined here (a module file the test writes), on a
digits run, and its bad-input paths (one line, exit 2, nothing written)."""

from __future__ import annotations

import json
import math
import re
import textwrap
from pathlib import Path

import pytest
import torch

from scale import analyze
from scale.analysis import measure as analysis_measure
from scale.engine.config import TrainConfig
from scale.engine.data import load_synthetic
from scale.engine.model import SSLModel
from scale.engine.train import Trainer

MODELS = textwrap.dedent('''
    import torch
    from torch import nn

    class TinyBackbone(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 6, 3, padding=1)
            self.pool = nn.AdaptiveAvgPool2d(2)

        def forward(self, x):
            return self.pool(torch.relu(self.conv(x))).flatten(1)  # (B, 24)

    def backbone():
        return TinyBackbone()

    def head():
        return nn.Sequential(nn.Linear(24, 32), nn.GELU(), nn.Linear(32, 8))
''')
QUICK = ["--hessian-images", "8", "--lanczos-iter", "30", "--probe-images", "32", "--orbits", "3x2"]


@pytest.fixture()
def models(tmp_path, monkeypatch):
    (tmp_path / "my_models.py").write_text(MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    import my_models

    importlib.reload(my_models)
    return my_models


def test_analyze_model_on_modules_defined_here(models):
    torch.manual_seed(0)
    backbone, head = models.backbone(), models.head()
    settings = analyze.AnalysisSettings(hessian_images=8, lanczos_iter=40, orbits="3x2", probe_images=32)
    res = analyze.analyze_model(backbone, head, load_synthetic(image_size=16), settings=settings)
    c = res["curvature"]
    assert (c["n"], c["d"], c["k"]) == (16, 24, 8)
    s = c["split_at_lambda_min"]
    # v^T H v from the Lanczos of H; v^T G v and v^T M v from the separate G and M operators: H = G + M
    assert math.isclose(s["vGv"] + s["vMv"], s["vHv"], rel_tol=1e-8, abs_tol=1e-10 * c["H"]["scale"])
    assert c["M"]["lambda_max"] > 0  # a GELU head has curvature of its own (M != 0)
    assert res["verdict"]["verdict"] in ("compressor", "expander", "neither")
    ratio = res["verdict"]["collapse_ratio"]
    assert ratio["low"] <= ratio["value"] <= ratio["high"] and ratio["n"] == 6
    assert set(res["probes"]["rotation"]) == {"z", "h"}
    assert res["geometry"]["settings"]["n_orbits"] == 6


def _analyze_own_checkpoint(models, tmp_path, *flags: str) -> tuple[int, Path]:
    """``python -m scale.analyze`` on a state_dict of the test's own modules, given as module:callable."""
    model = torch.nn.ModuleDict({"backbone": models.backbone(), "projector": models.head()})
    ckpt = tmp_path / "mine.pt"
    torch.save(model.state_dict(), ckpt)
    out = tmp_path / "report"
    return analyze.main([str(ckpt), "--backbone", "my_models:backbone", "--head", "my_models:head", "--data",
                         "synthetic", "--out", str(out), *flags]), out


def test_cli_on_a_checkpoint_with_module_callables(models, tmp_path, capsys):
    code, out = _analyze_own_checkpoint(models, tmp_path, *QUICK)
    assert code == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert re.search(r"^verdict( \(of a network that did not learn\))?: ", printed, re.M) and "lambda_min" in printed
    text = (out / "report.md").read_text()
    assert "Verdict" in text and "H_eff = G + M" in text and (out / "spectrum.png").is_file()
    assert (out / "orbits.png").is_file() and (out / "analysis.json").is_file()


def test_cli_on_a_digits_run(tmp_path, capsys):
    run_dir = tmp_path / "run"
    cfg = TrainConfig(dataset="digits", method="simclr", head="gelu2", backbone_width=4, head_width=32, head_out=16,
                      epochs=1, batch_size=64, image_size=16, train_subset=128, probe_size=32, augment="e3")
    from scale.engine.data import load_digits

    Trainer(cfg, load_digits(16), torch.device("cpu"), run_dir=run_dir, log=None).fit()
    assert analyze.main([str(run_dir), *QUICK]) == 0, capsys.readouterr().err
    assert (run_dir / "analysis" / "report.md").is_file()


def _one_line_exit_2(capsys, argv, tmp_path, needle):
    out = tmp_path / "never"
    assert analyze.main([*argv, "--out", str(out), *QUICK]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not out.exists()


def test_a_module_path_that_does_not_import(tmp_path, capsys):
    ckpt = tmp_path / "x.pt"
    torch.save({}, ckpt)
    _one_line_exit_2(capsys, [str(ckpt), "--backbone", "no_such_pkg.nets:backbone", "--head", "gelu2"], tmp_path,
                     "no module named 'no_such_pkg'")


def test_a_checkpoint_that_does_not_fit_the_modules(models, tmp_path, capsys):
    ckpt = tmp_path / "other.pt"
    torch.save({"backbone.conv.weight": torch.zeros(6, 3, 5, 5), "projector.0.weight": torch.zeros(1)}, ckpt)
    _one_line_exit_2(capsys, [str(ckpt), "--backbone", "my_models:backbone", "--head", "my_models:head",
                              "--data", "synthetic"], tmp_path, "does not match")


def test_a_checkpoint_without_modules_and_a_bad_backbone_name(tmp_path, capsys):
    ckpt = tmp_path / "x.pt"
    torch.save({}, ckpt)
    _one_line_exit_2(capsys, [str(ckpt)], tmp_path, "--backbone and --head are needed")
    _one_line_exit_2(capsys, [str(ckpt), "--backbone", "resnet99", "--head", "gelu2"], tmp_path, "valid: resnet18")


def test_trained_state_is_untouched(models):
    """The analysis measures; it never changes the weights it is given (no collapse scaling, no BN update)."""
    backbone, head = models.backbone(), models.head()
    before = {k: v.clone() for k, v in head.state_dict().items()}
    cfg = TrainConfig(dataset="synthetic", init="collapsed", image_size=16)
    analyze.analyze_model(backbone, head, load_synthetic(image_size=16), cfg,
                          settings=analyze.AnalysisSettings(hessian_images=4, lanczos_iter=10, orbits="2x1",
                                                            probes=False))
    assert all(torch.equal(v, before[k]) for k, v in head.state_dict().items())


def test_cli_on_a_checkpoint_with_project_names(tmp_path, capsys):
    """Names instead of module paths: resnet18 + a gelu2 head, from a plain state_dict with a predictor the
    analysis of simclr leaves out."""
    cfg = TrainConfig(method="simsiam", backbone="resnet18", backbone_width=4, image_size=16, head="gelu2",
                      head_width=16, head_out=8, pred_width=8)
    from scale.engine.model import SSLModel

    ckpt = tmp_path / "names.pt"
    torch.save({"model": SSLModel(cfg).state_dict()}, ckpt)
    argv = [str(ckpt), "--backbone", "resnet18", "--backbone-width", "4", "--head", "gelu2", "--head-width", "16",
            "--head-out", "8", "--data", "synthetic", "--image-size", "16", "--no-probes", *QUICK]
    assert analyze.main(argv) == 0, capsys.readouterr().err
    assert (tmp_path / "names-analysis" / "report.md").is_file()
    # the same file against a head of another width: one line naming the shapes, exit 2, nothing written
    _one_line_exit_2(capsys, [*argv[:8], "32", *argv[9:]], tmp_path, "shape mismatches")


class PooledPixels(torch.nn.Module):
    """A fixed 'backbone': the pixels, pooled 4 x 4 (no weights, deterministic)."""

    def forward(self, x):
        return torch.nn.functional.avg_pool2d(x, 4).flatten(1)  # (B, 3 * (S/4)^2)


RATIO_TOL = 1e-5  # float32 head outputs against float64 metrics
ENDS = ("value", "low", "high")  # an Estimate's value and interval


def test_analyze_orbits_on_own_images_an_isometry_and_a_bias_dominated_head():
    """E6's knobs on images of one's own (no labels): ``steps`` values across the family's range, kappa along
    them, the head on the raw z. An orthogonal head is an isometry of the sphere (collapse ratio 1, curvature
    ratio 1, alignment gain 0); a head that adds a vector far larger than z pulls every normalised orbit together
    ("compressor") — the negative control that shows the verdict can move.

    The verdict "neither" is asserted where float32 computes the isometry exactly on every processor and BLAS: a
    signed identity (each output one input, negated or not), whose spreads, curvatures and alignments are z's bit
    for bit, so every ratio is exactly 1 and its interval [1, 1]. A random rotation's ratios are 1 only to float32
    round-off, and so is its interval (asserted within ``RATIO_TOL``); the verdict of an interval that narrow is the
    round-off's, not the head's (an AMD EPYC with MKL: [1 - 7e-8, 1 + 2.7e-7]; the same under ``MKL_CBWR=COMPATIBLE``,
    another QR of the same matrix: [1 - 1.4e-7, 1 + 3.5e-8]), so it is not asserted there."""
    images = load_synthetic(n_test=6, image_size=16).test_x[:6].float() / 255.0
    d = 3 * 4 * 4
    ortho = torch.nn.Linear(d, d, bias=False)
    flip = torch.nn.Linear(d, d, bias=False)
    shift = torch.nn.Linear(d, d)
    with torch.no_grad():
        ortho.weight.copy_(torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(1)))[0])
        flip.weight.copy_(torch.diag(torch.where(torch.arange(d) % 3 == 0, -1.0, 1.0)))
        shift.weight.copy_(torch.eye(d))
        shift.bias.fill_(50.0)  # |z| is O(1) on normalised pixels
    settings = analyze.AnalysisSettings(family="hue", steps=5, head_input="raw", probes=False, curvature=False)
    iso = analyze.analyze_orbits(PooledPixels(), ortho, images, (0.5,) * 3, (0.25,) * 3, settings)
    g = iso["geometry"]["settings"]
    assert g["values"] == g["sweep_values"] and len(g["values"]) == 5 and g["values"][0] == pytest.approx(-0.4)
    assert g["n_orbits"] == 6 and g["head_input"].startswith("raw z")
    assert all(len(v) == 6 for space in iso["per_orbit"].values() for v in space.values())
    v = iso["verdict"]
    for key in ("collapse_ratio", "curvature_ratio"):
        assert all(v[key][end] == pytest.approx(1.0, rel=RATIO_TOL) for end in ENDS), (key, v[key])
    assert max(abs(v["alignment_gain"][end]) for end in ENDS) < RATIO_TOL
    exact = analyze.analyze_orbits(PooledPixels(), flip, images, (0.5,) * 3, (0.25,) * 3, settings)["verdict"]
    assert exact["verdict"] == "neither"
    assert [exact[key][end] for key in ("collapse_ratio", "curvature_ratio") for end in ENDS] == [1.0] * 6
    assert [exact["alignment_gain"][end] for end in ENDS] == [0.0] * 3
    squeezed = analyze.analyze_orbits(PooledPixels(), shift, images, (0.5,) * 3, (0.25,) * 3, settings)
    assert squeezed["verdict"]["verdict"] == "compressor" and squeezed["verdict"]["collapse_ratio"]["low"] > 10
    # one class is not an orbit geometry (D_inter), and a trajectory needs three points for kappa
    with pytest.raises(analyze.AnalyzeError, match="at least 2 classes"):
        analyze.analyze_orbits(PooledPixels(), ortho, images, (0.5,) * 3, (0.25,) * 3, settings,
                               labels=torch.zeros(6, dtype=torch.long))
    with pytest.raises(analyze.AnalyzeError, match="--steps must be >= 3"):
        analyze.AnalysisSettings(steps=2)


def test_cli_without_curvature_on_e6_trajectories(models, tmp_path, capsys):
    code, out = _analyze_own_checkpoint(models, tmp_path, "--no-curvature", "--no-probes", "--family", "blur",
                                        "--steps", "4", "--head-input", "raw", "--orbits", "3x2")
    assert code == 0, capsys.readouterr().err
    assert "lambda_min" not in capsys.readouterr().out
    res = json.loads((out / "analysis.json").read_text())
    assert "curvature" not in res and "probes" not in res and res["verdict"]["verdict"] in ("compressor", "expander",
                                                                                             "neither")
    assert res["geometry"]["settings"]["points_per_orbit"] == 4 and res["geometry"]["settings"]["family"] == "blur"
    assert not (out / "spectrum.png").exists() and "H_eff not measured" in (out / "report.md").read_text()


def test_every_option_has_help():
    for action in analyze.build_parser()._actions:
        if action.dest != "help":
            assert action.help and len(action.help) > 10, action.dest


@pytest.mark.parametrize("method", ["vicreg", "simsiam"])
def test_curvature_of_a_grammar_head_in_closed_form_equals_the_matrix_free_route(models, monkeypatch, method):
    """A head of the grammar (``MLPHead``, BatchNorm in eval mode) takes the closed-form products; the same state
    through the autograd operators (the route of any other head) gives the same extremes, split and ratio."""
    from scale.engine.heads import build_head

    torch.manual_seed(0)
    backbone = models.backbone()
    head = build_head("gelu3", 24, 8, 16, batchnorm=True)
    pred = build_head("gelu2", 8, 8, 6) if method == "simsiam" else None
    cfg = TrainConfig(method=method, augment="e3", image_size=16)
    model = SSLModel(cfg, backbone=backbone, head=head, predictor=pred).eval()
    settings = analyze.AnalysisSettings(hessian_images=4, lanczos_iter=40)
    data = load_synthetic(image_size=16)
    closed = analyze.curvature(model, cfg, data, settings)
    monkeypatch.setattr(analysis_measure, "rowwise", lambda head, bn_mode: False)
    graphs = analyze.curvature(model, cfg, data, settings)
    assert "closed form" in closed["hvp_mode"] and "closed form" not in graphs["hvp_mode"]
    scale = graphs["H"]["scale"]
    for key in ("H", "G", "M"):
        for end in ("lambda_min", "lambda_max"):
            assert abs(closed[key][end] - graphs[key][end]) <= 1e-8 * scale, (key, end)
    for key in ("vHv", "vGv", "vMv"):
        assert abs(closed["split_at_lambda_min"][key] - graphs["split_at_lambda_min"][key]) <= 1e-8 * scale
    assert closed["M_over_H_frobenius"] == pytest.approx(graphs["M_over_H_frobenius"], rel=1e-8)
