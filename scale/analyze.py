r"""``python -m scale.analyze``: the paper's measurements on any model, at the state given.

    python -m scale.analyze RUN_DIR                                   # a finished python -m scale.run
    python -m scale.analyze model.pt --backbone resnet18 --head gelu3 --data digits
    python -m scale.analyze model.pt --backbone mypkg.nets:backbone --head mypkg.nets:head --data folder:imgs
    python -m scale.analyze RUN_DIR --recorded-modules                # a run of your own modules, as recorded

``--backbone`` / ``--head`` take a name of the project (a backbone of ``scale.engine.backbones``, a head spec of
the grammar, with ``--backbone-width``, ``--head-width``, ``--head-out``, ...) or ``module:callable``, an
importable function (or class) that returns the ``nn.Module`` when called without arguments. A
``module:callable`` imports that module and runs its code, as ``python -c "import module"`` would: give only
code you trust. It is taken from the command line, or, for a run trained with your own modules, from the
specs its config.json recorded when you opt in with ``--recorded-modules`` (each is named as it is
imported); without that flag reading a run never imports a module. The checkpoint is a ``scale.run``
checkpoint, or a state_dict with ``backbone.*`` and ``projector.*`` (or ``head.*``) keys, loaded with
``torch.load(weights_only=True)``. With a run directory, ``--backbone`` / ``--head`` (or
``--recorded-modules``) are only needed for a run trained with your own modules.

What is measured (each by the project's one implementation of it):

    curvature   (skipped with ``--no-curvature``, e.g. a head without a loss of the registry)
                H_eff of z -> L(h(z)) at a probe batch (``--hessian-images`` images, two augmented views
                each, the method's loss with its stop-gradients bound there, BatchNorm in eval mode):
                Lanczos (``scale.curvature.lanczos``) on H, G = H - M and M, products in closed form through
                the weights of a head of the grammar (``scale.curvature.closed_form.closed_form_operator``), else the
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
    probes      on z versus h, at most ``--probe-images`` images per split (a run directory: the run's own
                end-of-run images, orbits and seed, so that both reports agree on the same weights): the
                headline class-label probe (``scale.geometry.probes.class_probe``) with the backbone at
                initialisation beside it, and E3's 4-way rotation probes, linear and MLP, with the paper's
                protocol (``scale.geometry.probes.run_rotation_probes``); accuracies in percent, each gap h minus
                z with its paired bootstrap interval
    training    the run against its baselines (``scale.geometry.training_check``), printed first: the loss
                against chance and its first step (from the run's metrics.jsonl), the spread of z and h, the
                probe at initialisation; a verdict of a run that did not train is labelled so

Outputs, written only once everything is measured: ``OUT/analysis.json`` (numbers, settings, versions),
``OUT/report.md`` and its figures ``spectrum.png``, ``orbits.png``. ``OUT`` defaults to ``RUN_DIR/analysis``
or ``<checkpoint stem>-analysis`` beside the checkpoint. Exit codes: 0 done, 1 data missing or corrupt, 2
bad arguments (a module path that does not import, a checkpoint that does not fit the modules, an empty
folder, an ``OUT`` holding a report.md or figure that no analysis wrote there, ...), 4 an output could not be
written: one line on stderr and nothing written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mini.collapse_metrics import collapse_stats
from mini.heads import parse_head_spec
from scale.curvature.closed_form import closed_form_operator
from scale.curvature.lanczos import lanczos
from scale.curvature.operators import EffectiveHessian, difference
from scale.curvature.tracking import hutchinson_ratio, probe_objective, rowwise
from scale.engine.augment import PRESETS, GPUAugment
from scale.engine.backbones import BACKBONES, build_backbone
from scale.engine.checkpoint import (
    load_checkpoint,
    unreadable_reason,
)
from scale.engine.data import DataError, Dataset, load_dataset
from scale.engine.heads import build_head
from scale.engine.methods import METHODS
from scale.engine.methods import get as get_method
from scale.engine.modules import ModuleSpecError, import_module_spec, is_spec, not_a_name_message
from scale.engine.progress import Phases
from scale.engine.recipes import DATASET_DEFAULTS, dataset_key
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
    untrained_copy,
)
from scale.geometry.orbits import FAMILIES, check_family
from scale.geometry.probes import plan_probes, run_probes
from scale.geometry.training_check import check_training, initial_backbone
from scale.geometry.verdict import orbit_verdict
from scale.runs.analysis_report import check_analysis_out, num, write_report
from scale.runs.load import RunError, load_run, load_state_dict_checked
from scale.runs.run_report import (
    accuracy_text,
    device_name,
    gap_text,
    git_commit,
    probe_line,
    training_lines,
    verdict_line,
    versions,
)
from scale.runs.summary import Estimate, RunSummary, TrainingCheck, Verdict


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
    # A run's own probe protocol (``from_run``): the images per split of its headline and rotation probes and
    # the rotation probes' seed, so that the analysis of its weights repeats its end-of-run probes
    class_images: tuple[int, int] | None = None
    rotation_images: tuple[int, int] | None = None
    rotation_seed: int | None = None
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

    def from_run(self, summary: dict[str, Any] | None) -> AnalysisSettings:
        """These settings with the probe protocol of a run's end-of-run measurement (its summary.json): the
        headline probe on the same images, the rotation probes on the same base images with the same seed.
        Unchanged where the run recorded none."""
        typed = RunSummary.from_dict(summary or {})
        changes: dict[str, Any] = {}
        if typed.class_probe is not None:
            changes["class_images"] = (typed.class_probe.train_images, typed.class_probe.test_images)
        if typed.rotation_probes is not None:
            rs = typed.rotation_probes.settings
            changes.update(rotation_images=(rs["train_base_images"], rs["test_base_images"]),
                           rotation_seed=rs.get("seed", 0))
        return replace(self, **changes)

    def orbits_of_run(self, summary: dict[str, Any] | None) -> AnalysisSettings:
        """These settings with the E4 orbits a run's end-of-run measurement asked for (unchanged where none)."""
        asked = ((summary or {}).get("geometry") or {}).get("settings", {}).get("asked")
        return replace(self, orbits=asked) if isinstance(asked, str) else self

    def probe_sizes(self, data: Dataset) -> tuple[tuple[int, int], tuple[int, int], int]:
        """The headline probe's (training, test) images, the rotation probes' base images per split and their
        seed: the run's protocol where ``from_run`` recorded one, else at most ``probe_images`` per split."""
        capped = tuple(min(len(x), self.probe_images or len(x)) for x in (data.train_x, data.test_x))
        fit = lambda sizes: (min(sizes[0], len(data.train_x)), min(sizes[1], len(data.test_x)))  # noqa: E731
        return (fit(self.class_images or capped), fit(self.rotation_images or capped),
                self.seed if self.rotation_seed is None else self.rotation_seed)

    def geometry(self, classes: int, per_class: int) -> GeometrySettings:
        """The orbit settings: E4's orbits of ``family`` (``GeometrySettings.for_family``), or with ``steps``
        E6's trajectories (``GeometrySettings.trajectories``)."""
        kw = dict(classes=classes, per_class=per_class, head_input=self.head_input, batch=self.batch)
        if self.steps is not None:
            return GeometrySettings.trajectories(self.family, self.steps, **kw)
        return GeometrySettings.for_family(self.family, **kw)


