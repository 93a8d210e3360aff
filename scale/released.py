r"""``python -m scale.released``: the paper's own CIFAR runs, from the arrays its official code released.

Prints, offline, the section "On the paper's own CIFAR data" that the ledger's report carries: every printed figure
the arrays support beside its recomputation (per run), the printed figures no array supports, and the paper's
claims re-tested with the ledger's statistics and controls (``scale.ledger.released``). It writes nothing; the
ledger's report (``python -m scale.replicate ... --report-only``) includes the same section.

Sources: the copy vendored with the package (default), or ``--official DIR``, a checkout of the official repository
(its ``results/`` read under the same checks: every file must be the upstream commit's, SHA-256 for SHA-256).

Exit codes (``scale/runs/faults.py``): 0 printed; 1 a released file missing, unreadable, over the size bound, an
unsafe pickle (any global beyond NumPy's array reconstruction, named and refused unexecuted), not in its schema
(names, dtypes, shapes, finite values), or differing from the upstream commit's SHA-256, or the committed analysis
plan differing from the registered one; 2 bad arguments (``--official`` not a directory).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from scale.engine.flags import OneLineParser
from scale.ledger.released.plan import PLAN, plan_ok
from scale.ledger.released.reader import ReleasedError
from scale.ledger.released.section import section
from scale.runs.faults import EXIT_INPUT, EXIT_OK, EXIT_USAGE

REPO = Path(__file__).resolve().parent.parent  # a checkout's root (where the committed plan lies), if any


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m scale.released", description=__doc__.splitlines()[0])
    parser.add_argument("--official", metavar="DIR", type=Path, default=None,
                        help="a checkout of farischaudhry/projection-head-geometry (default: the vendored arrays)")
    args = parser.parse_args(argv)
    if args.official is not None and not args.official.is_dir():
        print(f"error: --official {args.official} is not a directory (give the root of a checkout of the official "
              "repository, or leave it out for the vendored arrays)", file=sys.stderr)
        return EXIT_USAGE
    if plan_ok(REPO) is False:
        print(f"error: {PLAN} differs from the registered plan (scale/ledger/released/plan.py PLAN_SHA256); "
              "refused", file=sys.stderr)
        return EXIT_INPUT
    t0 = time.perf_counter()
    try:
        lines = section(args.official)
    except ReleasedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    print("\n".join(lines))
    print(f"\n({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
