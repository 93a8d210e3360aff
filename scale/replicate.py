r"""``python -m scale.replicate``: the paper's experimental claims, each with seeds, an interval inside its
statistic's range, its controls and premise, and a rule registered (hashed) before the runs.

    python -m scale.replicate --dataset digits --seeds 10 --out docs/replication      # the CPU ledger
    python -m scale.replicate --dataset cifar10 --data-dir DIR --device cuda --out L  # the paper's sizes
    python -m scale.replicate --quick --out /tmp/ledger                               # the pipeline, in a minute
    python -m scale.replicate --dry-run --device cuda --dataset cifar10               # the plan and its cost

The ledger is the package ``scale.ledger`` (its docstring shows its parts); this module is its command line.
In pieces: ``--experiments E1,E2`` runs only those experiments' units, ``--epochs N`` (or ``E1=5,E2=10``)
changes the plan's epochs (another plan), ``--budget-s S`` starts no unit after S seconds, ``--shard K/N`` runs
every N-th unit from the K-th; invocations of one plan share its store in ``OUT`` (one file per unit, written
once), so they can run at once or one after another, and none loses another's units. ``--dry-run`` lists the
units with an estimated cost for any device (no CUDA needed) and writes nothing. ``--register-only``
registers the plan (rules' hash, code commit) and runs nothing. ``--report-only`` rebuilds the views
(``OUT/results.json``, ``OUT/report.md``); ``--plan v1 --report-only`` those of the first ledger's units
(converted from its results.json) under today's rules, in ``OUT/v1-reread/``; ``--report-only --plan P --reread
DEST`` a registered plan's units under today's rules, into DEST (a dry run: OUT is left as it is, no amendment
logged; ``docs/replication/v3-reread``). ``--amend REASON`` logs a change
of the rules after registration; without it a changed rule is refused. ``--repeat K`` runs the same units
again as another plan (the run-to-run spread; ``--threads 2`` likewise gives the thread-to-thread spread):
the report compares them.

As jobs (``scale.launch``, docs/launch.md): ``--launcher slurm`` submits each unit not stored as one job of a
Slurm array through submitit (resources from ``--gpus-per-job``, ``--time-min``, ... or ``--resources FILE.toml``),
``--launcher local-jobs`` as submitit's local jobs on this machine (one per ``--node-gpus`` device); each job runs
the ledger's runner with this invocation for its unit alone (``scale.ledger.invocation``) and writes that unit's
file. ``--no-wait`` returns after submitting;
``--collect`` rebuilds the views and names the missing units with the one command that runs only them.

The store (``scale.ledger.store`` over ``scale.unit_store``) uses a unit file only when its content is the unit its name
says (plan, unit, device, threads, key, and the plan's experiment, seed and labels); any other is listed under
"unit files left out" in the views and left as it is. The plan's seeds are its registration's (at most 1000),
never counted from file names.

Exit codes: 0 done; 1 the data (CIFAR archive) missing or corrupt, or nothing to report; 2 a bad argument (one line
naming the valid values: ``--seeds`` 1 .. 1000, a non-blank ``--amend`` reason), an OUT holding a file the ledger
cannot read or that is not of its schema (a damaged unit, registration or amendment: left as it is), a folder the
ledger writes below OUT (``units/``, ``registrations/``, ``amendments/``, ``work/``, ...) that is a symbolic link, a
JSON file with a key twice in one object or an unpaired surrogate (``scale.engine.read``), a number that is not
finite or out of its range (``--budget-s nan``, ``--threads 100000``), rules changed without ``--amend``, or
``--reread`` without ``--report-only`` or into OUT itself; 4 an output could not be written (the line names the
file); 3 (``--collect``, or a launch that waited) some chosen units have no file; 130 interrupted (SIGINT or
SIGTERM: the running unit's training saves a checkpoint in its work folder, ``OUT/work/``, and the same command
resumes it there; every finished unit is in the store).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from scale.engine import disk
from scale.engine.data_errors import DataError
from scale.engine.flags import MAX_THREADS, OneLineParser, bounded
from scale.engine.train import Interrupted
from scale.launch import resources as launch_flags
from scale.launch.cost import print_cost
from scale.launch.jobs import check_gpus, job_states, launch, rerun_command
from scale.launch.resources import LaunchError, launch_of
from scale.ledger import claims, plan, runner, store, views
from scale.ledger.invocation import LedgerInvocation, default_seeds
from scale.ledger.plan import EXPERIMENTS, parse_epochs
from scale.ledger.store import StoreError
from scale.ledger.verify import largest_text, record_of, report_lines, verify
from scale.unit_store.schema import MAX_SEEDS

MAX_BUDGET_S = 10**9  # --budget-s: 31 years; a larger or non-finite one is refused, never read as no budget


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` -> (K, N) with 0 <= K < N: this process runs the plan's units whose index is K modulo N."""
    try:
        k, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard takes K/N (e.g. 0/2), got {text!r}") from None
    if not 0 <= k < n:
        raise ValueError(f"--shard K/N needs 0 <= K < N, got {text!r}")
    return k, n


