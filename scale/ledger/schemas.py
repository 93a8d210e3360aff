"""The shapes of the ledger's records, beside their writers, read by the unit store's reader
(``scale.unit_store.schema``):

    LEDGER_UNIT      a unit file (``scale.ledger.unit_record.unit_record``, written by ``scale.ledger.store.save_unit``)
    REGISTRATION     a plan's registration and its settings (``scale.ledger.runner.registration_record``); the first
                     ledger's converted one: ``V1_REGISTRATION``
    AMENDMENT        a change of a plan's rules (``scale.ledger.runner.check_rules``)
    VERIFICATION     a stored unit computed again by a later commit (``scale.ledger.store.record_verification``)
"""

from __future__ import annotations

from typing import Any

from scale.unit_store.schema import (
    DEVIATIONS,
    IDENTITY,
    MAX_SEEDS,
    NUMBER,
    Maybe,
    Records,
    Schema,
    between,
    not_blank,
    strict_json,
)

# A ledger unit (scale.ledger.unit_record.unit_record): the fields its readers use (scale.ledger.readers, views,
# figures).
HISTORY = Schema({"epoch": float}, {k: NUMBER for k in ("loss", "h_std", "h_cond", "z_std", "z_cond",
                                                        "rel_update_head", "rel_update_backbone", "drift_head",
                                                        "drift_backbone")})
CURVATURE = Schema({"epoch": float}, {**{k: NUMBER for k in ("lambda_min", "lambda_max", "M_over_H", "cond_log_ratio",
                                                             "z_cov_min", "z_cov_max", "probe_rows")},
                                      "mechanism": dict[str, Any] | None})
START = Schema({}, {k: NUMBER for k in ("h_std", "z_std", "h_cond", "z_cond", "epoch")})
LEDGER_UNIT = Schema(
    required={**IDENTITY, "experiment": str, "seed": int, "labels": dict[str, Any], "key": dict[str, Any],
              "status": str, "config": dict[str, Any], "git_commit": str, "seconds": float},
    optional={"deviations": DEVIATIONS, "history": Records(HISTORY), "curvature": Records(CURVATURE),
              "start": Maybe(START), "protocols": dict[str, dict[str, Any]],
              "premise": dict[str, dict[str, Any] | None],
              "timescale": dict[str, Any] | None, "tangent": dict[str, Any] | None,
              "tangent_untrained": dict[str, Any] | None, "versions": dict[str, str], "machine": dict[str, Any],
              "torch_threads": int | None, "finished_at": str})

# A stored unit computed again by a later commit (scale.ledger.store.record_verification, from scale.ledger.verify):
# its numbers are finite (strict JSON), what the ledger reads is per statistic and per row (scale.ledger.sensitivity).
SHIFTED = Schema({"row": str, "statistic": str, "seed": int, "stored": NUMBER, "recomputed": NUMBER,
                  "difference": NUMBER, "width": NUMBER, "of_width": NUMBER})
VERDICT_CHANGE = Schema({"row": str, "what": str, "stored": str, "recomputed": str})
LEDGER_SHIFT = Schema({"statistics": Records(SHIFTED), "verdict_changes": Records(VERDICT_CHANGE), "rows": int,
                       "units": int, "seeds": int})
VERIFICATION = Schema(
    required={"unit": str, "plan": str, "computed_at": str, "verified_at": str, "status": str, "differences": int,
              "same_machine": bool},
    optional={"largest": tuple[str, float, NUMBER] | None, "machine": dict[str, Any] | None, "date": str,
              "texts": list[str], "ledger": Maybe(LEDGER_SHIFT), "unit_sha256": str},
    rules=(strict_json,))
VERIFICATION_STATUSES = ("equal", "differs")  # what --verify records (a unit today's code plans otherwise: none)

# A ledger registration (scale.ledger.runner.registration_record) and its plan's settings (runner.plan_settings).
SETTINGS = Schema(
    required={"dataset": str, "quick": bool, "device": str, "threads": int, "epochs": dict[str, int | None]},
    optional={"seeds": int, "probe_images": int | None, "probe_pairs": int | None, "repeat": int, "format": int,
              "edition": int},
    rules=(between("seeds", 1, MAX_SEEDS), between("threads", 1), between("repeat", 0),
           lambda s: "seeds is missing (a plan of format 3 or later registers them)"
           if (s.get("format") or 0) >= 3 and "seeds" not in s else None))
RULES = Schema({"claims": Records(Schema({"id": str}))},
               {"known_before_registration": list[str], "released_plan": dict[str, str]})
REGISTRATION = Schema({"plan": str, "settings": SETTINGS, "rules": RULES, "rules_hash": str, "plan_hash": str,
                       "code_commit": str, "registered_at": str, "command": str})
V1_REGISTRATION = Schema({"plan": str, "settings": SETTINGS, "rules": RULES, "rules_hash": str | None})
# An amendment of a plan's rules (scale.ledger.runner.check_rules).
AMENDMENT = Schema({"number": int, "date": str, "reason": str, "from_hash": str, "to_hash": str,
                    "claims_changed": list[str], "rules": RULES}, {"code_commit": str},
                   rules=(between("number", 1), not_blank("reason")))
