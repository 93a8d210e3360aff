r"""``python -m scale.e4_study``: how much of E4's orbit compression is learned, how much is the protocol.

E4 (docs/paper.md; the official ``run_orbit_visualization_experiment``) measures orbits with the head applied to
L2-normalised backbone features, ``h = normalize(head(normalize(z)))``, while the head was trained on the
raw ``z``. With BatchNorm in eval mode, the running statistics gathered on raw ``z`` then meet inputs of
another scale. This study trains the E3 model exactly as ``scale.paper`` does (the official code's
bias-free ReLU + BatchNorm head, one-direction InfoNCE, its augmentation; on digits the dataset's CPU
sizes) and measures the same trained model under several protocols, seed by seed:

    a  paper        normalize(head(normalize(z))), BatchNorm running statistics from training (raw z)
    b  raw          normalize(head(z)): the head on the input it was trained on
    c  bn-renorm    as a, with the BatchNorm running statistics re-estimated on normalised z of the
                    training images (the weights untouched)
    d  untrained    as a, with an untrained head of the same layers: without biases (the paper's
                    architecture) and with default-initialised biases
    e  trained-on-normalised
                    as a, for a second model trained with the head fed normalize(z) (same seed, same
                    batches), so that the protocol is the one it was trained under
    f  untrained, BN re-estimated
                    the untrained head without biases under c's protocol (BatchNorm statistics estimated on
                    the normalised z it is measured on): trained (c) against untrained (f) under one protocol
    g  untrained, raw, BN re-estimated
                    the same on raw z (statistics from raw z): the untrained twin of b

Every protocol gets the E4 numbers (compression = mean spread(z) / mean spread(h), D_intra, D_inter, their
ratio, kappa along the 0-45 degree sweep and kappa divided by the sweep's mean step, a curvature free of the
orbit's size; ``mini.invariance`` through the helpers of ``scale.geometry.measure``) and
the E3 rotation probes on z and on that protocol's h (linear and MLP, ``scale.geometry.probes.train_probe``; the
official probes use the raw head output, protocol b), and the class probe of the headline protocol
(``scale.geometry.probes.logistic_probe_accuracy``). ``measure_model`` measures protocols a-d, f, g of any trained
model (``scale.replicate`` uses it for E5's heads). Each number is a mean over seeds with a 95 %
t interval; ``OUT/results.json`` holds every seed's values (written after each seed: a rerun continues, with
the seeds whose training config and ``--probe-images`` are this run's, measured again when they predate the
class probe; a file holding seeds of another plan is refused, exit 2, and one that is not a results file of
this study, exit 1, each left as it is). The store is append-only: a rerun with fewer ``--seeds`` reports
on seeds 0 .. N-1 and keeps every other stored seed in the file; a report.md or e4_study.png in ``OUT``
without a results file of this study is someone else's and refused (exit 2). Exit codes: 0 done, 1 a
results file or data that cannot be read, 2 arguments or another plan refused, 4 an output not writable.
``OUT/report.md`` and ``OUT/e4_study.png`` are written at the end.
The protocols and their measurements live in ``scale.geometry.protocols``; this command trains, stores and reports.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from scale.geometry.measure import (
    CONTROL_SEED,
    GeometrySettings,
    head_fn,
)
from scale.geometry.probes import ProbeSettings
from scale.geometry.protocols import (  # noqa: F401  (the protocols this study measures, re-exported)
    BN_IMAGES,
    METRICS,
    MODEL_PROTOCOLS,
    PROTOCOLS,
    NormalizedInput,
    measure,
    measure_model,
    model_features,
    renormalized_bn,
    untrained_heads,
    z_probes,
)
from scale.geometry.verdict import t_interval as _t_interval
from scale.runs.faults import guarded

# --------------------------------------------------------------------------------------------
# Training (scale.paper's E3 plan, through scale.run's configuration and scale.engine.train's Trainer)
# --------------------------------------------------------------------------------------------


def run_config(argv: list[str], device: torch.device | str = "cpu"):
    """The ``TrainConfig`` that ``python -m scale.run ARGV`` resolves on ``device`` (a run of ``scale.paper``'s plan,
    with any flags appended: the last occurrence of a flag wins)."""
    from scale.run import build_parser, resolve_config

    return resolve_config(build_parser().parse_args(argv), torch.device(device))


def e3_config(dataset: str, seed: int, epochs: int | None = None, data_dir: str | None = None,
              device: torch.device | str = "cpu", extra: tuple[str, ...] = ()):
    """The ``TrainConfig`` of ``scale.paper``'s E3E4 run for ``dataset`` and ``seed`` (CPU sizes on digits);
    ``extra``: ``scale.run`` flags appended (a smaller run for a pipeline check)."""
    from scale.paper import plan

    run = plan(dataset, "resnet18", quick=False, experiments=("E3E4",), seeds=seed + 1, epochs=epochs)[seed]
    return run_config(run.argv + (["--data-dir", data_dir] if data_dir else []) + list(extra), device)


def train(cfg, data, normalized_input: bool, device: torch.device | str = "cpu", run_dir: Path | None = None,
          ready: Callable[[Any, bool], None] | None = None) -> nn.Module:
    """Train the E3 model; ``normalized_input``: the projector sees ``normalize(z)`` (protocol e). The
    wrapper holds the same parameters, so the optimiser the trainer built still updates them. ``run_dir``: the
    trainer's checkpoints go there; ``ready(trainer, normalized_input)`` is called before training (a caller
    resumes it from its checkpoint there: ``scale.ledger.work``)."""
    from scale.engine.train import Trainer

    trainer = Trainer(cfg, data, torch.device(device), run_dir=run_dir, progress=False, log=None)
    if normalized_input:
        trainer.model.projector = NormalizedInput(trainer.model.projector)
    try:
        if ready is not None:
            ready(trainer, normalized_input)
        trainer.fit()
    finally:
        close_augment(trainer)
    return trainer.model.eval()


def close_augment(trainer) -> None:
    """Stop the trainer's augmentation worker processes now (the per-image CPU path), also when training was
    stopped: a study or a ledger builds a trainer per run and must not leave workers behind."""
    close = getattr(trainer.augment, "close", None)
    if close is not None:
        close()


def one_seed(dataset: str, seed: int, epochs: int | None, data_dir: str | None, probe_images: int | None,
             log: Callable[[str], None], device: torch.device | str = "cpu", extra: tuple[str, ...] = (),
             work: dict[str, Path] | None = None, ready: Callable[[Any, bool], None] | None = None
             ) -> dict[str, Any]:
    """Every protocol's numbers for one seed (two trainings: raw-z head, normalised-z head); ``extra``: flags
    appended to the run's ``scale.run`` arguments; ``work`` ({"raw": folder, "normalized": folder}) and
    ``ready``: each training's checkpoint folder and its resume (``train``)."""
    from scale.engine.data import load_dataset

    cfg = e3_config(dataset, seed, epochs, data_dir, device, extra)
    data = load_dataset(cfg.dataset, data_dir, image_size=cfg.image_size if cfg.dataset == "digits" else None)
    data_dev = data.to(device)
    probe = ProbeSettings(train_images=probe_images, test_images=probe_images, seed=seed)
    from scale.runs.run_report import git_commit

    out: dict[str, Any] = {"seed": seed, "config": cfg.to_dict(), "probe_images": probe_images,
                           "git_commit": git_commit()}
    t0 = time.perf_counter()
    where = work or {}
    model = train(cfg, data, normalized_input=False, device=device, run_dir=where.get("raw"), ready=ready)
    log(f"  seed {seed}: trained on raw z in {time.perf_counter() - t0:.0f} s")
    results = measure_model(model, cfg, data_dev, probe, CONTROL_SEED + seed)
    t1 = time.perf_counter()
    model_e = train(cfg, data, normalized_input=True, device=device, run_dir=where.get("normalized"), ready=ready)
    log(f"  seed {seed}: trained on normalised z in {time.perf_counter() - t1:.0f} s")
    f_e = model_features(model_e.backbone, data_dev, GeometrySettings(), probe)
    inner = model_e.projector.head.eval()  # measured under the paper's protocol: normalize(inner(normalize(z)))
    results["e_trained_normalized"] = measure(head_fn(inner), True, f_e, probe, z_probes(f_e, probe))
    out.update(protocols=results, seconds=time.perf_counter() - t0)
    return out


