"""Experiment E6: do pretrained SSL heads compress or expand augmentation orbits?

    python -m scale.pretrained MODEL [MODEL ...] [--weights PATH] [--images DIR | --dataset NAME]

docs/paper.md, E6: DINO ViT-S/16 and ResNet-50, VICReg ResNet-50, Barlow Twins ResNet-50 at 224 px;
orbits under rotation, hue, saturation and blur; "collapse ratio" = backbone orbit variance / head
orbit variance. The paper's finding: DINO heads compress orbits, VICReg/Barlow heads expand them.

What is E6's own: the official checkpoints (``resolve_weights``, ``scale.engine.pretrained_models``), the
image sources and the table. Every measurement is ``scale.analysis.analyze_orbits`` on the model's
backbone and compared head (``PretrainedSSL.compared``), one call per augmentation family, with
``analysis_settings``: ``T`` trajectories (one image swept through ``P`` values across the family's
range, ``scale.geometry.orbits``), the head on the raw ``z`` it was trained on, ``z`` and ``h`` L2-normalised,
the untrained head of the same layers (and its bias-free twin) as controls, no H_eff (DINO's loss is
not one of the method registry) and no probes. Per trajectory t:

    v_t(x)      = orbit_spread  (mini.invariance)  mean squared distance to the orbit centroid
    kappa_t(x)  = sweep_curvature (mini.invariance) mean |x_{i+1} - 2 x_i + x_{i-1}|
    a_t(x)      = mean_p cos(x_{t,p}, x_t^0)        cosine to the unaugmented image's features

    collapse ratio   R = exp(mean_t log(v_t(z) / v_t(h)))      geometric mean over trajectories
    curvature ratio  K = exp(mean_t log(kappa_t(h) / kappa_t(z)))
    alignment gain   A = mean_t (a_t(h) - a_t(z))

Intervals are Student-t 95% intervals over trajectories of the log ratios (then exponentiated) and
of the alignment differences (``scale.geometry.verdict``). Verdict: "compressor" where R's interval lies above
1, "expander" where it lies below 1, "neither" otherwise. The per-model row pools the families per
image (mean of the log ratios over families, ``scale.geometry.verdict.pooled_ratio_estimate``), so its
trajectories stay independent.

Weights: ``--weights PATH`` reads the official full checkpoint (``weights_only=True``). Without it,
the file is taken from torch hub's cache (``$TORCH_HOME/hub/checkpoints``), downloaded there first
when online; offline, one message names the file, its URL and where to put it (exit 2).
Results: ``<out>/<model>.json`` per model (per-trajectory values, config, versions, device, commit)
and ``<out>/report.md`` with one table across every model found in ``<out>`` and two figures.
"""

from __future__ import annotations

import http.client
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from scale.analysis import AnalysisSettings, analyze_orbits
from scale.engine import checksums, disk
from scale.engine.checkpoint import atomic_write_bytes, atomic_write_json, atomic_write_text
from scale.engine.data_errors import DataError
from scale.engine.flags import MAX_COUNT, MAX_IMAGE_SIZE, SEED_LIMIT, OneLineParser, number
from scale.engine.images import folder_images
from scale.engine.plots import png, pyplot
from scale.engine.pretrained_models import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    MODELS,
    OFFICIAL_FILES,
    CheckpointError,
    PretrainedSSL,
    check_model_name,
    load_checkpoint,
)
from scale.engine.read import read_json
from scale.engine.timing import synchronize
from scale.geometry.orbits import DATASETS, FAMILIES, dataset_images
from scale.geometry.verdict import CONFIDENCE, Estimate, mean_estimate, pooled_ratio_estimate, verdict
from scale.runs.run_report import device_name, git_commit, versions


class OfflineError(RuntimeError):
    """The official checkpoint is neither given, nor cached, nor downloadable."""


@dataclass
class Config:
    models: list[str]
    weights: str | None = None
    images: str | None = None
    dataset: str = "digits"
    data_dir: str | None = None
    trajectories: int = 50
    steps: int = 12
    image_size: int = 224
    batch_images: int = 4  # images per forward pass: batch_images * steps orbit points
    families: list[str] = field(default_factory=lambda: list(FAMILIES))
    device: str = "cuda" if torch.cuda.is_available() else "cpu"
    seed: int = 0
    out: str = "results/pretrained"


# --------------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------------


def hub_cache_path(name: str) -> Path:
    url = OFFICIAL_FILES[name].url
    return Path(torch.hub.get_dir()) / "checkpoints" / url.rsplit("/", 1)[1]


