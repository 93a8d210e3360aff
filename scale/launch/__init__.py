"""The grid's and the ledger's units as jobs through an existing engine (submitit): docs/launch.md.

    resources   ``Launch``: the launcher and what one job asks for (flags or a TOML recipe), the launch flags
    jobs        ``UnitJob`` (the runner called with one unit's invocation, requeued from its checkpoint), submit /
                wait / record / states, the rerun command rendered from the invocation
    cost        ``--dry-run``: GPU-hours per unit on a named device and the jobs it would submit

Every unit writes one immutable file named by its key; results and reports are views of those files, so no
lock is needed on a shared (network) filesystem and concurrent jobs never rewrite one another's results.
"""
