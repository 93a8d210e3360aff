"""Your own modules in a run: ``module:callable`` specs, and the record a run keeps of them.

A part of ``SSLModel`` (the backbone, the head, the predictor) is built from the config by name, or is a
module of your own, given as an ``nn.Module`` or as a spec ``"package.module:callable"``: a function (or
class) importable from your code that returns the module when called without arguments. A spec is
imported only where you pass it (a Python argument, a command-line flag); a spec recorded in a run's
config is named in messages and never imported, since nothing read from a file is executed.

The run's config then says ``OWN`` (``"module"``) for that part and ``config.modules[part]`` records what
was used (``module_record``):

    spec        the ``module:callable`` it was built by when given as one, else ``None``
    class       its class, ``package.module.Class`` (``torch.nn.modules.container.Sequential`` for a
                Sequential: the class alone does not rebuild it)
    parameters  its parameter count
    out_dim     the width of its output (``z``'s d for a backbone, ``k`` for a head)

A config that names ``OWN`` parts cannot rebuild them: ``missing_modules_message`` says what to pass.
"""

from __future__ import annotations

import importlib
from typing import Any

from torch import nn

OWN = "module"  # the config's value for a part that is a module of your own
PARTS = ("backbone", "head", "predictor")
FLAGS = {"backbone": "--backbone", "head": "--head", "predictor": "--predictor"}


class ModuleSpecError(ValueError):
    """A ``module:callable`` spec that cannot give a module, or a run's own modules not given again."""


def is_spec(value: Any) -> bool:
    """Whether ``value`` is a ``module:callable`` spec (head grammar specs and project names have no colon)."""
    return isinstance(value, str) and ":" in value


def import_module_spec(text: str, what: str) -> nn.Module:
    """``module:callable`` -> the ``nn.Module`` that the callable returns (called without arguments)."""
    mod_name, _, attr = text.partition(":")
    if not mod_name or not attr:
        raise ModuleSpecError(f"{what} {text!r}: expected a name of the project or module:callable")
    try:
        obj: Any = importlib.import_module(mod_name)
    except Exception as exc:
        raise ModuleSpecError(f"{what} {text!r}: cannot import {mod_name} ({type(exc).__name__}: {exc})") from None
    try:
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        raise ModuleSpecError(f"{what} {text!r}: {mod_name} has no attribute {attr!r}") from None
    try:
        module = obj()
    except Exception as exc:
        raise ModuleSpecError(f"{what} {text!r}: calling it failed ({type(exc).__name__}: {exc})") from None
    if not isinstance(module, nn.Module):
        raise ModuleSpecError(f"{what} {text!r} returned {type(module).__name__}, not a torch.nn.Module")
    return module


def as_module(value: nn.Module | str | None, what: str) -> tuple[nn.Module | None, str | None]:
    """``(module, spec)`` of a part given as a module, a ``module:callable`` spec, or ``None``."""
    if is_spec(value):
        return import_module_spec(value, what), value
    return (value if isinstance(value, nn.Module) else None), None


def module_record(module: nn.Module, spec: str | None, out_dim: int) -> dict[str, Any]:
    """What a run records of a module of your own (module docstring)."""
    cls = type(module)
    return {"spec": spec, "class": f"{cls.__module__}.{cls.__qualname__}",
            "parameters": sum(p.numel() for p in module.parameters()), "out_dim": int(out_dim)}


def describe(record: dict[str, Any]) -> str:
    """``mypkg.nets:backbone (torch.nn...Sequential, 1,234 parameters)``: one recorded part in words."""
    what = f"{record['class']}, {record['parameters']:,} parameters"
    return f"{record['spec']} ({what})" if record.get("spec") else f"a {what}"


def missing_modules_message(modules: dict[str, dict[str, Any]] | None, missing: list[str]) -> str:
    """The one line that says which own modules a run needs and how to pass them."""
    modules = modules or {}
    parts = "; ".join(f"{p}: {describe(modules[p])}" if p in modules else f"{p}: not recorded" for p in missing)
    how = ", ".join(f"{p}=" for p in missing)
    flags = " ".join(f"{FLAGS[p]} " + (modules.get(p, {}).get("spec") or "module:callable") for p in missing)
    return (f"this run was trained with your own modules ({parts}): pass them again, {how} in Python (scale.load_run, "
            f"scale.export_backbone; scale.train(..., resume=True) continues training) or {flags} to python -m "
            "scale.analyze and python -m scale.export")
