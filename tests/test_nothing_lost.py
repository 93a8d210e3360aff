"""Nothing lost, over every command: a property test of the rules of the disk (``docs/disk.md``).

Hypothesis builds a random tree of a user's files in and around ``--out`` and a run directory (notes, a ``.git``
folder, symlinks and hard links to files outside, named like run files and ``.lock``, names like the atomic
writer's temporaries, FIFOs, nested folders, an existing run, a grid, a study's results), then runs one random
command of the project's CLI, as a user would (a subprocess, with a deadline: a hang is a failure), with random
valid and invalid flags: a new run (``--overwrite``, a recipe, settings that are refused), a resume (with flags
it refuses), ``scale.export``, ``scale.analyze``, ``scale.paper_report``, ``scale.paper``, ``scale.e4_study``. Then:

* every entry the user made is as it was: a file byte for byte, a link pointing where it pointed, a FIFO a FIFO;
* nothing outside ``--out`` changed (the folder ``outside`` holds the link targets: compared whole);
* the exit code is one the command documents.

``scale.replicate`` is covered by its own test function (``test_replicate_keeps_every_stored_unit``), selectable
alone (``-k replicate``), and the unit store under it (``scale.unit_store``) by another
(``test_the_unit_store_uses_only_what_its_names_say_and_keeps_every_file``, ``-k unit_store``): random hazards in a
store (copies over other units' names, contents saying another device or head, damaged records, stray names of a
huge seed, links and FIFOs, links at its folders), each left as it is and never used as a unit it is not.

Budget: the suite's deterministic profile (seed 0) runs ``NOTHING_LOST_EXAMPLES`` examples per command (default 1:
seven subprocesses of a few seconds of CPU each, most of it starting Python and torch; the replicate test one
example of about 45 s); the exploration runs many more with fresh seeds, and also real grids and study seeds:

    NOTHING_LOST_EXAMPLES=30 NOTHING_LOST_SEED=random python -m pytest tests/test_nothing_lost.py -x

(a falsifying example is printed with the ``@reproduce_failure`` blob that replays it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from scale.runs.run_report import git_commit

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
EXAMPLES = int(os.environ.get("NOTHING_LOST_EXAMPLES", "1"))  # per command
SEED = os.environ.get("NOTHING_LOST_SEED", "0")
EXPLORE = EXAMPLES > 3  # the exploration also runs a grid and a study seed for real
# One command on the tiny settings takes seconds (the quick ledger's half shard about a minute alone); on a loaded
# machine several times that (120 s was passed by that shard with two ledger shards beside the suite): past this
# it hangs.
DEADLINE_S = 600
TINY = ["synthetic", "--quiet", "--train-subset", "64", "--batch-size", "32", "--probe-size", "32",
        "--head-width", "16", "--head-out", "8", "--backbone-width", "4", "--image-size", "8", "--no-final-measure",
        "--threads", "1", "--epochs", "1"]
# The exit codes each command documents (its module docstring or --help).
CODES = {"run": {0, 1, 2, 4, 130}, "export": {0, 2}, "analyze": {0, 1, 2, 4}, "report": {0, 1, 2, 4},
         "paper": {0, 1, 2, 4}, "e4_study": {0, 1, 2, 4}}
# Names a user's file may have: the project's own output names, its lock, its temporaries' look, and plain ones.
NAMES = ["notes.txt", "config.json", "summary.json", "report.md", "checkpoint.pt", "metrics.jsonl", "curves.png",
         ".lock", "manifest.json", "results.json", "analysis.json", "grid_log.jsonl", ".x.abcdef.tmp",
         ".config.json.0a1b2c3d.tmp", ".summary.json.0a1b2c3d.tmp", "backbone.pt", "backbone.pt.json", "e4_study.png"]
PLACES = ["out", "out/r", "out/r/drafts", "out/r/analysis", "out/notes", "out/.git", "out/runs"]
KINDS = ["file", "symlink", "hardlink", "fifo"]


@dataclass(frozen=True)
class Entry:
    place: str
    name: str
    kind: str


def state(p: Path) -> tuple[str, bytes | str | None]:
    """What a user's entry is, without following it."""
    st_ = os.lstat(p)
    if stat.S_ISLNK(st_.st_mode):
        return "symlink", os.readlink(p)
    if stat.S_ISFIFO(st_.st_mode):
        return "fifo", None
    if stat.S_ISDIR(st_.st_mode):
        return "dir", None
    return "file", p.read_bytes()


