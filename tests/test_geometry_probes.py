"""scale.geometry.measure and scale.geometry.probes: E4 orbits on the device and E3 probes on frozen features,
checked against
mini.invariance's metrics, exact cases (an orthogonal head compresses nothing; a constant head loses all
rotation information) and the end-of-run measurement of ``python -m scale.run`` on a generated CIFAR-10
folder in the official pickle format."""

from __future__ import annotations

import json
import pickle
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from mini.invariance import orbit_geometry
from scale.engine.cifar import ARCHIVES
from scale.geometry import probes
from scale.geometry.measure import GeometrySettings, measure_geometry, orbit_images, parse_orbits
from scale.geometry.orbits import E4_ROTATION_ANGLES, E4_SWEEP_ANGLES, orbit_batch_at
from scale.geometry.probes import HEADLINE_PROTOCOL, ProbeSettings, class_probe, rotated, run_rotation_probes

REL_TOL = 1e-5  # float32 features against float64 metrics
S = 12  # image side


class Flatten(nn.Module):
    """A fixed 'backbone': the pixels, pooled 2 x 2 (rotation-sensitive, deterministic)."""

    out_dim = 3 * (S // 2) ** 2

    def forward(self, x):
        return nn.functional.avg_pool2d(x, 2).flatten(1)


def _images(n_per_class: int = 3, classes: int = 5, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(classes * n_per_class, 3, S, S, generator=g) * 255).to(torch.uint8)
    y = torch.arange(classes).repeat_interleave(n_per_class)
    return x, y


def _cfg(head: str = "linear", **kw):
    return SimpleNamespace(head=head, head_out=kw.get("k", Flatten.out_dim), head_width=kw.get("width", 32),
                           head_bias=kw.get("bias", False), head_bn=False, head_out_bn=False, init="normal")


def test_orbits_at_given_angles():
    x = torch.rand(2, 3, S, S)
    out = orbit_batch_at(x, "rotation", [0.0, 90.0, 180.0])
    assert out.shape == (6, 3, S, S)
    assert torch.allclose(out[0], x[0], atol=1e-5)  # angle 0 is the image itself
    # a quarter turn about the centre maps pixel centres onto pixel centres: equal to rot90 (one sense)
    assert min(float((out[1] - torch.rot90(x[0], k, (-2, -1))).abs().max()) for k in (1, -1)) < 1e-4
    assert len(E4_ROTATION_ANGLES) == 12 and E4_ROTATION_ANGLES[-1] == 330.0
    assert len(E4_SWEEP_ANGLES) == 10 and E4_SWEEP_ANGLES[-1] == pytest.approx(45.0)
    with pytest.raises(ValueError, match="valid choices"):
        orbit_batch_at(x, "shear", [0.0])


def test_orbit_images_and_settings_errors():
    x, y = _images(n_per_class=4)
    imgs, lab, _ = orbit_images(x, y, classes=3, per_class=2)
    assert lab.tolist() == [0, 0, 1, 1, 2, 2] and imgs.max() <= 1.0
    with pytest.raises(ValueError, match="6 classes"):
        orbit_images(x, y, classes=6, per_class=1)
    with pytest.raises(ValueError, match="4 images in the split, 5 asked"):
        orbit_images(x, y, classes=2, per_class=5)
    assert parse_orbits("5x3") == (5, 3)
    for bad in ("5", "1x3", "ax3"):
        with pytest.raises(ValueError, match=r"CLASSESxIMAGES|classes"):
            parse_orbits(bad)
    with pytest.raises(ValueError, match="2 classes"):
        GeometrySettings(classes=1)


@pytest.mark.parametrize("family", ["rotation", "hue"])
def test_geometry_equals_mini_on_numpy_and_orthogonal_head_compresses_nothing(family):
    x, y = _images()
    d = Flatten.out_dim
    head = nn.Linear(d, d, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(1)))[0])
    settings = GeometrySettings.for_family(family)
    res = measure_geometry(Flatten(), head, _cfg(), x, y, (0.5,) * 3, (0.25,) * 3, settings)
    s = res.summary()
    assert res.arrays["z"].shape == (15, 12, d) and s.settings["family"] == family
    if family == "hue":
        assert settings.values[0] == pytest.approx(-0.4) and settings.values[-1] == pytest.approx(0.4)
    # the torch path equals mini's metrics on the saved NumPy arrays
    ref = orbit_geometry(res.arrays["z"].astype(np.float64), res.arrays["labels"])
    assert s.z.spread.mean == pytest.approx(ref.spread.mean, rel=REL_TOL)
    assert s.z.d_inter.mean == pytest.approx(ref.d_inter.mean, rel=REL_TOL)
    # an orthogonal head is an isometry of the sphere: every distance, hence the compression, is unchanged
    assert s.compression == pytest.approx(1.0, rel=REL_TOL)
    assert s.h.kappa.mean == pytest.approx(s.z.kappa.mean, rel=REL_TOL)
    # the other extreme: a head blind to its input (zero weights, a bias) maps every orbit to one point
    blind = nn.Linear(d, d)
    with torch.no_grad():
        blind.weight.zero_()
        blind.bias.fill_(1.0)
    s1 = measure_geometry(Flatten(), blind, _cfg(), x, y, (0.5,) * 3, (0.25,) * 3, settings).summary()
    assert s1.h.spread.mean < 1e-10 < s.h.spread.mean
    # the control is an untrained head of the same architecture, not the head measured; this head has no
    # biases, so the bias-free control is the same head
    assert s.compression_untrained != pytest.approx(1.0, rel=1e-3)
    assert s.compression_untrained_nobias == s.compression_untrained


