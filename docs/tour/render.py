r"""``python -m docs.tour``: execute the tour's chapters cell by cell and write their rendered pages.

    python -m docs.tour                  # every chapter: NN_name.md and NN_name_figK.png beside NN_name.py
    python -m docs.tour 3 05_invariance  # some chapters (a number, a file stem or a path)
    python -m docs.tour --check          # render without writing; exit 1 where a committed page differs

Run it from the repository root (``docs.tour`` is a folder of the repository, not an installed package).

Chapters
--------
A chapter is ``docs/tour/NN_name.py`` in the percent format that jupytext reads: a line ``# %%`` opens a
code cell, ``# %% [markdown]`` a text cell whose lines are comments (``# `` is stripped). Its title is the
first line ``# Title`` of its first text cell. ``python NN_name.py`` runs the same code top to bottom.

Execution
---------
Each chapter runs in a Python process of its own (``--execute-one``), so that its page does not depend
on which chapters ran before it, with ``PYTHONHASHSEED=0`` and one BLAS thread (results of threaded
reductions can depend on the thread count). Code cells share one namespace; what a cell prints is captured
and written under it; every matplotlib figure open when a cell ends is saved (Agg backend, ``DPI``, no
timestamp in the file) and closed, and ``plt.show()`` does nothing. A cell that raises stops its chapter:
the traceback goes to stderr, the chapter's page is left as it was, and the other chapters still run.

Determinism
-----------
A page holds only the chapter's text, code and printed output, so ``--check`` can compare it byte for byte
with the committed one. The chapters print numbers rounded to digits that do not depend on the BLAS build
or on round-off (a value that is zero up to round-off is reported against a named tolerance, never
printed), and seed everything they draw. Where a chapter's figures are machine-dependent (chapter 6
trains a float32 network: its figures move with the CPU's instruction set, the BLAS path and the thread
count), it prints only comparisons measured to hold with a margin under each of them (``docs/testing.md``)
and says so on its page; CI checks the pages under several instruction sets. Timings go to stderr, never
into a page; figures are written but not compared (their bytes depend on the matplotlib and FreeType
versions).

Exit codes: 0 done (with ``--check``: every page current); 1 a chapter raised, or with ``--check`` a page or
the index differs from its rendering or a figure it shows is missing (a diff on stderr); 2 bad arguments
(an unknown chapter, named in one line with the valid ones); 4 a page could not be written.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import difflib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

TOUR = Path(__file__).resolve().parent
ROOT = TOUR.parents[1]
CHAPTER_GLOB = "[0-9][0-9]_*.py"
DPI = 100
CHAPTER_TIMEOUT_S = 900  # a chapter that runs longer is stopped and counts as failed
INDEX = "README.md"
_MARKER = re.compile(r"^# %%(?P<rest>.*)$")
_MARKDOWN = re.compile(r"^\s*\[(markdown|md)\]\s*$")
_CHILD_ENV = {"PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


class TourError(ValueError):
    """A chapter file the renderer cannot read (its message names the file and the line)."""


# --------------------------------------------------------------------------------------------
# Cells
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One cell: ``kind`` is ``code`` or ``markdown``; ``line`` is the 1-based line of its first source line."""

    kind: str
    source: str
    line: int


def parse_cells(text: str, name: str = "<chapter>") -> list[Cell]:
    """The cells of a percent-format file; text before the first marker is a code cell (as jupytext reads it).

    Blank lines around a cell are dropped; empty cells are skipped. ``TourError`` when a text cell holds a
    line that is not a comment (jupytext would read it as code, and the page would differ from the notebook).
    """
    cells: list[Cell] = []
    kind, start, body = "code", 1, []

    def close() -> None:
        lines = list(body)
        first = start
        while lines and not lines[0].strip():
            lines.pop(0)
            first += 1
        while lines and not lines[-1].strip():
            lines.pop()
        if not lines:
            return
        if kind == "markdown":
            text_lines = []
            for offset, line in enumerate(lines):
                if line.strip() and not line.startswith("#"):
                    raise TourError(f"{name}, line {first + offset}: a text cell holds only comment lines, "
                                    f"got {line!r}")
                text_lines.append(line[2:] if line.startswith("# ") else line[1:])
            cells.append(Cell("markdown", "\n".join(text_lines), first))
        else:
            cells.append(Cell("code", "\n".join(lines), first))

    for number, line in enumerate(text.splitlines(), start=1):
        match = _MARKER.match(line)
        if match is None:
            body.append(line)
            continue
        close()
        kind = "markdown" if _MARKDOWN.match(match["rest"]) else "code"
        start, body = number + 1, []
    close()
    return cells


