"""Records that are what they say (issue 58): one JSON reader for every record that refuses what is ambiguous, and
one markdown escape for every text a report writes. Each case on real files: a --quick ledger of two E1 units
(``python -m scale.replicate``) and a grid plan folder as ``scale.paper`` writes it (``tests.test_unit_store``).

    a key twice in one object     U1 with U2's "history" appended: refused with one line (the ledger: exit 2; the
                                  grid: exit 1), never read as U2's history (json keeps the last key)
    an unpaired surrogate         "\\ud800" (valid JSON) in a unit's git_commit: refused with one line, never
                                  reaching the report, whose UTF-8 write it would kill half-way
    free text in a report         a deviation holding a newline, "|" and "## Verdict: ..." stays in its cell
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scale import paper_report, replicate
from scale.engine import read
from scale.engine.config import TrainConfig
from scale.engine.markdown import escape
from scale.engine.train import _likely_cause
from scale.ledger import store
from scale.ledger import views as ledger_report
from tests import test_unit_store as store_tests
from tests.test_faults import TINY
from tests.test_permissions import DROP
from tests.test_unit_store import ENV, QUICK, A, B, e2_row, edit, grid, grid_unit, unit_file

# the --quick ledger of two E1 units the store's attack tests read, copied afresh for each test
ledger_template, ledger = store_tests.ledger_template, store_tests.ledger

FORGED = "x |\n\n## Verdict: every claim reproduced (forged)\n\n| y"


def append_key(path: Path, key: str, value) -> None:
    """``path``'s JSON object with ``"key": value`` written again at its end (the first one stays in the text)."""
    text = path.read_text().rstrip()
    assert text.endswith("}")
    path.write_text(text[:-1] + f', {json.dumps(key)}: {json.dumps(value)}}}')


# -- the reader ---------------------------------------------------------------------------------------------------


def test_the_reader_refuses_a_repeated_key_and_names_it(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"a": {"b": 1, "c": 2}, "d": 3}')
    assert read.read_json(path) == {"a": {"b": 1, "c": 2}, "d": 3}  # the control: every key once
    path.write_text('{"a": {"b": 1, "b": 2}, "d": 3}')  # nested, where a last-wins decoder hides it
    with pytest.raises(read.Ambiguous) as err:
        read.read_json(path)
    assert str(err.value).count("\n") == 0 and str(path) in str(err.value) and "'b' appears twice" in str(err.value)
    assert json.loads(path.read_text()) == {"a": {"b": 2}, "d": 3}  # what the plain decoder would have used


@pytest.mark.parametrize("text", ['{"s": "\\ud800"}', '{"\\udc00": 1}', '["ok", ["\\ud83d"]]', '{"s": "a\\udfffb"}'])
def test_the_reader_refuses_an_unpaired_surrogate(tmp_path, text):
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(read.Ambiguous) as err:
        read.read_json(path, (dict, list))
    assert "unpaired UTF-16 surrogate" in str(err.value) and str(path) in str(err.value)


def test_a_paired_surrogate_and_plain_text_are_read(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"s": "\\ud83d\\ude00 \\u00e9 caf\\u00e9"}')
    assert read.read_json(path) == {"s": "\U0001F600 \u00e9 caf\u00e9"}


def test_jsonl_lines_are_read_by_the_same_rules(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"epoch": 1}\n{"epoch": 2, "epoch": 3}\n')
    with pytest.raises(read.Ambiguous, match="line 2 is ambiguous JSON"):
        read.read_jsonl(path)


# -- through the ledger and the grid --------------------------------------------------------------------------------


