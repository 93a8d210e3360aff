r"""``python -m scale.analyze``: the paper's measurements on any model, at the state given.

    python -m scale.analyze RUN_DIR                                   # a finished python -m scale.run
    python -m scale.analyze model.pt --backbone resnet18 --head gelu3 --data digits
    python -m scale.analyze model.pt --backbone mypkg.nets:backbone --head mypkg.nets:head --data folder:imgs

``--backbone`` / ``--head`` take a name of the project (a backbone of ``scale.engine.backbones``, a head spec of
the grammar, with ``--backbone-width``, ``--head-width``, ``--head-out``, ...) or ``module:callable``, an
importable function (or class) that returns the ``nn.Module`` when called without arguments. The
checkpoint is a ``scale.run`` checkpoint, or a state_dict with ``backbone.*`` and ``projector.*`` (or
``head.*``) keys, loaded with ``torch.load(weights_only=True)``. With a run directory, ``--backbone`` /
``--head`` are only needed for a run trained with your own modules.

What is measured (each by the project's one implementation of it):

    curvature   (skipped with ``--no-curvature``, e.g. a head without a loss of the registry)
                H_eff of z -> L(h(z)) at a probe batch (``--hessian-images`` images, two augmented views
                each, the method's loss with its stop-gradients bound there, BatchNorm in eval mode):
                Lanczos (``scale.curvature.lanczos``) on H, G = H - M and M, products in closed form through
                the weights of a head of the grammar (``scale.curvature.blocks.closed_form_operator``), else the
                matrix-free H, G and M of ``scale.curvature.operators`` (autograd graphs); along the
                lowest Ritz vector v of H, ``v^T H v = v^T G v + v^T M v`` splits lambda_min, and the share
                of the negative curvature of each part is ``max(-v^T X v, 0) / sum over X in {G, M}``;
                |M|_F / |H|_F by ``scale.curvature.tracking.hutchinson_ratio``
    orbits      E4 on the test split (``scale.geometry.measure.measure_geometry``): z versus h, the untrained head
                of the same architecture and its bias-free twin as controls; ``--family`` hue, saturation
                or blur takes E6's augmentation families instead of rotations, ``--steps P`` E6's
                trajectories (P values across the family's range, kappa along them), ``--head-input raw``
                the head on the raw z it was trained on (E6) instead of the normalised z (E4).
                ``analyze_orbits`` does the same on images of your own (no labels needed).
    verdict     collapse ratio R = exp(mean over orbits of log(spread_z / spread_h)) with its Student-t
                interval (``scale.geometry.verdict.ratio_estimate``): "compressor" where the interval lies above 1,
                "expander" where it lies below 1, "neither" where it contains 1; beside it the curvature
                ratio kappa(h) / kappa(z) (the same estimator) and the alignment gain, the mean over orbits
                of cos(h, h of the unaugmented image) minus that of z, with its t interval
    probes      on z versus h, at most ``--probe-images`` images per split: the headline class-label probe
                (``scale.geometry.probes.class_probe``) and E3's 4-way rotation probes, linear and MLP, with the
                paper's protocol (``scale.geometry.probes.run_rotation_probes``); accuracies in percent

Outputs, written only once everything is measured: ``OUT/analysis.json`` (numbers, settings, versions),
``OUT/report.md`` and its figures ``spectrum.png``, ``orbits.png``. ``OUT`` defaults to ``RUN_DIR/analysis``
or ``<checkpoint stem>-analysis`` beside the checkpoint. Exit codes: 0 done, 1 data missing or corrupt, 2
bad arguments (a module path that does not import, a checkpoint that does not fit the modules, an empty
folder, ...): one line on stderr and nothing written.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import io
import math
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from scale.curvature.blocks import closed_form_operator
from scale.curvature.lanczos import lanczos
from scale.curvature.operators import EffectiveHessian, difference
from scale.curvature.tracking import hutchinson_ratio, probe_objective, rowwise
from scale.engine.augment import PRESETS, GPUAugment
from scale.engine.backbones import BACKBONES, build_backbone
from scale.engine.checkpoint import atomic_write_bytes, atomic_write_json, atomic_write_text, load_checkpoint
from scale.engine.data import DataError, Dataset, load_dataset
from scale.engine.heads import build_head
from scale.engine.methods import METHODS
from scale.engine.methods import get as get_method
from scale.engine.train import SSLModel, TrainConfig, output_dim
from scale.geometry.measure import (
    CONTROL_SEED,
    HEAD_INPUTS,
    GeometryResult,
    GeometrySettings,
    eval_mode,
    fit_orbits,
    measure_geometry,
    measure_orbits,
    parse_orbits,
)
from scale.geometry.orbits import FAMILIES, check_family
from scale.geometry.probes import ProbeSettings, class_probe, run_rotation_probes
from scale.geometry.verdict import Estimate, mean_estimate, ratio_estimate, verdict
from scale.runs.load import RunError, load_run, load_state_dict_checked
from scale.runs.run_report import device_name, geometry_section, git_commit, probe_section, versions, versions_table
from scale.runs.summary import ProbePair, RotationProbes, RunSummary


class AnalyzeError(ValueError):
    """A bad argument to the analysis; the message names it (exit code 2)."""


@dataclass(frozen=True)
class AnalysisSettings:
    hessian_images: int = 32  # images of the probe batch (x 2 views: n = 64 rows of z)
    lanczos_iter: int = 80
    orbits: str = "5x3"
    family: str = "rotation"  # E4's rotation orbits, or an E6 family: hue, saturation, blur
    steps: int | None = None  # E6's trajectories: this many values across the family's range, kappa along them
    head_input: str = "normalized"  # the head on the normalised z (E4) or on the raw z it was trained on (E6)
    batch: int = 512  # rows per backbone forward pass of the orbits
    probe_images: int | None = 2000  # probes: at most this many base images per split (x 4 rotations)
    probes: bool = True
    curvature: bool = True  # H_eff needs the method's loss: off for a head without one of the registry
    seed: int = 0

    def __post_init__(self) -> None:
        if self.hessian_images < 2:
            raise AnalyzeError(f"--hessian-images must be >= 2, got {self.hessian_images}")
        if self.lanczos_iter < 2:
            raise AnalyzeError(f"--lanczos-iter must be >= 2, got {self.lanczos_iter}")
        if self.probe_images is not None and self.probe_images < 2:
            raise AnalyzeError(f"--probe-images must be >= 2, got {self.probe_images}")
        if self.steps is not None and self.steps < 3:
            raise AnalyzeError(f"--steps must be >= 3 (kappa is a second difference), got {self.steps}")
        if self.head_input not in HEAD_INPUTS:
            raise AnalyzeError(f"--head-input {self.head_input!r}; valid choices: {', '.join(HEAD_INPUTS)}")
        if self.batch < 1:
            raise AnalyzeError(f"the forward batch must be >= 1 rows, got {self.batch}")
        try:
            parse_orbits(self.orbits)
            check_family(self.family)
        except ValueError as exc:
            raise AnalyzeError(str(exc)) from None

    def geometry(self, classes: int, per_class: int) -> GeometrySettings:
        """The orbit settings: E4's orbits of ``family`` (``GeometrySettings.for_family``), or with ``steps``
        E6's trajectories (``GeometrySettings.trajectories``)."""
        kw = dict(classes=classes, per_class=per_class, head_input=self.head_input, batch=self.batch)
        if self.steps is not None:
            return GeometrySettings.trajectories(self.family, self.steps, **kw)
        return GeometrySettings.for_family(self.family, **kw)


