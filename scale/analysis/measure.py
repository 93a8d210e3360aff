"""The paper's measurements of a model at the state given (``python -m scale.analyze``'s, as functions): the
curvature of ``H_eff`` split into ``G`` and ``M`` at a probe batch, the orbit geometry with its untrained controls
and verdict, and the probes; what each measures is listed in ``scale.analyze``'s docstring."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

import torch
from torch import nn

from mini.collapse_metrics import collapse_stats
from scale.analysis.settings import AnalysisSettings, AnalyzeError
from scale.curvature.closed_form import closed_form_operator
from scale.curvature.lanczos import lanczos
from scale.curvature.operators import EffectiveHessian, difference
from scale.curvature.tracking import hutchinson_ratio, probe_objective, rowwise
from scale.engine.augment import GPUAugment
from scale.engine.config import TrainConfig
from scale.engine.dataset import Dataset
from scale.engine.methods import get as get_method
from scale.engine.model import SSLModel
from scale.engine.progress import Phases
from scale.geometry.initial import initial_backbone, weight_shift
from scale.geometry.measure import (
    CONTROL_SEED,
    GeometryResult,
    eval_mode,
    fit_orbits,
    measure_geometry,
    measure_orbits,
    parse_orbits,
    untrained_copy,
)
from scale.geometry.probes import plan_probes, run_probes
from scale.geometry.verdict import orbit_verdict
from scale.runs.premise import check_training
from scale.runs.run_report import (
    device_name,
    git_commit,
    versions,
)
from scale.runs.summary import RunSummary

DEFAULTS = AnalysisSettings()  # the flags' defaults (a frozen dataclass: safe as a default argument)
CURVATURE_PHASES = ("Lanczos on H_eff", "Lanczos on G", "Lanczos on M", "|M|/|H| (Hutchinson)")
HUTCHINSON_PROBES = 8


def plan_curvature(phases: Phases, settings: AnalysisSettings) -> None:
    """The curvature's phases, sized in Hessian-vector products (Lanczos: at most ``lanczos_iter`` each)."""
    for name in CURVATURE_PHASES[:3]:
        phases.plan(name, settings.lanczos_iter, "products")
    phases.plan(CURVATURE_PHASES[3], 2 * HUTCHINSON_PROBES, "products")


def curvature(model: SSLModel, cfg: TrainConfig, data: Dataset, settings: AnalysisSettings,
              phases: Phases | None = None) -> dict[str, Any]:
    """Lanczos on H_eff, G and M at a probe batch of augmented view pairs, and the G/M split of lambda_min
    (``phases``: planned by ``plan_curvature``, each part announced and timed)."""
    if phases is None:
        phases = Phases("curvature", None)
        plan_curvature(phases, settings)
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
    for (name, op), phase in zip(ops.items(), CURVATURE_PHASES):
        with phases.run(phase, f"N = {n} x {d} = {n * d}, at most {settings.lanczos_iter} products"):
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
    with phases.run(CURVATURE_PHASES[3], f"{HUTCHINSON_PROBES} Rademacher vectors through M and H"):
        out["M_over_H_frobenius"] = hutchinson_ratio(ops["M"], ops["H"], n * d, HUTCHINSON_PROBES, torch.float64,
                                                     z.device, settings.seed)
    return out


def orbit_result(geo: GeometryResult) -> dict[str, Any]:
    """The JSON-ready orbit part of an analysis: ``geometry`` (E4's summary), ``verdict`` (``orbit_verdict``)
    and ``per_orbit`` (every space's spread, kappa and alignment, one value per orbit)."""
    return {"geometry": asdict(geo.summary()), "verdict": asdict(orbit_verdict(geo.per_orbit)),
            "per_orbit": {space: {k: v.tolist() for k, v in d.items()} for space, d in geo.per_orbit.items()}}


