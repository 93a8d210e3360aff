r"""The ledger's runner: register the plan, then run its units not yet in the store, one file each.

The plan (``plan_settings``): dataset, --quick, the epochs per experiment, the measurement sizes, the device
and the thread count, and a repeat number (``--repeat``: the same units again, for the run-to-run spread). Its
hash names the plan in the store. ``--seeds``, ``--experiments`` and ``--shard`` (or ``--units NAMES``: a job's
unit, or the rerun of missing ones) choose which of its units this invocation runs; they are not part of the
plan, so invocations that differ only there share one ledger. As jobs, each unit runs this runner in its own
process (``scale.launch``); the store needs no lock for that.

Before the first unit: the registration (``scale.ledger.store.register``: the rules' data and hash and the code
commit) and a results.json view holding it. Rules that differ from the registered ones are refused unless the
change is logged as an amendment (``--amend REASON``). ``--budget-s`` stops starting units once that many
seconds have passed (a unit started runs to its end).

A unit's trainings checkpoint in its work folder (``scale.ledger.work``: ``OUT/work/`` + the unit file's name),
so a unit stopped mid-way (SIGTERM, a requeued job, a lost node) resumes there when it runs again; the folder is
removed once the unit's file is written.
"""

from __future__ import annotations

import platform
import subprocess
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from scale.engine.data import load_dataset
from scale.engine.data_errors import DataError
from scale.engine.signals import stop_on_signals
from scale.engine.train import Interrupted
from scale.experiments.paper import deviations
from scale.ledger import claims, plan, store
from scale.ledger import units as unit_runner  # (a module: its run_unit is looked up at each call)
from scale.ledger.store import Planned, StoreError, plan_id
from scale.ledger.work import remove, work_dir
from scale.runs.run_report import versions

DONE = ("finished", "non-finite loss")  # a unit in another state (an error) is run again by the next invocation


def machine() -> dict[str, str]:
    """What selects the float kernels a unit ran on: torch's CPU capability (AVX2, AVX512, ...) and the processor's
    name (``scale.ledger.verify`` expects bitwise equality only on the same kind)."""
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu_capability": str(torch.backends.cpu.get_cpu_capability()), "processor": name}


def code_commit() -> str:
    """HEAD, with ``+dirty`` when the code that produces the numbers (``mini/``, ``scale/``, ``pyproject.toml``)
    differs from it; ``unknown`` outside git."""
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "mini", "scale", "pyproject.toml"], cwd=root,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if sha.returncode:
        return "unknown"
    return sha.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def plan_settings(dataset: str, quick: bool, epochs: dict[str, int] | None, device: str, threads: int,
                  repeat: int = 0, seeds: int = plan.QUICK_SEEDS) -> dict[str, Any]:
    """The plan: what every unit shares, its seeds included (a registered plan has a fixed number of seeds: the
    store is never sized by its files' names)."""
    return {"dataset": dataset, "quick": quick, "seeds": seeds, "epochs": plan.epochs_of(dataset, quick, epochs),
            "probe_images": plan.QUICK_PROBE_IMAGES if quick else plan.PROBE_IMAGES,
            "probe_pairs": plan.QUICK_PROBE_PAIRS if quick else plan.PROBE_PAIRS, "device": device,
            "threads": threads, "repeat": repeat, "format": plan.KEY_FORMAT}


def settings_units(settings: dict[str, Any], seeds: int, experiments: tuple[str, ...] = plan.EXPERIMENTS
                   ) -> list[plan.Unit]:
    """The plan's units at ``seeds`` seeds (of ``experiments``), from its settings."""
    return plan.plan_units(settings["dataset"], seeds, settings["quick"],
                           epochs={k: v for k, v in settings["epochs"].items() if v is not None},
                           experiments=experiments, device=settings["device"])


def registration_record(settings: dict[str, Any], command: str) -> dict[str, Any]:
    return {"plan": plan_id(settings), "settings": settings, "plan_hash": plan.digest(settings),
            "rules": claims.rules_data(), "rules_hash": claims.rules_hash(), "code_commit": code_commit(),
            "registered_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": command}


def check_rules(out: Path, pid: str, reg: dict[str, Any], amend: str | None) -> list[dict[str, Any]]:
    """The plan's amendments; when the code's rules differ from the last registered or amended ones, log an
    amendment with ``amend`` as its reason, or refuse (``StoreError``) without one."""
    logged = store.amendments(out, pid)
    current = logged[-1]["to_hash"] if logged else reg["rules_hash"]
    now = claims.rules_hash()
    if now == current:
        return logged
    if not amend:
        raise StoreError(f"the rules changed since plan {pid} was registered (registered {current[:12]}, now "
                         f"{now[:12]}): log the change with --amend 'REASON', or use another --out")
    before = {c["id"]: c for c in (logged[-1]["rules"] if logged else reg["rules"])["claims"]}
    after = {c["id"]: c for c in claims.rules_data()["claims"]}
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    store.amend(out, pid, {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "reason": amend, "from_hash": current,
                           "to_hash": now, "claims_changed": changed, "code_commit": code_commit(),
                           "rules": claims.rules_data()})
    return store.amendments(out, pid)


