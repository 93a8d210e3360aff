r"""Whether the network learned: the one premise of every claim about a trained network.

Every report (``python -m scale.run``, ``scale.train``, ``python -m scale.analyze`` of a run), the grid's rows
(``scale.paper_report``) and the ledger's rows about a trained network read this premise before any verdict. It has
three values: "learned", "did not learn" (``DID_NOT_LEARN``) and "not decided" (``NOT_DECIDED``), and three parts, each
measured against a baseline of the same run:

    objective    what the SSL loss says
                 - every method: the last epoch's mean loss must fall below its own first step (the loss before
                   any update) by ``MOVED_TOLERANCE`` (relative). Digits as a folder without labels, ``--augment
                   none --lr 1e-12``: the two views are one image, the pretext task is solved before any update
                   (NT-Xent 0.057 at the first step, chance 6.931), and the loss ends at 0.058: below chance by
                   6.9 nats, not below its first step.
                 - contrastive methods (a ``chance_loss`` in ``scale.engine.methods``: NT-Xent over n = 2m rows
                   gives log(2m - 1) when every similarity is equal, one-direction InfoNCE log m): the loss must
                   also end at least ``LEARNED_MARGIN`` = log 2 nats below that chance level. The loss is -mean log
                   p(positive), so exp(-loss) is the geometric mean of the probability the model gives each view's
                   partner; log 2 below chance means that probability is at least twice chance's. The
                   epoch-to-epoch noise of that mean on digits is ~0.01-0.05 nats, far below log 2
                   (``docs/recipes.md``). What the margin proves: the views agree on more than nothing. What it
                   does not: that they agree on anything class-like. A code that splits the batch into two groups
                   both views agree on reaches log(m - 1 + m exp(-2 / T)) = 4.844 at m = 128, T = 0.1, under the
                   bar log(255) - log 2 = 4.848. A margin tied to a class-level code (C classes of equal size,
                   one point per class: log(2m / C - 1) = 3.20 for NT-Xent, log(m / C) = 2.55 for InfoNCE, at
                   m = 128 and C = 10) would take the class count from labels the objective does not have, and
                   it fails networks whose class probes show what they learned: the E3/E4 recipe ends at
                   2.88 [2.75, 3.01] (InfoNCE) with z's kNN probe +4.2 to +6.9 points over initialisation.
                   The class-level question is the downstream part's.
                 - methods without a chance level (SimSiam, BYOL, VICReg, Barlow Twins: the minimum of SimSiam's
                   and BYOL's loss is a collapse, VICReg's and Barlow's level depends on the data): neither z nor h
                   may collapse: the spread, the mean per-dimension std of the L2-normalised rows times sqrt(dim)
                   (1 for rows spread evenly over the sphere, sqrt(r / k) for rows in r of k dimensions, 0 for one
                   point), must stay above ``SPREAD_FLOOR``. The floor is a detector of collapse, not a proof of
                   learning: SimSiam without BatchNorm on digits ends at loss -0.990 with h spread 0.111, above
                   the floor and 0.010 from the trivial minimum -1, where only the class probe caught it (the E1
                   recipes' linear probes of z end 18-24 points below initialisation, ``docs/recipes.md``). A
                   floor on the loss's distance from -1 cannot be set either: every SimSiam recipe tried on
                   digits ends at -1.00 and none learned, so no learned run places such a floor. The objective
                   alone therefore never says "learned": the downstream part is required.
    downstream   what the backbone gained: z probed on the class labels against the same backbone at
                 initialisation on the same images (``scale.geometry.initial.initial_backbone``), paired
                 over the test images, by the headline linear probe and by the kNN probe beside it
                 (``scale.geometry.probes``): at least one gain's 95 % interval must lie above 0 and neither
                 below 0. The kNN probe is there because a linear probe of a random ResNet on digits is already
                 near 94 %, near its ceiling. Where the data has no labels this part is not measured, and the
                 premise is "not decided" unless the objective already failed.
    movement     the backbone's weights against their initialisation: ||theta - theta_0|| / ||theta_0|| over its
                 parameters (``scale.geometry.initial.weight_shift``) at least ``WEIGHTS_MOVED_FLOOR``. Digits at
                 ``--augment none --lr 1e-12`` (1 epoch): the weights move 1.9e-12 of their norm, the loss ends
                 1.2 % below its first step by the batches' noise alone (0.0254 against 0.0257), and z's linear
                 probe drops 12 points below initialisation: BatchNorm's running statistics, which follow the
                 training batches without any gradient step. Such a change is reported as theirs, not as
                 training's. The floor sits three decades above that run and three below the smallest
                 real training measured: two SGD steps at lr 0.005 from E1's collapsed start (the quick ledger's
                 E1-linear unit) move 1.2e-6; one epoch of the main job moves 0.04 at its recipe's learning
                 rate, 0.004 at lr 1e-4, 4e-5 at lr 1e-6 (seed 0): the shift grows with the rate and the steps.

"Learned" means this and no more: the network learned its pretext task, measured against the same architecture
at its random initialisation. It does not mean that z is a better representation than the input: the reports put
the same probes of the raw input (flattened pixels, the same images) beside the initialisation baseline, and on
digits the raw 16x16 pixels reach 97.56 % linear, 98.22 % kNN, which z of the main job does not clearly beat.

A run that fails a part "did not learn": the report says so first, and every verdict after it is labelled as
describing a network that did not learn. A run whose measured parts pass but whose downstream part could not be
measured is "not decided": its verdicts are not called verdicts of a network that learned. The spread of a method
with a chance level is reported but is not part of the premise (a collapsed head can be the object of study: E1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from scale.engine import methods
from scale.runs.summary import ClassProbe, Estimate, TrainingCheck

LEARNED_MARGIN = math.log(2.0)  # nats below chance: the partner's geometric-mean probability at least 2x chance's
MOVED_TOLERANCE = 0.01  # (initial - final) / |initial| below this: the loss did not fall below its first step
SPREAD_FLOOR = 0.1  # spread (1 for rows spread evenly over the sphere) below this: collapsed
WEIGHTS_MOVED_FLOOR = 1e-9  # ||theta - theta_0|| / ||theta_0|| below this: the weights did not move (module docstring)
DID_NOT_LEARN = "did not learn"  # the premise's failure, as every report and row words it
NOT_DECIDED = "not decided"  # the premise where a part it needs was not measured (no labels: no class probe)


def spread(std: float | None, dim: int | None) -> float | None:
    """The spread of a representation from its mean per-dimension std of normalised rows (``collapse_stats``):
    ``std * sqrt(dim)``, 1 for rows spread evenly over the unit sphere in ``dim`` dimensions, 0 for one point."""
    if std is None or dim is None or not math.isfinite(std):
        return None
    return float(std) * math.sqrt(dim)


def chance_loss(cfg: Any) -> float | None:
    """The method's loss of a representation that tells no view from another, at the run's global batch (``None``
    where the method has no such level)."""
    fn = methods.get(cfg.method).chance_loss
    return None if fn is None else float(fn(cfg.batch_size))



def objective_failures(method: str, final: float | None, chance: float | None, initial: float | None,
                       h_spread: float | None, z_spread: float | None) -> tuple[list[str], bool]:
    """Why the objective says the network did not learn (module docstring), and whether the objective was
    measured at all (``False``: no loss was recorded)."""
    if final is None or not math.isfinite(final):
        return [], False
    out = []
    if initial is not None and initial - final < MOVED_TOLERANCE * abs(initial):
        out.append(f"the loss did not fall below its first step: {final:.4f} at the end against {initial:.4f} "
                   f"before any update ({100 * (final - initial) / abs(initial):+.1f} %; a fall of "
                   f"{100 * MOVED_TOLERANCE:g} % or more is needed)")
    if chance is not None:
        if final >= chance:
            out.append(f"the loss ended above chance: {final:.4f} against {chance:.4f} for a representation that "
                       f"tells no view from another ({method})")
        elif final > chance - LEARNED_MARGIN:
            out.append(f"the loss ended {chance - final:.3f} nats below chance ({final:.4f} against {chance:.4f}), "
                       f"less than the premise's log 2 = {LEARNED_MARGIN:.3f}: not clearly below chance")
        return out, True
    return out + collapse_findings(h_spread, z_spread), True


def movement_failures(weight_shift: float | None) -> list[str]:
    """The backbone's weights that did not move (module docstring): ``weight_shift`` is ||theta - theta_0|| /
    ||theta_0|| (``None``: not known, nothing said)."""
    if weight_shift is None or not math.isfinite(weight_shift) or weight_shift >= WEIGHTS_MOVED_FLOOR:
        return []
    return [f"the backbone's weights did not move: ||theta - theta_0|| / ||theta_0|| = {weight_shift:.2g} (below "
            f"{WEIGHTS_MOVED_FLOOR:g}); whatever the loss and the probes did came from BatchNorm's running "
            "statistics and the batches, not from a weight update"]


def collapse_findings(h_spread: float | None, z_spread: float | None) -> list[str]:
    """The collapse detectors: a representation whose spread is below ``SPREAD_FLOOR``."""
    return [f"the {name} collapsed: spread {value:.3f} (1 for rows spread evenly over the sphere, below "
            f"{SPREAD_FLOOR:g} fewer than 1 % of its dimensions in use)"
            for name, value in (("head h", h_spread), ("backbone z", z_spread))
            if value is not None and value < SPREAD_FLOOR]


def _gain_text(name: str, z: float, z0: float, gain: Estimate) -> str:
    return (f"{name} {z:.2f} % against {z0:.2f} % at initialisation (gain {gain.value:+.2f} points "
            f"[{gain.low:+.1f}, {gain.high:+.1f}])")


def downstream_failures(gains: Sequence[tuple[str, float | None, float | None, Estimate | None]]
                        ) -> tuple[list[str], bool]:
    """Why the backbone gained nothing measurable over its initialisation (module docstring), from ``(probe
    name, trained z accuracy, initial z accuracy, paired gain)`` per probe; and whether any gain was measured."""
    measured = _measured(gains)
    if not measured:
        return [], False
    lowered = [g for g in measured if g[3].high < 0]
    if lowered:
        return ["training lowered the class probe of z: " + "; ".join(_gain_text(*g) for g in lowered)], True
    if any(g[3].low > 0 for g in measured):
        return [], True
    return ["training added nothing measurable to the class probes of z: "
            + "; ".join(_gain_text(*g) for g in measured)], True


def _measured(gains: Sequence[tuple[str, float | None, float | None, Estimate | None]]) -> list:
    return [(n, z, z0, g) for n, z, z0, g in gains
            if g is not None and z is not None and z0 is not None and not math.isnan(g.low)]


def unmoved_probe_note(gains: Sequence[tuple[str, float | None, float | None, Estimate | None]]) -> list[str]:
    """What z's class probes did while the weights stayed where they began: not training's effect (module
    docstring), said as BatchNorm's running statistics'."""
    measured = _measured(gains)
    if not measured:
        return []
    return ["with weights that did not move, z's class probes changed by BatchNorm's running statistics alone: "
            + "; ".join(f"{n} {z:.2f} % against {z0:.2f} % at initialisation ({g.value:+.2f} points "
                        f"[{g.low:+.1f}, {g.high:+.1f}])" for n, z, z0, g in measured)]


def probe_gains(probe: ClassProbe | None) -> list[tuple[str, float | None, float | None, Estimate | None]]:
    """The class probes' z gains over the backbone at initialisation: the linear headline, and kNN where measured."""
    if probe is None:
        return []
    out = [("linear probe", probe.accuracy.z, probe.initial_z, probe.initial_gain)]
    if probe.knn is not None:
        out.append(("kNN probe", probe.knn.accuracy.z, probe.knn.initial_z, probe.knn.initial_gain))
    return out


