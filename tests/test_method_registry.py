"""Adding an SSL method is one record in ``scale.engine.methods``: a toy method registered at runtime trains
through ``scale.run`` (CLI, recipe, Trainer), the curvature tracker measures it by the path its declared
Hessian structure allows, and the measurement agrees with a dense ``eigvalsh`` of ``H_eff`` on the same
probe. Unregistering removes it from the CLI again.

The toy objective is alignment to the other view's stop-gradient embedding,

    L(Hb) = 1/(2n) sum_i |h_i - stopgrad(h_{pi(i)})|^2,   pi swaps view 1 and view 2,

a sum of per-row terms once the targets are bound, so its loss Hessian is block-diagonal ("per-sample").
"""

from __future__ import annotations

import pytest
import torch

from scale.curvature.operators import EffectiveHessian
from scale.curvature.tracking import HessianTracker, probe_objective
from scale.engine import methods
from scale.engine import objectives as so
from scale.run import main

EIG_TOL = 1e-8  # relative to the spectral scale max |lambda| of the dense H_eff
TINY = ["synthetic", "--quiet", "--train-subset", "64", "--batch-size", "32", "--probe-size", "32",
        "--head-width", "16", "--head-out", "8", "--backbone-width", "4", "--image-size", "8", "--epochs", "1",
        "--no-final-measure"]


def _align(ctx: methods.ObjectiveContext):
    T = ctx.targets("align")
    A, B = so.split_views(T)
    swapped = torch.cat([B, A])  # row i's target: the other view of the same image
    return lambda Hb: so.mse_targets(Hb, swapped)


TOY = methods.Method("align", _align, hessian="per-sample", recipe=dict(optimizer="sgd", lr=0.01, augment="e1"),
                     recipe_source="a test's toy method")


@pytest.fixture
def toy_method():
    methods.register(TOY)
    try:
        yield TOY
    finally:
        methods.unregister(TOY.name)


class DenseChecked(HessianTracker):
    """The tracker plus an independent dense reference of ``H_eff`` at every measurement."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.reference: list[torch.Tensor] = []
        self.state = None

    def track(self, state):
        self.state = state
        rec = super().track(state)
        z, h = state.embed(self.probe_x)
        loss = probe_objective(state.config.method, state.model, h.double(), None, config=state.config)
        self.reference.append(torch.linalg.eigvalsh(EffectiveHessian(z, state.model.projector, loss,
                                                                     dtype=torch.float64).H.dense()))
        return rec


def test_a_registered_method_trains_and_is_tracked(tmp_path, toy_method):
    tracker = DenseChecked("epoch", probe_pairs=4, run_dir=tmp_path / "run")
    code = main([*TINY, "--method", "align", "--out", str(tmp_path), "--run-name", "run"], hooks=[tracker])
    assert code == 0
    state = tracker.state
    assert state.config.method == "align" and state.config.optimizer == "sgd" and state.config.lr == 0.01  # recipe
    assert state.model.predictor is None and state.target is None  # the record says: no predictor, no EMA
    assert len(state.history) == 1 and torch.isfinite(torch.tensor(state.history[0]["loss"]))

    # The objective the trainer and the tracker use is the toy's formula, bound at the batch.
    h = state.h.double()
    m = h.shape[0] // 2
    expected = 0.5 * ((h - torch.cat([h[m:], h[:m]])) ** 2).sum() / h.shape[0]
    assert torch.allclose(state.objective(h)(h), expected, rtol=1e-12, atol=0)

    # The declared per-sample Hessian sends the tracker down the exact block path, which agrees with the
    # dense eigvalsh of H_eff on the same probe.
    (rec,), (eig,) = tracker.records, tracker.reference
    scale = float(eig.abs().max())
    assert rec["path"] == "blocks" and rec["method"] == "align" and rec["N"] == len(eig)
    assert abs(rec["lambda_min"] - float(eig[0])) <= EIG_TOL * scale
    assert abs(rec["lambda_max"] - float(eig[-1])) <= EIG_TOL * scale


def test_the_declared_structure_is_what_the_tracker_reads(tmp_path, toy_method):
    """Negative control: the same toy declared "coupled" is measured by Lanczos (the blocks path needs
    the per-sample declaration), with the same extreme eigenvalues."""
    methods.unregister("align")
    methods.register(methods.Method("align", _align, hessian="coupled"))
    tracker = HessianTracker("epoch", probe_pairs=4)
    assert main([*TINY, "--method", "align", "--out", str(tmp_path), "--run-name", "run"], hooks=[tracker]) == 0
    assert tracker.records[0]["path"] in ("factored", "closed-form")  # a Lanczos operator path, by its cost rule


def test_unregistered_methods_are_refused(tmp_path, capsys):
    assert "align" not in methods.names()
    with pytest.raises(SystemExit) as exc:
        main([*TINY, "--method", "align", "--out", str(tmp_path)])
    assert exc.value.code == 2 and "invalid choice: 'align'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown method 'align'; valid: simclr"):
        methods.get("align")
    with pytest.raises(ValueError, match="already registered"):
        methods.register(methods.get("simclr"))
