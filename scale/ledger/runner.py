r"""The ledger's runner: register the plan, then run its units not yet in the store, one file each.

The plan (``plan_settings``): dataset, --quick, the epochs per experiment, the measurement sizes, the device
and the thread count, and a repeat number (``--repeat``: the same units again, for the run-to-run spread). Its
hash names the plan in the store. ``--seeds``, ``--experiments`` and ``--shard`` (or ``--units NAMES``: a job's
unit, or the rerun of missing ones) choose which of its units this invocation runs; they are not part of the
plan, so invocations that differ only there share one ledger. The runner is given them as one typed invocation
(``scale.ledger.invocation.LedgerInvocation``), never a command line. As jobs, each unit runs this runner in its
own process (``scale.launch``: the job calls ``run`` with its unit's invocation); the store needs no lock for that.

Before the first unit: the registration (``scale.ledger.store.register``: the rules' data and hash and the code
commit) and a results.json view holding it. Rules that differ from the registered ones are refused unless the
change is logged as an amendment (``--amend REASON``). ``--budget-s`` stops starting units once that many
seconds have passed (a unit started runs to its end).

A unit's trainings checkpoint in its work folder (``scale.ledger.work``: ``OUT/work/`` + the unit file's name),
so a unit stopped mid-way (SIGTERM, a requeued job, a lost node) resumes there when it runs again; the folder is
removed once the unit's file is written.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from scale.engine.data import load_dataset
from scale.engine.signals import stop_on_signals
from scale.engine.train import Interrupted
from scale.experiments.catalog import DONE_STATUSES
from scale.ledger import claims, plan, store, views
from scale.ledger import unit_record as unit_runner  # (a module: its unit_record is looked up at each call)
from scale.ledger.invocation import LedgerInvocation
from scale.ledger.plan import expected, expected_keys, plan_settings, settings_units  # noqa: F401 (re-exported)
from scale.ledger.store import Planned, StoreError, plan_id
from scale.ledger.unit_record import machine  # noqa: F401 (machine: re-exported)
from scale.ledger.work import remove, work_dir
from scale.runs.run_report import git_commit as code_commit  # the one reading of the commit


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


def share_of(inv: LedgerInvocation, units: list[plan.Unit]) -> list[plan.Unit]:
    """This invocation's units: ``units`` by name (a job's, or the rerun of missing units) or its ``shard``."""
    if inv.units:
        names = {u.name for u in units}
        unknown = [n for n in inv.units if n not in names]
        if unknown:
            raise StoreError(f"--units: {', '.join(unknown)} not a unit of this plan's {len(units)} (--dry-run lists "
                             "them)")
        return [u for u in units if u.name in inv.units]
    k, n = inv.shard
    return [u for i, u in enumerate(units) if i % n == k]


def chosen_units(inv: LedgerInvocation) -> tuple[list[plan.Unit], list[plan.Unit], list[plan.Unit]]:
    """(the plan's units chosen by its experiments, this invocation's share, those of it not stored)."""
    settings = inv.settings()
    out, pid = Path(inv.out), plan_id(settings)
    units = settings_units(settings, settings["seeds"], inv.experiments)
    share = share_of(inv, units)
    have, _ = store.load_units(out, pid, {u.name: Planned(u.key_hash(), u.experiment, u.seed, u.labels)
                                          for u in units}, inv.device, inv.threads) if out.is_dir() else ({}, [])
    return units, share, [u for u in share if u.name not in have or have[u.name].get("status") not in DONE_STATUSES]


def write_views(inv: LedgerInvocation, full: bool = False) -> None:
    """``OUT/results.json`` (and with ``full`` the report) from the plan's registration and unit files."""
    settings, out = inv.settings(), Path(inv.out)
    pid = plan_id(settings)
    want = expected(settings)
    units, ignored = store.load_units(out, pid, want, inv.device, inv.threads)
    views.write(out, store.registration(out, pid), store.amendments(out, pid), units, ignored, with_report=full,
                 planned=len(want))


def run(inv: LedgerInvocation, log: Callable[[str], None] = print) -> int:
    """Run every unit of this invocation's share of the plan that the store does not hold, rebuilding the views
    after the registration and after every unit, and once more at the end (with the report unless ``as_job``: a
    job leaves report.md to the invocation that collects). 0; a job's function (``scale.launch.jobs.UnitJob``)."""
    out = Path(inv.out)
    torch.set_num_threads(inv.threads)  # part of the plan
    store.check_folders(out)  # a link at OUT/units, OUT/work, ...: refused before anything is written
    if out.is_dir():
        store.convert_v1(out)  # before anything of this run is written
    settings = inv.settings()
    pid = plan_id(settings)
    units, share, todo = chosen_units(inv)
    log(f"scale.replicate: plan {pid}: {len(units)} units chosen, {len(share)} in this share, {len(todo)} to run")
    if todo:
        run_units(inv, settings, todo, log)
    if store.registration(out, pid) is not None:
        write_views(inv, full=not inv.as_job)
    return 0


def run_units(inv: LedgerInvocation, settings: dict[str, Any], todo: list[plan.Unit], log: Callable[[str], None]
              ) -> None:
    out, pid = Path(inv.out), plan_id(settings)
    data = load_dataset(inv.dataset, inv.data_dir, image_size=16 if inv.dataset == "digits" else None)
    register(out, settings, inv.command, inv.amend)
    write_views(inv)  # the registration is in results.json before the first unit runs
    commit = code_commit()
    probe_images = settings["probe_images"] if settings["probe_images"] != plan.PROBE_IMAGES else None
    t_all = time.perf_counter()
    stop: list[bool] = []
    with stop_on_signals(lambda: stop.append(True)):
        for i, u in enumerate(todo):
            if stop:
                raise Interrupted(f"stopped before unit {u.name}")
            if inv.budget_s is not None and time.perf_counter() - t_all > inv.budget_s:
                log(f"scale.replicate: --budget-s {inv.budget_s:g} spent; {len(todo) - i} units left for the next "
                    "invocation")
                break
            work = work_dir(out, pid, u.name, inv.device, inv.threads, u.key_hash())
            rec = unit_runner.unit_record(u, data, inv.dataset, inv.threads, inv.quick, inv.data_dir, probe_images,
                                          commit, log, work)
            if rec["status"] in DONE_STATUSES:
                store.save_unit(out, pid, u.name, inv.device, inv.threads, u.key_hash(), rec)
                kept = remove(work)  # the checkpoints served their unit, whose file now stands
                if kept:
                    log(f"  {u.name}: {kept}")
                write_views(inv)
            log(f"  [{i + 1}/{len(todo)}] {u.name}: {rec['status']}, {rec['seconds']:.1f} s")
    log(f"scale.replicate: {len(todo)} units in {time.perf_counter() - t_all:.0f} s")
