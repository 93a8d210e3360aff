"""One ``scale.run`` in this process, its time split into parts: run as a script by ``bench.bench_main_job``.

    python bench/_main_job_split.py OUT.json -- SCALE_RUN_ARGS...

Run with ``PYTHONPATH`` (and the working directory) set to the checkout to measure, which may be another
revision of this project: the parts are found by the names either layout uses (``scale.engine.*`` or the
former flat ``scale.*``) and timed by wrapping them, nothing else changed:

    import        ``import scale.run`` (torch and everything the command loads at start)
    data          ``load_dataset`` as ``scale.run`` calls it
    augmentation  the training process's time inside the augmentation object's ``views``/``prefetch``
                  (batched: the whole augmentation; per-image workers: waiting for and collecting a batch)
    training      ``Trainer.fit`` less the augmentation above (steps, hooks, per-epoch checkpoints)
    end of run    the linear probe and the end-of-run geometry and rotation probes
    other         the rest of ``main`` (arguments, trainer construction, summary, report, plots)

Writes a JSON object with these seconds, the exit code, the final loss and the probe accuracies.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from pathlib import Path

TIMES: dict[str, float] = {"import": 0.0, "data": 0.0, "augmentation": 0.0, "fit": 0.0, "end": 0.0}
END_OF_RUN = ("class_probe", "features", "linear_probe_accuracy", "final_measurement")


def _timed(key: str, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMES[key] += time.perf_counter() - t0

    return wrapper


def _module(root: Path, *names: str):
    """The first of ``names`` already imported from the checkout ``root`` (an editable install of another
    checkout would otherwise answer for a module this one does not have)."""
    for name in names:
        module = sys.modules.get(name)
        if module is not None and Path(module.__file__).resolve().is_relative_to(root):
            return module
    raise ImportError(f"none of {names} was imported from {root}")


def main() -> int:
    out, argv = Path(sys.argv[1]), sys.argv[sys.argv.index("--") + 1:]
    t0 = time.perf_counter()
    import scale.run as run

    TIMES["import"] = time.perf_counter() - t0
    run.load_dataset = _timed("data", run.load_dataset)
    for name in END_OF_RUN:
        if hasattr(run, name):
            setattr(run, name, _timed("end", getattr(run, name)))
    run.Trainer.fit = _timed("fit", run.Trainer.fit)
    augment = _module(Path(run.__file__).resolve().parent, "scale.engine.augment", "scale.augment")
    for cls in (getattr(augment, name) for name in ("GPUAugment", "WorkerAugment") if hasattr(augment, name)):
        for method in ("views", "prefetch"):
            if hasattr(cls, method):
                setattr(cls, method, _timed("augmentation", getattr(cls, method)))
    t1 = time.perf_counter()
    code = run.main(argv)
    main_s = time.perf_counter() - t1
    run_dir = Path(argv[argv.index("--out") + 1]) / argv[argv.index("--run-name") + 1]
    history = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    summary = json.loads((run_dir / "summary.json").read_text())
    config = json.loads((run_dir / "config.json").read_text())
    probe = summary.get("class_probe") or {}
    acc = probe.get("accuracy") or {}
    if not acc and "linear_probe" in summary:  # the former summary layout: fractions
        acc = {k: 100 * summary["linear_probe"][k] for k in ("z", "h")}
    result = {
        "exit": code, "main": main_s, **TIMES,
        "training": TIMES["fit"] - TIMES["augmentation"],
        "other": main_s - TIMES["data"] - TIMES["fit"] - TIMES["end"],
        "loss": history[-1]["loss"] if history else None, "probe_z": acc.get("z"), "probe_h": acc.get("h"),
        "threads": config.get("threads"), "augment_path": config.get("augment_path", "batched (only path)"),
    }
    out.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
