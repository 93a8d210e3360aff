"""One invocation of the paper's grid (``python -m scale.paper``) as typed data: what the grid's runner, the
launcher and a job are given instead of the command line.

``GridInvocation`` holds the plan (dataset, backbone, --quick, --epochs: its hash names the plan's folder), which of
its runs this invocation runs (experiments, seeds, ``units``), where and how (out, device, threads, data_dir) and the
launch (``scale.launch.resources.Launch``). ``argv`` renders it as the command's flags, so a job's and a rerun's
command lines are made from it (``for_job``, ``for_rerun``), never by editing another.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

from scale.experiments.catalog import EXPERIMENTS, PlannedRun, plan
from scale.launch.resources import LOCAL, Launch
from scale.unit_store.files import digest

LAYOUT = "grid-units-2"  # the plan folder's layout, hashed into the plan's name (scale.grid.unit_files)
KEY_FORMAT = 3  # v3: a run keyed by its resolved config (v2: by its scale.run command line; scale.grid.unit_files)


def plan_id(dataset: str, backbone: str, quick: bool, epochs: int | None) -> str:
    """``grid-`` + the hash of what makes the grid, its layout and how its runs are keyed (a new key format is a
    new plan: an earlier plan's folder stays readable under its own, ``scale.grid.unit_files.of_record``)."""
    return "grid-" + digest({"dataset": dataset, "backbone": backbone, "quick": quick, "epochs": epochs,
                             "layout": LAYOUT, "keys": KEY_FORMAT})[:12]


@dataclass(frozen=True)
class GridInvocation:
    """``python -m scale.paper``'s flags, parsed and checked (the command's ``invocation_of``)."""

    module: ClassVar[str] = "scale.paper"

    out: Path
    dataset: str = "cifar10"
    backbone: str = "resnet18"
    quick: bool = False
    epochs: int | None = None  # every run's epochs (a recorded deviation)
    experiments: tuple[str, ...] = EXPERIMENTS
    seeds: int | None = None  # None: the grid's (3; --quick 1)
    units: tuple[str, ...] = ()  # only these runs (a job's, a rerun's missing ones)
    device: str = "auto"
    threads: int | None = None  # None: scale.run's choice
    data_dir: str | None = None
    no_report: bool = False
    launch: Launch = LOCAL
    as_job: bool = False  # one run of a launch: its run and unit file; the collecting invocation writes the views
    command: str = field(default="", compare=False)  # the command line as typed, recorded in the manifest

    @property
    def plan(self) -> str:
        return plan_id(self.dataset, self.backbone, self.quick, self.epochs)

    @property
    def home(self) -> Path:
        """The plan's own folder in ``out`` (``scale.grid.unit_files``)."""
        return Path(self.out) / self.plan

    def planned(self) -> list[PlannedRun]:
        """Every run of the plan this invocation chose (its experiments and seeds), with its data folder."""
        runs = plan(self.dataset, self.backbone, self.quick, self.experiments, self.seeds, self.epochs)
        for r in runs:
            r.data_dir = self.data_dir
        return runs

    def chosen(self, planned: list[PlannedRun]) -> list[PlannedRun]:
        """This invocation's runs of ``planned``: those named by ``units``, or all; ``ValueError`` naming an
        unknown one."""
        if not self.units:
            return planned
        unknown = [n for n in self.units if n not in {r.name for r in planned}]
        if unknown:
            raise ValueError(f"--units: no run named {', '.join(unknown)} in this plan (--dry-run lists them)")
        return [r for r in planned if r.name in self.units]

    def argv(self) -> list[str]:
        """The flags that give this invocation (``python -m scale.paper`` parses them back to an equal one)."""
        out = ["--dataset", self.dataset, "--backbone", self.backbone, "--out", str(self.out), "--device", self.device]
        if self.quick:
            out.append("--quick")
        if self.epochs is not None:
            out += ["--epochs", str(self.epochs)]
        if self.experiments != EXPERIMENTS:
            out += ["--experiments", ",".join(self.experiments)]
        if self.seeds is not None:
            out += ["--seeds", str(self.seeds)]
        if self.units:
            out += ["--units", ",".join(self.units)]
        if self.threads is not None:
            out += ["--threads", str(self.threads)]
        if self.data_dir is not None:
            out += ["--data-dir", self.data_dir]
        if self.no_report:
            out.append("--no-report")
        out += self.launch.argv()
        if self.as_job:
            out.append("--as-job")
        return out

    def for_job(self, unit: str) -> GridInvocation:
        """The invocation of ``unit``'s job: this plan, that run only, in the job's process."""
        return replace(self, units=(unit,), launch=LOCAL, as_job=True, command="")

    def for_rerun(self, units: list[str]) -> GridInvocation:
        """The invocation that runs only ``units``, with this launch (waiting for its jobs)."""
        return replace(self, units=tuple(units), launch=replace(self.launch, no_wait=False), as_job=False,
                       command="")
