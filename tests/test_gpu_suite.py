"""bench.gpu_suite: every section runs in its tiny CPU mode and writes what it measured (the GPU figures themselves
need a GPU; this keeps the prepared suite working until one is lent: ``tests/test_bench_checks.py`` runs the tiny
suite once, in a clean clone, and ``tests/_gpu_suite_rows.py`` checks every row it wrote); a section that fails,
``SystemExit`` included, is recorded and the others still run and are written as they finish; the time budget
skips what no longer fits; ``--sections`` runs a subset."""

from __future__ import annotations

import pytest

from bench import gpu_suite
from bench.gpu_suite import main


def test_the_ledger_section_is_listed_and_builds_the_ledgers_commands(tmp_path):
    """The ledger's GPU subset is a section with its own estimate (so its own timeout); its commands parse with
    ``scale.replicate``'s own parser into the E3/E4 core at 2 seeds and the E2 mechanism at 1 seed, short, on CUDA,
    each into its own store."""
    from bench._gpu_sections import LEDGER_RUNS, ledger_commands
    from scale.replicate import build_parser

    assert list(gpu_suite.SECTIONS).index("ledger") < list(gpu_suite.SECTIONS).index("headline")
    assert gpu_suite.ESTIMATE_S["ledger"] > 0
    cmds = ledger_commands("cuda", tmp_path, dry_run=False)
    got = []
    for cmd in cmds:
        assert cmd[1:3] == ["-m", "scale.replicate"] and "--dry-run" not in cmd
        args = build_parser().parse_args(cmd[3:])
        got.append((args.dataset, args.device, args.seeds, args.experiments, args.epochs, args.out))
    assert got == [("digits", "cuda", 2, "E3E4", "E3E4=10", str(tmp_path / "e3e4")),
                   ("digits", "cuda", 1, "E2", "E2=10", str(tmp_path / "e2"))]
    assert [(e, s) for e, s, _ in LEDGER_RUNS] == [("E3E4", 2), ("E2", 1)]


def test_a_failing_section_ends_only_itself_and_the_rest_is_written_as_it_finishes(tmp_path, monkeypatch):
    out = tmp_path / "gpu_suite.md"
    seen = {}

    def exits(run):  # what a bench's own argument check does
        raise SystemExit(2)

    def raises(run):
        raise RuntimeError("out of memory")

    def reads_the_file(run):  # the sections before it are already in the file
        seen["text"] = out.read_text()
        run.lines += ["## probe", "", "still running", ""]

    monkeypatch.setitem(gpu_suite.SECTIONS, "paper", gpu_suite.Section(exits))
    monkeypatch.setitem(gpu_suite.SECTIONS, "lanczos", gpu_suite.Section(raises))
    monkeypatch.setitem(gpu_suite.SECTIONS, "tracking", gpu_suite.Section(reads_the_file))
    code = main(["--device", "cpu", "--tiny", "--threads", "1", "--out", str(out),
                 "--sections", "headline", "cupy", "lanczos", "tracking", "paper"])  # the suite's order, whatever
    text = out.read_text()
    assert code == 1
    assert "## paper: FAILED (SystemExit: 2)" in text and "## lanczos: FAILED (RuntimeError: out of memory)" in text
    assert "## paper: FAILED" in seen["text"] and "still running" not in seen["text"]
    assert "still running" in text and "closed form on CuPy against mini" in text
    assert "| the paper's pipeline, fp32 (per image, DataLoader workers) | not measured |" in text
    assert text.index("## paper") < text.index("still running") < text.index("## lanczos") < text.index("CuPy")
    assert "## Imports" not in text and "Failed sections: paper, lanczos." in text


def test_the_time_budget_does_not_run_what_no_longer_fits_and_exits_non_zero(tmp_path, capsys):
    out = tmp_path / "gpu_suite.md"
    code = main(["--device", "cpu", "--threads", "1", "--out", str(out), "--sections", "cupy", "--budget-s", "1"])
    text = out.read_text()
    assert code == gpu_suite.CUT != 0
    assert "## cupy: NOT RUN (its estimate, 15 s, exceeds the" in text and "--sections cupy" in text
    assert "Not run for lack of budget: cupy." in text and "not run cupy" in capsys.readouterr().err


SLEEP_S, BUDGET_S = 30.0, 1.5  # a section that sleeps far past the whole budget


def test_a_section_past_its_timeout_is_stopped_and_the_cut_run_names_what_did_not_run(tmp_path, monkeypatch, capsys):
    """The alarm stops the sleeping section at the budget (not after its 30 s), the sections after it are not run,
    the file's last line and stderr name both, and the exit code is ``CUT``."""
    import time

    out = tmp_path / "gpu_suite.md"
    monkeypatch.setitem(gpu_suite.SECTIONS, "tracking", gpu_suite.Section(lambda run: time.sleep(SLEEP_S)))
    t0 = time.perf_counter()
    code = main(["--device", "cpu", "--tiny", "--threads", "1", "--out", str(out), "--budget-s", str(BUDGET_S),
                 "--sections", "imports", "tracking", "cupy", "headline"])
    wall = time.perf_counter() - t0
    text = out.read_text()
    assert wall < SLEEP_S / 3, wall
    assert code == gpu_suite.CUT
    assert "## tracking: STOPPED (past its timeout of" in text
    assert "## cupy: NOT RUN" in text and "## headline: NOT RUN" in text and "## Imports" in text
    assert text.splitlines()[-3].endswith("Stopped at their timeout: tracking. Not run for lack of budget: cupy, "
                                          "headline.")  # the last line but the peak memory's
    assert text.splitlines()[-1].startswith("Peak resident memory:")
    assert "stopped tracking; not run cupy, headline" in capsys.readouterr().err


def test_a_section_the_alarm_cannot_interrupt_ends_the_process_with_the_file_written(tmp_path):
    """A section stuck where the alarm cannot reach it (here: SIGALRM blocked, as in one long call in C) is ended by
    the watchdog ``HARD_GRACE_S`` after its timeout: exit ``CUT``, and the file names it and what did not run."""
    import subprocess
    import sys

    out = tmp_path / "gpu_suite.md"
    script = f"""
import signal, sys, time
from bench import gpu_suite
import bench._gpu_run
bench._gpu_run.HARD_GRACE_S = 1.0
def stuck(run):
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
    time.sleep({SLEEP_S})
gpu_suite.SECTIONS["tracking"] = gpu_suite.Section(stuck)
sys.exit(gpu_suite.main(["--device", "cpu", "--tiny", "--threads", "1", "--out", {str(out)!r}, "--budget-s", "1",
                         "--sections", "tracking", "headline"]))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=SLEEP_S)
    text = out.read_text()
    assert proc.returncode == gpu_suite.CUT, proc.stderr
    assert "## tracking: STOPPED (hung 1 s past its 1 s timeout" in text
    assert "Stopped at their timeout: tracking. Not run for lack of budget: headline." in text


def test_gpu_suite_refuses_cuda_without_a_gpu(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["--device", "cuda", "--tiny"]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--device", "cpu", "--sections", "nonesuch"])
