"""The Python API: your own modules in SSLModel/Trainer, runs read back (load_run), the backbone
exported alone (scale.export), the lazy public surface."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from torch import nn

import scale
from scale import analyze, export
from scale import run as scale_run
from scale.engine.config import TrainConfig
from scale.engine.data import load_synthetic
from scale.engine.model import SSLModel
from scale.engine.train import Trainer
from scale.geometry.measure import EndOfRun
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


def test_load_run_names_the_own_modules_to_pass_or_the_mismatching_keys(own_run):
    with pytest.raises(RunError) as info:
        load_run(own_run)  # the run was trained with a module backbone, recorded in its config
    message = str(info.value)
    assert "\n" not in message and "your own modules" in message and "torch.nn.modules.container.Sequential" in message
    assert "backbone= in Python" in message and "--backbone module:callable" in message
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
    ref = load_run(run_dir).model.backbone
    assert all(torch.equal(v, ref.state_dict()[k]) for k, v in mine.state_dict().items())
    # the architecture beside the weights: rebuilt without knowing the width, the same function
    rebuilt = scale.load_backbone(out)
    assert type(rebuilt).__name__ == "ResNet18" and not rebuilt.training
    x = torch.rand(3, 3, 16, 16)
    with torch.no_grad():
        assert torch.equal(rebuilt(x), ref.eval()(x))
    head_out = tmp_path / "head.pt"
    assert export.main([str(run_dir), str(head_out), "--part", "projector"]) == 0
    assert scale.load_backbone(head_out)(torch.zeros(2, 32)).shape == (2, 8)


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


# --------------------------------------------------------------------------------------------
# scale.train: a run of your own modules is a run directory like a CLI one, read back by the CLIs
# --------------------------------------------------------------------------------------------

NETS = '''
from torch import nn

def backbone():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())

def head():
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 6))
'''
QUICK = ["--hessian-images", "8", "--lanczos-iter", "20", "--probe-images", "32", "--orbits", "3x2", "--quiet"]


@pytest.fixture(scope="module")
def api_run(tmp_path_factory):
    """A whole run through ``scale.train`` with the backbone and head of a module file, given as specs."""
    root = tmp_path_factory.mktemp("api")
    (root / "my_nets.py").write_text(NETS)
    sys.path.insert(0, str(root))
    try:
        cfg = scale.TrainConfig.resolve("synthetic", epochs=1, threads=1)
        summary = scale.train(cfg, load_synthetic(), root / "run", backbone="my_nets:backbone", head="my_nets:head",
                              measure=EndOfRun(orbits="3x2"), log=None)
        yield root / "run", summary
    finally:
        sys.path.remove(str(root))


def test_an_api_run_leaves_the_files_of_a_cli_run(api_run, tmp_path):
    run_dir, summary = api_run
    cli = tmp_path / "cli"
    assert scale_run.main(["synthetic", "--epochs", "1", "--threads", "1", "--orbits", "3x2", "--out", str(tmp_path),
                           "--run-name", "cli", "--quiet"]) == 0
    assert sorted(p.name for p in run_dir.iterdir()) == sorted(p.name for p in cli.iterdir()) == sorted(
        ["config.json", "checkpoint.pt", "metrics.jsonl", "summary.json", "report.md", "curves.png", "orbits.npz"])
    config = json.loads((run_dir / "config.json").read_text())
    assert (config["backbone"], config["head"], config["head_width"], config["head_out"]) == ("module", "module",
                                                                                            None, 6)
    sequential = "torch.nn.modules.container.Sequential"
    assert config["modules"]["backbone"] == {"spec": "my_nets:backbone", "class": sequential, "parameters": 224,
                                             "out_dim": 8, "folder": str(run_dir.parent.resolve()),
                                             "batchnorm": False}
    assert config["modules"]["head"]["spec"] == "my_nets:head" and config["modules"]["head"]["out_dim"] == 6
    saved = json.loads((run_dir / "summary.json").read_text())
    assert saved["status"] == "finished" and saved["class_probe"] is not None and saved["geometry"]["verdict"]
    assert summary.geometry.verdict.verdict in ("compressor", "expander", "neither")
    report = (run_dir / "report.md").read_text()
    assert "your backbone my_nets:backbone" in report and "**Verdict" in report and "untrained control" in report


def test_the_clis_read_an_api_run_or_name_the_fix_in_one_line(api_run, tmp_path, capsys, monkeypatch):
    run_dir, _ = api_run
    monkeypatch.syspath_prepend(str(run_dir.parent))
    out = tmp_path / "analysis"
    assert analyze.main([str(run_dir), "--out", str(out), *QUICK]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--backbone my_nets:backbone --head my_nets:head" in err[0] and not out.exists()
    assert export.main([str(run_dir), str(tmp_path / "b.pt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--backbone my_nets:backbone" in err[0] and not (tmp_path / "b.pt").exists()

    before = (run_dir / "checkpoint.pt").read_bytes()
    assert scale_run.main(["--resume", str(run_dir), "--quiet"]) == 2  # the CLI cannot rebuild your modules
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "scale.train(..., resume=True)" in err[0]
    assert (run_dir / "checkpoint.pt").read_bytes() == before and not (run_dir / ".lock").exists()

    specs = ["--backbone", "my_nets:backbone", "--head", "my_nets:head"]
    assert analyze.main([str(run_dir), "--out", str(out), *specs, *QUICK]) == 0, capsys.readouterr().err
    assert "**Verdict" in (out / "report.md").read_text()  # labelled where the tiny run did not train
    assert export.main([str(run_dir), str(tmp_path / "b.pt"), *specs]) == 0
    with pytest.raises(RunError, match="pass module="):
        scale.load_backbone(tmp_path / "b.pt")  # your own module: its architecture is your code
    mine = scale.load_backbone(tmp_path / "b.pt", module="my_nets:backbone")
    ref = load_run(run_dir, backbone="my_nets:backbone", head="my_nets:head").backbone
    x = torch.rand(2, 3, 16, 16)
    with torch.no_grad():
        assert torch.equal(mine(x), ref(x))


def test_resolve_is_the_cli_resolution():
    """``TrainConfig.resolve`` gives what ``python -m scale.run DATASET ...`` resolves, dataset adjustments
    included (digits: a 16-wide ResNet-18, a 256/128 head, batch 128, and the main job's recipe: 20 epochs of the
    digits augmentation)."""
    for argv, kw in ((["digits"], {}), (["digits", "--method", "simsiam", "--lr", "0.1"], {"lr": 0.1}),
                     (["cifar10", "--method", "simclr_paper"], {})):
        args = scale_run.build_parser().parse_args(argv)
        cli = scale_run.resolve_config(args, torch.device("cpu"))
        api = TrainConfig.resolve(argv[0], args.method, threads=cli.threads, **kw)
        assert api == cli, argv
    d = TrainConfig.resolve("digits")
    assert (d.backbone_width, d.head_width, d.head_out, d.batch_size, d.epochs, d.augment) == (
        16, 256, 128, 128, 20, "digits_mild")
    assert TrainConfig.resolve("digits", "simclr", "vit_tiny").backbone_width == 48
    with pytest.raises(TypeError, match="no fields head_widht"):
        TrainConfig.resolve("digits", head_widht=3)


def test_a_hostile_architecture_file_is_refused_before_anything_is_built(tmp_path):
    """``load_backbone`` calls only the project's builders, with sizes in range, and checks the recorded
    architecture against the weights' shapes on the meta device before allocating anything."""
    from scale.engine.backbones import build_backbone

    out = tmp_path / "b.pt"
    torch.save(build_backbone("resnet18", 16, 4).state_dict(), out)
    arch = {"format": 1, "part": "backbone", "builder": "build_backbone", "module": None,
            "arguments": {"name": "resnet18", "image_size": 16, "width": 4}}
    for change, needle in (({"builder": "os:system"}, "unknown builder 'os:system'"),
                           ({"arguments": {**arch["arguments"], "width": 10**9}}, "outside 1..65536"),
                           ({"arguments": {**arch["arguments"], "width": 64}}, "shape mismatches"),
                           ({"format": 7}, "not an architecture record")):
        (tmp_path / "b.pt.json").write_text(json.dumps({**arch, **change}))
        with pytest.raises(RunError, match=needle):
            scale.load_backbone(out)
    (tmp_path / "b.pt.json").write_text(json.dumps(arch))
    assert type(scale.load_backbone(out)).__name__ == "ResNet18"
    torch.save({"not": "tensors"}, out)
    with pytest.raises(RunError, match="not a state_dict"):
        scale.load_backbone(out)
