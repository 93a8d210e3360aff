"""The run directory: a safe name, one writer at a time, no mixing of two runs, no stale temporaries.

    check_run_name(name)        a single path component: no separators, no '.'/'..', nothing hidden
    RunLock(run_dir)            ``.lock`` held with ``fcntl.flock`` while a run writes there; the file
                                names the holder (pid, host, start time) and is removed when the run
                                ends. The kernel drops the flock when its process dies, so a lock left
                                by a killed run is taken over (with a note naming the dead holder); a
                                live holder makes the second run fail at once, naming it
    prepare_new(run_dir, ...)   a new run refuses a directory that already holds a run unless
                                ``overwrite`` (then the old run's files are removed first, so the
                                directory never holds files of two runs); a non-empty folder that is
                                not a run directory is always refused
    clean_temporaries(run_dir)  removes ``.NAME.XXXX.tmp`` files that a killed atomic write left behind
                                (safe only while holding the lock: no live writer can own them)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import time
from pathlib import Path

from scale.runs.faults import ConfigError

LOCK_NAME = ".lock"
RUN_FILES = ("config.json", "checkpoint.pt", "metrics.jsonl", "summary.json")  # any of these: a run lives here
# scale.engine.checkpoint's atomic writer: tempfile.mkstemp(prefix=".NAME.", suffix=".tmp")
TEMPORARY = re.compile(r"^\..+\.[A-Za-z0-9_]{6,}\.tmp$")


def check_run_name(name: str) -> str:
    """``name`` if it is one plain path component (the run directory stays inside ``--out``)."""
    bad = (not name or name in (".", "..") or "/" in name or "\\" in name or (os.altsep and os.altsep in name)
           or "\0" in name or name.startswith("."))
    if bad:
        raise ConfigError(f"--run-name {name!r} is not a plain folder name: path separators, '..' and leading dots "
                          "are refused (the run directory must stay inside --out); use letters, digits, '-', '_', '.'")
    return name


def is_run_directory(path: Path) -> bool:
    return any((path / f).exists() for f in RUN_FILES)


class RunLock:
    """An exclusive ``flock`` on ``run_dir/.lock`` (see the module docstring); ``note`` tells of a takeover."""

    def __init__(self, run_dir: str | Path) -> None:
        import fcntl

        self.run_dir = Path(run_dir)
        self.created_dir = not self.run_dir.exists()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / LOCK_NAME
        while True:  # a lock file unlinked by its holder's release between our open and our flock: open it again
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = self._holder()
                os.close(self.fd)
                raise ConfigError(
                    f"{self.run_dir} is in use by another run ({holder or 'holder unknown'}); wait for it to finish "
                    f"or stop it, or choose another --run-name"
                ) from None
            if self._is_current():
                break
            os.close(self.fd)
        previous = self._holder()
        self.note = (f"took over the lock of a run that ended without releasing it ({previous})"
                     if previous else None)
        record = {"pid": os.getpid(), "host": socket.gethostname(),
                  "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, (json.dumps(record) + "\n").encode(), 0)

    def _holder(self) -> str:
        try:
            text = os.pread(self.fd, 4096, 0).decode("utf-8", "replace").strip()
        except OSError:
            return ""
        if not text:
            return ""
        try:
            h = json.loads(text)
            return f"pid {h['pid']} on {h['host']}, started {h['started']}"
        except (ValueError, KeyError, TypeError):
            return f"lock file says {text[:80]!r}"

    def _is_current(self) -> bool:
        """Whether the locked file is still the one at ``path`` (not unlinked by a release meanwhile)."""
        try:
            return os.fstat(self.fd).st_ino == os.stat(self.path).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        """Remove the lock file while still holding it, then drop the flock: a finished run leaves no
        ``.lock``. A run that opened the old file meanwhile finds it unlinked after its flock and opens the
        path again (``_is_current``), so two runs never hold locks on two files. A directory this run
        created and left empty is removed."""
        import fcntl

        if self.fd < 0:
            return
        try:
            if self._is_current():
                self.path.unlink()
        except OSError:
            pass
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = -1
        if self.created_dir:
            try:
                if not any(self.run_dir.iterdir()):
                    self.run_dir.rmdir()
            except OSError:
                pass


def prepare_new(run_dir: Path, overwrite: bool) -> str | None:
    """Check a (locked) directory before a new run writes there; returns a note when old files were removed."""
    entries = [p for p in run_dir.iterdir() if p.name != LOCK_NAME and not TEMPORARY.match(p.name)]
    if not entries:
        return None
    if not is_run_directory(run_dir):
        raise ConfigError(f"{run_dir} exists, is not empty and holds no run (no config.json or checkpoint.pt); "
                          "choose another --run-name or --out")
    if not overwrite:
        raise ConfigError(f"{run_dir} already holds a run; continue it with --resume {run_dir}, choose another "
                          "--run-name, or pass --overwrite to delete it and start again")
    for p in entries:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
    return f"--overwrite: removed the previous run's {len(entries)} files and folders from {run_dir}"


def clean_temporaries(run_dir: Path) -> str | None:
    """Delete temporaries of interrupted atomic writes under ``run_dir``; returns a note when any were found."""
    found = [p for p in run_dir.rglob(".*.tmp") if p.is_file() and TEMPORARY.match(p.name)]
    if not found:
        return None
    size = sum(p.stat().st_size for p in found)
    for p in found:
        p.unlink(missing_ok=True)
    return f"removed {len(found)} temporary file(s) ({size / 2**20:.1f} MiB) left by interrupted writes in {run_dir}"
