"""The rules of the disk (``scale.engine.disk``, ``docs/disk.md``) under real faults: a symlink or hard link planted
as ``.lock``, an ``--overwrite`` whose new settings are refused, a recipe asking for a deletion, user files named
like the atomic writer's temporaries, a SIGKILL inside a results write, a SIGINT during a resume, and
``scale.e4_study`` into the results of another plan.

Every case checks its exit code and that every file the project did not write is byte-identical afterwards
(``snapshot`` of the folder and of a file outside it).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scale import e4_study
from scale.run import main
from scale.runs.faults import EXIT_INTERRUPTED, EXIT_USAGE

ROOT = Path(__file__).resolve().parents[1]
TINY = ["synthetic", "--quiet", "--train-subset", "96", "--batch-size", "32", "--probe-size", "32",
        "--head-width", "16", "--head-out", "8", "--backbone-width", "4", "--image-size", "8", "--no-final-measure",
        "--threads", "1", "--epochs", "1"]
SECRET = b"# a user's shell startup file\nexport PATH=$HOME/bin:$PATH\n"


def snapshot(*roots: Path) -> dict[str, bytes | str | None]:
    """Every entry under ``roots`` without following links: file bytes, a link's target, None for folders."""
    out: dict[str, bytes | str | None] = {}
    for root in roots:
        for dirpath, dirs, files in os.walk(root):
            for name in dirs + files:
                p = Path(dirpath) / name
                out[str(p)] = (f"-> {os.readlink(p)}" if p.is_symlink() else None if p.is_dir() else p.read_bytes())
    return out


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished tiny run, copied by each test that changes it."""
    out = tmp_path_factory.mktemp("runs")
    assert main([*TINY, "--epochs", "2", "--out", str(out), "--run-name", "r"]) == 0
    return out / "r"


@pytest.fixture
def run(finished, tmp_path) -> Path:
    shutil.copytree(finished, tmp_path / "out" / "r")
    return tmp_path / "out" / "r"


@pytest.fixture
def outside(tmp_path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_bytes(SECRET)
    return home / ".bashrc"


@pytest.mark.parametrize("how", ["symlink", "hard link", "a file of the user's"])
@pytest.mark.parametrize("command", ["new run", "resume", "refused resume"])
def test_a_planted_lock_is_never_written_through(run, outside, command, how, capsys):
    """``ln -s ~/.bashrc RUN/.lock`` (or a hard link, or a file of the user's named ``.lock``, found by
    ``test_nothing_lost``): no command opens it for writing, truncates, removes or quotes it."""
    lock = run / ".lock"
    if how == "symlink":
        os.symlink(outside, lock)
    elif how == "hard link":
        os.link(outside, lock)
    else:
        lock.write_bytes(SECRET)
    before = snapshot(run, outside.parent)
    argv = {"new run": [*TINY, "--out", str(run.parent), "--run-name", "r", "--overwrite"],
            "resume": ["--resume", str(run), "--quiet"],
            "refused resume": ["--resume", str(run), "--lr", "0.5", "--quiet"]}[command]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert snapshot(run, outside.parent) == before  # the target, the link and the run: all byte-identical
    assert "PATH" not in err and ".lock" in err and "nothing was written" in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_overwrite_keeps_the_old_run_when_the_new_settings_are_refused(run, capsys):
    """``--overwrite --batch-size 128`` on 64 training images is refused (exit 2) before anything is deleted."""
    before = snapshot(run)
    code = main([*TINY, "--train-subset", "64", "--batch-size", "128", "--out", str(run.parent), "--run-name", "r",
                 "--overwrite"])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and "batch" in err, err
    assert snapshot(run) == before


def test_a_recipe_cannot_authorise_a_deletion(run, tmp_path, capsys):
    recipe = tmp_path / "recipe.toml"
    recipe.write_text("overwrite = true\nepochs = 1\n")
    before = snapshot(run)
    code = main([*TINY, "--config", str(recipe), "--out", str(run.parent), "--run-name", "r"])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and "only the command line may authorise a deletion" in err, err
    assert snapshot(run) == before


def test_the_temporary_sweep_removes_only_the_run_writers_own(run, capsys):
    """Names like the atomic writer's that it never made there survive a resume: in the run directory (not an
    output's name, or not its random part), in a folder a run never writes, and a symlink named like one."""
    mine = {run / ".x.abcdef.tmp": b"a", run / ".notes.txt.0a1b2c3d.tmp": b"b", run / ".config.json.abcdef.tmp": b"c",
            run / "drafts" / ".config.json.0a1b2c3d.tmp": b"d", run / "drafts" / ".x.abcdef.tmp": b"e"}
    for p, data in mine.items():
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(data)
    link = run / ".summary.json.0a1b2c3d.tmp"  # named like one, but a link: not the writer's kind of file
    os.symlink(run / "drafts" / ".x.abcdef.tmp", link)
    stale = run / ".metrics.jsonl.0f0f0f0f.tmp"  # a killed write of the run's own: swept
    stale.write_bytes(b"half")
    (run / "summary.json").unlink()  # so that the resume trains on
    assert main(["--resume", str(run), "--quiet", "--epochs", "3"]) == 0, capsys.readouterr().err
    assert not stale.exists() and "removed 1 temporary file(s)" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in mine} == mine and os.readlink(link) == str(run / "drafts" / ".x.abcdef.tmp")


