"""What a run's results claim, checked against what they rest on: a network that did not learn says so first and
its verdict is labelled; the verdict compares the head with its untrained control by the interval of their
ratio (never "the same" unless that interval contains 1); every probe gap carries a paired interval; the
end-of-run probes and ``scale.analyze`` of the same weights agree; the same command, seed and thread count
give the same numbers."""

from __future__ import annotations

import contextlib
import io
import json
import math

import numpy as np
import pytest
import torch
from torch import nn

import scale
from scale.analyze import main as analyze_main
from scale.engine.data import load_synthetic
from scale.geometry.measure import EndOfRun
from scale.geometry.verdict import comparison, paired_gap
from scale.run import main as run_main
from scale.runs.run_report import verdict_line
from scale.runs.summary import Estimate, Verdict

TINY = ["synthetic", "--train-subset", "96", "--batch-size", "32", "--probe-size", "32", "--head-width", "16",
        "--head-out", "8", "--backbone-width", "4", "--image-size", "8", "--epochs", "1", "--threads", "1",
        "--augment-path", "batched", "--orbits", "3x2", "--quiet"]
COVERAGE_TRIALS = 400  # simulated test sets for the interval's coverage
FLOAT32_RTOL = 1e-5  # float32 features computed in two memory layouts
COVERAGE_FLOOR = 0.90  # a 95 % interval covering less than this on 400 trials is wrong (binomial sd ~1.1 %)


def _run(out, name: str, *extra: str) -> tuple[dict, str]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert run_main([*TINY, "--out", str(out), "--run-name", name, *extra]) == 0
    return json.loads((out / name / "summary.json").read_text()), buf.getvalue()


# ----------------------------------------------------------------------------- the verdict as a comparison


def _verdict(r: tuple[float, float, float], r0: tuple[float, float, float], ratio: tuple[float, float, float]
             ) -> Verdict:
    gain = Estimate(0.0, -0.1, 0.1, 15)
    return Verdict(Estimate(*r, 15), Estimate(*r0, 15), "compressor", "compressor", Estimate(1.0, 0.9, 1.1, 15), gain,
                   versus_untrained=Estimate(*ratio, 15))


def test_the_untrained_control_is_called_the_same_only_where_the_ratio_interval_contains_one():
    # the two cases measured: the control compressing more (77x vs 44x), and less with disjoint intervals
    more = _verdict((44.0, 40.0, 48.0), (77.0, 70.0, 85.0), (0.57, 0.5, 0.65))
    less = _verdict((98.0, 90.0, 107.0), (55.0, 50.0, 60.0), (1.78, 1.6, 1.95))
    same = _verdict((60.0, 50.0, 70.0), (62.0, 52.0, 72.0), (0.97, 0.85, 1.1))
    for v in (more, less, same):
        assert "does the same" not in verdict_line(v)
    assert "lower than the untrained head's (44 vs 77)" in verdict_line(more) and "not learned" in verdict_line(more)
    assert "higher than the untrained head's (98 vs 55)" in verdict_line(less)
    assert "strengthened" in verdict_line(less)
    assert "is that of the untrained head (the interval contains 1)" in verdict_line(same)
    assert [comparison(v.versus_untrained) for v in (more, less, same)] == ["less", "more", "as much"]


# ----------------------------------------------------------------------------- paired gaps


def test_paired_gap_is_the_difference_of_accuracies_with_an_interval_that_covers():
    rng = np.random.default_rng(0)
    n, p_first, p_second, rho = 200, 0.8, 0.7, 0.6
    truth, covered = 100 * (p_second - p_first), 0
    for _ in range(COVERAGE_TRIALS):  # correlated pairs: a shared latent draw per sample
        u = rng.random(n)
        w = np.where(rng.random(n) < rho, u, rng.random(n))
        a, b = u < p_first, w < p_second
        est = paired_gap(a, b)
        assert math.isclose(est.value, 100 * (b.mean() - a.mean()))
        covered += est.low <= truth <= est.high
    assert covered / COVERAGE_TRIALS >= COVERAGE_FLOOR


def test_paired_gap_resamples_the_samples_of_one_image_together():
    rng = np.random.default_rng(1)
    per_image = rng.random(50) < 0.5  # four quarter turns per image, all right or all wrong together
    a, b = np.tile(per_image, 4), np.tile(rng.random(50) < 0.5, 4)
    units = np.tile(np.arange(50), 4)
    clustered, naive = paired_gap(a, b, units), paired_gap(a, b)
    assert clustered.value == naive.value and clustered.n == 50 and naive.n == 200
    assert (clustered.high - clustered.low) > 1.5 * (naive.high - naive.low)  # 4 copies are not 4 images
    assert math.isnan(paired_gap(np.ones(1, bool), np.zeros(1, bool)).low)