def parse_experiments(text: str) -> tuple[str, ...]:
    chosen = tuple(e.strip() for e in text.split(",") if e.strip())
    bad = [e for e in chosen if e not in EXPERIMENTS]
    if bad or not chosen:
        raise ValueError(f"--experiments {text}: unknown {', '.join(bad) or '(none given)'}; valid: "
                         f"{', '.join(EXPERIMENTS)}")
    return chosen


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m scale.replicate", description="The paper's claims E1-E5 with "
                                "seeds, bounded intervals, controls, premises and registered rules.")
    p.add_argument("--dataset", default="digits", choices=("digits", "cifar10", "cifar100"),
                   help="default: digits (offline, CPU sizes); cifar10 at the paper's sizes")
    p.add_argument("--seeds", type=int, help=f"seeds 0 .. N-1, part of the plan (default 10; --quick 2; "
                   f"at most {MAX_SEEDS})")
    p.add_argument("--out", default="replication", help="output folder, the ledger's store (default: replication)")
    p.add_argument("--data-dir", help="folder with the CIFAR archive (see scale.run)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="default: cpu")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1), part of the plan: units "
                   "at another thread count are another plan, never mixed")
    p.add_argument("--quick", action="store_true", help="the pipeline in about a minute: 2 seeds, a tiny model, "
                   "1-4 epochs of 2 steps; its report says 'pipeline check: not evidence'")
    p.add_argument("--experiments", default=",".join(EXPERIMENTS), help=f"comma-separated, of {', '.join(EXPERIMENTS)} "
                   "(default: all)")
    p.add_argument("--epochs", help="N for every experiment or E1=N,E2=N,...: another plan than the default's")
    p.add_argument("--budget-s", type=float, help="start no unit after this many seconds (default: no limit)")
    p.add_argument("--shard", default="0/1", metavar="K/N", help="run the units whose index in the plan is K modulo N "
                   "(default 0/1: all)")
    p.add_argument("--repeat", type=int, default=0, help="the same units again as another plan (run-to-run spread)")
    p.add_argument("--amend", metavar="REASON", help="log a change of the rules since registration, with its reason")
    p.add_argument("--report-only", action="store_true", help="rebuild the views from the store, run nothing")
    p.add_argument("--register-only", action="store_true", help="register the plan (its rules' hash and the code "
                   "commit) in OUT and write results.json with the registration; run nothing")
    p.add_argument("--plan", help="with --report-only: the registered plan to view (e.g. v1; default: this "
                   "command's)")
    p.add_argument("--reread", metavar="DEST", help="with --report-only: a dry run, the plan's units read under "
                   "today's rules into DEST (report.md, results.json, figures), another folder than OUT; OUT's own "
                   "views, registration and units are left as they are, and no amendment is logged")
    p.add_argument("--verify", metavar="UNIT_FILE", help="rerun one stored unit (OUT/units/...json) with the code now "
                   "and print the largest difference from its record and, where one differs, each statistic the "
                   "ledger reads from it against its row's interval and any verdict that would change; exit 0 only "
                   "when every value is equal (timings "
                   "aside), 1 when one differs, 2 when the file is not a plain unit file of a registered plan (a link, "
                   "another device or thread count than its plan's, a folder of the store that is a link) or today's "
                   "code plans another unit in its place, 4 when the verification cannot be written (checked before "
                   "the rerun). The record names the SHA-256 of the unit file; the report lists it only while the "
                   "file is unchanged")
    p.add_argument("--dry-run", action="store_true", help="list the units with an estimated cost on --device "
                   "(GPU-hours on --gpu-name for cuda), the jobs --launcher would submit and the registration they "
                   "would get; run and write nothing")
    launch_flags.add_arguments(p)
    return p


