r"""The paper's own CIFAR runs, re-analysed from the arrays its official code released (issue 55).

    schema     what each released file holds (names, dtypes, shapes) and its upstream SHA-256
    reader     the files read safely: size bound, restricted unpickler, schema, digest (arrays/: the vendored copy)
    figures    every printed figure the arrays support, recomputed with the project's own code
    plan       the analysis plan's path and registered SHA-256
    claims     the claims re-tested with the ledger's statistics, verdicts and controls, per run
    section    the markdown section of the ledger's report ("On the paper's own CIFAR data")

The analysis plan was committed before the arrays' values were computed: docs/replication/released_plan.md, whose
SHA-256 ``plan.PLAN_SHA256`` records. Command: ``python -m scale.released`` (``--official DIR`` reads a checkout).
"""
