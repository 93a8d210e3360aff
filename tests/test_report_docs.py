"""The docs' generated blocks (``mini.reports.docs``): each names the command that writes it, the command
fills it, and the committed blocks are what the current code prints.

Currency is checked by rerunning a block's command into a copy of its doc and comparing with the
committed text, for the commands that run in seconds (``FAST``), and by recomputing one part of a slower one
(the whitening report's objectives table). Numbers are compared to the precision
they are printed with (``PRINTED_RTOL``: one unit in the third significant digit); numbers at round-off
level (both below ``ROUNDOFF`` in magnitude, e.g. a ``lambda_min`` of -5e-17 where the exact value is 0)
differ between BLAS builds and are not compared; integers (counts) must be equal. The slow reports
(``python -m mini.reports.dynamics``: 1-4 min, ``mini.reports.capacity``: 1-4 min, whose fits move by up
to 2x under round-off, ``mini.reports.train --report``: 20 s, the whitening report's gradient-descent and
barrier tables: 8 s) are checked for a well-formed command only.
"""

from __future__ import annotations

import importlib
import re
import shutil
from pathlib import Path

import pytest

from mini.reports import docs

ROOT = Path(__file__).resolve().parents[1]
PRINTED_RTOL = 1.01e-2
ROUNDOFF = 1e-12
FAST = (  # commands whose blocks are regenerated here (seconds each)
    "python -m mini.reports.collapse",
    "python -m mini.reports.dynamics --heads linear,relu2,gelu2,swish2 --inits collapsed --bn off --dynamics small "
    "--horizon 64",
)
NUMBER = re.compile(r"([-+]?\d+(?:\.\d*)?(?:e[-+]?\d+)?)")


def all_blocks() -> list[tuple[Path, docs.Block]]:
    return [(p, b) for p in sorted((ROOT / "docs").rglob("*.md")) for b in docs.blocks(p.read_text())]


def differences(committed: str, current: str) -> list[str]:
    """Where two outputs differ beyond the printed precision (module docstring); ``[]`` when they agree.
    Runs of spaces and of table-rule dashes are one (column widths follow the numbers' lengths)."""
    def tokens(text: str) -> list[str]:
        text = re.sub(r"-{3,}", "---", re.sub(r"[ \t]+", " ", text))
        return NUMBER.split(text)  # odd positions hold numbers

    a, b = tokens(committed), tokens(current)
    if len(a) != len(b):
        return [f"different structure ({len(a)} vs {len(b)} tokens)"]
    out = []
    for i, (x, y) in enumerate(zip(a, b)):
        if i % 2 == 0 or x == y:
            if x != y:
                out.append(f"text {x!r} -> {y!r}")
            continue
        if re.fullmatch(r"[-+]?\d+", x) and re.fullmatch(r"[-+]?\d+", y):
            out.append(f"count {x} -> {y}")
            continue
        u, v = float(x), float(y)
        if max(abs(u), abs(v)) > ROUNDOFF and abs(u - v) > PRINTED_RTOL * max(abs(u), abs(v)):
            out.append(f"number {x} -> {y}")
    return out


def run_block_command(command: str, doc: Path, capsys) -> None:
    prog, *argv = command.removeprefix("python -m ").split(" ")
    assert importlib.import_module(prog).main([*argv, "--doc", str(doc)]) == 0
    capsys.readouterr()


def test_every_block_names_a_report_that_writes_that_doc():
    found = all_blocks()
    assert {b.command.split(" ")[2] for _, b in found} == {
        "mini.reports.collapse", "mini.reports.whitening", "mini.reports.capacity", "mini.reports.dynamics",
        "mini.reports.train", "theory_checks.mutants", "theory_checks.explore", "theory_checks.certified_claims"}
    for path, b in found:
        module = importlib.import_module(b.command.split(" ")[2])
        assert module.main and b.command.startswith(getattr(module, "PROG", getattr(module, "COMMAND", "?")))
        doc = getattr(module, "DOC", None)
        assert doc is None or doc == path, (b.command, path)