def snapshot(root: Path) -> dict[str, tuple[str, bytes | str | None]]:
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = state(p)
    return out


@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> dict[str, Path]:
    """A finished tiny run and a grid manifest (``scale.paper --dry-run``), copied into the examples that use them."""
    base = tmp_path_factory.mktemp("templates")
    subprocess.run([sys.executable, "-m", "scale.run", *TINY, "--out", str(base), "--run-name", "r"], env=ENV,
                   check=True, timeout=DEADLINE_S, capture_output=True)
    subprocess.run([sys.executable, "-m", "scale.paper", *PAPER, "--out", str(base / "grid"), "--dry-run"], env=ENV,
                   check=True, timeout=DEADLINE_S, capture_output=True)
    return {"run": base / "r", "grid": base / "grid"}


PAPER = ["--dataset", "synthetic", "--experiments", "E3E4", "--quick", "--epochs", "1", "--device", "cpu",
         "--threads", "1"]


COMMANDS = ("run", "resume", "export", "analyze", "report", "paper", "e4_study")


def commands(out: Path, outside: Path, with_study: bool) -> dict[str, st.SearchStrategy[list[str]]]:
    """Each command of the CLI with random valid and invalid flags, aimed at ``out``. The expensive runs (a grid, a
    study's seed) come only where the tree makes them refuse, or in the exploration (``EXPLORE``)."""
    run_dir = str(out / "r")
    e4_flags = [["--seeds", "0"], ["--seeds", "1", "--probe-images", "1"]]
    return {
        "run": st.builds(
            lambda overwrite, refused, recipe: ["-m", "scale.run", *TINY, "--out", str(out), "--run-name", "r",
                                                *(["--overwrite"] if overwrite else []),
                                                *(["--batch-size", "128"] if refused else []),
                                                *(["--config", str(outside / "recipe.toml")] if recipe else [])],
            st.booleans(), st.booleans(), st.booleans()),
        "resume": st.builds(lambda extra: ["-m", "scale.run", "--resume", run_dir, "--quiet", *extra],
                            st.sampled_from([[], ["--epochs", "2"], ["--lr", "0.5"], ["--threads", "1"]])),
        "export": st.builds(lambda name: ["-m", "scale.export", run_dir, str(out / name)],
                            st.sampled_from(["backbone.pt", "notes.txt", "r/config.json"])),
        "analyze": st.builds(
            lambda where: ["-m", "scale.analyze", run_dir, "--quiet", "--no-curvature", "--no-probes", "--orbits",
                           "2x1", *(["--out", str(out / where)] if where else [])],
            st.sampled_from([None, "notes", "r"])),
        "report": st.builds(lambda where: ["-m", "scale.paper_report", str(out / where)],
                            st.sampled_from(["", "r", "notes"])),
        "paper": st.builds(
            lambda other, dry: ["-m", "scale.paper", *PAPER, "--out", str(out), *(["--seeds", "2"] if other else []),
                                *(["--epochs", "2"] if other else []), *(["--dry-run"] if dry else [])],
            st.booleans(), st.booleans() if EXPLORE else st.just(True)),
        "e4_study": st.builds(
            lambda extra: ["-m", "scale.e4_study", "--epochs", "1", "--probe-images", "8", "--out", str(out), *extra],
            st.sampled_from([*e4_flags, ["--seeds", "1"]] if with_study or EXPLORE else e4_flags)),
    }


