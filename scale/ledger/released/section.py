r"""The section "On the paper's own CIFAR data" of the ledger's report, and what ``python -m scale.released`` prints:
the recomputation table (printed against recomputed, per run), the printed figures no array supports, the claims
re-tested with their controls, and whether the runs agree.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

from scale.ledger.released.claims import agreement, all_rows
from scale.ledger.released.figures import UNSUPPORTED, Figure, recompute
from scale.ledger.released.plan import PLAN, PLAN_SHA256
from scale.ledger.released.reader import ReleasedError, read_all
from scale.ledger.released.schema import UPSTREAM, UPSTREAM_COMMIT

TITLE = "## On the paper's own CIFAR data"
COMMAND = "python -m scale.released"


def _num(v: float, decimals: int | None) -> str:
    if math.isnan(v):
        return "-"
    return f"{v:.{decimals + 2}f}" if decimals is not None else f"{v:.4g}"


def _agree(f: Figure) -> str:
    return "-" if f.agrees is None else "yes" if f.agrees else "**no**"


def figure_lines(figs: list[Figure]) -> list[str]:
    """The recomputation table; E1's internal checks folded into one line per run."""
    printed = [f for f in figs if f.printed is not None and not f.source.startswith("internal")]
    bad = [f for f in printed if not f.agrees]
    internal = [f for f in figs if f.source.startswith("internal")]
    L = [f"{len(printed)} printed figures recomputed: {len(printed) - len(bad)} agree (the recomputed value rounded "
         "to the printed decimals is the printed value), "
         f"{len(bad)} do not" + (": " + "; ".join(f"{f.run} {f.quantity} (printed {f.printed:g}, recomputed "
                                                  f"{_num(f.recomputed, f.decimals)})" for f in bad) if bad else "")
         + ".", ""]
    for run in dict.fromkeys(f.run for f in internal):
        mine = [f for f in internal if f.run == run]
        worst = max(f.recomputed for f in mine)
        L.append(f"- {run}, E1: the stored per-epoch mean and std equal the mean and population std of the 3 seeds' "
                 f"raw trajectories in {sum(bool(f.agrees) for f in mine)} of {len(mine)} configurations (largest "
                 f"difference {worst:.1e}).")
    L += ["", "| run | experiment | quantity | printed | recomputed | agrees | printed in |",
          "|---|---|---|---|---|---|---|"]
    L += [f"| {f.run} | {f.experiment} | {f.quantity} | {'-' if f.printed is None else f'{f.printed:g}'} | "
          f"{_num(f.recomputed, f.decimals)} | {_agree(f)} | {f.source} |" for f in figs if f not in internal]
    L += ["", "Printed figures no released array supports:", ""]
    L += [f"- {what}: {why}." for what, why in UNSUPPORTED]
    return L


def _est(e: Any) -> str:
    if e.n == 0:
        return "-"
    return e.fmt(".3g") + f" (n = {e.n})"


def claim_lines(rows: list[dict[str, Any]]) -> list[str]:
    L = ["| claim | run | statistic | value [95 % interval] (n) | rule | verdict | controls | missing, notes |",
         "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ctrl = "; ".join(f"{n}: {_est(c)}, {o}" for n, c, o in r["controls"]) or "-"
        mag = r["magnitude"]
        notes = [*r["missing"], *([f"band {mag.how}"] if mag is not None else []), *([r["note"]] if r["note"] else [])]
        L.append(f"| {r['id']} {r['claim']} | {r['run']} | {r['statistic']} | {_est(r['estimate'])} | {r['rule']} | "
                 f"{r['label']} | {ctrl} | {'; '.join(notes)} |")
    L += ["", "Across the three runs:", "", "| claim | runs |", "|---|---|"]
    L += [f"| {k} | {v} |" for k, v in agreement(rows).items()]
    return L


def section(root: Path | None = None) -> list[str]:
    """The whole section, from the arrays under ``root`` (default: the vendored copy); ``ReleasedError`` as is."""
    arrays = read_all(root)
    figs, rows = recompute(arrays), all_rows(arrays)
    return [TITLE, "",
            f"The paper's own runs, from the arrays its official code released ({UPSTREAM} at "
            f"{UPSTREAM_COMMIT[:12]}, MIT; vendored unchanged with their SHA-256 in `scale/ledger/released/arrays/`, "
            f"each checked on load): CIFAR-10 ResNet-18 (R18-C10), CIFAR-10 ViT-Tiny (ViT-C10), CIFAR-100 ResNet-18 "
            f"(R18-C100). Rebuilt offline by `{COMMAND}`. The plan (statistic, control and band of each row) was "
            f"committed before any value was computed: `{PLAN}` (SHA-256 {PLAN_SHA256[:16]}), which also says what "
            "had been read before.", "",
            "### Computational reproducibility: each printed figure recomputed from the arrays", "",
            *figure_lines(figs), "",
            "### The claims re-tested on the paper's data, with the ledger's controls", "",
            "Read as the ledger's rows (`scale/ledger/verdicts.py`, `scale/ledger/stats.py`): a t interval over the "
            "independent units the arrays hold (E1: 3 training seeds; kappa: 3 image samples of one network; E4: the "
            "15 orbits of one network), Fisher z for a correlation, Wilson for a fraction; one value gives no "
            "interval and the row is inconclusive, naming what is missing. Magnitude bands of a factor claim lie on "
            "the ratio itself, [paper / 2, paper x 2]. A claim that holds while one of its controls does not is "
            "'sign only' (this composition was written after the recomputation had been seen). No untrained twin "
            "was saved, so no row tests 'attributable to training'. No Holm correction: these rows are outside the "
            "digits ledger's family.", "", *claim_lines(rows)]


@functools.lru_cache(maxsize=1)
def vendored_section() -> tuple[str, ...]:
    """The section from the vendored arrays, computed once per process; a refused file gives one line instead."""
    try:
        return tuple(section())
    except ReleasedError as exc:
        return (TITLE, "", f"Not available: {exc}.")
