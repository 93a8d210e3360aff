"""Units as jobs through submitit: submit, wait or return, read the jobs' states back.

Each unit is one job whose function is ``CommandJob``: the command's own ``main`` with ``--launcher local
--units NAME``, so a job runs the very code path of a local run and writes the unit's one immutable file. The
job is ``submitit.helpers.Checkpointable``: on a timeout or preemption (submitit's USR2) it is requeued with the
same command, which resumes the unit from its last checkpoint (a grid run from its run directory's checkpoint.pt;
a ledger unit from its work folder's, ``scale.ledger.work``), at most ``Resources.requeues`` times.

    slurm       ``submitit.AutoExecutor(cluster="slurm")``: the units of one invocation as one job array
    local-jobs  ``submitit.LocalExecutor``: real subprocesses on this machine, the same pickled submission; one
                job per ``--node-gpus`` device (``CUDA_VISIBLE_DEVICES`` set to it) or ``--parallel`` jobs at once

submitit keeps its own files (the pickled submission, logs, results) in ``OUT/jobs``; a job unpickles its
submission from there (submitit's design: OUT must be writable by its owner alone). A SIGTERM (a preemption's
first signal on many clusters) reaches ``scale.run``'s handler instead: a checkpoint, exit 130, the job failed,
and ``--collect``'s rerun command resumes it. Each submission is recorded, written once, in ``OUT/launch/``
(the launcher, the resources, unit -> job id, the command), so a later ``--collect`` names the jobs of missing
units.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import submitit

from scale.engine import disk, read
from scale.launch.resources import LAUNCH_ONLY, LaunchError, Resources, node_gpus, resources, without

POLL_S = 1.0
# submitit's name of the engine behind --launcher slurm. The tests set "local": AutoExecutor then builds the same
# array of the same pickled submissions and runs it with its local executor (real subprocesses, no Slurm).
SLURM_CLUSTER = "slurm"


class CommandJob(submitit.helpers.Checkpointable):
    """``MODULE.main(argv)`` in the job's process; a nonzero exit raises (the job counts as failed)."""

    def __init__(self, module: str, argv: list[str]) -> None:
        self.module, self.argv = module, list(argv)

    def __call__(self) -> int:
        import importlib

        code = importlib.import_module(self.module).main(self.argv)
        if code:
            raise RuntimeError(f"python -m {self.module} {shlex.join(self.argv)} exited {code}")
        return 0


def job_command(module: str, raw: list[str], unit: str) -> list[str]:
    """The argv of the job of ``unit``: this invocation's plan flags, run locally, that unit only."""
    return [*without(raw, LAUNCH_ONLY), "--launcher", "local", "--units", unit, "--as-job"]


def rerun_command(module: str, raw: list[str], units: list[str]) -> str:
    """The one command that runs only ``units`` (with this invocation's launcher and resources)."""
    keep = without(raw, {"--no-wait": 0, "--collect": 0, "--units": 1, "--shard": 1, "--budget-s": 1,
                         "--dry-run": 0, "--only": 1, "--as-job": 0})
    return shlex.join(["python", "-m", module, *keep, "--units", ",".join(units)])


def _slurm_executor(folder: Path, res: Resources, name: str) -> Any:
    try:
        ex = submitit.AutoExecutor(folder=folder, cluster=SLURM_CLUSTER, slurm_max_num_timeout=res.requeues)
    except RuntimeError as exc:  # submitit: no sbatch/srun here
        raise LaunchError(f"--launcher slurm: no Slurm on this machine ({exc}); valid here: local, local-jobs "
                          "(--dry-run needs none)") from None
    params: dict[str, Any] = dict(name=name, timeout_min=res.time_min, nodes=1, tasks_per_node=1,
                                  cpus_per_task=res.cpus, mem_gb=res.mem_gb,
                                  slurm_array_parallelism=res.array_parallelism)
    if res.gpus:
        params["gpus_per_node"] = res.gpus
    if res.partition:  # slurm_* parameters: the Slurm executor's (ignored by the local one in tests)
        params["slurm_partition"] = res.partition
    if res.account:
        params["slurm_account"] = res.account
    ex.update_parameters(**params)
    return ex


