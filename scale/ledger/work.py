r"""A ledger unit's work directory: the checkpoints of its trainings while it runs, so that a unit stopped
mid-way (a job preempted, timed out and requeued, a node lost, a SIGTERM, a rerun after any of them) resumes
from its last checkpoint instead of starting again.

    OUT/work/<plan>--<unit>--<device>-t<threads>--<key>/               E1, E2, E5: the unit's one training
    OUT/work/<plan>--<unit>--<device>-t<threads>--<key>/raw/, normalized/      E3E4: its two trainings

The folder is named by the unit file's key (``scale.unit_store.files.unit_filename``), so a unit of another plan,
another device or thread count, or whose key changed never reads it. Each training is a ``scale.engine.train.Trainer``
with its folder as ``run_dir``: ``checkpoint.pt`` at every epoch end and on a SIGINT/SIGTERM (mid-epoch), holding
the model, optimiser, history and the hooks' states (the ledger's probe records, the drift's last weights), plus
``config.json`` and ``metrics.jsonl``; every write goes through ``scale.engine.disk``. The trainer's resume is exact
(its random stream is reseeded from (seed, step) at every step), so a resumed unit's record equals an
uninterrupted one's at the same device and threads (tests/test_ledger_work.py measures it).

Once the unit file is written, ``remove`` deletes the folder through ``scale.engine.disk.Removal``: only the
files a trainer writes there (and their temporaries); a folder holding anything else is kept and named, never
emptied. A link at the work folder (or at a folder above it up to ``OUT/work``), a checkpoint that is not a
regular file of one name, or one of another configuration, is refused with one line (``StoreError``, exit 2) and
left as it is.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

from scale.engine import disk
from scale.engine.checkpoint import load_checkpoint, unreadable_reason
from scale.ledger import store
from scale.ledger.store import StoreError

TRAININGS = ("raw", "normalized")  # E3E4's two trainings, each in its own sub-folder
# What a trainer writes in its run_dir (scale.engine.train: Checkpointer, MetricsFile, fit's config.json).
FILES = re.compile(r"^(checkpoint\.pt|config\.json|metrics\.jsonl)$")


def work_dir(out: Path, plan: str, name: str, device: str, threads: int, key: str) -> Path:
    """The unit's work folder (not created here)."""
    return Path(out) / "work" / Path(store.unit_filename(plan, name, device, threads, key)).stem


def make(folder: Path) -> Path:
    """Create the work folder (and OUT/work) where missing. A link standing at it or at a folder above it up to
    OUT/work is refused (``StoreError``): the trainer would write through it."""
    chain = [folder, *folder.parents]
    top = next((i for i, d in enumerate(chain) if d.name == "work"), 0)
    for d in chain[: top + 1]:
        if os.path.islink(d):
            raise StoreError(f"{d} is a symbolic link: the ledger keeps its checkpoints in folders of its own; move "
                             "it away")
    disk.make_dirs(folder)
    return folder


def resume(trainer) -> int:
    """Load the trainer's ``checkpoint.pt`` from its run_dir if one is there; the epochs it holds (0 without one).
    The checkpoint must be a regular file of one name and of this trainer's configuration (``StoreError``)."""
    path = trainer.checkpoint_path
    if path is None or not os.path.lexists(path):
        return 0
    st = os.lstat(path)
    if not (stat.S_ISREG(st.st_mode) and st.st_nlink == 1):
        raise StoreError(f"{path} is not a checkpoint the ledger wrote (a link or not a regular file); move it "
                         "away to run the unit from its start")
    try:
        ck = load_checkpoint(path, map_location="cpu")
    except Exception as exc:  # whatever fails in reading it (torch.load, a truncated file): one line
        raise StoreError(f"{path} cannot be resumed from ({unreadable_reason(exc)}); move it away to run the "
                         "unit from its start") from None
    if not isinstance(ck, dict) or ck.get("config") != trainer.cfg.to_dict():
        raise StoreError(f"{path} is a checkpoint of another configuration than this unit's; move it away to run "
                         "the unit from its start")
    trainer.load(path)
    return int(ck["epoch"])


def removal(folder: Path) -> Any:
    """What ``remove`` deletes: the trainer's files in ``folder`` and in its trainings' sub-folders."""
    subs = [(folder / t, FILES) for t in TRAININGS if os.path.lexists(folder / t)]
    return disk.Removal(folders=[*subs, (folder, FILES)])  # sub-folders first: the Removal lists them


def remove(folder: Path) -> str | None:
    """Delete the unit's work folder once its unit file is written; None when removed (or absent), else the one
    line saying why it is kept (it holds something the project did not write there)."""
    if not os.path.lexists(folder):
        return None
    try:
        removal(folder).apply()
    except disk.NotOurs as exc:
        return f"work folder kept: {exc}"
    return None
