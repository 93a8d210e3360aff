"""Your own modules named once: in the config (``TrainConfig.resolve(..., backbone="pkg.mod:fn")``), and a run
of them is read by the later commands without retyping them: ``--recorded-modules`` (in
Python ``recorded_modules=True``) imports the specs the run recorded, naming each, and nothing is imported
without it; the backbone alone is exported without the head; a dot where the colon belongs and a module not
on the path each get their own line with the fix; the config and the report describe your head as it is."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch

import scale
from scale.analyze import main as analyze_main
from scale.engine.data import load_synthetic
from scale.engine.modules import ModuleSpecError, import_module_spec, not_a_name_message
from scale.export import main as export_main
from scale.geometry.measure import EndOfRun

NETS = """from torch import nn
def backbone():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
def head():
    return nn.Sequential(nn.Linear(8, 16), nn.Softplus(), nn.Linear(16, 8))
"""


@pytest.fixture(scope="module")
def own_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("own")
    (work / "own_nets_once.py").write_text(NETS)
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(work))
        # the config names your parts from the start (what print(cfg) shows), and train needs them no more
        cfg = scale.TrainConfig.resolve("synthetic", backbone="own_nets_once:backbone", head="own_nets_once:head",
                                        epochs=1, threads=1, image_size=8, batch_size=32, train_subset=64,
                                        augment_path="batched", probe_size=32)
        assert "backbone='own_nets_once:backbone'" in repr(cfg) and "head='own_nets_once:head'" in repr(cfg)
        scale.train(cfg, load_synthetic(image_size=8), work / "run", measure=EndOfRun("2x1", probe_images=16),
                    log=None)
    return work


def _call(main, argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_the_commands_read_a_run_of_own_modules_with_the_opt_in_and_no_retyping(own_run, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(own_run))
    monkeypatch.chdir(tmp_path)
    run = str(own_run / "run")
    code, _, err = _call(analyze_main, [run, "--quiet", "--no-curvature", "--probe-images", "16"])
    assert code == 2 and "--recorded-modules" in err and "own_nets_once:backbone" in err  # nothing imported unasked
    code, out, _ = _call(analyze_main, [run, "--recorded-modules", "--quiet", "--no-curvature", "--orbits", "2x1"])
    assert code == 0, out
    assert "importing the run's recorded backbone own_nets_once:backbone" in out
    assert "importing the run's recorded head own_nets_once:head" in out
    code, out, _ = _call(export_main, [run, str(tmp_path / "b.pt"), "--recorded-modules"])
    assert code == 0 and "own_nets_once:backbone" in out and "own_nets_once:head" not in out  # the backbone alone
    loaded = scale.load_run(run, recorded_modules=True)
    exported = scale.load_backbone(tmp_path / "b.pt", module="own_nets_once:backbone")
    x = torch.rand(2, 3, 8, 8)
    assert torch.equal(exported(x), loaded.backbone(x))


def test_the_backbone_alone_is_exported_without_the_head(own_run, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(own_run))
    code, _, err = _call(export_main, [str(own_run / "run"), str(tmp_path / "b.pt"), "--backbone",
                                       "own_nets_once:backbone"])
    assert code == 0, err
    arch = json.loads((tmp_path / "b.pt.json").read_text())
    assert arch["part"] == "backbone" and arch["module"]["spec"] == "own_nets_once:backbone"


def test_a_dot_for_the_colon_and_a_module_off_the_path_each_get_their_line(own_run, tmp_path):
    code, _, err = _call(export_main, [str(own_run / "run"), str(tmp_path / "b.pt"), "--backbone",
                                       "own_nets_once.backbone"])
    assert code == 2 and "write a colon before its name: own_nets_once:backbone" in err
    code, _, err = _call(analyze_main, [str(own_run / "run"), "--backbone", "own_nets_once.backbone"])
    assert code == 2 and "write a colon before its name: own_nets_once:backbone" in err
    assert "a colon" not in not_a_name_message("resnet50", "--backbone", "a backbone")  # no dot: no suggestion
    with pytest.raises(ModuleSpecError, match=r"PYTHONPATH=/some/where python -m"):
        import_module_spec("absent_nets_xyz:backbone", "--backbone", folder="/some/where")
    with pytest.raises(ModuleSpecError, match=r"put that folder on PYTHONPATH"):
        import_module_spec("absent_nets_xyz:backbone", "--backbone")
    with pytest.raises(ModuleSpecError, match=r"not of the form package.module:callable"):
        import_module_spec("own nets:backbone", "--backbone")


def test_the_config_and_report_describe_an_own_head_without_batchnorm(own_run):
    cfg = json.loads((own_run / "run" / "config.json").read_text())
    assert cfg["head"] == "module" and cfg["head_bn"] is False and cfg["modules"]["head"]["batchnorm"] is False
    assert cfg["modules"]["backbone"]["folder"] == str(own_run.resolve())
    report = (own_run / "run" / "report.md").read_text()
    assert "BatchNorm: none in the head" in report and "BatchNorm in eval mode" not in report
