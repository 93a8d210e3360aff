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
The protocols and their measurements live in ``scale.geometry.protocols``, one seed's trainings and measurements in
``scale.geometry.e4_seed``; this command stores and reports.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import torch

from scale.engine import disk, read
from scale.engine.checkpoint import atomic_write_json
from scale.engine.data_errors import DataError
from scale.engine.flags import MAX_COUNT, MAX_THREADS, OneLineParser, number
from scale.geometry.e4_report import write_report
from scale.geometry.e4_seed import e3_config, one_seed
from scale.runs.faults import guarded
from scale.runs.validate import plan_disagreements
from scale.unit_store.schema import MAX_SEEDS

# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


class ResultsFileError(ValueError):
    """results.json is not one this study wrote (exit 1)."""


def reused_seeds(path: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The seeds ``path`` (results.json) holds, each checked against this invocation's plan: its training config
    against ``e3_config`` (``scale.runs.validate.plan_disagreements``) and its ``--probe-images``.
    ``ResultsFileError`` when the file is not a results file of this study; ``ValueError`` naming the seeds of
    another plan otherwise: they are never mixed into this one's intervals, and the file is left as it is."""
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

    other = []
    for s in seeds:
        planned = e3_config(args.dataset, s["seed"], args.epochs).to_dict()
        differ = plan_disagreements(s["config"], planned)
        measured = s.get("probe_images")  # each seed records its own; one that does not is not known to be this plan's
        if measured != args.probe_images:
            differ.append(f"probe_images ({'not recorded' if measured is None else measured} vs {args.probe_images})")
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
    found = [n for n in OUTPUTS if os.path.lexists(out / n)]
    if found and not results.is_file():
        raise ValueError(f"{out} holds {', '.join(found)} but no results.json of this study: they are not its "
                         "own, so nothing was run. Use another --out, or move them away")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m scale.e4_study", description="E4's orbit compression under "
                                "the paper's protocol and its controls (a-e), several seeds, 95 %% t intervals.")
    p.add_argument("--dataset", default="digits", choices=("digits", "cifar10"), help="default: digits (offline)")
    p.add_argument("--seeds", type=number(int, 1, MAX_SEEDS), default=5, help="seeds 0 .. N-1 (default 5)")
    p.add_argument("--epochs", type=number(int, 1, MAX_COUNT),
                   help="training epochs (default: scale.paper's E3: 50 on CIFAR, the digits "
                   "adjustment of scale.run on digits)")
    p.add_argument("--probe-images", type=number(int, 2, MAX_COUNT), default=10_000,
                   help="probe base images per split (default 10000)")
    p.add_argument("--data-dir", help="folder with the CIFAR archive (see scale.run)")
    p.add_argument("--threads", type=number(int, 1, MAX_THREADS), default=2, help="torch CPU threads (default 2)")
    p.add_argument("--out", default="e4_study", help="output folder (default: e4_study)")
    return p


@guarded("scale.e4_study")  # an output that is a link (exit 2) or cannot be written (exit 4): one line
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # every number in its range (scale.engine.flags.number), or exit 2
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
            current[seed] = one_seed(e3_config(args.dataset, seed, args.epochs), args.data_dir, args.probe_images,
                                     print)
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
