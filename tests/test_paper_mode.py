"""Paper mode: the modules of ``scale.paper``'s defaults have the layer structure and parameter counts of the
paper's official code (farischaudhry/projection-head-geometry, ``experiments.py``,
``head_depth_ablations.py``), and ``simclr_paper`` is its loss.

Expected parameter counts are written from the official layer shapes (``nn.Linear(i, o, bias=False)``:
``i o``; ``nn.BatchNorm1d(c)``: ``2 c``; ...) and never read from the module under test; the backbone,
head and predictor are counted separately.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy.special import logsumexp
from torch import nn

from scale.engine import objectives as so
from scale.engine.backbones import build_backbone
from scale.engine.heads import build_head
from scale.engine.model import SSLModel
from scale.geometry import protocols as P
from scale.geometry.e4_report import t_interval
from scale.geometry.measure import control_head, head_fn
from scale.geometry.protocols import NormalizedInput, renormalized_bn, untrained_heads
from scale.paper import PAPER_SETTINGS, paper_choices, plan
from scale.run import build_parser, resolve_config


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def kinds(head) -> list[type]:
    return [type(m) for m in head.applied_modules()]


def linear(i: int, o: int, bias: bool = False) -> int:
    return i * o + (o if bias else 0)


def bn(c: int) -> int:
    return 2 * c  # weight and bias; running statistics are buffers


def paper_config(experiment: str, dataset: str = "cifar10", **overrides):
    """The resolved TrainConfig of scale.paper's first run of ``experiment``."""
    run = plan(dataset, "resnet18", quick=False, experiments=(experiment,), seeds=1)[0]
    argv = list(run.argv)
    for k, v in overrides.items():  # appended: argparse keeps the last value
        flag = k.replace("_", "-")
        argv += [f"--{flag}" if v else f"--no-{flag}"] if isinstance(v, bool) else [f"--{flag}", str(v)]
    return resolve_config(build_parser().parse_args(argv), torch.device("cpu"))


# --------------------------------------------------------------------------------------------
# Heads
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("act", "module"), [("relu", nn.ReLU), ("gelu", nn.GELU), ("swish", nn.SiLU)])
def test_projection_head_is_the_official_one(act, module):
    """ProjectionHead(d, w, k, act, use_bn): Linear(no bias) -> [BN] -> act -> Linear(no bias) -> [BN]."""
    d, w, k = 12, 20, 8
    with_bn = build_head(f"{act}2", d, k, w, batchnorm=True, style="paper")
    assert kinds(with_bn) == [nn.Linear, nn.BatchNorm1d, module, nn.Linear, nn.BatchNorm1d]
    assert n_params(with_bn) == linear(d, w) + bn(w) + linear(w, k) + bn(k)
    without = build_head(f"{act}2", d, k, w, batchnorm=False, style="paper")
    assert kinds(without) == [nn.Linear, module, nn.Linear]
    assert n_params(without) == linear(d, w) + linear(w, k)
    for head in (with_bn, without):
        assert all(m.bias is None for m in head.modules() if isinstance(m, nn.Linear))
    if act == "gelu":
        assert with_bn.act.approximate == "none"  # nn.GELU()'s default, the official one


def test_linear_and_depth_heads_are_the_official_ones():
    d, w, k = 12, 20, 8
    lin = build_head("linear", d, k, w, style="paper")  # ProjectionHead('linear'): two Linear, no BN, no bias
    assert kinds(lin) == [nn.Linear, nn.Linear] and n_params(lin) == linear(d, w) + linear(w, k)
    depth1 = build_head("linear", d, k, w, batchnorm=True, style="paper")  # FlexibleProjectionHead(num_layers=1)
    assert kinds(depth1) == [nn.Linear, nn.BatchNorm1d] and n_params(depth1) == linear(d, k) + bn(k)
    depth3 = build_head("swish3", d, k, w, batchnorm=True, style="paper")
    assert kinds(depth3) == [nn.Linear, nn.BatchNorm1d, nn.SiLU] * 2 + [nn.Linear, nn.BatchNorm1d]
    assert n_params(depth3) == linear(d, w) + bn(w) + linear(w, w) + bn(w) + linear(w, k) + bn(k)
    # the grammar's own heads keep their meaning: 'linear' is one Linear layer with a bias
    grammar = build_head("linear", d, k, w)
    assert kinds(grammar) == [nn.Linear] and n_params(grammar) == linear(d, k, bias=True)


