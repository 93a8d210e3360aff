"""``python -m scale.export RUN_DIR OUT``: the trained backbone of a run, alone, as a ``state_dict`` file.

    python -m scale.export runs/cifar10-simclr-gelu3-resnet18-s0-... backbone.pt
    python -m scale.export RUN_DIR head.pt --part projector
    python -m scale.export RUN_DIR backbone.pt --backbone mypkg.nets:backbone     # a run of your own modules
    python -m scale.export RUN_DIR backbone.pt --recorded-modules   # ... importing the specs it recorded

Beside ``OUT`` goes ``OUT.json``, the part's architecture (the project's builder and its arguments, or
the record of your own module): ``scale.load_backbone(OUT)`` rebuilds the part and loads the weights. In
your own code, ``module.load_state_dict(torch.load(OUT, weights_only=True))`` into a module of the same
architecture. A run trained with your own modules (``scale.train``, ``Trainer(backbone=...)``) is read
with them: ``--backbone``/``--head``/``--predictor`` ``module:callable``, an importable function that
returns the module when called without arguments (the run's config names the one it recorded), or
``--recorded-modules``, your opt-in to import the specs the run recorded (their code runs; each is named).
The backbone alone needs only the backbone: a run of your own head exports its backbone without it. Exit
codes: 0 written, 2 bad arguments, an unreadable run, or an ``OUT`` (or ``OUT.json``) that exists and is not an
earlier export (a user's file of that name is never replaced), with one line saying why (nothing written).
"""

from __future__ import annotations

import sys
from pathlib import Path

from scale.engine.flags import OneLineParser
from scale.engine.modules import ModuleSpecError, is_spec, not_a_name_message
from scale.runs.load import PARTS, RunError, architecture_path, export_backbone


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m scale.export", description="Write a run's trained backbone (or another part) "
                "as a plain state_dict file (torch.load(..., weights_only=True) reads it) and its architecture "
                "beside it (OUT.json; scale.load_backbone(OUT) rebuilds the part).")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (python -m scale.run, scale.train, Trainer)")
    p.add_argument("out", metavar="OUT", help="the file to write (e.g. backbone.pt)")
    p.add_argument("--part", choices=PARTS, default="backbone", help="default: backbone")
    for part in ("backbone", "head", "predictor"):
        p.add_argument(f"--{part}", metavar="MODULE:CALLABLE", help=f"a run trained with your own {part}: the "
                       "function that builds it (called without arguments)")
    p.add_argument("--recorded-modules", action="store_true", help="a run trained with your own modules: import "
                   "the module:callable specs its config.json recorded, instead of giving them again (this runs "
                   "their code; each is named as it is imported)")
    args = p.parse_args(argv)
    modules = {k: getattr(args, k) for k in ("backbone", "head", "predictor") if getattr(args, k)}
    try:
        for part, value in modules.items():
            if not is_spec(value):
                raise RunError(not_a_name_message(value, f"--{part}"))
        out = export_backbone(args.run_dir, args.out, part=args.part, recorded_modules=args.recorded_modules,
                              log=print, **modules)
    except (RunError, ModuleSpecError) as exc:
        print(f"scale.export: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({args.part} of {Path(args.run_dir)}) and its architecture {architecture_path(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
