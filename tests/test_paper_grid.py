"""scale.paper and scale.paper_report: the grid's plan keeps the paper's settings (and records every deviation),
completed runs are skipped, interrupted ones resumed, two plans share one OUT without touching each other, and the
views regenerate from the unit files alone with verdicts that follow the numbers."""

from __future__ import annotations

import json
import shutil

import pytest

from scale import paper, paper_report
from scale.grid import unit_files
from scale.paper import PAPER_SETTINGS, deviations, plan, run_state


def _argv_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_full_plan_has_the_paper_grid_and_settings():
    runs = plan("cifar10", "resnet18", quick=False)
    by_exp = {e: [r for r in runs if r.experiment == e] for e in paper.EXPERIMENTS}
    assert len(by_exp["E1"]) == (3 * 2 + 1) * 3 * 3 and len(by_exp["E2"]) == 3  # the linear head: BN off only
    assert len(by_exp["E3E4"]) == 3 and len(by_exp["E5"]) == 3 * 3
    assert len({r.name for r in runs}) == len(runs)
    e1 = next(r for r in runs if r.name == "E1-swish2-bn1-lr0.5-s2")
    for flag, value in (("--method", "simsiam"), ("--batch-size", "512"), ("--epochs", "50"), ("--lr", "0.5"),
                        ("--optimizer", "sgd"), ("--init", "collapsed"), ("--head-width", "2048"), ("--seed", "2")):
        assert _argv_value(e1.argv, flag) == value, flag
    assert "--head-bn" in e1.argv and "--no-head-bias" in e1.argv and _argv_value(e1.argv, "--head-style") == "paper"
    assert _argv_value(e1.argv, "--schedule") == "constant"  # the official code has no schedule
    assert not any(r.name.startswith("E1-linear-bn1") for r in runs)
    e2 = [r for r in runs if r.experiment == "E2"]
    assert all(r.track_hessian and _argv_value(r.argv, "--batch-size") == "256" for r in e2)
    assert all(_argv_value(r.argv, "--track-hessian-every") == "epoch" for r in e2)
    assert {(r.labels["init"], r.labels["head"]) for r in e2} == set(paper.E2_RUNS)
    assert [_argv_value(r.argv, "--head") for r in by_exp["E5"][:3]] == ["linear", "swish2", "swish3"]
    assert all("--temperature" in r.argv and _argv_value(r.argv, "--method") == "simclr_paper" for r in by_exp["E5"])
    assert all(_argv_value(r.argv, "--batch-size") == "512" for r in by_exp["E5"])
    assert all(_argv_value(r.argv, "--batch-size") == "256" and _argv_value(r.argv, "--augment") == "e3"
               for r in by_exp["E3E4"])
    assert all(_argv_value(r.argv, "--epochs") == "20" for r in plan("cifar100", "resnet18", False, ("E1",)))
    quick = plan("digits", "resnet18", quick=True)
    assert len(quick) == 21 + 3 + 1 + 3 and all(_argv_value(r.argv, "--epochs") == "2" for r in quick)
    assert all("--batch-size" not in r.argv for r in quick)  # digits: scale.run's CPU sizes (deviations)


def test_deviations_are_read_from_the_resolved_config():
    ref = dict(PAPER_SETTINGS["E3E4"])
    cfg = {k: v for k, v in ref.items()}
    cfg.update(backbone_width=None, train_subset=None)
    assert deviations(cfg, ref, "cifar10") == {}
    cfg.update(epochs=2, lr=1e-3 + 1e-15, train_subset=100)
    dev = deviations(cfg, ref, "digits", 64)
    assert dev == {"dataset": ["cifar10", "digits"], "epochs": [50, 2], "train_subset": ["all", 100],
                   "probe_images": ["all", 64]}


def test_job_invocation_and_bad_arguments(tmp_path, capsys):
    """A job's invocation is the grid's, run locally for its run alone; its flags parse back to it."""
    raw = ["--dataset", "digits", "--quick", "--launcher", "local-jobs", "--node-gpus", "0,1", "--out", "g"]
    inv = paper.invocation_of(paper.build_parser().parse_args(raw), raw)
    job = inv.for_job("E5-depth2-s0")
    assert (job.units, job.launch.launcher, job.as_job, job.quick, job.plan) == (
        ("E5-depth2-s0",), "local", True, True, inv.plan)
    argv = job.argv()
    assert _argv_value(argv, "--units") == "E5-depth2-s0" and "--as-job" in argv and "--node-gpus" not in argv
    assert paper.invocation_of(paper.build_parser().parse_args(argv), argv) == job
    assert paper.invocation_of(paper.build_parser().parse_args(inv.argv()), inv.argv()) == inv
    out = str(tmp_path / "g")
    assert paper.main(["--dataset", "digits", "--out", out, "--units", "E9-nothing"]) == 2
    assert "--units: no run named E9-nothing" in capsys.readouterr().err
    assert paper.main(["--dataset", "digits", "--out", out, "--launcher", "local-jobs", "--parallel", "0"]) == 2
    assert "--parallel must be a positive integer" in capsys.readouterr().err
    assert paper.main(["--dataset", "digits", "--out", out, "--no-wait"]) == 2
    assert "--no-wait needs a job launcher" in capsys.readouterr().err
    assert paper.main(["--dataset", "digits", "--out", out, "--seeds", "0"]) == 2
    with pytest.raises(SystemExit, match="unknown experiment"):
        paper.main(["--experiments", "E1,E7", "--out", out])


