"""scale.replicate and scale.geometry.ledger: the ledger's statistics and rules against hand-computed values on
fixed small inputs, the claims' per-seed statistics on a hand-built ledger, and the --quick pipeline end to end
(killed for real mid-way, then resumed)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from scale import replicate as R
from scale.geometry.ledger import (
    INCONCLUSIVE,
    NOT_MEASURED,
    NOT_REPRODUCED,
    REPRODUCED,
    VERDICTS,
    Rule,
    cell,
    fraction,
    interval,
    log10_ratio,
)
from scale.geometry.verdict import Estimate

T975_4 = 2.7764451051977934  # t_{0.975, 4} (tables: 2.776)
T975_2 = 4.302652729749462  # t_{0.975, 2} (tables: 4.303)
ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------------------------
# scale.geometry.ledger
# --------------------------------------------------------------------------------------------


def test_interval_is_the_student_t_interval_by_hand():
    est = interval([1.0, 2.0, 3.0, 4.0, 5.0])  # mean 3, s^2 = 2.5
    half = T975_4 * math.sqrt(2.5) / math.sqrt(5)
    assert est.n == 5 and est.excluded == 0 and est.value == 3.0
    assert math.isclose(est.low, 3 - half, rel_tol=1e-9) and math.isclose(est.high, 3 + half, rel_tol=1e-9)
    # non-finite values and None are left out and counted: the interval of [0.2, 0.4, 0.9]
    est = interval([0.2, None, 0.4, math.nan, 0.9, math.inf])
    s = float(np.std([0.2, 0.4, 0.9], ddof=1))
    assert est.n == 3 and est.excluded == 3 and math.isclose(est.value, 0.5)
    assert math.isclose(est.high - est.value, T975_2 * s / math.sqrt(3), rel_tol=1e-9)
    one, none = interval([7.0]), interval([math.nan])
    assert one.n == 1 and one.value == 7.0 and math.isnan(one.low)
    assert none.n == 0 and none.excluded == 1 and cell(none) == "-"
    assert cell(interval([1.0, 2.0, 3.0, 4.0, 5.0, None])) == "3 [1.04, 4.96] (n = 5, 1 excluded)"
    same = interval([0.25, 0.25, 0.25])  # no spread: the interval is the point
    assert same.low == same.high == 0.25


def test_rules_map_intervals_to_verdicts_at_their_edges():
    above, below = Rule(">", 0.0), Rule("<", 0.1)
    band = Rule("within", band=(0.5, 0.9))

    def at(low, high, n=5):  # an interval with the given ends
        return Estimate((low + high) / 2, low, high, n)

    assert above.verdict(at(0.01, 2.0)) == REPRODUCED
    assert above.verdict(at(-2.0, -0.01)) == NOT_REPRODUCED
    assert above.verdict(at(-0.01, 2.0)) == INCONCLUSIVE
    assert below.verdict(at(0.0, 0.09)) == REPRODUCED
    assert below.verdict(at(0.11, 1.0)) == NOT_REPRODUCED
    assert below.verdict(at(0.05, 0.2)) == INCONCLUSIVE
    assert band.verdict(at(0.5, 0.9)) == REPRODUCED  # the band's ends belong to it
    assert band.verdict(at(0.91, 1.0)) == NOT_REPRODUCED and band.verdict(at(0.1, 0.49)) == NOT_REPRODUCED
    assert band.verdict(at(0.6, 0.95)) == INCONCLUSIVE and band.verdict(at(0.4, 1.0)) == INCONCLUSIVE
    assert above.verdict(interval([3.0])) == INCONCLUSIVE  # one seed: no interval
    assert above.verdict(interval([])) == NOT_MEASURED
    # the hand-computed interval of 1..5 (low 1.0368) lies above 0.9 and straddles 3
    assert Rule(">", 0.9).verdict(interval([1, 2, 3, 4, 5])) == REPRODUCED
    assert Rule(">", 3.0).verdict(interval([1, 2, 3, 4, 5])) == INCONCLUSIVE
    assert "above 0" in above.text() and "within [0.5, 0.9]" in band.text()
    with pytest.raises(ValueError, match="direction"):
        Rule("=", 0.0)
    with pytest.raises(ValueError, match="band"):
        Rule("within", band=(0.9, 0.5))


def test_per_seed_statistic_helpers():
    assert math.isclose(log10_ratio(200.0, 2.0), 2.0)
    assert math.isnan(log10_ratio(0.0, 1.0)) and math.isnan(log10_ratio(1.0, None))
    assert math.isnan(log10_ratio(math.nan, 1.0))
    assert fraction([True, False, True, True]) == 0.75 and math.isnan(fraction([]))


def test_range_condition_by_hand():
    eig = np.array([[-4.0, 2.0, 1e-9, 0.5],  # range: |-4|, 2, 0.5 (1e-9 < 1e-6 x 4 is flat): kappa 8, dim 3
                    [0.0, 0.0, 0.0, 0.0],  # no range
                    [3.0, 3.0, -3.0, 3.0]])  # isotropic up to sign: kappa 1
    kappa, dim = R.range_condition(eig)
    assert kappa[0] == 8.0 and dim[0] == 3
    assert math.isnan(kappa[1]) and dim[1] == 0
    assert kappa[2] == 1.0 and dim[2] == 4


# --------------------------------------------------------------------------------------------
# The claims' statistics on a hand-built ledger
# --------------------------------------------------------------------------------------------


def _e1(h_start: float, h_end: float, cond_end: float = 0.0, cond_start: float = 0.0) -> dict:
    return {"status": "finished", "start": {"h_std": h_start}, "history": [{"epoch": 1, "h_std": h_end}],
            "curvature": [{"epoch": 0, "cond_log_ratio": cond_start}, {"epoch": 1, "cond_log_ratio": cond_end}]}


def test_e1_statistics_by_hand():
    res = {R.e1_name("linear", False, 0.05, "collapsed", 0): _e1(1e-2, 1e-3),
           R.e1_name("gelu2", False, 0.05, "collapsed", 0): _e1(1e-3, 1e-1)}
    assert math.isclose(R.escape(res, R.e1_name("linear", False, 0.05, "collapsed", 0)), -1.0)
    assert math.isclose(R.escape(res, R.e1_name("gelu2", False, 0.05, "collapsed", 0)), 2.0)
    assert math.isnan(R.escape(res, "absent"))
    # ReLU gap: relu 1e-3, linear 2e-3, gelu 1e-1, swish 1e-3 -> smooth = 1e-2
    finals = {"relu2": 1e-3, "linear": 2e-3, "gelu2": 1e-1, "swish2": 1e-3}
    res = {R.e1_name(h, False, 0.005, "collapsed", 3): _e1(1.0, v) for h, v in finals.items()}
    assert math.isclose(R.relu_like_linear(res, False, 0.005, 3), 1.0 - math.log10(2.0))
    res[R.e1_name("swish2", False, 0.005, "collapsed", 3)]["status"] = "non-finite loss"  # a diverged run
    assert math.isnan(R.relu_like_linear(res, False, 0.005, 3))
    res = {R.e1_name("relu2", False, 0.05, "normal", 1): _e1(1.0, 1.0, cond_end=-0.5, cond_start=0.25)}
    assert R.conditioning(res, R.e1_name("relu2", False, 0.05, "normal", 1)) == -0.5
    assert R.conditioning(res, R.e1_name("relu2", False, 0.05, "normal", 1), "start") == 0.25


def _e2(negatives: list[bool], z_std: list[float], z_cond: list[float], cov_min: list[float]) -> dict:
    curv = [{"epoch": e, "negative": neg, "negative_G": True, "z_cov_min": lo, "z_cov_max": 1.0}
            for e, (neg, lo) in enumerate(zip(negatives, cov_min))]
    hist = [{"epoch": e, "z_std": s, "z_cond": c} for e, (s, c) in enumerate(zip(z_std, z_cond)) if e > 0]
    return {"status": "finished", "curvature": curv, "history": hist}


def test_e2_statistics_by_hand():
    # epochs 0..4; lambda_min negative at 0, 1 and 3
    run = _e2([True, True, False, True, False], [0, 0.1, 0.3, 0.2, 0.4], [0, 5.0, 7.0, 9.0, 8.0],
              [0, 1e-8, 1e-3, 1e-8, 0.5])
    res = {"E2-collapsed-relu2-s0": run}
    assert R.negative_fraction(res, "E2-collapsed-relu2-s0") == 0.5  # epochs 1..4: 2 of 4
    assert R.negative_fraction(res, "E2-collapsed-relu2-s0", first_epoch=2) == 1 / 3
    assert R.negative_fraction(res, "E2-collapsed-relu2-s0", "negative_G", 0) == 1.0
    # epochs 2..4: z_std (0.3, 0.2, 0.4) ranks (2, 1, 3); clamped cond (7, 9, 8) ranks (1, 3, 2);
    # rank differences (1, -2, 1): rho = 1 - 6 * 6 / (3 * 8) = -0.5
    assert math.isclose(R.spearman_e2(res, "E2-collapsed-relu2-s0"), -0.5)
    # unclamped cond = 1 / cov_min: (1e3, 1e8, 2) ranks (2, 3, 1); rank differences (0, -2, 2) -> 1 - 6 * 8 / 24
    assert math.isclose(R.spearman_e2(res, "E2-collapsed-relu2-s0", clamped=False), -1.0)
    assert R.clamp_fraction(res, "E2-collapsed-relu2-s0") == 1 / 3  # only epoch 3 (1e-8 < 1e-7)
    run["curvature"][2]["z_cov_min"] = 0.0  # a singular covariance: no unclamped condition number
    assert math.isnan(R.spearman_e2(res, "E2-collapsed-relu2-s0", clamped=False))


def test_a_claim_is_evaluated_from_its_per_seed_values():
    """E3.1 (h - z of the linear rotation probe < 0) on five hand-made seeds: values -2, -4, -6, -8, -10 points ->
    mean -6, interval -6 +- t s / sqrt 5 with s^2 = 10, reproduced; the control's values read the same way."""
    claim = next(c for c in R.CLAIMS if c.id == "E3.1")
    res = {}
    for s, (gap, control) in enumerate(zip((2, 4, 6, 8, 10), (-1, 1, -1, 1, 0))):
        protocols = {"b_raw": {"rot_linear_z": 0.60, "rot_linear_h": 0.60 - gap / 100},
                     "d_untrained_nobias": {"rot_linear_z": 0.60, "rot_linear_h": 0.60 - control / 100}}
        res[f"E3E4-s{s}"] = {"status": "finished", "seed": s, "experiment": "E3E4", "protocols": protocols}
    row = R.evaluate(claim, res)
    half = T975_4 * math.sqrt(10) / math.sqrt(5)
    assert row["seeds"] == [0, 1, 2, 3, 4] and np.allclose(row["values"], [-2, -4, -6, -8, -10])
    assert math.isclose(row["interval"]["value"], -6.0) and math.isclose(row["interval"]["high"], -6 + half)
    assert row["verdict"] == REPRODUCED
    assert math.isclose(row["controls"][0]["interval"]["value"], 0.0, abs_tol=1e-12)
    for s in range(5):  # the opposite sign everywhere: not reproduced
        p = res[f"E3E4-s{s}"]["protocols"]["b_raw"]
        p["rot_linear_h"] = 1.2 - p["rot_linear_h"]
    assert R.evaluate(claim, res)["verdict"] == NOT_REPRODUCED


