"""The recipe search's SimSiam part (``bench/recipe_search.py``, ``bench/_simsiam.py``; ``docs/recipes.md``, "The
SimSiam search"), without running the search: its candidates start where the ledger trains E1 and E2 and each
changes only its dimension; the fixed predictor rate holds the predictor at the base rate under the cosine schedule
(negative control: without it the predictor follows the schedule); the pixel probe reads the run's own z on the same
split; a bad experiment name is one line and exit 2."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from bench import _simsiam, recipe_search
from bench.recipe_search import CANDIDATES, SIMSIAM, Candidate, main, simsiam_label
from scale.engine.config import TrainConfig
from scale.engine.data import load_dataset
from scale.experiments.catalog import plan
from scale.geometry.measure import EndOfRun
from scale.run import train

# what a SimSiam recipe is made of: the fields the search's base must share with the ledger's E1 / E2 runs
TRAINING = ("method", "head", "init", "optimizer", "lr", "momentum", "weight_decay", "schedule", "warmup_epochs",
            "batch_size", "epochs", "augment", "head_style", "head_bn", "head_out_bn", "head_bias", "head_width",
            "head_out", "pred_width")
LEDGER_RUN = {"E1": "E1-gelu2-bn0-lr0.05-s0", "E2": "E2-normal-swish2-s0"}  # the grid's runs the search starts from


def _fields(cfg: TrainConfig) -> dict:
    return {k: getattr(cfg, k) for k in TRAINING}


def _base(experiment: str) -> Candidate:
    return next(c for c in SIMSIAM if c.experiment == experiment and c.dimension == "the paper's setting")


@pytest.mark.parametrize("experiment", ["E1", "E2"])
def test_the_paper_setting_is_the_ledger_run(experiment):
    runs = plan("digits", "resnet18", False, (experiment,), seeds=1)
    ledger = next(r for r in runs if r.name == LEDGER_RUN[experiment])
    c = _base(experiment)
    assert _fields(c.config(c.heads[0], 0, 1)) == _fields(ledger.config())


def test_each_candidate_changes_only_its_dimension():
    keys = {"learning rate": {"lr"}, "weight decay": {"weight_decay"}, "schedule": {"schedule"},
            "the predictor's rate fixed (cosine)": {"schedule"}, "batch size": {"batch_size"}, "epochs": {"epochs"},
            "BatchNorm in the hidden layers": {"head_style", "head_bn"},
            "a SimSiam user's recipe": {"head_style", "head_bn", "lr", "weight_decay", "schedule"}}
    seen = set()
    for c in SIMSIAM:
        if c.dimension == "the paper's setting":
            continue
        base = _fields(_base(c.experiment).config(c.heads[0], 0, 1))
        mine = _fields(c.config(c.heads[0], 0, 1))
        assert {k for k in TRAINING if mine[k] != base[k]} == keys[c.dimension], c.dimension
        assert c.fixed_predictor_lr == (c.dimension in ("the predictor's rate fixed (cosine)",
                                                        "a SimSiam user's recipe"))
        seen.add((c.experiment, c.dimension))
    # every dimension of a SimSiam user at least for E1, and labels that tell the candidates apart
    assert {d for e, d in seen if e == "E1"} == set(keys)
    labels = [(c.experiment, simsiam_label(c)) for c in SIMSIAM]
    assert len(set(labels)) == len(labels)
    assert len({c.key() for c in CANDIDATES + SIMSIAM}) == len(CANDIDATES + SIMSIAM)


def test_hidden_batchnorm_keeps_the_head_s_map():
    from scale.engine.model import SSLModel

    c = next(c for c in SIMSIAM if c.experiment == "E1" and c.dimension == "BatchNorm in the hidden layers")
    model = SSLModel(c.config(c.heads[0], 0, 1))
    kinds = [type(m).__name__ for m in model.projector.applied_modules()]
    assert kinds == ["Linear", "BatchNorm1d", "GELU", "Linear"]
    assert all(layer.bias is None for layer in model.projector.layers)
    assert [type(m).__name__ for m in model.predictor.applied_modules()] == ["Linear", "BatchNorm1d", "GELU", "Linear"]


def _tiny(schedule: str) -> TrainConfig:
    return TrainConfig.resolve("synthetic", "simsiam", head="relu2", head_width=16, head_out=8, pred_width=8,
                               epochs=2, batch_size=32, optimizer="sgd", lr=0.05, schedule=schedule, seed=0, threads=1,
                               augment_path="batched")


@pytest.mark.parametrize("fixed", [True, False])
def test_the_fixed_predictor_rate_holds_under_cosine(fixed):
    torch.set_num_threads(1)
    data = load_dataset("synthetic", image_size=16)

    class Rates(_simsiam.FixedPredictorLR):  # records the rates of every group at each step, hook or not
        def on_fit_start(self, state) -> None:
            if fixed:
                super().on_fit_start(state)
            state.optimizer.register_step_pre_hook(
                lambda o, a, k: self.lrs.append(tuple(float(g["lr"]) for g in o.param_groups)))

    rates = Rates()
    trainers = []
    s = train(_tiny("cosine"), data, None, hooks=[rates], measure=EndOfRun(geometry=False), progress=False, log=None,
              on_ready=lambda t, notes: trainers.append(t))
    seen = rates.lrs[1::2] if fixed else rates.lrs  # with the hook, its own record and the recorder's alternate
    rest = [r[0] for r in seen]
    assert rest[0] == pytest.approx(0.05) and rest[-1] < 0.05 * 0.9  # the cosine lowers the rest
    if fixed:
        assert all(len(r) == 2 and r[1] == 0.05 for r in seen)
        opt = trainers[0].optimizer
        pred = {id(p) for p in trainers[0].model.predictor.parameters()}
        assert {id(p) for p in opt.param_groups[1]["params"]} == pred
        assert not pred & {id(p) for p in opt.param_groups[0]["params"]}
        # a row's pixel columns are the run's own raw-input baseline, z minus it paired over the same test images
        fields = recipe_search.pixel_fields(s.class_probe)
        p = s.class_probe
        assert fields["pixel_probe"] == recipe_search.RAW_INPUT_PIXELS
        assert fields["pixels"] == [p.raw_input, p.knn.raw_input]
        g = fields["linear_vs_pixels"]
        assert g[0] == pytest.approx(p.accuracy.z - p.raw_input) and g[1] <= g[0] <= g[2]
        with pytest.raises(RuntimeError, match="no raw-input baseline"):
            recipe_search.pixel_fields(dataclasses.replace(p, raw_input=None))
    else:
        assert all(len(r) == 1 for r in seen)  # one group: the predictor follows the schedule


def test_a_fixed_rate_needs_a_predictor():
    class State:
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
        model = type("M", (), {"predictor": None})()

    with pytest.raises(ValueError, match="predictor"):
        _simsiam.FixedPredictorLR().on_fit_start(State())


def test_an_unknown_experiment_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--experiments", "E9", "--report-only"])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert len(err.strip().splitlines()) == 1 and "E9" in err and "E1" in err


def test_the_pixels_sentence_names_each_probe_s_own_level():
    """Rows of both pixel probes (a partial rerun mixes them): the page states each probe's level under its name;
    it once stated the first row's level for all."""
    rows = [r for r in recipe_search.rows() if r.get("search") == "simsiam"][:2]
    assert len(rows) == 2 and all("pixel_probe" not in r for r in rows)  # the committed rows: the search's own probe
    rerun = {**rows[1], "pixel_probe": recipe_search.RAW_INPUT_PIXELS, "pixels": [12.5, 25.0]}
    page = "\n".join(recipe_search.simsiam_report([rows[0], rerun]))
    own = rows[0]["pixels"]
    assert f"linear {own[0]:.2f} % and kNN {own[1]:.2f} % under this search's own probe" in page
    assert "linear 12.50 % and kNN 25.00 % under the project's raw-input baseline" in page