def test_rotation_probe_reads_rotation_from_pixels_but_not_from_an_invariant():
    g = torch.Generator().manual_seed(0)
    top = torch.zeros(1, 3, 8, 8)
    top[..., :2, :] = 0.6  # an upright pattern (a bright top band) under noise: the turn is visible
    train_x = ((0.4 * torch.rand(64, 3, 8, 8, generator=g) + top) * 255).to(torch.uint8)
    test_x = ((0.4 * torch.rand(32, 3, 8, 8, generator=g) + top) * 255).to(torch.uint8)
    train_y, test_y = torch.arange(64) % 2, torch.arange(32) % 2

    def embed(x):  # z: the pixels (rotation readable); h: their sorted values (exactly rotation invariant)
        return x.flatten(1), x.flatten(1).sort(dim=1).values

    xr, yr = rotated(train_x[:3])
    assert xr.shape == (12, 3, 8, 8) and yr.tolist() == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3
    out = run_rotation_probes(embed, lambda u: u.float() / 255, train_x, test_x,
                              ProbeSettings(epochs=10, hidden_z=16, hidden_h=16))
    for kind in ("linear", "mlp"):
        acc = getattr(out, kind)  # percent
        assert acc.z > 90, kind
        assert acc.h < 40, kind  # chance is 25 %: an invariant feature cannot tell
    assert out.settings["rotation_samples"] == {"train": 256, "test": 128}
    # the headline class probe on the same features: the labels alternate, the pixels do not show them
    cp = class_probe(embed, lambda u: u.float() / 255, train_x, train_y, test_x, test_y, 2)
    assert cp.protocol == HEADLINE_PROTOCOL and (cp.train_images, cp.test_images) == (64, 32)
    assert 0 <= cp.accuracy.z <= 100 and 0 <= cp.accuracy.h <= 100
    with pytest.raises(ValueError, match="positive"):
        ProbeSettings(epochs=0)