# ----------------------------------------------------------------------------- a network that did not learn


class ConstantHead(nn.Module):
    """A head whose output does not depend on its input: every view alike, the loss at chance."""

    def __init__(self, k: int = 8) -> None:
        super().__init__()
        self.b = nn.Parameter(torch.randn(k))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.b.expand(len(z), -1)


def test_a_network_whose_loss_stays_at_chance_did_not_learn_and_says_so_first(tmp_path):
    lines: list[str] = []
    cfg = scale.TrainConfig.resolve("synthetic", backbone_width=4, image_size=8, batch_size=32, epochs=1,
                                    train_subset=96, threads=1, augment_path="batched", probe_size=32)
    s = scale.train(cfg, load_synthetic(image_size=8), tmp_path / "run", head=ConstantHead(),
                    measure=EndOfRun("3x2"), log=lines.append)
    t = s.training
    assert t.learned is False and math.isclose(t.chance_loss, math.log(2 * 32 - 1))
    assert abs(t.final_loss - t.chance_loss) < 1e-3 and t.h_spread < 1e-6
    assert any("chance" in f and "first step" not in f for f in t.findings) and any("collapsed" in n for n in t.notes)
    results = lines[lines.index(next(li for li in lines if li.startswith("WARNING"))):]
    assert results[0].startswith("WARNING: the network did not learn: the loss did not fall below its first step")
    # the constant head passes no gradient back: the backbone's weights stay where they began
    assert t.weight_shift == 0.0 and "the backbone's weights did not move" in results[0]
    verdicts = [li for li in results if li.startswith("verdict")]
    assert all(li.startswith("verdict (of a network that did not learn): ") for li in verdicts)
    assert all("whether training made this effect is not said" in li for li in verdicts)
    report = (tmp_path / "run" / "report.md").read_text()
    assert report.splitlines()[2].startswith("**WARNING: the network did not learn")
    assert "**Verdict (of a network that did not learn):" in report or s.geometry.verdict is None


# ----------------------------------------------------------------------------- one protocol, numbers that repeat


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    return out, _run(out, "a", "--seed", "3", "--probe-images", "40"), _run(out, "b", "--seed", "3", "--probe-images",
                                                                             "40")


def test_the_same_command_seed_and_threads_give_the_same_numbers(seeded):
    _, (a, _), (b, _) = seeded
    timing = {"images_per_s", "epoch_seconds"}  # the only numbers that may differ: the machine's speed
    assert {k: v for k, v in a["final"].items() if k not in timing} == {
        k: v for k, v in b["final"].items() if k not in timing}
    for key in ("class_probe", "rotation_probes", "training"):
        assert a[key] == b[key], key
    assert a["geometry"]["verdict"] == b["geometry"]["verdict"]


def test_analyze_of_a_run_repeats_its_end_of_run_probes_and_orbits(seeded):
    out, (summary, _), _ = seeded
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert analyze_main([str(out / "a"), "--quiet", "--hessian-images", "4", "--lanczos-iter", "5"]) == 0
    result = json.loads((out / "a" / "analysis" / "analysis.json").read_text())
    rot = result["probes"]["rotation"]
    for kind in ("linear", "mlp"):
        assert (rot["z"][kind], rot["h"][kind]) == (summary["rotation_probes"][kind]["z"],
                                                    summary["rotation_probes"][kind]["h"]), kind
        assert result["probes"]["rotation_gaps"][kind] == summary["rotation_probes"]["gaps"][kind]
    assert result["probes"]["rotation_settings"]["seed"] == 3
    assert result["probes"]["headline"] == summary["class_probe"]
    # the orbit features: float32 convolutions that scale.analyze computes on a model of its own (the trainer's
    # layout is channels_last where memory_format_for allows it; this width-4 ResNet keeps the default layout), so
    # the verdict's numbers are compared to float32 round-off, relative to each number's own size, not bitwise
    for key, est in summary["geometry"]["verdict"].items():
        if isinstance(est, dict):
            for part in ("value", "low", "high"):
                assert math.isclose(result["verdict"][key][part], est[part], rel_tol=FLOAT32_RTOL), (key, part)
        else:
            assert result["verdict"][key] == est, key
    assert result["training"]["learned"] == summary["training"]["learned"]
    assert math.isclose(result["training"]["weight_shift"], summary["training"]["weight_shift"], rel_tol=1e-12)
    assert "(h minus z: " in buf.getvalue() and "training check: loss" in buf.getvalue()
    page = (out / "a" / "analysis" / "report.md").read_text()  # the raw input beside the initialisation, here too
    assert "The class probes beside their baselines" in page and "the raw input (pixels)" in page
    assert "it does not mean a representation better than the input" in page