def _grid(tmp_path, *extra: str) -> int:
    return paper.main(["--dataset", "synthetic", "--experiments", "E3E4", "--quick", "--epochs", "1",
                       "--out", str(tmp_path / "grid"), "--device", "cpu", "--threads", "1", *extra])


def _home(out, epochs: int = 1):
    """The plan folder of ``_grid``'s plan (``--epochs`` another: another plan)."""
    return unit_files.plan_dir(out, unit_files.plan_id("synthetic", "resnet18", True, epochs))


def _files(root) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root`` (or the file ``root``): its bytes and mtime."""
    paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in paths}


def test_grid_skips_completed_runs_resumes_interrupted_ones_and_the_report_regenerates(tmp_path, capsys):
    out = tmp_path / "grid"
    assert _grid(tmp_path) == 0
    home = _home(out)
    run = home / "runs" / "E3E4-relu2-s0"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and "geometry" in summary
    assert summary["rotation_probes"] is not None and summary["geometry"] is not None
    assert run_state(run) == "done"
    unit_file = next((out / "units").glob(f"{home.name}--E3E4-relu2-s0--cpu-t1--*.json"))
    unit = json.loads(unit_file.read_text())
    assert unit["status"] == "finished" and unit["summary"] == summary
    assert unit["run_dir"] == f"{home.name}/runs/E3E4-relu2-s0" and unit["deviations"]["dataset"] == ["cifar10",
                                                                                                     "synthetic"]
    assert len(unit["metrics"]) == 1 and len(unit["orbits"]["h"]) == len(unit["orbits"]["labels"])
    view = json.loads((home / "results.json").read_text())
    assert list(view["units"]) == ["E3E4-relu2-s0"] and not view["missing"] and not view["ignored"]
    stored = _files(unit_file)
    first_wall = summary["wall_seconds"]

    # a saved run planned otherwise (here its config.json edited: as if the code changed the run) is neither
    # counted as done nor resumed: refused before anything runs or is written, naming the run and the difference
    config = (run / "config.json").read_text()
    (run / "config.json").write_text(json.dumps({**json.loads(config), "epochs": 5}))
    manifest, files = (home / "manifest.json").read_bytes(), sorted(p.name for p in run.iterdir())
    assert _grid(tmp_path) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds 1 run(s) planned otherwise" in err[0] and "epochs (5 vs 1)" in err[0], err
    assert (home / "manifest.json").read_bytes() == manifest and sorted(p.name for p in run.iterdir()) == files
    (run / "config.json").write_text(config)

    # a second invocation attempts nothing and rewrites no unit file
    assert _grid(tmp_path, "--no-report") == 0
    log = [json.loads(line) for line in (home / "grid_log.jsonl").read_text().splitlines()]
    assert log[-1]["name"] == "(grid)" and log[-1]["runs_attempted"] == 0
    assert json.loads((run / "summary.json").read_text())["wall_seconds"] == first_wall
    assert _files(unit_file) == stored

    # an interrupted run (checkpoint, no final summary, no unit file) is resumed, not restarted: the history is kept
    unit_file.rename(tmp_path / "moved-away.json")
    (run / "summary.json").unlink()
    assert run_state(run) == "resume"
    assert _grid(tmp_path, "--no-report") == 0
    again = json.loads((run / "summary.json").read_text())
    assert again["status"] == "finished" and again["epochs_done"] == 1
    assert again["command"].split().count("--resume") == 1
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 1
    assert json.loads(unit_file.read_text())["summary"] == again

    # the views regenerate from the unit files alone: the run directories gone, the report and results are rebuilt
    shutil.rmtree(home / "runs")
    for f in ("report.md", "compression.png", "e4_orbits.png", "results.json"):
        (home / f).unlink()
    assert paper_report.main([str(home)]) == 0
    text = (home / "report.md").read_text()
    assert (home / "compression.png").is_file() and (home / "e4_orbits.png").is_file()
    assert "Not comparable in value" in text and "21.85x" in text and "## Verdicts, as measured" in text
    assert "| E3E4-relu2-s0 | finished | 1 |" in text
    assert _grid(tmp_path, "--report-only") == 0 and (home / "results.json").is_file()
    assert not (home / "runs").exists()  # --report-only runs nothing
    assert paper_report.main([str(tmp_path / "nothing")]) == 1


def test_two_plans_share_one_out_and_leave_each_other_alone(tmp_path, capsys):
    """Two real plans (--epochs 1 and 2: another plan) into one OUT: each has its own folder and unit files, the
    second's run, views and report change nothing of the first (bytes and mtimes), and each plan's views name the
    other's unit file as left out; rebuilding the first's views leaves the second's files as they were."""
    out = tmp_path / "grid"
    assert _grid(tmp_path) == 0
    first = {**_files(_home(out, 1)), **_files(next((out / "units").glob(f"{_home(out, 1).name}--*.json")))}
    assert _grid(tmp_path, "--epochs", "2") == 0
    assert {**_files(_home(out, 1)), **{k: v for k, v in _files(out / "units").items() if k in first}} == first
    second_unit = next((out / "units").glob(f"{_home(out, 2).name}--*.json"))
    assert json.loads(second_unit.read_text())["summary"]["epochs_done"] == 2
    first_unit = next(k for k in first if "/units/" in k).rsplit("/", 1)[1]
    for home, other in ((_home(out, 2), first_unit), (_home(out, 1), second_unit.name)):
        if home == _home(out, 1):
            second = {**_files(_home(out, 2)), **_files(second_unit)}
            assert _grid(tmp_path, "--report-only") == 0  # the first plan's views, rebuilt
            assert {**_files(_home(out, 2)), **_files(second_unit)} == second
        view = json.loads((home / "results.json").read_text())
        assert list(view["units"]) == ["E3E4-relu2-s0"] and view["ignored"] == [f"{other}: plan {other[:17]}"]
        text = (home / "report.md").read_text()
        assert "## Unit files left out (1)" in text and f"- {other}: plan {other[:17]}" in text
    assert sorted(p.name for p in out.iterdir()) == sorted([_home(out, 1).name, _home(out, 2).name, "units"])


