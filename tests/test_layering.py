"""scale's layers: the commands on top, then analysis and the ledger, then curvature, geometry and runs, with engine
at the bottom.

Every module of a sub-package may import only the packages listed for it in ``ALLOWED`` (lazy imports
inside functions count too), and no sub-package imports a command (a top-level module of ``scale``).
The negative control feeds the checker an import that goes upwards.
"""

from __future__ import annotations

import ast
from pathlib import Path

import scale

SCALE = Path(scale.__file__).parent
ALLOWED = {  # package -> the scale packages its modules may import (besides itself)
    "engine": set(),
    "runs": {"engine"},
    "curvature": {"engine"},
    "experiments": {"engine"},  # the paper's experiments as data: what each trains, on a config of the engine
    "geometry": {"engine", "runs", "experiments"},
    # the replication ledger: the experiments' units, their measurements, verdicts and store; only the command
    # scale.replicate imports it
    "ledger": {"engine", "runs", "curvature", "geometry", "experiments", "launch"},
    "launch": {"engine"},  # units as jobs (submitit), used by the commands and the grid's units
    "analysis": {"engine", "runs", "curvature", "geometry"},  # scale.analyze's measurements, as a library
    "grid": {"engine", "runs", "launch", "ledger", "experiments"},  # scale.paper's units, stored as the ledger's
}
COMMANDS = {p.stem for p in SCALE.glob("*.py") if p.stem != "__init__"}


def scale_imports(source: str) -> set[str]:
    """The first component under ``scale`` of every import in ``source`` (``scale.engine.heads`` -> engine)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] == "scale":
                found.update([parts[1]] if len(parts) > 1 else [a.name for a in node.names])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("scale."))
    return found


def violations(package: str, source: str) -> set[str]:
    return scale_imports(source) - ALLOWED[package] - {package}


def test_the_layout_is_the_documented_one():
    assert {p.name for p in SCALE.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(ALLOWED)
    assert COMMANDS == {"run", "analyze", "export", "paper", "report", "crosscheck", "pretrained", "e4_study",
                        "replicate"}


def test_every_import_points_down():
    bad = {}
    for package in ALLOWED:
        for path in sorted((SCALE / package).glob("*.py")):
            v = violations(package, path.read_text())
            if v:
                bad[f"{package}/{path.name}"] = sorted(v)
    assert not bad, f"imports against the layering: {bad}"


def test_negative_control_an_upward_import_is_caught():
    assert violations("engine", "from scale.curvature.lanczos import lanczos\n") == {"curvature"}
    assert violations("runs", "def f():\n    from scale import run\n") == {"run"}
    assert violations("geometry", "import scale.engine.heads\nfrom scale.runs import summary\n") == set()