def chapter_title(path: Path) -> str:
    """The first ``# Title`` line of the chapter's first text cell (``TourError`` without one)."""
    for cell in parse_cells(path.read_text(encoding="utf-8"), path.name):
        if cell.kind == "markdown":
            first = cell.source.splitlines()[0]
            if first.startswith("# "):
                return first[2:].strip()
            break
    raise TourError(f"{path.name}: its first text cell must open with a title line '# ...'")


# --------------------------------------------------------------------------------------------
# Executing one chapter (in its own process)
# --------------------------------------------------------------------------------------------


def execute(path: Path) -> dict:
    """Run the chapter's cells in one namespace: ``{"blocks": [...], "figures": {name: base64 PNG}}``.

    A block is ``{"kind": "markdown", "text"}`` or ``{"kind": "code", "source", "output", "figures":
    [[name, label], ...]}``. A cell that raises propagates (``CellError`` says which cell).
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.show = lambda *args, **kwargs: None  # the renderer saves every open figure itself
    # autograd's note on a derivative that is constant (a quadratic's third derivative): noise, as in pytest
    warnings.filterwarnings("ignore", "Output seems independent of input", UserWarning)
    cells = parse_cells(path.read_text(encoding="utf-8"), path.name)
    namespace = {"__name__": "__main__", "__file__": str(path)}
    blocks: list[dict] = []
    figures: dict[str, str] = {}
    for index, cell in enumerate(cells, start=1):
        if cell.kind == "markdown":
            blocks.append({"kind": "markdown", "text": cell.source})
            continue
        code = compile("\n" * (cell.line - 1) + cell.source, str(path), "exec")  # tracebacks name file lines
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(code, namespace)
        except BaseException as exc:
            raise CellError(path.name, index, cell.line, out.getvalue()) from exc
        shown = []
        for number in plt.get_fignums():
            fig = plt.figure(number)
            name = f"{path.stem}_fig{len(figures) + 1}.png"
            png = io.BytesIO()
            fig.savefig(png, format="png", dpi=DPI, metadata={"Software": None})
            plt.close(fig)
            figures[name] = base64.b64encode(png.getvalue()).decode("ascii")
            shown.append([name, fig.get_label()])
        blocks.append({"kind": "code", "source": cell.source, "output": out.getvalue(), "figures": shown})
    return {"blocks": blocks, "figures": figures}


class CellError(RuntimeError):
    def __init__(self, chapter: str, index: int, line: int, output: str):
        super().__init__(f"{chapter}: cell {index} (line {line}) raised")
        self.output = output


def _execute_one(path: Path, result: Path) -> int:
    try:
        rendered = execute(path)
    except CellError as exc:
        sys.stderr.write(exc.output)
        print(f"{exc}:", file=sys.stderr)
        traceback.print_exception(exc.__cause__, file=sys.stderr)
        return 1
    result.write_text(json.dumps(rendered), encoding="utf-8")
    return 0


def _children_cpu() -> float:
    """User + system CPU seconds of the finished child processes (0 where ``resource`` is missing: Windows)."""
    try:
        import resource
    except ImportError:
        return 0.0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class Rendered:
    """A chapter's page (markdown) and its figures (name -> PNG bytes); ``cpu`` and ``wall`` in seconds."""

    page: str
    figures: dict[str, bytes]
    wall: float
    cpu: float


