"""Exploration: every theory check run on fresh random instances, many per property.

The suite's own profile (``ci``, the default) is deterministic: the same examples on every run, so
that the README's test command gives the same answer on every machine. A proof is a statement about
*every* instance of its domain, so the checks are also run here with fresh seeds and many more
examples; a falsifying instance is a finding (of the check, of its premise, or of the theory).

    python -m theory_checks.explore --seeds 5 --examples 100          # fresh seeds, print the table
    python -m theory_checks.explore --seeds 5 --examples 100 --write docs/theory_checks.md
    python -m theory_checks.explore --seed 1234 --examples 100 -k fisher   # rerun one seed, some checks

Each seed runs ``pytest theory_checks`` in a subprocess under the ``explore`` profile
(``derandomize=False``, ``--hypothesis-seed`` the seed, ``THEORY_CHECKS_EXAMPLES`` examples per
property, shrinking on), with a plugin (``_explore_plugin``) that counts per check the examples
generated, the draws discarded by a premise (``assume`` or a strategy's filter) and the failures;
draws that hypothesis abandons itself (a test case over its size limit) are counted apart, as they
say nothing of the check. The table gives, per check function (parametrisations summed), the
examples generated over all seeds, the discard rate, the certificates issued in ball arithmetic (where
float64 fell in a band, and on the fixed certified instances) with their time and how many of them drawn
instances issued (a generated example whose float64 margin was thin), and the failures; every
falsifying instance is printed with the seed that reproduces it and hypothesis's ``@reproduce_failure`` blob.

Exit status: 0 when no check failed, 1 when one did, 2 on usage.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from mini.reports.docs import fill_block

ROOT = Path(__file__).resolve().parent.parent
CHECKS = "theory_checks"
COMMAND = "python -m theory_checks.explore"  # the generated block of docs/theory_checks.md (mini.reports.docs)


@dataclass
class SeedRun:
    seed: int
    exit_code: int
    seconds: float
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)
    certificates: dict[str, list[float]] = field(default_factory=dict)  # node -> [issued, seconds]
    tail: str = ""


def run_seed(seed: int, examples: int, selection: list[str]) -> SeedRun:
    """``pytest theory_checks`` once, under the explore profile and hypothesis seed ``seed``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "explore.json"
        env = {**os.environ, "HYPOTHESIS_PROFILE": "explore", "THEORY_CHECKS_EXAMPLES": str(examples),
               "THEORY_CHECKS_EXPLORE_OUT": str(out), "PYTHONPATH": str(ROOT),
               "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY_NOCOVER": "1"}
        args = [sys.executable, "-m", "pytest", *(selection or [CHECKS]), "-q", "--tb=short", "--no-header",
                "-p", "no:cacheprovider", "-o", "addopts=", "-p", "theory_checks._explore_plugin",
                f"--hypothesis-seed={seed}"]
        t0 = time.perf_counter()
        proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        data = json.loads(out.read_text()) if out.exists() else {}
    return SeedRun(seed, proc.returncode, seconds, data.get("counts", {}), data.get("failures", {}),
                   data.get("outcomes", {}), data.get("certificates", {}), (proc.stdout + proc.stderr)[-3000:])


def check_of(nodeid: str) -> str:
    """``theory_checks/test_x.py::test_y[param]`` -> ``test_x.py::test_y`` (parametrisations summed)."""
    return nodeid.split("[", 1)[0].removeprefix(f"{CHECKS}/")


@dataclass
class CheckRow:
    cases: set[str] = field(default_factory=set)  # parametrised node ids seen
    generated: int = 0
    explicit: int = 0
    discarded: int = 0
    overrun: int = 0  # draws hypothesis itself abandoned (test-case size), not a premise of the check
    failed_seeds: list[int] = field(default_factory=list)
    deterministic: bool = True  # no hypothesis draws at all
    certificates: int = 0  # issued in ball arithmetic (certify), all seeds
    certificates_drawn: int = 0  # of those, issued by generated test cases (a drawn instance's thin margin)
    certificate_seconds: float = 0.0

    @property
    def discard_rate(self) -> float:
        tried = self.generated + self.discarded
        return self.discarded / tried if tried else 0.0


def summarise(runs: list[SeedRun]) -> dict[str, CheckRow]:
    rows: dict[str, CheckRow] = defaultdict(CheckRow)
    for run in runs:
        for node in run.outcomes:
            rows[check_of(node)].cases.add(node)
        for node, c in run.counts.items():
            row = rows[check_of(node)]
            row.cases.add(node)
            row.generated += c.get("generated", 0)
            row.explicit += c.get("explicit", 0)
            row.discarded += c.get("discarded", 0)
            row.overrun += c.get("overrun", 0)
            row.certificates_drawn += c.get("certificates_drawn", 0)
            row.deterministic = row.deterministic and not (c.get("generated", 0) or c.get("discarded", 0))
        for node in run.failures:
            rows[check_of(node)].failed_seeds.append(run.seed)
        for node, (issued, secs) in run.certificates.items():
            rows[check_of(node)].certificates += int(issued)
            rows[check_of(node)].certificate_seconds += float(secs)
    return dict(sorted(rows.items()))


