"""``--dry-run``: what a plan would cost and which jobs it would submit, before anything is submitted.

GPU-hours of a unit = its estimated seconds on the device (the command's own estimate, which states what it rests
on) x the GPUs its job holds (at least 1: a GPU job holds its device for the whole unit) / 3600. The device is
named (``--gpu-name``) so the estimate says which GPU it is meant for; where that GPU was never measured the line
says so, and the hours are the command's device factor, not a measurement of that GPU.
"""

from __future__ import annotations

from collections.abc import Callable

from scale.launch.jobs import Invocation, command_line
from scale.launch.resources import Resources

# GPUs whose throughput a unit of this project was measured on (name -> what it rests on); empty: none yet.
MEASURED_GPUS: dict[str, str] = {}


def gpu_hours(seconds: float, res: Resources) -> float:
    return seconds * max(res.gpus, 1) / 3600.0


def print_cost(inv: Invocation, units: list[tuple[str, float]], basis: str, device: str,
               log: Callable[[str], None] = print) -> None:
    """One line per unit (seconds, GPU-hours on the launch's GPU name where ``device`` is cuda), the totals, and the
    jobs ``inv``'s launcher would submit with its resources."""
    launcher, res, gpu_name = inv.launch.launcher, inv.launch.resources, inv.launch.gpu_name
    on_gpu = device == "cuda"
    named = (f"{gpu_name}: " + (MEASURED_GPUS[gpu_name] if gpu_name in MEASURED_GPUS
                                else "not measured; the estimate's device factor stands for it")) if on_gpu else ""
    total = 0.0
    for name, sec in units:
        total += sec
        log(f"  {name}  ~{sec:.0f} s" + (f" = {gpu_hours(sec, res):.3f} GPU-h on {gpu_name}" if on_gpu else ""))
    log(f"estimated: {len(units)} units, {total:.0f} s = {total / 3600:.2f} h of one {device} worker"
        + (f" = {gpu_hours(total, res):.2f} GPU-h on {gpu_name} ({max(res.gpus, 1)} GPU per job)" if on_gpu else "")
        + f" ({basis}{'; ' + named if named else ''})")
    if launcher == "local":
        log(f"jobs: none (--launcher local runs the {len(units)} units in this process, one after another)")
        return
    what = "one Slurm job array" if launcher == "slurm" else "submitit LocalExecutor jobs on this machine"
    log(f"jobs: {len(units)} job(s) as {what}; each: {res.gpus} GPU, {res.cpus} CPU, {res.mem_gb:g} GB, "
        f"{res.time_min} min per attempt, requeued at most {res.requeues} times"
        + (f", partition {res.partition}" if res.partition else "")
        + (f", account {res.account}" if res.account else "")
        + (f", at most {res.array_parallelism} at once" if launcher == "slurm" else ""))
    longest = max((sec for _, sec in units), default=0.0)
    if longest > 60 * res.time_min:
        log(f"  note: the longest unit (~{longest / 60:.0f} min) exceeds --time-min {res.time_min}: it will be "
            "requeued from its checkpoint (written at every epoch end)")
    for name, _ in units[:3]:
        log(f"  job {name}: {command_line(inv.for_job(name))}")
    if len(units) > 3:
        log(f"  ... and {len(units) - 3} more, each with its own --units NAME")