def test_the_report_names_the_ledger_command_without_its_shard():
    cmd = "python -m scale.replicate --dataset digits --shard 1/3 --out d"
    assert R.ledger_command(cmd) == ("python -m scale.replicate --dataset digits --out d",
                                     " (in 3 processes, `--shard 0/3` to `--shard 2/3`)")
    assert R.ledger_command("python -m scale.replicate --quick") == ("python -m scale.replicate --quick", "")


def test_every_claim_has_a_rule_and_a_unique_id():
    ids = [c.id for c in R.CLAIMS]
    assert len(ids) == len(set(ids))
    assert {c.experiment for c in R.CLAIMS} == {"E1", "E2", "E3", "E4", "E5", "S3"}
    assert all(c.rule.direction in (">", "<", "within") for c in R.CLAIMS)
    assert set(R.NOT_RUN) == {"E6"}


def test_plan_is_seed_major_and_keeps_the_paper_settings(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    units = R.plan_units("digits", 2, quick=False)
    per_seed = len(units) // 2
    assert all(u.seed == 0 for u in units[:per_seed]) and all(u.seed == 1 for u in units[per_seed:])
    names = {u.name for u in units}
    assert len(names) == len(units)
    e1 = [u for u in units if u.experiment == "E1" and u.seed == 0]
    assert len(e1) == 21 + 4  # the paper's grid (linear: BatchNorm off) and four normal-start controls
    gelu = next(u for u in units if u.name == "E1-gelu2-bn0-lr0.05-normal-s1")
    args = list(gelu.argv)

    def last(flag):
        return args[len(args) - 1 - args[::-1].index(flag) + 1]

    assert last("--init") == "normal" and last("--seed") == "1" and last("--epochs") == str(R.DIGITS_EPOCHS["E1"])
    assert last("--method") == "simsiam" and last("--lr") == "0.05" and "--no-head-bias" in args
    assert R.main(["--dry-run", "--dataset", "cifar10", "--seeds", "1"]) == 0  # prints, writes nothing
    printed = capsys.readouterr().out
    assert "32 units (cifar10, 1 seeds)" in printed and all(f"  {c.id} " in printed for c in R.CLAIMS)
    assert not list(tmp_path.iterdir())
    cifar = R.plan_units("cifar10", 1, quick=False)
    e2 = next(u for u in cifar if u.name == "E2-collapsed-relu2-s0")
    assert "--track-hessian-every" not in e2.argv  # the ledger measures itself (LedgerProbe)
    a = list(e2.argv)
    assert a[a.index("--epochs") + 1] == "100" and a[a.index("--batch-size") + 1] == "256"


# --------------------------------------------------------------------------------------------
# The --quick pipeline, end to end: killed for real after some units, resumed, reported
# --------------------------------------------------------------------------------------------


def _units(path: Path) -> dict:
    return json.loads(path.read_text())["units"] if path.is_file() else {}


def _processes_of(out: Path) -> list[int]:
    """Live processes whose command line names ``out`` (a ledger and the worker processes it forked)."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes().decode(errors="replace")
            state = (proc / "stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if str(out) in cmd and state != "Z":
            pids.append(int(proc.name))
    return pids


def _quick_ledger_until(out: Path, units: int, sig: int) -> subprocess.Popen:
    """Start ``python -m scale.replicate --quick --out OUT`` in a subprocess, wait until ``results.json`` holds
    ``units`` units (or the process ended, or 240 s passed), then send it ``sig``."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "scale.replicate", "--quick", "--out", str(out)], cwd=out.parent,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 240
    while len(_units(out / "results.json")) < units and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    proc.send_signal(sig)
    return proc


@pytest.mark.slow
def test_quick_pipeline_killed_resumed_and_reported(tmp_path):
    out = tmp_path / "ledger"
    proc = _quick_ledger_until(out, 3, signal.SIGKILL)  # a real kill, mid-unit most likely
    proc.wait()
    for pid in _processes_of(out):  # its augmentation workers outlive a SIGKILL: end them here
        os.kill(pid, signal.SIGKILL)
    before = _units(out / "results.json")
    assert len(before) >= 3, proc.stderr.read().decode()[-2000:]  # results.json is whole: written atomically
    assert not list(out.glob("*.tmp*"))

    assert R.main(["--quick", "--out", str(out)]) == 0
    saved = json.loads((out / "results.json").read_text())
    units = saved["units"]
    plan = R.plan_units("digits", R.QUICK_SEEDS, quick=True, threads=2)
    assert set(units) == {u.name for u in plan}
    for name, rec in before.items():  # what the killed run finished was reused, not run again
        assert units[name]["finished_at"] == rec["finished_at"]
    assert all(r["git_commit"] not in ("", "unknown") and r["versions"]["torch"] for r in units.values())
    assert all(r["status"] in ("finished", "non-finite loss") for r in units.values())
    rows = {c["id"]: c for c in saved["claims"]}
    assert set(rows) == {c.id for c in R.CLAIMS}
    assert all(r["verdict"] in VERDICTS and len(r["values"]) == R.QUICK_SEEDS for r in rows.values())
    report = (out / "report.md").read_text()
    assert all(f"**{c.id}**" in report for c in R.CLAIMS) and "**E6**" in report
    for fig in ("e1_std.png", "e2_curvature.png", "e5_depth.png", "e4_study/report.md"):
        assert (out / fig).is_file(), fig
    e2 = units["E2-collapsed-relu2-s0"]["curvature"]
    assert len(e2) == R.QUICK_EPOCHS["E2"] + 1 and all(c["M_over_H"] == 0.0 for c in e2)  # ReLU: M = 0 exactly

    # a second run has nothing to do; --report-only rebuilds the same table from results.json
    mtime = (out / "results.json").stat().st_mtime_ns
    table = report[report.index("## The ledger"):report.index("## E1")]
    assert R.main(["--quick", "--out", str(out), "--report-only"]) == 0
    new = (out / "report.md").read_text()
    assert new[new.index("## The ledger"):new.index("## E1")] == table
    assert (out / "results.json").stat().st_mtime_ns >= mtime


def test_bad_input_is_one_line_and_leaves_files_alone(tmp_path, capsys):
    assert R.main(["--seeds", "0", "--out", str(tmp_path / "a")]) == 2
    assert "--seeds must be a positive integer" in capsys.readouterr().err
    assert R.main(["--redo", "E9", "--out", str(tmp_path / "a")]) == 2
    assert "--redo E9: unknown; valid: E1, E2, E3E4, E5" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()
    bad = tmp_path / "b"
    bad.mkdir()
    (bad / "results.json").write_text("[1, 2")  # not JSON
    assert R.main(["--quick", "--out", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not readable as a ledger" in err
    assert (bad / "results.json").read_text() == "[1, 2"
    (bad / "results.json").write_text('{"runs": []}')  # JSON, but not a ledger
    assert R.main(["--quick", "--out", str(bad), "--report-only"]) == 2
    assert "not a ledger written by scale.replicate" in capsys.readouterr().err
    assert R.main(["--report-only", "--out", str(tmp_path / "empty")]) == 1
    assert "nothing to report" in capsys.readouterr().err
    assert not (tmp_path / "empty").exists()


def test_an_unwritable_output_folder_is_exit_code_4(tmp_path, capsys, monkeypatch):
    """A real filesystem fault (the output folder would sit under a plain file): one line, exit code 4."""
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a folder")
    plan = R.plan_units
    monkeypatch.setattr(R, "plan_units", lambda *a, **k: [u for u in plan(*a, **k) if u.name == "E1-linear-bn0-lr0.05-"
                                                          "collapsed-s0"])
    assert R.main(["--quick", "--out", str(blocker / "ledger")]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write" in err
    assert blocker.read_text() == "not a folder"


def test_shards_share_one_ledger(tmp_path, monkeypatch, capsys):
    """``--shard 0/2`` runs the plan's even units only and merges its results into what another shard wrote (under
    the file lock), never over it; a bad ``--shard`` is refused in one line."""
    assert R.parse_shard("1/3") == (1, 3)
    for bad in ("2/2", "-1/2", "1", "a/b"):
        with pytest.raises(ValueError, match="--shard"):
            R.parse_shard(bad)
    assert R.main(["--shard", "2/2", "--out", str(tmp_path / "x")]) == 2 and "--shard" in capsys.readouterr().err
    plan = R.plan_units
    names = ("E1-linear-bn0-lr0.05-collapsed-s0", "E1-linear-bn0-lr0.05-normal-s0")
    monkeypatch.setattr(R, "plan_units", lambda *a, **k: [u for u in plan(*a, **k) if u.name in names])
    other = next(u for u in plan("digits", 1, True, threads=1) if u.name == names[1])
    out = tmp_path / "ledger"
    out.mkdir()
    theirs = {"status": "finished", "key": other.key(), "seed": 0, "experiment": "E1", "labels": other.labels,
              "start": {"h_std": 1.0}, "history": [{"epoch": 1, "h_std": 1.0}], "curvature": [], "git_commit": "x",
              "versions": {}, "seconds": 0.0, "finished_at": "another shard"}
    stale = dict(theirs, key=dict(other.key(), argv=["--epochs", "999"]), finished_at="a stale plan")
    (out / "results.json").write_text(json.dumps({"units": {names[1]: stale}}))
    assert R.main(["--quick", "--seeds", "1", "--shard", "0/2", "--out", str(out)]) == 0
    units = json.loads((out / "results.json").read_text())["units"]
    assert set(units) == {names[0]} and units[names[0]]["status"] == "finished"  # the stale unit is not carried
    ours = units[names[0]]
    (out / "results.json").write_text(json.dumps({"units": {names[0]: ours, names[1]: theirs}}))
    assert R.main(["--quick", "--seeds", "1", "--shard", "0/2", "--out", str(out)]) == 0  # nothing left to run
    units = json.loads((out / "results.json").read_text())["units"]
    assert units[names[1]]["finished_at"] == "another shard" and units[names[0]] == ours


def test_sigterm_stops_the_ledger_with_exit_code_130(tmp_path):
    """A real SIGTERM mid-unit: the trainer's signal handler stops the unit, the ledger stops too (it does not record
    the interruption as the unit's result and go on), exit code 130, and the finished units stay in results.json."""
    out = tmp_path / "ledger"
    proc = _quick_ledger_until(out, 1, signal.SIGTERM)
    assert proc.wait(timeout=120) == 130
    err = proc.stderr.read().decode()
    assert "interrupted" in err and "rerun the same command to continue" in err
    units = _units(out / "results.json")
    assert units and all(r["status"] == "finished" for r in units.values())
    time.sleep(1.0)
    assert _processes_of(out) == [] or sys.platform != "linux"  # no augmentation worker is left behind
