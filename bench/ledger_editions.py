"""Two editions of the ledger, unit by unit: each unit of a later plan against the unit of the same name and key in
an earlier one, over the values both records hold (``scale.ledger.verify.differences``: every number and text,
timings and commits skipped). Made for v4 against v3: the same trainings (the edition is in the plan's settings, not
in a unit's key) read by corrected rules, so every value both hold should be equal, bit for bit, and what v4 adds
(the twin under protocol a, the raw-input probes) appears only in v4's records. The premise record is compared apart:
its words follow the rules, its numbers the training.

    python -m bench.ledger_editions docs/replication 2c4c1e5bf9da docs/replication/v3 511cfdd496f5
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scale.ledger.store import read_unit
from scale.ledger.verify import differences
from scale.unit_store.files import StoreError

EXIT_INPUT = 2  # a folder or plan with no unit files, or a unit file the store would not read
SET_APART = ("plan", "premise")  # the plan differs by construction; the premise is compared on its own


def units_of(folder: Path, plan: str) -> dict[str, dict[str, Any]]:
    """Every unit of ``plan`` under ``folder/units``, each read and checked by the store (schema, name, key)."""
    return {(r := read_unit(p))["name"]: r for p in sorted((folder / "units").glob(f"{plan}--*.json"))}


def shared(a: Any, b: Any) -> tuple[Any, Any]:
    """``a`` and ``b`` cut to the dictionary keys both hold, at every depth (lists are compared whole)."""
    if isinstance(a, dict) and isinstance(b, dict):
        both = a.keys() & b.keys()
        pairs = {k: shared(a[k], b[k]) for k in both}
        return {k: p[0] for k, p in pairs.items()}, {k: p[1] for k, p in pairs.items()}
    return a, b


@dataclass
class Comparison:
    compared: int = 0
    equal: int = 0
    differing: list[str] = field(default_factory=list)  # "unit: what differs" (the first difference of each)
    other_key: list[str] = field(default_factory=list)  # same name, another key: another training, not compared
    missing: list[str] = field(default_factory=list)  # in the later plan only
    premise_numbers: int = 0
    premise_texts: set[str] = field(default_factory=set)  # the paths of the premise's words that differ


def compare(later: dict[str, dict[str, Any]], earlier: dict[str, dict[str, Any]]) -> Comparison:
    c = Comparison()
    for name, new in sorted(later.items()):
        old = earlier.get(name)
        if old is None:
            c.missing.append(name)
            continue
        if old["key_hash"] != new["key_hash"]:
            c.other_key.append(name)
            continue
        c.compared += 1
        a, b = shared({k: v for k, v in old.items() if k not in SET_APART},
                      {k: v for k, v in new.items() if k not in SET_APART})
        numbers, texts = differences(a, b)
        if numbers or texts:
            c.differing.append(f"{name}: {texts[0] if texts else f'{numbers[0][0]} differs by {numbers[0][1]:g}'}")
        else:
            c.equal += 1
        numbers, texts = differences(*shared(old.get("premise"), new.get("premise")))
        c.premise_numbers += len(numbers)
        c.premise_texts.update(t.split(":")[0] for t in texts)
    return c


def summary(c: Comparison, later: str, earlier: str) -> list[str]:
    lines = [f"{c.compared} units of {later} compared with {earlier}'s unit of the same name and key: {c.equal} equal "
             f"in every value both hold outside the premise record, {len(c.differing)} differ",
             f"premise records: {c.premise_numbers} numbers differ; the words differ at "
             f"{', '.join(sorted(c.premise_texts)) or 'no path'}"]
    lines += [f"  differs: {d}" for d in c.differing]
    if c.other_key:
        lines.append(f"{len(c.other_key)} of the same name under another key (another training, not compared): "
                     + ", ".join(c.other_key))
    if c.missing:
        lines.append(f"{len(c.missing)} with no unit of that name in {earlier}: " + ", ".join(c.missing))
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ledger_editions", description=__doc__.split("\n\n")[0])
    p.add_argument("later", type=Path, help="the later edition's folder (holding units/)")
    p.add_argument("later_plan")
    p.add_argument("earlier", type=Path, help="the earlier edition's folder")
    p.add_argument("earlier_plan")
    a = p.parse_args(argv)
    try:
        later, earlier = units_of(a.later, a.later_plan), units_of(a.earlier, a.earlier_plan)
    except StoreError as exc:
        print(f"ledger_editions: {exc}", file=sys.stderr)
        return EXIT_INPUT
    for folder, plan, found in ((a.later, a.later_plan, later), (a.earlier, a.earlier_plan, earlier)):
        if not found:
            print(f"ledger_editions: no unit files of plan {plan} in {folder / 'units'}", file=sys.stderr)
            return EXIT_INPUT
    print("\n".join(summary(compare(later, earlier), a.later_plan, a.earlier_plan)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
