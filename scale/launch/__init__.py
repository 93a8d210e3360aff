"""The grid's and the ledger's units as jobs through an existing engine (submitit): docs/launch.md.

    resources   what one job asks for (flags or a TOML recipe), the launch flags, a job's own command line
    jobs        ``CommandJob`` (a unit's command, requeued from its checkpoint), submit / wait / record / states
    cost        ``--dry-run``: GPU-hours per unit on a named device and the jobs it would submit

Every unit writes one immutable file named by its key; results and reports are views of those files, so no
lock is needed on a shared (network) filesystem and concurrent jobs never rewrite one another's results.
"""
