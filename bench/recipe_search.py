"""The search for digits recipes under which each experiment's network learns (``docs/recipes.md``).

    python -m bench.recipe_search [--experiments main E3E4 ...] [--seeds 3] [--threads 1] [--report-only]
    python -m bench.recipe_search --simsiam --experiments E1 E2 --seeds 3 --threads 1     (the SimSiam search)

Each candidate is a recipe of one experiment: its method and head(s), the settings that differ from the
experiment's (``scale.engine.recipes.DIGITS_RECIPES`` holds the chosen ones) and an augmentation. Every candidate
trains on digits at ``--seeds`` seeds through ``scale.run.train`` (the run ``python -m scale.run`` makes, without
its orbit geometry and rotation probes), and is read by the premise "the network learned"
(``scale.runs.premise``): the last epoch's loss against chance (or, without a chance level, its first step and the
collapse detectors), and z's class probes (linear and kNN) against the backbone at initialisation, paired over
the test images. One JSON line per (candidate, seed) goes to ``bench/results/recipe_search.jsonl`` as it ends (a
rerun skips what is there); ``docs/recipes.md`` is the table over seeds. The candidates that are not presets of
``scale.engine.augment`` are registered here under their names (``register_preset``).

The SimSiam search (``bench._simsiam``; ``SIMSIAM``): E1's and E2's heads and starts as the ledger trains them, the
paper's SGD setting and one dimension a SimSiam user varies at a time (learning rate, weight decay, the predictor's
rate fixed, the schedule, batch size, epochs, BatchNorm in the hidden layers, and SimSiam's own recipe); each of
its rows also carries the loss at the first step, the spreads, and z's class probes against the raw pixels on the
same split (the run's raw-input baseline, ``pixel_fields``). Its rows are marked ``"search": "simsiam"``.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bench import _simsiam
from bench._util import machine, write_atomic
from scale.engine import augment
from scale.engine.config import TrainConfig
from scale.engine.data import load_dataset
from scale.engine.flags import OneLineParser
from scale.engine.hooks import Hook
from scale.engine.recipes import DIGITS_RECIPES
from scale.geometry.measure import EndOfRun
from scale.geometry.probes import raw_input_correct, raw_input_features
from scale.run import train
from scale.runs.premise import LEARNED_MARGIN

ROOT = Path(__file__).resolve().parent.parent
LINES = ROOT / "bench" / "results" / "recipe_search.jsonl"
TABLE = ROOT / "docs" / "recipes.md"
COMMAND = "python -m bench.recipe_search --seeds 3 --threads 1"

# candidate augmentations that are not presets (crop scale, flip, rotation, jitter on grey images)
EXTRA_PRESETS: dict[str, dict[str, Any]] = {
    "digits_crop05": dict(augment.PRESET_PARAMS["digits_mild"]),  # the same parameters, the search's first name
    "digits_rotate_crop05": dict(augment.PRESET_PARAMS["digits_rotate"], crop=(0.5, 1.0)),
}
_SIMCLR_PAPER = dict(head_style="paper", head_bias=False, head_bn=True, head_out_bn=True, schedule="constant",
                     weight_decay=0.0)  # the official E3 code's head and optimiser (scale.experiments.catalog)
_SIMSIAM = dict(head_style="paper", head_bias=False, optimizer="sgd", lr=0.05, momentum=0.9, weight_decay=0.0,
                schedule="constant")  # E1 / E2: the paper's SGD 0.05, no weight decay, constant rate


@dataclass(frozen=True)
class Candidate:
    """One recipe of one experiment: its method and head(s) (one model per head: E5's three depths) and the
    settings that differ from ``scale.run``'s resolution on digits. Its label in the table is made of its settings
    (``describe``); it is the experiment's chosen recipe where its settings are ``DIGITS_RECIPES``'."""

    experiment: str
    method: str
    heads: tuple[str, ...]
    settings: dict[str, Any] = field(default_factory=dict)
    dimension: str = ""  # the SimSiam search's dimension this candidate varies ("": a candidate of the search before)
    fixed_predictor_lr: bool = False  # SimSiam's predictor rate fixed (bench._simsiam.FixedPredictorLR)

    @property
    def simsiam(self) -> bool:
        """A candidate of the SimSiam search (its rows carry the pixel probe and are marked so)."""
        return bool(self.dimension)

    def config(self, head: str, seed: int, threads: int) -> TrainConfig:
        return TrainConfig.resolve("digits", self.method, "resnet18", head=head, seed=seed, threads=threads,
                                   augment_path="batched", **self.settings)

    @property
    def chosen(self) -> bool:
        return all(self.settings.get(k) == v for k, v in DIGITS_RECIPES[self.experiment].items()) and \
            all(v == BASE[self.experiment].get(k, v) for k, v in self.settings.items()
                if k not in DIGITS_RECIPES[self.experiment])

    def key(self) -> str:
        return json.dumps({"experiment": self.experiment, "settings": self.settings, "search": self.search_key},
                          sort_keys=True)

    @property
    def search_key(self) -> dict[str, Any]:
        """What marks a row of this candidate beyond its settings: nothing for the search before, the SimSiam
        search's marker and its fixed predictor rate for the SimSiam search."""
        return {"search": "simsiam", "fixed_predictor_lr": self.fixed_predictor_lr} if self.simsiam else {}

    def has(self, row: dict[str, Any]) -> bool:
        """Whether ``row`` (a line of the results) is a training of this candidate."""
        return (row["experiment"], row["settings"]) == (self.experiment, self.settings) and \
            _search_key(row) == self.search_key


def describe(settings: dict[str, Any]) -> str:
    """A candidate's label: its augmentation and epochs, and what else it changes."""
    extra = [f"BatchNorm {'on' if settings['head_bn'] else 'off'}" for _ in [0] if "head_bn" in settings]
    if settings.get("weight_decay"):
        extra.append(f"weight decay {settings['weight_decay']:g}")
    return f"{settings.get('augment')}, {settings.get('epochs')} epochs" + "".join(f", {e}" for e in extra)


def _recipe(experiment: str) -> dict[str, Any]:
    return dict(DIGITS_RECIPES[experiment])


# what every candidate of an experiment shares (the paper's settings of it that the search keeps)
BASE: dict[str, dict[str, Any]] = {"main": {}, "E3E4": _SIMCLR_PAPER, "E5": _SIMCLR_PAPER,
                                   "E1": dict(_SIMSIAM, head_bn=False), "E2": dict(_SIMSIAM, head_bn=False)}
CANDIDATES: tuple[Candidate, ...] = (
    Candidate("main", "simclr", ("gelu3",), dict(augment="e3", epochs=8)),  # the main job before
    Candidate("main", "simclr", ("gelu3",), dict(augment="e1", epochs=20)),
    Candidate("main", "simclr", ("gelu3",), dict(augment="digits", epochs=20)),
    Candidate("main", "simclr", ("gelu3",), _recipe("main")),
    Candidate("E3E4", "simclr_paper", ("relu2",), dict(_SIMCLR_PAPER, augment="e3", epochs=50)),  # before
    Candidate("E3E4", "simclr_paper", ("relu2",), dict(_SIMCLR_PAPER, augment="digits_rotate_crop05", epochs=50)),
    Candidate("E3E4", "simclr_paper", ("relu2",), dict(_SIMCLR_PAPER, **_recipe("E3E4"))),
    Candidate("E5", "simclr_paper", ("linear", "swish2", "swish3"), dict(_SIMCLR_PAPER, augment="e3", epochs=50)),
    Candidate("E5", "simclr_paper", ("linear", "swish2", "swish3"), dict(_SIMCLR_PAPER, **_recipe("E5"))),
    Candidate("E1", "simsiam", ("gelu2",), dict(_SIMSIAM, head_bn=False, augment="e1", epochs=20)),  # before
    Candidate("E1", "simsiam", ("gelu2",), dict(_SIMSIAM, head_bn=False, **_recipe("E1"))),
    Candidate("E2", "simsiam", ("swish2",), dict(_SIMSIAM, head_bn=False, **_recipe("E2"))),
    Candidate("E2", "simsiam", ("swish2",), dict(_SIMSIAM, head_bn=False, **{**_recipe("E2"), "weight_decay": 5e-4})),
)

# Listed before and never run, now removed (docs/recipes.md says why): E1 with BatchNorm from the normal start (the
# SimSiam search runs E1's BatchNorm from the collapsed start, as the ledger does) and E2 under e1 (E1's recipe before,
# 0 of 3 there; the SimSiam search's CPU went to the dimensions of a SimSiam user instead)
REMOVED = ("E1, digits, 20 epochs, BatchNorm on (paper head), normal start: superseded by the SimSiam search's "
           "BatchNorm rows from E1's collapsed start, the start the ledger trains E1 from",
           "E2, e1, 50 epochs, BatchNorm off: E1's augmentation before this search (0 of 3 learned there); the "
           "night's CPU went to the SimSiam search's dimensions instead")
SIMSIAM: tuple[Candidate, ...] = tuple(
    Candidate(exp, "simsiam", _simsiam.STARTS[exp][0],
              {**_simsiam.PAPER, **_simsiam.STARTS[exp][1], **_simsiam.changes_for(exp, changes)}, dim, fixed)
    for part in (_simsiam.DIMENSIONS[:_simsiam.FIRST], _simsiam.DIMENSIONS[_simsiam.FIRST:])
    for exp in ("E1", "E2") for dim, changes, fixed in part if (exp, dim) not in _simsiam.LEFT_OUT)


def _search_key(row: dict[str, Any]) -> dict[str, Any]:
    return {"search": "simsiam", "fixed_predictor_lr": bool(row.get("fixed_predictor_lr"))} \
        if row.get("search") == "simsiam" else {}


class Losses(Hook):
    """Each epoch's mean loss (where the premise starts to hold: the recipes' short check, tests/test_recipes.py)."""

    def __init__(self) -> None:
        self.per_epoch: list[float] = []

    def on_epoch_end(self, state) -> None:
        self.per_epoch.append(float(state.history[-1]["loss"]))


def _est(e) -> list[float] | None:
    return None if e is None else [e.value, e.low, e.high]


# Which probe of the raw pixels a SimSiam row carries. The search's first rows (2026-12-06/07, no "pixel_probe"
# field) were computed by its own probe: one of the three equal grey channels, float32. Rows since carry the
# project's raw-input baseline, the one every run report and ledger row shows (``scale.geometry.probes
# .raw_input_features``: all three channels, float64), read from the run's own class probe.
SEARCH_OWN_PIXELS = "one grey channel, float32 (this search's own probe, before the project's raw-input baseline)"
RAW_INPUT_PIXELS = "raw_input"


def pixel_fields(p) -> dict[str, Any]:
    """A SimSiam row's pixel columns from the run's class probe ``p`` (``scale.runs.summary.ClassProbe``): the raw
    input's linear and kNN accuracies and z minus them, paired over the test images."""
    if p is None or p.raw_input is None or p.knn is None or p.knn.raw_input is None:
        raise RuntimeError("the run measured no raw-input baseline: a SimSiam row needs z against the pixels")
    return {"pixel_probe": RAW_INPUT_PIXELS, "pixels": [p.raw_input, p.knn.raw_input],
            "linear_vs_pixels": _est(p.raw_input_gain), "knn_vs_pixels": _est(p.knn.raw_input_gain)}


def one(c: Candidate, head: str, seed: int, threads: int, data) -> dict[str, Any]:
    """One training of candidate ``c`` and its premise, JSON-ready."""
    cfg = c.config(head, seed, threads)
    t0 = time.perf_counter()
    losses = Losses()
    fixed = _simsiam.FixedPredictorLR() if c.fixed_predictor_lr else None
    s = train(cfg, data, None, hooks=[losses] + ([fixed] if fixed else []), measure=EndOfRun(geometry=False),
              progress=False, log=None)
    t = s.training
    p = s.class_probe
    extra: dict[str, Any] = {}
    if c.simsiam:
        extra = {**c.search_key, "dimension": c.dimension, "premise": t.premise, "notes": t.notes,
                 **pixel_fields(p),
                 "predictor_lr": None if fixed is None else [list(fixed.lrs[0]), list(fixed.lrs[-1])]}
    return {**extra, "experiment": c.experiment, "label": describe(c.settings), "head": head, "seed": seed,
            "threads": threads,
            "settings": c.settings, "augment": cfg.augment, "epochs": cfg.epochs,
            "augment_params": augment.PRESET_PARAMS[cfg.augment], "seconds": time.perf_counter() - t0,
            "learned": t.learned, "findings": t.findings, "final_loss": t.final_loss, "chance_loss": t.chance_loss,
            "initial_loss": t.initial_loss, "h_spread": t.h_spread, "z_spread": t.z_spread,
            "losses": losses.per_epoch,
            "linear": [p.accuracy.z, p.initial_z], "linear_gain": _est(p.initial_gain),
            "knn": [p.knn.accuracy.z, p.knn.initial_z], "knn_gain": _est(p.knn.initial_gain)}


def _row_key(experiment: str, settings: dict[str, Any], head: str, seed: int, search: dict[str, Any]) -> str:
    return json.dumps([experiment, settings, head, seed, search], sort_keys=True)


def rows() -> list[dict[str, Any]]:
    return [json.loads(li) for li in LINES.read_text().splitlines()] if LINES.is_file() else []


def search(experiments: list[str], seeds: int, threads: int, simsiam_only: bool = False) -> None:
    torch.set_num_threads(threads)
    data = load_dataset("digits", image_size=16)
    done = {_row_key(r["experiment"], r["settings"], r["head"], r["seed"], _search_key(r)) for r in rows()}
    for c in SIMSIAM if simsiam_only else CANDIDATES + SIMSIAM:
        if c.experiment not in experiments:
            continue
        for seed in range(seeds):
            for head in c.heads:
                if _row_key(c.experiment, c.settings, head, seed, c.search_key) in done:
                    continue
                r = one(c, head, seed, threads, data)
                LINES.parent.mkdir(parents=True, exist_ok=True)
                with LINES.open("a") as f:
                    f.write(json.dumps(r) + "\n")
                print(f"{c.experiment} {c.dimension or describe(c.settings)} {head} s{seed}: loss "
                      f"{r['final_loss']:.3f} (chance {r['chance_loss']}), learned {r['learned']}, "
                      f"{r['seconds']:.0f} s", flush=True)


def _cell(rows: list[dict[str, Any]], key: str) -> str:
    """mean [min, max] of a per-seed number over the rows."""
    v = [r[key] for r in rows if r[key] is not None]
    return "-" if not v else f"{statistics.fmean(v):.2f} [{min(v):.2f}, {max(v):.2f}]"


def _gains(rows: list[dict[str, Any]], key: str) -> str:
    return "; ".join(f"{g[0]:+.1f} [{g[1]:+.1f}, {g[2]:+.1f}]" for g in (r[key] for r in rows) if g)


def report() -> str:
    found = rows()
    L = ["# Digits recipes: networks that learn", "",
         f"Made by `{COMMAND}` (`bench/recipe_search.py`; its lines in `bench/results/recipe_search.jsonl`), on "
         f"{machine()} shared with other jobs (the seconds are wall times under that load). Each row is one candidate "
         "recipe of one experiment, trained on scikit-learn's digits at each seed through `scale.run.train` and read "
         "by the premise \"the network learned\" (`scale.runs.premise`): the last epoch's loss at least log 2 = "
         f"{LEARNED_MARGIN:.3f} nats below chance (SimCLR's NT-Xent: log(2 x 128 - 1) = 5.541; the official "
         "one-direction InfoNCE: log 128 = 4.852), or, for SimSiam, which has no chance level, the loss below its "
         "first step and neither z nor h collapsed; and z's class probes against the same backbone at "
         "initialisation, paired over the 450 test images (95 % bootstrap intervals): at least one gain above 0, "
         "none below. The chosen recipes (**bold**) are `scale.engine.recipes.DIGITS_RECIPES`, which the main job, "
         "the grid and the ledger read; the first row of each experiment is its recipe before this search.", "",
         "| experiment | candidate | head | seeds learned | final loss: mean [min, max] | chance | z linear gain "
         "per seed (points) | z kNN gain per seed (points) | seconds per training |",
         "|---|---|---|---|---|---|---|---|---|"]
    for c in CANDIDATES:
        for head in c.heads:
            rs = sorted((r for r in found if r["head"] == head and c.has(r)), key=lambda r: r["seed"])
            if not rs:
                continue
            name = f"**{describe(c.settings)}**" if c.chosen else describe(c.settings)
            learned = sum(bool(r["learned"]) for r in rs)
            chance = rs[0]["chance_loss"]
            L.append(f"| {c.experiment} | {name} | {head} | {learned} of {len(rs)} | {_cell(rs, 'final_loss')} | "
                     f"{'-' if chance is None else f'{chance:.3f}'} | {_gains(rs, 'linear_gain')} | "
                     f"{_gains(rs, 'knn_gain')} | {_cell(rs, 'seconds')} |")
    L += ["", "Augmentations (`scale.engine.augment.PRESET_PARAMS`; `digits_crop05` is `digits_mild`'s parameters "
          "under the search's first name, `digits_rotate_crop05` the search's own):", ""]
    seen: dict[str, Any] = {}
    for r in found:
        seen.setdefault(r["augment"], r["augment_params"])
    L += [f"- `{name}`: {params}" for name, params in seen.items()]
    fails = [r for r in found if r["learned"] is False and any(c.chosen and c.has(r) for c in CANDIDATES)]
    L += ["", "Why a chosen recipe's seed did not learn: " + ("none did." if not fails else "; ".join(
        f"{r['experiment']} {r['head']} seed {r['seed']}: {r['findings'][0]}" for r in fails)), "",
          "Listed before and never run, removed from the list: " + "; ".join(REMOVED) + ". The E1 rows above trained "
          "from the normal start; the ledger trains E1 from the collapsed start, as the SimSiam search below does.", ""]
    return "\n".join(L + simsiam_report(found))


def simsiam_label(c: Candidate) -> str:
    """What a SimSiam-search candidate changes from the paper's setting of its experiment (``bench._simsiam``)."""
    base = dict(_simsiam.PAPER, **_simsiam.STARTS[c.experiment][1])
    diff = {k: v for k, v in c.settings.items() if base.get(k) != v}
    out = []
    if diff.get("head_bn") and c.settings.get("head_style") == "grammar":
        out.append("BatchNorm in the hidden layers")
    elif diff.get("head_bn"):
        out.append("BatchNorm after every Linear")
    for key, text in (("lr", "lr {:g}"), ("weight_decay", "weight decay {:g}"), ("schedule", "{} schedule"),
                      ("batch_size", "batch {}"), ("epochs", "{} epochs")):
        if key in diff:
            out.append(text.format(diff[key]))
    if c.fixed_predictor_lr:
        out.append("the predictor's rate fixed")
    return ", ".join(out) or "none (SGD lr 0.05, momentum 0.9, no weight decay, constant)"


def _gain(g: list[float] | None) -> str:
    return "-" if g is None else f"{g[0]:+.1f} [{g[1]:+.1f}, {g[2]:+.1f}]"


def _says(r: dict[str, Any]) -> str:
    """The premise's word on one row, with the head of each reason (the numbers are in the row)."""
    if r["learned"]:
        return "learned"
    return "did not learn" + "".join(f"{': ' if i == 0 else '; '}{why.split(':')[0]}"
                                     for i, why in enumerate(r["findings"]))


def _spread(rows: list[dict[str, Any]], key: str, index: int | None = None) -> str:
    """[min, max] over the seeds of a per-seed number (``index``: of a gain's point value)."""
    v = [r[key] if index is None else r[key][index] for r in rows if r.get(key) is not None]
    return "-" if not v else f"[{min(v):+.1f}, {max(v):+.1f}]" if index is not None else f"[{min(v):.3f}, {max(v):.3f}]"


def project_pixels() -> tuple[float, float]:
    """The project's raw-input baseline on the search's split (digits at 16 x 16): linear and kNN accuracy, %."""
    data = load_dataset("digits", image_size=16)
    normalize = augment.GPUAugment("none", 16, data.mean, data.std).normalize
    right, near = raw_input_correct(raw_input_features(data.train_x, normalize),
                                    raw_input_features(data.test_x, normalize), data.train_y, data.test_y,
                                    data.classes)
    return 100 * float(right.float().mean()), 100 * float(near.float().mean())


PROBE_NAMES = {SEARCH_OWN_PIXELS: "this search's own probe", RAW_INPUT_PIXELS: "the project's raw-input baseline"}


def pixel_levels(runs: list[tuple[Any, list[dict[str, Any]]]]) -> dict[str, list[float]]:
    """The pixels' (linear, kNN) accuracies per probe the rows carry, in order of first appearance: every row of
    one probe reads the same split, so its first row's value is the probe's (a rerun may mix probes)."""
    levels: dict[str, list[float]] = {}
    for _, rs in runs:
        for r in rs:
            levels.setdefault(r.get("pixel_probe", SEARCH_OWN_PIXELS), r["pixels"])
    return levels


def pixel_note(probes: set[str], runs: list[tuple[Any, list[dict[str, Any]]]]) -> str:
    """What the rows' pixel columns are: the project's raw-input baseline, or (the search's first rows) its own
    probe, with the project's baseline on the same split and whether any row's z reaches either."""
    if probes == {RAW_INPUT_PIXELS}:
        return (" The pixels' probes are the project's raw-input baseline (`scale.geometry.probes.raw_input_features`: "
                "all three equal channels, float64), read from each run's own class probe.")
    lin, knn = project_pixels()
    rows = [r for _, rs in runs for r in rs if r.get("pixel_probe", SEARCH_OWN_PIXELS) == SEARCH_OWN_PIXELS]
    best = (max(r["linear"][0] for r in rows), max(r["knn"][0] for r in rows))
    return (f" {len(rows)} rows' pixel columns come from the search's own probe, computed before the project's "
            "raw-input baseline: one of the three equal grey channels, in float32. The project's baseline "
            "(`scale.geometry.probes.raw_input_features`: all three channels, float64; the one every run report and "
            f"ledger row shows) reaches linear {lin:.2f} % and kNN {knn:.2f} % on the same split (computed as this "
            f"page is written). The best z of those rows, linear {best[0]:.2f} % and kNN {best[1]:.2f} %, is below "
            "both baselines. Rows run since carry the project's baseline (`pixel_probe` in their line).")


def simsiam_report(found: list[dict[str, Any]]) -> list[str]:
    """The SimSiam search's section of ``docs/recipes.md``: one line per candidate (seeds learned), then one line per
    (candidate, seed) with the premise's word and the quantities it reads."""
    runs = [(c, sorted((r for r in found if c.has(r)), key=lambda r: r["seed"])) for c in SIMSIAM]
    runs = [(c, rs) for c, rs in runs if rs]
    levels = pixel_levels(runs)
    probes = set(levels)
    L = ["## The SimSiam search", "",
         "Made by `python -m bench.recipe_search --simsiam --experiments E1 E2 --seeds 3 --threads 1` "
         "(`bench/recipe_search.py`, `bench/_simsiam.py`; its lines are those of `bench/results/recipe_search.jsonl` "
         f"marked `\"search\": \"simsiam\"`), {_simsiam.RUN_AT}, on {machine()}, one process at 1 thread, shared "
         "with other jobs "
         "(the seconds are wall times under that load). Each candidate is E1's or E2's head and start as the ledger "
         "trains them (E1: gelu2 from "
         "the collapsed start, projector weights x 0.1; E2: swish2 from the normal start), on the experiment's digits "
         "recipe (`digits` views; E1 20 epochs, E2 50) and the paper's SGD setting (lr 0.05, momentum 0.9, no weight "
         "decay, constant rate, batch 128, the paper-style head without BatchNorm and without biases), with one "
         "dimension a SimSiam user varies changed at a time, and SimSiam's own recipe at digits' batch (lr 0.05 x "
         "128 / 256, weight decay 1e-4, cosine, the predictor's rate fixed, BatchNorm in the hidden layers). "
         "BatchNorm in the hidden layers keeps the head's map in the paper's form (bias-free Linear layers and the "
         "same activation; no BatchNorm on the output); the predictor, built from the same flags, gets it too, as "
         "SimSiam's predictor has it. The predictor's fixed rate is a hook of the search (`FixedPredictorLR`), not a "
         "`TrainConfig` field (a new field would change every ledger unit's key); under the paper's constant rate "
         "it is the paper's setting itself, so it runs under the cosine schedule only, and each row records the "
         "rates its first and last steps used.", "",
         "Each seed is read by the premise \"the network learned\" (`scale.runs.premise`): SimSiam has no chance "
         "level, so its loss must fall at least 1 % below the loss at the first step (before any update) and "
         "neither h nor z may collapse (spread below 0.1; 1 is rows spread evenly over the sphere); and z's class "
         "probes (the headline linear probe and the kNN probe) must gain over the same backbone at initialisation, "
         "paired over the 450 test images (95 % bootstrap intervals): one gain above 0, none below. The loss's "
         "trivial minimum is -1, which every collapsed representation reaches. Beside the premise, each row gives "
         "z's probes against the raw pixels on the same split (not part of the premise: what \"learned\" does not "
         "claim, a representation better than the input)"
         + "".join(f"{'; ' if i else ': '}the 16 x 16 pixels as the backbone sees them reach linear "
                   f"{v[0]:.2f} % and kNN {v[1]:.2f} % under {PROBE_NAMES[k]}"
                   for i, (k, v) in enumerate(levels.items()))
         + "." + pixel_note(probes, runs), "",
         "Per candidate, over its seeds: the final loss (mean [min, max]), the spreads and z's gains in points "
         "([min, max] of the seeds' point values; each seed's interval is in the table after it).", "",
         "| experiment | dimension | what changes | head | seeds learned | final loss | h spread | z spread | "
         "z linear vs init | z kNN vs init | z linear vs pixels | z kNN vs pixels |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c, rs in runs:
        L.append(f"| {c.experiment} | {c.dimension} | {simsiam_label(c)} | {c.heads[0]} | "
                 f"{sum(bool(r['learned']) for r in rs)} of {len(rs)} | {_cell(rs, 'final_loss')} | "
                 f"{_spread(rs, 'h_spread')} | {_spread(rs, 'z_spread')} | {_spread(rs, 'linear_gain', 0)} | "
                 f"{_spread(rs, 'knn_gain', 0)} | {_spread(rs, 'linear_vs_pixels', 0)} | "
                 f"{_spread(rs, 'knn_vs_pixels', 0)} |")
    L += ["", "Per seed: the premise's word, the loss at the first step and at the end, the spreads, and z's probes "
          "(accuracy, then its gain over the backbone at initialisation and over the pixels, points [95 %]).", "",
          "| experiment | what changes | seed | the premise | loss: first step -> end | h spread | z spread | "
          "z linear % | vs init | vs pixels | z kNN % | vs init | vs pixels | seconds |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c, rs in runs:
        for r in rs:
            L.append(f"| {c.experiment} | {simsiam_label(c)} | {r['seed']} | {_says(r)} | "
                     f"{r['initial_loss']:.4f} -> {r['final_loss']:.4f} | {r['h_spread']:.3f} | {r['z_spread']:.3f} | "
                     f"{r['linear'][0]:.2f} | {_gain(r['linear_gain'])} | {_gain(r['linear_vs_pixels'])} | "
                     f"{r['knn'][0]:.2f} | {_gain(r['knn_gain'])} | {_gain(r['knn_vs_pixels'])} | "
                     f"{r['seconds']:.0f} |")
    return [*L, "", *simsiam_conclusion(runs), ""]


LEFT_OUT_WHY = (" (left out of the list, `bench._simsiam.LEFT_OUT`: the CPU of the night, one process at 1 thread on "
                "2 cores shared with other jobs, ran E1's dimensions first)")


def simsiam_conclusion(runs: list[tuple[Candidate, list[dict[str, Any]]]]) -> list[str]:
    """What the SimSiam search's rows say, counted from them: the candidates that learned at every seed, at some,
    at none; why the seeds that did not learn did not; and the dimensions the search did not reach."""
    every = [c for c, rs in runs if len(rs) >= 3 and all(r["learned"] for r in rs)]
    some = [c for c, rs in runs if any(r["learned"] for r in rs) and c not in every]
    failed = [r for _, rs in runs for r in rs if not r["learned"]]
    why = {name: sum(any(f.startswith(start) for f in r["findings"]) for r in failed) for name, start in (
        ("h collapsed", "the head h collapsed"), ("z collapsed", "the backbone z collapsed"),
        ("the loss did not move", "the loss did not move"), ("a probe of z lowered", "training lowered"),
        ("nothing measurable added", "training added nothing"))}

    def names(cs: list[Candidate]) -> str:
        return "; ".join(f"{c.experiment} {simsiam_label(c)}" for c in cs) or "none"

    missing = [f"{exp} {dim}" for exp in ("E1", "E2") for dim, _, _ in _simsiam.DIMENSIONS
               if not any(c.experiment == exp and c.dimension == dim and len(rs) >= 3 for c, rs in runs)]
    beat = [(c, r) for c, rs in runs for r in rs if r["knn_vs_pixels"][1] > 0 or r["linear_vs_pixels"][1] > 0]
    return ["**What the rows say** (counted from them by `simsiam_conclusion`): "
            f"{len(runs)} candidates, {sum(len(rs) for _, rs in runs)} trainings. Learned at all 3 seeds: "
            f"{names(every)}. Learned at some seeds: {names(some)}. Of the {len(failed)} trainings that did not "
            "learn: " + ", ".join(f"{n} {name}" for name, n in why.items()) + " (a training can fail on several). "
            f"Trainings whose z beats the raw pixels (a probe's interval above 0): {len(beat)}. Dimensions not run at "
            f"3 seeds: {', '.join(missing) or 'none'}" + (LEFT_OUT_WHY if missing else "") + ".", "",
            _plainly(every, some, failed, missing)]


def _plainly(every: list[Candidate], some: list[Candidate], failed: list[dict[str, Any]], missing: list[str]) -> str:
    """The conclusion in words, from the counts (which recipe learns, and where "no recipe learns" holds)."""
    scope = ("for the dimensions and values of the table only (one value each, 3 seeds, E1's gelu2 from the collapsed "
             "start and E2's swish2 from the normal start): not for values between or beyond those tried, other heads, "
             "or combinations other than SimSiam's own recipe" + (f", nor for {', '.join(missing)}, which did not run"
                                                                  if missing else ""))
    if every:
        return ("**Plainly:** a SimSiam recipe learns on digits at every seed: " + "; ".join(
            f"{c.experiment} under {simsiam_label(c)}" for c in every) + ". \"No recipe learns\" is not supported "
            "there; DIGITS_RECIPES' E1/E2 recipes may take it (a decision of the ledger's registration).")
    if some:
        return ("**Plainly:** no SimSiam recipe learns on digits at every seed; some seeds learn under " + "; ".join(
            f"{c.experiment} {simsiam_label(c)}" for c in some) + ". \"No recipe learns\" is not supported "
            "there (a recipe that learns at some seeds), and holds " + scope + ".")
    collapsed = [r for r in failed if any(f.startswith("the head h collapsed") for f in r["findings"])]
    standing = [r for r in failed if r not in collapsed]
    lowered = [r for r in standing if any(f.startswith("training lowered") for f in r["findings"])]
    bn = sum(r["settings"].get("head_bn", False) for r in standing)

    def losses(rs: list[dict[str, Any]]) -> str:
        return f"{min(r['final_loss'] for r in rs):.3f} to {max(r['final_loss'] for r in rs):.3f}" if rs else "-"

    def spreads(rs: list[dict[str, Any]]) -> str:
        return f"{min(r['h_spread'] for r in rs):.3f} to {max(r['h_spread'] for r in rs):.3f}" if rs else "-"

    return (f"**Plainly:** no SimSiam recipe the search tried learns on digits: every training failed the premise. "
            f"{len(collapsed)} collapsed their head onto the loss's trivial minimum (final loss {losses(collapsed)} "
            f"against -1, h spread {spreads(collapsed)}); the other {len(standing)} ({bn} of them with BatchNorm in "
            f"the head) kept their head apart (final loss {losses(standing)}, h spread {spreads(standing)}), and in "
            f"{len(lowered)} of those training lowered a class probe of z below the same backbone at initialisation. "
            f"\"No recipe learns\" holds {scope}.")


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m bench.recipe_search", description=__doc__.split("\n\n")[0])
    p.add_argument("--experiments", nargs="+", default=["main", "E3E4", "E5", "E1", "E2"], choices=list(DIGITS_RECIPES))
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--simsiam", action="store_true", help="only the SimSiam search's candidates (bench._simsiam)")
    a = p.parse_args(argv)
    for name, params in EXTRA_PRESETS.items():
        if name not in augment.PRESET_PARAMS:
            augment.register_preset(name, params)
    if not a.report_only:
        search(a.experiments, a.seeds, a.threads, a.simsiam)
    write_atomic(TABLE, report())
    print(f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
