"""The premise "the network learned" (``scale.runs.premise``) at both edges of each part: a loss just above and just
below chance, just inside and just outside the log 2 margin; a method without a chance level read through its
collapse detectors; the backbone's gain over its initialisation by either probe, with a lowered probe overriding
a raised one; and the kNN probe itself on features whose neighbourhoods are known."""

from __future__ import annotations

import math

import pytest
import torch

from mini.paper_numbers import ProbePair
from scale.geometry.probes import knn_correct
from scale.runs.premise import (
    LEARNED_MARGIN,
    NOT_DECIDED,
    SPREAD_FLOOR,
    WEIGHTS_MOVED_FLOOR,
    learned_word,
    premise,
    recheck,
)
from scale.runs.summary import ClassProbe, Estimate, KnnProbe, TrainingCheck

CHANCE = math.log(255)  # NT-Xent at batch 128: the main job's chance level
EDGE = 1e-6  # how far from each edge the cases sit (nats)
UP, ACROSS, DOWN = Estimate(4.0, 1.5, 6.5, 450), Estimate(1.0, -1.5, 3.5, 450), Estimate(-5.0, -8.0, -2.0, 450)


def _probe(linear: Estimate | None, knn: Estimate | None = None) -> ClassProbe:
    k = None if knn is None else KnnProbe("knn", ProbePair(95.0, 90.0), None, 95.0 - knn.value, knn)
    return ClassProbe("linear", 1347, 450, ProbePair(97.0, 90.0), None,
                      None if linear is None else 97.0 - linear.value, linear, knn=k)


def _contrastive(final: float, probe: ClassProbe | None = None) -> tuple[bool | None, list[str], list[str], str]:
    return premise("simclr", final, CHANCE, CHANCE + 0.5, 0.9, 0.4, probe if probe is not None else _probe(UP))


@pytest.mark.parametrize("final, learned, said", [
    (CHANCE + EDGE, False, "above chance"),  # just above chance: did not learn
    (CHANCE - EDGE, False, "not clearly below chance"),  # just below chance: inside the margin
    (CHANCE - LEARNED_MARGIN + EDGE, False, "not clearly below chance"),  # the margin's inner edge
    (CHANCE - LEARNED_MARGIN - EDGE, True, None),  # just past it: learned
    (2.06, True, None),  # the main job's recipe, seed 0 (docs/recipes.md)
    (6.15, False, "above chance"),  # the old main job (augment e3, 8 epochs)
])
def test_the_loss_must_end_log_2_below_chance(final, learned, said):
    got, why, _, rests = _contrastive(final)
    assert got is learned, why
    assert (said is None and not why) or (said is not None and any(said in w for w in why))
    assert "the loss against chance" in rests


@pytest.mark.parametrize("linear, knn, learned, said", [
    (UP, None, True, None),
    (ACROSS, None, False, "nothing measurable"),
    (DOWN, None, False, "lowered"),
    (ACROSS, UP, True, None),  # the kNN probe shows what the saturated linear probe cannot
    (UP, ACROSS, True, None),
    (DOWN, UP, False, "lowered"),  # a lowered probe is not outweighed by a raised one
    (ACROSS, ACROSS, False, "nothing measurable"),
    (Estimate(0.0, 0.0, 2.0, 450), None, False, "nothing measurable"),  # an interval touching 0 is not above it
])
def test_the_backbone_must_gain_over_its_initialisation(linear, knn, learned, said):
    got, why, _, rests = _contrastive(CHANCE - 2.0, _probe(linear, knn))
    assert got is learned, why
    assert (said is None and not why) or (said is not None and said in why[0])
    assert "z's class probes against the backbone at initialisation" in rests


def test_without_labels_the_premise_is_not_decided_never_learned():
    for method, chance, final, first in (("simclr", CHANCE, CHANCE - 2.0, CHANCE), ("simsiam", None, -0.9, -0.1)):
        got, why, _, rests = premise(method, final, chance, first, 0.9, 0.4, None, weight_shift=0.05)
        assert got is None and not why and "downstream part is not measured" in rests
        assert learned_word(got) == NOT_DECIDED
    # a failed objective is a failure with or without labels
    assert premise("simclr", CHANCE - 0.1, CHANCE, CHANCE, 0.9, 0.4, None)[0] is False
    assert premise("simclr", None, CHANCE, None, None, None, None)[0] is None  # nothing measured: no verdict