def print_plan(inv: LedgerInvocation) -> None:
    """Every unit of this invocation with its estimated seconds on its device, the totals, and the registration
    the plan would get (its id, rules hash)."""
    settings = inv.settings()
    units = runner.share_of(inv, runner.settings_units(settings, settings["seeds"], inv.experiments))
    bases: set[str] = set()
    measured: dict[str, list[float]] = {}
    pid = runner.plan_id(settings)
    stored, _ = store.load_units(Path(inv.out), pid, runner.expected(settings), inv.device, inv.threads)
    for rec in stored.values():
        measured.setdefault(rec["experiment"], []).append(float(rec["seconds"]))
    print(f"scale.replicate: plan {pid} ({inv.dataset}, {inv.seeds} seeds, {inv.device}, {inv.threads} "
          f"thread{'s' * (inv.threads != 1)}{', quick' if inv.quick else ''}): {len(units)} units; rules hash "
          f"{claims.rules_hash()}")
    costs = []
    for u in units:
        sec, basis = plan.estimate_seconds(u, inv.dataset, inv.quick, inv.device, measured)
        bases.add(basis)
        costs.append((u.name, sec))
    print_cost(inv, costs, "; ".join(sorted(bases)) or "no units", inv.device)
    print(f"rules ({len(claims.CLAIMS)} rows):")
    for c in claims.CLAIMS:
        print(f"  {c.id} [{c.table}] {c.claim}: {c.statistic}; {c.rule.text()}")


def _fail(msg: str, code: int) -> int:
    print(f"scale.replicate: error: {msg}", file=sys.stderr)
    return code


def reread_registration(reg: dict, out: Path) -> dict:
    """A registered plan's registration as a dry run under today's rules shows it (``--reread``): today's rules and
    their hash, the registered hash beside them, and the one-line note the report opens with."""
    note = (f"A dry run, not a registered test: plan {reg['plan']}'s units (registered under rules "
            f"{reg['rules_hash'][:12]}) read under today's rules ({claims.rules_hash()[:12]}), written after seeing "
            f"them; the plan's own report, `{out}/report.md`, is unchanged. A row whose rule needs a measurement "
            "these units lack says 'not measured'.")
    return {**reg, "rules": claims.rules_data(), "rules_hash": claims.rules_hash(),
            "registered_rules_hash": reg["rules_hash"], "reread": note}


def report_only(inv: LedgerInvocation, plan_name: str | None, reread: str | None = None) -> int:
    """``--report-only``: the views of the registered plan ``plan_name`` (default: this invocation's); with
    ``reread``, its units under today's rules into that folder (``reread_registration``)."""
    out = Path(inv.out)
    pid = plan_name or runner.plan_id(inv.settings())
    reg = store.registration(out, pid) if out.is_dir() else None
    if reg is None:
        return _fail(f"no registration of plan {pid} in {out}: nothing to report", 1)
    if reread is not None:
        dest = Path(reread)
        if pid == store.V1 or dest.resolve() == out.resolve():
            return _fail(f"--reread {dest}: another folder than OUT ({out}), of a plan registered there (v1 is "
                         "reread by --report-only itself)", 2)
        store.check_folders(dest)
        s = reg["settings"]
        expected = runner.expected(s, s.get("seeds", inv.seeds))
        units, ignored = store.load_units(out, pid, expected, s["device"], s["threads"])
        if not units:
            return _fail(f"no units of plan {pid} in {out}: nothing to reread", 1)
        path = views.write(dest, reread_registration(reg, out), [], units, ignored, store_dir=out,
                            planned=len(expected))
        print(f"scale.replicate: dry run {path}")
        return 0
    if pid == store.V1:
        units, ignored = v1_units(out)
        reg = v1_registration(reg)
        path = views.write(out / "v1-reread", reg, [], units, ignored, store_dir=out)
    else:
        amends = runner.check_rules(out, pid, reg, inv.amend)
        s = reg["settings"]
        expected = runner.expected(s, s.get("seeds", inv.seeds))  # the plan's seeds (registered since v3)
        units, ignored = store.load_units(out, pid, expected, s["device"], s["threads"])
        if not units:
            return _fail(f"no units of plan {pid} in {out}: nothing to report", 1)
        path = views.write(out, reg, amends, units, ignored, planned=len(expected))
    print(f"scale.replicate: report {path}")
    return 0


def v1_units(out: Path) -> tuple[dict, list[str]]:
    """Every unit file of plan v1, each checked (its keys are its own: v1 registered none to check them against)."""
    return store.load_v1(out)


