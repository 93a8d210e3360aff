r"""``python -m scale.paper_report DIR``: the side-by-side report of a grid plan written by ``python -m scale.paper``.

``DIR`` is the plan's folder ``OUT/<plan>`` (``scale.grid.unit_files``), or ``OUT`` when it holds one plan. Reads
``DIR/manifest.json`` and the plan's unit files in ``OUT/units`` (each finished run's summary, config, deviations,
per-epoch metrics, E2's curvature records and summary, E4's orbit figure data), nothing else, and writes
``DIR/report.md`` with PNG figures beside it; unit files of other plans are listed as left out, never read further:

    e1_variance.png     E1: mean per-dimension std of the normalised projector output per epoch
    e1_condition.png    E1: covariance condition number of the projector output per epoch
    e2_curvature.png    E2: lambda_min and lambda_max of H_eff per epoch
    e4_orbits.png       E4: 2-D PCA projection of the rotation orbits, backbone z, head h, untrained head
    compression.png     E4/E5: compression factor (spread z / spread h), trained and untrained heads

Exit codes: 0 written; 1 the grid cannot be read (no manifest.json, a file that is not JSON, nests too deep,
is too large, not a regular file, or holds values of the wrong type; an unreadable unit folder), each as one
line naming the file; 2 usage; 4 the report cannot be written. Every file is read through ``scale.engine.read``
and written through ``scale.engine.disk``.

The report's text and figures are ``scale.grid.page`` (each experiment's table and verdicts
``scale.grid.sections``); this command reads its argument and writes the files.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from scale.engine import disk, read
from scale.engine.checkpoint import atomic_write_bytes, atomic_write_text
from scale.grid.page import REPORT_FILES, REPORT_HEADER, report_figures, report_text
from scale.grid.records import load_grid


def write_report(out: str | Path, figures: bool = True) -> Path:
    """Write ``out/report.md`` (and, with ``figures``, the PNG figures) from the grid's directories."""
    out = Path(out)
    grid = load_grid(out)
    # a report.md (or figure) in the grid that this report did not write is someone else's: refused, never replaced
    disk.check_outputs_ours(out, REPORT_FILES, "report.md", lambda p: p.read_bytes().startswith(REPORT_HEADER))
    if figures:
        for name, png in report_figures(grid["runs"]).items():
            if png is not None:
                atomic_write_bytes(out / name, png)
    path = out / "report.md"
    atomic_write_text(path, report_text(grid, out))
    return path


def plan_folder(folder: Path) -> Path:
    """``folder`` itself when it holds a manifest.json; else the one grid plan folder in it (``OUT`` of a single
    plan). Several plans there: ``FileNotFoundError`` naming them (choose one)."""
    if os.path.lexists(folder / "manifest.json") or not folder.is_dir():
        return folder
    plans = sorted(p.name for p in folder.glob("grid-*") if os.path.lexists(p / "manifest.json"))
    if len(plans) == 1:
        return folder / plans[0]
    if plans:
        raise FileNotFoundError(f"{folder} holds {len(plans)} grid plans ({', '.join(plans)}): name one, e.g. "
                                f"python -m scale.paper_report {folder / plans[0]}")
    return folder


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print("usage: python -m scale.paper_report DIR   (DIR: a grid plan folder OUT/grid-... written by python -m "
              "scale.paper, or its OUT when it holds one plan)",
              file=sys.stderr if len(args) != 1 else sys.stdout)
        return 0 if args and args[0] in ("-h", "--help") else 2
    try:
        path = write_report(plan_folder(Path(args[0])))
    except (FileNotFoundError, read.Unreadable, disk.NotOurs) as exc:
        print(f"scale.paper_report: error: {exc}", file=sys.stderr)
        return 1 if not isinstance(exc, disk.NotOurs) else exc.code
    except OSError as exc:
        print(f"scale.paper_report: error: cannot write in {args[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 4
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
