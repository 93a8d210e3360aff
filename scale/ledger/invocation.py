"""One invocation of the ledger (``python -m scale.replicate``) as typed data: what the runner, the launcher and
a job are given instead of the command line.

``LedgerInvocation`` holds the plan's settings (dataset, seeds, quick, epochs, device, threads, repeat), which of its
units this invocation runs (experiments, ``units`` or ``shard``, ``budget_s``), where (``out``, ``data_dir``), the
rules' amendment and the launch (``scale.launch.resources.Launch``). ``argv`` renders it as the command's flags, so
a job's and a rerun's command lines are made from it (``for_job``, ``for_rerun``), never by editing another.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from scale.launch.resources import LOCAL, Launch
from scale.ledger.plan import EXPERIMENTS, QUICK_SEEDS, plan_settings


@dataclass(frozen=True)
class LedgerInvocation:
    """``python -m scale.replicate``'s flags, parsed and checked (the command's ``invocation_of``)."""

    module: ClassVar[str] = "scale.replicate"

    out: Path
    dataset: str = "digits"
    seeds: int = 10
    quick: bool = False
    epochs: dict[str, int] | None = field(default=None, hash=False)  # None: the plan's default epochs
    device: str = "cpu"
    threads: int = 1
    repeat: int = 0
    data_dir: str | None = None
    experiments: tuple[str, ...] = EXPERIMENTS  # which of the plan's units this invocation runs: these ...
    units: tuple[str, ...] = ()  # ... these by name (a job's unit, a rerun's missing ones), else ...
    shard: tuple[int, int] = (0, 1)  # ... every N-th from the K-th
    budget_s: float | None = None  # start no unit after this many seconds
    amend: str | None = None  # the reason of a change of the rules since registration
    launch: Launch = LOCAL
    as_job: bool = False  # one unit of a launch: its file, no report (the collecting invocation writes it)
    command: str = field(default="", compare=False)  # the command line as typed, recorded in a registration

    def settings(self) -> dict[str, Any]:
        """The plan (``scale.ledger.plan.plan_settings``): what every unit shares; its hash names the plan."""
        return plan_settings(self.dataset, self.quick, self.epochs, self.device, self.threads, self.repeat,
                             self.seeds)

    def argv(self) -> list[str]:
        """The flags that give this invocation (``python -m scale.replicate`` parses them back to an equal one)."""
        out = ["--dataset", self.dataset, "--seeds", str(self.seeds), "--out", str(self.out), "--device", self.device,
               "--threads", str(self.threads)]
        if self.quick:
            out.append("--quick")
        if self.epochs:
            out += ["--epochs", ",".join(f"{e}={n}" for e, n in self.epochs.items())]
        if self.repeat:
            out += ["--repeat", str(self.repeat)]
        if self.data_dir is not None:
            out += ["--data-dir", self.data_dir]
        if self.experiments != EXPERIMENTS:
            out += ["--experiments", ",".join(self.experiments)]
        if self.units:
            out += ["--units", ",".join(self.units)]
        if self.shard != (0, 1):
            out += ["--shard", f"{self.shard[0]}/{self.shard[1]}"]
        if self.budget_s is not None:
            out += ["--budget-s", repr(self.budget_s)]
        if self.amend is not None:
            out += ["--amend", self.amend]
        out += self.launch.argv()
        if self.as_job:
            out.append("--as-job")
        return out

    def for_job(self, unit: str) -> LedgerInvocation:
        """The invocation of ``unit``'s job: this plan, that unit only, run in the job's process."""
        return replace(self, units=(unit,), shard=(0, 1), budget_s=None, launch=LOCAL, as_job=True,
                       command="")

    def for_rerun(self, units: list[str]) -> LedgerInvocation:
        """The invocation that runs only ``units``, with this launch (waiting for its jobs)."""
        return replace(self, units=tuple(units), shard=(0, 1), budget_s=None,
                       launch=replace(self.launch, no_wait=False), as_job=False, command="")


def default_seeds(quick: bool) -> int:
    """The plan's seeds when ``--seeds`` is not given."""
    return QUICK_SEEDS if quick else LedgerInvocation.seeds