def _local_executor(folder: Path, res: Resources, gpu: int | None) -> Any:
    ex = submitit.LocalExecutor(folder=folder, max_num_timeout=res.requeues)
    params: dict[str, Any] = dict(timeout_min=res.time_min, tasks_per_node=1, nodes=1)
    if gpu is not None:
        params.update(gpus_per_node=1, visible_gpus=(gpu,))
    elif res.gpus:  # no --node-gpus: every job sees devices 0 .. gpus-1 (submitit hides the others)
        params.update(gpus_per_node=res.gpus)
    ex.update_parameters(**params)
    return ex


def submit(launcher: str, folder: Path, res: Resources, commands: list[tuple[str, str, list[str]]],
           gpus: str | None = None, parallel: int | None = None, wait: bool = True,
           log: Callable[[str], None] = print,
           submitted: Callable[[dict[str, Any]], None] = lambda jobs: None) -> dict[str, Any]:
    """Submit ``commands`` (unit, module, argv), one job each; with ``wait``, return once every job ended.
    ``{unit: job}``; ``submitted`` is called with each batch as soon as it is submitted (the array; each local
    job). ``local-jobs`` keeps at most one job per ``gpus`` slot (or ``parallel``) running, so ``wait=False``
    there needs every job to start at once."""

    disk.make_dirs(folder)
    if launcher == "slurm":
        ex = _slurm_executor(folder, res, f"{commands[0][1]}" if commands else "scale")
        with ex.batch():  # one array
            jobs = [(u, ex.submit(CommandJob(m, a))) for u, m, a in commands]
        out = {u: j for u, j in jobs}
        submitted(out)
        for u, j in jobs:
            log(f"  submitted {u}: {ex.cluster} job {j.job_id}")
        if wait:
            wait_all(out, log)
        return out
    slots: list[int | None] = list(node_gpus(gpus)) or [None] * (parallel or 1)
    if not wait and len(commands) > len(slots):
        raise LaunchError(f"--launcher local-jobs --no-wait starts every job now, but {len(commands)} jobs exceed "
                          f"the {len(slots)} slot(s) (--node-gpus or --parallel); raise --parallel, or wait")
    running: dict[int, tuple[str, Any]] = {}
    out: dict[str, Any] = {}
    pending = list(commands)
    while pending or running:
        for i in [i for i, (_, j) in running.items() if j.done()]:
            u, j = running.pop(i)
            log(f"  {u}: job {j.job_id} {j.state}")
        free = [i for i in range(len(slots)) if i not in running]
        while pending and free:
            u, m, a = pending.pop(0)
            i = free.pop(0)
            j = _local_executor(folder, res, slots[i]).submit(CommandJob(m, a))
            running[i] = (u, j)
            out[u] = j
            submitted({u: j})
            where = f" on GPU {slots[i]}" if slots[i] is not None else ""
            log(f"  submitted {u}: local job {j.job_id}{where}")
        if not wait and not pending:
            break
        if running:
            time.sleep(POLL_S)
    return out


def wait_all(jobs: dict[str, Any], log: Callable[[str], None] = print) -> None:
    left = dict(jobs)
    while left:
        for u in [u for u, j in left.items() if j.done()]:
            log(f"  {u}: job {left.pop(u).job_id} {jobs[u].state}")
        if left:
            time.sleep(POLL_S)


def record_submission(out: Path, launcher: str, folder: Path, res: Resources, jobs: dict[str, Any],
                      command: str) -> Path:
    """``OUT/launch/<time>-<pid>.json``, written once: what a later ``--collect`` needs to name the jobs."""

    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = out / "launch" / f"{stamp}-{os.getpid()}.json"
    n = 0
    while os.path.lexists(path):
        n += 1
        path = out / "launch" / f"{stamp}-{os.getpid()}-{n}.json"
    disk.make_dirs(path.parent)
    engine = "slurm" if launcher == "slurm" and SLURM_CLUSTER == "slurm" else "local"
    disk.write_json(path, {"launcher": launcher, "engine": engine, "folder": str(folder), "resources": res.to_dict(),
                           "command": command, "submitted_at": stamp,
                           "jobs": {u: str(j.job_id) for u, j in jobs.items()}})
    return path


