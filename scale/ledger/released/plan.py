"""The released section's analysis plan: committed before any of the arrays' values was computed, held to its
SHA-256 here (and registered with the ledger's rules, ``scale.ledger.claims.rules_data``)."""

from __future__ import annotations

import hashlib
from pathlib import Path

PLAN = "docs/replication/released_plan.md"
PLAN_SHA256 = "b13f4d1343f21efcc52c1fb79b75757c7c4f08bc23becb62603f438ce4f2a0d6"


def plan_ok(root: Path) -> bool | None:
    """Whether the committed plan under ``root`` is the registered one (None: no plan file in this tree)."""
    path = root / PLAN
    if not path.is_file():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest() == PLAN_SHA256
