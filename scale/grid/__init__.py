"""The paper's grid E1-E5 (``python -m scale.paper``): its plan and its runs as units, one folder per plan.

    plan     the runs, each with its scale.run arguments and the paper's value of every setting it checks;
             the paper's settings, the assumptions, the deviations of a resolved config
    state    a run directory's state (done, resume, new) and the manifest of another plan, refused
    units    each run's key, its one immutable unit file in the unit store (``scale.units``: checked against its
             name and the plan before use), the plan's folder, the views derived from the unit files
    records  the plan as the report reads it: the manifest and each run's unit file, every value typed
    report   the plan's report.md as text and its figures (``figures``) as PNG bytes
    sections each experiment's section of the report: its table and its verdict rows, each with its premise

The command line, the run of each unit (``scale.run`` in this process or as a job) and the checks that resolve a
config through ``scale.run`` are ``scale.paper``; ``python -m scale.report`` writes the report's files.
"""
