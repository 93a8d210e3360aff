"""A stored ledger unit is reproduced by the code now (``python -m scale.replicate --verify``): one small unit of a
--quick plan, kept in ``tests/data/verify/`` with its registration, is computed again and compared with its record.
An edit that changes what the unit computes fails here until the unit is recomputed:

    rm -rf tests/data/verify /tmp/v && python -m scale.replicate --quick --seeds 1 --experiments E1 \\
        --units E1-linear-bn0-lr0.005-collapsed-s0 --out /tmp/v && mkdir -p tests/data/verify \\
        && cp -r /tmp/v/registrations /tmp/v/units tests/data/verify/

Bitwise on the kind of processor that computed it (the unit records torch's CPU capability and the processor);
elsewhere float kernels may round otherwise, and the comparison allows float32 round-off (``ELSEWHERE_RTOL``) and
says so. Negative control: a record with one number changed is reported as differing (exit 1), and a file whose
content is not the unit its name says is refused (exit 2)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from scale import replicate as R
from scale.ledger import report, store
from scale.ledger.runner import machine
from scale.ledger.verify import verify

STORE = Path(__file__).resolve().parent / "data" / "verify"
ELSEWHERE_RTOL = 1e-4  # another processor kind: float32 kernels that round otherwise, over two training steps


def test_the_store_holds_one_unit():
    assert len(list((STORE / "units").glob("*.json"))) == 1


def test_the_stored_unit_is_reproduced_by_the_code_now(tmp_path, capsys):
    shutil.copytree(STORE, tmp_path / "store")  # a verification is recorded beside the units: not in the repo
    path = next((tmp_path / "store" / "units").glob("*.json"))
    stored = json.loads(path.read_text())
    if stored.get("machine") == machine():
        assert R.main(["--verify", str(path)]) == 0, capsys.readouterr()
        assert "reproduced bitwise" in capsys.readouterr().out
    else:  # another kind of processor: the values agree to float round-off, and the result says where it ran
        r = verify(path, log=lambda _: None)
        assert r["status"] == "equal" or r["largest"][2] <= ELSEWHERE_RTOL, r


def test_a_changed_number_or_a_misnamed_file_fails_the_verification(tmp_path, capsys):
    shutil.copytree(STORE, tmp_path / "store")
    path = next((tmp_path / "store" / "units").glob("*.json"))
    rec = json.loads(path.read_text())
    rec["history"][-1]["loss"] *= 1.001  # what a value-changing edit of the code would leave
    path.write_text(json.dumps(rec))
    assert R.main(["--verify", str(path)]) == 1
    assert "differ from the record" in capsys.readouterr().out and ".history[" in str(verify(path, lambda _: None))
    meta = store.parse_name(path)
    other = path.with_name(path.name.replace(meta["name"], meta["name"].replace("-s0", "-s1")))
    path.rename(other)  # the content says seed 0's unit, the name seed 1's
    assert R.main(["--verify", str(other)]) == 2
    assert "not the unit its name says" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["not-a-unit.json", "p--u--cpu-t1--k.json"])
def test_a_file_that_is_not_a_unit_of_a_registered_plan_is_refused(tmp_path, capsys, bad):
    (tmp_path / "units").mkdir()
    f = tmp_path / "units" / bad
    f.write_text(json.dumps({"plan": "p", "name": "u", "device": "cpu", "threads": 1, "key_hash": "k"}))
    assert R.main(["--verify", str(f)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_verification_is_recorded_once_per_commit_and_listed_by_the_report(tmp_path, monkeypatch, capsys):
    shutil.copytree(STORE, tmp_path / "store")
    path = next((tmp_path / "store" / "units").glob("*.json"))
    monkeypatch.setattr(R.runner, "code_commit", lambda: "abc123+dirty")
    R.main(["--verify", str(path)])
    assert "not recorded: the code is not at a commit" in capsys.readouterr().out
    assert not (tmp_path / "store" / "verifications").exists()
    monkeypatch.setattr(R.runner, "code_commit", lambda: "c0ffee" * 6 + "abcd")
    R.main(["--verify", str(path)])
    assert "recorded in" in capsys.readouterr().out
    R.main(["--verify", str(path)])
    assert "already recorded at c0ffeec0ffee" in capsys.readouterr().out
    plan = store.parse_name(path)["plan"]
    found, left = store.verifications(tmp_path / "store", plan)
    assert len(found) == 1 and not left and found[0]["verified_at"].startswith("c0ffee")
    lines = report.verification_lines(tmp_path / "store", plan)
    assert any(path.name in line and "c0ffeec0ffee" in line for line in lines), lines
    bad = tmp_path / "store" / "verifications" / f"{plan}--forged.json"
    bad.write_text(json.dumps({"unit": 3}))  # negative control: not a verification of the store's form
    found, left = store.verifications(tmp_path / "store", plan)
    assert len(found) == 1 and len(left) == 1 and "not a verification" in left[0]
    recorded = next((tmp_path / "store" / "verifications").glob("*--at-c0ffee*.json"))
    copied = recorded.with_name(recorded.name.replace("c0ffeec0ffee", "0123456789ab"))
    shutil.copy(recorded, copied)  # a verification copied over another commit's name: what it says is not its name
    found, left = store.verifications(tmp_path / "store", plan)
    assert len(found) == 1 and any(copied.name in line and "not the verification its name says" in line
                                   for line in left), left