# --------------------------------------------------------------------------------------------
# The measurements
# --------------------------------------------------------------------------------------------


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
    backbone at initialisation (``scale.geometry.training_check.initial_backbone``). ``history``: the run's
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
        out["training"] = asdict(check_training(cfg, records, (z.shape[1], h.shape[1]), headline, how))
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


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def _state_from_checkpoint(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise AnalyzeError(f"{path}: no such checkpoint file (or pass a run directory)")
    try:
        ck = load_checkpoint(path)
    except Exception as exc:
        raise AnalyzeError(f"{path} is not a readable checkpoint ({unreadable_reason(exc)})") from None
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
    p.add_argument("source", metavar="RUN_DIR|CHECKPOINT", help="a run directory (python -m scale.run, scale.train, "
                   "Trainer) or a checkpoint file (a scale.run checkpoint, or a state_dict with backbone.* and "
                   "projector.* or head.* keys)")
    p.add_argument("--backbone", help=f"one of {', '.join(BACKBONES)} or module:callable (needed with a checkpoint; "
                   "with a run directory, only for a run trained with your own backbone)")
    p.add_argument("--head", help="a head spec (linear, gelu3, ...) or module:callable (needed with a checkpoint; "
                   "with a run directory, only for a run trained with your own head)")
    p.add_argument("--predictor", help="simsiam/byol: a head spec or module:callable for the predictor")
    p.add_argument("--recorded-modules", action="store_true", help="with a run directory of your own modules: "
                   "import the module:callable specs its config.json recorded instead of giving them again (this "
                   "runs their code; each is named as it is imported)")
    p.add_argument("--data", default=None, help="dataset: digits, cifar10, cifar100, folder:PATH (default: the "
                   "run's; digits with a checkpoint)")
    p.add_argument("--data-dir", help="where the CIFAR archive lives (default: $SCALE_DATA_DIR or "
                   "~/.cache/headgeometry/data; never downloaded here)")
    p.add_argument("--method", choices=tuple(METHODS), help="the loss of H_eff (default: the run's; simclr)")
    p.add_argument("--augment", choices=PRESETS, help="views of the curvature probe (default: the run's; e3)")
    p.add_argument("--image-size", type=int, help="image side (default: the run's; with a checkpoint the dataset's, "
                   "as scale.run resolves it: 16 for digits, 32 otherwise)")
    p.add_argument("--backbone-width", type=int, help="with a backbone name and a checkpoint: its width (default: "
                   "the dataset's, as scale.run resolves it: resnet18 16 / vit_tiny 48 on digits, 64 / 192 otherwise)")
    p.add_argument("--head-width", type=int, default=256, help="with a head spec and a checkpoint: hidden width "
                   "(default 256, scale.run's on digits)")
    p.add_argument("--head-out", type=int, default=128, help="with a head spec and a checkpoint: output width k "
                   "(default 128, scale.run's on digits)")
    p.add_argument("--head-bias", action=argparse.BooleanOptionalAction, default=True,
                   help="with a head spec and a checkpoint: biases in its Linear layers (default: on)")
    p.add_argument("--head-bn", action=argparse.BooleanOptionalAction, default=False,
                   help="with a head spec and a checkpoint: BatchNorm after each hidden Linear (default: off)")
    p.add_argument("--head-out-bn", action=argparse.BooleanOptionalAction, default=False,
                   help="with a head spec and a checkpoint: BatchNorm on the head's output (default: off)")
    p.add_argument("--hessian-images", type=int, default=AnalysisSettings.hessian_images,
                   help="images of the curvature probe batch, two augmented views each (default "
                   f"{AnalysisSettings.hessian_images}: H_eff acts on N = 2 x {AnalysisSettings.hessian_images} x d "
                   "unknowns; a Lanczos step is one Hessian-vector product through the head over that batch)")
    p.add_argument("--lanczos-iter", type=int, default=AnalysisSettings.lanczos_iter,
                   help=f"Lanczos steps (Hessian-vector products) for each of H_eff, G and M (default "
                   f"{AnalysisSettings.lanczos_iter}: the extreme eigenvalues converge to their residuals, reported)")
    p.add_argument("--orbits", default=None, help="CLASSESxIMAGES of the test split (default: with a run directory "
                   "the run's own end-of-run orbits; otherwise 5x3, the paper's 15 orbits)")
    p.add_argument("--family", choices=tuple(FAMILIES), default="rotation", help="orbit family: E4's rotations "
                   "(0-330 degrees, kappa on 0-45) or an E6 family across its range (default: rotation)")
    p.add_argument("--steps", type=int, help="E6's trajectories: this many values across the family's range "
                   "(rotation: 0-45 degrees), kappa along them (default: E4's orbits)")
    p.add_argument("--head-input", choices=tuple(HEAD_INPUTS), default="normalized", help="the head on the "
                   "L2-normalised z (E4, default) or on the raw z it was trained on (E6)")
    p.add_argument("--probe-images", type=int, default=None,
                   help="probes: at most this many images per split, x 4 rotations for E3's (default: with a run "
                   "directory the run's own end-of-run probes, the same images and seed, so that both reports agree "
                   f"on the same weights; otherwise {AnalysisSettings.probe_images}: at most 5 x 2 x "
                   f"{AnalysisSettings.probe_images} backbone "
                   "forwards, the class probe's one per image and the rotation probes' four, and six probe fits; "
                   "the paper's 10000 costs five times that)")
    p.add_argument("--no-probes", action="store_true", help="skip the class and rotation probes")
    p.add_argument("--no-curvature", action="store_true", help="skip H_eff (a head without a loss of the registry)")
    p.add_argument("--seed", type=int, default=0, help="seed of the probe batch, its views and the probes "
                   "(default 0)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="default: auto (CUDA if "
                   "available)")
    p.add_argument("--out", help="output folder (default: RUN_DIR/analysis or <checkpoint stem>-analysis)")
    p.add_argument("--quiet", action="store_true", help="no progress lines (each phase, its time, the estimated "
                   "rest); the results are printed either way")
    return p


def _is_head_spec(text: str) -> bool:
    try:
        parse_head_spec(text)
    except ValueError:
        return False
    return True


NAMES = {"--backbone": (lambda t: t in BACKBONES, f"a backbone of the project (valid: {', '.join(BACKBONES)})"),
         "--head": (_is_head_spec, "a head spec of the grammar (linear, gelu3, ...)"),
         "--predictor": (_is_head_spec, "a head spec of the grammar (linear, gelu2, ...)")}


def _module_or_none(text: str | None, what: str) -> nn.Module | None:
    """The module of a ``module:callable`` value, ``None`` for a name of the project; a value that is neither
    gets its own line (``scale.engine.modules.not_a_name_message``)."""
    if not text:
        return None
    if is_spec(text):
        return import_module_spec(text, what)
    valid, names = NAMES[what]
    if not valid(text):
        raise AnalyzeError(not_a_name_message(text, what, names))
    return None


@dataclass
class Loaded:
    """What the command analyses: the model, its config and data, where the report goes, whether the controls
    are rebuilt from the config, and for a run directory its per-epoch records and summary."""

    model: SSLModel
    cfg: TrainConfig
    data: Dataset
    out: Path
    spec_controls: bool
    history: list[dict[str, Any]] | None = None
    summary: dict[str, Any] | None = None


def _load(args: argparse.Namespace, device: torch.device) -> Loaded:
    src = Path(args.source)
    history = summary = None
    backbone_m = _module_or_none(args.backbone, "--backbone")
    head_m = _module_or_none(args.head, "--head")
    pred_m = _module_or_none(args.predictor, "--predictor")
    if src.is_dir():
        try:
            run = load_run(src, backbone=backbone_m, head=head_m, predictor=pred_m,
                           recorded_modules=args.recorded_modules, log=print)
        except RunError as exc:
            raise AnalyzeError(str(exc)) from None
        cfg, model, out = run.config, run.model, src / "analysis"
        spec_controls, history, summary = head_m is None, run.metrics, run.summary
        overrides = {k: getattr(args, k) for k in ("method", "augment") if getattr(args, k)}
        cfg = replace(cfg, **overrides)
        dataset = args.data or cfg.dataset
    else:
        if not args.backbone or not args.head:
            raise AnalyzeError(f"{src} is not a run directory: --backbone and --head are needed with a checkpoint")
        dataset = args.data or "digits"
        if backbone_m is None and args.backbone not in BACKBONES:
            raise AnalyzeError(f"--backbone {args.backbone!r}: valid: {', '.join(BACKBONES)} or module:callable")
        # the dataset's adjustments as scale.run resolves them (scale.engine.recipes)
        adjust = DATASET_DEFAULTS.get(dataset_key(dataset), {})
        image_size = args.image_size or adjust.get("image_size", 32)
        width = args.backbone_width or (adjust.get("backbone_width", {}).get(args.backbone)
                                         if backbone_m is None else None)
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
    return Loaded(model, cfg, data, Path(args.out) if args.out else out, spec_controls, history, summary)


def _predictor_state(model: SSLModel, src: Path) -> dict[str, torch.Tensor]:
    """A checkpoint's predictor weights, when the model has a predictor (simsiam/byol)."""
    if model.predictor is None:
        return {}
    ck = load_checkpoint(src)
    state = ck.get("model", ck)
    return {k: v for k, v in state.items() if k.startswith("predictor.")}


def main(argv: list[str] | None = None) -> int:
    from scale.engine import disk

    args = build_parser().parse_args(argv)
    device = torch.device("cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
                          else "cpu")
    try:
        settings = AnalysisSettings(hessian_images=args.hessian_images, lanczos_iter=args.lanczos_iter,
                                    orbits=args.orbits or AnalysisSettings.orbits, family=args.family, steps=args.steps,
                                    head_input=args.head_input,
                                    probe_images=args.probe_images or AnalysisSettings.probe_images,
                                    probes=not args.no_probes, curvature=not args.no_curvature, seed=args.seed)
        got = _load(args, device)
        out = got.out
        check_analysis_out(out)  # a user's file of an output name refused before the work
        if args.probe_images is None:  # a run's own probe protocol: its end-of-run probes repeated on its weights
            settings = settings.from_run(got.summary)
        if args.orbits is None and args.family == "rotation" and args.steps is None:  # and its own E4 orbits
            settings = settings.orbits_of_run(got.summary)
        result = analyze_model(got.model.backbone, got.model.projector, got.data, got.cfg,
                               predictor=got.model.predictor, settings=settings, device=device,
                               spec_controls=got.spec_controls, history=got.history,
                               log=None if args.quiet else (lambda line: print(line, flush=True)))
    except (AnalyzeError, ModuleSpecError, disk.NotOurs) as exc:
        print(f"scale.analyze: error: {exc}", file=sys.stderr)
        return 2
    except DataError as exc:
        print(f"scale.analyze: data error: {exc}", file=sys.stderr)
        return 1
    result["source"] = str(args.source)
    try:
        report = write_report(result, out, str(args.source))
    except disk.NotOurs as exc:
        print(f"scale.analyze: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"scale.analyze: error: cannot write {exc.filename or out}: {exc.strerror or exc}", file=sys.stderr)
        return 4
    if "curvature" in result:
        c = result["curvature"]
        print(f"H_eff: lambda_min {c['H']['lambda_min']:.4g}, lambda_max {c['H']['lambda_max']:.4g}; "
              f"negative curvature from G {num(c['split_at_lambda_min']['share_G'], '.1%')}, "
              f"M {num(c['split_at_lambda_min']['share_M'], '.1%')}")
    training = TrainingCheck.from_dict(result["training"]) if result.get("training") else None
    for line in training_lines(training):
        print(line)
    if "verdict" in result:
        print(verdict_line(Verdict.from_dict(result["verdict"]), training is not None and not training.trained))
    if "probes" in result:
        p = result["probes"]
        if p.get("headline") is not None:
            headline = RunSummary.from_dict({"class_probe": p["headline"]}).class_probe
            print(f"headline class probe: {probe_line(headline)}")
        r, rs = p["rotation"], p["rotation_settings"]
        n, gap = rs["rotation_samples"]["test"], (p.get("rotation_gaps") or {}).get("linear")
        print(f"rotation probe, linear ({rs['test_base_images']} test images x 4 turns, seed {rs['seed']}): z "
              f"{accuracy_text(r['z']['linear'], n)}, h {accuracy_text(r['h']['linear'], n)} (h minus z: "
              f"{gap_text(Estimate(**gap) if gap else None, r['h']['linear'] - r['z']['linear'])})")
    for note in result.get("notes", []):
        print(f"note: {note}")
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