def resolve_weights(name: str, weights: str | None) -> Path:
    """``--weights`` if given, else torch hub's cached copy, downloaded into the cache when online."""
    if weights is not None:
        path = Path(weights)
        if not path.is_file():
            raise FileNotFoundError(f"--weights: no file at {path}")
        return path
    cached, url = hub_cache_path(name), OFFICIAL_FILES[name].url
    published = checksums.PUBLISHED_SHA256.get(name)
    if cached.is_file():
        checksums.verify(cached, published, url)  # truncated, corrupt or replaced since it was downloaded
        return cached

    disk.make_dirs(cached.parent)
    try:  # torch.hub writes a temporary of its own and renames it: the cache is torch's folder, not the user's
        torch.hub.download_url_to_file(url, str(cached), hash_prefix=published, progress=sys.stderr.isatty())
        checksums.record(cached)
    except RuntimeError as exc:  # torch hub: "invalid hash value" (the partial file is already removed)
        raise checksums.ChecksumError(f"the download of {url} does not match the published SHA256 {published}: "
                                      f"{exc}; nothing was kept, try again later") from None
    except (OSError, http.client.HTTPException) as exc:
        raise OfflineError(
            f"cannot download the {name} full checkpoint (backbone + head): {exc}\n"
            f"Fetch this file on a machine with network access:\n  {url}\n"
            f"then either put it at\n  {cached}\n(torch hub's cache; set TORCH_HOME to move it) with its SHA256 "
            f"recorded beside it (sha256sum {cached.name} > {cached.name}.sha256, in that folder: a cached file "
            f"without a record is refused), or pass it with --weights PATH."
        ) from None
    return cached


# --------------------------------------------------------------------------------------------
# Measurement: scale.analyze, one call per family
# --------------------------------------------------------------------------------------------


def analysis_settings(cfg: Config, family: str) -> AnalysisSettings:
    """E6 in ``scale.analyze``'s terms: ``cfg.steps`` values across ``family``'s range with kappa along them,
    the head on the raw z it was trained on, ``cfg.batch_images`` whole trajectories per forward pass, no
    H_eff and no probes."""
    return AnalysisSettings(family=family, steps=cfg.steps, head_input="raw", batch=cfg.batch_images * cfg.steps,
                            probes=False, curvature=False, seed=cfg.seed)


def measure(model: PretrainedSSL, images: torch.Tensor, cfg: Config) -> dict[str, dict[str, Any]]:
    """Per family, ``scale.analysis.analyze_orbits`` of the backbone and the compared head on ``images`` in
    [0, 1] (ImageNet statistics, every image its own class)."""
    model = model.to(torch.device(cfg.device)).eval()
    return {fam: analyze_orbits(model.backbone, model.compared, images, IMAGENET_MEAN, IMAGENET_STD,
                                analysis_settings(cfg, fam), device=cfg.device) for fam in cfg.families}


def per_trajectory(result: dict[str, Any]) -> dict[str, list[float]]:
    """One family's per-trajectory values under E6's names (v, kappa and a of z, h and the untrained head)."""
    po = result["per_orbit"]
    return {"var_z": po["z"]["spread"], "var_h": po["h"]["spread"], "var_h_untrained": po["h_untrained"]["spread"],
            "kappa_z": po["z"]["kappa"], "kappa_h": po["h"]["kappa"],
            "cos_z": po["z"]["alignment"], "cos_h": po["h"]["alignment"]}


def summarize(results: dict[str, dict[str, Any]]) -> dict[str, dict]:
    """Per family, ``scale.analyze``'s estimates and verdict; ``all`` pools the families per image (the
    same ``CONFIDENCE`` intervals)."""
    raw = {fam: {k: np.asarray(v, dtype=np.float64) for k, v in per_trajectory(r).items()}
           for fam, r in results.items()}
    rows: dict[str, dict] = {
        fam: {"var_z": float(np.mean(v["var_z"])), "var_h": float(np.mean(v["var_h"])), **results[fam]["verdict"]}
        for fam, v in raw.items()}
    collapse = pooled_ratio_estimate([(v["var_z"], v["var_h"]) for v in raw.values()])
    control = pooled_ratio_estimate([(v["var_z"], v["var_h_untrained"]) for v in raw.values()])
    rows["all"] = {
        "var_z": float(np.mean([r["var_z"] for r in rows.values()])),
        "var_h": float(np.mean([r["var_h"] for r in rows.values()])),
        "collapse_ratio": asdict(collapse), "collapse_ratio_untrained": asdict(control),
        "verdict": verdict(collapse), "verdict_untrained": verdict(control),
        "curvature_ratio": asdict(pooled_ratio_estimate([(v["kappa_h"], v["kappa_z"]) for v in raw.values()])),
        "alignment_gain": asdict(mean_estimate(np.mean([v["cos_h"] - v["cos_z"] for v in raw.values()], axis=0))),
    }
    return rows