def test_a_grid_of_the_earlier_layout_is_left_alone(tmp_path, capsys):
    """An OUT written before plan folders (manifest.json and runs/ at its top): said, never read nor touched."""
    out = tmp_path / "grid"
    (out / "runs" / "E3E4-relu2-s0").mkdir(parents=True)
    (out / "manifest.json").write_text('{"runs": []}')
    (out / "runs" / "E3E4-relu2-s0" / "summary.json").write_text('{"status": "finished"}')
    before = _files(out)
    assert _grid(tmp_path, "--dry-run") == 0
    assert "also holds a grid of the earlier layout" in capsys.readouterr().out
    assert {k: v for k, v in _files(out).items() if k in before} == before and (_home(out) / "manifest.json").is_file()


def _fake_unit(root, home, r, h_std: list[float], curvature: list[float] | None = None) -> None:
    """A unit file of run ``r`` of the plan in ``home`` as scale.grid.unit_files writes it (the report's inputs)."""
    rec = {"status": "finished", "summary": {"status": "finished", "epochs_done": len(h_std), "wall_seconds": 1.0},
           "metrics": [{"epoch": i + 1, "loss": 0.0, "h_std": v, "h_cond": 10.0} for i, v in enumerate(h_std)]}
    if curvature is not None:
        rec["curvature"] = [{"epoch": i + 1, "step": i + 1, "lambda_min": v, "lambda_max": 1.0, "scale": 1.0}
                            for i, v in enumerate(curvature)]
        neg = sum(v < -1e-9 for v in curvature) / len(curvature)
        rec["curvature_summary"] = {"negative_lambda_min_fraction": neg, "spearman_zstd_condition": None,
                                    "spearman_points": 0}
    key = unit_files.run_key(r.argv, r.paper, r.track_hessian)
    rec.update(plan=home.name, name=r.name, device="cpu", threads=1, key_hash=key, experiment=r.experiment,
               seed=r.seed, labels=r.labels, argv=r.argv)  # what the unit store checks (scale.unit_store)
    rec["config"] = rec["summary"]["config"] = unit_files.planned_config(r)  # and the grid, against the planned run
    (root / "units").mkdir(exist_ok=True)
    (root / "units" / f"{home.name}--{r.name}--cpu-t1--{key}.json").write_text(json.dumps(rec))


