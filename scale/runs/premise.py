r"""Whether the network learned: the one premise of every claim about a trained network.

Every report (``python -m scale.run``, ``scale.train``, ``python -m scale.analyze`` of a run), the grid's rows
(``scale.report``) and the ledger's rows about a trained network read this premise before any verdict. It has
two parts, each measured against a baseline of the same run:

    objective    what the SSL loss says
                 - contrastive methods (a ``chance_loss`` in ``scale.engine.methods``: NT-Xent over n = 2m rows
                   gives log(2m - 1) when every similarity is equal, one-direction InfoNCE log m): the last
                   epoch's mean loss must end at least ``LEARNED_MARGIN`` nats below that chance level. The loss
                   is -mean log p(positive), so exp(-loss) is the geometric mean of the probability the model
                   gives each view's partner; ending log 2 below chance means that probability is at least twice
                   chance's. The epoch-to-epoch noise of that mean on digits is ~0.01-0.05 nats, far below log 2
                   (``docs/recipes.md``): a loss inside the margin is a loss at chance, not one clearly below it,
                   and a loss above chance is a network that did not learn.
                 - methods without a chance level (SimSiam, BYOL, VICReg, Barlow Twins: the minimum of SimSiam's
                   and BYOL's loss is a collapse, VICReg's and Barlow's level depends on the data): the loss must
                   move below its first step by ``MOVED_TOLERANCE`` (relative), and neither z nor h may collapse:
                   the spread, the mean per-dimension std of the L2-normalised rows times sqrt(dim) (1 for rows
                   spread evenly over the sphere, sqrt(r / k) for rows in r of k dimensions, 0 for one point),
                   must stay above ``SPREAD_FLOOR``.
    downstream   what the backbone gained: z probed on the class labels against the same backbone at
                 initialisation on the same images (``scale.geometry.initial.initial_backbone``), paired
                 over the test images, by the headline linear probe and by the kNN probe beside it
                 (``scale.geometry.probes``): at least one gain's 95 % interval must lie above 0 and neither
                 below 0. The kNN probe is there because a linear probe of a random ResNet on digits is already
                 near 94 %, near its ceiling. Where the data has no labels, the premise rests on the objective
                 alone and says so.

A run that fails either part "did not learn": the report says so first, and every verdict after it is labelled
as describing a network that did not learn. The spread of a method with a chance level is reported but is not part
of the premise (a collapsed head can be the object of study: E1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from scale.engine import methods
from scale.runs.summary import ClassProbe, Estimate, TrainingCheck

LEARNED_MARGIN = math.log(2.0)  # nats below chance: the partner's geometric-mean probability at least 2x chance's
MOVED_TOLERANCE = 0.01  # (initial - final) / |initial| below this: the loss did not move
SPREAD_FLOOR = 0.1  # spread (1 for rows spread evenly over the sphere) below this: collapsed
DID_NOT_LEARN = "did not learn"  # the premise's failure, as every report and row words it


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
    if chance is not None:
        if final >= chance:
            out.append(f"the loss ended above chance: {final:.4f} against {chance:.4f} for a representation that "
                       f"tells no view from another ({method})")
        elif final > chance - LEARNED_MARGIN:
            out.append(f"the loss ended {chance - final:.3f} nats below chance ({final:.4f} against {chance:.4f}), "
                       f"less than the premise's log 2 = {LEARNED_MARGIN:.3f}: not clearly below chance")
        return out, True
    if initial is not None and initial - final < MOVED_TOLERANCE * abs(initial):
        out.append(f"the loss did not move: {final:.4f} at the end against {initial:.4f} at the first step (less "
                   f"than {100 * MOVED_TOLERANCE:g} % lower; {method} has no chance level)")
    return out + collapse_findings(h_spread, z_spread), True


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
    measured = [(n, z, z0, g) for n, z, z0, g in gains
                if g is not None and z is not None and z0 is not None and not math.isnan(g.low)]
    if not measured:
        return [], False
    lowered = [g for g in measured if g[3].high < 0]
    if lowered:
        return ["training lowered the class probe of z: " + "; ".join(_gain_text(*g) for g in lowered)], True
    if any(g[3].low > 0 for g in measured):
        return [], True
    return ["training added nothing measurable to the class probes of z: "
            + "; ".join(_gain_text(*g) for g in measured)], True


def probe_gains(probe: ClassProbe | None) -> list[tuple[str, float | None, float | None, Estimate | None]]:
    """The class probes' z gains over the backbone at initialisation: the linear headline, and kNN where measured."""
    if probe is None:
        return []
    out = [("linear probe", probe.accuracy.z, probe.initial_z, probe.initial_gain)]
    if probe.knn is not None:
        out.append(("kNN probe", probe.knn.accuracy.z, probe.knn.initial_z, probe.knn.initial_gain))
    return out


def premise(method: str, final: float | None, chance: float | None, initial: float | None, h_spread: float | None,
            z_spread: float | None, probe: ClassProbe | None) -> tuple[bool | None, list[str], list[str], str]:
    """The premise "the network learned" (module docstring): ``(learned, why not, reported beside, what it rests
    on)``; beside it, a collapse of a method with a chance level (not part of the premise); ``learned`` is
    ``None`` where neither part could be measured."""
    obj, obj_measured = objective_failures(method, final, chance, initial, h_spread, z_spread)
    down, down_measured = downstream_failures(probe_gains(probe))
    beside = collapse_findings(h_spread, z_spread) if chance is not None else []
    basis = "chance" if chance is not None else "its first step and the collapse detectors"
    parts = [p for p, m in ((f"the loss against {basis}", obj_measured),
                            ("z's class probes against the backbone at initialisation", down_measured)) if m]
    if not parts:
        return None, [], beside, "nothing measured"
    rests = " and ".join(parts) + ("" if down_measured else " (no class probe: the downstream part is not measured)")
    return not (obj or down), obj + down, beside, rests


def check_training(cfg: Any, history: list[dict[str, Any]], dims: tuple[int, int] | None,
                   probe: ClassProbe | None, initialisation: str = "") -> TrainingCheck:
    """The run against its baselines (module docstring): ``history`` the per-epoch records (``metrics.jsonl``;
    the first holds ``initial_loss``), ``dims`` ``(d, k)`` of z and h, ``probe`` the class probes with their
    initial-backbone controls."""
    last = history[-1] if history else {}
    final = last.get("loss")
    initial = history[0].get("initial_loss") if history else None
    chance = chance_loss(cfg)
    h_spread = spread(last.get("h_std"), dims[1] if dims else None)
    z_spread = spread(last.get("z_std"), dims[0] if dims else None)
    learned, why, beside, rests = premise(cfg.method, final, chance, initial, h_spread, z_spread, probe)
    return TrainingCheck(
        learned=learned, findings=why, notes=beside, premise=rests, chance_loss=chance, initial_loss=initial,
        final_loss=final, h_spread=h_spread, z_spread=z_spread,
        initial_probe=probe.initial_z if probe is not None else None,
        probe_gain=probe.initial_gain if probe is not None else None, initialisation=initialisation)


def recheck(t: TrainingCheck, method: str, probe: ClassProbe | None) -> TrainingCheck:
    """A stored training check read again under today's premise (a summary written before it, a grid unit):
    the same numbers, today's definition."""
    learned, why, beside, rests = premise(method, t.final_loss, t.chance_loss, t.initial_loss, t.h_spread,
                                          t.z_spread, probe)
    return replace(t, learned=learned, findings=why, notes=beside, premise=rests)
