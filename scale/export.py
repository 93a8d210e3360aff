"""``python -m scale.export RUN_DIR OUT``: the trained backbone of a run, alone, as a ``state_dict`` file.

    python -m scale.export runs/cifar10-simclr-gelu3-resnet18-s0-... backbone.pt
    python -m scale.export RUN_DIR head.pt --part projector

Load it into your own module of the same architecture with
``module.load_state_dict(torch.load("backbone.pt", weights_only=True))``. Runs trained with the
project's own backbones and heads only (a run trained with your modules: ``scale.runs.load.export_backbone``
in Python, passing the modules). Exit codes: 0 written, 2 bad arguments or an unreadable run (nothing
written).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scale.runs.load import PARTS, RunError, export_backbone


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        print(f"scale.export: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog="python -m scale.export", description="Write a run's trained backbone (or another part) "
                "as a plain state_dict file (torch.load(..., weights_only=True) reads it).")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory of python -m scale.run")
    p.add_argument("out", metavar="OUT", help="the file to write (e.g. backbone.pt)")
    p.add_argument("--part", choices=PARTS, default="backbone", help="default: backbone")
    args = p.parse_args(argv)
    try:
        out = export_backbone(args.run_dir, args.out, part=args.part)
    except RunError as exc:
        print(f"scale.export: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({args.part} of {Path(args.run_dir)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