def v1_registration(reg: dict) -> dict:
    """v1's registration in the shape of a v2 one, saying what it is: its data under today's rules."""
    s = reg["settings"]
    settings = {"dataset": s.get("dataset", "digits"), "quick": bool(s.get("quick")), "device": s.get("device", "cpu"),
                "threads": int(s.get("threads") or 1), "epochs": dict(s.get("epochs") or {}),
                "probe_images": s.get("probe_images"), "probe_pairs": plan.PROBE_PAIRS, "repeat": 0}
    return {"plan": store.V1, "settings": settings, "plan_hash": "none recorded",
            "rules_hash": claims.rules_hash(), "code_commit": "see the units", "command": s.get("command", "?"),
            "registered_at": "never: v1 data read under today's rules, not a registered test of them",
            "v1": True}


def collect(inv: LedgerInvocation) -> int:
    """The views from the unit files, with the units of this invocation's choice that have none, their jobs'
    states and the one command that runs only them (exit 3), or exit 0 when none is missing."""
    settings = inv.settings()
    out, pid = Path(inv.out), runner.plan_id(settings)
    reg = store.registration(out, pid) if out.is_dir() else None
    if reg is None:
        return _fail(f"no registration of plan {pid} in {out}: nothing submitted there to collect", 1)
    amends = runner.check_rules(out, pid, reg, inv.amend)
    units, ignored = store.load_units(out, pid, runner.expected(settings), inv.device, inv.threads)
    _, _, todo = runner.chosen_units(inv)
    states = job_states(out)
    missing = {u.name: states.get(u.name, "no job recorded") for u in todo}
    rerun = rerun_command(inv, list(missing)) if missing else None
    path = views.write(out, reg, amends, units, ignored, with_report=bool(units), missing=missing, rerun=rerun)
    for line in ignored:
        print(f"scale.replicate: left out (another plan or key): {line}")
    if missing:
        print(f"scale.replicate: {len(missing)} unit(s) missing: "
              + "; ".join(f"{n} ({w})" for n, w in missing.items()))
        print(f"scale.replicate: run only them: {rerun}")
        return 3
    print(f"scale.replicate: every chosen unit is stored; report {path}")
    return 0


def launch_units(inv: LedgerInvocation) -> int:
    """Register the plan, then submit this invocation's units not stored as jobs (``scale.launch``), each calling
    the runner with its unit's invocation."""
    _, _, todo = runner.chosen_units(inv)
    runner.register(Path(inv.out), inv.settings(), inv.command, inv.amend)
    runner.write_views(inv)  # the registration is in results.json before any job runs
    launch(inv, runner.run, [u.name for u in todo], Path(inv.out))  # GPUs checked in main
    return 0 if inv.launch.no_wait else collect(inv)


def verify_unit(path: str) -> int:
    """``--verify UNIT_FILE`` (``scale.ledger.verify``): one line of result, the exit code of the help text; the
    result is recorded once per unit and commit in the store (``OUT/verifications/``), which the report lists."""
    try:
        if recordable(runner.code_commit()):  # a record that could not be written: said before the rerun
            store.check_writable(Path(path).parent.parent)
        r = verify(Path(path))
        if r["status"] == "another unit":
            return _fail(r["why"], 2)
        note = _record(Path(path), r)
    except (StoreError, disk.NotOurs) as exc:
        return _fail(str(exc), 2)
    except OSError as exc:  # permissions, a full disk, a read-only file system: the record is not written
        return _fail(f"cannot write {exc.filename or 'the verification'}: {exc.strerror or exc}; the unit was not "
                     "verified into the store", 4)
    where = ("on the kind of processor that computed it" if r["same_machine"] else
             f"on another kind of processor ({r['machine']} against {r['stored_machine']}): float kernels may round "
             "differently there")
    if r["status"] == "equal":
        print(f"scale.replicate: {path}: reproduced bitwise by the code now (timings aside), {where}; {note}")
        return 0
    print(f"scale.replicate: {path}: {r['differences']} value(s) differ from the record computed at {r['commit']}; "
          f"{largest_text(r)}, {where}; {note}")
    print("\n".join(report_lines(r)))
    return 1


def recordable(commit: str) -> bool:
    """Whether a verification by the code at ``commit`` is recorded: only code at a commit can be traced."""
    return commit != "unknown" and not commit.endswith("+dirty")


def _record(path: Path, r: dict) -> str:
    """Record a verification in the unit's store, once per unit and commit; only code at a commit is recorded (a
    verification by uncommitted code could not be traced). Returns what was done, for the result's line."""
    commit = runner.code_commit()
    if not recordable(commit):
        return f"not recorded: the code is not at a commit ({commit})"
    written = store.record_verification(path.parent.parent, record_of(path, r, commit))
    return f"recorded in {written}" if written else f"already recorded at {commit[:12]}"


