r"""E4's measurement protocols of one trained model (``python -m scale.e4_study`` and the ledger measure with them).

E4 measures orbits with the head applied to L2-normalised backbone features while the head was trained on the raw
``z``; with BatchNorm in eval mode the running statistics gathered on raw ``z`` then meet inputs of another scale.
``PROTOCOLS`` names each way of applying a head (a: the paper's; b: raw z, as trained; c: a with BatchNorm
re-estimated; d: untrained heads; e: a head trained on normalised z; f, g: the untrained twins of c and b), and
``measure`` gives one protocol's E4 numbers, rotation probes and class probe (``scale.e4_study``'s docstring lists
them). Shapes: orbit features ``(n_orbits, 12, dim)``, sweep features ``(n_orbits, 10, dim)``, probe features
``(4 N, dim)``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from mini.invariance import compression, l2_normalize, orbit_geometry, sweep_step
from scale.engine.heads import build_head
from scale.geometry.measure import (
    GeometrySettings,
    control_head,
    eval_mode,
    head_features,
    head_fn,
    orbit_features,
    orbit_images,
    standardize,
)
from scale.geometry.probes import ProbeSettings, features, logistic_probe_accuracy, rotated, train_probe

PROTOCOLS: dict[str, str] = {
    "a_paper": "paper protocol: normalize(head(normalize(z))), BN statistics from training on raw z",
    "b_raw": "the head on raw z, as trained: normalize(head(z))",
    "c_bn_renorm": "paper protocol, BN statistics re-estimated on normalised z of the (unaugmented) training images",
    "d_untrained_nobias": "untrained head without biases (the paper's layers), paper protocol",
    "d_untrained_bias": "untrained head of the same layers with biases, paper protocol",
    "e_trained_normalized": "head trained on normalised z, paper protocol",
    "f_untrained_bn_renorm": "untrained head without biases, BN statistics estimated on normalised z of the training "
                             "images, paper protocol: the untrained twin of c (one protocol for both heads)",
    "g_untrained_raw_renorm": "untrained head without biases on raw z, BN statistics estimated on raw z of the "
                              "training images: the untrained twin of b (the trained head's statistics are from raw z)",
    "h_untrained_raw_bn": "untrained head without biases, BN statistics estimated on raw z of the training images, "
                          "measured under the paper's protocol (on normalised z): the untrained twin of a, carrying "
                          "a's mismatch (raw-z statistics applied to normalised z), which d does not",
}
METRICS: tuple[str, ...] = ("compression", "d_intra_factor", "d_inter_factor", "ratio_h", "ratio_z", "kappa_factor",
                            "rot_linear_z", "rot_linear_h", "rot_mlp_z", "rot_mlp_h", "class_z", "class_h")
BN_IMAGES = 10_000  # training images whose normalised z re-estimate BatchNorm statistics (protocol c)


class NormalizedInput(nn.Module):
    """``head(z / |z|)``: a head that is trained (protocol e) and measured on normalised z."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.head(l2_normalize(z))




