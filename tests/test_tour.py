"""The tour (``docs/tour/``): every chapter executes and its committed page is what it renders now; the
renderer (``python -m docs.tour``) on chapters of its own: cells, figures, failures, bad arguments.

``test_committed_pages_are_current`` executes all six chapters, each in a process of its own (about 20 s
of CPU in all), and compares every page byte for byte; the chapters print only digits and comparisons that do
not depend on the BLAS build or the CPU's instruction set (see ``render.py``; ``.ci/run`` runs this test again
under ``ATEN_CPU_CAPABILITY=avx2`` and ``=default``).
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOUR = ROOT / "docs" / "tour"
if str(ROOT) not in sys.path:  # docs.tour is a folder of the repository, not an installed package
    sys.path.insert(0, str(ROOT))
render = importlib.import_module("docs.tour.render")

CHAPTERS = sorted(TOUR.glob(render.CHAPTER_GLOB))


def tour(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "docs.tour", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


# --------------------------------------------------------------------------------------------
# The tour itself
# --------------------------------------------------------------------------------------------


def test_the_tour_has_its_six_chapters():
    assert [p.stem[:2] for p in CHAPTERS] == ["01", "02", "03", "04", "05", "06"]
    for path in CHAPTERS:
        assert render.chapter_title(path)
        assert path.with_suffix(".md").exists(), f"{path.name} has no rendered page"


def test_committed_pages_are_current():
    proc = tour("--check")
    assert proc.returncode == 0, proc.stderr[-6000:]
    for path in CHAPTERS:
        page = path.with_suffix(".md").read_text()
        assert "```text" in page, f"{path.name}: its page shows no printed output"
        assert f"]({path.stem}_fig1.png)" in page, f"{path.name}: its page shows no figure"


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_names_its_checks_and_findings(path: Path):
    text = path.read_text()
    assert "theory_checks/" in text or "tests/" in text, "a chapter names the check that proves what it shows"
    assert "## What proves it, and where the paper and the instance disagree" in text


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapters_import_mini_and_matplotlib_and_only_the_last_scale(path: Path):
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module.split(".")[0])
    allowed = {"mini", "matplotlib", "numpy", "autograd", "warnings", "dataclasses"}
    if path.stem.startswith("06"):
        allowed |= {"scale", "torch"}
        assert "scale" in imported
    assert imported <= allowed, f"{path.name} imports {sorted(imported - allowed)}"


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_jupytext_reads_the_same_cells(path: Path):
    jupytext = pytest.importorskip("jupytext", reason="jupytext (the 'test' extra) opens the chapters as notebooks")
    theirs = [(cell.cell_type, cell.source.strip()) for cell in jupytext.read(path).cells]
    ours = [(cell.kind, cell.source.strip()) for cell in render.parse_cells(path.read_text(), path.name)]
    assert ours == theirs


# --------------------------------------------------------------------------------------------
# The renderer on chapters of its own
# --------------------------------------------------------------------------------------------

FIGURE_CHAPTER = '''# %% [markdown]
# # A test chapter
#
# Some text.

# %%
import matplotlib.pyplot as plt

print("hello", 6 * 7)

# %%
for k in range({n}):
    plt.figure(num=f"figure {{k}}")
    plt.plot([0, 1], [k, k + 1])
plt.show()
'''


def write_chapter(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def test_parse_cells_reads_the_percent_format():
    text = "x = 1\n\n# %% [markdown]\n# # Title\n#\n# text\n\n# %%\n\ny = 2\n# %% [md]\n# more\n"
    cells = render.parse_cells(text)
    assert [(c.kind, c.source, c.line) for c in cells] == [
        ("code", "x = 1", 1), ("markdown", "# Title\n\ntext", 4), ("code", "y = 2", 10), ("markdown", "more", 12)]


def test_parse_cells_refuses_code_in_a_text_cell():
    with pytest.raises(render.TourError, match=r"c\.py, line 3: a text cell holds only comment lines"):
        render.parse_cells("# %% [markdown]\n# # T\nprint(1)\n", "c.py")


def test_a_chapter_renders_with_its_output_and_figures(tmp_path):
    path = write_chapter(tmp_path, "01_demo.py", FIGURE_CHAPTER.format(n=2))
    proc = tour("--dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "01_demo.md").read_text()
    assert "# A test chapter" in page and "```text\nhello 42\n```" in page
    assert "![figure 0](01_demo_fig1.png)" in page and "![figure 1](01_demo_fig2.png)" in page
    for name in ("01_demo_fig1.png", "01_demo_fig2.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "[A test chapter](01_demo.md)" in (tmp_path / "README.md").read_text()
    assert "01_demo: " in proc.stderr and "s CPU" in proc.stderr  # timings on stderr, never in the page
    current = tour("--dir", str(tmp_path), "--check")
    assert current.returncode == 0  # deterministic: the same page again, and --check says so
    assert "tour: every page is current (1 chapter(s)" in current.stdout
    # One figure fewer: the stale PNG goes, --check first says the page is not current.
    path.write_text(FIGURE_CHAPTER.format(n=1))
    stale = tour("--dir", str(tmp_path), "--check")
    assert stale.returncode == 1 and "01_demo.md (rendered now)" in stale.stderr
    assert "every page is current" not in stale.stdout
    assert tour("--dir", str(tmp_path)).returncode == 0
    assert not (tmp_path / "01_demo_fig2.png").exists() and (tmp_path / "01_demo_fig1.png").exists()


def test_a_failing_cell_names_itself_and_leaves_pages_alone(tmp_path):
    write_chapter(tmp_path, "01_good.py", FIGURE_CHAPTER.format(n=0))
    bad = write_chapter(tmp_path, "02_bad.py", "# %% [markdown]\n# # Bad\n\n# %%\nprint('before')\n\n# %%\n"
                                               "x = 1\nraise RuntimeError('boom')\n")
    (tmp_path / "02_bad.md").write_text("the old page\n")
    proc = tour("--dir", str(tmp_path))
    assert proc.returncode == 1
    assert "02_bad.py: cell 3 (line 8) raised" in proc.stderr and "RuntimeError: boom" in proc.stderr
    assert f'File "{bad}", line 9' in proc.stderr  # the traceback points into the chapter file
    assert "failed: 02_bad.py" in proc.stderr
    assert (tmp_path / "02_bad.md").read_text() == "the old page\n"
    assert (tmp_path / "01_good.md").exists()  # the other chapters still render
    assert not (tmp_path / "README.md").exists()  # the index waits for a clean run


def test_a_killed_chapter_fails_cleanly(tmp_path):
    write_chapter(tmp_path, "01_killed.py", "# %% [markdown]\n# # Killed\n\n# %%\nimport os, signal\n"
                                            "os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = tour("--dir", str(tmp_path))
    assert proc.returncode == 1 and "failed: 01_killed.py" in proc.stderr
    assert not (tmp_path / "01_killed.md").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_bad_arguments_exit_2_in_one_line(tmp_path):
    proc = tour("07")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "unknown chapter '07'; valid: 01_effective_hessian" in proc.stderr
    proc = tour("--dir", str(tmp_path / "missing"))
    assert proc.returncode == 2 and "is not a folder" in proc.stderr
    proc = tour("--dir", str(tmp_path))
    assert proc.returncode == 2 and "no chapters" in proc.stderr
    write_chapter(tmp_path, "01_untitled.py", "# %%\nprint(1)\n")
    proc = tour("--dir", str(tmp_path))
    assert proc.returncode == 2 and "first text cell must open with a title" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["01_untitled.py"]  # nothing written


def test_a_page_that_cannot_be_written_exits_4(tmp_path):
    write_chapter(tmp_path, "01_demo.py", FIGURE_CHAPTER.format(n=0))
    (tmp_path / "01_demo.md").mkdir()  # the page's path is taken by a folder: the write itself fails
    proc = tour("--dir", str(tmp_path))
    assert proc.returncode == 4 and "cannot write" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["01_demo.md", "01_demo.py"]  # no temporary file left
    assert not any((tmp_path / "01_demo.md").iterdir())
