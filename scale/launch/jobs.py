"""Units as jobs through submitit: submit, wait or return, read the jobs' states back.

Each unit is one job whose function is ``UnitJob``: the command's runner called with the invocation of that unit
alone, run locally (``Invocation.for_job``), so a job runs the very code path of a local run and writes the unit's
one immutable file. The job is ``submitit.helpers.Checkpointable``: on a timeout or preemption (submitit's USR2) it
is requeued with the same invocation, which resumes the unit from its last checkpoint (a grid run from its run
directory's checkpoint.pt; a ledger unit from its work folder's, ``scale.ledger.work``), at most
``Resources.requeues`` times.

    slurm       ``submitit.AutoExecutor(cluster="slurm")``: the units of one invocation as one job array
    local-jobs  ``submitit.LocalExecutor``: real subprocesses on this machine, the same pickled submission; one
                job per ``--node-gpus`` device (``CUDA_VISIBLE_DEVICES`` set to it) or ``--parallel`` jobs at once

submitit keeps its own files (the pickled submission, logs, results) in ``OUT/jobs``; a job unpickles its
submission from there (submitit's design: OUT must be writable by its owner alone). A SIGTERM (a preemption's
first signal on many clusters) reaches ``scale.run``'s handler instead: a checkpoint, exit 130, the job failed,
and ``--collect``'s rerun command resumes it. Each submission is recorded, written once, in ``OUT/launch/``
(the launcher, the resources, unit -> job id, the command), so a later ``--collect`` names the jobs of missing
units, and ``rerun_command`` renders the one command that runs only them from the invocation (nothing edits or
parses a command line).
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Protocol

import submitit

from scale.engine import disk, read
from scale.launch.resources import Launch, LaunchError, Resources

POLL_S = 1.0
# submitit's name of the engine behind --launcher slurm. The tests set "local": AutoExecutor then builds the same
# array of the same pickled submissions and runs it with its local executor (real subprocesses, no Slurm).
SLURM_CLUSTER = "slurm"


class Invocation(Protocol):
    """What a many-run command's typed invocation gives the launcher (``scale.ledger.invocation``,
    ``scale.grid.invocation``)."""

    module: ClassVar[str]  # the command, for the lines it prints
    launch: Launch

    def argv(self) -> list[str]: ...  # the flags that give this invocation

    def for_job(self, unit: str) -> Any: ...  # this invocation for ``unit`` alone, run in the job's process

    def for_rerun(self, units: list[str]) -> Any: ...  # this invocation for ``units`` alone, same launch, waiting


class UnitJob(submitit.helpers.Checkpointable):
    """``run(invocation)`` in the job's process (``run``: the command's runner, pickled by reference); a nonzero
    exit raises (the job counts as failed)."""

    def __init__(self, run: Callable[[Any], int], invocation: Any) -> None:
        self.run, self.invocation = run, invocation

    def __call__(self) -> int:
        code = self.run(self.invocation)
        if code:
            raise RuntimeError(f"{getattr(self.run, '__qualname__', self.run)} of {self.invocation!r} exited {code}")
        return 0


def command_line(inv: Invocation, *extra: str) -> str:
    """``python -m MODULE FLAGS``: the command of ``inv``."""
    return shlex.join(["python", "-m", inv.module, *inv.argv(), *extra])


def rerun_command(inv: Invocation, units: list[str]) -> str:
    """The one command that runs only ``units`` (with this invocation's launcher and resources)."""
    return command_line(inv.for_rerun(units))


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


def submit(launcher: str, folder: Path, res: Resources, jobs_of: list[tuple[str, UnitJob]],
           gpus: tuple[int, ...] = (), parallel: int | None = None, wait: bool = True,
           log: Callable[[str], None] = print,
           submitted: Callable[[dict[str, Any]], None] = lambda jobs: None) -> dict[str, Any]:
    """Submit ``jobs_of`` (unit, its job), one job each; with ``wait``, return once every job ended.
    ``{unit: job}``; ``submitted`` is called with each batch as soon as it is submitted (the array; each local
    job). ``local-jobs`` keeps at most one job per ``gpus`` slot (or ``parallel``) running, so ``wait=False``
    there needs every job to start at once."""

    disk.make_dirs(folder)
    if launcher == "slurm":
        ex = _slurm_executor(folder, res, jobs_of[0][1].invocation.module if jobs_of else "scale")
        with ex.batch():  # one array
            jobs = [(u, ex.submit(job)) for u, job in jobs_of]
        out = {u: j for u, j in jobs}
        submitted(out)
        for u, j in jobs:
            log(f"  submitted {u}: {ex.cluster} job {j.job_id}")
        if wait:
            wait_all(out, log)
        return out
    slots: list[int | None] = list(gpus) or [None] * (parallel or 1)
    if not wait and len(jobs_of) > len(slots):
        raise LaunchError(f"--launcher local-jobs --no-wait starts every job now, but {len(jobs_of)} jobs exceed "
                          f"the {len(slots)} slot(s) (--node-gpus or --parallel); raise --parallel, or wait")
    running: dict[int, tuple[str, Any]] = {}
    out: dict[str, Any] = {}
    pending = list(jobs_of)
    while pending or running:
        for i in [i for i, (_, j) in running.items() if j.done()]:
            u, j = running.pop(i)
            log(f"  {u}: job {j.job_id} {j.state}")
        free = [i for i in range(len(slots)) if i not in running]
        while pending and free:
            u, job = pending.pop(0)
            i = free.pop(0)
            j = _local_executor(folder, res, slots[i]).submit(job)
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


def check_gpus(launch: Launch, wants_gpu: bool) -> None:
    """A unit that runs on CUDA gets a GPU in its job: submitit's local engine hides every device a job did not ask
    for, and a Slurm job without --gpus-per-job has none."""
    if not wants_gpu or launch.resources.gpus or (launch.launcher == "local-jobs" and launch.node_gpus):
        return
    if launch.launcher == "local-jobs":
        raise LaunchError("--launcher local-jobs on CUDA: name the node's devices with --node-gpus 0,1,... (one job "
                          "per device) or give --gpus-per-job N; without them a job sees no GPU")
    if launch.launcher == "slurm":
        raise LaunchError("--launcher slurm on CUDA: give --gpus-per-job N (N >= 1); without it a job gets no GPU")


def launch(inv: Invocation, run: Callable[[Any], int], units: list[str], out: Path, wants_gpu: bool = False,
           log: Callable[[str], None] = print) -> None:
    """Submit ``units`` of ``inv`` as jobs, each calling ``run`` with its unit's invocation (``Invocation.for_job``);
    wait unless ``inv.launch.no_wait``. ``wants_gpu``: the units run on CUDA (``check_gpus``)."""

    spec = inv.launch
    check_gpus(spec, wants_gpu)  # the commands check it before writing anything
    active = active_units(out)
    for u in [u for u in units if u in active]:
        log(f"  {u}: not submitted again, its job has not ended ({active[u]})")
    units = [u for u in units if u not in active]
    if not units:
        log(f"{inv.module}: nothing to submit: every chosen unit is stored or has a job that has not ended")
        return
    folder = out / "jobs"
    command = command_line(inv)
    jobs = submit(spec.launcher, folder, spec.resources, [(u, UnitJob(run, inv.for_job(u))) for u in units],
                  spec.node_gpus, spec.parallel, wait=not spec.no_wait, log=log,
                  submitted=lambda batch: record_submission(out, spec.launcher, folder, spec.resources, batch,
                                                            command))
    if spec.no_wait:
        log(f"{inv.module}: {len(jobs)} jobs submitted (recorded in {out / 'launch'}); collect with: "
            f"{command_line(replace(inv, launch=replace(spec, no_wait=False)), '--collect')}")