# --------------------------------------------------------------------------------------------
# Statistics and report
# --------------------------------------------------------------------------------------------


def t_interval(values: list[float], level: float = 0.95) -> dict[str, float]:
    """Mean and the two-sided Student t interval ``mean +- t_{(1+level)/2, n-1} s / sqrt(n)`` (s: sample std;
    ``scale.geometry.verdict.t_interval``), as a JSON-ready dict."""
    mean, low, high = _t_interval(values, level)
    return {"mean": mean, "low": low, "high": high, "n": len(values)}


def derived(m: dict[str, float]) -> dict[str, float]:
    """Paired, scale-free numbers of one seed and protocol, beside the measured ones:

        ratio_factor          (D_inter/D_intra of h) / (that of z)              (paper: 1.22x)
        relative_compression  (spread_z / D_inter_z^2) / (spread_h / D_inter_h^2) = compression /
                              d_inter_factor^2: orbit spread measured against the class separation of
                              its own space, so a head that shrinks (or spreads) everything alike gives 1
        rot_*_gap             probe accuracy on h minus on z (the project's sign; paper: -14.72, -11.90 points)
        class_gap             the class probe's accuracy on h minus on z       (not in the paper)
    """
    return {**m, "ratio_factor": m["ratio_h"] / m["ratio_z"],
            "relative_compression": m["compression"] / m["d_inter_factor"] ** 2,
            "rot_linear_gap": m["rot_linear_h"] - m["rot_linear_z"], "rot_mlp_gap": m["rot_mlp_h"] - m["rot_mlp_z"],
            "class_gap": m["class_h"] - m["class_z"]}


