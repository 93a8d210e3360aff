"""The search for digits recipes under which each experiment's network learns (``docs/recipes.md``).

    python -m bench.recipe_search [--experiments main E3E4 ...] [--seeds 3] [--threads 1] [--report-only]

Each candidate is a recipe of one experiment: its method and head(s), the settings that differ from the
experiment's (``scale.engine.recipes.DIGITS_RECIPES`` holds the chosen ones) and an augmentation. Every candidate
trains on digits at ``--seeds`` seeds through ``scale.run.train`` (the run ``python -m scale.run`` makes, without
its orbit geometry and rotation probes), and is read by the premise "the network learned"
(``scale.runs.premise``): the last epoch's loss against chance (or, without a chance level, its first step and the
collapse detectors), and z's class probes (linear and kNN) against the backbone at initialisation, paired over
the test images. One JSON line per (candidate, seed) goes to ``bench/results/recipe_search.jsonl`` as it ends (a
rerun skips what is there); ``docs/recipes.md`` is the table over seeds. The candidates that are not presets of
``scale.engine.augment`` are registered here under their names (``register_preset``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bench._util import machine, write_atomic
from scale.engine import augment
from scale.engine.config import TrainConfig
from scale.engine.data import load_dataset
from scale.engine.hooks import Hook
from scale.engine.recipes import DIGITS_RECIPES
from scale.geometry.measure import EndOfRun
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
                     weight_decay=0.0)  # the official E3 code's head and optimiser (scale.experiments.paper)
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

    def config(self, head: str, seed: int, threads: int) -> TrainConfig:
        return TrainConfig.resolve("digits", self.method, "resnet18", head=head, seed=seed, threads=threads,
                                   augment_path="batched", **self.settings)

    @property
    def chosen(self) -> bool:
        return all(self.settings.get(k) == v for k, v in DIGITS_RECIPES[self.experiment].items()) and \
            all(v == BASE[self.experiment].get(k, v) for k, v in self.settings.items()
                if k not in DIGITS_RECIPES[self.experiment])

    def key(self) -> str:
        return json.dumps({"experiment": self.experiment, "settings": self.settings}, sort_keys=True)


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
    Candidate("E1", "simsiam", ("gelu2",), dict(_SIMSIAM, head_bn=True, **_recipe("E1"))),
    Candidate("E2", "simsiam", ("swish2",), dict(_SIMSIAM, head_bn=False, augment="e1", epochs=50)),  # before
    Candidate("E2", "simsiam", ("swish2",), dict(_SIMSIAM, head_bn=False, **_recipe("E2"))),
    Candidate("E2", "simsiam", ("swish2",), dict(_SIMSIAM, head_bn=False, **{**_recipe("E2"), "weight_decay": 5e-4})),
)


class Losses(Hook):
    """Each epoch's mean loss (where the premise starts to hold: the recipes' short check, tests/test_recipes.py)."""

    def __init__(self) -> None:
        self.per_epoch: list[float] = []

    def on_epoch_end(self, state) -> None:
        self.per_epoch.append(float(state.history[-1]["loss"]))


def _est(e) -> list[float] | None:
    return None if e is None else [e.value, e.low, e.high]


def one(c: Candidate, head: str, seed: int, threads: int, data) -> dict[str, Any]:
    """One training of candidate ``c`` and its premise, JSON-ready."""
    cfg = c.config(head, seed, threads)
    t0 = time.perf_counter()
    losses = Losses()
    s = train(cfg, data, None, hooks=[losses], measure=EndOfRun(geometry=False), progress=False, log=None)
    t = s.training
    p = s.class_probe
    return {"experiment": c.experiment, "label": describe(c.settings), "head": head, "seed": seed, "threads": threads,
            "settings": c.settings, "augment": cfg.augment, "epochs": cfg.epochs,
            "augment_params": augment.PRESET_PARAMS[cfg.augment], "seconds": time.perf_counter() - t0,
            "learned": t.learned, "findings": t.findings, "final_loss": t.final_loss, "chance_loss": t.chance_loss,
            "initial_loss": t.initial_loss, "h_spread": t.h_spread, "z_spread": t.z_spread,
            "losses": losses.per_epoch,
            "linear": [p.accuracy.z, p.initial_z], "linear_gain": _est(p.initial_gain),
            "knn": [p.knn.accuracy.z, p.knn.initial_z], "knn_gain": _est(p.knn.initial_gain)}


def _row_key(experiment: str, settings: dict[str, Any], head: str, seed: int) -> str:
    return json.dumps([experiment, settings, head, seed], sort_keys=True)


def rows() -> list[dict[str, Any]]:
    return [json.loads(li) for li in LINES.read_text().splitlines()] if LINES.is_file() else []


def search(experiments: list[str], seeds: int, threads: int) -> None:
    torch.set_num_threads(threads)
    data = load_dataset("digits", image_size=16)
    done = {_row_key(r["experiment"], r["settings"], r["head"], r["seed"]) for r in rows()}
    for c in CANDIDATES:
        if c.experiment not in experiments:
            continue
        for seed in range(seeds):
            for head in c.heads:
                if _row_key(c.experiment, c.settings, head, seed) in done:
                    continue
                r = one(c, head, seed, threads, data)
                LINES.parent.mkdir(parents=True, exist_ok=True)
                with LINES.open("a") as f:
                    f.write(json.dumps(r) + "\n")
                print(f"{c.experiment} {describe(c.settings)} {head} s{seed}: loss {r['final_loss']:.3f} (chance "
                      f"{r['chance_loss']}), learned {r['learned']}, {r['seconds']:.0f} s", flush=True)


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
            rs = sorted((r for r in found if (r["experiment"], r["head"]) == (c.experiment, head)
                         and r["settings"] == c.settings), key=lambda r: r["seed"])
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
    fails = [r for r in found if r["learned"] is False and any(
        c.chosen and (c.experiment, c.settings) == (r["experiment"], r["settings"]) for c in CANDIDATES)]
    L += ["", "Why a chosen recipe's seed did not learn: " + ("none did." if not fails else "; ".join(
        f"{r['experiment']} {r['head']} seed {r['seed']}: {r['findings'][0]}" for r in fails)), ""]
    return "\n".join(L)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.recipe_search", description=__doc__.split("\n\n")[0])
    p.add_argument("--experiments", nargs="+", default=["main", "E3E4", "E5", "E1", "E2"])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--report-only", action="store_true")
    a = p.parse_args(argv)
    for name, params in EXTRA_PRESETS.items():
        if name not in augment.PRESET_PARAMS:
            augment.register_preset(name, params)
    if not a.report_only:
        search(a.experiments, a.seeds, a.threads)
    write_atomic(TABLE, report())
    print(f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
