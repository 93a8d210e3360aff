"""The commands' flags: one line for every refused argument, and every number inside the range a command can use.

    OneLineParser        argparse whose error is one line, ``scale.X: error: ...``, and exit 2 (no usage dump)
    number(kind, lo, hi) an argparse ``type``: the text as an int or float in [lo, hi], finite (``nan``, ``inf``,
                         ``1e999`` and ``0`` where 1 is the least are refused, never read as "no limit" or "default")
    bounded(flag, value, lo, hi, kind)
                         the same check on a value already parsed (a recipe's, or one checked with others)
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import Any

MAX_THREADS = 4096  # torch's CPU threads: more than any one machine has cores
MAX_WIDTH = 65_536  # a layer's width
MAX_IMAGE_SIZE = 1024  # ImageNet's models take 224; digits at 1024 px already hold 5.6 GB of uint8 images
SEED_LIMIT = 2**63  # torch.manual_seed takes 0 <= seed < 2**63 (a larger one fails inside torch)
MAX_COUNT = 10**7  # images, steps, epochs, trajectories of one flag: beyond any run, far below an overflow


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad argument as one line naming the command (no usage dump) and exits with code 2."""

    def error(self, message: str):  # type: ignore[override]
        print(f"{self.prog.split()[-1]}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def bounded(flag: str, value: Any, lo: float, hi: float, kind: type = float) -> Any:
    """``value`` as ``kind`` when it is a finite number in [lo, hi] (an integer for ``int``); ``None`` stays ``None``;
    ``ValueError`` with one line naming ``flag`` and the range otherwise."""
    if value is None:
        return None
    what = "an integer" if kind is int else "a finite number"
    ok = (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
          and lo <= value <= hi and (kind is not int or value == int(value)))
    if not ok:
        raise ValueError(f"{flag} must be {what} in [{lo:g}, {hi:g}], got {value!r}".lstrip())
    return kind(value)


def number(kind: type, lo: float, hi: float) -> Callable[[str], Any]:
    """An argparse ``type`` reading the flag's text as ``kind`` in [lo, hi] (``bounded``)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        try:
            return bounded("", value, lo, hi, kind)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse
