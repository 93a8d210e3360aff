"""scale.launch: units as jobs through submitit's LocalExecutor (real subprocesses, the pickled submission path
Slurm uses), one of them killed for real (SIGKILL) mid-run, the missing unit named with the one command that runs
only it, that command run, every unit then stored once, and another plan's unit file untouched; the launch flags
and recipes; --dry-run's jobs and GPU-hours."""

from __future__ import annotations

import json
import os
import pickle
import shlex
import signal
import time
from pathlib import Path

import pytest

from scale import replicate as R
from scale.launch import jobs as J
from scale.launch.resources import LOCAL, LaunchError, Resources
from scale.ledger import runner

# Two --quick E1 units (about a second of training each on an idle CPU).
UNITS = ("E1-linear-bn0-lr0.05-collapsed-s0", "E1-relu2-bn0-lr0.05-collapsed-s0")
PLAN_FLAGS = ["--quick", "--seeds", "1", "--experiments", "E1", "--threads", "1"]
LAUNCH_FLAGS = ["--launcher", "slurm", "--partition", "test", "--time-min", "10"]
OTHER_PLAN = "quick-000000000000--E1-linear-bn0-lr0.05-collapsed-s0--cpu-t1--0123456789ab.json"
WAIT_S = 300  # a generous bound on a loaded CI machine; each job ends in seconds on an idle one


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(t) for t in text]
    return found


def _unit_files(out: Path, name: str) -> list[Path]:
    """This plan's files of unit ``name`` (not the other plan's, nor a writer's hidden temporary)."""
    return [p for p in (out / "units").glob(f"*--{name}--*.json")
            if not p.name.startswith(".") and p.name != OTHER_PLAN]