def test_paper_style_refuses_what_the_official_heads_do_not_have():
    with pytest.raises(ValueError, match="no biases"):
        build_head("relu2", 4, 4, 4, bias=True, style="paper")
    with pytest.raises(ValueError, match="every Linear or after none"):
        build_head("relu2", 4, 4, 4, batchnorm=True, out_batchnorm=False, style="paper")
    with pytest.raises(ValueError, match="head style"):
        build_head("relu2", 4, 4, 4, style="official")


# --------------------------------------------------------------------------------------------
# Models of scale.paper's defaults: backbone, head and predictor counted separately
# --------------------------------------------------------------------------------------------


def resnet18_cifar_params(w: int = 64) -> int:
    """torchvision's resnet18 with conv1 = Conv2d(3, w, 3, bias=False), no max-pool, no fc (official)."""
    def conv(i, o, k):
        return i * o * k * k

    total = conv(3, w, 3) + bn(w)
    c_in = w
    for i, c_out in enumerate((w, 2 * w, 4 * w, 8 * w)):
        down = i > 0
        total += conv(c_in, c_out, 3) + bn(c_out) + conv(c_out, c_out, 3) + bn(c_out)  # first BasicBlock
        total += (conv(c_in, c_out, 1) + bn(c_out)) if down else 0  # its downsample
        total += 2 * (conv(c_out, c_out, 3) + bn(c_out))  # second BasicBlock
        c_in = c_out
    return total


