"""The paper's experiments as data, at one floor above the engine: what each trains (``TrainConfig`` settings,
the paper's and its digits recipes) and what each measures, read by the grid (``scale.paper``), the ledger
(``scale.replicate``) and the main job.

    catalog  E1-E5: the paper's settings, the assumptions, the grid's runs (``PlannedRun``), the deviations
"""
