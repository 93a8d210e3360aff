r"""A claim read from the units: its per-seed values, interval, verdict, p-value, Holm's verdict beside it, the
leave-one-seed-out stability and, where inconclusive, the seeds its observed spread would need; and its contrasts
(``scale.ledger.claims.base``): the premise "the network learned" over the trainings it names, the trained network
against its untrained twin, the effect against the paper's magnitude (``scale.ledger.verdicts.compose``).

    learned         every named training of every seed passed ``scale.runs.premise``: holds; one that did not:
                    "premise not met: the network did not learn", naming the units; one not recorded: open (one
                    that did not learn decides, whatever another seed lacks)
    twin            the trained network minus its untrained twin per seed; no seed with a value where the units
                    ran: "not measured" (a unit older than the twin's measurement)
    magnitude       under the row's protocol, and under each protocol control whose sign holds too; a paper's
                    value from one run against the prediction interval of one run (``Magnitude.runs``)
    holm            Holm's adjustment over the family of the paper's testable rows: the paper's table, without
                    the rows that are no test of their claim (premise not met, not measurable, not measured);
                    every other row (mechanism, project, checks) keeps its verdict, its adjusted p "-"

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
from scale.ledger.baselines import raw_input_baseline
from scale.ledger.claims.base import PAPER, PAPER_PROTOCOL, Claim, Results
from scale.ledger.readers import learned, learned_findings
from scale.ledger.verdicts import (
    FAILS,
    HOLDING,
    HOLDS,
    INCONCLUSIVE,
    OPEN,
    PREMISE_NOT_MET,
    TWIN_NOT_MEASURED,
    UNTESTED,
    after_holm,
    compose,
    decide,
    magnitude_of,
    magnitude_outcome,
    outcome_of,
)
from scale.runs.summary import Estimate

DID_NOT_LEARN = "the network did not learn"


def seeds_of(res: Results) -> list[int]:
    return sorted({int(r["seed"]) for r in res.values()})


def ran(claim: Claim, res: Results) -> bool:
    """Whether any unit the claim reads ran: its experiment's units are in ``res`` (E3 and E4: E3E4)."""
    exp = {"E3": "E3E4", "E4": "E3E4", "S3": "E1"}.get(claim.experiment, claim.experiment)
    return any(r.get("experiment") == exp for r in res.values())


def learned_premise(claim: Claim, res: Results, seeds: list[int]) -> dict[str, Any] | None:
    """The premise "the network learned" over the claim's trainings (module docstring); ``None`` where the claim
    names none (its ``not_learned`` says why)."""
    if not claim.learned:
        return None
    failed, missing, names = [], [], []
    for s in seeds:
        for template, training in claim.learned:
            name = template.format(s=s)
            names.append(name)
            ok = learned(res, name, training)
            if ok is None:
                missing.append(f"{name} ({training})")
            elif not ok:
                why = learned_findings(res, name, training)
                failed.append(f"{name} ({training}): {why[0] if why else 'no finding recorded'}")
    outcome = FAILS if failed else OPEN if missing else HOLDS
    return {"outcome": outcome, "failed": failed, "missing": missing, "trainings": len(names)}


def _magnitude(claim: Claim, kind: str, values: list, est) -> str:
    """The magnitude outcome of one protocol's values: against the interval of the mean, or, for a paper's value
    from one run, against the prediction interval of one run (``scale.ledger.stats.prediction``)."""
    m = claim.magnitude
    around = stats.prediction(kind, values) if m.runs == 1 else None
    return magnitude_outcome(m.band, m.paper, est.low, est.high, around)


