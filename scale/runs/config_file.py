"""Recipe files for ``python -m scale.run --config FILE.toml``.

A recipe is a flat TOML table whose keys are ``scale.run``'s flags (``lr = 0.05``, ``head-bn = true``;
dashes or underscores) and, optionally, ``dataset``. Its values become the parser's defaults, so a flag
given on the command line overrides the file, and the file overrides the method's and dataset's
defaults. The resolved config is saved with the run as always (config.json); the file's path is in
summary.json's command line. Read with the standard library's ``tomllib`` (``tomli`` on Python 3.10);
nothing is executed.

A key that is not a flag, a setting written twice (``head_width`` and ``head-width``), a value of the wrong
type, or a value outside a flag's choices raises ``ConfigFileError`` with one line naming the key and the
valid choices (``scale.run`` exits 2); so does ``overwrite`` (no setting from a file authorises a deletion:
``--overwrite`` is given on the command line or not at all), and a path that is not a regular file (a FIFO
would block the read), a file over ``MAX_BYTES`` or one that is not UTF-8 text.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser from PyPI (a dependency there, see pyproject.toml)
    import tomli as tomllib

NOT_IN_FILES = frozenset({"help", "config", "resume", "overwrite"})  # a recipe describes a new run
# Settings that delete something: only the command line may give them (no file authorises a deletion).
COMMAND_LINE_ONLY = {"overwrite": "--overwrite deletes a previous run; only the command line may authorise a "
                                  "deletion, so give it there"}
MAX_BYTES = 1 << 20  # the recipes in configs/ are under 1 kB


class ConfigFileError(ValueError):
    """A recipe file cannot be used; the message is one line naming the problem."""


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if a.dest not in NOT_IN_FILES}


def _check_value(name: str, action: argparse.Action, value: Any, where: str) -> Any:
    if isinstance(value, (dict, list)):
        raise ConfigFileError(f"{where}: {name} must be a single value, not a {type(value).__name__}")
    flag = action.option_strings[0] if action.option_strings else name
    if isinstance(action, (argparse.BooleanOptionalAction, argparse._StoreTrueAction)):
        if not isinstance(value, bool):
            raise ConfigFileError(f"{where}: {name} = {value!r}: expected true or false")
        return value
    if isinstance(value, bool):
        raise ConfigFileError(f"{where}: {name} = {value!r}: {flag} takes a value, not true/false")
    kind = action.type
    if kind is int and not isinstance(value, int):
        raise ConfigFileError(f"{where}: {name} = {value!r}: expected an integer")
    if kind is float:
        if not isinstance(value, (int, float)):
            raise ConfigFileError(f"{where}: {name} = {value!r}: expected a number")
        value = float(value)
    if kind is None and not isinstance(value, str):
        value = str(value)  # e.g. track-hessian-every = 5
    if callable(kind) and kind not in (int, float) and isinstance(value, str):
        try:
            value = kind(value)
        except (argparse.ArgumentTypeError, ValueError) as exc:
            raise ConfigFileError(f"{where}: {name}: {exc}") from None
    if action.choices is not None and value not in action.choices:
        raise ConfigFileError(f"{where}: {name} = {value!r}; valid: {', '.join(map(str, action.choices))}")
    return value


def read_config_file(path: str | Path, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """The recipe at ``path`` as parser defaults (``dest -> value``), checked against ``parser``'s flags."""
    path = Path(path)
    try:
        if not path.is_file():  # a FIFO would block the read, a device never end it
            raise ConfigFileError(f"--config {path}: " + ("not a regular file" if path.exists() else "no such file"))
        if path.stat().st_size > MAX_BYTES:
            raise ConfigFileError(f"--config {path}: {path.stat().st_size:,} bytes; a recipe is a few lines "
                                  f"(at most {MAX_BYTES:,} bytes)")
        raw = tomllib.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigFileError(f"--config {path}: not a text file (TOML is UTF-8 text)") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigFileError(f"--config {path}: not readable TOML ({exc})") from None
    actions = _actions(parser)
    out: dict[str, Any] = {}
    written: dict[str, str] = {}  # dest -> the key that set it
    for key, value in raw.items():
        dest = key.replace("-", "_")
        if dest in written:
            raise ConfigFileError(f"--config {path}: {written[dest]!r} and {key!r} are the same setting; "
                                  "write it once")
        written[dest] = key
        if isinstance(value, dict):
            raise ConfigFileError(f"--config {path}: [{key}] is a table; a recipe is one flat table, so write its "
                                  "keys at the top of the file")
        if dest in COMMAND_LINE_ONLY:
            raise ConfigFileError(f"--config {path}: {key!r} is refused in a recipe: {COMMAND_LINE_ONLY[dest]}")
        if dest not in actions:
            close = difflib.get_close_matches(dest, actions, n=1)
            hint = f" (did you mean {close[0].replace('_', '-')}?)" if close else ""
            raise ConfigFileError(f"--config {path}: unknown key {key!r}{hint}; valid keys: "
                                  + ", ".join(sorted(d.replace("_", "-") for d in actions)))
        out[dest] = _check_value(key, actions[dest], value, f"--config {path}")
    return out
