"""Every benchmark's check mode (``--quick``; ``gpu_suite --tiny``, ``bench_pretrained --stand-in``) leaves the
checkout as it found it: it runs in a clean clone of this repository and ``git status --porcelain`` is empty after
it (``bench._util.result_path``: a check writes into a temporary folder unless ``--out`` names a file). Negative
control: the same clone with a file written into ``bench/results`` is not clean, so the test can fail. Where a check's
result is itself checked (``ROWS``: ``gpu_suite --tiny``'s every row), it is read from that temporary folder, so the
check runs once for both.

The clone is of the committed tree (``git clone``): run from a checkout whose changes are committed. CPU time of
each check (``CHECK_CPU_S``: user seconds by ``/usr/bin/time``, 2026-12-06, bench_analyze and bench_tracking
2026-12-07, the shared 2-core AMD EPYC); those of more than ``SLOW_S`` are marked slow. Every check runs at one torch
thread: a pinned pytest-xdist worker has one core (``conftest.py``), where more threads only wait on each other."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from _gpu_suite_rows import assert_every_section_wrote_its_rows

ROOT = Path(__file__).resolve().parents[1]
CHECKS = {  # benchmark -> its check mode's arguments (the smallest grid each offers)
    "bench_analyze": ["--quick", "--threads", "1"],
    "bench_curvature": ["--quick"],
    "bench_epoch": ["--quick"],
    "bench_hessian": ["--quick"],
    "bench_layout": ["--quick"],
    "bench_main_job": ["--quick"],
    "bench_monitor": ["--quick", "--shapes", "digits"],
    "bench_pipeline": ["--quick"],
    "bench_pretrained": ["--stand-in", "--device", "cpu", "--threads", "1"],
    "bench_scaling": ["--quick"],
    "bench_tracking": ["--quick"],
    "gpu_suite": ["--device", "cpu", "--tiny", "--threads", "1"],
    "readme_sample": ["--quick", "--runs", "0:1"],
}
# Every benchmark module with a check mode is listed above; those without one (bench/*.py, not helpers):
NO_CHECK_MODE = {"bench_curvature_parts", "bench_warm_crossing", "ledger_editions", "recipe_search"}
CHECK_CPU_S = {"bench_analyze": 9, "bench_curvature": 6, "bench_epoch": 2, "bench_hessian": 4, "bench_layout": 4,
               "bench_main_job": 33, "bench_monitor": 9, "bench_pipeline": 5, "bench_pretrained": 10,
               "bench_scaling": 14, "bench_tracking": 25, "gpu_suite": 19, "readme_sample": 14}
SLOW_S = 20
ROWS = {"gpu_suite": assert_every_section_wrote_its_rows}  # benchmark -> the check of what its check mode wrote
TIMEOUT_S = 900


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("a clean clone needs git and a git checkout")
    dest = tmp_path_factory.mktemp("bench-clone") / "repo"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(dest)], check=True, capture_output=True)
    assert git("status", "--porcelain", cwd=dest) == ""
    return dest


def test_every_benchmark_is_listed_with_its_check_mode_or_as_having_none():
    modules = {p.stem for p in (ROOT / "bench").glob("*.py") if not p.stem.startswith("_")}
    assert modules == set(CHECKS) | NO_CHECK_MODE
    for name in NO_CHECK_MODE:
        text = (ROOT / "bench" / f"{name}.py").read_text()
        assert "--quick" not in text and "--tiny" not in text and "--stand-in" not in text


@pytest.mark.parametrize("bench", [pytest.param(b, marks=pytest.mark.slow) if CHECK_CPU_S[b] > SLOW_S else b
                                   for b in sorted(CHECKS)])
def test_a_check_mode_leaves_a_clean_clone_clean(clone: Path, bench: str):
    # TMPDIR: a fresh folder for the check's temporary ones, removed after (a short path: multiprocessing puts its
    # AF_UNIX sockets there, at most 107 characters). The curvature benchmarks' trained states stay where a user's
    # runs cache them (bench._states.cache_dir, outside any checkout): under the fresh TMPDIR every run would train
    # them again (about 135 s of CPU for bench_curvature --quick, against its 6 s)
    states = os.environ.get("BENCH_STATE_CACHE") or str(Path(tempfile.gettempdir()) / "bench_curvature_states")
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(clone), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": tmp, "BENCH_STATE_CACHE": states}
        proc = subprocess.run([sys.executable, "-m", f"bench.{bench}", *CHECKS[bench]], cwd=clone, env=env,
                              capture_output=True, text=True, timeout=TIMEOUT_S)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert git("status", "--porcelain", "--ignored", cwd=clone) == "", f"{bench} changed the checkout"
        if bench in ROWS:
            (written,) = Path(tmp).glob(f"bench-check-*/{bench}.md")  # result_path's folder, the result's own name
            ROWS[bench](written.read_text())


def test_negative_control_a_written_result_is_seen(clone: Path):
    result = clone / "bench" / "results" / "epoch.md"
    before = result.read_bytes()
    try:
        result.write_text("a check's output\n")
        assert " bench/results/epoch.md" in git("status", "--porcelain", cwd=clone)
    finally:
        result.write_bytes(before)
    assert git("status", "--porcelain", cwd=clone) == ""