@pytest.mark.parametrize("smooth_escapes", [True, False])
def test_report_verdicts_follow_the_measured_numbers(tmp_path, smooth_escapes):
    runs = plan("digits", "resnet18", quick=True, experiments=("E1", "E2"))
    man = {"command": "test", "dataset": "digits", "backbone": "resnet18", "quick": True, "experiments": ["E1", "E2"],
           "assumptions": {}, "runs": [paper.asdict(r) for r in runs], "git_commit": "x", "versions": {}}
    home = tmp_path / unit_files.plan_id("digits", "resnet18", True, None)
    home.mkdir()
    (home / "manifest.json").write_text(json.dumps(man))
    for r in runs:
        if r.experiment == "E1":
            smooth = r.labels["head"] in ("gelu2", "swish2")
            final = 0.05 if smooth == smooth_escapes else 0.001
            _fake_unit(tmp_path, home, r, [0.001, final])
        else:
            neg = r.labels["head"] == "swish2"
            _fake_unit(tmp_path, home, r, [0.01, 0.01], [-0.1 if neg == smooth_escapes else 0.0] * 2)
    paper_report.write_report(home, figures=smooth_escapes)  # the figures once (they cost seconds)
    text = (home / "report.md").read_text()
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| ")}
    thm = next(v for k, v in rows.items() if k.startswith("| Thm 4.1"))
    e2 = next(v for k, v in rows.items() if k.startswith("| E2: Swish"))
    want = "holds here" if smooth_escapes else "does not hold here"
    assert thm.endswith(f"{want} |") and e2.endswith(f"{want} |")
    assert (home / "e1_variance.png").is_file() == smooth_escapes
    assert (home / "e2_curvature.png").is_file() == smooth_escapes


@pytest.mark.slow
def test_grid_run_as_a_job_killed_named_and_rerun(tmp_path, capsys, monkeypatch):
    """One run as a submitit LocalExecutor job (a real subprocess), SIGKILLed mid-run: --collect names it with its
    job and the one command that runs it (exit 3); that command runs it to the end; another plan's unit file is
    listed, untouched."""
    import os
    import shlex
    import signal
    import time
    from pathlib import Path

    from scale.launch import jobs

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "grid"
    home = _home(out)
    other = out / "units" / "grid-000000000000--E3E4-relu2-s0--cpu-t1--0123456789ab.json"
    other.parent.mkdir(parents=True)
    other.write_text("{}")
    before = (other.read_bytes(), other.stat().st_mtime_ns)
    flags = ["--launcher", "local-jobs", "--no-report"]
    assert _grid(tmp_path, *flags, "--collect") == 1  # no grid there yet
    assert "holds no grid of this plan" in capsys.readouterr().err
    assert _grid(tmp_path, *flags, "--no-wait") == 0
    job = int(json.loads(next((home / "launch").glob("*.json")).read_text())["jobs"]["E3E4-relu2-s0"])
    t0 = time.monotonic()
    while not (home / "runs" / "E3E4-relu2-s0" / "config.json").is_file():  # scale.run has begun the run
        assert time.monotonic() - t0 < 300 and jobs._alive(job), "the job ended before it could be killed"
        time.sleep(0.05)
    for task in Path(f"/proc/{job}/task").iterdir():  # the job's worker: its controller's child
        for pid in (task / "children").read_text().split():
            os.kill(int(pid), signal.SIGKILL)
    while jobs._alive(job):
        time.sleep(0.05)
    assert [p.name for p in (out / "units").glob("*.json")] == [other.name]  # no unit file of the run, nor a part
    capsys.readouterr()
    assert _grid(tmp_path, *flags, "--collect") == 3
    said = capsys.readouterr().out
    assert f"1 run(s) missing: E3E4-relu2-s0 (local-jobs job {job}: ended)" in said
    rerun = said.split("run only them: ", 1)[1].splitlines()[0]
    again = shlex.split(rerun)[3:]  # rendered from the invocation: this plan, that run only, the same launch
    again_inv = paper.invocation_of(paper.build_parser().parse_args(again), again)
    assert (again_inv.units, again_inv.launch.launcher, again_inv.no_report, again_inv.plan) == (
        ("E3E4-relu2-s0",), "local-jobs", True, unit_files.plan_id("synthetic", "resnet18", True, 1))
    assert paper.main(shlex.split(rerun)[3:]) == 0
    said = capsys.readouterr().out
    assert said.count("  submitted ") == 1 and "1 of 1 runs stored" in said
    view = json.loads((home / "results.json").read_text())
    assert view["units"]["E3E4-relu2-s0"]["status"] == "finished" and not view["missing"]
    assert view["ignored"] == [f"{other.name}: plan grid-000000000000"]
    assert (other.read_bytes(), other.stat().st_mtime_ns) == before
    assert len(list((out / "units").glob("grid-*--E3E4-relu2-s0--*.json"))) == 2  # this plan's and the other's

