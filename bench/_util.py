"""Shared benchmark helpers: interleaved timing and atomic result files."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

from mini.atomic import atomic_write_text


def interleaved_median(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median wall time of each function, run in alternation (A B A B ...) so that machine noise
    hits every contender alike; ratios of these medians are what we report."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def write_atomic(path: str | Path, text: str) -> None:
    """Results files go through the project's one atomic writer."""
    atomic_write_text(path, text)
