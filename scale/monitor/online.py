"""``OnlineKnn``: a run that is not learning says so while it runs (``python -m scale.run``).

At every epoch end, on fixed unaugmented images, in eval mode and without gradients (``TrainState.embed``, a
measurement, never a step: the weights, BatchNorm's statistics and the training's random stream are untouched):

    knn_z        the weighted kNN accuracy (%) of z: the first ``held_out`` test images voted on by their
                 ``KNN_K`` most cosine-similar of the first ``bank`` training images
                 (``scale.geometry.probes.knn_correct``, the end-of-run kNN probe's protocol on a subset)
    loss_chance  the method's loss at chance for the run's batch (``scale.runs.premise.chance_loss``; methods
                 without a chance level have none)

into the epoch's record: ``metrics.jsonl``, the epoch line and the report's curves read them there. The first
epoch's record also holds ``knn_z_initial``, the same vote on the backbone before any step (measured at
``on_fit_start`` of a fresh run), the level a learning network rises above.
"""

from __future__ import annotations

from typing import Any

import torch

from scale.engine.dataset import Dataset
from scale.engine.hooks import Hook
from scale.engine.state import TrainState
from scale.geometry.measure import standardize
from scale.geometry.probes import KNN_K, features, knn_correct
from scale.runs.premise import chance_loss

# sized by cost: at 1000 and 500 the vote took 18 % of a digits epoch on a CPU (bench/bench_monitor.py); at these, the
# figure in BENCHMARKS.md
BANK = 500  # training images whose z vote (unaugmented)
HELD_OUT = 250  # test images voted on


class OnlineKnn(Hook):
    """See the module docstring. Only for labelled data held in memory (``OnlineKnn.applies``)."""

    def __init__(self, data: Dataset, bank: int = BANK, held_out: int = HELD_OUT) -> None:
        self.bank_x, self.bank_y = data.train_x[:bank], data.train_y[:bank]
        self.test_x, self.test_y = data.test_x[:held_out], data.test_y[:held_out]
        self.classes, self.mean, self.std = data.classes, data.mean, data.std
        self.initial: float | None = None

    @staticmethod
    def applies(data: Dataset) -> bool:
        return (bool(data.labelled) and isinstance(data.train_x, torch.Tensor) and len(data.test_x) > 0
                and len(torch.unique(data.train_y[:BANK])) > 1)

    def accuracy(self, state: TrainState) -> float:
        normalize = standardize(self.mean, self.std, state.device)
        z_of = lambda x: state.embed(x)[0]  # noqa: E731
        to01 = lambda x: normalize(x.to(state.device).float() / 255.0)  # noqa: E731  uint8 images
        bank = features(z_of, self.bank_x, to01)
        test = features(z_of, self.test_x, to01)
        right = knn_correct(bank, self.bank_y.to(bank.device), test, self.test_y.to(test.device), self.classes,
                            k=KNN_K)
        return 100 * float(right.double().mean())

    def on_fit_start(self, state: TrainState) -> None:
        if state.global_step == 0 and not state.history:
            self.initial = self.accuracy(state)

    def on_epoch_end(self, state: TrainState) -> None:
        state.metrics["knn_z"] = self.accuracy(state)  # no timing in the record: runs compare their records exactly
        chance = chance_loss(state.config)
        if chance is not None:
            state.metrics["loss_chance"] = chance
        if self.initial is not None and len(state.history) == 1:
            state.metrics["knn_z_initial"] = self.initial

    def state_dict(self) -> dict[str, Any]:
        return {"initial": self.initial}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.initial = state.get("initial")
