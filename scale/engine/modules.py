"""Your own modules in a run: ``module:callable`` specs, and the record a run keeps of them.

A part of ``SSLModel`` (the backbone, the head, the predictor) is built from the config by name, or is a
module of your own, given as an ``nn.Module`` or as a spec ``"package.module:callable"``: a function (or
class) importable from your code that returns the module when called without arguments. A spec is
imported only where you pass it (a Python argument, a command-line flag). A spec recorded in a run's
config is named in messages and imported only on your explicit opt-in (``recorded_specs``: the commands'
``--recorded-modules``, ``recorded_modules=True`` in Python), which names each spec it imports: nothing
read from a file runs unless you say so.

The run's config then says ``OWN`` (``"module"``) for that part and ``config.modules[part]`` records what
was used (``module_record``):

    spec        the ``module:callable`` it was built by when given as one, else ``None``
    class       its class, ``package.module.Class`` (``torch.nn.modules.container.Sequential`` for a
                Sequential: the class alone does not rebuild it)
    parameters  its parameter count
    out_dim     the width of its output (``z``'s d for a backbone, ``k`` for a head)
    folder      for a spec, the folder its module was imported from (the one to put on ``PYTHONPATH``)
    batchnorm   whether it holds a BatchNorm layer

A config that names ``OWN`` parts cannot rebuild them: ``missing_modules_message`` says what to pass.
"""

from __future__ import annotations

import importlib
import os
import re
import shlex
import sys
from pathlib import Path
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


# a dotted module path, a colon, a dotted attribute path: the one form a spec takes
SPEC_FORM = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def check_spec(text: str, what: str) -> None:
    """A ``ModuleSpecError`` for a value that is not of the form ``package.module:callable``."""
    if not SPEC_FORM.fullmatch(text):
        raise ModuleSpecError(f"{what} {text!r} is not of the form package.module:callable (a module path, a colon, "
                              "the name of a function or class in it)")


def not_a_name_message(text: str, what: str, names: str | None = None) -> str:
    """The line for a value that is neither a name of the project (``names``, in words; ``None`` where only a
    spec is valid) nor a spec: a dotted path written where the colon belongs (``my_nets.backbone`` for
    ``my_nets:backbone``) is named as such."""
    line = f"{what} {text!r} is " + (f"neither {names} nor module:callable" if names else "not module:callable")
    module, dot, attr = text.rpartition(".")
    if dot and SPEC_FORM.fullmatch(f"{module}:{attr}"):
        line += f"; for your own function write a colon before its name: {module}:{attr}"
    return line


def _not_found_hint(text: str, exc: ModuleNotFoundError, folder: str | None) -> str:
    """Why a spec's module is not found, and the fix: the folder that holds it on ``PYTHONPATH``."""
    cwd = os.getcwd()
    top = (exc.name or text.partition(":")[0]).split(".")[0]
    hint = (f"no module named {exc.name!r} where Python looks (the current folder {cwd} and PYTHONPATH); run the "
            f"command from the folder that holds {top}.py (or the package {top}/), or put that folder on PYTHONPATH")
    if folder:
        hint += f": the run recorded it in {folder}, so PYTHONPATH={shlex.quote(folder)} python -m ..."
    else:
        hint += ": PYTHONPATH=/path/to/that/folder python -m ..."
    return hint


def import_module_spec(text: str, what: str, folder: str | None = None) -> nn.Module:
    """``module:callable`` -> the ``nn.Module`` that the callable returns (called without arguments).
    ``folder``: where the run recorded the module's code, named in the hint when it is not found."""
    check_spec(text, what)
    mod_name, _, attr = text.partition(":")
    try:
        obj: Any = importlib.import_module(mod_name)
    except ModuleNotFoundError as exc:
        if exc.name and mod_name.startswith(exc.name):  # the spec's own module, not one it imports
            raise ModuleSpecError(f"{what} {text!r}: {_not_found_hint(text, exc, folder)}") from None
        raise ModuleSpecError(f"{what} {text!r}: cannot import {mod_name} ({type(exc).__name__}: {exc})") from None
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


def recorded_specs(modules: dict[str, dict[str, Any]] | None, parts: list[str]) -> dict[str, str]:
    """The ``module:callable`` specs a run recorded for ``parts`` (its own modules), to import on your opt-in;
    a ``ModuleSpecError`` names a part that was given as a module object (no spec to import) or whose
    recorded spec is not of the spec's form."""
    out = {}
    for part in parts:
        record = (modules or {}).get(part) or {}
        spec = record.get("spec")
        if not isinstance(spec, str):
            what = describe(record) if record else "not recorded"
            raise ModuleSpecError(f"the run's {part} was given as a module object ({what}): there is no recorded "
                                  "module:callable to import; pass it again")
        check_spec(spec, f"the recorded {part}")
        out[part] = spec
    return out


def import_recorded(modules: dict[str, dict[str, Any]] | None, parts: list[str],
                    log: Any = None) -> dict[str, nn.Module]:
    """Your opt-in: the modules a run recorded for ``parts``, each imported from its recorded spec (which runs
    that module's code); ``log`` names each one as it is imported."""
    out = {}
    for part, spec in recorded_specs(modules, parts).items():
        if log is not None:
            log(f"importing the run's recorded {part} {spec} (its code runs, as you asked with the recorded-modules "
                "opt-in)")
        out[part] = import_module_spec(spec, f"the recorded {part}", (modules or {}).get(part, {}).get("folder"))
    return out


def as_module(value: nn.Module | str | None, what: str) -> tuple[nn.Module | None, str | None]:
    """``(module, spec)`` of a part given as a module, a ``module:callable`` spec, or ``None``."""
    if is_spec(value):
        return import_module_spec(value, what), value
    return (value if isinstance(value, nn.Module) else None), None


def module_record(module: nn.Module, spec: str | None, out_dim: int) -> dict[str, Any]:
    """What a run records of a module of your own (module docstring)."""
    cls = type(module)
    name = spec.partition(":")[0] if spec else None  # a module object's class may live anywhere (torch.nn)
    source = getattr(sys.modules.get(name), "__file__", None) if name else None
    return {"spec": spec, "class": f"{cls.__module__}.{cls.__qualname__}",
            "parameters": sum(p.numel() for p in module.parameters()), "out_dim": int(out_dim),
            "folder": _import_root(source, name) if name else None,
            "batchnorm": any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules())}


def _import_root(source: str | None, module_name: str) -> str | None:
    """The folder to put on ``PYTHONPATH`` to import ``module_name`` from the file ``source`` (``None``
    where unknown)."""
    if not source:
        return None
    path = Path(source).resolve()
    depth = module_name.count(".") + (1 if path.name == "__init__.py" else 0)
    return str(path.parents[depth])


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
    recorded = [modules.get(p, {}).get("spec") for p in missing]
    opt_in = "" if not all(recorded) else (
        f"; or, to import the recorded {', '.join(recorded)} (which runs its code), --recorded-modules "
        "(recorded_modules=True in Python)")
    return (f"this run was trained with your own modules ({parts}): pass them again, {how} in Python (scale.load_run, "
            f"scale.export_backbone; scale.train(..., resume=True) continues training) or {flags} to python -m "
            f"scale.analyze and python -m scale.export{opt_in}")
