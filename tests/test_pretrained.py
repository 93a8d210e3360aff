"""E6 pretrained-model analysis: official checkpoint layouts, loading, orbits, statistics, CLI.

Randomly initialised models with small widths (the layouts, depths and key names are the official
ones; widths are read from the file) are saved as the full checkpoints their authors publish, with
the same non-tensor entries (DINO's argparse arguments, VICReg's pickled optimizer filter function),
then loaded through the path users take and measured on a handful of small images. The measurement
is ``scale.analyze``'s; ``test_e6_numbers_are_the_definition`` recomputes them from the definition.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from mini.invariance import l2_normalize, orbit_spread, sweep_curvature
from scale import pretrained as e6
from scale.analyze import analyze_orbits
from scale.engine import checksums
from scale.engine.images import folder_images
from scale.engine.pretrained_models import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    MODELS,
    OFFICIAL_FILES,
    CheckpointError,
    CheckpointKeyError,
    WeightNormLinear,
    build_model,
    load_checkpoint,
    with_dims,
)
from scale.geometry.orbits import FAMILIES, digits_images, orbit_batch
from scale.geometry.verdict import ratio_estimate, verdict

ROOT = Path(__file__).resolve().parent.parent
SMALL = {  # widths only; every key of the official layout is present
    "dino_vits16": with_dims("dino_vits16", backbone=48, hidden=32, bottleneck=16, out=64),
    "dino_resnet50": with_dims("dino_resnet50", backbone=8, hidden=32, bottleneck=16, out=64),
    "vicreg_resnet50": with_dims("vicreg_resnet50", backbone=8, hidden=32, bottleneck=32),
    "barlow_resnet50": with_dims("barlow_resnet50", backbone=8, hidden=32, bottleneck=32),
}
FAST = ["--image-size", "32", "--trajectories", "2", "--steps", "3", "--batch-images", "2"]
MATCH_RTOL = 1e-5  # float32 forward passes of identical weights


def exclude_bias_and_norm(p):  # stands for VICReg's training-script function, pickled by reference
    return p.ndim == 1


exclude_bias_and_norm.__module__ = "__main__"


def official_container(name: str, teacher: torch.nn.Module, student: torch.nn.Module) -> dict:
    """The full checkpoint as its authors save it (entries, prefixes, non-tensor extras)."""
    sd = teacher.state_dict()
    if name.startswith("dino"):
        # DINO wraps the student in DDP always, the teacher only when it has BatchNorm (ResNet-50).
        teacher_prefix = "module." if name == "dino_resnet50" else ""
        return {
            "student": {f"module.{k}": v for k, v in student.state_dict().items()},
            "teacher": {f"{teacher_prefix}{k}": v for k, v in sd.items()},
            "optimizer": {"state": {}, "param_groups": [{"lr": 0.0, "weight_decay": 0.04, "params": [0, 1]}]},
            "epoch": 800,
            "args": argparse.Namespace(arch=name, out_dim=65536, norm_last_layer=False, global_crops_scale=(0.4, 1.0)),
            "dino_loss": {"center": torch.zeros(1, 64)},
        }
    filt = exclude_bias_and_norm if name == "vicreg_resnet50" else True
    group = {
        "lr": 0.0,
        "weight_decay": 1e-6,
        "weight_decay_filter": filt,
        "lars_adaptation_filter": filt,
        "params": [0],
    }
    return {
        "epoch": 1000,
        "model": {f"module.{k}": v for k, v in sd.items()},
        "optimizer": {"state": {}, "param_groups": [group]},
    }


def save(obj: dict, path: Path, monkeypatch) -> Path:
    import __main__

    monkeypatch.setattr(__main__, "exclude_bias_and_norm", exclude_bias_and_norm, raising=False)
    torch.save(obj, path)
    return path


def small_checkpoint(name: str, tmp_path: Path, monkeypatch, seed: int = 0):
    teacher = build_model(name, SMALL[name], seed=seed).eval()
    student = build_model(name, SMALL[name], seed=seed + 100).eval()
    for m in (teacher, student):  # non-trivial BatchNorm statistics, so that eval mode is exercised
        for bn in (mod for mod in m.modules() if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm)):
            bn.running_mean.uniform_(-0.1, 0.1)
            bn.running_var.uniform_(0.5, 1.5)
    path = save(official_container(name, teacher, student), tmp_path / f"{name}.pth", monkeypatch)
    return teacher, student, path


@pytest.mark.parametrize("name", MODELS)
def test_official_layout_roundtrip(name, tmp_path, monkeypatch):
    teacher, student, path = small_checkpoint(name, tmp_path, monkeypatch)
    loaded = load_checkpoint(name, str(path))
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        z, h = loaded.embed(x)
        z_t, h_t = teacher.embed(x)
        _, h_s = student.embed(x)
    assert z.shape == (2, teacher.backbone.out_dim) and h.shape == (2, SMALL[name].bottleneck)
    torch.testing.assert_close(z, z_t, rtol=MATCH_RTOL, atol=MATCH_RTOL)
    torch.testing.assert_close(h, h_t, rtol=MATCH_RTOL, atol=MATCH_RTOL)
    if name.startswith("dino"):  # the teacher entry is read, not the student one
        assert not torch.allclose(h, h_s, rtol=MATCH_RTOL, atol=MATCH_RTOL)


def test_official_key_names():
    """Spot checks of the published key names (ViT, ResNet-50, each head)."""
    keys = {name: set(build_model(name, SMALL[name]).state_dict()) for name in MODELS}
    vit = keys["dino_vits16"]
    assert {"backbone.cls_token", "backbone.pos_embed", "backbone.patch_embed.proj.weight", "backbone.norm.bias"} <= vit
    assert {
        f"backbone.blocks.11.{k}" for k in ("norm1.weight", "attn.qkv.bias", "attn.proj.weight", "mlp.fc2.bias")
    } <= vit
    assert {
        "head.mlp.0.weight",
        "head.mlp.2.weight",
        "head.mlp.4.weight",
        "head.last_layer.weight_g",
        "head.last_layer.weight_v",
    } <= vit
    rn = keys["dino_resnet50"]
    assert {
        "backbone.layer4.2.bn3.running_var",
        "backbone.layer1.0.downsample.0.weight",
        "head.mlp.1.running_mean",
    } <= rn
    assert {"head.mlp.3.weight", "head.last_layer.weight"} <= rn and not any(k.startswith("backbone.fc") for k in rn)
    assert "projector.6.bias" not in keys["vicreg_resnet50"] and "projector.3.bias" in keys["vicreg_resnet50"]
    assert not any(
        k.endswith("bias") and k.startswith("projector.") and ".1." not in k and ".4." not in k
        for k in keys["barlow_resnet50"]
    )
    assert {"bn.running_mean", "bn.running_var"} <= keys["barlow_resnet50"]


def test_weight_norm_matches_torch():
    """``weight_g``/``weight_v`` mean what ``nn.utils.weight_norm`` stores (DINO's last layer)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        ref = torch.nn.utils.weight_norm(torch.nn.Linear(16, 64, bias=False))
    with torch.no_grad():
        ref.weight_g.uniform_(0.5, 2.0)
    ours = WeightNormLinear(16, 64)
    ours.load_state_dict(ref.state_dict(), strict=True)
    x = torch.randn(5, 16)
    torch.testing.assert_close(ours(x), ref(x))


def test_key_mismatch_lists_keys(tmp_path, monkeypatch, capsys):
    teacher = build_model("vicreg_resnet50", SMALL["vicreg_resnet50"], seed=0)
    ckpt = official_container("vicreg_resnet50", teacher, teacher)
    del ckpt["model"]["module.projector.4.running_var"]
    ckpt["model"]["module.projector.9.weight"] = torch.zeros(3, 3)
    path = save(ckpt, tmp_path / "bad.pth", monkeypatch)
    with pytest.raises(CheckpointKeyError) as err:
        load_checkpoint("vicreg_resnet50", str(path))
    assert "projector.4.running_var" in str(err.value) and "projector.9.weight" in str(err.value)
    # Through the command: exit 2, the keys named, no traceback.
    rc = e6.main(["vicreg_resnet50", "--weights", str(path), "--out", str(tmp_path / "o"), *FAST])
    msg = capsys.readouterr().err
    assert rc == 2 and "projector.9.weight" in msg and "Traceback" not in msg


def test_backbone_only_file_is_refused(tmp_path):
    path = tmp_path / "backbone.pth"
    torch.save(build_model("dino_vits16", SMALL["dino_vits16"]).backbone.state_dict(), path)
    with pytest.raises(CheckpointError, match="full checkpoint"):
        load_checkpoint("dino_vits16", str(path))


def test_offline_message(tmp_path):
    """No --weights, nothing cached, no network: one message (file, URL, where to put it), exit 2."""
    env = {**os.environ, "TORCH_HOME": str(tmp_path / "torch"), "CI": "1"}
    for var in ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY"):
        env[var] = "http://127.0.0.1:9"  # a closed port: refused at once, online or not
    env.pop("no_proxy", None)
    env.pop("NO_PROXY", None)
    proc = subprocess.run(
        [sys.executable, "-m", "scale.pretrained", "barlow_resnet50", "--out", str(tmp_path / "o")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    expected_path = tmp_path / "torch" / "hub" / "checkpoints" / "checkpoint.pth"
    assert OFFICIAL_FILES["barlow_resnet50"].url in proc.stderr
    assert str(expected_path) in proc.stderr and "--weights" in proc.stderr
    assert "Traceback" not in proc.stderr and not expected_path.exists()


def test_orbits_sweep_their_parameters():
    """Image-major layout; the identity parameter (rotation 0, hue 0, saturation 1) returns the image."""
    x = digits_images(2, 32)
    for fam, identity_step in (("rotation", 0), ("hue", 1), ("saturation", 1)):
        o = orbit_batch(x, fam, 3).reshape(2, 3, 3, 32, 32)
        torch.testing.assert_close(o[:, identity_step], x, atol=1e-4, rtol=0)
        assert (o[:, 2] - x).abs().max() > 0.05  # and the far end moves it
    blur = orbit_batch(x, "blur", 3).reshape(2, 3, 3, 32, 32)
    assert blur[:, 2].std() < blur[:, 0].std()  # sigma 3 smooths more than sigma 0.1


def test_statistics_verdicts():
    """A known ratio is recovered with an interval holding it; the verdict only where 1 is excluded."""
    rng = np.random.default_rng(0)
    den = rng.uniform(0.01, 0.1, size=200)
    noise = np.exp(rng.normal(0, 0.3, size=200))
    comp = ratio_estimate(4.0 * den * noise, den)
    assert comp.low < 4.0 < comp.high and verdict(comp) == "compressor"
    exp_ = ratio_estimate(0.25 * den * noise, den)
    assert exp_.low < 0.25 < exp_.high and verdict(exp_) == "expander"
    # Negative control: ratio 1 up to noise must not be called either way.
    flat = ratio_estimate(den * noise / np.exp(np.mean(np.log(noise))), den)
    assert flat.low < 1.0 < flat.high and verdict(flat) == "neither"
    # Degenerate orbits (no motion) are left out and counted.
    den[:3] = 0.0
    est = ratio_estimate(den * 2.0, den)
    assert est.n == 197 and est.excluded == 3 and math.isclose(est.value, 2.0)


def test_measurement_end_to_end(tmp_path, monkeypatch):
    """All four models through the command, from official-layout files, on a handful of small images."""
    from PIL import Image

    img_dir = tmp_path / "imgs"
    img_dir.mkdir()
    for i, arr in enumerate((digits_images(3, 40, seed=1).permute(0, 2, 3, 1).numpy() * 255).astype(np.uint8)):
        Image.fromarray(arr).save(img_dir / f"im{i}.png")
    assert folder_images(img_dir, 3, 32).shape == (3, 3, 32, 32)
    out = tmp_path / "out"
    # ViT through --weights and --images; the three ResNets from torch hub's cache, official file names.
    _, _, path = small_checkpoint("dino_vits16", tmp_path, monkeypatch)
    assert e6.main(["dino_vits16", "--weights", str(path), "--out", str(out), *FAST, "--images", str(img_dir)]) == 0
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    resnets = [name for name in MODELS if name.endswith("resnet50")]
    for name in resnets:
        _, _, path = small_checkpoint(name, tmp_path, monkeypatch)
        e6.hub_cache_path(name).parent.mkdir(parents=True, exist_ok=True)
        path.rename(e6.hub_cache_path(name))
        checksums.record(e6.hub_cache_path(name))  # what a verified download leaves beside the file
    assert e6.main([*resnets, "--out", str(out), *FAST, "--dataset", "digits"]) == 0
    report = (out / "report.md").read_text()
    for name in MODELS:
        rec = json.loads((out / f"{name}.json").read_text())
        assert set(rec["summary"]) == {*FAMILIES, "all"}
        for fam in FAMILIES:
            per = rec["per_trajectory"][fam]
            assert all(len(v) == 2 for v in per.values())
            assert all(0.0 <= v <= 1.0 for v in per["var_z"] + per["var_h"])  # unit vectors: spread <= 1
            assert rec["summary"][fam]["verdict"] in {"compressor", "expander", "neither"}
            assert rec["geometry"][fam]["settings"]["head_input"].startswith("raw z")
            assert f"| {name} | {fam} |" in report
        assert rec["git_commit"] and rec["versions"]["torch"] == torch.__version__
    assert (out / "collapse_ratio.png").stat().st_size > 0 and (out / "curvature_ratio.png").stat().st_size > 0
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temporaries


E6_RTOL = 1e-5  # float32 forward passes of the same weights, in batches of other sizes


@pytest.mark.parametrize("name", ["dino_vits16", "vicreg_resnet50"])
def test_e6_numbers_are_the_definition(name, tmp_path, monkeypatch):
    """E6 through ``scale.analyze`` equals E6 written out from its definition: per trajectory, the orbit
    variance, kappa and anchor cosine of L2-normalised z and of the compared head on the raw z
    (DINO: the bottleneck ``head.mlp``; VICReg: the projector, with BatchNorm running statistics)."""
    _, _, path = small_checkpoint(name, tmp_path, monkeypatch)
    model = load_checkpoint(name, str(path))
    images = digits_images(3, 32, seed=2)
    cfg = e6.Config(models=[name], trajectories=3, steps=4, image_size=32, batch_images=2, device="cpu")
    results = e6.measure(model, images, cfg)
    mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        z0, h0 = model.embed((images - mean) / std)
        for fam in ("rotation", "blur"):
            z, h = model.embed((orbit_batch(images, fam, cfg.steps) - mean) / std)
            per = e6.per_trajectory(results[fam])
            for key, x, x0 in (("z", z, z0), ("h", h, h0)):
                x, x0 = l2_normalize(x.double()).reshape(3, cfg.steps, -1), l2_normalize(x0.double())
                np.testing.assert_allclose(per[f"var_{key}"], orbit_spread(x).numpy(), rtol=E6_RTOL)
                np.testing.assert_allclose(per[f"kappa_{key}"], sweep_curvature(x).numpy(), rtol=E6_RTOL)
                cos = (x * x0[:, None, :]).sum(-1).mean(1).numpy()
                np.testing.assert_allclose(per[f"cos_{key}"], cos, rtol=E6_RTOL)
            # the control is another head (untrained), not the trained one measured again
            assert not np.allclose(per["var_h_untrained"], per["var_h"], rtol=1e-3)
    if name == "vicreg_resnet50":  # negative control: the E4 protocol (head on normalised z) gives other numbers
        settings = e6.analysis_settings(cfg, "rotation")
        e4 = analyze_orbits(model.backbone, model.compared, images, IMAGENET_MEAN, IMAGENET_STD,
                            replace(settings, head_input="normalized"))
        assert not np.allclose(e4["per_orbit"]["h"]["spread"], results["rotation"]["per_orbit"]["h"]["spread"],
                               rtol=1e-3)


def test_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        e6.main(["simclr_resnet50"])
    assert "valid choices" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        e6.main(["dino_vits16", "vicreg_resnet50", "--weights", "x.pth"])
    assert "exactly one MODEL" in capsys.readouterr().err
