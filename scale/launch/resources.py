"""How an invocation's units run (``Launch``: the launcher, what one job asks of the cluster, the local slots), from
flags or a recipe (``--resources FILE.toml``), the flags themselves, and ``Launch.argv``: the same launch as flags.

A recipe is a flat TOML table of the keys below (dashes or underscores); a flag given on the command line
overrides the recipe. Read with ``tomllib``; nothing is executed. A key that is not one of them, a value of the
wrong type or a non-positive number is one line naming it and the valid keys (exit 2).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from scale.engine import read
from scale.engine.flags import MAX_THREADS, bounded

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser from PyPI
    import tomli as tomllib

LAUNCHERS = ("local", "local-jobs", "slurm")
RECIPE_MAX_BYTES = 1 << 16


class LaunchError(ValueError):
    """A launch setting cannot be used; the message is one line naming it and the valid choices (exit 2)."""


@dataclass(frozen=True)
class Resources:
    """One job's request: a unit runs on one node in one task."""

    gpus: int = 0  # per job (Slurm --gpus-per-node; the local jobs' CUDA_VISIBLE_DEVICES slots)
    cpus: int = 1  # per job (Slurm --cpus-per-task)
    mem_gb: float = 8.0
    time_min: int = 240  # the wall-time limit of one attempt; a timed-out job is requeued from its checkpoint
    partition: str | None = None
    account: str | None = None
    array_parallelism: int = 64  # Slurm: jobs of one array running at once
    requeues: int = 3  # how many times a timed-out or preempted job is resubmitted

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_TYPES = {f.name: f.type for f in fields(Resources)}
_FLAGS = {"gpus": "--gpus-per-job", "cpus": "--cpus-per-job", "mem_gb": "--mem-gb", "time_min": "--time-min",
          "partition": "--partition", "account": "--account", "array_parallelism": "--array-parallelism",
          "requeues": "--requeues"}  # each resource's flag (add_arguments)
_NUMBERS = {"gpus": int, "cpus": int, "mem_gb": float, "time_min": int, "array_parallelism": int, "requeues": int}
# each number's range: up to a job's largest sensible request (a node's GPUs and cores, 1 PiB, a year)
_RANGES = {"gpus": (0, 1024), "cpus": (1, MAX_THREADS), "mem_gb": (1e-3, 1 << 20), "time_min": (1, 366 * 24 * 60),
           "array_parallelism": (1, 10**6), "requeues": (0, 1000)}


