"""``bench.ledger_editions``: two editions of the ledger compared unit by unit over the values both hold. A changed
number or word is found, a value only the later edition holds is not a difference, the premise's words are counted
apart, a unit of another key is not compared; a folder without units is one line and exit 2."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

from bench import ledger_editions as le

STORED = Path(__file__).resolve().parent / "data" / "verify"
PLAN = "quick-fc3879cfcd1a"


def _unit(name: str = "E3E4-s0", key: str = "k1") -> dict:
    return {"name": name, "key_hash": key, "plan": "old", "seconds": 3.0,
            "protocols": {"a": {"orbit": 1.5, "twin": 0.25}}, "labels": ["x"],
            "premise": {"raw": {"training": {"premise": "learned", "loss": 2.0}}}}


def test_the_same_training_read_again_is_equal_and_what_is_new_is_not_a_difference():
    old = _unit()
    new = copy.deepcopy(old)
    new["plan"], new["seconds"] = "new", 9.0  # the plan and a timing differ by construction
    new["protocols"]["a"]["twin_raw_bn"] = -0.4  # a measurement the later edition adds
    new["premise"]["raw"]["training"]["premise"] = "learned (read by the corrected rules)"
    c = le.compare({"E3E4-s0": new}, {"E3E4-s0": old})
    assert (c.compared, c.equal, c.differing) == (1, 1, [])
    assert c.premise_numbers == 0 and c.premise_texts == {".raw.training.premise"}


def test_negative_control_a_changed_value_is_found():
    old = _unit()
    for edit, differs, premise_numbers in (
            (lambda u: u["protocols"]["a"].__setitem__("orbit", 1.5000000000000002), 1, 0),  # one ulp
            (lambda u: u.__setitem__("labels", ["y"]), 1, 0),
            (lambda u: u["premise"]["raw"]["training"].__setitem__("loss", 2.5), 0, 1)):
        new = copy.deepcopy(old)
        edit(new)
        c = le.compare({"E3E4-s0": new}, {"E3E4-s0": old})
        assert (len(c.differing), c.premise_numbers) == (differs, premise_numbers)


def test_another_key_or_no_earlier_unit_is_not_compared():
    c = le.compare({"E3E4-s0": _unit(key="k2"), "E5-s0": _unit("E5-s0")}, {"E3E4-s0": _unit()})
    assert c.compared == 0 and c.other_key == ["E3E4-s0"] and c.missing == ["E5-s0"]


def test_a_stored_unit_against_itself(capsys):
    assert le.main([str(STORED), PLAN, str(STORED), PLAN]) == 0
    assert capsys.readouterr().out.startswith(f"1 units of {PLAN} compared with {PLAN}'s unit of the same name and "
                                              "key: 1 equal")


def test_no_units_or_a_damaged_unit_is_one_line_and_exit_2(tmp_path, capsys):
    assert le.main([str(tmp_path), PLAN, str(STORED), PLAN]) == le.EXIT_INPUT
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no unit files" in err
    shutil.copytree(STORED / "units", tmp_path / "units")
    unit = next((tmp_path / "units").glob("*.json"))
    unit.write_text(unit.read_text()[:-40])
    assert le.main([str(tmp_path), PLAN, str(STORED), PLAN]) == le.EXIT_INPUT
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and unit.name in err
