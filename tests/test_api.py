"""The Python API: your own modules in SSLModel/Trainer, runs read back (load_run), the backbone
exported alone (scale.export), the lazy public surface."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

import scale
from scale import export
from scale.engine.data import load_synthetic
from scale.engine.train import SSLModel, TrainConfig, Trainer
from scale.runs.load import RunError, load_run

CFG = dict(dataset="synthetic", method="simclr", head="gelu2", head_width=16, head_out=8, epochs=1, batch_size=32,
           image_size=16, probe_size=32)


def tiny_backbone() -> nn.Module:  # no out_dim attribute: SSLModel finds d = 8 by one forward
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())


@pytest.fixture(scope="module")
def own_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    Trainer(TrainConfig(**CFG), load_synthetic(), torch.device("cpu"), run_dir=run_dir, backbone=tiny_backbone(),
            log=None).fit()
    return run_dir


def test_modules_are_used_as_given():
    backbone, head = tiny_backbone(), nn.Sequential(nn.Linear(8, 12), nn.Tanh(), nn.Linear(12, 5))
    model = SSLModel(TrainConfig(**CFG), backbone=backbone, head=head)
    assert model.backbone is backbone and model.projector is head and backbone.out_dim == 8
    z, h, p = model(torch.rand(4, 3, 16, 16))
    assert z.shape == (4, 8) and h.shape == (4, 5) and p is None


def test_predictor_module_or_spec_is_required_with_a_module_head():
    cfg = TrainConfig(**{**CFG, "method": "simsiam"})
    head = nn.Linear(8, 6)
    with pytest.raises(ValueError, match="needs a predictor"):
        SSLModel(cfg, backbone=tiny_backbone(), head=head)
    pred = nn.Linear(6, 6)
    assert SSLModel(cfg, backbone=tiny_backbone(), head=head, predictor=pred).predictor is pred
    built = SSLModel(TrainConfig(**{**CFG, "method": "simsiam", "predictor": "relu2"}), backbone=tiny_backbone(),
                     head=head).predictor
    assert built(torch.zeros(2, 6)).shape == (2, 6)  # built for the module head's k = 6


def test_the_trainer_records_the_augmentation_path_auto_stood_for(own_run, monkeypatch):
    """A run of the API with ``augment_path="auto"`` keeps the resolved path in its checkpoint: a resume
    (also through ``scale.run --resume``) continues on it whatever machine it runs on."""
    from scale.engine import augment
    from scale.engine.augment import resolve_augment_path
    from scale.engine.checkpoint import load_checkpoint

    monkeypatch.setattr(augment, "free_cores", lambda: (1.0, "fixed here: the two resolutions below agree"))
    saved = load_checkpoint(own_run / "checkpoint.pt")["config"]["augment_path"]
    assert saved in ("batched", "workers")  # never "auto"
    t = Trainer(TrainConfig(**CFG), load_synthetic(), torch.device("cpu"), backbone=tiny_backbone(), log=None)
    expected = resolve_augment_path("auto", torch.device("cpu"), threads=torch.get_num_threads())[0]
    assert t.cfg.augment_path == expected
    assert type(t.augment).__name__ == {"batched": "GPUAugment", "workers": "WorkerAugment"}[expected]


def test_a_head_spec_given_to_the_trainer_is_the_run_s_spec(tmp_path):
    t = Trainer(TrainConfig(**CFG), load_synthetic(), torch.device("cpu"), backbone=tiny_backbone(), head="swish3",
                log=None)
    assert t.cfg.head == "swish3" and len([m for m in t.model.projector.modules() if isinstance(m, nn.Linear)]) == 3


def test_load_run_gives_config_weights_metrics(own_run):
    run = load_run(own_run, backbone=tiny_backbone())
    assert run.config.head == "gelu2" and run.config.epochs == 1 and len(run.metrics) == 1
    saved = torch.load(own_run / "checkpoint.pt", weights_only=True)["model"]
    for k, v in run.model.state_dict().items():
        assert torch.equal(v, saved[k]), k
    assert not run.model.training


def test_load_run_names_mismatching_keys(own_run):
    with pytest.raises(RunError, match=r"does not match .*missing keys: backbone\.stem"):
        load_run(own_run)  # the config names resnet18; the run was trained with a module backbone
    wide = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    with pytest.raises(RunError, match="shape mismatches"):
        load_run(own_run, backbone=wide)


def test_export_cli_writes_a_loadable_state_dict(tmp_path, capsys):
    run_dir = tmp_path / "run"
    Trainer(TrainConfig(**{**CFG, "backbone_width": 4}), load_synthetic(), torch.device("cpu"), run_dir=run_dir,
            log=None).fit()
    out = tmp_path / "backbone.pt"
    assert export.main([str(run_dir), str(out)]) == 0
    from scale.engine.backbones import build_backbone

    mine = build_backbone("resnet18", 16, 4)
    mine.load_state_dict(torch.load(out, weights_only=True))  # strict: exactly the backbone's keys
    ref = load_run(run_dir).model.backbone.state_dict()
    assert all(torch.equal(v, ref[k]) for k, v in mine.state_dict().items())


def test_export_cli_bad_run_dir_exits_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "backbone.pt"
    assert export.main([str(tmp_path / "nowhere"), str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a run directory" in err[0]
    assert not out.exists()


def test_import_scale_is_lazy():
    code = "import sys, scale; assert 'torch' not in sys.modules; scale.Trainer; assert 'torch' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
    assert set(scale.__all__) <= set(dir(scale))
    for name in scale.__all__:
        assert getattr(scale, name).__doc__, name