@pytest.mark.parametrize("first, learned", [
    (2.06 / (1 - 0.01) + EDGE, True),  # fell just more than 1 % below its first step
    (2.06 / (1 - 0.01) - EDGE, False),  # just less: did not fall
    (0.0571, False),  # digits, --augment none --lr 1e-12: 0.0571 at the first step, 0.0582 at the end
])
def test_a_contrastive_loss_must_also_fall_below_its_first_step(first, learned):
    final = 2.06 if first > 1 else 0.0582
    got, why, _, rests = premise("simclr", final, CHANCE, first, 0.9, 0.4, _probe(UP))
    assert got is learned, why
    assert learned or "did not fall below its first step" in why[0]
    assert "chance and its first step" in rests


@pytest.mark.parametrize("shift, learned", [(0.0, False), (WEIGHTS_MOVED_FLOOR * 0.99, False),
                                            (WEIGHTS_MOVED_FLOOR * 1.01, True), (None, True)])
def test_weights_that_did_not_move_did_not_learn_and_the_probes_change_is_batchnorms(shift, learned):
    got, why, beside, rests = premise("simclr", CHANCE - 2.0, CHANCE, CHANCE, 0.9, 0.4, _probe(DOWN, DOWN), shift)
    if learned:  # the weights moved (or are not known): the lowered probe is training's finding
        assert got is False and "training lowered" in why[0] and not beside
        assert ("weights against their initialisation" in rests) is (shift is not None)
        return
    assert got is False and "weights did not move" in why[0] and len(why) == 1
    assert not any("training lowered" in w for w in why)
    assert "BatchNorm's running statistics alone" in beside[0] and "-5.00 points" in beside[0]


@pytest.mark.parametrize("final, h_spread, z_spread, learned, said", [
    (-0.90, 0.5, 0.4, True, None),
    (-0.90, SPREAD_FLOOR - EDGE, 0.4, False, "head h collapsed"),  # just below the floor: collapsed
    (-0.90, SPREAD_FLOOR + EDGE, 0.4, True, None),
    (-0.90, 0.5, SPREAD_FLOOR - EDGE, False, "backbone z collapsed"),
    (-0.10 * 0.995, 0.5, 0.4, False, "did not fall below its first step"),  # less than 1 % below it
])
def test_a_method_without_a_chance_level_rests_on_its_collapse_detectors(final, h_spread, z_spread, learned, said):
    got, why, beside, rests = premise("simsiam", final, None, -0.10, h_spread, z_spread, _probe(UP))
    assert got is learned, why
    assert (said is None and not why) or (said is not None and said in why[0])
    assert not beside and "collapse detectors" in rests


def test_a_collapse_beside_a_chance_level_is_reported_not_counted():
    got, why, beside, _ = premise("simclr", CHANCE - 2.0, CHANCE, CHANCE, 0.01, 0.4, _probe(UP))
    assert got is True and not why and "head h collapsed" in beside[0]


def test_a_stored_check_is_read_again_under_todays_premise():
    old = TrainingCheck.from_dict({"trained": True, "findings": [], "chance_loss": CHANCE, "final_loss": 5.16,
                                   "initial_loss": 5.84, "h_spread": 0.9, "z_spread": 0.3})
    assert old.learned is None  # "trained" meant less: not carried over
    again = recheck(old, "simclr", _probe(ACROSS))
    assert again.learned is False and "above chance" not in again.findings[0] and "nothing measurable" in \
        again.findings[-1]


def test_knn_votes_by_its_nearest_neighbours_weighted_by_similarity():
    # two tight clusters on the circle: a test point near each is labelled by that cluster
    angles = torch.tensor([0.0, 0.05, -0.05, 3.0, 3.05, 2.95])
    train = torch.stack([angles.cos(), angles.sin()], 1)
    labels = torch.tensor([0, 0, 0, 1, 1, 1])
    test = torch.tensor([[1.0, 0.02], [-1.0, 0.1]]) * 7.0  # scale is irrelevant: cosine similarity
    assert knn_correct(train, labels, test, torch.tensor([0, 1]), 2, k=3).tolist() == [True, True]
    assert knn_correct(train, labels, test, torch.tensor([1, 0]), 2, k=3).tolist() == [False, False]
    # weights decide a 2-against-1 vote: one very close neighbour outweighs two far ones at a low temperature
    train2 = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    near = torch.tensor([[1.0, 0.01]])
    assert knn_correct(train2, torch.tensor([0, 1, 1]), near, torch.tensor([0]), 2, k=3, temperature=0.07).item()
    assert not knn_correct(train2, torch.tensor([0, 1, 1]), near, torch.tensor([0]), 2, k=3, temperature=1e3).item()