@pytest.mark.parametrize("command", FAST, ids=["collapse", "dynamics-supplement"])
def test_the_committed_block_is_what_the_command_writes_now(command, tmp_path, capsys):
    [(path, _)] = {(p, None) for p, b in all_blocks() if b.command == command}
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    run_block_command(command, copy, capsys)
    committed = [b for b in docs.blocks(path.read_text()) if b.command == command]
    current = [b for b in docs.blocks(copy.read_text()) if b.command == command]
    assert [b.part for b in committed] == [b.part for b in current]
    for old, new in zip(committed, current):
        diff = differences(old.body, new.body)
        assert not diff, f"{path.name} is stale ({command} [{old.part}]): {diff[:5]}; rerun the command"
    # the prose around the blocks is untouched
    strip = docs.BLOCK.sub("", path.read_text())
    assert docs.BLOCK.sub("", copy.read_text()) == strip


def test_a_committed_part_is_what_its_function_makes_now():
    """A part of a slower report, recomputed alone: ``python -m mini.reports.whitening``'s objectives table
    (its other two tables run gradient descent to 1.3 million steps and 30-start searches: 8 s)."""
    from mini.reports import whitening

    [block] = [b for p, b in all_blocks() if b.command == "python -m mini.reports.whitening" and b.part == "objectives"]
    diff = differences(block.body, whitening.objectives_table())
    assert not diff, f"docs/section3.md is stale (python -m mini.reports.whitening [objectives]): {diff[:5]}"


def test_differences_negative_control():
    row = "| gelu2 | 3 | -5.44e-17 .. -2.74e-17 | 0.179 .. 0.481 | 99/100 |"
    assert differences(row, row.replace("-5.44e-17", "-7.76e-17")) == []  # round-off: not compared
    assert differences(row, row.replace("0.179", "0.180")) == []  # the last printed digit
    assert differences(row, row.replace("0.481", "0.52")) == ["number 0.481 -> 0.52"]
    assert differences(row, row.replace("99/100", "98/100")) == ["count 99 -> 98"]
    assert differences(row, row.replace("gelu2", "gelu3")) == ["count 2 -> 3"]
    assert differences(row, row + " |") != []


def test_fill_replaces_only_this_command_s_blocks(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("intro\n<!-- generated: python -m a -->\nold a\n<!-- /generated -->\nmiddle\n"
                   "<!-- generated: python -m a --x 1 [t] -->\nold t\n<!-- /generated -->\n"
                   "<!-- generated: python -m b -->\nold b\n<!-- /generated -->\nend\n")
    assert docs.fill(doc, "python -m a", {None: "new a"}) == 1
    assert docs.fill(doc, docs.command_line("python -m a", ["--x", "1", "--doc", "d.md", "--progress"]),
                     {"t": "new t\n"}) == 1
    assert docs.fill(doc, "python -m c", {None: "nothing"}) == 0
    text = doc.read_text()
    assert [(b.command, b.part, b.body) for b in docs.blocks(text)] == [
        ("python -m a", None, "new a"), ("python -m a --x 1", "t", "new t"), ("python -m b", None, "old b")]
    assert text.startswith("intro\n") and "\nmiddle\n" in text and text.endswith("end\n")
    with pytest.raises(KeyError, match="names part 't'"):
        docs.fill(doc, "python -m a --x 1", {None: "no such part"})


def test_no_doc_prints_only(tmp_path, capsys):
    from mini.reports import collapse

    doc = tmp_path / "c.md"
    doc.write_text("<!-- generated: python -m mini.reports.collapse --seeds 1 --generic 1 -->\nx\n"
                   "<!-- /generated -->\n")
    before = doc.read_text()
    assert collapse.main(["--seeds", "1", "--generic", "1", "--no-doc"]) == 0
    assert doc.read_text() == before
    assert collapse.main(["--seeds", "1", "--generic", "1", "--doc", str(doc)]) == 0
    out, err = capsys.readouterr()
    assert "Theorem 4.1 audit" in out and "1 block(s)" in err
    assert "Theorem 4.1 audit" in docs.blocks(doc.read_text())[0].body
