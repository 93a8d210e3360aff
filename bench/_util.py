"""Shared benchmark helpers: interleaved timing and atomic result files."""

from __future__ import annotations

import os
import platform
import shlex
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from mini.atomic import atomic_write_text


def interleaved_times(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """Every round's wall time of each function, run in alternation (A B A B ...) so that machine noise
    hits every contender alike."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def interleaved_median(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median wall time of each function over ``interleaved_times``' rounds; ratios of these medians are what we
    report."""
    return {name: sorted(ts)[len(ts) // 2] for name, ts in interleaved_times(fns, repeats).items()}


def result_path(out: str | None, default: Path, check: bool) -> Path:
    """Where a benchmark writes its result: the file ``--out`` names; in a check mode (``--quick``, ``--tiny``: it
    checks that the benchmark runs and measures nothing) a fresh temporary folder, so that a check never replaces a
    measurement under ``bench/results``; otherwise the measurement's own file ``default``."""
    if out is not None:
        return Path(out)
    if check:
        return Path(tempfile.mkdtemp(prefix="bench-check-")) / default.name
    return default


def out_help(default: Path) -> str:
    """The ``--out`` flag's help: where a benchmark writes, with and without a check mode (``result_path``)."""
    shown = default.relative_to(Path(__file__).resolve().parent.parent) if default.is_absolute() else default
    return f"the result file (default {shown}; in a check mode a temporary folder: a check never replaces it)"


def machine() -> str:
    """Architecture, processor model (the ratios depend on it: BLAS runs other kernels on other processors), cores
    and Python."""
    return f"{platform.machine()} ({processor()}), {os.cpu_count()} cores, Python {platform.python_version()}"


def processor() -> str:
    """The processor's model name (``/proc/cpuinfo``), or ``platform.processor()`` where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "processor unknown"


def commit() -> str:
    """The git commit of the working tree, as every result of the project records it
    (``scale.runs.run_report.git_commit``: ``+dirty`` when the code differs from it, the benchmarks' own result
    files aside), its first 12 digits."""
    from scale.runs.run_report import git_commit

    return git_commit(short=True)


def run_header(module: str, argv: list[str], threads: int) -> str:
    """The command, machine, versions, fixed thread count, commit and load: the first lines of a result."""
    import torch

    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return (f"`python -m {module} {shlex.join(argv)}`".replace(" `", "`") + "  \n"
            f"{machine()}; torch {torch.__version__}; **{threads} torch thread(s), fixed**; commit {commit()}; "
            f"load average at the start {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min).")


def peak_memory() -> str:
    """The peak resident set of this process and of its finished children (``getrusage``), for every result."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # KB on Linux -> GB
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024**2
    return (f"Peak resident memory: {own:.2f} GB (this process)" +
            (f", {children:.2f} GB (the largest of its finished child processes)." if children else "."))


def write_atomic(path: str | Path, text: str) -> None:
    """Results files go through the project's one atomic writer; each ends with the peak memory so far."""
    atomic_write_text(path, text.rstrip("\n") + "\n\n" + peak_memory() + "\n")


def publish(path: str | Path, lines: list[str]) -> int:
    """A bench's result: the lines written atomically to ``path`` and printed; the exit code 0."""
    text = "\n".join([*lines, ""])
    write_atomic(path, text)
    print(text)
    return 0