KILL_INSIDE = r'''
import os, signal, sys
from mini import atomic
real = atomic.os.replace
def replace(src, dst):
    if str(dst).endswith("summary.json"):  # the data is written and fsynced; the rename never happens
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst)
atomic.os.replace = replace
from scale.run import main
sys.exit(main(sys.argv[1:]))
'''


def test_a_kill_inside_a_results_write_loses_nothing(run, tmp_path):
    """SIGKILL between a results file's fsync and its rename: the checkpoint stays whole, the temporary is the only
    trace, and a resume sweeps it and finishes."""
    (run / "summary.json").unlink()
    (run / "notes.md").write_text("mine")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", KILL_INSIDE, "--resume", str(run), "--quiet", "--epochs", "3"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr
    temporaries = sorted(p.name for p in run.glob(".summary.json.*.tmp"))
    assert len(temporaries) == 1 and not (run / "summary.json").exists()
    before = snapshot(run)
    assert main(["--resume", str(run), "--quiet", "--epochs", "4"]) == 0
    assert not list(run.glob(".*.tmp")) and (run / "notes.md").read_text() == "mine"
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
    assert before[str(run / "notes.md")] == b"mine"


@pytest.mark.parametrize("when", ["while it loads", "while it trains"])
def test_sigint_during_a_resume_keeps_the_run_and_resumes_again(run, tmp_path, when):
    """Ctrl-C (a real SIGINT) as a resumed run starts, or once it trains again: exit 130, one line that names the
    signal it got (never "a second interrupt" for the first), a checkpoint that loads, and a second resume finishes;
    the user's file beside it is untouched."""
    (run / "summary.json").unlink()
    (run / "notes.md").write_text("mine")
    before = len((run / "metrics.jsonl").read_text().splitlines())
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    log = tmp_path / "stderr.txt"
    with open(log, "w") as err_file:
        # SIGINT at its default in the child, as from a terminal: a test session started in the background by a
        # non-interactive shell inherits SIGINT ignored, and the child would then finish its 400 epochs
        proc = subprocess.Popen([sys.executable, "-m", "scale.run", "--resume", str(run), "--epochs", "400"], env=env,
                                stdout=subprocess.PIPE, stderr=err_file, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 120
        for line in proc.stdout:  # the resume has read its checkpoint
            if line.startswith("resuming") or time.monotonic() > deadline:
                break
        while when == "while it trains" and time.monotonic() < deadline \
                and len((run / "metrics.jsonl").read_text().splitlines()) <= before:
            time.sleep(0.05)  # an epoch finished after the resume: the loop holds the signals
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    err = log.read_text()
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "second" not in err and ("checkpoint saved" in err or "SIGINT" in err), err
    if when == "while it trains":
        assert "checkpoint saved" in err, err
    done = len((run / "metrics.jsonl").read_text().splitlines())
    assert main(["--resume", str(run), "--quiet", "--epochs", str(done + 1)]) == 0
    assert (run / "notes.md").read_text() == "mine"
    from scale import load_run

    load_run(run)  # config and checkpoint agree and load


def test_e4_study_into_an_out_of_another_plan_refuses_and_keeps_it(tmp_path, capsys):
    out = tmp_path / "study"
    out.mkdir()
    other = e4_study.e3_config("digits", 0, 7).to_dict()  # seven epochs: another plan than --epochs 1
    (out / "results.json").write_text(json.dumps({"dataset": "digits", "epochs": 7, "command": "x",
                                                  "seeds": [{"seed": 0, "config": other, "protocols": {}}]}))
    (out / "report.md").write_text("their report")
    before = snapshot(out)
    assert e4_study.main(["--seeds", "1", "--epochs", "1", "--probe-images", "8", "--out", str(out)]) == EXIT_USAGE
    assert "another plan" in capsys.readouterr().err
    assert snapshot(out) == before


def test_e4_study_refuses_an_out_with_a_report_not_its_own(tmp_path, capsys):
    from scale import e4_study

    out = tmp_path / "notes"
    out.mkdir()
    (out / "report.md").write_text("my own report")
    before = snapshot(out)
    assert e4_study.main(["--seeds", "1", "--epochs", "1", "--probe-images", "8", "--out", str(out)]) == EXIT_USAGE
    assert "not its own" in capsys.readouterr().err
    assert snapshot(out) == before


PAPER = ["--dataset", "synthetic", "--experiments", "E3E4", "--quick", "--epochs", "1", "--device", "cpu",
         "--threads", "1", "--dry-run"]


def test_paper_never_rewrites_the_manifest_of_another_plan(tmp_path, capsys):
    from scale import paper

    out = tmp_path / "grid"
    assert paper.main([*PAPER, "--out", str(out)]) == 0
    (home,) = list(out.iterdir())  # the plan's own folder
    before = snapshot(home)
    other = [*PAPER, "--epochs", "2"]  # the last --epochs counts: another plan, in its own folder
    assert paper.main([*other, "--out", str(out)]) == 0
    assert snapshot(home) == before and len(list(out.iterdir())) == 2
    assert paper.main([*PAPER, "--seeds", "2", "--out", str(out)]) == 0  # more seeds: the same grid, extended
    (home / "manifest.json").write_text("my notes, not a manifest")
    mine = snapshot(out)
    assert paper.main([*PAPER, "--out", str(out)]) != 0
    assert "it was left as it is" in capsys.readouterr().err
    assert snapshot(out) == mine and set(before) == set(snapshot(home))


def test_report_never_replaces_a_report_it_did_not_write(tmp_path, capsys):
    from scale import paper, paper_report

    out = tmp_path / "grid"
    assert paper.main([*PAPER, "--out", str(out)]) == 0
    assert paper_report.main([str(out)]) == 0 and paper_report.main([str(out)]) == 0  # its own report: replaced
    (home,) = list(out.iterdir())  # the plan's own folder, where the report is
    (home / "report.md").write_text("# my own notes\n")
    before = snapshot(out)
    assert paper_report.main([str(out)]) == EXIT_USAGE
    assert "not its own" in capsys.readouterr().err and snapshot(out) == before


def test_write_once_never_replaces_nor_follows_what_stands_at_its_name(tmp_path):
    """The append-only stores' primitive: an existing file, a symlink to a user's file, or a dangling symlink at
    the name is left as it is (False); a fresh name is written whole; no temporary is left beside either."""
    from scale.engine import disk

    user = tmp_path / "user.txt"
    user.write_text("mine")
    store = tmp_path / "units"
    store.mkdir()
    (store / "a.json").write_text("stored")
    (store / "b.json").symlink_to(user)
    (store / "c.json").symlink_to(tmp_path / "nowhere")
    for name in ("a.json", "b.json", "c.json"):
        assert disk.write_once(store / name, b"new") is False
    assert (store / "a.json").read_text() == "stored" and user.read_text() == "mine"
    assert not (tmp_path / "nowhere").exists()
    assert disk.write_once(store / "d.json", b"new") is True and (store / "d.json").read_bytes() == b"new"
    assert sorted(p.name for p in store.iterdir()) == ["a.json", "b.json", "c.json", "d.json"]
