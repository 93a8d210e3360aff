r"""The replication ledger: the paper's experimental claims as registered rules over seeded runs.

One job per module, in the order the data flows:

    plan        the units (one run of scale.paper's plan at one seed each), their keys, their estimated cost
    probe       the measurements taken during training (E1's collapse statistics, E2's curvature, Section 3)
    unit_record one unit in, its record out (E1/E2 training, E3/E4 via scale.e4_study, E5)
    runner      register the plan, then run its units not yet stored (--experiments, --budget-s, --shard, --units)
    store       its files: units in the unit store (scale.unit_store), registrations and amendments, each written
                once and checked against its schema and its name before use
    readers     per-seed statistics read from unit records
    claims/     the claims as data, one module per experiment; their hash is registered before the first unit
    stats       intervals inside their statistic's range (t, Fisher z, Wilson), p-values, Holm, seeds needed
    verdicts    the rules and the verdict categories
    evaluate    a claim's row: values, interval, verdict, Holm, leave-one-seed-out, seeds needed, alternatives
    views       the views (results.json, report.md) of one plan, derived from the store
    figures     the report's figures

``python -m scale.replicate`` is the command line over it.
"""