def premise(method: str, final: float | None, chance: float | None, initial: float | None, h_spread: float | None,
            z_spread: float | None, probe: ClassProbe | None, weight_shift: float | None = None
            ) -> tuple[bool | None, list[str], list[str], str]:
    """The premise "the network learned" (module docstring): ``(learned, why not, reported beside, what it rests
    on)``; beside it, a collapse of a method with a chance level (not part of the premise) and probes that moved
    with weights that did not. ``learned`` is ``None`` ("not decided") where no part failed and the downstream
    part was not measured (no class probe): the loss alone never says "learned"."""
    obj, obj_measured = objective_failures(method, final, chance, initial, h_spread, z_spread)
    still = movement_failures(weight_shift)
    gains = probe_gains(probe)
    down, down_measured = downstream_failures(gains)
    beside = collapse_findings(h_spread, z_spread) if chance is not None else []
    if still:  # the probes' change is BatchNorm's, not training's: said beside, not as training's finding
        down, beside = [], beside + unmoved_probe_note(gains)
    basis = "chance and its first step" if chance is not None else "its first step and the collapse detectors"
    parts = [p for p, m in ((f"the loss against {basis}", obj_measured),
                            ("the backbone's weights against their initialisation", weight_shift is not None),
                            ("z's class probes against the backbone at initialisation", down_measured)) if m]
    if not parts:
        return None, [], beside, "nothing measured"
    failures = obj + still + down
    rests = " and ".join(parts) + ("" if down_measured else " (no class probe: the downstream part is not measured)")
    if failures:
        return False, failures, beside, rests
    return (True if down_measured else None), [], beside, rests


