"""The SimSiam part of the recipe search (``bench/recipe_search.py``; ``docs/recipes.md``, "The SimSiam search"):
the settings a SimSiam user varies, one at a time from the paper's, the predictor's fixed learning rate, and the
probe of the raw pixels that every row of it carries beside the backbone at initialisation.

    the paper's setting   SGD lr 0.05, momentum 0.9, no weight decay, a constant rate, the paper-style head
                          without BatchNorm (no biases), batch 128, each experiment's digits recipe (augmentation
                          and epochs, ``DIGITS_RECIPES``) and start (E1 collapsed, E2 normal) as the ledger runs it
    one dimension each    ``DIMENSIONS``: its name and what it changes (and whether the predictor's rate is fixed)

SimSiam's official recipe fixes the predictor's learning rate: the predictor keeps the base rate while the cosine
schedule lowers the rest. Under the paper's constant rate that is the paper's setting itself, so it is searched
with the cosine schedule only. It is a hook of this search (``FixedPredictorLR``), not a ``TrainConfig`` field: a
new field would enter every resolved config and so every ledger unit's key (``scale.ledger.plan``), invalidating
the stored units for an option no experiment of the paper uses.
"""

from __future__ import annotations

from typing import Any

from scale.engine.hooks import Hook
from scale.engine.recipes import DIGITS_RECIPES

# The paper's SimSiam setting of E1 and E2 (scale.experiments.catalog): SGD 0.05, momentum 0.9, no weight decay,
# constant rate, the official head (no biases) without BatchNorm
PAPER = dict(head_style="paper", head_bias=False, optimizer="sgd", lr=0.05, momentum=0.9, weight_decay=0.0,
             schedule="constant", head_bn=False)
# Each experiment's head(s) and start as the ledger trains them, on its digits recipe. E2's start is the default
# (normal) and stays unnamed, so that its paper's-setting row is the key the search before this one used.
STARTS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "E1": (("gelu2",), dict(init="collapsed", **DIGITS_RECIPES["E1"])),
    "E2": (("swish2",), dict(DIGITS_RECIPES["E2"])),
}
# BatchNorm after each hidden Linear and none on the output (SimSiam's predictor has it so; its projector's hidden
# layers too): the head's map keeps the paper's bias-free Linear layers and activation. The predictor, built
# from the same flags, gets the same hidden BatchNorm.
HIDDEN_BN = dict(head_style="grammar", head_bias=False, head_bn=True, head_out_bn=False)
LONGER = {"E1": 50, "E2": 100}  # the paper's own epochs of E1 and E2 (scale.experiments.catalog.PAPER_SETTINGS)
# SimSiam's official recipe at digits' batch 128: lr 0.05 x 128 / 256, weight decay 1e-4, cosine, the predictor's
# rate fixed, BatchNorm in the hidden layers
USER = dict(HIDDEN_BN, lr=0.05 * 128 / 256, weight_decay=1e-4, schedule="cosine")

# (dimension, what it changes from the paper's setting, the predictor's rate fixed), in the order the search runs
# them: the first ``FIRST`` (the paper's setting, and those under which SimSiam is known to learn: BatchNorm in the
# hidden layers, its own recipe) for E1 and then E2, then the rest for E1 (the cheaper) and then E2. ``epochs`` is
# per experiment.
DIMENSIONS: tuple[tuple[str, dict[str, Any], bool], ...] = (
    ("the paper's setting", {}, False),
    ("BatchNorm in the hidden layers", HIDDEN_BN, False),
    ("a SimSiam user's recipe", USER, True),
    ("weight decay", dict(weight_decay=1e-4), False),
    ("the predictor's rate fixed (cosine)", dict(schedule="cosine"), True),
    ("learning rate", dict(lr=0.01), False),
    ("batch size", dict(batch_size=256), False),
    ("schedule", dict(schedule="cosine"), False),
    ("epochs", dict(epochs=LONGER), False),
)
FIRST = 3
# Left out of the list, not run (the table names each, with LEFT_OUT_WHY): none since E2's cosine schedule and
# longer training ran, after the night's first pass (2026-12-07)
LEFT_OUT: tuple[tuple[str, str], ...] = ()
# when the rows were trained
RUN_AT = "2026-12-06 23:56 to 2026-12-07 01:33 UTC (E2's cosine and longer rows: 02:04 to 02:31 UTC)"


def changes_for(experiment: str, changes: dict[str, Any]) -> dict[str, Any]:
    """``changes`` with per-experiment values (a dict keyed by experiment) resolved for ``experiment``."""
    return {k: v[experiment] if isinstance(v, dict) else v for k, v in changes.items()}


class FixedPredictorLR(Hook):
    """SimSiam's fixed predictor rate: at the start, the predictor's parameters move to a parameter group of their
    own, and an optimiser step pre-hook sets that group's rate back to the configured ``lr`` just before every
    step (the trainer sets every group to the schedule's rate at the top of each step). ``lrs`` records, per step,
    the (rest, predictor) rates the step used."""

    def __init__(self) -> None:
        self.lrs: list[tuple[float, float]] = []

    def on_fit_start(self, state) -> None:
        opt, predictor = state.optimizer, state.model.predictor
        if predictor is None or len(opt.param_groups) != 1 or opt.state:
            raise ValueError("a fixed predictor rate needs a model with a predictor and a fresh one-group optimiser")
        mine = {id(p) for p in predictor.parameters()}
        group = opt.param_groups[0]
        pred = [p for p in group["params"] if id(p) in mine]
        group["params"] = [p for p in group["params"] if id(p) not in mine]
        opt.add_param_group({"params": pred})
        lr = float(state.config.lr)

        def fix(optimizer, args, kwargs) -> None:
            optimizer.param_groups[1]["lr"] = lr
            self.lrs.append((float(optimizer.param_groups[0]["lr"]), lr))

        opt.register_step_pre_hook(fix)
