"""What one job asks of the cluster, from flags or a recipe (``--resources FILE.toml``), and the flags themselves.

A recipe is a flat TOML table of the keys below (dashes or underscores); a flag given on the command line
overrides the recipe. Read with ``tomllib``; nothing is executed. A key that is not one of them, a value of the
wrong type or a non-positive number is one line naming it and the valid keys (exit 2).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from scale.engine import read

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser from PyPI
    import tomli as tomllib

LAUNCHERS = ("local", "local-jobs", "slurm")
RECIPE_MAX_BYTES = 1 << 16


class LaunchError(ValueError):
    """A launch setting cannot be used; the message is one line naming it and the valid choices (exit 2)."""


@dataclass
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
_NUMBERS = {"gpus": int, "cpus": int, "mem_gb": float, "time_min": int, "array_parallelism": int, "requeues": int}


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


def resources(args: argparse.Namespace) -> Resources:
    """The recipe's values, then every flag given; checked."""
    values = read_recipe(args.resources) if args.resources else {}
    for name in _TYPES:
        flag = getattr(args, f"job_{name}", None)
        if flag is not None:
            values[name] = flag
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
        else:
            values[name] = kind(value)
    return Resources(**values)


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
    g.add_argument("--node-gpus", metavar="IDS", help="local-jobs: comma-separated CUDA device ids of this node; one "
                   "job per device at a time (a single multi-GPU node)")
    g.add_argument("--parallel", metavar="N", type=int, help="local-jobs without --node-gpus: jobs at once "
                   "(default 1)")
    g.add_argument("--gpu-name", metavar="NAME", default="A100", help="--dry-run: the GPU the GPU-hours are "
                   "estimated for (default A100)")


# The flags a job's own command line leaves out: the launch itself, and what chose this invocation's share.
LAUNCH_ONLY = {"--launcher": 1, "--no-wait": 0, "--collect": 0, "--units": 1, "--resources": 1, "--gpus-per-job": 1,
               "--cpus-per-job": 1, "--mem-gb": 1, "--time-min": 1, "--partition": 1, "--account": 1,
               "--array-parallelism": 1, "--node-gpus": 1, "--parallel": 1, "--gpu-name": 1, "--dry-run": 0,
               "--shard": 1, "--budget-s": 1, "--only": 1, "--as-job": 0}


def without(raw: list[str], flags: dict[str, int]) -> list[str]:
    """``raw`` without ``flags`` (name -> how many values follow it; ``--flag=value`` too)."""
    out: list[str] = []
    skip = 0
    for tok in raw:
        if skip:
            skip -= 1
            continue
        name = tok.split("=", 1)[0]
        if name in flags:
            skip = 0 if "=" in tok else flags[name]
            continue
        out.append(tok)
    return out


def check(args: argparse.Namespace) -> Resources:
    """Every launch flag checked before anything is written; the job resources."""
    res = resources(args)
    node_gpus(args.node_gpus)
    if args.parallel is not None and args.parallel < 1:
        raise LaunchError(f"--parallel must be a positive integer, got {args.parallel}")
    if args.no_wait and args.launcher == "local":
        raise LaunchError("--no-wait needs a job launcher: --launcher slurm or local-jobs (local runs here and waits)")
    return res


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