def _wait(cond, what: str) -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > WAIT_S:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds a job's worker process through /proc")
def test_jobs_killed_mid_run_are_named_and_rerun_alone(tmp_path, capsys, monkeypatch):
    """``--launcher slurm`` with submitit's AutoExecutor on its local engine (``SLURM_CLUSTER``): the same job
    array of the same pickled submissions, run as real subprocesses."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(J, "SLURM_CLUSTER", "local")
    out = tmp_path / "L"
    other = out / "units" / OTHER_PLAN
    other.parent.mkdir(parents=True)
    other.write_text('{"plan": "quick-000000000000", "note": "another plan\'s unit"}')
    other_before = (other.read_bytes(), other.stat().st_mtime_ns)
    base = [*PLAN_FLAGS, "--out", str(out), *LAUNCH_FLAGS]

    assert R.main([*base, "--units", ",".join(UNITS), "--no-wait"]) == 0
    record = json.loads(next((out / "launch").glob("*.json")).read_text())
    assert set(record["jobs"]) == set(UNITS) and (record["launcher"], record["engine"]) == ("slurm", "local")
    survivor, victim = (int(record["jobs"][u]) for u in UNITS)

    # Mid-run: the victim's job process has begun its unit (its log says so) and its file does not exist yet.
    victim_log = out / "jobs" / f"{victim}_0_log.out"
    _wait(lambda: victim_log.is_file() and "to run" in victim_log.read_text(), "the victim's unit to start")
    assert not _unit_files(out, UNITS[1]), "the unit ended before it could be killed mid-run"
    workers = _children(victim)
    assert workers, "the job's controller has no worker process"
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    _wait(lambda: not (J._alive(survivor) or J._alive(victim)), "both jobs to end")

    # The killed unit has no file, not a partial one; the other is stored; another plan's file is as it was.
    assert not _unit_files(out, UNITS[1])
    assert len(_unit_files(out, UNITS[0])) == 1
    survivor_file = _unit_files(out, UNITS[0])[0]
    survivor_before = (survivor_file.read_bytes(), survivor_file.stat().st_mtime_ns)
    capsys.readouterr()
    assert R.main([*base, "--units", ",".join(UNITS), "--collect"]) == 3
    said = capsys.readouterr().out
    assert f"1 unit(s) missing: {UNITS[1]} (slurm job {victim}: ended)" in said
    rerun = said.split("run only them: ", 1)[1].splitlines()[0]
    argv = shlex.split(rerun)
    assert argv[:3] == ["python", "-m", "scale.replicate"] and argv[argv.index("--units") + 1] == UNITS[1]
    view = json.loads((out / "results.json").read_text())
    assert list(view["missing"]) == [UNITS[1]] and view["rerun"] == rerun
    assert "## Units missing (1)" in (out / "report.md").read_text()

    # The one command: it submits only the missing unit, waits, and collects (exit 0).
    assert R.main(argv[3:]) == 0
    said = capsys.readouterr().out
    assert said.count("submitted ") == 1 and f"submitted {UNITS[1]}" in said
    for name in UNITS:
        assert len(_unit_files(out, name)) == 1
    assert (survivor_file.read_bytes(), survivor_file.stat().st_mtime_ns) == survivor_before
    assert (other.read_bytes(), other.stat().st_mtime_ns) == other_before
    view = json.loads((out / "results.json").read_text())
    assert set(view["units"]) == set(UNITS) and not view["missing"]
    assert any(OTHER_PLAN in line and "plan quick-000000000000" in line for line in view["ignored"])
    assert R.main([*base, "--units", ",".join(UNITS), "--collect"]) == 0


def _invocation(raw: list[str]):
    return R.invocation_of(R.build_parser().parse_args(raw), raw)


def test_a_job_reruns_its_own_invocation_on_requeue(tmp_path):
    """submitit requeues a timed-out or preempted job with what ``checkpoint`` returns: the same runner and
    invocation, which resumes from what the unit left."""
    job = J.UnitJob(runner.run, _invocation(["--quick", "--out", str(tmp_path)]).for_job("X"))
    again = job.checkpoint()
    assert again.function is job and (again.function.run, again.function.invocation) == (runner.run, job.invocation)
    assert pickle.loads(pickle.dumps(job)).invocation == job.invocation  # what submitit's job unpickles


def test_job_and_rerun_invocations_are_rendered_from_the_invocation():
    raw = ["--quick", "--out", "L", "--launcher", "slurm", "--no-wait", "--time-min=30", "--shard", "1/2",
           "--partition", "gpu", "--budget-s", "60"]
    inv = _invocation(raw)
    job = inv.for_job("E5-depth1-s0")
    assert (job.units, job.shard, job.budget_s, job.launch, job.as_job) == (("E5-depth1-s0",), (0, 1), None,
                                                                           LOCAL, True)
    assert job.settings() == inv.settings()  # the same plan
    assert J.command_line(job).endswith("--units E5-depth1-s0 --as-job")
    rerun = J.rerun_command(inv, ["A", "B"])
    assert rerun == ("python -m scale.replicate --dataset digits --seeds 2 --out L --device cpu --threads 1 --quick "
                     "--units A,B --launcher slurm --time-min 30 --partition gpu")
    again = _invocation(shlex.split(rerun)[3:])
    assert again == inv.for_rerun(["A", "B"]) and not again.launch.no_wait
    for flags in (raw, ["--epochs", "E1=3,E5=2", "--experiments", "E5,E1", "--repeat", "2", "--amend", "a b",
                        "--launcher", "local-jobs", "--node-gpus", "1,0", "--requeues", "0", "--mem-gb", "2.5"]):
        one = _invocation(flags)
        assert _invocation(one.argv()) == one  # the flags it renders parse back to it


def test_resources_from_a_recipe_and_flags(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text('gpus = 1\ncpus-per-job = 2\n')
    with pytest.raises(LaunchError, match="unknown key 'cpus-per-job'; valid: gpus, cpus"):
        _invocation(["--resources", str(recipe)])
    recipe.write_text('gpus = 1\ncpus = 8\ntime-min = 90\npartition = "a100"\n')
    inv = _invocation(["--resources", str(recipe), "--time-min", "30"])
    assert inv.launch.resources == Resources(gpus=1, cpus=8, time_min=30, partition="a100")
    recipe.write_text("gpus = -1\n")
    with pytest.raises(LaunchError, match="gpus must be at least 0"):
        _invocation(["--resources", str(recipe)])


@pytest.mark.parametrize("flags, says", [
    (["--launcher", "local-jobs", "--node-gpus", "0,0"], "--node-gpus takes distinct"),
    (["--launcher", "local-jobs", "--parallel", "0"], "--parallel must be a positive integer"),
    (["--units", "E9-nothing"], "--units: E9-nothing not a unit of this plan"),
    (["--cpus-per-job", "0"], "cpus must be positive"),
    (["--no-wait"], "--no-wait needs a job launcher"),
    (["--launcher", "slurm", "--device", "cuda"], "give --gpus-per-job N"),
    (["--launcher", "local-jobs", "--device", "cuda"], "name the node's devices with --node-gpus"),
])
def test_bad_launch_flags_are_one_line(flags, says, tmp_path, capsys):
    assert R.main(["--quick", "--dry-run", "--out", str(tmp_path / "L"), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1
    assert not (tmp_path / "L").exists()


def test_dry_run_names_the_jobs_and_gpu_hours(capsys, tmp_path):
    assert R.main(["--dataset", "cifar10", "--device", "cuda", "--seeds", "1", "--experiments", "E2", "--dry-run",
                   "--launcher", "slurm", "--gpus-per-job", "1", "--time-min", "60", "--gpu-name", "H100",
                   "--out", str(tmp_path / "L")]) == 0
    said = capsys.readouterr().out
    assert "3 job(s) as one Slurm job array; each: 1 GPU" in said and "GPU-h on H100" in said
    assert "H100: not measured" in said and "will be requeued from its checkpoint" in said
    job = next(line for line in said.splitlines() if line.startswith("  job E2-normal-swish2-s0: "))
    assert job.endswith("--units E2-normal-swish2-s0 --as-job") and "--launcher" not in job  # run in the job
    assert not (tmp_path / "L").exists()


def test_a_unit_killed_inside_its_write_leaves_no_unit_file(tmp_path):
    """A node dying mid-write: the writer SIGKILLed after its temporary is written and fsynced, before the link
    that names it. No unit file appears (the hidden temporary is not read as one), and the unit is written whole
    by the next attempt."""
    import subprocess
    import sys

    from scale.ledger import store

    key = {"experiment": "E1", "seed": 0}
    rec = {"status": "finished", "experiment": "E1", "seed": 0, "labels": {}, "key": key, "config": {},
           "git_commit": "c", "seconds": 1.0}
    k = store.digest(key)[:12]  # a record the store accepts: its key hashes to its name's
    code = ("import os, signal, sys\nfrom pathlib import Path\nfrom scale.ledger import store\n"
            "os.link = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)\n"
            f"store.save_unit(Path(sys.argv[1]), 'p1', 'E1-x-s0', 'cpu', 1, {k!r}, {rec!r})\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL
    left = sorted(p.name for p in (tmp_path / "units").iterdir())
    assert len(left) == 1 and left[0].startswith(".") and left[0].endswith(".tmp")  # the temporary, nothing named
    assert store.unit_files(tmp_path) == [] and store.load_units(tmp_path, "p1", {"E1-x-s0": k}, "cpu", 1) \
        == ({}, [])
    store.save_unit(tmp_path, "p1", "E1-x-s0", "cpu", 1, k, rec)
    units, ignored = store.load_units(tmp_path, "p1", {"E1-x-s0": k}, "cpu", 1)
    assert units["E1-x-s0"]["status"] == "finished" and not ignored


SLOW_THEN_DONE = '''
import time
from pathlib import Path


def run(marker):
    marker = Path(marker)
    if not marker.exists():  # the first attempt: outlives its time limit
        marker.write_text("first attempt")
        time.sleep(600)
        return 1
    marker.write_text("second attempt")
    return 0
'''


@pytest.mark.slow
def test_a_timed_out_job_is_requeued_with_its_command(tmp_path, monkeypatch):
    """submitit's timeout signal (USR2) to a real ``UnitJob``: requeued, its runner runs again and finishes.
    (A grid run resumes there from its checkpoint; tests/test_paper_grid.py holds the resume.)"""
    import submitit

    (tmp_path / "slow_then_done.py").write_text(SLOW_THEN_DONE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(tmp_path))  # the job's function is pickled by reference: importable here too
    ex = submitit.LocalExecutor(folder=tmp_path / "jobs", max_num_timeout=1)
    ex.update_parameters(timeout_min=0.5, signal_delay_s=20)  # USR2 about 10 s after the start
    import slow_then_done

    job = ex.submit(J.UnitJob(slow_then_done.run, str(tmp_path / "marker")))
    t0 = time.monotonic()
    while not job.done() and time.monotonic() - t0 < WAIT_S:
        time.sleep(0.2)
    assert job.result() == 0
    assert (tmp_path / "marker").read_text() == "second attempt"
    log = Path(job.paths.stdout).read_text() + Path(job.paths.stderr).read_text()
    assert "Requeued job" in log and log.count("Starting with JobEnvironment") == 2


def test_a_unit_whose_job_has_not_ended_is_not_submitted_again(tmp_path, capsys):
    """Launching again while a recorded job runs (here: this test's own process stands for its controller)
    submits nothing for that unit; --collect names the job as running."""
    out = tmp_path / "L"
    (out / "launch").mkdir(parents=True)
    (out / "launch" / "20260101-000000-1.json").write_text(json.dumps(
        {"launcher": "local-jobs", "engine": "local", "folder": str(out / "jobs"), "jobs": {UNITS[0]: os.getpid()}}))
    assert J.active_units(out) == {UNITS[0]: f"local-jobs job {os.getpid()}: running"}
    J.launch(_invocation([*PLAN_FLAGS, "--out", str(out), "--launcher", "local-jobs"]), runner.run, [UNITS[0]], out)
    said = capsys.readouterr().out
    assert f"{UNITS[0]}: not submitted again, its job has not ended" in said and "  submitted " not in said
    assert not (out / "jobs").exists()


@pytest.mark.slow
def test_a_jobs_unit_record_equals_a_local_runs(tmp_path, monkeypatch):
    """The same --quick unit run in this process (``--launcher local``) and as a LocalExecutor job (a real
    subprocess calling the runner with the job's invocation): the two unit files hold equal values, timings and
    provenance aside (``scale.ledger.verify``'s comparison)."""
    from scale.ledger.verify import differences

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    files = {}
    for how, flags in (("local", []), ("job", ["--launcher", "local-jobs"])):
        out = tmp_path / how
        assert R.main([*PLAN_FLAGS, "--out", str(out), "--units", UNITS[0], *flags]) == 0
        (path,) = _unit_files(out, UNITS[0])
        files[how] = json.loads(path.read_text())
    assert files["local"]["status"] == "finished" and files["local"]["history"]
    assert differences(files["local"], files["job"]) == ([], [])  # (numbers, texts) that differ: none