# --------------------------------------------------------------------------------------------
# Controls for heads the config cannot rebuild
# --------------------------------------------------------------------------------------------


def untrained_copy(head: nn.Module, seed: int = CONTROL_SEED, bias: bool = True) -> nn.Module:
    """The same architecture freshly initialised (``reset_parameters`` of every submodule that has one,
    from its own generator; the global RNG is untouched); ``bias=False`` zeroes every Linear bias. Drawn on
    the CPU (whose generator alone is forked and seeded), so the control is the same on every device."""
    control = copy.deepcopy(head).cpu()
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        for m in control.modules():
            if hasattr(m, "reset_parameters"):
                m.reset_parameters()
            if not bias and isinstance(m, nn.Linear) and m.bias is not None:
                m.bias.zero_()
    return control


# --------------------------------------------------------------------------------------------
# The measurements
# --------------------------------------------------------------------------------------------


def curvature(model: SSLModel, cfg: TrainConfig, data: Dataset, settings: AnalysisSettings) -> dict[str, Any]:
    """Lanczos on H_eff, G and M at a probe batch of augmented view pairs, and the G/M split of lambda_min."""
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(settings.seed)
    idx = torch.randperm(len(data.train_x), generator=g)[: settings.hessian_images].to(data.train_x.device)
    augment = GPUAugment(cfg.augment, data.image_size, data.mean, data.std).to(device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        x = augment.views(data.train_x[idx].to(device))  # (2b, 3, S, S), rows [view1; view2]
    with eval_mode(model), torch.no_grad():
        z, h, _ = model(x)
    z, h = z.detach().double(), h.detach().double()
    # A momentum target network (BYOL) is not part of the state analysed: the online head's output stands in for it.
    target = h if get_method(cfg.method).ema_target else None
    loss = probe_objective(cfg.method, model, h, target, cfg.temperature, config=cfg)
    if rowwise(model.projector, "eval"):  # products through the head's weights in closed form: no autograd graphs
        H, M, info = closed_form_operator(z, model.projector, loss, dtype=torch.float64)
        ops = {"H": H, "G": difference(H, M, "G"), "M": M}
    else:
        E = EffectiveHessian(z, model.projector, loss, dtype=torch.float64)
        ops, info = {"H": E.H, "G": E.G, "M": E.M}, E.info
    n, d = z.shape
    out: dict[str, Any] = {**info, "n": n, "d": d, "k": h.shape[1], "N": n * d, "method": cfg.method}
    results = {}
    for name, op in ops.items():
        res = lanczos(op, k=1, max_iter=settings.lanczos_iter, seed=settings.seed)
        results[name] = res
        out[name] = {key: val for key, val in res.summary().items()}
        out[name]["ritz_values"] = res.ritz_all.tolist()
    v = results["H"].vectors[:, 0]  # lowest Ritz vector of H, unit norm, float64
    vGv, vMv = float(v @ ops["G"].matvec(v)), float(v @ ops["M"].matvec(v))
    neg_g, neg_m = max(-vGv, 0.0), max(-vMv, 0.0)
    total = neg_g + neg_m
    out["split_at_lambda_min"] = {
        "vHv": results["H"].lambda_min, "vGv": vGv, "vMv": vMv,
        "share_G": neg_g / total if total > 0 else None, "share_M": neg_m / total if total > 0 else None,
    }
    out["M_over_H_frobenius"] = hutchinson_ratio(ops["M"], ops["H"], n * d, 8, torch.float64, z.device, settings.seed)
    return out


def orbit_verdict(per_orbit: dict[str, dict[str, np.ndarray]]) -> dict[str, Any]:
    """From the per-orbit values of ``scale.geometry.measure`` (float64, one per orbit): the collapse ratio
    spread_z / spread_h (geometric mean, t interval) of the head and of the untrained control with their
    verdicts, the curvature ratio kappa_h / kappa_z and the alignment gain (h minus z)."""
    z, h, h0 = (per_orbit[k] for k in ("z", "h", "h_untrained"))
    trained, control = ratio_estimate(z["spread"], h["spread"]), ratio_estimate(z["spread"], h0["spread"])
    gain = mean_estimate(np.asarray(h["alignment"]) - np.asarray(z["alignment"]))
    return {"collapse_ratio": asdict(trained), "collapse_ratio_untrained": asdict(control),
            "verdict": verdict(trained), "verdict_untrained": verdict(control),
            "curvature_ratio": asdict(ratio_estimate(h["kappa"], z["kappa"])), "alignment_gain": asdict(gain)}


def orbit_result(geo: GeometryResult) -> dict[str, Any]:
    """The JSON-ready orbit part of an analysis: ``geometry`` (E4's summary), ``verdict`` (``orbit_verdict``)
    and ``per_orbit`` (every space's spread, kappa and alignment, one value per orbit)."""
    return {"geometry": asdict(geo.summary()), "verdict": orbit_verdict(geo.per_orbit),
            "per_orbit": {space: {k: v.tolist() for k, v in d.items()} for space, d in geo.per_orbit.items()}}


def analyze_orbits(backbone: nn.Module, head: nn.Module, images: torch.Tensor, mean, std,
                   settings: AnalysisSettings = AnalysisSettings(), *, labels: torch.Tensor | None = None,
                   controls: tuple[nn.Module, nn.Module] | None = None,
                   device: str | torch.device | None = None) -> dict[str, Any]:
    """Orbit geometry of z versus h with the untrained controls, and the verdict, on images of your own:
    ``images`` in [0, 1] ``(n, 3, S, S)``, normalised with ``mean`` and ``std`` (per channel) for the
    backbone; ``labels`` ``(n,)`` (optional: without them every image is its own class). The orbits are
    ``settings.family`` as ``settings.geometry`` makes them, the head applied as ``settings.head_input``
    says; the controls default to fresh copies of ``head`` (``untrained_copy``). On ``device`` (default:
    the images'); the modules are moved there and measured in eval mode, their weights untouched. Returns
    ``orbit_result``'s dict."""
    device = torch.device(device) if device is not None else images.device
    images = images.to(device)
    counts = torch.unique(labels, return_counts=True)[1] if labels is not None else torch.ones(len(images))
    if len(counts) < 2:
        raise AnalyzeError(f"orbit geometry needs at least 2 classes (D_inter), the labels hold {len(counts)}")
    controls = controls or (untrained_copy(head), untrained_copy(head, bias=False))
    geo = measure_orbits(backbone.to(device), head.to(device), images, mean, std,
                         settings.geometry(len(counts), int(counts.min())), controls, labels=labels,
                         control_note=f"fresh copies of the head measured (reset_parameters, seed {CONTROL_SEED})")
    return orbit_result(geo)


def analyze_model(backbone: nn.Module, head: nn.Module, data: Dataset, cfg: TrainConfig | None = None, *,
                  predictor: nn.Module | None = None, settings: AnalysisSettings = AnalysisSettings(),
                  device: str | torch.device = "cpu", spec_controls: bool = False) -> dict[str, Any]:
    """Curvature, orbit geometry with controls, verdict and probes of ``backbone`` + ``head`` on ``data``.

    ``cfg`` supplies the method (loss), temperature and augmentation preset of the curvature probe
    (default: SimCLR, ``e3``); ``predictor`` is needed for simsiam/byol. The orbits are the test split's
    (``settings.orbits`` classes x images); the untrained controls are fresh copies of ``head``
    (``untrained_copy``), or, with ``spec_controls``, the head that ``cfg`` names. ``settings`` says what
    to skip (``curvature``, ``probes``). Returns a JSON-ready dict (``write_report`` turns it into report.md).
    """
    device = torch.device(device)
    cfg = cfg or TrainConfig(method="simclr", augment="e3", image_size=data.image_size)
    # The modules are used as given: no re-initialisation (init "normal" skips the collapse scaling).
    model = SSLModel(replace(cfg, init="normal"), backbone=backbone, head=head, predictor=predictor).to(device)
    data = data.to(device)
    t0 = time.perf_counter()
    out: dict[str, Any] = {"settings": asdict(settings), "config": cfg.to_dict()}
    if settings.curvature:
        out["curvature"] = curvature(model, cfg, data, settings)
    classes, per_class = fit_orbits(data.test_y, *parse_orbits(settings.orbits))
    if classes >= 2 and per_class >= 1:
        controls = None if spec_controls else (untrained_copy(head), untrained_copy(head, bias=False))
        with eval_mode(model):
            geo = measure_geometry(model.backbone, model.projector, cfg, data.test_x, data.test_y, data.mean,
                                   data.std, settings.geometry(classes, per_class), controls=controls)
        out.update(orbit_result(geo))
    if settings.probes and min(len(data.train_x), len(data.test_x)) >= 2:
        def embed(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            with eval_mode(model), torch.no_grad():
                z, h, _ = model(x)
            return z, h

        normalize = GPUAugment("none", data.image_size, data.mean, data.std).to(device).normalize
        out["probes"] = measure_probes(embed, normalize, data, settings)
    out.update(seconds=time.perf_counter() - t0, device=device_name(device), versions=versions(),
               git_commit=git_commit(), dataset=data.name)
    return out


def measure_probes(embed, normalize, data: Dataset, settings: AnalysisSettings) -> dict[str, Any]:
    """The headline class probe and E3's rotation probes on at most ``settings.probe_images`` images per
    split, JSON-ready: ``headline`` (a ``ClassProbe``), ``rotation[space][kind]`` (test accuracy in percent,
    space z or h, kind linear or mlp) and the rotation probes' ``rotation_settings``."""
    n_tr, n_te = (min(len(x), settings.probe_images or len(x)) for x in (data.train_x, data.test_x))
    head = class_probe(embed, normalize, data.train_x[:n_tr], data.train_y[:n_tr], data.test_x[:n_te],
                       data.test_y[:n_te], data.classes)
    rot = run_rotation_probes(embed, normalize, data.train_x, data.test_x,
                              ProbeSettings(train_images=n_tr, test_images=n_te, seed=settings.seed))
    return {"headline": asdict(head), "rotation_settings": rot.settings,
            "rotation": {space: {kind: getattr(getattr(rot, kind), space) for kind in ("linear", "mlp")}
                         for space in ("z", "h")}}


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def _fmt(v: float | None, spec: str = ".4g") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:{spec}}"


def _figures(result: dict[str, Any]) -> dict[str, bytes]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = {}
    if "curvature" in result:
        c = result["curvature"]
        fig, ax = plt.subplots(figsize=(6, 3))
        for row, name in enumerate(("H", "G", "M")):
            vals = np.asarray(c[name]["ritz_values"])
            ax.scatter(vals, np.full(len(vals), row), s=8)
        ax.axvline(0.0, color="k", lw=0.5)
        ax.set_yticks([0, 1, 2], ["H_eff", "G", "M"])
        ax.set_xlabel("Ritz values (Lanczos)")
        ax.set_title(f"Spectra at the probe batch (n={c['n']}, d={c['d']})")
        fig.tight_layout()
        figs["spectrum.png"] = _png(fig, plt)
    if "per_orbit" in result:
        sp = result["per_orbit"]
        fig, ax = plt.subplots(figsize=(6, 3))
        x = np.arange(len(sp["z"]["spread"]))
        for key, label in (("z", "backbone z"), ("h", "head h"), ("h_untrained", "untrained head")):
            ax.plot(x, sp[key]["spread"], "o-", ms=3, label=label)
        ax.set_yscale("log")
        ax.set_xlabel("orbit")
        ax.set_ylabel("orbit spread")
        ax.legend(fontsize=8)
        fig.tight_layout()
        figs["orbits.png"] = _png(fig, plt)
    return figs


def _png(fig, plt) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def _ratio_text(d: dict[str, Any]) -> str:
    est = Estimate(**d)
    if est.n == 0:
        return (f"undefined (all {est.excluded} orbits degenerate: the family does not move these images, e.g. hue "
                "or saturation on grey images)")
    return est.fmt() + (f" ({est.excluded} degenerate orbits left out)" if est.excluded else "")


def render_report(result: dict[str, Any], source: str) -> str:
    method = result["config"]["method"]
    L = [f"# Analysis of {source}", "",
         f"Dataset `{result['dataset']}`, method `{method}` "
         f"{'(its loss defines H_eff)' if 'curvature' in result else '(H_eff not measured)'}, device "
         f"{result['device']}, {result['seconds']:.1f} s. Measured at the state given; nothing trained.", ""]
    if "verdict" in result:
        v = result["verdict"]
        L += [f"**Verdict: {v['verdict']}.** Collapse ratio spread(z) / spread(h) = "
              f"{_ratio_text(v['collapse_ratio'])} (geometric mean over orbits, 95 % t interval); the untrained head "
              f"of the same architecture: {_ratio_text(v['collapse_ratio_untrained'])} ({v['verdict_untrained']}). "
              f"Curvature ratio kappa(h) / kappa(z) = {_ratio_text(v['curvature_ratio'])}; alignment gain (mean "
              f"cosine to the unaugmented image, h minus z) = {Estimate(**v['alignment_gain']).fmt('+.3f')}.", ""]
        if v["verdict_untrained"] == v["verdict"] != "neither":
            L += ["The untrained control gets the same verdict: at this state the effect is not learned by the head "
                  "(the bias-free control and the head on the raw z in the orbit table below separate out the "
                  "biases' share).", ""]
    if "curvature" in result:
        L += _curvature_section(result["curvature"])
    # The tables of scale.runs.run_report, from the typed summaries of what was measured here.
    p = result.get("probes")
    typed = RunSummary.from_dict({"geometry": result.get("geometry"), "class_probe": p and p["headline"]})
    if typed.geometry is not None:
        L += [*geometry_section(typed.geometry), "![orbit spread](orbits.png)", ""]
    if p is not None:
        r = p["rotation"]
        rot = RotationProbes(p["rotation_settings"], *(ProbePair(r["z"][k], r["h"][k]) for k in ("linear", "mlp")))
        L += probe_section(typed.class_probe, rot)
    L += ["## Provenance", "", *versions_table(result["versions"], result["git_commit"])]
    return "\n".join(L)


def _curvature_section(c: dict[str, Any]) -> list[str]:
    s = c["split_at_lambda_min"]
    L = ["## Curvature: H_eff = G + M at the probe batch", "",
          f"n = {c['n']} rows (view pairs), d = {c['d']}, k = {c['k']}; BatchNorm {c['bn_mode']}; products "
          f"{c['hvp_mode']}, {c['dtype']}.", "",
          "| operator | lambda_min | lambda_max | residual (min, max) | Lanczos steps |", "|---|---|---|---|---|"]
    for name, label in (("H", "H_eff"), ("G", "G (Gauss-Newton)"), ("M", "M (interaction)")):
        r = c[name]
        L.append(f"| {label} | {_fmt(r['lambda_min'])} | {_fmt(r['lambda_max'])} | {_fmt(r['residual_min'], '.1e')}, "
                 f"{_fmt(r['residual_max'], '.1e')} | {r['n_iter']} |")
    L += ["", f"Along the lowest Ritz vector v of H_eff: v^T H v = {_fmt(s['vHv'])} = v^T G v ({_fmt(s['vGv'])}) + "
          f"v^T M v ({_fmt(s['vMv'])}). Share of the negative curvature: G {_fmt(s['share_G'], '.1%')}, "
          f"M {_fmt(s['share_M'], '.1%')} (shares are max(-v^T X v, 0) over their sum; '-' where neither is "
          f"negative). |M|_F / |H|_F = {_fmt(c['M_over_H_frobenius'])} (Hutchinson, 8 probes).", "",
          "![spectra](spectrum.png)", ""]
    return L


def write_report(result: dict[str, Any], out: str | Path, source: str) -> Path:
    """analysis.json, report.md and the figures into ``out`` (each file written atomically)."""
    out = Path(out)
    figures = _figures(result)
    text = render_report(result, source)
    out.mkdir(parents=True, exist_ok=True)
    for name, data in figures.items():
        atomic_write_bytes(out / name, data)
    atomic_write_json(out / "analysis.json", result)
    atomic_write_text(out / "report.md", text)
    return out / "report.md"


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def import_module_spec(text: str, what: str) -> nn.Module:
    """``module:callable`` -> the ``nn.Module`` that the callable returns (called without arguments)."""
    mod_name, _, attr = text.partition(":")
    if not mod_name or not attr:
        raise AnalyzeError(f"{what} {text!r}: expected a name of the project or module:callable")
    try:
        obj: Any = importlib.import_module(mod_name)
    except Exception as exc:
        raise AnalyzeError(f"{what} {text!r}: cannot import {mod_name} ({type(exc).__name__}: {exc})") from None
    try:
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        raise AnalyzeError(f"{what} {text!r}: {mod_name} has no attribute {attr!r}") from None
    try:
        module = obj()
    except Exception as exc:
        raise AnalyzeError(f"{what} {text!r}: calling it failed ({type(exc).__name__}: {exc})") from None
    if not isinstance(module, nn.Module):
        raise AnalyzeError(f"{what} {text!r} returned {type(module).__name__}, not a torch.nn.Module")
    return module


def _state_from_checkpoint(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise AnalyzeError(f"{path}: no such checkpoint file (or pass a run directory)")
    try:
        ck = load_checkpoint(path)
    except Exception as exc:
        raise AnalyzeError(f"{path} cannot be loaded with weights_only=True ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0][:200]})") from None
    state = ck.get("model", ck) if isinstance(ck, dict) else None
    if not isinstance(state, dict):
        raise AnalyzeError(f"{path} holds no state_dict")
    renamed = {("projector." + k[len("head."):] if k.startswith("head.") else k): v for k, v in state.items()}
    return {k: v for k, v in renamed.items() if not k.startswith("predictor.")}


def build_parser() -> argparse.ArgumentParser:
    class OneLine(argparse.ArgumentParser):
        def error(self, message: str):
            print(f"scale.analyze: error: {message}", file=sys.stderr)
            raise SystemExit(2)

    p = OneLine(prog="python -m scale.analyze", description="The paper's measurements (H_eff curvature with its "
                "G/M split, orbit geometry of z vs h with controls, a compressor/expander verdict, rotation and "
                "class probes) on a finished run or on any checkpoint.", epilog=__doc__.split("What is measured")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", metavar="RUN_DIR|CHECKPOINT", help="a run directory or a checkpoint file")
    p.add_argument("--backbone", help=f"one of {', '.join(BACKBONES)} or module:callable (needed with a checkpoint)")
    p.add_argument("--head", help="a head spec (linear, gelu3, ...) or module:callable (needed with a checkpoint)")
    p.add_argument("--predictor", help="simsiam/byol: a head spec or module:callable for the predictor")
    p.add_argument("--data", default=None, help="dataset: digits, cifar10, cifar100, folder:PATH (default: the "
                   "run's; digits with a checkpoint)")
    p.add_argument("--data-dir", help="where the CIFAR archive lives")
    p.add_argument("--method", choices=tuple(METHODS), help="the loss of H_eff (default: the run's; simclr)")
    p.add_argument("--augment", choices=PRESETS, help="views of the curvature probe (default: the run's; e3)")
    p.add_argument("--image-size", type=int, help="image side (default: the run's; 16 for digits, 32 otherwise)")
    p.add_argument("--backbone-width", type=int, help="with a backbone name: its width (default 16 on digits)")
    p.add_argument("--head-width", type=int, default=256, help="with a head spec: hidden width (default 256)")
    p.add_argument("--head-out", type=int, default=128, help="with a head spec: output width k (default 128)")
    p.add_argument("--head-bias", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--head-bn", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--head-out-bn", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--hessian-images", type=int, default=AnalysisSettings.hessian_images)
    p.add_argument("--lanczos-iter", type=int, default=AnalysisSettings.lanczos_iter)
    p.add_argument("--orbits", default="5x3", help="CLASSESxIMAGES of the test split (default 5x3)")
    p.add_argument("--family", choices=tuple(FAMILIES), default="rotation", help="orbit family: E4's rotations "
                   "(0-330 degrees, kappa on 0-45) or an E6 family across its range (default: rotation)")
    p.add_argument("--steps", type=int, help="E6's trajectories: this many values across the family's range "
                   "(rotation: 0-45 degrees), kappa along them (default: E4's orbits)")
    p.add_argument("--head-input", choices=tuple(HEAD_INPUTS), default="normalized", help="the head on the "
                   "L2-normalised z (E4, default) or on the raw z it was trained on (E6)")
    p.add_argument("--probe-images", type=int, default=AnalysisSettings.probe_images)
    p.add_argument("--no-probes", action="store_true")
    p.add_argument("--no-curvature", action="store_true", help="skip H_eff (a head without a loss of the registry)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--out", help="output folder (default: RUN_DIR/analysis or <checkpoint stem>-analysis)")
    return p


def _module_or_none(text: str | None, what: str) -> nn.Module | None:
    return import_module_spec(text, what) if text and ":" in text else None


def _load(args: argparse.Namespace, device: torch.device) -> tuple[SSLModel, TrainConfig, Dataset, Path, bool]:
    src = Path(args.source)
    backbone_m = _module_or_none(args.backbone, "--backbone")
    head_m = _module_or_none(args.head, "--head")
    pred_m = _module_or_none(args.predictor, "--predictor")
    if src.is_dir():
        try:
            run = load_run(src, backbone=backbone_m, head=head_m, predictor=pred_m)
        except RunError as exc:
            raise AnalyzeError(str(exc)) from None
        cfg, model, out = run.config, run.model, src / "analysis"
        spec_controls = head_m is None
        overrides = {k: getattr(args, k) for k in ("method", "augment") if getattr(args, k)}
        cfg = replace(cfg, **overrides)
        dataset = args.data or cfg.dataset
    else:
        if not args.backbone or not args.head:
            raise AnalyzeError(f"{src} is not a run directory: --backbone and --head are needed with a checkpoint")
        dataset = args.data or "digits"
        image_size = args.image_size or (16 if dataset in ("digits", "synthetic") else 32)
        if backbone_m is None and args.backbone not in BACKBONES:
            raise AnalyzeError(f"--backbone {args.backbone!r}: valid: {', '.join(BACKBONES)} or module:callable")
        width = args.backbone_width or ({"resnet18": 16, "vit_tiny": 48}[args.backbone]
                                         if dataset == "digits" and backbone_m is None else None)
        cfg = TrainConfig(dataset=dataset, method=args.method or "simclr", backbone=args.backbone,
                          backbone_width=width, image_size=image_size,
                          head=args.head if head_m is None else "linear", head_width=args.head_width,
                          head_out=args.head_out, head_bias=args.head_bias, head_bn=args.head_bn,
                          head_out_bn=args.head_out_bn, predictor=args.predictor if pred_m is None else None,
                          augment=args.augment or "e3", device=str(device))
        try:
            backbone = backbone_m or build_backbone(args.backbone, image_size, width)
            head = head_m if head_m is not None else build_head(
                args.head, output_dim(backbone, (2, 3, image_size, image_size)),
                args.head_out, args.head_width, bias=args.head_bias, batchnorm=args.head_bn,
                out_batchnorm=args.head_out_bn)
            model = SSLModel(cfg, backbone=backbone, head=head, predictor=pred_m)
        except ValueError as exc:
            raise AnalyzeError(str(exc)) from None
        try:
            load_state_dict_checked(model, _state_from_checkpoint(src) | _predictor_state(model, src), str(src))
        except RunError as exc:
            raise AnalyzeError(str(exc)) from None
        out, spec_controls = src.with_name(src.stem + "-analysis"), head_m is None
        if head_m is not None:
            cfg = replace(cfg, head=args.head)
    try:
        data = load_dataset(dataset, args.data_dir, download=False,
                            image_size=None if dataset in ("cifar10", "cifar100") else cfg.image_size)
    except ValueError as exc:
        raise AnalyzeError(str(exc)) from None
    return model, cfg, data, Path(args.out) if args.out else out, spec_controls


def _predictor_state(model: SSLModel, src: Path) -> dict[str, torch.Tensor]:
    """A checkpoint's predictor weights, when the model has a predictor (simsiam/byol)."""
    if model.predictor is None:
        return {}
    ck = load_checkpoint(src)
    state = ck.get("model", ck)
    return {k: v for k, v in state.items() if k.startswith("predictor.")}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    device = torch.device("cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
                          else "cpu")
    try:
        settings = AnalysisSettings(hessian_images=args.hessian_images, lanczos_iter=args.lanczos_iter,
                                    orbits=args.orbits, family=args.family, steps=args.steps,
                                    head_input=args.head_input, probe_images=args.probe_images,
                                    probes=not args.no_probes, curvature=not args.no_curvature, seed=args.seed)
        model, cfg, data, out, spec_controls = _load(args, device)
        result = analyze_model(model.backbone, model.projector, data, cfg, predictor=model.predictor,
                               settings=settings, device=device, spec_controls=spec_controls)
    except AnalyzeError as exc:
        print(f"scale.analyze: error: {exc}", file=sys.stderr)
        return 2
    except DataError as exc:
        print(f"scale.analyze: data error: {exc}", file=sys.stderr)
        return 1
    result["source"] = str(args.source)
    report = write_report(result, out, str(args.source))
    if "curvature" in result:
        c = result["curvature"]
        print(f"H_eff: lambda_min {c['H']['lambda_min']:.4g}, lambda_max {c['H']['lambda_max']:.4g}; "
              f"negative curvature from G {_fmt(c['split_at_lambda_min']['share_G'], '.1%')}, "
              f"M {_fmt(c['split_at_lambda_min']['share_M'], '.1%')}")
    if "verdict" in result:
        v = result["verdict"]
        print(f"verdict: {v['verdict']} (collapse ratio {_ratio_text(v['collapse_ratio'])}; untrained head "
              f"{_ratio_text(v['collapse_ratio_untrained'])})")
    if "probes" in result:
        a, r = result["probes"]["headline"]["accuracy"], result["probes"]["rotation"]
        print(f"headline class probe: z {a['z']:.2f} %, h {a['h']:.2f} %; rotation probe, linear: "
              f"z {r['z']['linear']:.2f} %, h {r['h']['linear']:.2f} %")
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
