"""The toy SSL trainer and its guillotine report: runs, is reproducible, numbers finite and consistent."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mini import train as tr
from mini.heads import init_head
from mini.invariance import orbit_gain, pullback_metric
from mini.reports import train as train_report

TINY = tr.TrainConfig(steps=12, batch=16, gain_every=4, gain_points=10, backbone_width=16, head_width=16, d=8, k=8)


@pytest.fixture(scope="module")
def report():
    return train_report.run_report(TINY, heads=("linear", "gelu3"), probe_steps=40, n_probe_per_class=8)


def _finite_stats(geo):
    for name in ("spread", "d_intra", "d_inter", "ratio", "kappa"):
        s = getattr(geo, name)
        assert math.isfinite(s.mean) and math.isfinite(s.std) and s.mean >= 0 and s.std >= 0, name


def test_report_numbers_are_finite_and_internally_consistent(report):
    reports, text = report
    assert [r.head for r in reports] == ["linear", "gelu3"]
    for r in reports:
        for geo in (r.z, r.h, r.h_untrained):
            _finite_stats(geo)
            assert geo.spread.n == 15 and geo.d_intra.n == 15 and geo.d_inter.n == 10 and geo.kappa.n == 15
            assert geo.ratio_of_means == pytest.approx(geo.d_inter.mean / geo.d_intra.mean)
            # normalised features: squared distances to a centroid are at most 1, distances at most 2
            assert geo.spread.mean <= 1.0 + 1e-12 and geo.d_intra.mean <= 2.0 + 1e-12
            # spread is half the mean squared pairwise distance, so D_intra^2 <= 2 P/(P-1) spread (Jensen)
            assert geo.d_intra.mean**2 <= 2 * 12 / 11 * geo.spread.mean * (1 + 1e-9)
        assert r.compression == pytest.approx(r.z.spread.mean / r.h.spread.mean, rel=1e-12)
        assert r.compression_untrained == pytest.approx(r.z.spread.mean / r.h_untrained.spread.mean, rel=1e-12)
        assert r.sweep_compression > 0 and math.isfinite(r.sweep_compression)
        assert len(r.probes) == 12
        for key, p in r.probes.items():
            assert 0.0 <= p.test_accuracy <= 1.0 and 0.0 <= p.train_accuracy <= 1.0, key
            assert p.n_train + p.n_test == 5 * 8 * 4
        assert [s for s, _ in r.gain_curve] == [0, 4, 8, 12]
        assert all(math.isfinite(g) and g >= 0 for _, g in r.gain_curve)
        assert math.isfinite(r.final_loss)
    for needle in ("| orbit spread z / h |", "| linear |", "gelu3", "untrained head", "Proposition 5.2"):
        assert needle in text
    assert f"{reports[1].compression:.3g}x" in text


def test_training_is_seeded_and_reproducible():
    cfg = tr.TrainConfig(steps=3, batch=8, gain_every=10, gain_points=5, backbone_width=8, head_width=8, d=4, k=4)
    a, b = tr.train(cfg), tr.train(cfg)
    assert a.losses == b.losses
    c = tr.train(tr.TrainConfig(**{**cfg.__dict__, "seed": 1}))
    assert c.losses != a.losses


@pytest.mark.parametrize("objective", tr.TRAIN_OBJECTIVES)
def test_every_objective_trains_and_lowers_its_loss(objective):
    cfg = tr.TrainConfig(objective=objective, steps=40, batch=16, gain_every=100, gain_points=5,
                         backbone_width=16, head_width=16, d=8, k=8, manifold="shift", lr=1e-2)
    res = tr.train(cfg)
    assert all(math.isfinite(v) for v in res.losses)
    assert np.mean(res.losses[-5:]) < np.mean(res.losses[:5])


def test_mean_orbit_gain_matches_the_autograd_pullback_metric():
    res = tr.train(tr.TrainConfig(steps=2, batch=8, gain_every=10, gain_points=5, d=6, k=5, head="swish3"))
    X0, _ = res.manifold.base(1, 0)
    Z, V = tr.orbit_tangents_in_z(res.backbone, res.manifold, X0)
    by_autograd = [orbit_gain(pullback_metric(res.head, z), v[None, :])[0] for z, v in zip(Z, V)]
    assert tr.mean_orbit_gain(res.head, Z, V) == pytest.approx(np.mean(by_autograd), rel=1e-10)
    # the tangent is tangent to the unit sphere of normalised z
    np.testing.assert_allclose(np.sum(Z * V, axis=1), 0.0, atol=1e-12)
    lin = init_head("linear", 6, 5, rng=0)
    W = lin.layers[0]["W"]
    want = np.mean(np.sum((V @ W.T) ** 2, 1) / np.sum(V**2, 1)) / (np.sum(W**2) / 6)
    assert tr.mean_orbit_gain(lin, Z, V) == pytest.approx(want, rel=1e-12)


def test_bad_config_and_cli_errors():
    with pytest.raises(ValueError, match="valid: simclr, simsiam, vicreg, barlow"):
        tr.TrainConfig(objective="byol").validate()
    with pytest.raises(ValueError, match="valid forms"):
        tr.TrainConfig(head="relu1").validate()
    with pytest.raises(ValueError, match="steps"):
        tr.TrainConfig(steps=0).validate()
    with pytest.raises(SystemExit):
        train_report.main(["--report", "--heads", "linear,foo3"])


def test_cli_prints_the_report_and_writes_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert train_report.main(["--report", "--heads", "linear", "--steps", "2", "--batch", "8", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| orbit spread (x 1e-2) |" in text and "| 4-way augmentation probe, mlp |" in text
    import json

    payload = json.loads(out.read_text())
    assert payload["heads"] == ["linear"] and payload["config"]["steps"] == 2
    assert "git_commit" in payload["provenance"]