def learned_word(learned: bool | None) -> str:
    """The premise in a word or two: "learned", "did not learn" or "not decided"."""
    return NOT_DECIDED if learned is None else "learned" if learned else DID_NOT_LEARN


def check_training(cfg: Any, history: list[dict[str, Any]], dims: tuple[int, int] | None,
                   probe: ClassProbe | None, initialisation: str = "", weight_shift: float | None = None
                   ) -> TrainingCheck:
    """The run against its baselines (module docstring): ``history`` the per-epoch records (``metrics.jsonl``;
    the first holds ``initial_loss``), ``dims`` ``(d, k)`` of z and h, ``probe`` the class probes with their
    initial-backbone and raw-input baselines, ``weight_shift`` the backbone's relative distance from its
    initialisation (``scale.geometry.initial.weight_shift``; ``None``: not known)."""
    last = history[-1] if history else {}
    final = last.get("loss")
    initial = history[0].get("initial_loss") if history else None
    chance = chance_loss(cfg)
    h_spread = spread(last.get("h_std"), dims[1] if dims else None)
    z_spread = spread(last.get("z_std"), dims[0] if dims else None)
    learned, why, beside, rests = premise(cfg.method, final, chance, initial, h_spread, z_spread, probe,
                                          weight_shift)
    return TrainingCheck(
        learned=learned, findings=why, notes=beside, premise=rests, chance_loss=chance, initial_loss=initial,
        final_loss=final, h_spread=h_spread, z_spread=z_spread,
        initial_probe=probe.initial_z if probe is not None else None,
        probe_gain=probe.initial_gain if probe is not None else None, initialisation=initialisation,
        raw_input_probe=probe.raw_input if probe is not None else None,
        raw_input_gain=probe.raw_input_gain if probe is not None else None, weight_shift=weight_shift)


def recheck(t: TrainingCheck, method: str, probe: ClassProbe | None) -> TrainingCheck:
    """A stored training check read again under today's premise (a summary written before it, a grid unit):
    the same numbers, today's definition."""
    learned, why, beside, rests = premise(method, t.final_loss, t.chance_loss, t.initial_loss, t.h_spread,
                                          t.z_spread, probe, t.weight_shift)
    return replace(t, learned=learned, findings=why, notes=beside, premise=rests,
                   raw_input_probe=t.raw_input_probe if probe is None or probe.raw_input is None else probe.raw_input,
                   raw_input_gain=t.raw_input_gain if probe is None or probe.raw_input is None
                   else probe.raw_input_gain)