# --------------------------------------------------------------------------------------------
# Results and report
# --------------------------------------------------------------------------------------------


def provenance(cfg: Config) -> dict:
    return {
        "versions": versions(),
        "device": device_name(torch.device(cfg.device)),
        "git_commit": git_commit(),
        "seed": cfg.seed,
    }


def result_record(name: str, weights: Path, cfg: Config, results: dict, seconds: float, n_images: int) -> dict:
    return {
        "model": name,
        "weights": str(weights),
        "compared_head_output": "256-d bottleneck before L2 norm and prototypes"
        if name.startswith("dino")
        else "projector output",
        "config": {**asdict(cfg), "models": [name]},
        "images": cfg.images or f"dataset:{cfg.dataset}",
        "n_images": n_images,
        "seconds": seconds,
        **provenance(cfg),
        "summary": summarize(results),
        "per_trajectory": {fam: per_trajectory(r) for fam, r in results.items()},
        "geometry": {fam: r["geometry"] for fam, r in results.items()},  # scale.analyze's E4 summary per family
    }


def _estimate(d: dict) -> Estimate:
    return Estimate(**d)


def _row_order(record: dict) -> list[str]:
    """The families in the paper's order, then the pooled row (the JSON files store keys sorted)."""
    return [f for f in FAMILIES if f in record["summary"]] + ["all"]


def render_report(records: list[dict], out: Path) -> str:
    """One markdown table across models and families, plus the two figures (written into ``out``)."""
    lines = [
        "# E6: pretrained heads, orbit compression or expansion",
        "",
        "Collapse ratio = backbone orbit variance / head orbit variance (geometric mean over trajectories; "
        f"{int(CONFIDENCE * 100)}% t-interval). Compressor / expander only where the interval excludes 1. "
        "Untrained head: the same ratio for a freshly initialised head of the same layers (the control). "
        "Curvature ratio = kappa(h) / kappa(z). Alignment gain = mean cos to the unaugmented image, h minus z. "
        "Heads on the raw backbone output they were trained on; features L2-normalised; 'all' pools the families "
        "per image. Measured by `scale.analysis.analyze_orbits`.",
        "",
        "| model | family | n | orbit var z | orbit var h | collapse ratio [95% CI] | verdict "
        "| untrained head [95% CI] | curvature ratio h/z [95% CI] | alignment gain [95% CI] |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rec in records:
        for fam in _row_order(rec):
            row = rec["summary"][fam]
            c = _estimate(row["collapse_ratio"])
            n = f"{c.n}" + (f" (+{c.excluded} degenerate)" if c.excluded else "")
            k, a = _estimate(row["curvature_ratio"]), _estimate(row["alignment_gain"])
            u = _estimate(row["collapse_ratio_untrained"])
            lines.append(
                f"| {rec['model']} | {fam} | {n} | {row['var_z']:.3g} | {row['var_h']:.3g} | {c.fmt()} | "
                f"{row['verdict']} | {u.fmt()} | {k.fmt()} | {a.fmt('+.3f')} |"
            )
    lines += [
        "",
        "| model | weights | images | trajectories x steps | image size | device | seconds | commit |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rec in records:
        cfg = rec["config"]
        lines.append(
            f"| {rec['model']} | `{rec['weights']}` | {rec['images']} | {cfg['trajectories']} x {cfg['steps']} | "
            f"{cfg['image_size']} | {rec['device']} | {rec['seconds']:.1f} | {rec['git_commit'][:10]} |"
        )
    figures = _figures(records, out)
    lines += [""] + [f"![{title}]({fname})" for title, fname in figures]
    lines += [
        "",
        "Paper (E6): DINO heads compress orbits, VICReg/Barlow Twins heads expand them. "
        "The verdicts above are this run's; nothing expected is written into them.",
        "",
    ]
    return "\n".join(lines)


def _figures(records: list[dict], out: Path) -> list[tuple[str, str]]:
    plt = pyplot()
    made = []
    for key, title, fname in (
        ("collapse_ratio", "collapse ratio (z var / h var)", "collapse_ratio.png"),
        ("curvature_ratio", "curvature ratio (kappa h / kappa z)", "curvature_ratio.png"),
    ):
        families = _row_order(records[0]) if records else []
        fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(families), 3.6))
        width = 0.8 / max(len(records), 1)
        for i, rec in enumerate(records):
            ests = [_estimate(rec["summary"][f][key]) for f in families]
            x = np.arange(len(families)) + (i - (len(records) - 1) / 2) * width
            vals = np.array([e.value for e in ests])
            err = np.array([[e.value - e.low for e in ests], [e.high - e.value for e in ests]])
            ax.bar(x, vals, width, yerr=np.nan_to_num(err), capsize=2, label=rec["model"])
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log")
        ax.set_xticks(np.arange(len(families)), families)
        ax.set_title(title)
        ax.legend(fontsize=7)
        atomic_write_bytes(out / fname, png(fig, dpi=120))
        made.append((title, fname))
    return made


