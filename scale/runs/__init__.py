"""A run on disk: its directory, configuration, exit codes, summary and report, and reading it back.

    rundir        a safe name, one writer at a time, no mixing of two runs
    config_file   ``--config FILE.toml`` recipes
    validate      one validation of a whole configuration, at start, on resume and when a run is read back
    budget        the parameters and memory a run will need, counted before anything is allocated
    faults        the exit codes, and the one place that turns a failure into one line and a code
    summary       the typed summary of one run (summary.json)
    run_report    report.md and curves.png of one run, built from its summary
    load          a finished run back into Python (``load_run``), its backbone alone (``export_backbone``)
"""