def test_a_ledger_unit_with_a_second_history_is_refused_not_read_as_the_other_units(ledger, capsys):
    u1 = unit_file(ledger, A)
    other = json.loads(unit_file(ledger, B).read_text())["history"]
    append_key(u1, "history", other)
    code = replicate.main([*QUICK, "--out", str(ledger), "--report-only"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert u1.name in err[0] and "'history' appears twice" in err[0]


def test_a_ledger_unit_with_an_unpaired_surrogate_is_refused_before_the_report(ledger, capsys):
    u1 = unit_file(ledger, A)
    report_before = (ledger / "report.md").read_bytes()
    text = u1.read_text()
    commit = json.loads(text)["git_commit"]
    u1.write_text(text.replace(json.dumps(commit), '"\\ud800"', 1))
    code = replicate.main([*QUICK, "--out", str(ledger), "--report-only"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "unpaired UTF-16 surrogate" in err[0] and u1.name in err[0], err
    assert (ledger / "report.md").read_bytes() == report_before  # nothing half-written


def test_a_grid_unit_with_a_second_metrics_key_is_refused(tmp_path, capsys):
    home = grid(tmp_path / "G")
    target = grid_unit(home, "E2-collapsed-relu2-s0")
    other = json.loads(grid_unit(home, "E2-normal-swish2-s0").read_text())["metrics"]
    append_key(target, "metrics", other)
    code = paper_report.main([str(home)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and target.name in err[0] and "'metrics' appears twice" in err[0], err
    assert not (home / "report.md").exists()


# -- the escape ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("plain text", "plain text"),
    ("|M| / |H_eff|", "\\|M\\| / \\|H_eff\\|"),
    ("a\nb\r\nc\rd\u2028e", "a b c d e"),
    ("## Verdict", "\\## Verdict"),
    ("> quoted", "\\> quoted"),
    ("x\ud800y", "x\\ud800y"),
])
def test_escape_keeps_text_in_one_cell_of_one_line(text, expected):
    assert escape(text) == expected


def test_a_forged_deviation_adds_no_section_to_the_ledger_report(ledger, capsys):
    edit(unit_file(ledger, A), lambda r: r["deviations"].update({"forged": [FORGED, FORGED]}))
    code = replicate.main([*QUICK, "--out", str(ledger), "--report-only"])
    assert code == 0, capsys.readouterr().err
    text = (ledger / "report.md").read_text()
    assert not any(line.startswith("## Verdict: every claim") for line in text.splitlines())
    [row] = [line for line in text.splitlines() if "| forged |" in line]
    assert "forged)" in row  # the whole text sits in its row


def test_a_forged_deviation_adds_no_section_to_the_grid_report(tmp_path):
    home = grid(tmp_path / "G")
    edit(grid_unit(home, "E2-collapsed-relu2-s0"), lambda r: r.update(deviations={"forged": [FORGED, FORGED]}))
    assert paper_report.main([str(home)]) == 0
    text = (home / "report.md").read_text()
    assert not any(line.startswith("## Verdict: every claim") for line in text.splitlines())


# -- a non-finite loss names the temperature when it is the likely cause --------------------------------------------


def test_a_non_finite_loss_names_a_tiny_temperature_first_and_only_for_methods_that_have_one():

    tiny = _likely_cause(TrainConfig(method="simclr", temperature=1e-6))
    assert tiny.startswith("the temperature (1e-06) is tiny") and "--lr" in tiny
    assert "temperature" not in _likely_cause(TrainConfig(method="simclr", temperature=0.1))  # the control
    assert "temperature" not in _likely_cause(TrainConfig(method="simsiam", temperature=1e-6))  # SimSiam has none


# -- a write that fails names its file ------------------------------------------------------------------------------


def test_a_write_above_ulimit_f_names_the_file_it_could_not_write(tmp_path):
    """The real fault: ``ulimit -f`` of 64 KiB (RLIMIT_FSIZE; Python ignores SIGXFSZ, so the write fails with
    EFBIG). The run's first checkpoint is larger: exit 4 with one line naming the file, not "I/O error on: File
    too large" alone."""


    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))

    proc = subprocess.run([sys.executable, "-m", "scale.run", *TINY, "--epochs", "1", "--out", str(tmp_path)],
                          env=ENV, preexec_fn=limit, capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 4 and len(lines) == 1, proc.stderr
    assert "File too large" in lines[0] and str(tmp_path) in lines[0], lines[0]
    assert not list(tmp_path.rglob("*.tmp"))  # nothing half-written left behind


# -- every numeric flag of every command: NaN, infinities and absurd values are one line --------------------------


@pytest.mark.parametrize("argv, says", [
    (["--budget-s", "nan"], "--budget-s must be a finite number in [0, 1e+09], got nan"),
    (["--budget-s", "inf"], "--budget-s must be a finite number in [0, 1e+09], got inf"),
    (["--threads", "100000"], "--threads must be an integer in [1, 4096], got 100000"),
    (["--mem-gb", "nan"], "--mem-gb must be a finite number in [0.001, 1.04858e+06], got nan"),
    (["--time-min", "999999999"], "--time-min must be an integer in [1, 527040], got 999999999"),
    (["--repeat", "100000"], "--repeat must be an integer in [0, 1000], got 100000"),
])
def test_replicate_refuses_non_finite_and_absurd_numbers(tmp_path, capsys, argv, says):
    assert replicate.main(["--quick", "--dry-run", "--out", str(tmp_path / "L"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"scale.replicate: error: {says}"], err
    assert not (tmp_path / "L").exists()


def test_replicate_takes_sensible_numbers(tmp_path, capsys):
    """The control: the same flags at ordinary values plan the run."""
    argv = ["--budget-s", "60", "--threads", "2", "--mem-gb", "16", "--time-min", "90", "--repeat", "1"]
    assert replicate.main(["--quick", "--dry-run", "--out", str(tmp_path / "L"), *argv]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("module, argv, says", [
    ("scale.analyze", ["RUN", "--image-size", "0"], "argument --image-size: must be an integer in [1, 1024], got 0"),
    ("scale.analyze", ["RUN", "--seed", "-1"], "argument --seed: must be an integer in [0, 9.22337e+18], got -1"),
    ("scale.analyze", ["RUN", "--lanczos-iter", "nan"], "argument --lanczos-iter: 'nan' is not an integer"),
    ("scale.e4_study", ["--threads", "100000"], "argument --threads: must be an integer in [1, 4096], got 100000"),
    ("scale.pretrained", ["simclr", "--image-size", "0"], "argument --image-size: must be an integer in [1, 1024]"),
    ("scale.paper", ["--threads", "100000", "--dry-run"], "--threads must be an integer in [1, 4096], got 100000"),
])
def test_every_command_refuses_absurd_numbers_with_one_line(tmp_path, capsys, module, argv, says):
    """In this process: the parser's refusal, its exit code (returned, or argparse's ``SystemExit``) and its one line
    (each command as a real process, its exit codes and stderr: ``tests/test_nothing_lost.py``, ``scale.pretrained``
    in ``tests/test_pretrained.py``)."""
    main = importlib.import_module(module).main
    try:
        code = main([*argv, "--out", str(tmp_path / "o")])
    except SystemExit as exit_:
        code = exit_.code
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"{module}: error: ") and says in lines[0], lines[0]
    assert not (tmp_path / "o").exists()


# -- the grid checks a unit's config and summary against the run its name says -------------------------------------

TRANSPLANTS = {
    # another run's whole record with relu2's identity fields copied in
    "another run's record": lambda r, other: r.update({k: v for k, v in other.items() if k not in (
        "plan", "name", "device", "threads", "key_hash", "experiment", "seed", "labels", "argv")}),
    # only the head, in the config and in the summary's copy of it
    "config and summary say gelu2": lambda r, other: (r["config"].update(head="gelu2"),
                                                     r["summary"]["config"].update(head="gelu2")),
    # the summary alone another run's
    "summary of another run": lambda r, other: r.update(summary=other["summary"]),
}


@pytest.mark.parametrize("case", TRANSPLANTS)
def test_a_grid_unit_whose_config_or_summary_is_another_runs_is_left_out(tmp_path, case):
    home = grid(tmp_path / "G")
    target = grid_unit(home, "E2-collapsed-relu2-s0")
    other = json.loads(grid_unit(home, "E2-normal-swish2-s0").read_text())
    other["metrics"][-1]["loss"] = 7.5  # another run's final loss: it must not show in relu2's row
    edit(target, lambda r: TRANSPLANTS[case](r, other))
    assert paper_report.main([str(home)]) == 0
    text = (home / "report.md").read_text()
    assert "(not run)" in e2_row(text, "collapsed", "relu2")
    assert "7.5000" not in text
    [left] = [li for li in text.splitlines() if li.startswith(f"- {target.name}: ")]
    assert "config" in left, left


# -- verifications bound to the unit they vouch for ----------------------------------------------------------------

VERIFY_STORE = Path(__file__).resolve().parent / "data" / "verify"  # one --quick unit and its plan's registration
COMMIT = "c0ffee" * 6 + "abcd"


@pytest.fixture
def verified(tmp_path, monkeypatch, capsys):
    """A copy of the verify store with its unit verified by the code 'at' COMMIT: (store, unit, record). "equal" on
    the processor kind that computed it, "differs" on another (ATEN_CPU_CAPABILITY=default): recorded either way."""
    shutil.copytree(VERIFY_STORE, tmp_path / "store")
    unit = next((tmp_path / "store" / "units").glob("*.json"))
    monkeypatch.setattr(replicate.runner, "code_commit", lambda: COMMIT)
    assert replicate.main(["--verify", str(unit)]) in (0, 1), capsys.readouterr().err
    assert "recorded in" in capsys.readouterr().out
    [record] = (tmp_path / "store" / "verifications").glob("*.json")
    return tmp_path / "store", unit, record


def listed(out: Path, unit: Path) -> tuple[list[dict], list[str]]:

    return store.verifications(out, store.parse_name(unit)["plan"])


FORGED_RECORDS = {  # each leaves the record's name as it is
    "verified by uncommitted code": (lambda r: r.update(verified_at=COMMIT + "+dirty"), "not a commit"),
    "verified at 'unknown'": (lambda r: r.update(verified_at="unknown"), "not the verification its name says"),
    "verified at a commit's first 12 digits": (lambda r: r.update(verified_at=COMMIT[:12]), "not a commit"),
    "a status --verify never writes": (lambda r: r.update(status="vouched"), "not one --verify writes"),
    "equal with 7 values differing": (lambda r: r.update(status="equal", differences=7), "do not fit its status"),
    "computed at another commit": (lambda r: r.update(computed_at="f" * 40), "but its unit file says"),
    "written before records were bound": (lambda r: r.pop("unit_sha256"), "names no SHA-256"),
}


def test_the_bound_verification_is_listed(verified):
    """The control: the record --verify wrote is listed, and names the SHA-256 of the unit file."""
    out, unit, _record = verified
    found, left = listed(out, unit)
    assert len(found) == 1 and not left
    assert found[0]["unit_sha256"] == hashlib.sha256(unit.read_bytes()).hexdigest()


@pytest.mark.parametrize("case", FORGED_RECORDS)
def test_a_forged_verification_is_left_out_and_named(verified, case):
    out, unit, record = verified
    change, says = FORGED_RECORDS[case]
    edit(record, change)
    found, left = listed(out, unit)
    assert found == [] and len(left) == 1 and left[0].startswith(record.name) and says in left[0], left


def test_a_verification_is_left_out_once_its_unit_changes_or_goes(verified):
    out, unit, _record = verified
    edit(unit, lambda r: r["history"][-1].update(loss=r["history"][-1]["loss"] + 1e-3))  # a loss changed
    [line] = listed(out, unit)[1]
    assert "changed since it was verified" in line
    unit.unlink()
    [line] = listed(out, unit)[1]
    assert "gone or not a plain file" in line


def test_a_forged_record_at_the_name_is_not_taken_for_the_real_verification(verified, capsys):
    """A record by uncommitted code put under the clean commit's name: a real --verify does not say "already
    recorded" (it would vouch for the forged one); it names the file and leaves it as it is (exit 2)."""
    _out, unit, record = verified
    edit(record, FORGED_RECORDS["verified by uncommitted code"][0])
    before = record.read_bytes()
    assert replicate.main(["--verify", str(unit)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds a record that is not this verification" in err[0] and record.name in err[0]
    assert record.read_bytes() == before


def test_a_forged_status_cannot_add_a_section_to_the_report(verified):

    out, unit, record = verified
    _found, _ = listed(out, unit)
    lines = ledger_report.verification_lines(out, store.parse_name(unit)["plan"])
    assert any(unit.name in line for line in lines)  # the control: the bound record's row
    edit(record, lambda r: r.update(status=FORGED))
    lines = "\n".join(ledger_report.verification_lines(out, store.parse_name(unit)["plan"]))
    assert "\n## " not in lines and "## Verdict" in lines  # named as left out, on its own line, escaped


# -- every fault of --verify: one line, its exit code, before the unit is computed again ---------------------------


def copy_store(tmp_path: Path) -> tuple[Path, Path]:

    shutil.copytree(VERIFY_STORE, tmp_path / "store")
    return tmp_path / "store", next((tmp_path / "store" / "units").glob("*.json"))


def verify_line(capsys, unit: Path, code: int) -> str:
    assert replicate.main(["--verify", str(unit)]) == code
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "verifying" not in captured.out, (err, captured.out)  # refused before the rerun
    return err[0]


@pytest.mark.parametrize("where", ["t0", "cuda-t1"])
def test_a_unit_named_for_another_device_or_thread_count_is_refused(tmp_path, capsys, where):
    _out, unit = copy_store(tmp_path)
    device, threads = ("cpu", 0) if where == "t0" else ("cuda", 1)
    edit(unit, lambda r: (r.update(device=device, threads=threads),  # its content says what its new name says
                          r["config"].update(device=device, threads=threads)))
    renamed = unit.with_name(unit.name.replace("--cpu-t1--", f"--{device}-t{threads}--"))
    unit.rename(renamed)
    line = verify_line(capsys, renamed, 2)
    assert "not a unit of it" in line and renamed.name in line


def test_a_linked_unit_file_is_refused_as_the_store_refuses_it(tmp_path, capsys):
    _out, unit = copy_store(tmp_path)
    real = tmp_path / unit.name
    unit.rename(real)
    unit.symlink_to(real)
    assert "not a plain file" in verify_line(capsys, unit, 2)


def test_a_linked_verifications_folder_is_refused_and_nothing_written_through_it(tmp_path, capsys, monkeypatch):
    out, unit = copy_store(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / "verifications").symlink_to(elsewhere)
    monkeypatch.setattr(replicate.runner, "code_commit", lambda: COMMIT)
    line = verify_line(capsys, unit, 2)
    assert "verifications" in line and not any(elsewhere.iterdir())


def test_a_store_it_cannot_write_is_said_before_the_rerun_with_exit_4(tmp_path):
    """The real fault: a store folder without write permission, in a child without root's DAC override (as
    tests/test_permissions.py does; as another user chmod alone is enough)."""


    out, unit = copy_store(tmp_path)
    os.chmod(out, 0o555)
    try:
        env = {**ENV, "PYTHONDONTWRITEBYTECODE": "1"}
        code = ("import sys; from scale import replicate as R; R.runner.code_commit = lambda: 'c0ffee' * 6 + 'abcd'; "
                "sys.exit(R.main(['--verify', sys.argv[1]]))")
        proc = subprocess.run([*(DROP if os.geteuid() == 0 else []), sys.executable, "-c", code, str(unit)], env=env,
                              capture_output=True, text=True, timeout=300)
    finally:
        os.chmod(out, 0o755)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 4 and len(lines) == 1, proc.stderr
    assert "cannot write" in lines[0] and str(out) in lines[0] and "verifying" not in proc.stdout
    assert not (out / "verifications").exists()


def test_a_record_that_cannot_be_written_whole_is_one_line_naming_it(tmp_path):
    """The real fault: RLIMIT_FSIZE of 512 bytes (the record is larger): exit 4, the file named, nothing left."""

    out, unit = copy_store(tmp_path)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (512, 512))

    code = ("import sys; from scale import replicate as R; R.runner.code_commit = lambda: 'c0ffee' * 6 + 'abcd'; "
            "sys.exit(R.main(['--verify', sys.argv[1]]))")
    proc = subprocess.run([sys.executable, "-c", code, str(unit)], env={**ENV, "PYTHONDONTWRITEBYTECODE": "1"},
                          preexec_fn=limit, capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 4 and len(lines) == 1, proc.stderr
    assert "cannot write" in lines[0] and "verifications" in lines[0] and "File too large" in lines[0]
    assert not [p for p in (out / "verifications").glob("*") if not p.name.startswith(".")] \
        if (out / "verifications").exists() else True
