r"""The ledger's plan: its units (one run of the paper's grid, ``scale.experiments.catalog``, at one seed each), their
sizes, their keys, and an estimate of each unit's cost on any device. On digits each experiment trains with its
digits recipe (``scale.engine.recipes.DIGITS_RECIPES``: a network that learns, docs/recipes.md).

    E1    SimSiam, projector and predictor of one activation, no bias: heads linear, relu2, gelu2, swish2 x
          BatchNorm off/on (linear: off) x lr {0.005, 0.05, 0.5}, from the pseudo-collapsed start (projector
          weights x 0.1); the normal start for BatchNorm off at lr 0.05 (the controls of E1 and Section 3).
    E2    SimSiam, no BatchNorm, lr 0.05: normal/swish2, collapsed/swish2, collapsed/relu2, curvature every epoch.
    E3E4  ``scale.e4_study``'s seed: the E3 model trained twice (head on raw z; on normalised z), protocols a-e.
    E5    the E3 set-up with a Swish + BatchNorm head of depth 1, 2, 3, protocols a-d.

A unit's ``key`` is everything that shapes its numbers (its resolved ``TrainConfig``, the measurement settings,
experiment and seed); ``key_hash`` names its file in the store. Every unit draws its views on the batched path
(``AUGMENT_PATH``), so that the same unit gives the same numbers on any machine at the same thread count. Where
it ran (device, threads) is not in the key: the store keeps it in the file's name and the report never mixes two
of them.

Cost (``estimate_seconds``): seconds = epochs x seconds per epoch of the experiment on digits, CPU, one thread,
measured on the v1 ledger's 160 units (median over each experiment's units of seconds / epochs, with the
measurements inside), times a size factor for CIFAR (images per epoch x pixels x backbone width squared against
digits': a FLOP-proportional extrapolation, not a measurement), divided by a device factor (CUDA: an assumed
throughput ratio, no GPU measured here); where the store already holds units of the plan, the median of their
seconds per experiment instead. The estimate says which of these it rests on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scale.engine.config import TrainConfig
from scale.engine.recipes import DIGITS_RECIPES
from scale.experiments.catalog import CIFAR, EXPERIMENTS, plan
from scale.unit_store.files import Planned, digest  # digest: the store's key hash (re-exported: plan.digest)

# Epochs on digits: each experiment's digits recipe (scale.engine.recipes.DIGITS_RECIPES, docs/recipes.md: the
# epochs under which its network learns); on CIFAR every experiment keeps the paper's (None: the grid's plan).
DIGITS_EPOCHS: dict[str, int] = {e: DIGITS_RECIPES[e]["epochs"] for e in EXPERIMENTS}
# --quick: the pipeline, not the numbers (2 seeds, tiny model, 2 steps an epoch)
QUICK_EPOCHS: dict[str, int] = {"E1": 1, "E2": 4, "E3E4": 1, "E5": 1}
QUICK_SETTINGS = dict(train_subset=64, batch_size=32, backbone_width=8, head_width=32, head_out=16, pred_width=8)
QUICK_SEEDS, QUICK_PROBE_IMAGES, QUICK_PROBE_PAIRS = 2, 32, 4
PROBE_IMAGES = 10_000  # rotation probes: base images per split (all of digits)
E1_NORMAL_START = ((False, 0.05),)  # (BatchNorm, lr) of E1's normal-start controls, every head
PROBE_PAIRS = 16  # view pairs of the curvature probe (32 rows), as scale.curvature.tracking's
PROBE_SEED = 2024  # the curvature probe's views, fixed for a run
RANGE_FLOOR = 1e-6  # Section 3: eigenvalues below this fraction of a block's largest |eigenvalue| count as flat
CONTROL_SEED = 12345  # the untrained heads' seed offset (scale.geometry.measure's)
# E1's pseudo-collapsed start, then collapsed in the measured statistic (scale.geometry.mechanism.collapsed_start_:
# the head reads z along its mean direction plus 1e-3 of the rest); the paper's x 0.1 alone leaves h std unchanged
E1_COLLAPSE = "mean direction, eps 1e-3"
TANGENT_IMAGES = 64  # E5: test images whose rotation tangents measure Proposition 5.2
AUGMENT_PATH = "batched"  # every unit draws its views on the batched path: the same random stream on any machine
KEY_FORMAT = 3  # v3: a unit is keyed by its resolved TrainConfig (not a command line)
# The ledger's edition: v4's rules read measurements v3's units lack (the twin under protocol a, the raw-input
# probes), so v4 is a new plan over the same units' keys. Part of the plan's settings (v3's registrations, before
# it, have none), so two editions never share a plan id, a registration file or a unit file's name.
EDITION = 4
MACHINE_FIELDS = ("device", "threads")  # where a unit ran: in its file's name, not its key

# Cost model (module docstring). Seconds per epoch, digits, CPU, 1 thread: the v1 ledger's median seconds / epochs.
SECONDS_PER_EPOCH = {"E1": 3.3, "E2": 2.7, "E3E4": 4.2, "E5": 3.1}
QUICK_SECONDS = {"E1": 3.0, "E2": 6.0, "E3E4": 8.0, "E5": 4.0}  # --quick units, measured on this CPU
CIFAR_SIZE_FACTOR = (50_000 / 1_347) * (32 * 32 / (16 * 16)) * (64 / 16) ** 2  # images x pixels x width^2
DEVICE_FACTOR = {"cpu": (1.0, "measured (v1 ledger, 1 thread)"),
                 "cuda": (50.0, "assumed 50x a CPU thread (no GPU measured)")}


@dataclass(frozen=True)
class Unit:
    """One unit: a training (E3E4: the E4 study's two) of ``settings``, ``TrainConfig`` fields on top of
    ``python -m scale.run``'s resolution of ``dataset`` and ``backbone`` (``config``), measured with ``measure``."""

    name: str
    experiment: str  # E1, E2, E3E4, E5
    seed: int
    dataset: str
    backbone: str
    settings: dict[str, Any]  # TrainConfig fields, the method among them
    paper: dict[str, Any]  # the paper's value of each checked setting (scale.experiments.catalog.PlannedRun.paper)
    labels: dict[str, Any] = field(default_factory=dict)
    measure: dict[str, Any] = field(default_factory=dict)  # the settings outside the training that shape its numbers
    device: str = "cpu"

    @property
    def epochs(self) -> int | None:
        return self.settings.get("epochs")

    def config(self, threads: int = 1) -> TrainConfig:
        """The unit's ``TrainConfig`` at ``threads`` on its device."""
        values = {k: v for k, v in self.settings.items() if k != "method"}
        return TrainConfig.resolve(self.dataset, self.settings["method"], self.backbone, device=self.device,
                                   seed=self.seed, threads=threads, augment_path=AUGMENT_PATH, **values)

    def key(self) -> dict[str, Any]:
        """What must match for a stored result to count for this unit: its resolved config (where it ran left
        out), experiment, seed and measurement settings. A code change that changes what the unit trains changes
        its key."""
        config = {k: v for k, v in self.config().to_dict().items() if k not in MACHINE_FIELDS}
        return {"format": KEY_FORMAT, "config": config, "experiment": self.experiment, "seed": self.seed,
                "measure": self.measure}

    def key_hash(self) -> str:
        return digest(self.key())[:12]


def epochs_of(dataset: str, quick: bool, override: dict[str, int] | None = None) -> dict[str, int | None]:
    base: dict[str, int | None] = dict(QUICK_EPOCHS if quick else ({} if dataset in CIFAR else DIGITS_EPOCHS))
    return {e: (override or {}).get(e, base.get(e)) for e in EXPERIMENTS}


def parse_epochs(text: str) -> dict[str, int]:
    """``--epochs``: ``N`` (every experiment) or ``E1=5,E2=10``; ValueError with the valid forms otherwise."""
    text = text.strip()
    try:
        if "=" not in text:
            n = int(text)
            out = {e: n for e in EXPERIMENTS}
        else:
            out = {}
            for part in text.split(","):
                k, v = part.split("=")
                if k.strip() not in EXPERIMENTS:
                    raise KeyError(k.strip())
                out[k.strip()] = int(v)
    except KeyError as exc:
        raise ValueError(f"--epochs {text}: unknown experiment {exc}; valid: {', '.join(EXPERIMENTS)}") from None
    except ValueError:
        raise ValueError(f"--epochs takes N or E1=N,E2=N,... (experiments {', '.join(EXPERIMENTS)}), got "
                         f"{text!r}") from None
    if any(v < 1 for v in out.values()):
        raise ValueError(f"--epochs must be positive, got {text!r}")
    return out


def plan_units(dataset: str, seeds: int, quick: bool, epochs: dict[str, int] | None = None,
               experiments: tuple[str, ...] = EXPERIMENTS, device: str = "cpu") -> list[Unit]:
    """Every unit of ``experiments``, seed-major (all of seed 0 first), so that a ledger stopped early has every
    claim at fewer seeds rather than some claims at none; each unit the grid's run of its experiment
    (``scale.experiments.catalog.plan``) at the ledger's epochs and seed."""
    ep = epochs_of(dataset, quick, epochs)
    curv = {"probe_pairs": QUICK_PROBE_PAIRS if quick else PROBE_PAIRS, "probe_seed": PROBE_SEED,
            "range_floor": RANGE_FLOOR}
    probes = {"probe_images": QUICK_PROBE_IMAGES if quick else PROBE_IMAGES, "control_seed": CONTROL_SEED}
    tail: dict[str, Any] = dict(QUICK_SETTINGS) if quick else {}
    by_seed: dict[int, list[Unit]] = {s: [] for s in range(seeds)}

    def unit(name: str, run, seed: int, labels: dict[str, Any], measure: dict[str, Any], **changes: Any) -> Unit:
        return Unit(name, run.experiment, seed, dataset, run.backbone, {**run.settings, **changes, **tail},
                    dict(run.paper, **({"init": "normal"} if changes.get("init") == "normal" else {})), labels,
                    measure, device)

    for seed in range(seeds):
        if "E1" in experiments:
            for run in plan(dataset, "resnet18", False, ("E1",), seeds=1, epochs=ep["E1"]):
                lab = run.labels
                name = f"E1-{lab['head']}-bn{int(lab['bn'])}-lr{lab['lr']:g}"
                by_seed[seed].append(unit(f"{name}-collapsed-s{seed}", run, seed, dict(lab, init="collapsed"),
                                          dict(curv, collapse=E1_COLLAPSE)))
                if (lab["bn"], lab["lr"]) in E1_NORMAL_START:
                    by_seed[seed].append(unit(f"{name}-normal-s{seed}", run, seed, dict(lab, init="normal"), curv,
                                              init="normal"))
        if "E2" in experiments:
            for run in plan(dataset, "resnet18", False, ("E2",), seeds=1, epochs=ep["E2"]):
                lab = run.labels
                by_seed[seed].append(unit(f"E2-{lab['init']}-{lab['head']}-s{seed}", run, seed, dict(lab), curv))
        if "E3E4" in experiments:
            e3 = plan(dataset, "resnet18", False, ("E3E4",), seeds=1, epochs=ep["E3E4"])[0]
            by_seed[seed].append(unit(f"E3E4-s{seed}", e3, seed, dict(e3.labels), probes))
        if "E5" in experiments:
            for run in plan(dataset, "resnet18", False, ("E5",), seeds=1, epochs=ep["E5"]):
                by_seed[seed].append(unit(f"E5-depth{run.labels['depth']}-s{seed}", run, seed, dict(run.labels),
                                          dict(probes, tangent_images=TANGENT_IMAGES)))
    return [u for s in range(seeds) for u in by_seed[s]]


def plan_settings(dataset: str, quick: bool, epochs: dict[str, int] | None, device: str, threads: int,
                  repeat: int = 0, seeds: int = QUICK_SEEDS) -> dict[str, Any]:
    """The plan: what every unit shares, its seeds included (a registered plan has a fixed number of seeds: the
    store is never sized by its files' names)."""
    return {"dataset": dataset, "quick": quick, "seeds": seeds, "epochs": epochs_of(dataset, quick, epochs),
            "probe_images": QUICK_PROBE_IMAGES if quick else PROBE_IMAGES,
            "probe_pairs": QUICK_PROBE_PAIRS if quick else PROBE_PAIRS, "device": device,
            "threads": threads, "repeat": repeat, "format": KEY_FORMAT, "edition": EDITION}


def settings_units(settings: dict[str, Any], seeds: int, experiments: tuple[str, ...] = EXPERIMENTS
                   ) -> list[Unit]:
    """The plan's units at ``seeds`` seeds (of ``experiments``), from its settings."""
    return plan_units(settings["dataset"], seeds, settings["quick"],
                      epochs={k: v for k, v in settings["epochs"].items() if v is not None},
                      experiments=experiments, device=settings["device"])


def expected_keys(settings: dict[str, Any], seeds: int) -> dict[str, str]:
    return {u.name: u.key_hash() for u in settings_units(settings, seeds)}


def expected(settings: dict[str, Any], seeds: int | None = None) -> dict[str, Planned]:
    """What the plan says of each of its units (at ``seeds``, default the plan's): the key its file is named by,
    its experiment, seed and labels (``scale.unit_store.files.Planned``: the store checks each unit file's content
    against them before it is used)."""
    return {u.name: Planned(u.key_hash(), u.experiment, u.seed, u.labels)
            for u in settings_units(settings, settings["seeds"] if seeds is None else seeds)}


def estimate_seconds(unit: Unit, dataset: str, quick: bool, device: str,
                     measured: dict[str, list[float]] | None = None) -> tuple[float, str]:
    """(seconds, what the estimate rests on) for one unit (module docstring); no device is needed. ``measured``:
    seconds of this plan's stored units per experiment, whose median is used where there is one."""
    if measured and measured.get(unit.experiment):
        secs = sorted(measured[unit.experiment])
        return secs[len(secs) // 2], f"median of {len(secs)} stored units of this plan"
    factor, device_basis = DEVICE_FACTOR[device]
    if quick:
        return QUICK_SECONDS[unit.experiment] / factor, f"--quick units on this CPU; device: {device_basis}"
    per_epoch = SECONDS_PER_EPOCH[unit.experiment]
    size, size_basis = (CIFAR_SIZE_FACTOR, "CIFAR: FLOP-proportional extrapolation from digits") \
        if dataset in CIFAR else (1.0, "digits")
    epochs = unit.epochs or DIGITS_EPOCHS[unit.experiment]
    return epochs * per_epoch * size / factor, f"{size_basis}; device: {device_basis}"
