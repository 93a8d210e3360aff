"""The paper's grid E1-E5 (``python -m scale.paper``): its plan and its runs as units, one folder per plan.

    invocation the command's flags as one frozen value (``GridInvocation``), which the runner and the launcher take
    state      a run directory's state (done, resume, new) and the manifest of another plan, refused
    unit_files each run's key, its one immutable unit file in the unit store (``scale.unit_store``: checked against its
               name and the plan before use), the plan's folder, the views derived from the unit files
    records    the plan as the report reads it: the manifest and each run's unit file, every value typed
    page       the plan's report.md as text and its figures (``figures``) as PNG bytes
    sections   each experiment's section of the report: its table and its verdict rows, each with its premise

The command line, the run of each unit (``scale.run`` in this process or as a job) and the checks that resolve a
config through ``scale.run`` are ``scale.paper``; ``python -m scale.paper_report`` writes the report's files.
The runs themselves are data: ``scale.experiments.catalog``.
"""