def summarize(seeds: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    rows = [{p: derived(m) for p, m in s["protocols"].items()} for s in seeds]
    keys = [k for k in rows[0]["a_paper"] if all(k in r["a_paper"] for r in rows)]  # older seeds: fewer numbers
    present = [p for p in PROTOCOLS if all(p in r for r in rows)]  # older seeds: fewer protocols
    return {p: {k: t_interval([r[p][k] for r in rows]) for k in keys} for p in present}


def _cell(s: dict[str, float], pct: bool = False) -> str:
    sc = 100.0 if pct else 1.0
    if math.isnan(s["low"]):
        return f"{s['mean'] * sc:.3g}"
    return f"{s['mean'] * sc:.3g} [{s['low'] * sc:.3g}, {s['high'] * sc:.3g}]"


def figure(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(summary)
    fig, axes = plt.subplots(1, 4, figsize=(19, 4.4))
    panels = ((axes[0], "compression", "orbit compression spread(z)/spread(h)", True, 1.0),
              (axes[1], "relative_compression", "relative compression (against class separation)", False, 1.0),
              (axes[2], "kappa_factor", "curvature kappa(h)/kappa(z)", False, 1.0),
              (axes[3], "rot_linear_gap", "rotation probe, linear: h minus z (points)", False, 100.0))
    for ax, key, title, log, sc in panels:
        m = sc * np.array([summary[p][key]["mean"] for p in names])
        lo = sc * np.array([summary[p][key]["low"] for p in names])
        hi = sc * np.array([summary[p][key]["high"] for p in names])
        err = np.nan_to_num(np.vstack([m - lo, hi - m]))
        ax.bar(range(len(names)), m, yerr=err, capsize=4, color=["C0", "C1", "C2", "C7", "C8", "C3"])
        ax.set_xticks(range(len(names)), [n.split("_", 1)[0] + ": " + n.split("_", 1)[1] for n in names],
                      rotation=35, ha="right", fontsize=8)
        ax.set_title(title, fontsize=10)
        if log:
            ax.set_yscale("log")
        ax.axhline(0.0 if key == "rot_linear_gap" else 1.0, color="k", lw=0.8)
    fig.suptitle("E4 protocol study: mean over seeds, 95 % t interval", fontsize=11)
    fig.tight_layout()
    import io

    from scale.engine import disk

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    disk.write_bytes(path, buf.getvalue())  # the one owner of the disk: never through a link


def write_report(out: Path, seeds: list[dict[str, Any]], command: str) -> Path:
    from scale.engine.checkpoint import atomic_write_text
    from scale.runs.run_report import git_commit, versions

    summary = summarize(seeds)
    figure(summary, out / "e4_study.png")
    cfg = seeds[0]["config"]
    n = len(seeds)
    L = [
        f"# E4 protocol study on {cfg['dataset']}: {n} seed{'s' if n > 1 else ''}",
        "",
        f"Generated by `{command}` (report written at commit {git_commit()}; seeds computed at "
        f"{', '.join(sorted({str(s.get('git_commit', 'an unrecorded commit')) for s in seeds}))}; versions "
        f"{versions()}); every seed's values in `results.json`. Each cell: mean over seeds [95 % t interval].",
        "",
        f"Model: `scale.paper`'s E3 run on {cfg['dataset']} — {cfg['backbone']} (width {cfg['backbone_width']}), "
        f"head {cfg['head']} in the {cfg['head_style']} style ({cfg['head_width']}-{cfg['head_out']}, BatchNorm "
        f"{cfg['head_bn']}, output BatchNorm {cfg['head_out_bn']}, biases {cfg['head_bias']}), {cfg['method']} "
        f"(tau {cfg['temperature']}), {cfg['optimizer']} lr {cfg['lr']:g} {cfg['schedule']}, batch "
        f"{cfg['batch_size']}, {cfg['epochs']} epochs, augmentation {cfg['augment']}. Orbits: 5 classes x 3 test "
        "images x 12 rotations (0-330 degrees); kappa on a 10-angle sweep 0-45 degrees; rotation probes (4 quarter "
        "turns) trained on the training split, scored on the test split.",
        "",
        f"Wall time: {sum(s['seconds'] for s in seeds):.0f} s for the {n} seeds (two trainings and all measurements "
        "each; per seed " + ", ".join(f"{s['seconds']:.0f}" for s in seeds) + " s).",
        "",
        "## Protocols", "",
    ]
    L += [f"- **{p}**: {text}" for p, text in PROTOCOLS.items() if p in summary]
    L += ["", "## Orbit geometry", "",
          "| protocol | compression | D_intra z/h | D_inter z/h | D_inter/D_intra of h | its factor h/z | relative "
          "compression | kappa h/z |",
          "|---|---|---|---|---|---|---|---|"]
    for p in summary:
        s = summary[p]
        L.append(f"| {p} | {_cell(s['compression'])} | {_cell(s['d_intra_factor'])} | {_cell(s['d_inter_factor'])} "
                 f"| {_cell(s['ratio_h'])} | {_cell(s['ratio_factor'])} | {_cell(s['relative_compression'])} | "
                 f"{_cell(s['kappa_factor'])} |")
    L += ["", "compression = mean orbit spread of z / of h (> 1: the head compresses); relative compression = "
          "compression / (D_inter z/h)^2, the orbit spread against each space's own class separation (1: orbits "
          "and classes shrink or grow alike). Factors are taken per seed, then averaged."]
    L += ["", "Backbone z (same for a-d; e is its own model): D_inter/D_intra "
          f"{_cell(summary['a_paper']['ratio_z'])} (a-d), {_cell(summary['e_trained_normalized']['ratio_z'])} (e).",
          "", "## Rotation probes (test accuracy, %)", "",
          "| protocol | linear on z | linear on h | h minus z | MLP on z | MLP on h | h minus z |",
          "|---|---|---|---|---|---|---|"]
    for p in summary:
        s = summary[p]
        L.append(f"| {p} | {_cell(s['rot_linear_z'], True)} | {_cell(s['rot_linear_h'], True)} | "
                 f"{_cell(s['rot_linear_gap'], True)} | {_cell(s['rot_mlp_z'], True)} | {_cell(s['rot_mlp_h'], True)} "
                 f"| {_cell(s['rot_mlp_gap'], True)} |")
    L += ["", "## Class probe (test accuracy, %)", "",
          "The headline protocol of `scale.geometry.probes` (class labels, logistic regression on standardised "
          "features) on the unaugmented training images, scored on the test split (at most `--probe-images` of "
          "each); the paper reports no class probe.",
          "", "| protocol | on z | on h | h minus z |", "|---|---|---|---|"]
    for p in summary:
        s = summary[p]
        L.append(f"| {p} | {_cell(s['class_z'], True)} | {_cell(s['class_h'], True)} | "
                 f"{_cell(s['class_gap'], True)} |")
    L += ["", "![E4 protocol study](e4_study.png)", "",
          "Paper (CIFAR-10, ResNet-18, one seed): compression 21.85x, untrained head 0.97x, kappa 1.93x, D_intra "
          "4.76x and D_inter 3.89x smaller, rotation probes z -> h: linear 52.27 % -> 37.55 %, MLP 55.46 % -> "
          "43.56 %. The official code takes kappa and the probes with the head on raw z (protocol b) and the "
          "orbits with the head on normalised z (protocol a).", ""]
    path = out / "report.md"
    atomic_write_text(path, "\n".join(L))
    return path


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


class ResultsFileError(ValueError):
    """results.json is not one this study wrote (exit 1)."""


def _probe_images_of(command: Any) -> int | None:
    """``--probe-images`` of a recorded ``python -m scale.e4_study ...`` command line (its default if absent)."""
    if not isinstance(command, str) or not command.startswith("python -m scale.e4_study"):
        return None
    args, _ = build_parser().parse_known_args(command.split()[3:])
    return args.probe_images


def reused_seeds(path: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The seeds ``path`` (results.json) holds, each checked against this invocation's plan: its training config
    against ``e3_config`` (``scale.runs.validate.plan_disagreements``) and its ``--probe-images``.
    ``ResultsFileError`` when the file is not a results file of this study; ``ValueError`` naming the seeds of
    another plan otherwise: they are never mixed into this one's intervals, and the file is left as it is."""
    import os

    from scale.engine import read

    if not os.path.lexists(path):
        return []
    try:
        saved = read.read_json(path, dict)  # bounded, regular files only: a FIFO is refused, not waited on
        seeds = saved["seeds"]
        if not (isinstance(seeds, list) and all(isinstance(s, dict) and type(s.get("seed")) is int
                                                and isinstance(s.get("config"), dict)
                                                and isinstance(s.get("protocols"), dict) for s in seeds)):
            raise TypeError("its seeds are not records of this study")
    except (read.Unreadable, KeyError, TypeError) as exc:
        raise ResultsFileError(f"{path} is not a results file of scale.e4_study ({type(exc).__name__}: "
                               f"{str(exc)[:120]}); move it away, or choose another --out") from None
    from scale.runs.validate import plan_disagreements

    other = []
    for s in seeds:
        planned = e3_config(args.dataset, s["seed"], args.epochs, args.data_dir).to_dict()
        differ = plan_disagreements(s["config"], planned)
        measured = s.get("probe_images", _probe_images_of(saved.get("command")))  # older files: their command line
        if measured != args.probe_images:
            differ.append(f"probe_images ({measured!r} vs {args.probe_images!r})")
        if differ:
            other.append(f"seed {s['seed']}: {', '.join(differ[:4])}")
    if other:
        raise ValueError(f"{path} holds seeds of another plan (saved vs asked: {'; '.join(other[:3])}); nothing was "
                         "run. Use another --out, or move results.json away to start again")
    return seeds


OUTPUTS = ("report.md", "e4_study.png")  # what the study writes beside results.json


def refuse_foreign_outputs(out: Path, results: Path) -> None:
    """``ValueError`` when ``out`` holds a report.md or e4_study.png but no results file of this study: they are
    someone else's, and the study would replace them (append-only: another's files are never rewritten)."""
    import os

    found = [n for n in OUTPUTS if os.path.lexists(out / n)]
    if found and not results.is_file():
        raise ValueError(f"{out} holds {', '.join(found)} but no results.json of this study: they are not its "
                         "own, so nothing was run. Use another --out, or move them away")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m scale.e4_study", description="E4's orbit compression under "
                                "the paper's protocol and its controls (a-e), several seeds, 95 %% t intervals.")
    p.add_argument("--dataset", default="digits", choices=("digits", "cifar10"), help="default: digits (offline)")
    p.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1 (default 5)")
    p.add_argument("--epochs", type=int, help="training epochs (default: scale.paper's E3: 50 on CIFAR, the digits "
                   "adjustment of scale.run on digits)")
    p.add_argument("--probe-images", type=int, default=10_000, help="probe base images per split (default 10000)")
    p.add_argument("--data-dir", help="folder with the CIFAR archive (see scale.run)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    p.add_argument("--out", default="e4_study", help="output folder (default: e4_study)")
    return p


@guarded("scale.e4_study")  # an output that is a link (exit 2) or cannot be written (exit 4): one line
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for key in ("seeds", "epochs", "threads"):
        v = getattr(args, key)
        if v is not None and v < 1:
            print(f"scale.e4_study: error: --{key} must be a positive integer, got {v}", file=sys.stderr)
            return 2
    if args.probe_images < 2:
        print(f"scale.e4_study: error: --probe-images must be >= 2, got {args.probe_images}", file=sys.stderr)
        return 2
    from scale.engine import disk
    from scale.engine.checkpoint import atomic_write_json
    from scale.engine.data import DataError

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    command = " ".join(["python -m scale.e4_study", *(argv if argv is not None else sys.argv[1:])])
    path = out / "results.json"
    try:
        stored = reused_seeds(path, args)
        refuse_foreign_outputs(out, path)
    except ValueError as exc:
        print(f"scale.e4_study: error: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, ResultsFileError) else 2
    # the store is append-only: every stored seed stays in results.json; this report uses seeds 0 .. N-1, and
    # seeds measured before the class probe joined the protocols are measured again (their record replaced)
    current = {s["seed"]: s for s in stored if "class_h" in s["protocols"].get("a_paper", {})}
    for seed in range(args.seeds):
        if seed in current:
            continue
        print(f"scale.e4_study: seed {seed}", flush=True)
        try:
            current[seed] = one_seed(args.dataset, seed, args.epochs, args.data_dir, args.probe_images, print)
        except DataError as exc:
            print(f"scale.e4_study: data error: {exc}", file=sys.stderr)
            return 1
        kept = {s["seed"]: s for s in stored}
        kept.update(current)
        disk.make_dirs(out)  # only once a seed has finished: a data error leaves nothing behind
        atomic_write_json(path, {"dataset": args.dataset, "epochs": args.epochs, "command": command,
                                 "seeds": [kept[k] for k in sorted(kept)]})
    seeds = [current[k] for k in sorted(current) if k < args.seeds]
    report = write_report(out, seeds, command)
    print(f"scale.e4_study: report {report}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