def register(out: Path, settings: dict[str, Any], command: str, amend: str | None) -> dict[str, Any]:
    """The plan's registration (written now if there is none) after checking the rules against it."""
    pid = plan_id(settings)
    reg = store.register(out, pid, registration_record(settings, command))
    check_rules(out, pid, reg, amend)
    return reg


def expected_keys(settings: dict[str, Any], seeds: int) -> dict[str, str]:
    return {u.name: u.key_hash() for u in settings_units(settings, seeds)}


def expected(settings: dict[str, Any], seeds: int | None = None) -> dict[str, Planned]:
    """What the plan says of each of its units (at ``seeds``, default the plan's): the key its file is named by,
    its experiment, seed and labels (``scale.units.store.Planned``: the store checks each unit file's content
    against them before it is used)."""
    return {u.name: Planned(u.key_hash(), u.experiment, u.seed, u.labels)
            for u in settings_units(settings, settings["seeds"] if seeds is None else seeds)}


def share_of(args, units: list[plan.Unit]) -> list[plan.Unit]:
    """This invocation's units: ``--units NAMES`` (a job's, or the rerun of missing units) or ``--shard K/N``."""
    if getattr(args, "units", None):
        wanted = [n.strip() for n in args.units.split(",") if n.strip()]
        names = {u.name for u in units}
        unknown = [n for n in wanted if n not in names]
        if unknown or not wanted:
            raise StoreError(f"--units: {', '.join(unknown) or '(none given)'} not a unit of this plan's "
                             f"{len(units)} (--dry-run lists them)")
        return [u for u in units if u.name in wanted]
    k, n = args.shard
    return [u for i, u in enumerate(units) if i % n == k]


def chosen_units(args, settings: dict[str, Any]) -> tuple[list[plan.Unit], list[plan.Unit], list[plan.Unit]]:
    """(the plan's units chosen by --seeds/--experiments, this invocation's share, those of it not stored)."""
    out, pid = Path(args.out), plan_id(settings)
    units = settings_units(settings, settings["seeds"], args.experiments)
    share = share_of(args, units)
    have, _ = store.load_units(out, pid, {u.name: Planned(u.key_hash(), u.experiment, u.seed, u.labels)
                                          for u in units}, args.device, args.threads) if out.is_dir() else ({}, [])
    return units, share, [u for u in share if u.name not in have or have[u.name].get("status") not in DONE]


def run(args, settings: dict[str, Any], on_change: Callable[[], None], log: Callable[[str], None] = print
        ) -> None:
    """Run every unit of this invocation's share of the plan that the store does not hold; ``on_change`` rebuilds
    the views after the registration and after every unit."""
    out, pid = Path(args.out), plan_id(settings)
    units, share, todo = chosen_units(args, settings)
    log(f"scale.replicate: plan {pid}: {len(units)} units chosen, {len(share)} in this share, {len(todo)} to run")
    if not todo:
        return
    data = load_dataset(args.dataset, args.data_dir, image_size=16 if args.dataset == "digits" else None)
    register(out, settings, args.command, args.amend)
    on_change()  # the registration is in results.json before the first unit runs
    commit = code_commit()
    probe_images = settings["probe_images"] if settings["probe_images"] != plan.PROBE_IMAGES else None
    t_all = time.perf_counter()
    stop: list[bool] = []
    with stop_on_signals(lambda: stop.append(True)):
        for i, u in enumerate(todo):
            if stop:
                raise Interrupted(f"stopped before unit {u.name}")
            if args.budget_s is not None and time.perf_counter() - t_all > args.budget_s:
                log(f"scale.replicate: --budget-s {args.budget_s:g} spent; {len(todo) - i} units left for the next "
                    "invocation")
                break
            t0 = time.perf_counter()
            work = work_dir(out, pid, u.name, args.device, args.threads, u.key_hash())
            try:
                rec = unit_runner.run_unit(u, data, args.threads, args.quick, args.data_dir, log, work)
            except (KeyboardInterrupt, Interrupted, OSError, DataError, StoreError):  # the store's, not the unit's
                raise
            except Exception as exc:  # one broken unit must not lose the rest; recorded, retried next time
                traceback.print_exc()
                rec = {"status": f"error: {type(exc).__name__}: {exc}", "config": {}}
            rec.update(name=u.name, experiment=u.experiment, seed=u.seed, labels=u.labels, key=u.key(),
                       git_commit=commit, versions=versions(), machine=machine(), seconds=time.perf_counter() - t0,
                       torch_threads=torch.get_num_threads(), finished_at=time.strftime("%Y-%m-%d %H:%M:%S"),
                       deviations=deviations(rec["config"], u.paper, args.dataset, probe_images) if rec["config"]
                       else {})
            if rec["status"] in DONE:
                store.save_unit(out, pid, u.name, args.device, args.threads, u.key_hash(), rec)
                kept = remove(work)  # the checkpoints served their unit, whose file now stands
                if kept:
                    log(f"  {u.name}: {kept}")
                on_change()
            log(f"  [{i + 1}/{len(todo)}] {u.name}: {rec['status']}, {rec['seconds']:.1f} s")
    log(f"scale.replicate: {len(todo)} units in {time.perf_counter() - t_all:.0f} s")