def build_tree(tmp: Path, entries: list[Entry], with_run: bool, with_grid: bool, with_study: bool,
               templates: dict[str, Path]) -> tuple[Path, Path, list[Path]]:
    """The user's world: ``outside`` (targets of links, a recipe), ``out`` with the chosen entries; returns the
    paths of the entries the user made (every one must survive as it was)."""
    outside, out = tmp / "outside", tmp / "out"
    outside.mkdir()
    (outside / "bashrc").write_bytes(b"export PATH=$HOME/bin:$PATH\n")
    (outside / "recipe.toml").write_text("overwrite = true\nepochs = 1\n")
    out.mkdir()
    if with_run:
        shutil.copytree(templates["run"], out / "r")
    if with_grid:  # the grid's plan folder (OUT/grid-...: its manifest)
        shutil.copytree(templates["grid"], out, dirs_exist_ok=True)
    if with_study:  # the results of another plan (7 epochs): scale.e4_study must refuse them, never rewrite
        (out / "results.json").write_text(json.dumps({"dataset": "digits", "epochs": 7, "command": "x", "seeds": [
            {"seed": 0, "config": {"epochs": 7}, "protocols": {}}]}))
    made = []
    for e in entries:
        p = tmp / e.place / e.name
        if os.path.lexists(p) or (p.parent.exists() and not p.parent.is_dir()):
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        if e.kind == "file":
            p.write_bytes(f"{e.place}/{e.name}: the user's\n".encode())
        elif e.kind == "symlink":
            p.symlink_to(outside / "bashrc")
        elif e.kind == "hardlink":
            os.link(outside / "bashrc", p)
        else:
            os.mkfifo(p)
        made.append(p)
    return out, outside, made


# Where data was lost before: a link, hard link or FIFO under a run file's name or ``.lock`` in the run directory,
# or a file named like a temporary or an output where a command writes; every tree holds at least one of them.
HAZARD = st.builds(Entry, st.sampled_from(["out/r", "out", "out/notes", "out/r/analysis"]),
                   st.sampled_from([".lock", "config.json", "summary.json", "report.md", "manifest.json",
                                    ".metrics.jsonl.0a1b2c3d.tmp", ".x.abcdef.tmp", "analysis.json"]),
                   st.sampled_from(KINDS))
entries = st.builds(lambda first, rest: [first, *rest], HAZARD,
                    st.lists(st.builds(Entry, st.sampled_from(PLACES), st.sampled_from(NAMES), st.sampled_from(KINDS)),
                             max_size=5))