def vit_tiny_params(image: int = 32, patch: int = 4, dim: int = 192, depth: int = 3, mlp: int = 768) -> int:
    """Official VisionTransformerBackbone: Conv2d patch embedding (with bias), pos (N + 1, D), cls (1, D), and
    ``depth`` TransformerEncoderLayer(D, 3, mlp): in_proj (3D, D) + 3D, out_proj (D, D) + D, two LayerNorms,
    linear1 (mlp, D) + mlp, linear2 (D, mlp) + D; no final LayerNorm."""
    n = (image // patch) ** 2
    layer = (3 * dim * dim + 3 * dim) + (dim * dim + dim) + 2 * (2 * dim) + (mlp * dim + mlp) + (dim * mlp + dim)
    return 3 * patch * patch * dim + dim + (n + 1) * dim + dim + depth * layer


def test_e3_model_is_the_official_one():
    cfg = paper_config("E3E4")
    model = SSLModel(cfg)
    assert model.predictor is None
    assert n_params(model.backbone) == resnet18_cifar_params(64) == 11_168_832  # the usual CIFAR ResNet-18 count
    assert kinds(model.projector) == [nn.Linear, nn.BatchNorm1d, nn.ReLU, nn.Linear, nn.BatchNorm1d]
    assert n_params(model.projector) == linear(512, 2048) + bn(2048) + linear(2048, 2048) + bn(2048)
    assert (cfg.method, cfg.batch_size, cfg.optimizer, cfg.lr, cfg.schedule) == ("simclr_paper", 256, "adam", 1e-3,
                                                                                 "constant")
    assert (cfg.augment, cfg.temperature, cfg.weight_decay) == ("e3", 0.1, 0.0)


@pytest.mark.parametrize(("head", "bn_on"), [("swish2", True), ("relu2", False), ("linear", False)])
def test_e1_projector_and_predictor_are_the_official_ones(head, bn_on):
    """E1: projector ProjectionHead(512, 2048, 2048, act, use_bn), predictor ProjectionHead(2048, 512, 2048)."""
    cfg = paper_config("E1", head=head, head_bn=bn_on, lr=0.05)
    model = SSLModel(cfg)
    act = {"swish2": [nn.SiLU], "relu2": [nn.ReLU], "linear": []}[head]
    norm = [nn.BatchNorm1d] if bn_on else []
    for module, (d, w, k) in ((model.projector, (512, 2048, 2048)), (model.predictor, (2048, 512, 2048))):
        assert kinds(module) == [nn.Linear, *norm, *act, nn.Linear, *norm]
        assert n_params(module) == linear(d, w) + linear(w, k) + (bn(w) + bn(k) if bn_on else 0)
        assert all(m.bias is None for m in module.modules() if isinstance(m, nn.Linear))
    # pseudo-collapse: the projector's Linear weights x 0.1 (official: projector only)
    assert cfg.init == "collapsed" and (cfg.optimizer, cfg.lr, cfg.momentum, cfg.batch_size) == ("sgd", 0.05, 0.9, 512)


def test_e5_depths_are_the_official_ones():
    """head_depth_ablations.py: num_layers Linear layers, BatchNorm after each, no bias, batch 512."""
    runs = plan("cifar10", "resnet18", quick=False, experiments=("E5",), seeds=1)
    counts = []
    for r in runs:
        cfg = resolve_config(build_parser().parse_args(r.argv), torch.device("cpu"))
        head = build_head(cfg.head, 512, cfg.head_out, cfg.head_width, bias=cfg.head_bias, batchnorm=cfg.head_bn,
                          out_batchnorm=cfg.head_out_bn, style=cfg.head_style)
        counts.append(sum(isinstance(m, nn.Linear) for m in head.applied_modules()))
        assert cfg.batch_size == 512 and kinds(head)[-1] is nn.BatchNorm1d
    assert counts == [1, 2, 3]


def test_vit_tiny_is_the_official_one():
    vit = build_backbone("vit_tiny", 32)
    assert n_params(vit) == vit_tiny_params()
    layers = list(vit.encoder.layers)
    assert len(layers) == 3 and all(isinstance(m, nn.TransformerEncoderLayer) for m in layers)
    for m in layers:
        assert m.norm_first and m.self_attn.num_heads == 3 and m.linear1.out_features == 768
        assert m.dropout.p == 0.0 and m.activation is torch.nn.functional.gelu
    assert vit.encoder.norm is None and isinstance(vit.norm, nn.Identity)  # no final LayerNorm
    # the usual ViT's final LayerNorm only on request
    assert n_params(build_backbone("vit_tiny", 32).__class__(final_norm=True)) == vit_tiny_params() + 2 * 192


# --------------------------------------------------------------------------------------------
# The official SimCLR loss
# --------------------------------------------------------------------------------------------


def test_simclr_paper_loss_is_one_direction_cross_view_infonce():
    """``F.cross_entropy(z1 @ z2.T / 0.1, arange(B))`` on normalised outputs, against the formula in NumPy."""
    g = torch.Generator().manual_seed(0)
    m, k, tau = 7, 5, 0.1
    Hb = torch.randn(2 * m, k, generator=g, dtype=torch.float64)
    H = Hb.numpy()
    U1 = H[:m] / np.linalg.norm(H[:m], axis=1, keepdims=True)
    U2 = H[m:] / np.linalg.norm(H[m:], axis=1, keepdims=True)
    S = U1 @ U2.T / tau
    expected = float(np.mean(logsumexp(S, axis=1) - np.diag(S)))
    got = float(so.info_nce_cross_view(Hb, tau))
    assert math.isclose(got, expected, rel_tol=1e-12)
    # negative controls: the symmetric NT-Xent and the other direction are different numbers
    assert not math.isclose(float(so.nt_xent(Hb, tau)), expected, rel_tol=1e-3)
    swapped = torch.cat([Hb[m:], Hb[:m]])
    assert not math.isclose(float(so.info_nce_cross_view(swapped, tau)), expected, rel_tol=1e-3)
    with pytest.raises(ValueError, match="temperature"):
        so.info_nce_cross_view(Hb, 0.0)


# --------------------------------------------------------------------------------------------
# The defaults named where they differ from scale.run's
# --------------------------------------------------------------------------------------------


def test_paper_choices_name_each_difference_from_scale_run():
    e3 = paper_choices("E3E4")
    assert e3["method"] == ["simclr", "simclr_paper"] and e3["batch_size"] == [512, 256]
    assert e3["head_bias"] == [True, False] and e3["schedule"] == ["cosine", "constant"]
    assert e3["head_style"] == ["grammar", "paper"] and "augment" not in e3  # scale.run's e3 is the official one
    assert paper_choices("E2")["epochs"] == [50, 100]
    for exp, ref in PAPER_SETTINGS.items():  # the grid resolves every paper setting to its value
        cfg = paper_config(exp).to_dict()
        assert all(cfg[key] == ref[key] for key in ref if key not in ("backbone_width",)), exp


# --------------------------------------------------------------------------------------------
# The E4 protocol study's pieces (the study itself: python -m scale.e4_study, docs/e4_study)
# --------------------------------------------------------------------------------------------


def test_e4_study_t_interval_and_bn_reestimation():
    from mini.invariance import l2_normalize

    ci = t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    half = 2.7764451051977987 * math.sqrt(2.5) / math.sqrt(5)  # t_{0.975, 4} from the tables, s^2 = 2.5
    assert math.isclose(ci["low"], 3 - half, rel_tol=1e-9) and math.isclose(ci["high"], 3 + half, rel_tol=1e-9)
    assert math.isnan(t_interval([2.0])["low"])

    torch.manual_seed(0)
    head = build_head("relu2", 6, 4, 10, batchnorm=True, style="paper")
    with torch.no_grad():
        head.norms[0].running_mean.fill_(5.0)
    z = 7.0 * torch.randn(512, 6)  # raw scale far from unit norm; two equal batches of 256
    fresh = renormalized_bn(head, z)
    with torch.no_grad():
        a = l2_normalize(z) @ head.layers[0].weight.T  # (512, 10), the first BatchNorm's input
    assert torch.allclose(fresh.norms[0].running_mean, a.mean(0), atol=1e-6)
    assert torch.equal(head.norms[0].running_mean, torch.full((10,), 5.0))  # the trained head is untouched
    assert torch.equal(fresh.layers[0].weight, head.layers[0].weight) and not fresh.training
    wrapped = NormalizedInput(fresh.eval())
    assert torch.allclose(wrapped(z), fresh(l2_normalize(z)))

    cfg = paper_config("E3E4")
    heads = untrained_heads(cfg, 16, seed=3)
    nobias, bias = heads["d_untrained_nobias"], heads["d_untrained_bias"]
    assert kinds(nobias) == kinds(bias) == [nn.Linear, nn.BatchNorm1d, nn.ReLU, nn.Linear, nn.BatchNorm1d]
    assert all(m.bias is None for m in nobias.layers) and all(m.bias is not None for m in bias.layers)


def test_protocol_as_untrained_twin_carries_raw_z_statistics_onto_normalised_z(monkeypatch):
    """h_untrained_raw_bn is g's head (untrained, BatchNorm statistics from raw z) measured as a is, on normalised
    z; f's head (statistics from normalised z) is another map. The measurement itself is stubbed: the heads and
    inputs each protocol is given are what is checked."""
    z = 7.0 * torch.randn(512, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    monkeypatch.setattr(P, "model_features", lambda *a: {"z_bn": z})
    monkeypatch.setattr(P, "z_probes", lambda *a: {})
    monkeypatch.setattr(P, "measure", lambda fn, normalized, *a: (fn, normalized))
    cfg = paper_config("E3E4")
    model = SimpleNamespace(backbone=SimpleNamespace(out_dim=16), projector=control_head(cfg, 16, seed=9))
    got = P.measure_model(model, cfg, SimpleNamespace(train_x=torch.zeros(1)), None, 3,
                          ("a_paper", "f_untrained_bn_renorm", "g_untrained_raw_renorm", "h_untrained_raw_bn"))
    assert got["h_untrained_raw_bn"][1] is got["a_paper"][1] is True and got["g_untrained_raw_renorm"][1] is False
    raw_stats = head_fn(renormalized_bn(control_head(cfg, 16, seed=3, bias=False), z, normalized=False))
    x = torch.nn.functional.normalize(z[:64], dim=1)
    assert torch.equal(got["h_untrained_raw_bn"][0](x), raw_stats(x))
    assert not torch.allclose(got["h_untrained_raw_bn"][0](x), got["f_untrained_bn_renorm"][0](x))


def test_paper_style_rules_are_checked_on_every_config_not_only_on_flags():
    """The official heads' rules live in scale.runs.validate.check_config, so a config.json read on --resume is
    held to them too; the CLI gets the same refusal for conflicting flags (negative control: the paper
    defaults pass)."""
    from dataclasses import replace

    from scale.engine.config import TrainConfig
    from scale.runs.faults import ConfigError
    from scale.runs.validate import check_config

    ok = TrainConfig(dataset="digits", head_style="paper", head_bias=False, head_bn=True, head_out_bn=True)
    check_config(ok, "config.json")
    with pytest.raises(ConfigError, match=r"head_bias in config\.json must be off"):
        check_config(replace(ok, head_bias=True), "config.json")
    with pytest.raises(ConfigError, match=r"head_out_bn in config\.json must equal head_bn"):
        check_config(replace(ok, head_out_bn=False), "config.json")
    parser = build_parser()
    for extra, match in ((["--head-bias"], "--head-bias must be off"),
                         (["--head-bn", "--no-head-out-bn"], "--head-out-bn must equal --head-bn")):
        args = parser.parse_args(["digits", "--head", "relu2", "--head-style", "paper", *extra])
        with pytest.raises(ConfigError, match=match):
            resolve_config(args, torch.device("cpu"))
    cfg = resolve_config(parser.parse_args(["digits", "--head", "relu2", "--head-style", "paper", "--head-bn"]),
                         torch.device("cpu"))
    assert (cfg.head_bias, cfg.head_bn, cfg.head_out_bn) == (False, True, True)