def run_chapter(path: Path) -> Rendered | None:
    """Execute ``path`` in a fresh process and build its page; ``None`` when a cell raised (stderr says why)."""
    with tempfile.TemporaryDirectory(prefix="tour-") as tmp:
        result = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "docs.tour", "--execute-one", str(path), "--result", str(result)]
        before = _children_cpu()
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **_CHILD_ENV}, timeout=CHAPTER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            print(f"{path.name}: stopped after {CHAPTER_TIMEOUT_S} s", file=sys.stderr)
            return None
        wall = time.perf_counter() - start
        cpu = _children_cpu() - before
        if proc.returncode != 0 or not result.exists():
            return None
        rendered = json.loads(result.read_text(encoding="utf-8"))
    figures = {name: base64.b64decode(data) for name, data in rendered["figures"].items()}
    return Rendered(page(path, rendered["blocks"]), figures, wall, cpu)


# --------------------------------------------------------------------------------------------
# Pages
# --------------------------------------------------------------------------------------------


def _fence(text: str, info: str = "") -> str:
    """``text`` in a code fence longer than any run of backticks inside it."""
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{info}\n{text}\n{fence}"


def page(path: Path, blocks: list[dict]) -> str:
    """The markdown page of an executed chapter."""
    parts = [f"<!-- Rendered from {path.name} by `python -m docs.tour`: edit the chapter, then rerun. -->"]
    for block in blocks:
        if block["kind"] == "markdown":
            parts.append(block["text"])
            continue
        parts.append(_fence(block["source"], "python"))
        output = block["output"].rstrip()
        if output:
            parts.append(_fence(output, "text"))
        for name, label in block["figures"]:
            parts.append(f"![{label or name}]({name})")
    return "\n\n".join(parts) + "\n"


def index(chapters: list[Path]) -> str:
    """``docs/tour/README.md``: the chapters in order, each with its page and its source."""
    lines = [
        "<!-- Rendered by `python -m docs.tour` from the chapters' titles. -->",
        "# A tour of the paper",
        "",
        f"The tour has {len(chapters)} chapters, one per part of the paper (`docs/paper.md`), each a few lines",
        "of code on a small instance, its printed output and a figure. Chapters 1-5 use `mini` (float64, exact",
        "objects); chapter 6 trains a small network through `scale`. Read the pages below, or run a chapter",
        "yourself: `python docs/tour/01_effective_hessian.py`, or open it as a notebook with jupytext",
        "(`jupytext --to notebook docs/tour/01_effective_hessian.py`). `python -m docs.tour` reruns every",
        "chapter and rewrites its page; `python -m docs.tour --check` says whether the pages are current.",
        "",
    ]
    for path in chapters:
        lines.append(f"- [{chapter_title(path)}]({path.stem}.md) (source: [`{path.name}`]({path.name}))")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


def all_chapters(tour: Path = TOUR) -> list[Path]:
    return sorted(tour.glob(CHAPTER_GLOB))


def select(names: list[str], chapters: list[Path]) -> list[Path]:
    """Chapters named by number (``3``, ``03``), stem or path; ``TourError`` naming the valid ones."""
    if not names:
        return chapters
    chosen = []
    for name in names:
        stem = Path(name).stem
        hits = [p for p in chapters if p.stem == stem or (name.isdigit() and p.stem[:2] == f"{int(name):02d}")]
        if not hits:
            valid = ", ".join(p.stem for p in chapters)
            raise TourError(f"unknown chapter {name!r}; valid: {valid} (or their numbers)")
        chosen += [p for p in hits if p not in chosen]
    return chosen


def _diff(expected: str, actual: str, name: str) -> str:
    lines = difflib.unified_diff(expected.splitlines(keepends=True), actual.splitlines(keepends=True),
                                 f"{name} (committed)", f"{name} (rendered now)")
    return "".join(list(lines)[:200])


def check(path: Path, rendered: Rendered) -> list[str]:
    """Differences between the committed page of ``path`` and its rendering (empty when current)."""
    problems = []
    committed = path.with_suffix(".md")
    old = committed.read_text(encoding="utf-8") if committed.exists() else ""
    if old != rendered.page:
        problems.append(_diff(old, rendered.page, committed.name) or f"{committed.name}: missing")
    for name in rendered.figures:
        if not (path.parent / name).exists():
            problems.append(f"{name}: the page shows it, but it is not committed")
    return problems


