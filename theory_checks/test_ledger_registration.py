"""The replication ledger's rules are the registered ones: every band, bar and premise rule that decides a verdict
(``scale.ledger.claims``) equals what ``docs/replication/registrations`` holds, as registered before the first unit
ran or as its last logged amendment (``scale.replicate --amend``).

A verdict is only as blind as its rule: a band widened after the data are seen (the paper's "about 70 %" read as
[0.3, 0.95] instead of the registered [0.5, 0.9]) turns a "not reproduced" into a "reproduced" without any change
in the units. This check reads the registered rules claim by claim, so such an edit fails here with the claim's
name, and the rules' SHA-256 against the registration, so no part of a verdict's setting (the interval's level,
the multiplicity family, the seeds cap) moves either.

Negative control: a rule moved in a copy of the registered data is reported by the same comparison.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LEDGER = ROOT / "docs" / "replication"


def _in_force() -> list[tuple[str, dict[str, Any], str]]:
    """Each registration's plan, the rules in force (the last amendment's, else the registered ones) and its hash."""
    from scale.ledger import store

    found = []
    for path in sorted((LEDGER / "registrations").glob("*.json")):
        reg = json.loads(path.read_text())
        logged = store.amendments(LEDGER, reg["plan"])
        rules, digest = (logged[-1]["rules"], logged[-1]["to_hash"]) if logged else (reg["rules"], reg["rules_hash"])
        found.append((reg["plan"], rules, digest))
    return found


def _moved(registered: dict[str, Any], today: dict[str, Any]) -> list[str]:
    """The claims whose deciding rule (the claim's rule, its premises' rules, its alternatives' rules) differs."""
    def deciding(c: dict[str, Any]) -> Any:
        return (c["rule"], [p["rule"] for p in c["premises"]], [a["rule"] for a in c["alternatives"]], c["kind"])

    before = {c["id"]: deciding(c) for c in registered["claims"]}
    after = {c["id"]: deciding(c) for c in today["claims"]}
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def test_every_rule_is_the_registered_one():
    from scale.ledger import claims
    from scale.ledger.plan import digest

    registrations = _in_force()
    assert registrations, "no registration committed under docs/replication/registrations"
    today = claims.rules_data()
    for plan, rules, registered_hash in registrations:
        assert digest(rules) == registered_hash, f"plan {plan}: the registered rules do not hash to their record"
        moved = _moved(rules, today)
        assert not moved, f"plan {plan}: rules changed since registration without an amendment: {moved}"
        assert rules["statistics"] == today["statistics"], f"plan {plan}: the statistics' settings changed"
        assert claims.rules_hash() == registered_hash, f"plan {plan}: the rules' hash is not the registered one"


def test_negative_control_a_widened_band_is_reported():
    """The comparison itself can fail: E2.2's registered band widened in a copy is named."""
    from scale.ledger import claims

    today = claims.rules_data()
    widened = copy.deepcopy(today)
    row = next(c for c in widened["claims"] if c["rule"]["direction"] == "within")
    row["rule"]["band"] = [0.3, 0.95]
    assert _moved(widened, today) == [row["id"]]