ACTIVE = frozenset({"running", "PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "SUSPENDED",
                    "RESIZING"})  # a local job's controller alive, or Slurm's states of a job not yet ended


def job_states(out: Path) -> dict[str, str]:
    """The last recorded job of each unit and its state as submitit reads it now (Slurm: sacct; a local job: its
    controller process alive or not), as ``"LAUNCHER job ID: STATE"``. Empty without records."""
    return {u: f"{launcher} job {job_id}: {state}" for u, (launcher, job_id, state) in _jobs(out).items()}


def active_units(out: Path) -> dict[str, str]:
    """The units whose last recorded job has not ended (``ACTIVE``), with that job's line."""
    return {u: f"{launcher} job {job_id}: {state}" for u, (launcher, job_id, state) in _jobs(out).items()
            if state in ACTIVE}


def _jobs(out: Path) -> dict[str, tuple[str, str, str]]:
    folder = out / "launch"
    states: dict[str, tuple[str, str, str]] = {}
    if not folder.is_dir():
        return states
    for path in sorted(folder.glob("*.json")):
        try:
            rec = read.read_json(path)
        except (OSError, read.Unreadable):
            continue
        for unit, job_id in (rec.get("jobs") or {}).items():
            if rec.get("engine") == "slurm":
                try:
                    state = submitit.SlurmJob(folder=rec["folder"], job_id=str(job_id)).state
                except Exception as exc:  # sacct unreachable: say so rather than guess
                    state = f"unknown ({type(exc).__name__})"
            else:
                state = "running" if _alive(int(job_id)) else "ended"
            states[unit] = (str(rec.get("launcher")), str(job_id), state)
    return states


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (ended, not yet reaped) is not running
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def check_gpus(launcher: str, res: Resources, gpus: str | None, wants_gpu: bool) -> None:
    """A unit that runs on CUDA gets a GPU in its job: submitit's local engine hides every device a job did not ask
    for, and a Slurm job without --gpus-per-job has none."""
    if not wants_gpu or res.gpus or (launcher == "local-jobs" and gpus):
        return
    if launcher == "local-jobs":
        raise LaunchError("--launcher local-jobs on CUDA: name the node's devices with --node-gpus 0,1,... (one job "
                          "per device) or give --gpus-per-job N; without them a job sees no GPU")
    if launcher == "slurm":
        raise LaunchError("--launcher slurm on CUDA: give --gpus-per-job N (N >= 1); without it a job gets no GPU")


def launch(args: Any, module: str, raw: list[str], units: list[str], out: Path, wants_gpu: bool = False,
           log: Callable[[str], None] = print) -> None:
    """Submit ``units`` of this invocation as jobs (``args``: the launch flags); wait unless ``--no-wait``.
    ``wants_gpu``: the units run on CUDA (``check_gpus``)."""

    res = resources(args)
    check_gpus(args.launcher, res, args.node_gpus, wants_gpu)  # the commands check it before writing anything
    active = active_units(out)
    for u in [u for u in units if u in active]:
        log(f"  {u}: not submitted again, its job has not ended ({active[u]})")
    units = [u for u in units if u not in active]
    if not units:
        log(f"{module}: nothing to submit: every chosen unit is stored or has a job that has not ended")
        return
    commands = [(u, module, job_command(module, raw, u)) for u in units]
    folder = out / "jobs"
    command = shlex.join(["python", "-m", module, *raw])
    jobs = submit(args.launcher, folder, res, commands, args.node_gpus, args.parallel, wait=not args.no_wait, log=log,
                  submitted=lambda batch: record_submission(out, args.launcher, folder, res, batch, command))
    if args.no_wait:
        log(f"{module}: {len(jobs)} jobs submitted (recorded in {out / 'launch'}); collect with: "
            f"{shlex.join(['python', '-m', module, *without(raw, {'--no-wait': 0}), '--collect'])}")