def write(path: Path, rendered: Rendered) -> None:
    """The page and its figures, atomically; figures of this chapter that it no longer makes are removed."""
    from mini.atomic import atomic_write_bytes, atomic_write_text

    for name, data in rendered.figures.items():
        atomic_write_bytes(path.parent / name, data)
    for stale in path.parent.glob(f"{path.stem}_fig*.png"):
        if re.fullmatch(rf"{re.escape(path.stem)}_fig\d+\.png", stale.name) and stale.name not in rendered.figures:
            stale.unlink()
    atomic_write_text(path.with_suffix(".md"), rendered.page)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m docs.tour",
                                     description="Execute the tour's chapters and write their rendered pages.")
    parser.add_argument("chapters", nargs="*", help="chapters to render (number, stem or path); default: all")
    parser.add_argument("--check", action="store_true",
                        help="render without writing and compare with the committed pages (exit 1 if any differs)")
    parser.add_argument("--dir", type=Path, default=TOUR, help="the folder of chapters (default: docs/tour)")
    parser.add_argument("--execute-one", type=Path, help=argparse.SUPPRESS)  # the per-chapter process
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.execute_one is not None:
        return _execute_one(args.execute_one.resolve(), args.result)
    tour = args.dir.resolve()
    if not tour.is_dir():
        print(f"python -m docs.tour: --dir {args.dir} is not a folder", file=sys.stderr)
        return 2
    chapters = all_chapters(tour)
    if not chapters:
        print(f"python -m docs.tour: no chapters (NN_name.py) in {tour}", file=sys.stderr)
        return 2
    try:
        chosen = select(args.chapters, chapters)
        expected_index = index(chapters)
    except TourError as exc:
        print(f"python -m docs.tour: {exc}", file=sys.stderr)
        return 2
    failed, problems, total_wall, total_cpu = [], [], 0.0, 0.0
    for path in chosen:
        rendered = run_chapter(path)
        if rendered is None:
            failed.append(path.name)
            continue
        total_wall, total_cpu = total_wall + rendered.wall, total_cpu + rendered.cpu
        print(f"{path.stem}: {rendered.wall:.1f} s wall, {rendered.cpu:.1f} s CPU", file=sys.stderr)
        if args.check:
            problems += check(path, rendered)
            continue
        try:
            write(path, rendered)
        except OSError as exc:
            print(f"python -m docs.tour: cannot write {path.with_suffix('.md')}: {exc}", file=sys.stderr)
            return 4
    index_path = tour / INDEX
    if args.check:
        old = index_path.read_text(encoding="utf-8") if index_path.exists() else ""
        if old != expected_index:
            problems.append(_diff(old, expected_index, INDEX) or f"{INDEX}: missing")
        for orphan in sorted(set(tour.glob("[0-9][0-9]_*.md")) - {p.with_suffix(".md") for p in chapters}):
            problems.append(f"{orphan.name}: a page without its chapter {orphan.with_suffix('.py').name}")
    elif not failed:
        try:
            from mini.atomic import atomic_write_text

            atomic_write_text(index_path, expected_index)
        except OSError as exc:
            print(f"python -m docs.tour: cannot write {index_path}: {exc}", file=sys.stderr)
            return 4
    print(f"tour: {len(chosen) - len(failed)} of {len(chosen)} chapters, {total_wall:.1f} s wall, "
          f"{total_cpu:.1f} s CPU", file=sys.stderr)
    if args.check and not problems and not failed:
        print(f"tour: every page is current ({len(chosen)} chapter(s) rendered and compared byte for byte, and the "
              "index)")
    for problem in problems:
        print(problem, file=sys.stderr)
    if failed:
        print(f"python -m docs.tour: failed: {', '.join(failed)}", file=sys.stderr)
    if problems:
        print("python -m docs.tour: pages not current; rerun `python -m docs.tour` and commit the pages",
              file=sys.stderr)
    return 1 if failed or problems else 0
