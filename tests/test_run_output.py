"""What a run tells its user: every long phase announced with its size, its time and an estimate of the rest;
the headline probe as h minus z with Wilson intervals and a warning when the test split is small; the
verdict with its interval and the untrained control, in the same words on stdout, in report.md and in
``scale.analyze``; the curvature tracker's undefined condition number explained."""

from __future__ import annotations

import json
import math
import re

import pytest

from mini.collapse import wilson_interval
from scale.engine.progress import Phases
from scale.run import main
from scale.runs.run_report import accuracy_text, learned_text, small_test_warning, verdict_line
from scale.runs.summary import Estimate, Verdict

TINY = ["synthetic", "--train-subset", "96", "--batch-size", "32", "--probe-size", "32", "--head-width", "16",
        "--head-out", "8", "--backbone-width", "4", "--image-size", "8", "--epochs", "1", "--threads", "1",
        "--augment-path", "batched", "--orbits", "3x2"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main([*TINY, "--out", str(out), "--run-name", "r", "--track-hessian-every", "epoch"]) == 0
    return out / "r", buf.getvalue()


def test_the_end_of_run_measurement_is_announced_phase_by_phase(run):
    _, printed = run
    # measured on the whole dataset (256 + 64 images; --train-subset limits the training), 6 orbits x 23 images,
    # rotation probes on 4 x (256 + 64): the cap is a quarter of the 96 images trained on, but at least 256
    # the class probe also probes the backbone at initialisation and the raw input: twice the images (the raw
    # input needs no forward pass), a third and a fourth fit
    assert ("end-of-run measurement: 5 phases (orbit geometry: 138 images; class probe: features: 640 images; "
            "class probe: fits: 4 L-BFGS fits; rotation probes: features: 1,280 images; rotation probes: fits: 4 Adam "
            "fits)") in printed
    names = ("orbit geometry", "class probe: features", "class probe: fits", "rotation probes: features",
             "rotation probes: fits")
    for i, name in enumerate(names, 1):
        assert re.search(rf"\[{i}/5\] {name}: .+ \.\.\.\n", printed), name
        assert re.search(rf"\[{i}/5\] {name}: \d+\.\d s; ", printed), name
    assert re.search(r"\[2/5\] class probe: features: \d+\.\d s; about \d+(\.\d)? s left by the speed so far, and "
                     r"class probe: fits, rotation probes: fits not yet timed", printed)
    assert re.search(r"\[4/5\] rotation probes: features: \d+\.\d s; rotation probes: fits not yet timed", printed)
    assert "all done in" in printed


def test_stdout_and_report_state_the_probe_the_verdict_and_the_warning_the_same_way(run):
    run_dir, printed = run
    summary = json.loads((run_dir / "summary.json").read_text())
    a, n = summary["class_probe"]["accuracy"], summary["class_probe"]["test_images"]
    lo, hi = wilson_interval(round(a["z"] / 100 * n), n)
    z_text = f"{a['z']:.2f} % [{100 * lo:.1f}, {100 * hi:.1f}]"
    g = summary["class_probe"]["gap"]  # h minus z, paired over the same test images
    assert math.isclose(g["value"], a["h"] - a["z"]) and g["low"] <= g["value"] <= g["high"]
    gap = f"{a['h'] - a['z']:+.2f} points [{g['low']:+.1f}, {g['high']:+.1f}]"
    assert z_text in printed and f"(h minus z: {gap})" in printed and "z minus h" not in printed
    report = (run_dir / "report.md").read_text()
    assert z_text in report and f"| h minus z [paired bootstrap 95 %] | {gap} |" in report
    v = Verdict.from_dict(summary["geometry"]["verdict"])
    untrained = summary["training"]["learned"] is False
    assert verdict_line(v, untrained) in printed
    label = " (of a network that did not learn)" if untrained else ""
    assert f"**Verdict{label}: {v.verdict}.** Collapse ratio spread(z) / spread(h) = {v.collapse_ratio.fmt()}" in report
    assert f"the untrained head of the same architecture: {v.collapse_ratio_untrained.fmt()}" in report
    assert (learned_text(v) if not untrained else "Whether training made this effect is not said") in report
    # the raw input beside the initialisation baseline, linear and kNN, in stdout, the report and the premise
    for probe, table in ((summary["class_probe"], "headline probe"), (summary["class_probe"]["knn"], "kNN probe")):
        raw, rg = probe["raw_input"], probe["raw_input_gain"]
        assert math.isclose(rg["value"], probe["accuracy"]["z"] - raw, abs_tol=1e-9)
        said = (f"the raw input (pixels) {accuracy_text(raw, n)} (z minus it {rg['value']:+.2f} points "
                f"[{rg['low']:+.1f}, {rg['high']:+.1f}])")
        assert said in printed
        assert f"| {table} on the raw input (flattened pixels) | {accuracy_text(raw, n)} |" in report
    assert summary["training"]["raw_input_probe"] == summary["class_probe"]["raw_input"]
    assert "it does not mean a representation better than the input" in report
    warning = "only 64 test images: one is worth 1.6 points"
    assert warning in printed and warning in report and f"Warning: only {n} test samples" in report


def test_the_tracker_explains_an_undefined_condition_number(run):
    _, printed = run
    line = next(li for li in printed.splitlines() if "H_eff  lambda_min" in li)
    assert "cond - (defined only when H_eff is positive definite)" in line or re.search(r"cond \d", line)


def test_wilson_interval_and_the_small_test_warning():
    assert accuracy_text(75.0, 12) == "75.00 % [46.8, 91.1]"  # 9 of 12
    assert "one is worth 8.3 points" in small_test_warning(12)
    assert small_test_warning(100) is None and small_test_warning(99) is not None


def test_the_verdict_reads_the_trained_head_against_its_control():
    est = {"above": Estimate(41.2, 30.0, 55.0, 15), "around": Estimate(1.1, 0.8, 1.5, 15)}
    gain = Estimate(0.1, 0.0, 0.2, 15)
    same = Verdict(est["above"], Estimate(76.7, 60.0, 90.0, 15), "compressor", "compressor", est["around"], gain)
    assert "not learned" in learned_text(same) and "not learned" in verdict_line(same)
    learned = Verdict(est["above"], est["around"], "compressor", "neither", est["around"], gain)
    assert "comes with training" in learned_text(learned) and "learned" in verdict_line(learned)
    neither = Verdict(est["around"], est["around"], "neither", "neither", est["around"], gain)
    assert "contains 1" in learned_text(neither)


def test_phases_estimate_the_rest_from_the_speed_of_the_same_unit():
    lines: list[str] = []
    phases = Phases("m", lines.append)
    phases.plan("a", 100, "images")
    phases.plan("b", 50, "products")
    phases.plan("c", 300, "images")
    with phases.run("a"):
        pass
    phases.phases[0].seconds = 2.0  # a fixed clock: 0.02 s per image
    left, unknown = phases.estimate()
    assert math.isclose(left, 6.0) and unknown == ["b"]
    phases.skip("b", "nothing to measure")
    assert lines[0] == "m: 3 phases (a: 100 images; b: 50 products; c: 300 images)" and "skipped" in lines[-1]


def test_without_a_terminal_the_first_steps_are_reported_before_the_first_epoch_ends(run):
    _, printed = run  # pytest's captured stdout and stderr: no terminal, so no bar
    lines = printed.splitlines()
    early = next(i for i, li in enumerate(lines) if re.match(r"epoch 1/1: first 1 of 3 steps in \d+\.\d s \(loss "
                                                              r"\d+\.\d{4}\); about \d+ s per epoch", li))
    assert early < next(i for i, li in enumerate(lines) if li.startswith("epoch   1/1  loss"))