@torch.no_grad()
def renormalized_bn(head: nn.Module, z_train: torch.Tensor, normalized: bool = True) -> nn.Module:
    """A copy of ``head`` whose BatchNorm running statistics are re-estimated (cumulative average over
    batches of 256) on ``normalize(z_train)`` (``normalized=False``: on ``z_train`` itself); weights and affine
    parameters unchanged."""
    out = copy.deepcopy(head).float()
    norms = [m for m in out.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative moving average: every batch weighs the same
    out.train()
    zn = l2_normalize(z_train.float()) if normalized else z_train.float()
    for i in range(0, len(zn), 256):
        if len(zn[i : i + 256]) > 1:
            out(zn[i : i + 256])
    return out.eval()


def untrained_heads(cfg, d: int, seed: int) -> dict[str, nn.Module]:
    """Protocol d: the run's head untrained, without biases (the paper's layers) and with default biases."""
    nobias = control_head(cfg, d, seed=seed, bias=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        bias = build_head(cfg.head, d, cfg.head_out, cfg.head_width, bias=True, batchnorm=cfg.head_bn,
                          out_batchnorm=cfg.head_out_bn, style="grammar")
    return {"d_untrained_nobias": nobias.eval(), "d_untrained_bias": bias.eval()}


@torch.no_grad()
def model_features(backbone: nn.Module, data, settings: GeometrySettings, probe: ProbeSettings) -> dict[str, Any]:
    """Backbone features of one trained model: orbits ``(n, 12, d)``, sweeps ``(n, 10, d)``, the rotated probe
    sets ``(4 N, d)``, the first ``BN_IMAGES`` training images (protocol c) and the class-probe sets (unaugmented,
    at most ``probe``'s image caps per split) (float64), with their labels. ``data`` on the backbone's device."""
    normalize = standardize(data.mean, data.std, data.train_x.device)

    def z_of(x_uint8: torch.Tensor) -> torch.Tensor:  # (N, 3, S, S) uint8 -> float64 (N, d)
        return features(backbone, x_uint8.float() / 255.0, normalize, settings.batch, torch.float64)

    images, labels, _ = orbit_images(data.test_x, data.test_y, settings.classes, settings.per_class)
    with eval_mode(backbone):
        Z = orbit_features(backbone, images, settings.family, settings.values, normalize, settings.batch)
        S = orbit_features(backbone, images, settings.family, settings.sweep_values, normalize, settings.batch)
        rx_tr, ry_tr = rotated(data.train_x, probe.train_images)
        rx_te, ry_te = rotated(data.test_x, probe.test_images)
        ztr, zte, z_bn = z_of(rx_tr), z_of(rx_te), z_of(data.train_x[:BN_IMAGES])
        n_tr, n_te = probe.train_images, probe.test_images  # None: the whole split
        z_cls = z_bn[:n_tr] if n_tr is not None and n_tr <= BN_IMAGES else z_of(data.train_x[:n_tr])
        z_test = z_of(data.test_x[:n_te])
    return dict(Z=Z, S=S, labels=labels, ztr=ztr, ry_tr=ry_tr, zte=zte, ry_te=ry_te, z_bn=z_bn, z_cls=z_cls,
                y_cls=data.train_y[:len(z_cls)], z_test=z_test, y_test=data.test_y[:n_te], classes=data.classes)


def measure(fn: Callable[[torch.Tensor], torch.Tensor], normalized: bool, f: dict[str, Any],
            probe: ProbeSettings, z_probes: dict[str, float]) -> dict[str, float]:
    """E4 numbers, rotation probes and the class probe of one protocol: ``h = normalize(fn(normalize(z)))``
    when ``normalized``, else ``normalize(fn(z))``; the probes see ``fn``'s output unnormalised (``fn``: a head
    as ``scale.geometry.measure.head_fn`` wraps it).

    Beside the paper's kappa, a curvature free of the orbit's size (E4.4): ``kappa_rel = mean kappa / mean step``
    over the sweeps (``mini.invariance.sweep_step``: the mean distance between neighbouring sweep points), so
    ``kappa_factor = kappa_rel_factor * step_factor`` exactly; ``step_factor`` is the part that is the sweep
    being longer in h than in z."""
    def h_of(X: torch.Tensor) -> torch.Tensor:  # (..., d) -> normalised (..., k)
        return head_features(fn, X, "normalized" if normalized else "raw")

    def probe_in(X: torch.Tensor) -> torch.Tensor:
        return (fn(l2_normalize(X)) if normalized else fn(X)).float()

    with torch.no_grad():
        zs, hs = l2_normalize(f["S"]), h_of(f["S"])
        zg = orbit_geometry(l2_normalize(f["Z"]), f["labels"], sweep=zs)
        hg = orbit_geometry(h_of(f["Z"]), f["labels"], sweep=hs)
        step_z, step_h = float(sweep_step(zs).mean()), float(sweep_step(hs).mean())
        htr, hte = probe_in(f["ztr"]), probe_in(f["zte"])
        hc_tr, hc_te = probe_in(f["z_cls"]), probe_in(f["z_test"])
    class_h = logistic_probe_accuracy(hc_tr, f["y_cls"], hc_te, f["y_test"], f["classes"])
    rot = {kind: train_probe(htr, f["ry_tr"], hte, f["ry_te"], 4, hidden, probe)["test"]
           for kind, hidden in (("linear", None), ("mlp", probe.hidden_h))}
    return {
        "compression": compression(zg, hg),
        "spread_z": zg.spread.mean, "spread_h": hg.spread.mean,
        "d_intra_z": zg.d_intra.mean, "d_intra_h": hg.d_intra.mean,
        "d_inter_z": zg.d_inter.mean, "d_inter_h": hg.d_inter.mean,
        "d_intra_factor": zg.d_intra.mean / hg.d_intra.mean, "d_inter_factor": zg.d_inter.mean / hg.d_inter.mean,
        "ratio_z": zg.ratio.mean, "ratio_h": hg.ratio.mean,
        "kappa_z": zg.kappa.mean, "kappa_h": hg.kappa.mean, "kappa_factor": hg.kappa.mean / zg.kappa.mean,
        "step_z": step_z, "step_h": step_h, "step_factor": step_h / step_z,
        "kappa_rel_z": zg.kappa.mean / step_z, "kappa_rel_h": hg.kappa.mean / step_h,
        "kappa_rel_factor": (hg.kappa.mean / step_h) / (zg.kappa.mean / step_z),
        "rot_linear_z": z_probes["linear"], "rot_mlp_z": z_probes["mlp"],
        "rot_linear_h": rot["linear"], "rot_mlp_h": rot["mlp"],
        "class_z": z_probes["class"], "class_h": class_h,
    }


def z_probes(f: dict[str, Any], probe: ProbeSettings) -> dict[str, float]:
    """Rotation probes on the backbone's raw z (as the official code's), linear and MLP, and the class probe
    (``scale.geometry.probes.logistic_probe_accuracy``, the headline protocol)."""
    ztr, zte = f["ztr"].float(), f["zte"].float()
    out = {kind: train_probe(ztr, f["ry_tr"], zte, f["ry_te"], 4, hidden, probe)["test"]
           for kind, hidden in (("linear", None), ("mlp", probe.hidden_z))}
    out["class"] = logistic_probe_accuracy(f["z_cls"].float(), f["y_cls"], f["z_test"].float(), f["y_test"],
                                           f["classes"])
    return out


MODEL_PROTOCOLS = ("a_paper", "b_raw", "c_bn_renorm", "d_untrained_nobias", "d_untrained_bias",
                   "f_untrained_bn_renorm", "g_untrained_raw_renorm", "h_untrained_raw_bn")  # one model each
UNTRAINED_RENORM = ("f_untrained_bn_renorm", "g_untrained_raw_renorm", "h_untrained_raw_bn")


def measure_model(model: nn.Module, cfg, data, probe: ProbeSettings, control_seed: int,
                  protocols: tuple[str, ...] = MODEL_PROTOCOLS) -> dict[str, dict[str, float]]:
    """The numbers of ``protocols`` (a subset of ``MODEL_PROTOCOLS``) for one trained model (``data`` on its
    device): the trained head as it is (a, b), with re-estimated BatchNorm statistics (c), the untrained
    heads of its architecture drawn from ``control_seed`` (d), and the untrained head without biases with its
    BatchNorm statistics estimated on the inputs it is measured on (f: normalised z, the twin of c; g: raw z, the
    twin of b) or, as the trained head's under a, on raw z and measured on normalised z (h: the twin of a): trained
    against untrained under one protocol (``orbit_record``)."""
    unknown = set(protocols) - set(MODEL_PROTOCOLS)
    if unknown:
        raise ValueError(f"unknown protocol(s) {sorted(unknown)}; valid: {', '.join(MODEL_PROTOCOLS)}")
    f = model_features(model.backbone, data, GeometrySettings(), probe)
    zp = z_probes(f, probe)
    head = model.projector.eval()
    heads: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], bool]] = {
        "a_paper": (head_fn(head), True), "b_raw": (head_fn(head), False)}
    if "c_bn_renorm" in protocols:
        heads["c_bn_renorm"] = (head_fn(renormalized_bn(head, f["z_bn"])), True)
    if any(p.startswith("d_") for p in protocols):
        controls = untrained_heads(cfg, model.backbone.out_dim, control_seed)
        heads.update({name: (head_fn(c.to(data.train_x.device)), True) for name, c in controls.items()})
    if any(p in protocols for p in UNTRAINED_RENORM):
        bare = control_head(cfg, model.backbone.out_dim, seed=control_seed, bias=False).to(data.train_x.device)
        raw_stats = head_fn(renormalized_bn(bare, f["z_bn"], normalized=False))
        heads["f_untrained_bn_renorm"] = (head_fn(renormalized_bn(bare, f["z_bn"])), True)
        heads["g_untrained_raw_renorm"] = (raw_stats, False)
        heads["h_untrained_raw_bn"] = (raw_stats, True)  # g's head, measured on normalised z as a is
    return {p: measure(*heads[p], f, probe, zp) for p in protocols}
