"""The reproducible reports of ``mini``: one module per report, each ``python -m mini.reports.<name>``.

The theory modules of ``mini`` compute; these modules choose the instances, run them and format
the tables (and, for ``train``, write the JSON file). Nothing here is theory.

    python -m mini.reports.whitening    Theorem 3.1 and Proposition 3.3 tables      (docs/section3.md)
    python -m mini.reports.capacity     Theorem 3.2: eps of MLP vs linear heads     (docs/section3.md)
    python -m mini.reports.collapse     Theorem 4.1 audit                           (docs/collapse_audit.md)
    python -m mini.reports.dynamics     Section 4 grid: flow vs steps at collapse    (docs/collapse_dynamics.md)
    python -m mini.reports.train        toy guillotine run, E3-E4 on toy manifolds   (docs/section5.md)
"""
