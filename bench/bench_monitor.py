"""The monitors' cost as a share of a training epoch, measured side by side in one process.

Two shapes, each with the project's model (ResNet-18 backbone, the ``gelu3`` head) built by the trainer
(``scale.engine.train.Trainer``) from the config ``python -m scale.run`` resolves:

    digits  scikit-learn's digits, the main job's recipe (``TrainConfig.resolve("digits", head="gelu3")``)
    cifar   CIFAR-10's shapes on synthetic images: 32 x 32 x 3, 10 classes, d = 512, the epoch's length taken as
            CIFAR-10's 50,000 training images over the batch (synthetic: this machine has no network)

In interleaved rounds (``bench._util.interleaved_times``; medians compared), three things are timed:

    step     one training step of the trainer (``Trainer._step``: views, forward, loss, backward, optimiser)
    online   ``scale.monitor.online.OnlineKnn``'s per-epoch kNN of z (what ``python -m scale.run`` adds per epoch)
    monitor  one ``scale.monitor.Monitor.measure`` of the model: H_eff's ends and |M|/|H| (16 view pairs), the
             spread, the kNN of z (1000 training, 500 test images) and its raw-input baseline

and the share of an epoch is ``cost / (step x steps per epoch)``, for one measurement per epoch.
Writes ``bench/results/monitor.md``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

from bench._util import interleaved_times, out_help, publish, result_path, run_header
from scale.engine.config import TrainConfig
from scale.engine.data import load_dataset, load_synthetic
from scale.engine.objectives import nt_xent
from scale.engine.train import Trainer
from scale.monitor import Monitor
from scale.monitor.online import OnlineKnn

OUT = Path(__file__).resolve().parent / "results" / "monitor.md"
CIFAR_TRAIN = 50_000


def setup(shape: str, batch: int | None, quick: bool):
    if shape == "digits":
        data = load_dataset("digits", None, download=False)
        cfg = TrainConfig.resolve("digits", head="gelu3", **({"batch_size": batch} if batch else {}))
        epoch_images = len(data.train_x)
    else:
        n = 256 if quick else 1600
        data = load_synthetic(n_train=n, n_test=n // 3 if quick else 500, image_size=32, classes=10)
        cfg = TrainConfig.resolve("cifar10", head="gelu3", batch_size=batch or 64, image_size=32)
        epoch_images = CIFAR_TRAIN
    trainer = Trainer(cfg, data, torch.device("cpu"), log=None)
    steps = epoch_images // cfg.batch_size
    return trainer, data, cfg, steps


def measure_shape(shape: str, repeats: int, batch: int | None, quick: bool) -> list[str]:
    trainer, data, cfg, steps = setup(shape, batch, quick)
    state = trainer.state
    online = OnlineKnn(data)
    perm = trainer._permutation(0)
    x = trainer.augment.views(data.train_x[:16], seed=0)
    x1, x2 = x[:16], x[16:]
    norm = trainer.augment.normalize
    labelled = (norm(data.train_x[:1000]), data.train_y[:1000], norm(data.test_x[:500]), data.test_y[:500])
    model = trainer.model
    monitor = Monitor(model.backbone, model.projector, lambda a, b: nt_xent(torch.cat([a, b]), cfg.temperature),
                      (x1, x2), labelled=labelled, budget=1.0)
    counter = [0]

    def step() -> None:
        trainer._step(0, counter[0] % trainer.steps_per_epoch, perm)
        counter[0] += 1

    step()  # warm-up of each
    online.accuracy(state)
    first = monitor.measure()
    t = interleaved_times({"step": step, "online": lambda: online.accuracy(state), "monitor": monitor.measure},
                          repeats)
    med = {k: statistics.median(v) for k, v in t.items()}
    epoch = med["step"] * steps
    d = int(state.embed(x1)[0].shape[1])
    return [f"| {shape} | {cfg.batch_size} | {steps} | {1e3 * med['step']:.0f} | {epoch:.1f} | "
            f"{med['online']:.2f} | **{100 * med['online'] / epoch:.2f} %** | {med['monitor']:.2f} | "
            f"**{100 * med['monitor'] / epoch:.2f} %** | {first['path']} | {2 * len(x1) * d} |"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_monitor", description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds (default: 3)")
    p.add_argument("--threads", type=int, default=1, help="torch threads, fixed (default: 1)")
    p.add_argument("--shapes", default="digits,cifar", help="comma-separated: digits, cifar")
    p.add_argument("--quick", action="store_true", help="small synthetic sizes, 1 round: checks that it runs")
    p.add_argument("--out", help=out_help(OUT))
    args = p.parse_args(argv)
    args.out = str(result_path(args.out, OUT, args.quick))  # a check never replaces the measurement
    torch.set_num_threads(args.threads)
    repeats = 1 if args.quick else args.repeats
    lines = ["# The monitors' cost as a share of an epoch", "",
             run_header("bench.bench_monitor", argv if argv is not None else sys.argv[1:], args.threads), "",
             f"Medians of {repeats} interleaved rounds after one warm-up call each (see the module docstring). "
             "The epoch is the median step times the steps of an epoch (CIFAR-10's 50,000 images for the cifar "
             "shape, synthetic 32 x 32 images standing in for them).", "",
             "| shape | batch | steps per epoch | step ms | epoch s | online kNN s | online share | monitor s | "
             "monitor share | curvature path | N = n d |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for shape in args.shapes.split(","):
        lines += measure_shape(shape, repeats, None, args.quick)
    return publish(args.out, lines)


if __name__ == "__main__":
    sys.exit(main())