def table(rows: dict[str, CheckRow], n_seeds: int) -> str:
    lines = ["| check | cases | examples generated (all seeds) | per case and seed | discarded by premises "
             "| certificates (time) | failures |", "|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        per = r.generated / max(1, len(r.cases) * n_seeds)
        gen = "deterministic (no draws)" if r.deterministic else f"{r.generated}"
        per_txt = "" if r.deterministic else f"{per:.0f}"
        disc = "" if r.deterministic else f"{r.discarded} ({100 * r.discard_rate:.1f} %)"
        fails = ", ".join(f"seed {s}" for s in sorted(set(r.failed_seeds))) or "0"
        drawn = f"{r.certificates_drawn} drawn, " if r.certificates_drawn else ""
        certs = f"{r.certificates} ({drawn}{r.certificate_seconds:.2f} s)" if r.certificates else ""
        lines.append(f"| `{name}` | {len(r.cases)} | {gen} | {per_txt} | {disc} | {certs} | {fails} |")
    return "\n".join(lines)


def revision() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown revision"
    return f"{rev}{' with uncommitted changes' if dirty else ''}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m theory_checks.explore", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="number of fresh random seeds (default 5)")
    parser.add_argument("--seed", type=int, nargs="+", metavar="S", help="these seeds instead of fresh ones")
    parser.add_argument("--examples", type=int, default=100, help="examples per property and seed (default 100)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="seeds run at once")
    parser.add_argument("-k", metavar="EXPR", help="only the checks pytest's -k selects")
    parser.add_argument("paths", nargs="*", help="check files or node ids (default: all of theory_checks/)")
    parser.add_argument("--write", type=Path, metavar="DOC", help="fill the exploration block of DOC")
    args = parser.parse_args(argv)
    if args.examples < 1 or args.seeds < 1 or args.jobs < 1:
        parser.error("--examples, --seeds and --jobs must be at least 1")
    seeds = args.seed or [secrets.randbits(32) for _ in range(args.seeds)]
    selection = [*args.paths, *(["-k", args.k] if args.k else [])]

    t0 = time.perf_counter()
    cpu0 = os.times()
    with ThreadPoolExecutor(args.jobs) as pool:
        runs = list(pool.map(lambda s: run_seed(s, args.examples, selection), seeds))
    cpu1 = os.times()
    wall = time.perf_counter() - t0
    cpu = (cpu1.children_user + cpu1.children_system) - (cpu0.children_user + cpu0.children_system)

    broken = [r for r in runs if r.exit_code not in (0, 1) or (not r.outcomes and not r.counts)]
    for r in broken:
        print(f"seed {r.seed}: pytest exit {r.exit_code} without results:\n{r.tail}", file=sys.stderr)
    rows = summarise(runs)
    n_fail = sum(len(r.failures) for r in runs)
    gen = sum(r.generated for r in rows.values())
    disc = sum(r.discarded for r in rows.values())
    over = sum(r.overrun for r in rows.values())
    n_cert = sum(r.certificates for r in rows.values())
    n_drawn = sum(r.certificates_drawn for r in rows.values())
    cert_s = sum(r.certificate_seconds for r in rows.values())
    header = (f"Explored {datetime.date.today().isoformat()} at {revision()}: "
              f"`python -m theory_checks.explore --seeds {len(seeds)} --examples {args.examples}`; "
              f"seeds {', '.join(map(str, seeds))}; {len(rows)} checks, "
              f"{sum(len(r.cases) for r in rows.values())} cases; {gen} examples generated, {disc} draws "
              f"discarded by premises ({100 * disc / max(1, gen + disc):.1f} %), {over} abandoned by hypothesis "
              f"(test-case size); {n_cert} certificates in ball arithmetic ({n_drawn} on drawn instances; "
              f"{cert_s:.1f} s); "
              f"{wall:.0f} s wall, {cpu:.0f} s CPU ({args.jobs} at once). **Failures: {n_fail}.**")
    text = f"{header}\n\n{table(rows, len(seeds))}"
    print(text)
    for r in runs:
        for node, msg in sorted(r.failures.items()):
            print(f"\nFALSIFIED {node} (seed {r.seed}; rerun: python -m theory_checks.explore --seed {r.seed} "
                  f"--examples {args.examples} {node.split('[', 1)[0]})\n{msg}")
    if args.write:
        fill_block(args.write, COMMAND, text)
    return 1 if n_fail or broken else 0


if __name__ == "__main__":
    sys.exit(main())
