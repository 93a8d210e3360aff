"""How a mutant is installed: a mistake as data, applied in-process, undone after (no file is edited).

Two ways, both recorded on a ``pytest.MonkeyPatch`` so that ``undo`` removes them:

- a *patch* (``swap``, ``wrap``, ``patch_activation``, ``patch_objective``): a name in ``mini`` or ``scale``
  replaced where the code looks it up at call time, in every module that bound it;
- a *source edit* (``edit``): a check-side file (a check, ``certify``, ``premises``, ``conftest``) imported with
  some of its text replaced, through an import hook that serves the edited source in place of the file when the
  module is next imported. The check modules are re-imported for every mutant (``forget_checks``), so the edit
  reaches them; pytest then runs with ``--assert=plain`` (its assertion rewriting would read the file itself).
  Each replaced text must occur exactly once, so a mutant whose target moved fails loudly instead of mutating
  nothing.
"""

from __future__ import annotations

import dataclasses
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECKS = "theory_checks"


@dataclass(frozen=True)
class Mutant:
    """One mistake: ``apply`` installs it on a ``MonkeyPatch``; ``killers`` are pytest node ids."""

    name: str
    mistake: str
    killers: tuple[str, ...]
    apply: Callable[[pytest.MonkeyPatch], None]


PATCHED_PACKAGES = ("mini", "scale")  # where a mistake is patched; check modules are re-imported instead


def _in_patched_package(mod: ModuleType) -> bool:
    name = getattr(mod, "__name__", "") or ""
    return any(name == pkg or name.startswith(pkg + ".") for pkg in PATCHED_PACKAGES)


def swap(mp: pytest.MonkeyPatch, module: ModuleType, name: str, new) -> None:
    """``module.name = new``, and the same in every ``mini`` or ``scale`` module that imported the original
    by name (``from mini.hessian import spectrum`` binds the object, not the attribute). Modules that bind
    it must be imported before the patch (the mutants import them), else they would bind the mistake at
    import and keep it after ``undo``."""
    original = getattr(module, name)
    for mod in list(sys.modules.values()):
        if _in_patched_package(mod) and getattr(mod, name, None) is original:
            mp.setattr(mod, name, new)
    mp.setattr(module, name, new)


def wrap(mp: pytest.MonkeyPatch, module: ModuleType, name: str, wrapper) -> None:
    """``module.name = wrapper(original)``, wherever ``mini`` or ``scale`` bound it."""
    swap(mp, module, name, wrapper(getattr(module, name)))


def patch_activation(mp: pytest.MonkeyPatch, activation: str, mutate) -> None:
    """Replace ``(s', s'')`` of one entry of the activation table (``mini.activations.TABLE``, which
    the closed form and the heads read at call time) by ``mutate(a, s1, s2)``; ``s`` is kept."""
    from mini import activations

    entry = activations.TABLE[activation]

    def derivatives(xp, a):
        s1, s2 = entry.derivatives(xp, a)
        return mutate(np.asarray(a), np.asarray(s1), np.asarray(s2))

    mp.setitem(activations.TABLE, activation, dataclasses.replace(entry, derivatives=derivatives))


def patch_objective(mp: pytest.MonkeyPatch, factory: str, fn_builder) -> None:
    """Replace the loss function of the objectives built by ``mini.losses.<factory>``."""
    import mini.losses as L

    original = getattr(L, factory)

    def build(*args, **kwargs):
        obj = original(*args, **kwargs)
        return L.Objective(obj.name, fn_builder(*args, **kwargs), obj.n_views, hessian_psd=obj.hessian_psd,
                           block_diagonal=obj.block_diagonal)

    swap(mp, L, factory, build)


# ------------------------------------------------------------------------------------------------
# Check modules: re-imported for every mutant, except the registry the patches reach
# ------------------------------------------------------------------------------------------------

KEPT_CHECK_MODULES = ("premises",)  # the premise registry: patched by mutants, so kept across re-imports


def forget_checks(keep: tuple[str, ...] = KEPT_CHECK_MODULES) -> None:
    """Drop the imported check modules (imported by their bare names: ``test_x``, ``conftest``, ``certify``)
    so the next run imports them afresh and binds whatever ``mini`` holds now (a check module imported under
    one mutant must not keep its functions); the modules in ``keep`` stay, so that a patch can reach them.
    The package's own tools (``theory_checks.mutants`` and its tables) are not check modules."""
    folder = str(ROOT / CHECKS)
    for key, mod in list(sys.modules.items()):
        if (getattr(mod, "__file__", None) or "").startswith(folder) and key not in keep \
                and not key.startswith(f"{CHECKS}."):
            del sys.modules[key]


def premises_module() -> ModuleType:
    """The premise registry as the checks import it (a top-level ``premises``, from the checks' folder)."""
    folder = str(ROOT / CHECKS)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import premises

    return premises


# ------------------------------------------------------------------------------------------------
# Source edits
# ------------------------------------------------------------------------------------------------


class _EditedSource(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``source`` for the module that would be imported from ``path`` (by its bare name)."""

    def __init__(self, path: Path, source: str) -> None:
        self.path, self.source = path, source

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.path.stem:
            return None
        found = importlib.machinery.PathFinder.find_spec(fullname, path)
        if found is None or found.origin is None or Path(found.origin).resolve() != self.path:
            return None
        return importlib.util.spec_from_file_location(fullname, self.path, loader=self)

    def create_module(self, spec):
        return None

    def exec_module(self, module: ModuleType) -> None:
        exec(compile(self.source, str(self.path), "exec"), module.__dict__)


def edit(path: str, *changes: tuple[str, str]) -> Callable[[pytest.MonkeyPatch], None]:
    """A mistake in the check-side file ``path`` (relative to the repository): each ``(old, new)`` replaces
    ``old``, which must occur exactly once (``ValueError`` otherwise: the mutant no longer hits its target)."""
    target = (ROOT / path).resolve()

    def apply(mp: pytest.MonkeyPatch) -> None:
        source = target.read_text()
        for old, new in changes:
            if source.count(old) != 1:
                raise ValueError(f"mutant edit of {path}: {old!r} occurs {source.count(old)} times, not once")
            source = source.replace(old, new)
        mp.setattr(sys, "meta_path", [_EditedSource(target, source), *sys.meta_path])
        mp.delitem(sys.modules, target.stem, raising=False)  # a kept module too: re-imported, edited

    apply.plain_asserts = True  # type: ignore[attr-defined]  (pytest must import the file through the hook)
    return apply
