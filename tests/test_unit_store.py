"""The one unit store below the grid and the ledger (``scale.unit_store``): a unit file is what its name says before it
is used, every record is checked against its schema before any field is read, nothing is sized by a file name, no
output folder is a link, and out-of-range arguments are one line. One test per failure of the store's attack
(issue 50, 16 cases), each on real files: a --quick ledger of two E1 units (``python -m scale.replicate``, a few
seconds, built once) and a grid plan folder written as ``scale.paper`` writes it.

    silent wrong results   a unit file copied over another unit's name, in the ledger and in the grid; a unit whose
                           content says another plan, device, thread count or head (ledger and grid)
    crashes                a ledger unit {"mine": 1}; a registration holding a list or without rules_hash; an
                           amendment holding a list or numbered by a string
    hangs                  one stray empty file named ...--E5-depth1-s999999999--... (and -s20000) in units/
    write outside --out    OUT/units (and every other folder the store writes) a symbolic link
    unclear                --seed 99999999999999999999999 (and --seeds); --amend "   "
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from scale import paper, paper_report, replicate
from scale import run as scale_run
from scale.grid import unit_files as grid_units
from scale.ledger import runner
from scale.unit_store.schema import MAX_SEEDS

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
DEADLINE_S = 120  # a --report-only of two quick units takes seconds; past this it hangs
MAX_RSS_KB = 1 << 20  # 1 GiB: the stray name once took 1.9 GB
A, B = "E1-relu2-bn0-lr0.05-collapsed-s0", "E1-swish2-bn0-lr0.05-collapsed-s0"  # two --quick units, ~1 s each
QUICK = ["--quick", "--experiments", "E1"]
SETTINGS = runner.plan_settings("digits", True, None, "cpu", 1)
PLAN = runner.plan_id(SETTINGS)


# --------------------------------------------------------------------------------------------
# The real files: a --quick ledger of two units, a grid plan of E2's three runs
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ledger_template(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ledger") / "L"
    assert replicate.main([*QUICK, "--out", str(out), "--units", f"{A},{B}"]) == 0
    return out


@pytest.fixture
def ledger(ledger_template, tmp_path) -> Path:
    out = tmp_path / "L"
    shutil.copytree(ledger_template, out)
    return out


def unit_file(out: Path, name: str) -> Path:
    return next((out / "units").glob(f"*--{name}--*.json"))


def edit(path: Path, change) -> None:
    rec = json.loads(path.read_text())
    change(rec)
    path.write_text(json.dumps(rec))


def report_only(out: Path, capsys, *extra: str) -> tuple[int, dict, list[str]]:
    code = replicate.main([*QUICK, "--out", str(out), "--report-only", *extra])
    err = capsys.readouterr().err.strip().splitlines()
    view = json.loads((out / "results.json").read_text()) if code == 0 else {}
    return code, view, err


def grid(root: Path) -> Path:
    """A grid plan folder as scale.paper writes it (the manifest of E2's three --quick runs) with each run's unit
    file in OUT/units, its h std and lambda_min its own (normal/swish2: 0.111 and -0.5)."""
    runs = paper.plan("digits", "resnet18", quick=True, experiments=("E2",))
    home = root / grid_units.plan_id("digits", "resnet18", True, None)
    home.mkdir(parents=True)
    (home / "manifest.json").write_text(json.dumps({
        "command": "python -m scale.paper --quick", "dataset": "digits", "backbone": "resnet18", "quick": True,
        "experiments": ["E2"], "assumptions": {}, "runs": [dict(asdict(r), argv=r.argv) for r in runs],
        "git_commit": "c", "versions": {}}))
    (root / "units").mkdir()
    for i, r in enumerate(runs):
        h_std, lam = (0.111, -0.5) if r.name.startswith("E2-normal-swish2") else (0.002 + i / 1000, 0.25)
        key = grid_units.run_key(r.argv, r.paper, r.track_hessian)
        config = grid_units.planned_config(r)  # the run's resolved config, as scale.run records it
        rec = {"plan": home.name, "name": r.name, "device": "cpu", "threads": 1, "key_hash": key,
               "experiment": r.experiment, "seed": r.seed, "labels": r.labels, "argv": r.argv, "status": "finished",
               "format": grid_units.FORMAT, "config": config,
               "summary": {"status": "finished", "epochs_done": 2, "wall_seconds": 1.0, "config": config},
               "metrics": [{"epoch": e, "loss": 0.0, "h_std": h_std, "h_cond": 10.0} for e in (1, 2)],
               "curvature": [{"epoch": e, "step": e, "lambda_min": lam, "lambda_max": 1.0, "scale": 1.0}
                             for e in (1, 2)]}
        (root / "units" / f"{home.name}--{r.name}--cpu-t1--{key}.json").write_text(json.dumps(rec))
    return home


def grid_unit(home: Path, name: str) -> Path:
    return next((home.parent / "units").glob(f"{home.name}--{name}--*.json"))


def e2_row(text: str, init: str, head: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {init}/{head} ("))


def test_the_intact_files_are_used(ledger, tmp_path, capsys):
    """The control: the ledger and the grid as written are read whole, nothing left out."""
    code, view, _ = report_only(ledger, capsys)
    assert code == 0 and set(view["units"]) == {A, B} and view["ignored"] == []
    home = grid(tmp_path / "G")
    assert paper_report.main([str(home)]) == 0
    text = (home / "report.md").read_text()
    assert "Unit files left out" not in text and "(finished)" in e2_row(text, "collapsed", "relu2")


# --------------------------------------------------------------------------------------------
# Silent wrong results (6): a unit's identity is its name, its plan and its key, checked before use
# --------------------------------------------------------------------------------------------


def test_a_ledger_unit_file_copied_over_another_units_name_is_left_out(ledger, capsys):
    """B's file copied over A's name: --report-only uses neither as A (A is not in the view), names the file and
    why, and leaves it as it is."""
    target = unit_file(ledger, A)
    shutil.copy(unit_file(ledger, B), target)
    copied = target.read_bytes()
    code, view, _ = report_only(ledger, capsys)
    assert code == 0 and set(view["units"]) == {B} and view["units"][B]["name"] == B
    [line] = view["ignored"]
    assert line.startswith(target.name) and "not the unit its name says" in line and f"name {B!r}" in line
    assert f"- {target.name}" in (ledger / "report.md").read_text()  # the report's section names it too
    assert target.read_bytes() == copied  # never used, never deleted


def test_a_grid_unit_file_copied_over_another_runs_name_is_left_out(tmp_path, capsys):
    """normal/swish2's file copied over collapsed/relu2's name: scale.paper_report shows collapsed/relu2 not run (not
    normal/swish2's numbers) and names the file in its left-out section."""
    home = grid(tmp_path / "G")
    target = grid_unit(home, "E2-collapsed-relu2-s0")
    shutil.copy(grid_unit(home, "E2-normal-swish2-s0"), target)
    assert paper_report.main([str(home)]) == 0
    text = (home / "report.md").read_text()
    row = e2_row(text, "collapsed", "relu2")
    assert "(not run)" in row and "-0.5" not in row
    assert "(finished)" in e2_row(text, "normal", "swish2")
    assert "## Unit files left out (1)" in text and f"- {target.name}: its content says name" in text


LEDGER_IDENTITY = {  # what a unit's content says, against its name and its plan
    "plan": lambda r: r.update(plan="quick-000000000000"),
    "device": lambda r: r.update(device="cuda"),
    "threads": lambda r: r.update(threads=2),
    "head in its config": lambda r: r["config"].update(head="swish2"),
    "head in its labels": lambda r: r["labels"].update(head="swish2"),
    "key": lambda r: r["key"]["config"].update(head="swish2"),
}


@pytest.mark.parametrize("case", LEDGER_IDENTITY)
def test_a_ledger_unit_whose_content_says_another_plan_device_threads_or_head_is_left_out(ledger, capsys, case):
    target = unit_file(ledger, A)
    edit(target, LEDGER_IDENTITY[case])
    before = target.read_bytes()
    code, view, _ = report_only(ledger, capsys)
    assert code == 0 and set(view["units"]) == {B}
    [line] = view["ignored"]
    assert line.startswith(target.name) and "not the unit its name says" in line, line
    assert target.read_bytes() == before


GRID_IDENTITY = {
    "plan": lambda r: r.update(plan="grid-000000000000"),
    "device": lambda r: r.update(device="cuda"),
    "threads": lambda r: r.update(threads=8),
    "head in its labels": lambda r: r["labels"].update(head="swish2"),
    "head in its command line": lambda r: r.update(argv=[a.replace("relu2", "swish2") for a in r["argv"]]),
}


@pytest.mark.parametrize("case", GRID_IDENTITY)
def test_a_grid_unit_whose_content_says_another_plan_device_threads_or_head_is_left_out(tmp_path, case):
    home = grid(tmp_path / "G")
    target = grid_unit(home, "E2-collapsed-relu2-s0")
    edit(target, GRID_IDENTITY[case])
    assert paper_report.main([str(home)]) == 0
    text = (home / "report.md").read_text()
    assert "(not run)" in e2_row(text, "collapsed", "relu2")
    assert f"- {target.name}: " in text and "not the unit its name says" in text


# --------------------------------------------------------------------------------------------
# Crashes (5): every record is checked against its schema before any field is read
# --------------------------------------------------------------------------------------------


def _amendment(out: Path, number) -> dict:
    reg = json.loads((out / "registrations" / f"{PLAN}.json").read_text())
    return {"number": number, "date": "now", "reason": "a test", "from_hash": reg["rules_hash"],
            "to_hash": reg["rules_hash"], "claims_changed": [], "rules": reg["rules"]}


def _damage(out: Path, case: str) -> Path:
    reg = out / "registrations" / f"{PLAN}.json"
    amendments = out / "amendments"
    if case == "unit {'mine': 1}":
        unit_file(out, A).write_text('{"mine": 1}')
        return unit_file(out, A)
    if case == "registration a list":
        reg.write_text("[1, 2]")
        return reg
    if case == "registration without rules_hash":
        edit(reg, lambda r: r.pop("rules_hash"))
        return reg
    amendments.mkdir()
    if case == "amendment a list":
        (amendments / f"{PLAN}-001.json").write_text("[1, 2]")
        return amendments / f"{PLAN}-001.json"
    (amendments / f"{PLAN}-001.json").write_text(json.dumps(_amendment(out, 1)))
    (amendments / f"{PLAN}-002.json").write_text(json.dumps(_amendment(out, "2")))  # mixed-type numbers
    return amendments / f"{PLAN}-002.json"


@pytest.mark.parametrize("case", ["unit {'mine': 1}", "registration a list", "registration without rules_hash",
                                  "amendment a list", "amendment numbered by a string"])
def test_a_damaged_ledger_record_is_one_line_exit_2(ledger, capsys, case):
    damaged = _damage(ledger, case)
    before = damaged.read_bytes()
    view = (ledger / "results.json").read_bytes()
    code, _, err = report_only(ledger, capsys)
    assert code == 2 and len(err) == 1 and err[0].startswith("scale.replicate: error: ") and str(damaged) in err[0]
    assert damaged.read_bytes() == before and (ledger / "results.json").read_bytes() == view  # nothing written


def test_a_valid_amendment_log_is_read_in_its_order(ledger, capsys):
    """The control of the amendment cases: two amendments of the schema, read in their numbers' order."""
    (ledger / "amendments").mkdir()
    for n in (2, 1):
        (ledger / "amendments" / f"{PLAN}-{n:03d}.json").write_text(json.dumps(_amendment(ledger, n)))
    code, view, _ = report_only(ledger, capsys)
    assert code == 0 and [a["number"] for a in view["amendments"]] == [1, 2]


# --------------------------------------------------------------------------------------------
# Hangs (2): nothing is sized by a file name
# --------------------------------------------------------------------------------------------

PEAK = ("import resource, subprocess, sys\n"  # the child's peak resident memory (KiB), measured by its parent
        f"done = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout={DEADLINE_S})\n"
        "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "sys.stderr.write(done.stderr)\n")


@pytest.mark.parametrize("seed", ["s999999999", "s20000"])
def test_a_stray_file_named_with_a_huge_seed_sizes_nothing(ledger, seed):
    """One empty file named like a unit of seed 999999999 (or 20000): --report-only ends in seconds, within 1 GiB,
    names the file as no unit of this plan and leaves it there (a child with a deadline: a hang fails)."""
    stray = ledger / "units" / f"{PLAN}--E5-depth1-{seed}--cpu-t1--000000000000.json"
    stray.write_bytes(b"")
    argv = [sys.executable, "-m", "scale.replicate", *QUICK, "--out", str(ledger), "--report-only"]
    try:
        done = subprocess.run([sys.executable, "-c", PEAK, *argv], capture_output=True, text=True, env=ENV,
                              timeout=DEADLINE_S + 30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"--report-only hung past {DEADLINE_S} s over {stray.name}")
    code, peak_kb = (int(v) for v in done.stdout.split())
    assert code == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert peak_kb < MAX_RSS_KB, f"--report-only took {peak_kb / 1024:.0f} MiB"
    view = json.loads((ledger / "results.json").read_text())
    assert set(view["units"]) == {A, B}
    assert view["ignored"] == [f"{stray.name}: no unit of this plan is named E5-depth1-{seed}"]
    assert stray.is_file() and stray.read_bytes() == b""


# --------------------------------------------------------------------------------------------
# Write outside --out (1): no folder of an output path is a link
# --------------------------------------------------------------------------------------------

GRID_ARGS = ["--dataset", "synthetic", "--experiments", "E3E4", "--quick", "--epochs", "1", "--device", "cpu",
             "--threads", "1"]


@pytest.mark.parametrize("command,folder", [("replicate", "units"), ("replicate", "registrations"),
                                            ("replicate", "amendments"), ("replicate", "work"),
                                            ("paper", "units"), ("paper", "PLAN"), ("paper", "PLAN/runs")])
def test_a_link_at_an_output_folder_is_refused_before_anything_is_written(tmp_path, capsys, command, folder):
    """OUT/units (or another folder the store writes below OUT) a symbolic link to a folder outside: one line,
    exit 2, nothing written there nor anywhere in OUT."""
    out, outside = tmp_path / "out", tmp_path / "outside"
    outside.mkdir()
    (outside / "mine.txt").write_text("mine")
    pid = grid_units.plan_id("synthetic", "resnet18", True, 1)
    link = out / folder.replace("PLAN", pid)
    link.parent.mkdir(parents=True)
    link.symlink_to(outside, target_is_directory=True)
    if command == "replicate":
        code = replicate.main([*QUICK, "--out", str(out), "--units", A])
    else:
        code = paper.main([*GRID_ARGS, "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "is a symbolic link" in err[0] and str(link) in err[0], err
    assert sorted(p.name for p in outside.iterdir()) == ["mine.txt"]
    made = {str(p.relative_to(out)) for p in (link, *link.parents) if out in p.parents}  # the link and its folders
    assert {str(Path(d, n).relative_to(out)) for d, dirs, files in os.walk(out) for n in dirs + files} == made


# --------------------------------------------------------------------------------------------
# Unclear (2): out-of-range seeds and a blank amendment are one line naming what is valid
# --------------------------------------------------------------------------------------------


def test_out_of_range_seeds_are_one_line_naming_the_valid_range(tmp_path, capsys):
    huge = "99999999999999999999999"
    out = tmp_path / "r"
    for argv in (["synthetic", "--seed", huge], ["synthetic", "--seed", "-1"]):
        assert scale_run.main([*argv, "--out", str(out), "--quiet"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--seed must be in [0, 2**63)" in err[0] and "Overflow" not in err[0], err
    assert replicate.main(["--quick", "--seeds", huge, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"above {MAX_SEEDS}" in err[0], err
    assert paper.main([*GRID_ARGS, "--seeds", huge, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"above {MAX_SEEDS}" in err[0], err
    assert not out.exists()


def test_a_blank_amendment_reason_is_refused(ledger, capsys):
    view = (ledger / "results.json").read_bytes()
    for reason in ("   ", ""):
        code, _, err = report_only(ledger, capsys, "--amend", reason)
        assert code == 2 and len(err) == 1 and "--amend needs a reason" in err[0], err
    assert not (ledger / "amendments").exists() and (ledger / "results.json").read_bytes() == view
