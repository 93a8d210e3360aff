"""``python -m mini.reports.collapse``: the Theorem 4.1 audit of ``mini.collapse`` as tables.

One row per (objective, head, init) over the seeds: ``|M|/|H_eff|``, negative eigenvalue counts of
``G`` and ``H_eff``, ``dim null(G)``, ``lambda_min``, the scale, ``min M`` on ``null(G)``, and whether
the PSD premise holds; then the fraction of random smooth heads with negative curvature at collapse.
Printed, and written into ``docs/collapse_audit.md`` (its block of this command; ``--no-doc`` prints only).
"""

from __future__ import annotations

import argparse

from mini.collapse import Audit, audit_table, generic_fraction
from mini.hessian import NEG_FLOOR
from mini.reports.docs import DOCS, add_doc_flags, fenced, publish

PROG = "python -m mini.reports.collapse"
DOC = DOCS / "collapse_audit.md"  # its generated block (mini.reports.docs)


def format_table(rows: list[Audit]) -> str:
    head = (
        "| objective | PSD premise | head | init | seeds | |M|/|H_eff| | neg(G) | neg(H_eff) | dim null(G) "
        "| lambda_min(H_eff) | scale | min M on null(G) |"
    )
    lines = [head, "|" + "---|" * 12]
    groups: dict[tuple[str, str, str], list[Audit]] = {}
    for r in rows:
        groups.setdefault((r.objective, r.spec, r.init), []).append(r)
    for (objective, spec, init), g in groups.items():
        premise = {True: "yes", False: "no (indefinite)", None: "state-dependent"}[g[0].psd_premise]

        def span(values, fmt="{:.3g}"):
            lo, hi = min(values), max(values)
            return fmt.format(lo) if lo == hi else f"{fmt.format(lo)} .. {fmt.format(hi)}"

        lines.append(
            f"| {objective} | {premise} | {spec} | {init} | {len(g)} | {span([r.m_over_h for r in g])} "
            f"| {span([r.neg_G for r in g], '{}')} | {span([r.neg_H for r in g], '{}')} "
            f"| {span([r.null_G for r in g], '{}')} | {span([r.lambda_min for r in g])} "
            f"| {span([r.scale for r in g])} | {span([r.min_M_on_null_G for r in g])} |"
        )
    return "\n".join(lines)


def report(seeds: int = 3, generic: int = 100) -> str:
    """The audit as printed (and as ``docs/collapse_audit.md`` holds it)."""
    lines = ["Theorem 4.1 audit: n=4 samples, d=6, k=3 (so null(G) is non-trivial at collapse), width 8,",
             f"negative = eigenvalue below -{NEG_FLOOR:g} x scale, scale = max |lambda(H_eff)|.", "",
             format_table(audit_table(seeds)), "",
             "Generic negative curvature at collapse (MSE to fixed targets, PSD premise holds):",
             "| head | heads with lambda_min(H_eff) < 0 |", "|---|---|"]
    for act in ("gelu", "swish", "tanh", "softplus"):
        for depth in (2, 3):
            hits, total = generic_fraction(act, depth, generic)
            lines.append(f"| {act}{depth} | {hits}/{total} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Theorem 4.1 audit at collapsed, pseudo-collapsed and normal states (toy instances).",
    )
    parser.add_argument("--seeds", type=int, default=3, help="instances per row (default 3)")
    parser.add_argument("--generic", type=int, default=100, help="random heads per activation for the "
                        "'generic' fraction (default 100)")
    add_doc_flags(parser, DOC)
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.generic < 1:
        parser.error("--seeds and --generic must be positive")
    text = report(args.seeds, args.generic)
    print(text)
    publish(PROG, argv, {None: fenced(text)}, args.doc, DOC)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