def analyze_orbits(backbone: nn.Module, head: nn.Module, images: torch.Tensor, mean, std,
                   settings: AnalysisSettings = DEFAULTS, *, labels: torch.Tensor | None = None,
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
                  predictor: nn.Module | None = None, settings: AnalysisSettings = DEFAULTS,
                  device: str | torch.device = "cpu", spec_controls: bool = False,
                  history: list[dict[str, Any]] | None = None,
                  log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Curvature, orbit geometry with controls, verdict and probes of ``backbone`` + ``head`` on ``data``.

    ``cfg`` supplies the method (loss), temperature and augmentation preset of the curvature probe
    (default: SimCLR, ``e3``); ``predictor`` is needed for simsiam/byol. The orbits are the test split's
    (``settings.orbits`` classes x images; without labels, images each their own class); the untrained
    controls are fresh copies of ``head`` (``untrained_copy``), or, with ``spec_controls``, the head that
    ``cfg`` names. ``settings`` says what to skip (``curvature``, ``probes``); the class probe is skipped,
    with the reason in ``notes``, where the data has no labels or one class; beside it the same probe of the
    backbone at initialisation (``scale.geometry.initial.initial_backbone``). ``history``: the run's
    per-epoch records (``metrics.jsonl``), for the training check (``training``: whether the run moved from
    its baselines; without a history only the probe and the spread of the features are checked). ``log``:
    each phase announced with its size, its time and an estimate of the rest (``scale.engine.progress``).
    Returns a JSON-ready dict (``write_report`` turns it into report.md).
    """
    device = torch.device(device)
    cfg = cfg or TrainConfig(method="simclr", augment="e3", image_size=data.image_size)
    # The modules are used as given: no re-initialisation (init "normal" skips the collapse scaling).
    model = SSLModel(replace(cfg, init="normal"), backbone=backbone, head=head, predictor=predictor).to(device)
    data = data.to(device)
    labelled = getattr(data, "labelled", True)
    out: dict[str, Any] = {"settings": asdict(settings), "config": cfg.to_dict(), "notes": []}
    classes, per_class = parse_orbits(settings.orbits)
    classes, per_class = fit_orbits(data.test_y, classes, per_class) if labelled else (
        min(classes * per_class, len(data.test_x)), 1)
    n_class, n_rotation, _ = settings.probe_sizes(data)
    phases = Phases("scale.analyze", log)
    if settings.curvature:
        plan_curvature(phases, settings)
    geometry = classes >= 2 and per_class >= 1
    if geometry:
        g = settings.geometry(classes, per_class)
        phases.plan("orbit geometry", classes * per_class * (len(g.values) + len(g.sweep_values) + 1), "images")
    else:
        out["notes"].append("orbit geometry skipped: the test split has fewer than 2 classes (D_inter needs 2)")
    probes = settings.probes and min(len(data.train_x), len(data.test_x)) >= 2
    if probes:
        plan_probes(phases, n_class, n_rotation, initial=True)
    if settings.curvature:
        out["curvature"] = curvature(model, cfg, data, settings, phases)
    if geometry:
        controls = None if spec_controls else (untrained_copy(head), untrained_copy(head, bias=False))
        with phases.run("orbit geometry", f"{classes * per_class} test images, z vs h and the untrained controls"), \
                eval_mode(model):
            geo = measure_geometry(model.backbone, model.projector, cfg, data.test_x,
                                   data.test_y if labelled else None, data.mean, data.std,
                                   g, controls=controls)
        out.update(orbit_result(geo))
    if probes:
        def embed(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            with eval_mode(model), torch.no_grad():
                z, h, _ = model(x)
            return z, h

        normalize = GPUAugment("none", data.image_size, data.mean, data.std).to(device).normalize
        start, how = initial_backbone(cfg, model.backbone)
        out["probes"] = measure_probes(embed, normalize, data, settings, phases, out["notes"], torch.no_grad()(start))
        with eval_mode(model), torch.no_grad():
            z, h, _ = model(normalize(data.train_x[: cfg.probe_size]))
        spreads = {"z_std": collapse_stats(z.double())[0], "h_std": collapse_stats(h.double())[0]}
        # without a training record the spreads of the analysed features stand in for the last epoch's
        records = [dict(r) for r in history] if history else [spreads]
        headline = RunSummary.from_dict({"class_probe": out["probes"]["headline"]}).class_probe
        out["training"] = asdict(check_training(cfg, records, (z.shape[1], h.shape[1]), headline, how,
                                                weight_shift(cfg, model.backbone, start)))
    out.update(seconds=phases.elapsed(), device=device_name(device), versions=versions(),
               git_commit=git_commit(), dataset=data.name)
    return out


def measure_probes(embed, normalize, data: Dataset, settings: AnalysisSettings, phases: Phases | None = None,
                   notes: list[str] | None = None, initial: Callable[[torch.Tensor], torch.Tensor] | None = None
                   ) -> dict[str, Any]:
    """The headline class probe and E3's rotation probes on the images ``settings.probe_sizes`` gives (a run's
    own protocol, or at most ``settings.probe_images`` per split), JSON-ready: ``headline`` (a ``ClassProbe``,
    with the backbone at initialisation ``initial`` probed beside; ``None`` where ``class_probe_skip_reason``
    gives a reason, appended to ``notes``), ``rotation[space][kind]`` (test accuracy in percent, space z or h,
    kind linear or mlp), the rotation probes' ``rotation_settings`` and their ``rotation_gaps`` (h minus z per
    kind, with its paired interval)."""
    n_class, n_rotation, seed = settings.probe_sizes(data)
    if phases is None:
        phases = Phases("probes", None)
        plan_probes(phases, n_class, n_rotation, initial=initial is not None)
    head, rot = run_probes(embed, normalize, data, n_class, n_rotation, seed, phases,
                           notes if notes is not None else [], initial)
    head = asdict(head) if head is not None else None
    return {"headline": head, "rotation_settings": rot.settings,
            "rotation": {space: {kind: getattr(getattr(rot, kind), space) for kind in ("linear", "mlp")}
                         for space in ("z", "h")},
            "rotation_gaps": {k: asdict(v) for k, v in (rot.gaps or {}).items()}}
