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
    # the replication ledger: the experiments' units, their measurements, verdicts and store (and the paper's released
    # arrays re-analysed with its verdicts: ledger/released); the commands scale.replicate and scale.released import it
    "ledger": {"engine", "runs", "curvature", "geometry", "experiments", "launch", "unit_store"},
    "launch": {"engine"},  # units as jobs (submitit), used by the commands and the grid's units
    "analysis": {"engine", "runs", "curvature", "geometry"},  # scale.analyze's measurements, as a library
    # scale.paper's units, in the one unit store, and their report (whose E3 section names the probes' protocols)
    "grid": {"engine", "runs", "geometry", "launch", "experiments", "unit_store"},
    # one store of unit files for the grid and the ledger: names, keys, schemas, identity checks
    "unit_store": {"engine"},
    # the monitor of a model trained elsewhere (a Lightning callback, a plain-PyTorch hook) and scale.run's online kNN
    "monitor": {"engine", "runs", "curvature", "geometry"},
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
    assert COMMANDS == {"run", "analyze", "export", "paper", "paper_report", "crosscheck", "pretrained", "e4_study",
                        "replicate", "released"}


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


# ----------------------------------------------------------------------------- no import cycle


def project_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (mini and scale; every import statement, at the top, inside a
    function or under ``TYPE_CHECKING``: a cycle hidden in any of them is still a cycle of the design)."""
    root = SCALE.parent
    modules = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
               for pkg in ("mini", "scale") for p in (root / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:  # the most specific module the statement names ("from scale.engine import disk")
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name and t.split(".")[0] in ("mini", "scale"):
                    found.add(t)
                    break
        graph[name] = found
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_import_graph_has_no_cycle():
    # packages import their own modules from __init__ only for a docstring's sake: a package and its module are
    # not a cycle of the design (scale/ledger/claims/__init__ gathers its modules)
    graph = {m: {t for t in ts if not (m == t.rpartition(".")[0] and m.count(".") >= 1)} for m, ts in
             project_graph().items()}
    assert not cycles(graph), cycles(graph)


def test_negative_control_a_cycle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