def write_report(out: Path) -> Path:
    """Regenerate ``report.md`` from every ``<model>.json`` in ``out`` (models in the paper's order)."""
    records = []
    for name in MODELS:
        path = out / f"{name}.json"
        if path.is_file():
            records.append(read_json(path, dict))
    report = out / "report.md"
    atomic_write_text(report, render_report(records, out))
    return report


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def load_images(cfg: Config) -> torch.Tensor:
    if cfg.images is not None:
        try:
            return folder_images(cfg.images, cfg.trajectories, cfg.image_size)
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"--images: {exc}") from None
        except ValueError as exc:  # fewer images than trajectories
            raise ValueError(f"--images: {exc} (lower --trajectories)") from None
    return dataset_images(cfg.dataset, cfg.trajectories, cfg.image_size, seed=cfg.seed, data_dir=cfg.data_dir)


def run(cfg: Config) -> Path:
    """Measure every model of ``cfg`` and rewrite the report; returns the report's path."""
    for name in cfg.models:
        check_model_name(name)
    for fam in cfg.families:
        if fam not in FAMILIES:
            raise ValueError(f"unknown augmentation family {fam!r}; valid choices: {', '.join(FAMILIES)}")
    weights = {name: resolve_weights(name, cfg.weights) for name in cfg.models}  # fail fast, before any work
    torch.manual_seed(cfg.seed)
    images = load_images(cfg)
    out = Path(cfg.out)
    for name in cfg.models:
        model = load_checkpoint(name, str(weights[name]))
        start = time.perf_counter()
        results = measure(model, images, cfg)
        synchronize(torch.device(cfg.device))
        record = result_record(name, weights[name], cfg, results, time.perf_counter() - start, len(images))
        record["weights_sha256"] = checksums.sha256sum(weights[name])  # which file exactly (scale/engine/checksums.py)
        atomic_write_json(out / f"{name}.json", record)
        row = record["summary"]["all"]
        print(f"{name}: collapse ratio {_estimate(row['collapse_ratio']).fmt()} -> {row['verdict']}")
    return write_report(out)


def parse_args(argv: list[str] | None = None) -> Config:
    p = OneLineParser(prog="python -m scale.pretrained", description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+", metavar="MODEL", help=f"one or more of {', '.join(MODELS)}, or 'all'")
    p.add_argument("--weights", help="the official full checkpoint file (one MODEL only)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--images", help="a folder of images (PNG/JPEG, searched recursively)")
    src.add_argument("--dataset", choices=DATASETS, default="digits", help="default: digits (offline)")
    p.add_argument("--data-dir", help="where the dataset archive lives (cifar10)")
    p.add_argument("--trajectories", type=number(int, 1, MAX_COUNT), default=50)
    p.add_argument("--steps", type=number(int, 2, MAX_COUNT), default=12)
    p.add_argument("--image-size", type=number(int, 1, MAX_IMAGE_SIZE), default=224)
    p.add_argument("--batch-images", type=number(int, 1, MAX_COUNT), default=4,
                   help="images per forward pass (x steps orbit points)")
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    p.add_argument("--device", default=Config.device)
    p.add_argument("--seed", type=number(int, 0, SEED_LIMIT - 1), default=0)
    p.add_argument("--out", default="results/pretrained")
    a = p.parse_args(argv)
    models = list(MODELS) if a.models == ["all"] else a.models
    for name in models:
        if name not in MODELS:
            p.error(f"unknown model {name!r}; valid choices: {', '.join(MODELS)} or all")
    if a.weights is not None and len(models) != 1:
        p.error("--weights names one checkpoint file: give exactly one MODEL with it")
    for flag in ("trajectories", "batch_images", "image_size"):
        if getattr(a, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be positive")
    if a.trajectories < 2:
        p.error("--trajectories must be at least 2 (the interval is over trajectories)")
    if a.steps < 3:
        p.error("--steps must be at least 3 (kappa is a second difference)")
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"--device {a.device}: CUDA is not available here; use --device cpu")
    if a.image_size < 16:
        p.error("--image-size must be at least 16 (one ViT patch)")
    return Config(
        models=models, weights=a.weights, images=a.images, dataset=a.dataset, data_dir=a.data_dir,
        trajectories=a.trajectories, steps=a.steps, image_size=a.image_size, batch_images=a.batch_images,
        families=a.families, device=a.device, seed=a.seed, out=a.out,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    try:
        report = run(cfg)
    except (OfflineError, DataError, CheckpointError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)  # ChecksumError is a ValueError
        return 2
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