def read_recipe(path: str | Path) -> dict[str, Any]:
    """The recipe's keys (underscored), checked; ``LaunchError`` otherwise."""

    try:
        data = tomllib.loads(read.read_regular(path, RECIPE_MAX_BYTES).decode("utf-8"))
    except (OSError, read.Unreadable, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise LaunchError(f"--resources {path}: not a readable TOML recipe ({exc})") from None
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name not in _TYPES:
            raise LaunchError(f"--resources {path}: unknown key {key!r}; valid: {', '.join(_TYPES)}")
        out[name] = value
    return out


def resources(recipe: str | None, flags: Mapping[str, Any]) -> Resources:
    """The recipe's values, then every flag given (``flags``: name -> value, None where not given); checked."""
    values = read_recipe(recipe) if recipe else {}
    for name in _TYPES:
        if flags.get(name) is not None:
            values[name] = flags[name]
    for name, value in values.items():
        kind = _NUMBERS.get(name)
        if kind is None:
            if value is not None and not isinstance(value, str):
                raise LaunchError(f"{name} must be a name (text), got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
            raise LaunchError(f"{name} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
        elif value < (0 if name in ("gpus", "requeues") else 1e-9):
            raise LaunchError(f"{name} must be {'at least 0' if name in ('gpus', 'requeues') else 'positive'}, "
                              f"got {value!r}")
        else:  # and finite, below what any cluster grants (--mem-gb nan passed every check above)
            try:
                values[name] = bounded(_FLAGS[name], value, _RANGES[name][0], _RANGES[name][1], kind)
            except ValueError as exc:
                raise LaunchError(str(exc)) from None
    return Resources(**values)


@dataclass(frozen=True)
class Launch:
    """How an invocation's units run: in this process (``local``) or as jobs, with what each job asks for."""

    launcher: str = "local"
    resources: Resources = field(default_factory=lambda: Resources())
    node_gpus: tuple[int, ...] = ()  # local-jobs: one job per device at a time
    parallel: int | None = None  # local-jobs without node_gpus: jobs at once
    no_wait: bool = False
    gpu_name: str = "A100"  # --dry-run: the GPU the GPU-hours are estimated for

    def argv(self) -> list[str]:
        """The flags that give this launch (the resources as resolved: a recipe's values become flags)."""
        if self.launcher == "local":
            return []
        out = ["--launcher", self.launcher]
        default = Resources()
        for name, flag in _FLAGS.items():
            value = getattr(self.resources, name)
            if value != getattr(default, name):
                out += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
        if self.node_gpus:
            out += ["--node-gpus", ",".join(map(str, self.node_gpus))]
        if self.parallel is not None:
            out += ["--parallel", str(self.parallel)]
        if self.no_wait:
            out.append("--no-wait")
        if self.gpu_name != Launch.gpu_name:
            out += ["--gpu-name", self.gpu_name]
        return out


LOCAL = Launch()


def launch_of(flags: Mapping[str, Any]) -> Launch:
    """The launch given by the flags of ``add_arguments`` (``flags``: dest -> value, as argparse fills them), every
    one checked before anything is written; ``LaunchError`` otherwise."""
    res = resources(flags.get("resources"), {name: flags.get(f"job_{name}") for name in _TYPES})
    gpus = node_gpus(flags.get("node_gpus"))
    parallel = flags.get("parallel")
    if parallel is not None and parallel < 1:
        raise LaunchError(f"--parallel must be a positive integer, got {parallel}")
    try:
        bounded("--parallel", parallel, 1, MAX_THREADS, int)
    except ValueError as exc:
        raise LaunchError(str(exc)) from None
    launcher = flags.get("launcher") or "local"
    if flags.get("no_wait") and launcher == "local":
        raise LaunchError("--no-wait needs a job launcher: --launcher slurm or local-jobs (local runs here and waits)")
    return Launch(launcher, res, tuple(gpus), parallel, bool(flags.get("no_wait")), flags.get("gpu_name") or "A100")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The launch flags, shared by ``scale.paper`` and ``scale.replicate``."""
    g = p.add_argument_group("launching (docs/launch.md)")
    g.add_argument("--launcher", choices=LAUNCHERS, default="local",
                   help="local: in this process, one unit after another (default); local-jobs: each unit a job of "
                   "submitit's LocalExecutor on this machine (one per --node-gpus slot at a time); slurm: each unit "
                   "a job of a Slurm array through submitit")
    g.add_argument("--no-wait", action="store_true", help="submit and return; a later --collect (the same command "
                   "with --collect instead) reads the results")
    g.add_argument("--collect", action="store_true", help="submit nothing: rebuild the results and report from "
                   "the unit files, name the missing units and the one command that runs only them (exit 3 if any)")
    g.add_argument("--units", metavar="NAMES", help="comma-separated unit names of the plan: run only these")
    g.add_argument("--as-job", action="store_true", help="set in each job's command by the launcher: the unit's "
                   "file, no report (the invocation that collects writes it)")
    g.add_argument("--resources", metavar="FILE.toml", help="a recipe of the job resources below")
    g.add_argument("--gpus-per-job", metavar="N", dest="job_gpus", type=int, help="GPUs per job (default 0)")
    g.add_argument("--cpus-per-job", metavar="N", dest="job_cpus", type=int, help="CPUs per job (default 1)")
    g.add_argument("--mem-gb", metavar="GB", dest="job_mem_gb", type=float, help="memory per job in GB (default 8)")
    g.add_argument("--time-min", metavar="MIN", dest="job_time_min", type=int, help="wall time per job attempt, "
                   "minutes (default 240; a timed-out job is requeued from its checkpoint)")
    g.add_argument("--partition", metavar="NAME", dest="job_partition", help="Slurm partition")
    g.add_argument("--account", metavar="NAME", dest="job_account", help="Slurm account")
    g.add_argument("--array-parallelism", metavar="N", dest="job_array_parallelism", type=int,
                   help="Slurm: jobs of the array running at once (default 64)")
    g.add_argument("--requeues", metavar="N", dest="job_requeues", type=int, help="times a timed-out or preempted "
                   "job is resubmitted (default 3)")
    g.add_argument("--node-gpus", metavar="IDS", help="local-jobs: comma-separated CUDA device ids of this node; one "
                   "job per device at a time (a single multi-GPU node)")
    g.add_argument("--parallel", metavar="N", type=int, help="local-jobs without --node-gpus: jobs at once "
                   "(default 1)")
    g.add_argument("--gpu-name", metavar="NAME", default="A100", help="--dry-run: the GPU the GPU-hours are "
                   "estimated for (default A100)")


def node_gpus(text: str | None) -> list[int]:
    if not text:
        return []
    try:
        ids = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise LaunchError(f"--node-gpus takes comma-separated device ids (e.g. 0,1,2,3), got {text!r}") from None
    if not ids or min(ids) < 0 or len(set(ids)) != len(ids):
        raise LaunchError(f"--node-gpus takes distinct non-negative device ids, got {text!r}")
    return ids
