"""Every relative link of the README and of the pages under docs/ resolves to a file or folder of the repository
(links and images, inline ``[text](target)`` and reference ``[name]: target``; a ``#fragment`` is not checked).
The negative control: a page with a link to a missing file, and one written relative to the wrong folder (the
``docs/docs/...`` mistake), are caught."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INLINE = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def broken(page: Path, text: str) -> list[str]:
    """The relative link targets of ``text`` (the page ``page``) that name nothing in the repository."""
    text = FENCE.sub("", text)  # code blocks hold commands, not links
    out = []
    for target in [*INLINE.findall(text), *REFERENCE.findall(text)]:
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):  # a URL, mailto:, an anchor
            continue
        path = target.split("#", 1)[0]
        if path and not (page.parent / path).exists():
            out.append(target)
    return out


def test_every_relative_link_resolves():
    found = {str(p.relative_to(ROOT)): b for p in pages() if (b := broken(p, p.read_text(encoding="utf-8")))}
    assert not found, f"links to nothing: {found}"


def test_the_docs_readme_names_every_page_and_results_folder():
    readme = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    named = set(INLINE.findall(readme))
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert page.name == "README.md" or page.name in named, f"docs/README.md does not name {page.name}"
    for folder in sorted(p for p in (ROOT / "docs").iterdir() if p.is_dir()):
        assert any(t.startswith(f"{folder.name}/") for t in named), f"docs/README.md does not name {folder.name}/"


def test_negative_control_a_missing_target_is_caught():
    page = ROOT / "docs" / "usage.md"
    assert broken(page, "[the paper](docs/paper.md) and [ok](paper.md)") == ["docs/paper.md"]
    assert broken(page, "![fig](nothing.png)\n[ref]: ../nowhere/x.md\n") == ["nothing.png", "../nowhere/x.md"]
    assert broken(page, "[web](https://example.org) [here](#usage) [folder](tour/)\n```\n[x](gone.md)\n```") == []