def invocation_of(args: argparse.Namespace, raw: list[str]) -> LedgerInvocation:
    """The parsed flags as one typed invocation, every value checked; ``ValueError`` (``LaunchError``) with one line
    naming the bad value and the valid ones."""
    seeds = args.seeds if args.seeds is not None else default_seeds(args.quick)
    for key, value in (("seeds", seeds), ("threads", args.threads)):
        if value < 1:
            raise ValueError(f"--{key} must be a positive integer, got {value}")
    if seeds > MAX_SEEDS:
        raise ValueError(f"--seeds {seeds} is above {MAX_SEEDS}, the most a plan has (seeds 0 .. N-1, 1 <= N <= "
                         f"{MAX_SEEDS})")
    if args.amend is not None and not args.amend.strip():
        raise ValueError("--amend needs a reason: what changed in the rules and why (got a blank one)")
    if args.repeat < 0 or (args.budget_s is not None and args.budget_s < 0):
        raise ValueError("--repeat and --budget-s must not be negative")
    # NaN, infinities and absurd sizes: --budget-s nan was "no budget at all", --threads 100000 reached torch
    bounded("--threads", args.threads, 1, MAX_THREADS, int)
    bounded("--budget-s", args.budget_s, 0, MAX_BUDGET_S)
    bounded("--repeat", args.repeat, 0, MAX_SEEDS, int)
    units = tuple(n.strip() for n in args.units.split(",") if n.strip()) if args.units is not None else ()
    if args.units is not None and not units:
        raise ValueError("--units: (none given) not a unit of this plan (--dry-run lists them)")
    return LedgerInvocation(
        out=Path(args.out), dataset=args.dataset, seeds=seeds, quick=args.quick,
        epochs=parse_epochs(args.epochs) if args.epochs else None, device=args.device, threads=args.threads,
        repeat=args.repeat, data_dir=args.data_dir, experiments=parse_experiments(args.experiments), units=units,
        shard=parse_shard(args.shard), budget_s=args.budget_s, amend=args.amend, launch=launch_of(vars(args)),
        as_job=args.as_job, command=" ".join(["python -m scale.replicate", *raw]))


def main(argv: list[str] | None = None) -> int:
    raw = list(argv if argv is not None else sys.argv[1:])
    args = build_parser().parse_args(raw)
    if args.verify:
        return verify_unit(args.verify)
    if args.reread and not args.report_only:
        return _fail("--reread DEST needs --report-only (it reads stored units, runs nothing)", 2)
    try:
        inv = invocation_of(args, raw)
        check_gpus(inv.launch, inv.device == "cuda")
        if args.dry_run:
            print_plan(inv)
            return 0
    except (ValueError, StoreError) as exc:  # LaunchError is a ValueError
        return _fail(str(exc), 2)
    if inv.device == "cuda" and not torch.cuda.is_available():
        return _fail("--device cuda was asked for but CUDA is not available here (--dry-run needs none)", 2)
    torch.set_num_threads(inv.threads)
    out = inv.out
    try:
        store.check_folders(out)  # a link at OUT/units, OUT/work, ...: refused before anything is written
        if out.is_dir():
            store.convert_v1(out)  # before anything of this run is written
        if args.report_only:
            return report_only(inv, args.plan, args.reread)
        if args.collect:
            return collect(inv)
        pid = runner.plan_id(inv.settings())
        if args.register_only:
            reg = runner.register(out, inv.settings(), inv.command, inv.amend)
            views.write(out, reg, store.amendments(out, pid), {}, [], with_report=False)
            print(f"scale.replicate: plan {pid} registered in {out / 'registrations'} (rules {reg['rules_hash'][:12]}, "
                  f"code {reg['code_commit']})")
            return 0
        if inv.launch.launcher != "local":
            return launch_units(inv)
        runner.run(inv)
        if store.registration(out, pid) is None:
            return _fail(f"no units chosen for plan {pid} and none stored: nothing to report", 1)
    except (StoreError, LaunchError, disk.NotOurs) as exc:  # NotOurs: a link or a user's file where it writes
        return _fail(str(exc), 2)
    except DataError as exc:
        print(f"scale.replicate: data error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        return _fail(f"cannot write {out} ({exc}); every finished unit is in {out / 'units'} if it exists: rerun the "
                     "same command once fixed", 4)
    except (KeyboardInterrupt, Interrupted):
        print(f"scale.replicate: interrupted; every finished unit is in {out / 'units'}: rerun the same command to "
              "continue", file=sys.stderr)
        return 130
    print(f"scale.replicate: report {out / 'report.md'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
