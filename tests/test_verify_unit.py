"""A stored ledger unit is reproduced by the code now (``python -m scale.replicate --verify``): one small unit of a
--quick plan, kept in ``tests/data/verify/`` with its registration, is computed again and compared with its record.
An edit that changes what the unit computes fails here until the unit is recomputed:

    rm -rf tests/data/verify /tmp/v && python -m scale.replicate --quick --seeds 1 --experiments E1 \\
        --units E1-linear-bn0-lr0.005-collapsed-s0 --out /tmp/v && mkdir -p tests/data/verify \\
        && cp -r /tmp/v/registrations /tmp/v/units tests/data/verify/

Bitwise on the kind of processor that computed it (the unit records torch's CPU capability and the processor);
elsewhere float kernels may round otherwise, and the comparison allows float32 round-off (``ELSEWHERE_RTOL``) and
says so. Negative control: a record with one number changed is reported as differing (exit 1), and a file whose
content is not the unit its name says, or a unit of an earlier ledger edition, is refused (exit 2). What the ledger
reads from a unit that differs (``scale.ledger.sensitivity``) is tested on a row of the ledger's form over four
seeds of this unit, and the record
a verification writes is read back by a strict JSON parser."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import pytest

from scale import replicate as R
from scale.ledger import readers, store, views
from scale.ledger.claims import CLAIMS
from scale.ledger.plan import digest as plan_digest
from scale.ledger.runner import machine
from scale.ledger.schemas import VERIFICATION
from scale.ledger.sensitivity import shift
from scale.ledger.verdicts import Rule
from scale.ledger.verify import differences, verify
from scale.unit_store import schema

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
        assert r["status"] == "equal" or (not r["texts"] and r["largest"][2] is not None
                                          and r["largest"][2] <= ELSEWHERE_RTOL), r
        assert r["status"] == "equal" or not r["ledger"]["verdict_changes"], r


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


def test_a_unit_of_an_earlier_edition_is_verified_at_its_own_commit(tmp_path, capsys):
    """v3's units (no edition) lack measurements today's code makes and were read by another premise: today's code
    would report those as differences of the code, so it refuses them with one line (exit 2)."""
    shutil.copytree(STORE, tmp_path / "store")
    reg_path = next((tmp_path / "store" / "registrations").glob("*.json"))
    reg = json.loads(reg_path.read_text())
    del reg["settings"]["edition"]  # a registration written before editions, as v3's: its own plan id
    old, new = reg["plan"], store.plan_id(reg["settings"])
    reg.update(plan=new, plan_hash=plan_digest(reg["settings"]))
    reg_path.unlink()
    (reg_path.parent / f"{new}.json").write_text(json.dumps(reg))
    unit = next((tmp_path / "store" / "units").glob("*.json"))
    rec = json.loads(unit.read_text())
    rec["plan"] = new
    unit.unlink()
    path = unit.with_name(unit.name.replace(old, new))
    path.write_text(json.dumps(rec))
    assert R.main(["--verify", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ledger edition before 4" in err and "at their own commit" in err


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
    lines = views.verification_lines(tmp_path / "store", plan)
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


def strict_json(text: str):
    """``json.loads`` that refuses ``Infinity``, ``-Infinity`` and ``NaN`` (what strict JSON parsers do)."""
    def refuse(name: str):
        raise ValueError(f"not strict JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def test_text_fields_are_compared_as_text_and_numbers_never_infinitely():
    old = {"findings": ["loss fell to 1.2", "z above init"], "x": 0.0, "y": 2.0, "flag": True, "gone": 1,
           "seconds": 5.0}
    new = {"findings": ["loss fell to 1.3", "z above init"], "x": 1e-3, "y": 2.5, "flag": False, "new": 1,
           "seconds": 9.0}
    numbers, texts = differences(old, new)
    assert numbers == [(".x", 1e-3, None), (".y", 0.5, 0.25)]  # stored 0: no relative difference, not inf
    assert texts == [".findings[0]: text", ".flag: bool stored, bool recomputed", ".gone: only in the stored record",
                     ".new: only in the recomputed record"]
    assert differences({"a": [1, 2]}, {"a": [1]}) == ([], [".a: length 2 stored, 1 recomputed"])
    assert differences({"a": math.inf}, {"a": 1.0}) == ([], [".a: inf stored, 1.0 recomputed"])


def test_the_verification_record_is_strict_json_and_its_schema_refuses_infinity(tmp_path, monkeypatch, capsys):
    shutil.copytree(STORE, tmp_path / "store")
    path = next((tmp_path / "store" / "units").glob("*.json"))
    rec = json.loads(path.read_text())
    rec["start"]["z_cond"] = 0.0  # a stored 0 against a recomputed 8e4 (the largest difference on any processor):
    # once written as an infinite relative difference, Infinity in the record
    rec["premise"] = json.loads(json.dumps(rec["premise"]).replace("loss", "LOSS"))  # texts that differ
    path.write_text(json.dumps(rec))
    monkeypatch.setattr(R.runner, "code_commit", lambda: "c0ffee" * 6 + "abcd")
    assert R.main(["--verify", str(path)]) == 1
    out = capsys.readouterr().out
    assert "stored 0" in out and "text fields that differ" in out and "inf relative" not in out
    assert "no verdict changes" in out or "verdicts that would change" in out
    written = next((tmp_path / "store" / "verifications").glob("*.json"))
    record = strict_json(written.read_text())
    assert record["largest"][0] == ".start.z_cond"
    assert record["largest"][2] is None and record["texts"] and record["ledger"]["rows"] == len(CLAIMS)
    assert schema.problem(record, VERIFICATION) is None
    for bad in (math.inf, math.nan):  # negative control: the schema names a number strict JSON cannot hold
        wrong = schema.problem({**record, "largest": [".x", bad, None]}, VERIFICATION)
        assert wrong and "strict JSON" in wrong
        with pytest.raises(store.StoreError, match="not written"):
            store.record_verification(tmp_path / "store",
                                      {**record, "verified_at": "f" * 40, "largest": [".x", bad, 1.0]})


E1_UNIT = "E1-linear-bn0-lr0.005-collapsed-s{s}"


def _plan_of_seeds(values: list[float]) -> dict[str, dict]:
    """The stored test unit as seeds 0.. of one plan, each with its final h std set to ``values[seed]``."""
    base = store.read_unit(next((STORE / "units").glob("*.json")))
    res = {}
    for s, v in enumerate(values):
        rec = json.loads(json.dumps(base))
        rec["seed"], rec["name"] = s, E1_UNIT.format(s=s)
        rec["history"][-1]["h_std"] = v
        res[rec["name"]] = rec
    return res


def test_the_ledger_shift_reads_each_statistic_against_its_rows_interval_and_names_a_verdict_change():
    # One row of the ledger's form whose statistic is the unit's final h std, claimed above 0.1.
    claim = dataclasses.replace(
        next(c for c in CLAIMS if c.experiment == "E1"), id="T1", rule=Rule(">", 0.1), kind="mean",
        value=lambda res, s: readers.h_std_final(res, E1_UNIT.format(s=s)), premises=(), controls=(),
        alternatives=(), twin=None, no_twin="a test row", magnitude=None, no_magnitude="a test row", learned=(),
        not_learned="a test row")
    res = _plan_of_seeds([0.20, 0.21, 0.22, 0.23])
    name = E1_UNIT.format(s=0)
    moved = json.loads(json.dumps(res[name]))
    moved["history"][-1]["h_std"] = 0.201
    small = shift(res, name, moved, [claim])
    (row,) = small["statistics"]
    assert (row["row"], row["statistic"], row["seed"]) == ("T1", "value", 0)
    assert row["stored"] == 0.20 and row["recomputed"] == 0.201 and math.isclose(row["difference"], 0.001)
    assert 0 < row["width"] < 1 and math.isclose(row["of_width"], 0.001 / row["width"])
    assert small["verdict_changes"] == [] and small["units"] == 4 and small["seeds"] == 4
    moved["history"][-1]["h_std"] = -5.0  # far below the bar: the interval now straddles 0.1
    big = shift(res, name, moved, [claim])
    assert big["statistics"][0]["of_width"] > 1
    assert {c["what"] for c in big["verdict_changes"]} >= {"sign", "verdict"}
    assert all(c["row"] == "T1" and c["stored"] != c["recomputed"] for c in big["verdict_changes"])
    assert shift(res, name, res[name], [claim])["statistics"] == []  # the same record: nothing moves
    strict_json(json.dumps(big))
