r"""A claim read from the units: its per-seed values, interval, verdict, p-value, Holm's verdict beside it, the
leave-one-seed-out stability and, where inconclusive, the seeds its observed spread would need.

    stability       "stable" if dropping any one seed leaves the verdict as it is; otherwise "fragile" with the
                    seeds whose removal changes it (needs three seeds or more: "-" below)
    seeds needed    for an inconclusive row: ``scale.ledger.stats.seeds_needed`` (the observed mean and spread
                    held fixed, the fewest seeds whose interval would be decisive; "> 50" beyond the cap)
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from scale.ledger import stats
from scale.ledger.claims.base import Claim, Results
from scale.ledger.verdicts import FAILS, HOLDS, INCONCLUSIVE, OPEN, after_holm, decide, outcome_of


def seeds_of(res: Results) -> list[int]:
    return sorted({int(r["seed"]) for r in res.values()})


def ran(claim: Claim, res: Results) -> bool:
    """Whether any unit the claim reads ran: its experiment's units are in ``res`` (E3 and E4: E3E4)."""
    exp = {"E3": "E3E4", "E4": "E3E4", "S3": "E1"}.get(claim.experiment, claim.experiment)
    return any(r.get("experiment") == exp for r in res.values())


def _verdict(claim: Claim, res: Results, seeds: list[int]) -> dict[str, Any]:
    values = [claim.value(res, s) for s in seeds]
    est = stats.estimate(claim.kind, values)
    premises = []
    for p in claim.premises:
        pv = [p.value(res, s) for s in seeds]
        pest = stats.estimate(p.kind, pv)
        premises.append({"values": pv, "interval": asdict(pest), "outcome": outcome_of(p.rule, pest)})
    outcomes = {p["outcome"] for p in premises}
    premise = FAILS if FAILS in outcomes else OPEN if OPEN in outcomes else HOLDS if premises else None
    controls, contradicting = [], []
    for c in claim.controls:
        cv = [c.value(res, s) for s in seeds]
        cest = stats.estimate(c.kind or claim.kind, cv)
        controls.append({"label": c.label, "protocol": c.protocol, "values": cv, "interval": asdict(cest),
                         "outcome": outcome_of(claim.rule, cest)})
        if c.protocol and outcome_of(claim.rule, cest) == FAILS:
            contradicting.append(c.label)
    verdict = decide(claim.rule, est, ran(claim, res), premise, tuple(contradicting))
    return {"values": values, "estimate": est, "premises": premises, "controls": controls,
            "contradicting": contradicting, "verdict": verdict}


def evaluate(claim: Claim, res: Results) -> dict[str, Any]:
    """The row (JSON-able) of ``claim`` on the units ``res``; ``holm`` fills in the family-wise columns."""
    seeds = seeds_of(res)
    v = _verdict(claim, res, seeds)
    est = v["estimate"]
    p = stats.decisive_p(claim.kind, v["values"], claim.rule.decisive)
    stability = "-"
    if est.n >= 3:
        changed = [s for s in seeds
                   if _verdict(claim, res, [t for t in seeds if t != s])["verdict"] != v["verdict"]]
        stability = "stable" if not changed else "fragile (without seed " + ", ".join(map(str, changed)) + ")"
    needed = None
    if v["verdict"] == INCONCLUSIVE:
        needed = stats.seeds_needed(claim.kind, v["values"], claim.rule.decisive)
    alternatives = []
    for a in claim.alternatives:
        av = [a.value(res, s) for s in seeds]
        aest = stats.estimate(a.kind, av)
        alternatives.append({"label": a.label, "statistic": a.statistic, "rule": a.rule.text(), "values": av,
                             "interval": asdict(aest), "verdict": decide(a.rule, aest, ran(claim, res))})
    return {**claim.as_data(), "seeds": seeds, "values": v["values"], "interval": asdict(est),
            "premise_results": v["premises"], "control_results": v["controls"], "contradicting": v["contradicting"],
            "verdict": v["verdict"], "p": p, "stability": stability, "seeds_needed": needed,
            "alternative_results": alternatives}


def holm(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Holm's adjusted p over every row with a p-value, and each row's verdict after it (``after_holm``)."""
    adjusted = stats.holm([r["p"] if r["p"] is not None else math.nan for r in rows])
    return [dict(r, p_holm=a, verdict_holm=after_holm(r["verdict"], a)) for r, a in zip(rows, adjusted)]


def evaluate_all(claims, res: Results) -> list[dict[str, Any]]:
    return holm([evaluate(c, res) for c in claims])