def run_command(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([sys.executable, *argv], cwd=cwd, env=ENV, capture_output=True, text=True,
                              timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung for {DEADLINE_S} s: python {' '.join(argv)}")


def check_nothing_lost(tmp: Path, out: Path, outside: Path, made: list[Path], before: dict, outside_before: dict,
                       program: str, done: subprocess.CompletedProcess[str]) -> None:
    what = f"python {' '.join(done.args[1:])}\nexit {done.returncode}\n{done.stderr[-2000:]}"
    assert done.returncode in CODES[program], f"undocumented exit code: {what}"
    assert "Traceback" not in done.stderr, what
    changed = [str(p.relative_to(tmp)) for p in made if not os.path.lexists(p)
               or state(p) != before[str(p.relative_to(tmp))]]
    assert not changed, f"the user's entries changed or went: {changed}\n{what}"
    assert snapshot(outside) == outside_before, f"something outside --out changed\n{what}"


_profile = dict(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=False,
                database=None)


def _seeded(test):
    return test if SEED == "random" else seed(int(SEED))(test)


@pytest.mark.parametrize("command", COMMANDS)
@_seeded
@settings(**_profile)
@given(data=st.data(), tree=entries, with_run=st.booleans(), with_grid=st.booleans(), with_study=st.booleans())
def test_no_command_changes_a_file_it_did_not_write(templates, command, data, tree, with_run, with_grid, with_study):
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        out, outside, made = build_tree(tmp, tree, with_run, with_grid, with_study, templates)
        argv = data.draw(commands(out, outside, with_study)[command], label="argv")
        before = {str(p.relative_to(tmp)): state(p) for p in made}
        outside_before = snapshot(outside)
        done = run_command(argv, tmp)
        check_nothing_lost(tmp, out, outside, made, before, outside_before, PROGRAM.get(command, command), done)


PROGRAM = {"resume": "run"}  # the documented exit codes of each command are its program's


REPLICATE = ["-m", "scale.replicate", "--quick", "--threads", "1"]

# A user's entry in a unit's work folder: (name, kind). The trainer's own names (checkpoint.pt, metrics.jsonl) and
# another; the link and the hard link point at a file outside --out.
WORK_HAZARDS = [("notes.txt", "file"), ("checkpoint.pt", "symlink"), ("checkpoint.pt", "hardlink"),
                ("metrics.jsonl", "fifo"), ("config.json", "symlink")]


@_seeded
@settings(**{**_profile, "max_examples": max(1, EXAMPLES // 5), "phases": [Phase.explicit, Phase.generate]})
@given(first=st.sampled_from(["5/64", "0/64"]), second=st.sampled_from(["1/2", "0/64"]),
       seeds=st.sampled_from([None, "1"]), planted=st.sampled_from(WORK_HAZARDS))
def test_replicate_keeps_every_stored_unit(first, second, seeds, planted):
    """``scale.replicate`` into an ``--out`` holding a ledger of another plan (the committed first-format ledger,
    ``docs/replication/v1``: 5 seeds, 160 units in one results.json) with ``--quick``, a shard, or fewer seeds, twice:
    every stored unit is still there afterwards, as a unit file of its plan, and no unit file written by the first
    invocation is rewritten or removed by the second. The units' work folders (``scale.ledger.work``, their
    checkpoints) may hold a user's entry (``planted`` in every other unit's folder: a file, a link or a FIFO under
    a name of the trainer's own or another): it is as it was afterwards, the link's target too, and no other work
    folder outlives its unit's file."""
    with tempfile.TemporaryDirectory() as name:
        out = Path(name) / "ledger"
        shutil.copytree(ROOT / "docs" / "replication" / "v1", out)
        (out / "notes.txt").write_text("mine")
        outside = Path(name) / "outside"
        outside.mkdir()
        (outside / "bashrc").write_bytes(b"export PATH=$HOME/bin:$PATH\n")
        folders = quick_work_folders(out, int(seeds or 2))
        made = [plant(d, planted, outside) for d in folders[::2]]
        made_before = {str(p): state(p) for p in made}
        outside_before = snapshot(outside)
        stored = units(out / "results.json")
        assert len(stored) == 160  # the committed first-format ledger: 5 seeds of every unit
        after: dict[str, bytes] = {}
        for shard in (first, second):
            argv = [*REPLICATE, "--out", str(out), "--shard", shard, *(["--seeds", seeds] if seeds else [])]
            done = run_command(argv, Path(name))
            assert done.returncode in (0, 1, 2, 4), done.stderr[-2000:]
            assert "Traceback" not in done.stderr, done.stderr[-2000:]
            assert (out / "notes.txt").read_text() == "mine"
            changed = [p for p, was in made_before.items() if not os.path.lexists(p) or state(Path(p)) != was]
            assert not changed, f"the user's entries in work folders changed or went: {changed[:3]}"
            assert snapshot(outside) == outside_before, "something outside --out changed"
            files = unit_files(out)
            rewritten = sorted(k for k, v in after.items() if files.get(k) != v)
            assert not rewritten, f"unit files rewritten or removed by a later invocation: {rewritten[:3]}"
            after = files
            lost = stored - {k.split("--")[1] for k in files if k.startswith("v1--")}
            assert not lost, f"{len(lost)} of {len(stored)} stored units lost, e.g. {sorted(lost)[:3]}"
            litter = [d.name for d in folders[1::2] if d.is_dir() and f"{d.name}.json" in files]
            assert not litter, f"work folders outlived their unit files: {litter[:3]}"


STORE_UNITS = ("E1-relu2-bn0-lr0.05-collapsed-s0", "E1-swish2-bn0-lr0.05-collapsed-s0")  # two --quick units
# What a user (or an attack) leaves in a ledger's store (``scale.unit_store``): each must be used only if it is what its
# name says, and left as it is. (kind, where): where a unit file of this plan, of another, or a folder of the store.
STORE_HAZARDS = [("copied over another unit", "unit"), ("another device in its content", "unit"),
                 ("another head in its config", "unit"), ("{'mine': 1}", "unit"), ("empty", "stray"),
                 ("empty", "other plan"), ("notes", "not a unit name"), ("symlink", "unit"), ("fifo", "unit"),
                 ("symlink", "units folder"), ("symlink", "amendments folder"), ("list", "registration"),
                 ("symlink", "verifications folder"), ("{'mine': 1}", "verification"),
                 ("forged at its name", "verification"), ("a key twice", "unit")]


@pytest.fixture(scope="module")
def ledger_store(tmp_path_factory) -> Path:
    """A --quick ledger of two E1 units, as scale.replicate leaves it."""
    out = tmp_path_factory.mktemp("store") / "L"
    run_command([*REPLICATE, "--experiments", "E1", "--out", str(out), "--units", ",".join(STORE_UNITS)], out.parent)
    assert len(unit_files(out)) == 2
    return out


@_seeded
@settings(**_profile)
@given(hazards=st.lists(st.sampled_from(STORE_HAZARDS), min_size=1, max_size=4, unique=True),
       action=st.sampled_from(["report", "run", "verify"]))
def test_the_unit_store_uses_only_what_its_names_say_and_keeps_every_file(ledger_store, hazards, action):
    """``scale.replicate`` (``--report-only``, a run of one more unit, or ``--verify`` of a unit file) over a store
    holding random hazards: a unit file copied over another's name or saying another device or head, a file of the
    wrong shape, stray names (a seed of 999999999), links and FIFOs under units' names, a link at the store's
    folders, a damaged registration, a file in the verifications' folder that is not one. Nothing lost (every entry
    as it was, nothing outside --out changed), a documented exit code, no traceback; when it reports, every unit in
    the view is the one its file's name says and every hazard in ``units/`` is listed as left out."""
    with tempfile.TemporaryDirectory() as name:
        out, outside = Path(name) / "L", Path(name) / "outside"
        shutil.copytree(ledger_store, out)
        outside.mkdir()
        (outside / "bashrc").write_bytes(b"export PATH=$HOME/bin:$PATH\n")
        planted = [p for h in hazards if (p := plant_in_store(out, outside, *h))]
        before = snapshot(out)
        outside_before = snapshot(outside)
        if action == "verify":
            unit = next((out / "units").glob(f"*--{STORE_UNITS[0]}--*.json"))
            done = run_command(["-m", "scale.replicate", "--verify", str(unit)], Path(name))
        else:
            extra = ["--report-only"] if action == "report" else ["--units", "E1-gelu2-bn0-lr0.05-collapsed-s0"]
            done = run_command([*REPLICATE, "--experiments", "E1", "--out", str(out), *extra], Path(name))
        what = f"{hazards}: exit {done.returncode}\n{done.stderr[-2000:]}"
        assert done.returncode in (0, 1, 2, 4) and "Traceback" not in done.stderr, what
        after = snapshot(out)
        changed = [k for k, v in before.items() if after.get(k) != v and not k.startswith(VIEWS)]
        assert not changed, f"entries changed or went: {changed[:3]}\n{what}"
        assert snapshot(outside) == outside_before, f"something outside --out changed\n{what}"
        if done.returncode == 0 and action != "verify":
            view = json.loads((out / "results.json").read_text())
            for unit, rec in view["units"].items():
                path = next((out / "units").glob(f"{rec['plan']}--{unit}--*.json"))
                assert rec["name"] == unit and json.loads(path.read_text())["name"] == unit, what
            named = " ".join(view["ignored"])
            assert all(p.name in named for p in planted if p.parent == out / "units"), what


VIEWS = ("results.json", "report.md", "e1_std.png", "e2_curvature.png", "e5_depth.png", "e4_study")  # rebuilt


def plant_in_store(out: Path, outside: Path, kind: str, where: str) -> Path | None:
    """One hazard of ``STORE_HAZARDS`` in the store at ``out``; the path planted (None: a folder link)."""
    units_dir = out / "units"
    first, second = (next(units_dir.glob(f"*--{n}--*.json")) for n in STORE_UNITS)
    plan = first.name.split("--")[0]
    if where == "unit" and kind in ("symlink", "fifo"):
        target = units_dir / f"{plan}--E1-linear-bn0-lr0.05-normal-s0--cpu-t1--{'0' * 12}.json"
        target.symlink_to(outside / "bashrc") if kind == "symlink" else os.mkfifo(target)
        return target
    if where == "unit":
        rec = json.loads((second if kind == "copied over another unit" else first).read_text())
        if kind == "another device in its content":
            rec["device"] = "cuda"
        elif kind == "another head in its config":
            rec["config"]["head"] = "gelu2"
        elif kind == "{'mine': 1}":
            rec = {"mine": 1}
        text = json.dumps(rec)
        if kind == "a key twice":  # the second unit's history appended: a last-wins reader would use it
            text = text[:-1] + ', "history": ' + json.dumps(json.loads(second.read_text())["history"]) + "}"
        first.unlink()
        first.write_text(text)
        return first
    if where in ("stray", "other plan", "not a unit name"):
        name = {"stray": f"{plan}--E5-depth1-s999999999--cpu-t1--000000000000.json",
                "other plan": "quick-000000000000--E1-x-s0--cpu-t1--000000000000.json",
                "not a unit name": "notes.json"}[where]
        (units_dir / name).write_bytes(b"" if kind == "empty" else b"my notes\n")
        return units_dir / name
    if where == "verification" and kind == "forged at its name":  # uncommitted code's record under a commit's name
        commit = git_commit().removesuffix("+dirty")
        forged = {"unit": first.name, "plan": plan, "unit_sha256": hashlib.sha256(first.read_bytes()).hexdigest(),
                  "computed_at": json.loads(first.read_text()).get("git_commit", ""), "verified_at": commit + "+dirty",
                  "status": "equal", "differences": 0, "same_machine": True}
        (out / "verifications").mkdir(exist_ok=True)
        path = out / "verifications" / f"{first.stem}--at-{commit[:12]}.json"
        path.write_text(json.dumps(forged))
        return path
    if where == "verification":
        (out / "verifications").mkdir(exist_ok=True)
        (out / "verifications" / f"{plan}--mine.json").write_text(json.dumps({"mine": 1}))
        return out / "verifications" / f"{plan}--mine.json"
    if where == "registration":
        (out / "registrations" / f"{plan}.json").write_text("[1, 2]")
        return out / "registrations" / f"{plan}.json"
    folder = out / where.split()[0]
    if folder.exists():
        shutil.move(str(folder), str(outside / folder.name))
        folder.symlink_to(outside / folder.name, target_is_directory=True)
    else:
        (outside / folder.name).mkdir()
        folder.symlink_to(outside / folder.name, target_is_directory=True)
    return None


def quick_work_folders(out: Path, seeds: int) -> list[Path]:
    """The work folder of every unit of the ``--quick`` plan at 1 thread on the CPU (``scale.ledger.work``)."""
    from scale.ledger import runner, work

    settings = runner.plan_settings("digits", True, None, "cpu", 1)
    return [work.work_dir(out, runner.plan_id(settings), name, "cpu", 1, key)
            for name, key in runner.expected_keys(settings, seeds).items()]


def plant(folder: Path, hazard: tuple[str, str], outside: Path) -> Path:
    name, kind = hazard
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    if kind == "file":
        p.write_bytes(b"the user's\n")
    elif kind == "symlink":
        p.symlink_to(outside / "bashrc")
    elif kind == "hardlink":
        os.link(outside / "bashrc", p)
    else:
        os.mkfifo(p)
    return p


def unit_files(out: Path) -> dict[str, bytes]:
    """The ledger store's unit files (``scale.ledger.store``: OUT/units/<plan>--<unit>--<where>--<key>.json)."""
    folder = out / "units"
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.json"))} if folder.is_dir() else {}


def units(results_json: Path) -> set[str]:
    """The names of the units a ledger's results.json stores (none when it is gone or unreadable)."""
    try:
        return set(json.loads(results_json.read_text())["units"])
    except (OSError, ValueError, KeyError, TypeError):
        return set()
