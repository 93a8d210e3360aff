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
                headline class-label probe (``scale.geometry.probes.class_probe``) and the kNN probe, each with
                the backbone at initialisation beside it, and E3's 4-way rotation probes, linear and MLP, with the
                paper's protocol (``scale.geometry.probes.run_rotation_probes``); accuracies in percent, each gap
                h minus z with its paired bootstrap interval
    training    the premise "the network learned" (``scale.runs.premise``), printed first: the loss against
                chance (or its first step and the collapse detectors), from the run's metrics.jsonl, and z's
                class probes (linear and kNN) against the backbone at initialisation; a verdict of a network
                that did not learn is labelled so

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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mini.heads import parse_head_spec
from scale.analysis import (  # noqa: F401  (the library behind this command, re-exported)
    AnalysisSettings,
    AnalyzeError,
    analyze_model,
    analyze_orbits,
    curvature,
    measure_probes,
)
from scale.engine import disk
from scale.engine.augment import PRESETS
from scale.engine.backbones import BACKBONES, build_backbone
from scale.engine.checkpoint import (
    load_checkpoint,
    unreadable_reason,
)
from scale.engine.config import TrainConfig
from scale.engine.data import CIFAR, load_dataset
from scale.engine.data_errors import DataError
from scale.engine.dataset import Dataset
from scale.engine.devices import device_type
from scale.engine.flags import MAX_COUNT, MAX_IMAGE_SIZE, MAX_WIDTH, SEED_LIMIT, OneLineParser, number
from scale.engine.heads import build_head
from scale.engine.methods import METHODS
from scale.engine.model import SSLModel, output_dim
from scale.engine.modules import ModuleSpecError, import_module_spec, is_spec, not_a_name_message
from scale.engine.recipes import DATASET_DEFAULTS, dataset_key
from scale.geometry.measure import (
    HEAD_INPUTS,
)
from scale.geometry.orbits import FAMILIES
from scale.runs.analysis_report import check_analysis_out, num, write_report
from scale.runs.load import RunError, load_run, load_state_dict_checked
from scale.runs.run_report import (
    accuracy_text,
    gap_text,
    knn_line,
    probe_line,
    training_lines,
    verdict_line,
)
from scale.runs.summary import Estimate, RunSummary, TrainingCheck, Verdict

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
    p = OneLineParser(prog="python -m scale.analyze", description="The paper's measurements (H_eff curvature with its "
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
    p.add_argument("--image-size", type=number(int, 1, MAX_IMAGE_SIZE),
                   help="image side (default: the run's; with a checkpoint the dataset's, "
                   "as scale.run resolves it: 16 for digits, 32 otherwise)")
    p.add_argument("--backbone-width", type=number(int, 1, MAX_WIDTH),
                   help="with a backbone name and a checkpoint: its width (default: "
                   "the dataset's, as scale.run resolves it: resnet18 16 / vit_tiny 48 on digits, 64 / 192 otherwise)")
    p.add_argument("--head-width", type=number(int, 1, MAX_WIDTH), default=256,
                   help="with a head spec and a checkpoint: hidden width "
                   "(default 256, scale.run's on digits)")
    p.add_argument("--head-out", type=number(int, 1, MAX_WIDTH), default=128,
                   help="with a head spec and a checkpoint: output width k "
                   "(default 128, scale.run's on digits)")
    p.add_argument("--head-bias", action=argparse.BooleanOptionalAction, default=True,
                   help="with a head spec and a checkpoint: biases in its Linear layers (default: on)")
    p.add_argument("--head-bn", action=argparse.BooleanOptionalAction, default=False,
                   help="with a head spec and a checkpoint: BatchNorm after each hidden Linear (default: off)")
    p.add_argument("--head-out-bn", action=argparse.BooleanOptionalAction, default=False,
                   help="with a head spec and a checkpoint: BatchNorm on the head's output (default: off)")
    p.add_argument("--hessian-images", type=number(int, 1, MAX_COUNT), default=AnalysisSettings.hessian_images,
                   help="images of the curvature probe batch, two augmented views each (default "
                   f"{AnalysisSettings.hessian_images}: H_eff acts on N = 2 x {AnalysisSettings.hessian_images} x d "
                   "unknowns; a Lanczos step is one Hessian-vector product through the head over that batch)")
    p.add_argument("--lanczos-iter", type=number(int, 1, MAX_COUNT), default=AnalysisSettings.lanczos_iter,
                   help=f"Lanczos steps (Hessian-vector products) for each of H_eff, G and M (default "
                   f"{AnalysisSettings.lanczos_iter}: the extreme eigenvalues converge to their residuals, reported)")
    p.add_argument("--orbits", default=None, help="CLASSESxIMAGES of the test split (default: with a run directory "
                   "the run's own end-of-run orbits; otherwise 5x3, the paper's 15 orbits)")
    p.add_argument("--family", choices=tuple(FAMILIES), default="rotation", help="orbit family: E4's rotations "
                   "(0-330 degrees, kappa on 0-45) or an E6 family across its range (default: rotation)")
    p.add_argument("--steps", type=number(int, 2, MAX_COUNT),
                   help="E6's trajectories: this many values across the family's range "
                   "(rotation: 0-45 degrees), kappa along them (default: E4's orbits)")
    p.add_argument("--head-input", choices=tuple(HEAD_INPUTS), default="normalized", help="the head on the "
                   "L2-normalised z (E4, default) or on the raw z it was trained on (E6)")
    p.add_argument("--probe-images", type=number(int, 1, MAX_COUNT), default=None,
                   help="probes: at most this many images per split, x 4 rotations for E3's (default: with a run "
                   "directory the run's own end-of-run probes, the same images and seed, so that both reports agree "
                   f"on the same weights; otherwise {AnalysisSettings.probe_images}: at most 5 x 2 x "
                   f"{AnalysisSettings.probe_images} backbone "
                   "forwards, the class probe's one per image and the rotation probes' four, and six probe fits; "
                   "the paper's 10000 costs five times that)")
    p.add_argument("--no-probes", action="store_true", help="skip the class and rotation probes")
    p.add_argument("--no-curvature", action="store_true", help="skip H_eff (a head without a loss of the registry)")
    p.add_argument("--seed", type=number(int, 0, SEED_LIMIT - 1), default=0,
                   help="seed of the probe batch, its views and the probes "
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
                            image_size=None if dataset in CIFAR else cfg.image_size)
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
    args = build_parser().parse_args(argv)
    device = torch.device(device_type(args.device))
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
        print(verdict_line(Verdict.from_dict(result["verdict"]), training is not None and training.learned is False))
    if "probes" in result:
        p = result["probes"]
        if p.get("headline") is not None:
            headline = RunSummary.from_dict({"class_probe": p["headline"]}).class_probe
            print(f"headline class probe: {probe_line(headline)}")
            if headline.knn is not None:
                print(f"kNN class probe: {knn_line(headline)}")
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