def _cifar_folder(root, n_train: int = 40, n_test: int = 24) -> None:
    """A CIFAR-10 extracted folder in the official layout (5 training pickles + test_batch), tiny."""
    spec = ARCHIVES["cifar10"]
    folder = root / spec.folder
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)

    def write(name: str, n: int) -> None:
        blob = {"batch_label": name, "labels": (np.arange(n) % 10).tolist(),
                "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), "filenames": [f"{i}.png" for i in range(n)]}
        (folder / name).write_bytes(pickle.dumps(blob, protocol=2))

    for f in spec.train_files:
        write(f, n_train // 5)
    write(spec.test_files[0], n_test)


def test_scale_run_ends_with_geometry_and_probes_on_cifar_format(tmp_path):
    from scale.run import main

    _cifar_folder(tmp_path / "data")
    code = main(["cifar10", "--data-dir", str(tmp_path / "data"), "--no-download", "--backbone-width", "4",
                 "--head", "relu2", "--head-width", "16", "--head-out", "8", "--batch-size", "16", "--epochs", "1",
                 "--probe-size", "16", "--probe-images", "16", "--orbits", "5x3", "--out", str(tmp_path),
                 "--run-name", "r", "--quiet", "--device", "cpu", "--threads", "1"])
    assert code == 0
    run = tmp_path / "r"
    summary = json.loads((run / "summary.json").read_text())
    geo, probes = summary["geometry"], summary["rotation_probes"]
    # 24 test images, labels 0..9 in turn: classes 0-3 have 3 images, class 4 has 2, so 5 x 3 becomes 5 x 2
    assert geo["settings"]["asked"] == "5x3" and geo["settings"]["per_class"] == 2
    assert geo["settings"]["n_orbits"] == 10 and geo["settings"]["points_per_orbit"] == 12
    for space in ("z", "h", "h_untrained", "h_untrained_nobias", "h_raw_input"):
        assert np.isfinite(geo[space]["spread"]["mean"]) and geo[space]["kappa"]["n"] == 10
    assert geo["compression"] == pytest.approx(geo["z"]["spread"]["mean"] / geo["h"]["spread"]["mean"])
    assert probes["settings"]["rotation_samples"] == {"train": 64, "test": 64}  # 16 images each, x 4
    assert 0.0 <= probes["mlp"]["h"] <= 100.0  # percent
    assert summary["class_probe"]["protocol"] == HEADLINE_PROTOCOL
    assert np.load(run / "orbits.npz")["h"].shape == (10, 12, 8)
    report = (run / "report.md").read_text()
    assert "Orbit geometry (E4)" in report and "Probes on frozen features (headline; E3)" in report
    assert "headline: class labels, linear: logistic regression" in report
    assert main(["cifar10", "--orbits", "5by3", "--data-dir", str(tmp_path / "data")]) == 2


def test_the_raw_input_memo_returns_what_a_fresh_fit_returns_and_keys_on_content():
    """``raw_input_correct`` is memoised per process by the features' and labels' content: a second call gives the
    fresh fits' answers (each a copy: a caller's edit does not reach the memo), and the same shapes with one label
    changed are a new entry, not the old answer."""
    g = torch.Generator().manual_seed(3)
    tr, te = torch.randn(60, 5, generator=g, dtype=torch.float64), torch.randn(30, 5, generator=g, dtype=torch.float64)
    ytr, yte = (tr[:, 0] > 0).long(), (te[:, 0] > 0).long()
    fresh = (probes.logistic_probe_correct(tr, ytr, te, yte, 2), probes.knn_correct(tr, ytr, te, yte, 2))
    first = probes.raw_input_correct(tr, te, ytr, yte, 2)
    first[0][:] = ~first[0]  # a caller's edit
    again = probes.raw_input_correct(tr, te, ytr, yte, 2)
    assert all(torch.equal(a, b) for a, b in zip(again, fresh))
    flipped = yte.clone()
    flipped[0] = 1 - flipped[0]
    other = probes.raw_input_correct(tr, te, ytr, flipped, 2)
    assert other[0][0] != again[0][0] and torch.equal(other[0][1:], again[0][1:])