def _verdict(claim: Claim, res: Results, seeds: list[int]) -> dict[str, Any]:
    values = [claim.value(res, s) for s in seeds]
    est = stats.estimate(claim.kind, values)
    premises = []
    for p in claim.premises:
        pv = [p.value(res, s) for s in seeds]
        pest = stats.estimate(p.kind, pv)
        premises.append({"values": pv, "interval": asdict(pest), "outcome": outcome_of(p.rule, pest)})
    learn = learned_premise(claim, res, seeds)
    outcomes = {p["outcome"] for p in premises} | ({learn["outcome"]} if learn else set())
    premise = FAILS if FAILS in outcomes else OPEN if OPEN in outcomes else HOLDS if outcomes else None
    controls, contradicting, open_protocols = [], [], []
    for c in claim.controls:
        cv = [c.value(res, s) for s in seeds]
        cest = stats.estimate(c.kind or claim.kind, cv)
        controls.append({"label": c.label, "protocol": c.protocol, "values": cv, "interval": asdict(cest),
                         "outcome": outcome_of(claim.rule, cest)})
        if c.protocol and outcome_of(claim.rule, cest) == FAILS:
            contradicting.append(c.label)
        elif c.protocol and outcome_of(claim.rule, cest) == OPEN:
            open_protocols.append(c.label)
    sign = decide(claim.rule, est, ran(claim, res), premise, tuple(contradicting),
                  paper_protocol=claim.protocol in ("", PAPER_PROTOCOL))
    twin = None
    if claim.twin is not None:
        tv = [claim.twin.value(res, s) for s in seeds]
        test = stats.estimate("mean", tv)
        twin = {"label": claim.twin.label, "values": tv, "interval": asdict(test),
                "outcome": TWIN_NOT_MEASURED if test.n == 0 and est.n > 0 else outcome_of(claim.twin.rule, test)}
    magnitude = None
    if claim.magnitude is not None:
        by_protocol = [(f"protocol {claim.protocol}" if claim.protocol else "",
                        _magnitude(claim, claim.kind, values, est))]
        if sign in HOLDING:  # the magnitude under every other protocol that holds too
            by_protocol += [(c.label, _magnitude(claim, c.kind or claim.kind, r["values"], Estimate(**r["interval"])))
                            for c, r in zip(claim.controls, controls) if c.protocol and r["outcome"] == HOLDS]
        magnitude = {"outcome": magnitude_of(tuple(by_protocol)), "by_protocol": [list(x) for x in by_protocol],
                     "paper": claim.magnitude.paper, "band": list(claim.magnitude.band), "runs": claim.magnitude.runs}
    category, label = compose(sign, twin["outcome"] if twin else None, magnitude["outcome"] if magnitude else None,
                              tuple(open_protocols), tuple(contradicting),
                              tuple(tuple(x) for x in magnitude["by_protocol"]) if magnitude else ())
    if sign == PREMISE_NOT_MET:
        failed = [t for p, r in zip(claim.premises, premises) if r["outcome"] == FAILS for t in (p.label,)]
        if learn and learn["outcome"] == FAILS:
            failed.append(f"{DID_NOT_LEARN}: " + "; ".join(learn["failed"][:3])
                          + (f"; and {len(learn['failed']) - 3} more" if len(learn["failed"]) > 3 else ""))
        label = f"{PREMISE_NOT_MET}: " + "; ".join(failed)
    return {"values": values, "estimate": est, "premises": premises, "learned": learn, "controls": controls,
            "contradicting": contradicting, "open_protocols": open_protocols, "twin": twin, "magnitude": magnitude,
            "sign": sign, "verdict": category, "label": label}


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
    if v["sign"] == INCONCLUSIVE:
        needed = stats.seeds_needed(claim.kind, v["values"], claim.rule.decisive)
    alternatives = []
    for a in claim.alternatives:
        av = [a.value(res, s) for s in seeds]
        aest = stats.estimate(a.kind, av)
        alternatives.append({"label": a.label, "statistic": a.statistic, "rule": a.rule.text(), "values": av,
                             "interval": asdict(aest), "verdict": decide(a.rule, aest, ran(claim, res))})
    return {**claim.as_data(), "seeds": seeds, "values": v["values"], "interval": asdict(est),
            "premise_results": v["premises"], "learned_result": v["learned"], "control_results": v["controls"],
            "contradicting": v["contradicting"], "open_protocols": v["open_protocols"], "twin_result": v["twin"],
            "magnitude_result": v["magnitude"], "sign": v["sign"], "verdict": v["verdict"], "label": v["label"],
            "p": p, "stability": stability, "seeds_needed": needed, "alternative_results": alternatives,
            "raw_input": raw_input_baseline(claim.learned, res, seeds)}


def in_family(row: dict[str, Any]) -> bool:
    """Whether a row is in Holm's family: a paper's row that tests its claim (module docstring)."""
    return row["table"] == PAPER and row["sign"] not in UNTESTED


def holm(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Holm's adjusted p over the family's rows with a p-value (``in_family``), and each row's verdict after it
    (``after_holm``); a row outside the family keeps its verdict, its adjusted p NaN."""
    adjusted = stats.holm([r["p"] if r["p"] is not None and in_family(r) else math.nan for r in rows])
    return [dict(r, p_holm=a, verdict_holm=after_holm(r["verdict"], a) if in_family(r) else r["verdict"])
            for r, a in zip(rows, adjusted)]


def evaluate_all(claims, res: Results) -> list[dict[str, Any]]:
    return holm([evaluate(c, res) for c in claims])
