"""scale.ledger and scale.replicate: the claims' per-seed statistics on hand-built units, the claims as data
(each pointing to its line of docs/paper.md), the store (write once, never lose a unit, another plan ignored and
reported, a v1 ledger converted), registration and amendments, the plan and its cost, and the --quick pipeline
end to end (killed for real mid-way, then resumed)."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from scale import replicate as R
from scale.ledger import claims, plan, runner, store, views
from scale.ledger import readers as rd
from scale.ledger.claims import CLAIMS
from scale.ledger.evaluate import evaluate
from scale.ledger.probe import range_condition
from scale.ledger.verdicts import (
    CATEGORIES,
    INCONCLUSIVE,
    NOT_MEASURABLE,
    NOT_REPRODUCED,
    PREMISE_NOT_MET,
    REPRODUCED,
    SIGN_ONLY,
)

T975_4 = 2.7764451051977934  # t_{0.975, 4}
ROOT = Path(__file__).resolve().parent.parent
V1_RESULTS = ROOT / "docs" / "replication" / "v1" / "results.json"
ONE_UNIT = "E1-linear-bn0-lr0.05-collapsed"  # a --quick unit of about a second


def test_range_condition_by_hand():
    eig = np.array([[-4.0, 2.0, 1e-9, 0.5],  # range: |-4|, 2, 0.5 (1e-9 < 1e-6 x 4 is flat): kappa 8, dim 3
                    [0.0, 0.0, 0.0, 0.0],  # no range
                    [3.0, 3.0, -3.0, 3.0]])  # isotropic up to sign: kappa 1
    kappa, dim = range_condition(eig)
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
    res = {rd.e1_name("linear", False, 0.05, "collapsed", 0): _e1(1e-2, 1e-3),
           rd.e1_name("gelu2", False, 0.05, "collapsed", 0): _e1(1e-3, 1e-1)}
    assert math.isclose(rd.escape(res, rd.e1_name("linear", False, 0.05, "collapsed", 0)), -1.0)
    assert math.isclose(rd.escape(res, rd.e1_name("gelu2", False, 0.05, "collapsed", 0)), 2.0)
    assert math.isnan(rd.escape(res, "absent"))
    # ReLU gap: relu 1e-3, linear 2e-3, gelu 1e-1, swish 1e-3 -> smooth = 1e-2
    finals = {"relu2": 1e-3, "linear": 2e-3, "gelu2": 1e-1, "swish2": 1e-3}
    res = {rd.e1_name(h, False, 0.005, "collapsed", 3): _e1(1.0, v) for h, v in finals.items()}
    assert math.isclose(rd.relu_like_linear(res, False, 0.005, 3), 1.0 - math.log10(2.0))
    res[rd.e1_name("swish2", False, 0.005, "collapsed", 3)]["status"] = "non-finite loss"  # a diverged run
    assert math.isnan(rd.relu_like_linear(res, False, 0.005, 3))
    res = {rd.e1_name("relu2", False, 0.05, "normal", 1): _e1(1.0, 1.0, cond_end=-0.5, cond_start=0.25)}
    assert rd.conditioning(res, rd.e1_name("relu2", False, 0.05, "normal", 1)) == -0.5
    assert rd.conditioning(res, rd.e1_name("relu2", False, 0.05, "normal", 1), "start") == 0.25


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
    assert rd.negative_fraction(res, "E2-collapsed-relu2-s0") == 0.5  # epochs 1..4: 2 of 4
    assert rd.negative_fraction(res, "E2-collapsed-relu2-s0", first_epoch=2) == 1 / 3
    assert rd.negative_fraction(res, "E2-collapsed-relu2-s0", "negative_G", 0) == 1.0
    # epochs 2..4: z_std (0.3, 0.2, 0.4) ranks (2, 1, 3); clamped cond (7, 9, 8) ranks (1, 3, 2);
    # rank differences (1, -2, 1): rho = 1 - 6 * 6 / (3 * 8) = -0.5
    assert math.isclose(rd.spearman_e2(res, "E2-collapsed-relu2-s0"), -0.5)
    # unclamped cond = 1 / cov_min: (1e3, 1e8, 2) ranks (2, 3, 1); rank differences (0, -2, 2) -> 1 - 6 * 8 / 24
    assert math.isclose(rd.spearman_e2(res, "E2-collapsed-relu2-s0", clamped=False), -1.0)
    assert rd.clamp_fraction(res, "E2-collapsed-relu2-s0") == 1 / 3  # only epoch 3 (1e-8 < 1e-7)
    run["curvature"][2]["z_cov_min"] = 0.0  # a singular covariance: no unclamped condition number
    assert math.isnan(rd.spearman_e2(res, "E2-collapsed-relu2-s0", clamped=False))


def test_degenerate_correlation_is_not_measurable():
    """Every epoch at the 1e-7 clamp: the clamped condition number is lambda_max / 1e-7, a variance, correlated with
    the std by construction (the v1 --quick ledger reported it as rho 1 [1, 1], reproduced): NaN, not measurable."""
    res = {}
    for s in range(3):
        run = _e2([True] * 5, [0, 0.1, 0.3, 0.2, 0.4], [0, 5.0, 7.0, 9.0, 8.0], [1e-8] * 5)
        res[f"E2-normal-swish2-s{s}"] = dict(run, seed=s, experiment="E2")
    assert math.isnan(rd.spearman_e2(res, "E2-normal-swish2-s0"))
    row = evaluate(next(c for c in CLAIMS if c.id == "E2.4"), res)
    assert row["verdict"] == NOT_MEASURABLE and row["interval"]["n"] == 0


def _e3e4(gaps, controls, learned: bool = True) -> dict:
    """E3E4 units whose networks learned (``learned``), the controls the untrained heads under a (d) and b (g)."""
    res = {}
    for s, (g, c) in enumerate(zip(gaps, controls)):
        untrained = {"rot_linear_z": 0.60, "rot_linear_h": 0.60 - c / 100}
        protocols = {"b_raw": {"rot_linear_z": 0.60, "rot_linear_h": 0.60 - g / 100},
                     "d_untrained_nobias": untrained, "g_untrained_raw_renorm": dict(untrained)}
        res[f"E3E4-s{s}"] = {"status": "finished", "seed": s, "experiment": "E3E4", "protocols": protocols,
                             "premise": {"raw": {"training": {"learned": learned, "findings": []}}}}
    return res


def test_a_claim_is_evaluated_from_its_per_seed_values():
    """E3.1 (h - z of the linear rotation probe < 0) on five hand-made seeds: values -2, -4, -6, -8, -10 points ->
    mean -6, interval -6 +- t s / sqrt 5 with s^2 = 10 = [-9.93, -2.07]: the sign reproduced and stable, the twin
    (trained minus untrained under b: -3, -3, -7, -7, -10) holds, and the paper's -14.72 lies outside the interval:
    "sign only; the paper's value excluded"; the opposite sign: not reproduced."""
    claim = next(c for c in CLAIMS if c.id == "E3.1")
    res = _e3e4((2, 4, 6, 8, 10), (-1, 1, -1, 1, 0))
    row = evaluate(claim, res)
    half = T975_4 * math.sqrt(10) / math.sqrt(5)
    assert row["seeds"] == [0, 1, 2, 3, 4] and np.allclose(row["values"], [-2, -4, -6, -8, -10])
    assert math.isclose(row["interval"]["value"], -6.0) and math.isclose(row["interval"]["high"], -6 + half)
    assert row["sign"] == REPRODUCED and row["stability"] == "stable" and row["seeds_needed"] is None
    assert row["twin_result"]["outcome"] == "holds" and np.allclose(row["twin_result"]["values"], [-3, -3, -7, -7, -10])
    assert row["verdict"] == SIGN_ONLY
    assert row["label"] == "sign only (reproduced); the paper's value excluded under protocol b"
    assert evaluate(claim, _e3e4((2, 4, 6, 8, 10), (-1, 1, -1, 1, 0), learned=False))["verdict"] == PREMISE_NOT_MET
    assert math.isclose(row["control_results"][0]["interval"]["value"], 0.0, abs_tol=1e-12)
    for r in res.values():
        p = r["protocols"]["b_raw"]
        p["rot_linear_h"] = 1.2 - p["rot_linear_h"]
    assert evaluate(claim, res)["verdict"] == NOT_REPRODUCED


def test_leave_one_seed_out_flags_a_fragile_verdict_and_inconclusive_rows_get_seeds_needed():
    claim = next(c for c in CLAIMS if c.id == "E3.1")
    # three seeds at -1, -1.2, -0.8 points: mean -1, half-width 4.303 x 0.2 / sqrt 3 = 0.50, reproduced; any two of
    # them: half-width 12.71 x s / sqrt 2 > 1, inconclusive, so every seed's removal changes the verdict
    row = evaluate(claim, _e3e4((1, 1.2, 0.8), (0,) * 3))
    assert row["sign"] == REPRODUCED and row["stability"] == "fragile (without seed 0, 1, 2)"
    row = evaluate(claim, _e3e4((1, -1, 2), (0, 0, 0)))  # mean -0.667 points, s = 1.528: inconclusive
    assert row["verdict"] == INCONCLUSIVE
    n = row["seeds_needed"]  # by hand: the first n with t_{0.975, n-1} s / sqrt(n) < 0.667
    s = float(np.std([-1, 1, -2], ddof=1))
    from scipy.stats import t
    want = next(m for m in range(4, 51) if t.ppf(0.975, m - 1) * s / math.sqrt(m) < 2 / 3)
    assert n == want


def test_a_protocol_control_that_fails_the_rule_qualifies_the_verdict():
    """E4.1 holds under protocol a and fails under c (BatchNorm re-estimated): reproduced only under the paper's
    protocol, naming c."""
    claim = next(c for c in CLAIMS if c.id == "E4.1")
    res = {}
    for s, (a, c) in enumerate(((50.0, 0.12), (55.0, 0.11), (48.0, 0.13))):
        prot = {"a_paper": {"compression": a}, "c_bn_renorm": {"compression": c}, "b_raw": {"compression": c},
                "e_trained_normalized": {"compression": c}, "d_untrained_nobias": {"compression": 1.0},
                "h_untrained_raw_bn": {"compression": 1.0}}
        res[f"E3E4-s{s}"] = {"status": "finished", "seed": s, "experiment": "E3E4", "protocols": prot,
                             "premise": {"raw": {"training": {"learned": True, "findings": []}}}}
    row = evaluate(claim, res)
    assert row["verdict"] == "reproduced only under the paper's protocol"
    assert "BatchNorm re-estimated (c)" in row["contradicting"]
    assert "fails under BatchNorm re-estimated (c)" in row["label"]


def test_every_claim_is_data_pointing_to_its_line_of_the_paper():
    lines = (ROOT / "docs" / "paper.md").read_text().splitlines()
    ids = [c.id for c in CLAIMS]
    assert len(ids) == len(set(ids))
    for c in CLAIMS:
        file, line, phrase = c.source
        assert file == "docs/paper.md" and phrase in lines[line - 1], (c.id, line, phrase)
        assert c.known, c.id
    tables = {c.table for c in CLAIMS}
    assert tables == {"paper", "mechanism", "project", "check"}
    assert {c.id for c in CLAIMS if c.table == "project"} == {"S3.1", "S3.2", "S3.3", "S3.4", "E3.3"}
    data = claims.rules_data()
    assert json.loads(json.dumps(data)) == data  # plain data
    assert claims.rules_hash() == plan.digest(data) and len(claims.rules_hash()) == 64


def _only(names):
    """A plan_units keeping only the units whose name starts with one of ``names``."""
    full = plan.plan_units

    def chosen(*a, **k):
        return [u for u in full(*a, **k) if any(u.name.startswith(n) for n in names)]
    return chosen


def _unit_files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (out / "units").glob("*.json")}


def test_a_rerun_with_fewer_seeds_loses_no_unit(tmp_path, monkeypatch):
    """--seeds 2, then --seeds 1 into the same OUT: the number of seeds is part of the registered plan (a store is
    never sized by its files' names), so the second is another plan; it adds its own unit, and the first plan's two
    stay in the store, untouched, and in its view when rebuilt (the first ledger format dropped seed 1's)."""
    monkeypatch.setattr(plan, "plan_units", _only([ONE_UNIT]))
    out = tmp_path / "ledger"
    assert R.main(["--quick", "--seeds", "2", "--out", str(out)]) == 0
    files = _unit_files(out)
    assert len(files) == 2
    assert R.main(["--quick", "--seeds", "1", "--out", str(out)]) == 0
    after = _unit_files(out)
    assert {k: after[k] for k in files} == files and len(after) == 3  # nothing rewritten, nothing lost
    assert sum("plan quick-" in line for line in json.loads((out / "results.json").read_text())["ignored"]) == 2
    assert R.main(["--quick", "--seeds", "2", "--out", str(out), "--report-only"]) == 0
    view = json.loads((out / "results.json").read_text())
    assert set(view["units"]) == {f"{ONE_UNIT}-s0", f"{ONE_UNIT}-s1"}
    assert view["registration"]["rules_hash"] == claims.rules_hash()


def test_a_v1_ledger_is_converted_and_another_plan_never_loses_it(tmp_path):
    """A copy of the v1 ledger (160 units in one results.json) given `--quick --shard 5/64`: the first format kept
    1 of 160 units. Now every v1 unit becomes a unit file first, the quick plan adds its own, and the view of the
    quick plan lists the 160 as another plan's."""
    out = tmp_path / "replication"
    out.mkdir()
    shutil.copy(V1_RESULTS, out / "results.json")
    v1 = json.loads(V1_RESULTS.read_text())["units"]
    assert R.main(["--quick", "--shard", "5/64", "--out", str(out)]) == 0
    files = _unit_files(out)
    converted = {n: json.loads(b) for n, b in files.items() if n.startswith("v1--")}
    assert len(converted) == len(v1) == 160
    for rec in converted.values():
        assert {k: v for k, v in rec.items() if k not in ("plan", "key_hash", "device", "threads")} == v1[rec["name"]]
        assert (rec["device"], rec["threads"]) == ("cpu", 1)  # what its file's name says, in its content too
    view = json.loads((out / "results.json").read_text())
    assert len(view["units"]) == 1 and sum("plan v1" in line for line in view["ignored"]) == 160
    assert R.main(["--report-only", "--plan", "v1", "--out", str(out)]) == 0
    v1_view = json.loads((out / "v1-reread" / "results.json").read_text())
    assert len(v1_view["units"]) == 160
    assert "v1 data read under today's rules" in (out / "v1-reread" / "report.md").read_text()
    assert _unit_files(out) == files


def unit_record(plan_id: str, name: str, device: str = "cpu", threads: int = 1, **key_extra) -> dict:
    """A ledger unit's record as the store checks it (its key hashes to its key_hash; experiment and seed its key's)."""
    key = {"experiment": "E1", "seed": 0, **key_extra}
    return {"plan": plan_id, "name": name, "device": device, "threads": threads, "key": key,
            "key_hash": plan.digest(key)[:12], "experiment": "E1", "seed": 0, "labels": {}, "status": "finished",
            "config": {}, "git_commit": "c", "seconds": 1.0}


def test_units_of_another_thread_count_are_never_mixed_and_files_are_written_once(tmp_path):
    out = tmp_path / "s"
    rec, stale = unit_record("p", "E1-a-s0"), unit_record("p", "E1-a-s0", version=2)
    k0 = rec["key_hash"]
    keys = {"E1-a-s0": k0}
    assert store.write_once(out / "units" / store.unit_filename("p", "E1-a-s0", "cpu", 1, k0), rec)
    assert not store.write_once(out / "units" / store.unit_filename("p", "E1-a-s0", "cpu", 1, k0), {"v": 2})
    store.write_once(out / "units" / store.unit_filename("p", "E1-a-s0", "cpu", 2, k0), dict(rec, threads=2))
    store.write_once(out / "units" / store.unit_filename("p", "E1-a-s0", "cpu", 1, stale["key_hash"]), stale)
    units, ignored = store.load_units(out, "p", keys, "cpu", 1)
    assert units == {"E1-a-s0": rec} and len(ignored) == 2
    assert any("2 threads" in line for line in ignored) and any("key" in line for line in ignored)
    assert not list((out / "units").glob(".*"))  # no temporary file left


def test_registration_precedes_the_first_unit_and_a_changed_rule_needs_an_amendment(tmp_path, monkeypatch, capsys):
    from scale.ledger import unit_record as unit_runner

    out = tmp_path / "ledger"
    monkeypatch.setattr(plan, "plan_units", _only([ONE_UNIT]))
    seen = []
    real = unit_runner.run_unit

    def spy(*a, **k):
        seen.append(json.loads((out / "results.json").read_text()))
        return real(*a, **k)

    monkeypatch.setattr(unit_runner, "run_unit", spy)
    assert R.main(["--quick", "--seeds", "1", "--out", str(out)]) == 0
    assert seen and seen[0]["units"] == {} and seen[0]["registration"]["rules_hash"] == claims.rules_hash()
    assert seen[0]["registration"]["code_commit"]
    monkeypatch.setattr(claims, "rules_hash", lambda: "0" * 64)  # the rules changed after registration
    capsys.readouterr()
    assert R.main(["--quick", "--seeds", "1", "--out", str(out), "--report-only"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--amend" in err
    assert R.main(["--quick", "--seeds", "1", "--out", str(out), "--report-only", "--amend", "a bar fixed"]) == 0
    text = (out / "report.md").read_text()
    assert "a bar fixed" in text and "-> 000000000000" in text
    assert R.main(["--quick", "--seeds", "1", "--out", str(out), "--report-only"]) == 0  # logged: accepted now


def test_dry_run_costs_every_unit_on_any_device_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert R.main(["--dry-run", "--device", "cuda", "--dataset", "cifar10", "--seeds", "1",
                   "--experiments", "E2,E5"]) == 0
    out = capsys.readouterr().out
    assert "6 units" in out and "assumed" in out and "estimated:" in out and claims.rules_hash() in out
    assert all(f"  {c.id} " in out for c in CLAIMS)
    assert not list(tmp_path.iterdir())


def test_plan_is_seed_major_keeps_the_paper_settings_and_takes_epochs():
    units = plan.plan_units("digits", 2, quick=False)
    per_seed = len(units) // 2
    assert all(u.seed == 0 for u in units[:per_seed]) and all(u.seed == 1 for u in units[per_seed:])
    assert len({u.name for u in units}) == len(units)
    assert len([u for u in units if u.experiment == "E1" and u.seed == 0]) == 21 + 4
    cfg = next(u for u in units if u.name == "E1-gelu2-bn0-lr0.05-normal-s1").config()
    assert (cfg.lr, cfg.head_bias, cfg.init, cfg.seed, cfg.augment_path) == (0.05, False, "normal", 1, "batched")
    short = plan.plan_units("digits", 1, quick=False, epochs=plan.parse_epochs("E2=3"), experiments=("E2",))
    assert len(short) == 3 and all(u.epochs == 3 for u in short)
    assert short[0].key_hash() != plan.plan_units("digits", 1, False, experiments=("E2",))[0].key_hash()
    for bad in ("0", "E9=2", "x"):
        with pytest.raises(ValueError, match="--epochs"):
            plan.parse_epochs(bad)


def test_bad_input_is_one_line_and_leaves_files_alone(tmp_path, capsys):
    for argv, words in ((["--seeds", "0"], "--seeds must be a positive integer"),
                        (["--experiments", "E9"], "--experiments E9: unknown E9; valid: E1, E2, E3E4, E5"),
                        (["--epochs", "E1=x"], "--epochs takes N"), (["--shard", "2/2"], "--shard K/N"),
                        (["--budget-s", "-1"], "must not be negative")):
        assert R.main([*argv, "--out", str(tmp_path / "a")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "a").exists()
    bad = tmp_path / "b"
    bad.mkdir()
    (bad / "results.json").write_text("[1, 2")  # not JSON
    assert R.main(["--quick", "--out", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not readable" in err and (bad / "results.json").read_text() == "[1, 2"
    (bad / "results.json").write_text('{"runs": []}')  # JSON, but not a ledger
    assert R.main(["--quick", "--out", str(bad)]) == 2
    assert "not a ledger written by scale.replicate" in capsys.readouterr().err
    assert R.main(["--report-only", "--out", str(tmp_path / "empty")]) == 1
    assert "nothing to report" in capsys.readouterr().err and not (tmp_path / "empty").exists()


def _report_inputs(quick: bool) -> tuple[dict, dict]:
    """A registration and three E3/E4 units to build a report from."""
    reg = {"plan": "p", "plan_hash": "0" * 64, "rules_hash": claims.rules_hash(), "code_commit": "c",
           "registered_at": "now", "command": "python -m scale.replicate" + (" --quick" if quick else ""),
           "settings": runner.plan_settings("digits", quick, None, "cpu", 1)}
    res = _e3e4((2, 4, 6), (0, 0, 0))
    for r in res.values():
        r.update(git_commit="c", seconds=1.0)
    return reg, res


def test_quick_report_has_its_banner_and_no_bold_verdict():
    reg, res = _report_inputs(quick=True)
    view, text = views.build(Path("/nonexistent-figures"), reg, [], res, [])
    assert views.BANNER == "pipeline check: not evidence" and views.BANNER in text and view["banner"]
    assert "**" not in text
    assert "--quick: digits, 64 training images" in text  # its own settings in the deviations
    assert "## The project's own questions" in text and "## The mechanism" in text



def test_a_partial_store_is_reported_in_progress_first():
    """A plan with fewer units stored than it has says so before any verdict (a view of the units so far, not the
    registration's result), its title the registered seeds and those stored; the whole plan stored carries no
    such banner."""
    reg, res = _report_inputs(quick=False)
    reg["settings"]["seeds"] = 10
    view, text = views.build(Path("/nonexistent-figures"), reg, [], res, [], planned=320)
    assert text.startswith("# The paper's claims, replicated on digits: 10 seeds (units of 3 stored so far)\n")
    first = text.index(f"> {views.IN_PROGRESS}: 3 of the plan's 320 units are stored")
    assert first < text.index("## Verdicts") and view["banner"] == views.IN_PROGRESS
    view, text = views.build(Path("/nonexistent-figures"), reg, [], res, [], planned=3)
    assert views.IN_PROGRESS not in text and view["banner"] is None

# --------------------------------------------------------------------------------------------
# The --quick pipeline, end to end: killed for real after some units, resumed, reported
# --------------------------------------------------------------------------------------------


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
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "scale.replicate", "--quick", "--out", str(out)], cwd=out.parent,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 240
    while len(list((out / "units").glob("*.json"))) < units and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    proc.send_signal(sig)
    return proc


@pytest.mark.slow
def test_quick_pipeline_killed_resumed_and_reported(tmp_path):
    out = tmp_path / "ledger"
    proc = _quick_ledger_until(out, 3, signal.SIGKILL)
    proc.wait()
    for pid in _processes_of(out):  # its augmentation workers outlive a SIGKILL: end them here
        os.kill(pid, signal.SIGKILL)
    before = _unit_files(out)
    assert len(before) >= 3, proc.stderr.read().decode()[-2000:]
    assert R.main(["--quick", "--out", str(out)]) == 0
    after = _unit_files(out)
    assert all(after[n] == b for n, b in before.items())  # what the killed run finished was kept, not rerun
    view = json.loads((out / "results.json").read_text())
    assert len(view["units"]) == len(plan.plan_units("digits", plan.QUICK_SEEDS, True)) == len(after)
    assert all(r["verdict"] in CATEGORIES for r in view["claims"]) and len(view["claims"]) == len(CLAIMS)
    assert all(r["interval"]["n"] == 0 or r["kind"] != "fraction" or 0 <= r["interval"]["low"] <= 1
               for r in view["claims"] if r["interval"]["n"] > 1)
    text = (out / "report.md").read_text()
    assert views.BANNER in text and "**" not in text
    for fig in ("e1_std.png", "e2_curvature.png", "e5_depth.png", "e4_study/report.md"):
        assert (out / fig).is_file(), fig
    assert R.main(["--quick", "--out", str(out), "--report-only"]) == 0
    assert (out / "report.md").read_text().split("## Alternatives")[0] == text.split("## Alternatives")[0]


def test_sigterm_stops_the_ledger_with_exit_code_130(tmp_path):
    out = tmp_path / "ledger"
    proc = _quick_ledger_until(out, 1, signal.SIGTERM)
    assert proc.wait(timeout=120) == 130
    err = proc.stderr.read().decode()
    assert "interrupted" in err and "rerun the same command to continue" in err
    assert list((out / "units").glob("*.json"))
    time.sleep(1.0)
    assert _processes_of(out) == [] or sys.platform != "linux"


def test_mechanism_readers_by_hand():
    """E5's depth slope (x = 1, 2, 3: (y3 - y1) / 2), the mechanism record at the start and the end of a run, and a
    section of a unit's record; absent values are NaN."""
    res = {f"E5-depth{d}-s0": {"status": "finished", "protocols": {"b_raw": {"rot_linear_h": h, "rot_linear_z": 0.5}}}
           for d, h in ((1, 0.50), (2, 0.46), (3, 0.40))}
    slope = rd.depth_slope(res, 0, lambda name: rd.gap(res, name, "b_raw", "rot_linear"))
    assert math.isclose(slope, (-10.0 - 0.0) / 2)
    del res["E5-depth2-s0"]
    assert math.isnan(rd.depth_slope(res, 0, lambda name: rd.gap(res, name, "b_raw", "rot_linear")))
    run = {"status": "finished", "timescale": {"log10_drift_ratio": 2.5},
           "curvature": [{"epoch": 0, "mechanism": {"rho_rel": 0.3}}, {"epoch": 5, "mechanism": {"rho_rel": 1e-6}}]}
    res = {"E1-gelu2-bn0-lr0.05-collapsed-s0": run}
    assert rd.section(res, "E1-gelu2-bn0-lr0.05-collapsed-s0", "timescale", "log10_drift_ratio") == 2.5
    assert math.isnan(rd.section(res, "E1-gelu2-bn0-lr0.05-collapsed-s0", "tangent", "log10_tangent_gain"))
    assert rd.mechanism_at(res, "E1-gelu2-bn0-lr0.05-collapsed-s0", "rho_rel", "start") == 0.3
    assert rd.mechanism_at(res, "E1-gelu2-bn0-lr0.05-collapsed-s0", "rho_rel", "end") == 1e-6
    m8 = next(c for c in CLAIMS if c.id == "M.8")
    assert math.isclose(m8.value(res, 0), -6.0)  # rho_rel 1e-6 at the end: below the floor 1e-3 (log10 -3)
    assert m8.rule.outcome(-6.5, -5.5) == "fails"


def test_budget_stops_starting_units_and_the_next_invocation_continues(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(plan, "plan_units", _only([ONE_UNIT]))
    out = tmp_path / "ledger"
    assert R.main(["--quick", "--seeds", "1", "--budget-s", "0", "--out", str(out)]) == 0
    assert "--budget-s 0 spent; 1 units left" in capsys.readouterr().out
    assert not _unit_files(out) and json.loads((out / "results.json").read_text())["registration"]
    assert R.main(["--quick", "--seeds", "1", "--out", str(out)]) == 0
    assert len(_unit_files(out)) == 1


def test_determinism_rows_compare_the_same_units_at_another_thread_count(tmp_path):
    """Two plans that differ only in threads, each with unit E3E4-s0: the report's determinism rows give each claim's
    per-seed difference (E3.1: h - z of the rotation probe, 2 points against 3.5 points: -2 - (-3.5) = +1.5)."""
    out = tmp_path / "ledger"
    one, two = (runner.plan_settings("digits", True, None, "cpu", t) for t in (1, 2))
    key = runner.expected_keys(one, 1)["E3E4-s0"]
    assert key == runner.expected_keys(two, 1)["E3E4-s0"]  # where a unit ran is not in its key
    unit = next(u for u in runner.settings_units(one, 1) if u.name == "E3E4-s0")
    res = {}
    for settings, g in ((one, 2.0), (two, 3.5)):
        pid = runner.plan_id(settings)
        store.register(out, pid, runner.registration_record(settings, "test"))
        rec = _e3e4((g,), (0.0,))["E3E4-s0"]
        rec.update(key=unit.key(), labels=unit.labels, config=unit.config(settings["threads"]).to_dict(),
                   git_commit="c", seconds=1.0)
        store.save_unit(out, pid, "E3E4-s0", "cpu", settings["threads"], key, json.loads(json.dumps(rec)))
        res[settings["threads"]] = rec
    mine, _ = store.load_units(out, runner.plan_id(one), {"E3E4-s0": key}, "cpu", 1)
    rows = views.determinism(out, one, mine)
    e31 = next(r for r in rows if r.startswith("| E3.1 |"))
    assert "threads 1 vs 2" in e31 and "+1.5" in e31


def test_the_registrations_hold_their_rules_and_the_one_in_force_todays():
    """Every committed registration (v2 and v3 kept as records in ``docs/replication/v2``, ``v3``; the ledger in
    force at the top of ``docs/replication``) holds the rules its hash names; the one in force holds today's rules,
    or its last amendment does (``--amend``): v4's, registered at the top. A record's rules may differ from today's
    without an amendment."""
    ledger = ROOT / "docs" / "replication"
    regs = sorted(ledger.glob("**/registrations/*.json"))
    assert {p.parent.parent.name for p in regs} >= {"v2", "v3"}, "the v2 and v3 registrations are not committed"
    for path in regs:
        reg = json.loads(path.read_text())
        assert reg["rules_hash"] == plan.digest(reg["rules"]), path  # the hash is of the rules it holds
    in_force = sorted((ledger / "registrations").glob("*.json"))
    assert in_force, "no registration in force at the top of docs/replication"
    for path in in_force:  # in force: today's rules
        reg = json.loads(path.read_text())
        logged = store.amendments(ledger, reg["plan"])
        assert (logged[-1]["to_hash"] if logged else reg["rules_hash"]) == claims.rules_hash(), path.name


def test_reread_is_a_dry_run_into_another_folder_that_leaves_the_store_alone(tmp_path, capsys):
    """``--report-only --reread DEST`` reads a registered plan's stored units under today's rules into DEST, its
    report opening with the note that says so; the store is byte for byte as it was. Refused (exit 2, one line):
    without --report-only, into OUT itself, and where a folder it writes in DEST is a link."""
    v3 = ROOT / "docs" / "replication" / "v3"
    out = tmp_path / "v3"
    shutil.copytree(v3 / "registrations", out / "registrations")
    (out / "units").mkdir()
    for f in (v3 / "units").glob("511cfdd496f5--E3E4-s*.json"):
        shutil.copy(f, out / "units" / f.name)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    args = ["--report-only", "--plan", "511cfdd496f5", "--out", str(out)]
    assert R.main(["--plan", "511cfdd496f5", "--out", str(out), "--reread", str(tmp_path / "d")]) == 2
    assert R.main([*args, "--reread", str(out)]) == 2
    (tmp_path / "linked").mkdir()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "e4_study").symlink_to(tmp_path / "linked")
    assert R.main([*args, "--reread", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("scale.replicate: error: ") for line in err), err
    assert not any((tmp_path / "linked").iterdir())
    assert R.main([*args, "--reread", str(tmp_path / "d")]) == 0
    text = (tmp_path / "d" / "report.md").read_text()
    assert "> A dry run, not a registered test: plan 511cfdd496f5's units" in text
    view = json.loads((tmp_path / "d" / "results.json").read_text())
    assert view["registration"]["rules_hash"] == claims.rules_hash() != view["registration"]["registered_rules_hash"]
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
