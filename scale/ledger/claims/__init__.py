r"""The ledger's claims as data, one module per experiment, gathered here in report order:

    e1          E1's escape from pseudo-collapse, with its premise (a start collapsed in the measured statistic)
    e2          E2's lambda_min fractions and correlations; mechanism: M = 0 for ReLU, G indefinite under SimSiam
    e3e4        E3's probes, E4's orbit geometry under the E4 study's protocols; mechanism: D_intra, D_inter,
                the untrained head near 1x
    e5          E5's depth trends
    theory      the remaining mechanism rows (timescale separation, rho, M on null(G), Proposition 5.2)
    project     the project's own questions (trained heads whitening, the class probe): outside the paper's tally
    checks      identities of the code (M.1: a ReLU head's M = 0): checks, not reproductions, outside every tally

``rules_data()`` is every claim's registered part (``Claim.as_data``) with the statistics' settings it is read
with; ``rules_hash()`` its SHA-256, written into the registration before the first unit runs.
"""

from __future__ import annotations

from typing import Any

from scale.ledger import stats, verdicts
from scale.ledger.claims import e1, e2, e3e4, e5, project, theory
from scale.ledger.claims.base import CHECK, MECHANISM, PAPER, PROJECT, Claim
from scale.ledger.plan import digest
from scale.ledger.released import plan as released_plan

_MECHANISM = sorted((*e2.MECHANISM_CLAIMS, *e3e4.MECHANISM_CLAIMS, *theory.CLAIMS), key=lambda c: int(c.id[2:]))
CLAIMS: tuple[Claim, ...] = (*e1.CLAIMS, *e2.CLAIMS, *e3e4.CLAIMS, *e5.CLAIMS, *_MECHANISM, *project.CLAIMS,
                             *e2.CHECKS)
TABLES = (PAPER, MECHANISM, PROJECT, CHECK)
# E6 is not run here: the pretrained checkpoints cannot be fetched offline (``python -m scale.pretrained``).
NOT_RUN = {"E6": ("DINO heads compress orbits, VICReg / Barlow Twins heads expand them", "compressor / expander",
                  "not run: no pretrained checkpoint is reachable offline; `python -m scale.pretrained all --weights "
                  "PATH` (docs/pretrained.md)")}


# What had been run and seen of these experiments when the v4 rules were written (besides each claim's ``known``):
# the earlier ledgers, the searches and pilots, registered with the rules so that a reader can judge how blind each
# rule was.
KNOWN_BEFORE_REGISTRATION: tuple[str, ...] = (
    "v1 (5 seeds, 160 units) and v2 (10 seeds, 320 units) on the old recipes, whose E3/E4 and E5 networks did not "
    "learn (docs/replication/v2/report.md; issue 48's measurements): every row's v2 value is in its 'known'",
    "v3 (10 seeds, 320 units, plan 511cfdd496f5) on the recipes of this plan, its report (docs/replication/v3/) and "
    "its units read under these rules (docs/replication/v3-reread/): every row's v3 value, and the v3-reread label "
    "each corrected rule gives on v3's units, were seen before these rules were registered (issue 59's review)",
    "the recipe search (docs/recipes.md, bench/results/recipe_search.jsonl): the main job's, E3/E4's and E5's "
    "recipes at seeds 0-2 on the configurations of this plan (the same settings, 1 thread), with their final losses "
    "and z's class probes; no E3/E4 protocol, orbit, rotation-probe or curvature number was computed there",
    "the SimSiam search (docs/recipes.md; bench/results/recipe_search.jsonl, its lines marked simsiam): 18 E1/E2 "
    "candidates x 3 seeds, none learned; its premise numbers only, no E1/E2 statistic",
    "single-seed explorations of augmentations and SimSiam settings before the searches (seed 0, 2 threads, the "
    "same premise numbers only), and --quick ledgers of this code (tiny models, 1-4 epochs: pipeline checks)",
)


def rules_data() -> dict[str, Any]:
    """Everything a verdict depends on besides the units: the claims' data and the statistics' settings, and what
    was known when they were written."""
    return {"claims": [c.as_data() for c in CLAIMS], "not_run": {k: list(v) for k, v in NOT_RUN.items()},
            "known_before_registration": list(KNOWN_BEFORE_REGISTRATION),
            # the report's last section, on the paper's released arrays: its analysis plan, committed before any of
            # its values was computed, registered by path and SHA-256
            "released_plan": {"path": released_plan.PLAN, "sha256": released_plan.PLAN_SHA256},
            "statistics": {"level": stats.LEVEL, "kinds": list(stats.KINDS), "seeds_cap": stats.SEEDS_CAP,
                           "log_kappa": list(stats.LOG_KAPPA), "family_alpha": verdicts.FAMILY_ALPHA,
                           "verdicts": list(verdicts.CATEGORIES)}}


def rules_hash() -> str:
    return digest(rules_data())
