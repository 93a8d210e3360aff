r"""The paper's experiments E1-E5 as data: the settings per experiment (the paper's, and its official code's where
the paper is silent), the assumptions where neither decides, the runs of its grid (each a ``PlannedRun``: its
``TrainConfig`` settings, resolved as ``python -m scale.run`` resolves them, and the paper's value of every setting
it checks), and the deviations of a resolved config from the paper's. On digits each experiment trains with its
digits recipe (``scale.engine.recipes.DIGITS_RECIPES``). The grid (``scale.paper``, ``scale.grid``) and the ledger
(``scale.ledger``) read these runs; ``scale.paper``'s docstring describes the grid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scale.engine.config import TrainConfig
from scale.engine.data import CIFAR
from scale.engine.recipes import DIGITS_RECIPES

EXPERIMENTS: tuple[str, ...] = ("E1", "E2", "E3E4", "E5")
E1_HEADS: tuple[str, ...] = ("linear", "relu2", "gelu2", "swish2")  # projector 512-2048-2048: 2 Linear layers
E1_LRS: tuple[float, ...] = (0.005, 0.05, 0.5)
E2_RUNS: tuple[tuple[str, str], ...] = (("normal", "swish2"), ("collapsed", "swish2"), ("collapsed", "relu2"))
E5_DEPTHS: tuple[int, ...] = (1, 2, 3)
E5_HEADS: dict[int, str] = {1: "linear", 2: "swish2", 3: "swish3"}  # depth = Linear layers (paper style, with BN)
QUICK = dict(seeds=1, epochs=2, train_subset=384, probe_images=256)
FULL_SEEDS = 3

# The paper's settings per experiment (docs/paper.md, and its official code where the paper is silent); keys are
# TrainConfig fields. "schedule": the official code keeps the learning rate constant.
_COMMON = dict(backbone="resnet18", backbone_width=64, head_width=2048, head_out=2048, head_style="paper",
               head_bias=False, schedule="constant", weight_decay=0.0)
_SIMCLR = dict(_COMMON, method="simclr_paper", temperature=0.1, head_bn=True, head_out_bn=True, optimizer="adam",
               lr=1e-3, epochs=50, augment="e3")
PAPER_SETTINGS: dict[str, dict[str, Any]] = {
    "E1": dict(_COMMON, method="simsiam", pred_width=512, optimizer="sgd", momentum=0.9, batch_size=512, epochs=50,
               augment="e1", init="collapsed"),
    "E2": dict(_COMMON, method="simsiam", pred_width=512, head_bn=False, optimizer="sgd", lr=0.05, momentum=0.9,
               batch_size=256, epochs=100, augment="e1"),
    "E3E4": dict(_SIMCLR, head="relu2", batch_size=256),
    "E5": dict(_SIMCLR, batch_size=512),  # head_depth_ablations.py: ExperimentConfig's batch 512
}
# Where neither the paper nor its official code decides, what the grid does (manifest and report).
ASSUMPTIONS: dict[str, str] = {
    "E1": "E1 runs from the pseudo-collapse initialisation (listed under E1 in docs/paper.md). The linear head is the "
          "official two bias-free Linear layers 512-2048-2048, which take no BatchNorm there, so it runs with "
          "BatchNorm off only. The official grid is a 14-run subset of this one (GELU at lr 0.05 without "
          "BatchNorm only).",
    "E2": "E2's objective is not named in the paper: SimSiam (the official hessian_tracker.py's). Probe batch: "
          "scale.curvature.tracking's fixed view pairs of the first step (rows in the E2 table); "
          "lambda_min/lambda_max by "
          "Lanczos in float64 (the paper: 20 power iterations in float32 on the first 5 batches of each epoch); "
          "1 seed.",
    "E3E4": "Probe images: training split for fitting, test split for scoring; orbits from the test split. Images "
            "are normalised with the dataset's mean and std (the official code feeds ToTensor's [0, 1]).",
    "E5": "Depth = number of Linear layers, as in the official head_depth_ablations.py: depth 1 is Linear-BN "
          "(the paper style's 'linear' with BatchNorm), depth 2 swish2, depth 3 swish3; BatchNorm after every "
          "Linear, no biases.",
}
# a run (a grid run, a ledger unit) in another state (an error, interrupted) is run again by the next invocation
DONE_STATUSES = ("finished", "non-finite loss")


@dataclass
class PlannedRun:
    """One run of the grid: ``settings`` are ``TrainConfig`` fields given on top of ``python -m scale.run``'s
    resolution of ``dataset``, ``backbone`` and the settings' method (``config``); ``probe_images``: the end-of-run
    rotation probes' image cap (``None``: scale.run's default); ``data_dir``: where the data is (CIFAR)."""

    name: str
    experiment: str
    seed: int
    dataset: str
    backbone: str
    settings: dict[str, Any]
    paper: dict[str, Any]  # the paper's value of each checked setting
    track_hessian: bool = False
    labels: dict[str, Any] = field(default_factory=dict)
    probe_images: int | None = None
    data_dir: str | None = None  # where the data is, not what it is: in no key

    def config(self, device: str = "cpu", **changes: Any) -> TrainConfig:
        """The ``TrainConfig`` of this run on ``device`` (``changes``: more settings, e.g. threads)."""
        values = {k: v for k, v in {**self.settings, **changes}.items() if k != "method"}
        return TrainConfig.resolve(self.dataset, self.settings.get("method", "simclr"), self.backbone, device=device,
                                   seed=self.seed, **values)

    @property
    def argv(self) -> list[str]:
        """The run as a ``python -m scale.run`` command line (the manifest's record for people, and the grid's runs
        through scale.run), from ``settings``: one flag per setting."""
        out = [self.dataset, "--backbone", self.backbone, "--seed", str(self.seed)]
        for k, v in self.settings.items():
            if v is None:
                continue
            flag = f"--{k.replace('_', '-')}"
            out += ([flag] if v else [f"--no-{k.replace('_', '-')}"]) if isinstance(v, bool) else [flag, str(v)]
        if self.probe_images is not None:
            out += ["--probe-images", str(self.probe_images)]
        if self.data_dir is not None:
            out += ["--data-dir", self.data_dir]
        if self.track_hessian:  # E2: H_eff once per epoch (scale.curvature.tracking through scale.run)
            out += ["--track-hessian-every", "epoch"]
        return out


def plan(dataset: str, backbone: str, quick: bool, experiments: tuple[str, ...] = EXPERIMENTS,
         seeds: int | None = None, epochs: int | None = None) -> list[PlannedRun]:
    """Every run of the grid, in execution order."""
    n_seeds = seeds or (QUICK["seeds"] if quick else FULL_SEEDS)
    cifar = dataset in CIFAR
    runs: list[PlannedRun] = []

    def add(name: str, exp: str, seed: int, flags: dict[str, Any], paper: dict[str, Any], labels: dict[str, Any],
            track: bool = False) -> None:
        ref = dict(PAPER_SETTINGS[exp], **paper)
        if exp == "E1" and dataset == "cifar100":
            ref["epochs"] = 20
        values = {k: v for k, v in ref.items() if k != "backbone"}
        if not cifar:  # the dataset's CPU adjustments of scale.run apply to the model and batch sizes
            for k in ("backbone_width", "head_width", "head_out", "pred_width", "batch_size", "epochs"):
                values.pop(k, None)
            if dataset == "digits":  # the experiment's digits recipe: a network that learns (docs/recipes.md)
                values.update(DIGITS_RECIPES[exp])
        values.update(flags)
        if quick:
            values.update(epochs=QUICK["epochs"], train_subset=QUICK["train_subset"])
        if epochs is not None:
            values["epochs"] = epochs
        runs.append(PlannedRun(name, exp, seed, dataset, backbone, values, ref, track, labels,
                               QUICK["probe_images"] if quick else None))

    for seed in range(n_seeds):
        if "E1" in experiments:
            for head in E1_HEADS:
                for bn in (False, True) if head != "linear" else (False,):  # the official linear head has no BN
                    for lr in E1_LRS:
                        add(f"E1-{head}-bn{int(bn)}-lr{lr:g}-s{seed}", "E1", seed, dict(head=head, head_bn=bn, lr=lr),
                            dict(head=head, lr=lr), dict(head=head, bn=bn, lr=lr))
        if "E3E4" in experiments:
            add(f"E3E4-relu2-s{seed}", "E3E4", seed, {}, {}, dict(head="relu2"))
        if "E5" in experiments:
            for depth in E5_DEPTHS:
                head = E5_HEADS[depth]
                add(f"E5-depth{depth}-s{seed}", "E5", seed, dict(head=head), dict(head=head),
                    dict(depth=depth, head=head))
    if "E2" in experiments:
        for init, head in E2_RUNS:
            add(f"E2-{init}-{head}-s0", "E2", 0, dict(head=head, init=init), dict(head=head, init=init),
                dict(init=init, head=head), track=True)
    return runs



def deviations(config: dict[str, Any], paper: dict[str, Any], dataset: str, probe_images: int | None = None
               ) -> dict[str, list[Any]]:
    """``{setting: [paper, ours]}`` for every checked setting whose resolved value differs from the paper's;
    the dataset itself counts (the paper's figures are CIFAR-10)."""
    out: dict[str, list[Any]] = {}
    if dataset != "cifar10":
        out["dataset"] = ["cifar10", dataset]
    for key, ref in paper.items():
        ours = config.get(key)
        if key == "backbone_width" and ours is None:
            ours = 64  # resnet18's standard width
        if key in ("lr", "momentum", "weight_decay", "temperature") and ours is not None:
            if abs(float(ours) - float(ref)) <= 1e-12 * max(1.0, abs(float(ref))):
                continue
        elif ours == ref:
            continue
        out[key] = [ref, ours]
    if config.get("train_subset") is not None:
        out["train_subset"] = ["all", config["train_subset"]]
    if probe_images is not None:  # a measurement setting (not in config.json): probes on fewer images
        out["probe_images"] = ["all", int(probe_images)]
    return out
