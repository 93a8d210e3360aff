"""The run directory: a safe name, one writer at a time, no mixing of two runs, no stale temporaries.

Every create, replace and delete here goes through ``scale.engine.disk`` (the one owner of the disk).

    check_run_name(name)        a single path component: no separators, no '.'/'..', nothing hidden
    RunLock(run_dir)            ``.lock`` held with ``fcntl.flock`` while a run writes there; the file
                                names the holder (pid, host, start time) and is removed when the run
                                ends. It is opened with ``O_NOFOLLOW | O_NONBLOCK`` and must be a plain
                                file of one link (``disk.open_lock``): a symlink, hard link or FIFO named
                                ``.lock`` is refused (exit 2) and nothing is read from or written through
                                it; so is a ``.lock`` holding anything but a holder record (a user's
                                file), and a run directory that is itself a symlink. The kernel
                                drops the flock when its process dies, so a lock left by a killed run is
                                taken over (with a note naming the dead holder); a live holder makes the
                                second run fail at once, naming it. No forked child keeps the lock
                                (``scale.engine.workers.private_descriptor``), and a lock that cannot be
                                written (a full disk) leaves no directory behind
    run_files(run_dir)          what the directory holds of a run: ``RUN_OUTPUTS`` (every file the project
                                writes there, as plain files), the folders of ``RUN_FOLDERS`` with their
                                files, and the entries a run never writes (``foreign``: links included)
    is_run(run_dir)             a folder is a run only if its config.json parses as a run's config or its
                                checkpoint.pt loads as a run's checkpoint; names alone do not make one
    prepare_new(run_dir, ...)   a new run takes an empty directory; it refuses one that holds a run
                                unless ``overwrite``, and always refuses one that holds anything a run does
                                not write, naming it: nothing of yours is deleted. It returns the
                                ``disk.Removal`` of the old run's files, applied by the caller only after
                                every other check of the new run has passed (``--overwrite`` with a bad
                                flag keeps the old run)
    clean_temporaries(run_dir)  removes the atomic writer's temporaries of the run's own outputs
                                (``.NAME.XXXXXXXX.tmp`` beside ``NAME``, in the run directory and its
                                ``RUN_FOLDERS`` only) that a killed write left behind (safe only while
                                holding the lock: no live writer can own them)
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from scale.engine import disk
from scale.engine.workers import private_descriptor, release_descriptor
from scale.runs import validate
from scale.runs.faults import ConfigError, RunError

LOCK_NAME = ".lock"
# Every file the project writes in a run directory, by writer; --overwrite removes these and nothing else.
RUN_OUTPUTS = frozenset({
    "config.json",                                            # scale.run
    "checkpoint.pt", "metrics.jsonl",                         # scale.engine.hooks (Checkpointer, MetricsFile)
    "summary.json", "report.md", "curves.png",                # scale.runs.run_report.write_outputs
    "orbits.npz",                                             # scale.geometry.measure.final_measurement
    "curvature.jsonl", "curvature_summary.json", "curvature.png",  # scale.curvature.tracking.HessianTracker
    "deviations.json",                                        # scale.paper
})
# Folders the project writes in a run directory, and the names of the files it puts there.
RUN_FOLDERS: dict[str, re.Pattern[str]] = {
    "tensorboard": re.compile(r"^events\.out\.tfevents\..+$"),                   # scale.engine.hooks.TensorBoardLog
    "analysis": re.compile(r"^(analysis\.json|report\.md|spectrum\.png|orbits\.png)$"),  # scale.analyze
}


def check_run_name(name: str) -> str:
    """``name`` if it is one plain path component (the run directory stays inside ``--out``)."""
    bad = (not name or name in (".", "..") or "/" in name or "\\" in name or (os.altsep and os.altsep in name)
           or "\0" in name or name.startswith("."))
    if bad:
        raise ConfigError(f"--run-name {name!r} is not a plain folder name: path separators, '..' and leading dots "
                          "are refused (the run directory must stay inside --out); use letters, digits, '-', '_', '.'")
    return name


@dataclass
class RunFiles:
    """A directory's entries sorted by whether a run writes them (``run_files``)."""

    run: list[Path] = field(default_factory=list)  # RUN_OUTPUTS and RUN_FOLDERS holding only their own files
    foreign: list[str] = field(default_factory=list)  # anything else, as paths relative to the directory


def _is_temporary(p: Path, outputs=RUN_OUTPUTS.__contains__) -> bool:
    """A temporary of the atomic writer for one of the run's outputs (``disk.temporary_of``)."""
    return disk.temporary_of(p, outputs) and p.is_file() and not p.is_symlink()


def _plain(p: Path) -> bool:
    """A regular file of one link, not a symlink: the only kind of file a run writes."""
    st = os.lstat(p)
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1


def run_files(run_dir: Path) -> RunFiles:
    """Sort ``run_dir``'s entries (the lock and temporaries of atomic writes belong to no one: left out)."""
    out = RunFiles()
    for p in sorted(run_dir.iterdir()):
        if p.name == LOCK_NAME or _is_temporary(p):
            continue
        if p.name in RUN_OUTPUTS and _plain(p):
            out.run.append(p)
        elif p.name in RUN_FOLDERS and p.is_dir() and not p.is_symlink():
            inside = [q for q in sorted(p.iterdir()) if not _is_temporary(q, RUN_FOLDERS[p.name].match)]
            strangers = [q for q in inside if not (_plain(q) and RUN_FOLDERS[p.name].match(q.name))]
            if strangers:
                out.foreign += [f"{p.name}/{q.name}{'/' if q.is_dir() and not q.is_symlink() else ''}"
                                for q in strangers]
            else:
                out.run.append(p)
        else:
            out.foreign.append(p.name + ("/" if p.is_dir() and not p.is_symlink() else ""))
    return out


def is_run(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a run: its config.json parses as a run's config (``scale.runs.validate``), or
    its checkpoint.pt loads as a run's checkpoint (weights only, memory-mapped)."""

    config, checkpoint = run_dir / "config.json", run_dir / "checkpoint.pt"
    if config.is_file() and not config.is_symlink():
        try:
            validate.config_from_dict(validate.read_config_json(config), str(config))
            return True
        except RunError:
            pass
    if checkpoint.is_file() and not checkpoint.is_symlink():
        try:
            validate.read_checkpoint_config(checkpoint)
            return True
        except RunError:
            pass
    return False


def _names(entries: list[str], limit: int = 6) -> str:
    more = f" and {len(entries) - limit} more" if len(entries) > limit else ""
    return ", ".join(entries[:limit]) + more


class RunLock:
    """An exclusive ``flock`` on ``run_dir/.lock`` (see the module docstring); ``note`` tells of a takeover."""

    def __init__(self, run_dir: str | Path) -> None:
        import fcntl

        self.run_dir = Path(run_dir)
        self.path, self.fd = self.run_dir / LOCK_NAME, -1
        if self.run_dir.is_symlink():  # its files would land wherever the link points
            raise disk.NotOurs(f"{self.run_dir} is a symbolic link; a run writes only into a folder of its own, never "
                               "through a link: give the folder it points to, or another --run-name")
        # the folders this lock creates (run_dir and any missing parents), removed again if left empty
        self.created: list[Path] = []
        try:
            self.created = disk.make_dirs(self.run_dir)
        except OSError:  # a full disk, a read-only or forbidden folder: nothing created stays behind
            self._remove_created()
            raise
        while True:  # a lock file unlinked by its holder's release between our open and our flock: open it again
            try:
                self.fd = disk.open_lock(self.path)
            except (OSError, ConfigError):
                self._remove_created()
                raise
            private_descriptor(self.fd)  # no forked worker keeps the lock after this process dies
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = self._holder()
                self._close()
                raise ConfigError(
                    f"{self.run_dir} is in use by another run ({holder or 'holder unknown'}); wait for it to finish "
                    f"or stop it, or choose another --run-name"
                ) from None
            if self._is_current():
                break
            self._close()
        previous = self._holder()
        if previous is None:  # a file of the user's named .lock: never rewritten, never removed
            self._close()
            self._remove_created()
            raise disk.NotOurs(f"{self.path} is not a lock of this project (it does not hold a run's pid, host and "
                               "start time); nothing was written to it. Move it away, or choose another --run-name")
        self.note = (f"took over the lock of a run that ended without releasing it ({previous})"
                     if previous else None)
        record = {"pid": os.getpid(), "host": socket.gethostname(),
                  "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        try:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, (json.dumps(record) + "\n").encode(), 0)
        except OSError as exc:  # a full disk or quota: leave nothing behind, then fail naming the file
            self.release()
            raise OSError(exc.errno, exc.strerror, str(self.path)) from None

    def _holder(self) -> str | None:
        """The holder the lock file names; "" for an empty one (just created, or its holder was killed before
        writing); ``None`` when it holds anything but a holder record: then it is not a lock of this project."""
        try:
            text = os.pread(self.fd, 4096, 0).decode("utf-8", "replace").strip()
        except OSError:
            return ""
        if not text:
            return ""
        try:
            h = json.loads(text)
            return f"pid {int(h['pid'])} on {h['host']}, started {h['started']}"
        except (ValueError, KeyError, TypeError):
            return None

    def _is_current(self) -> bool:
        """Whether the locked file is still the one at ``path`` (not unlinked by a release meanwhile)."""
        try:
            own, now = os.fstat(self.fd), os.lstat(self.path)
        except FileNotFoundError:
            return False
        return (own.st_dev, own.st_ino) == (now.st_dev, now.st_ino)

    def _close(self) -> None:
        release_descriptor(self.fd)
        os.close(self.fd)
        self.fd = -1

    def release(self) -> None:
        """Remove the lock file while still holding it, then drop the flock: a finished run leaves no
        ``.lock``. A run that opened the old file meanwhile finds it unlinked after its flock and opens the
        path again (``_is_current``), so two runs never hold locks on two files. The folders this lock
        created are removed once empty."""
        import fcntl

        if self.fd < 0:
            return
        try:
            disk.remove_lock(self.path, self.fd)
        except OSError:
            pass
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        self._close()
        self._remove_created()

    def _remove_created(self) -> None:
        """Remove the folders this lock created, innermost first, while they are empty."""
        disk.remove_created(self.created)


def prepare_new(run_dir: Path, overwrite: bool) -> disk.Removal | None:
    """Check a (locked) directory before a new run writes there; with ``overwrite``, the ``disk.Removal`` of the
    previous run's files (checked, not yet applied: ``apply_removal`` once the new run's checks have passed)."""
    found = run_files(run_dir)
    if not found.run and not found.foreign:
        return None
    if found.foreign:  # never deleted, --overwrite or not: the project did not write them
        what = "holds a run and also" if found.run and is_run(run_dir) else "holds"
        raise ConfigError(f"{run_dir} {what} files that no run writes ({_names(found.foreign)}); nothing was deleted. "
                          "Move them out, or choose another --run-name or --out")
    if not is_run(run_dir):
        raise ConfigError(f"{run_dir} holds {_names([p.name for p in found.run])} but no run: its config.json does "
                          "not parse as a run's config and it has no readable checkpoint.pt; nothing was deleted. "
                          "Choose another --run-name or --out")
    if not overwrite:
        if (run_dir / "checkpoint.pt").is_file():
            raise ConfigError(f"{run_dir} already holds a run; continue it with --resume {run_dir}, choose another "
                              "--run-name, or pass --overwrite to delete it and start again")
        raise ConfigError(f"{run_dir} holds a run that stopped before its first checkpoint (nothing to resume); pass "
                          "--overwrite to delete it and start again, or choose another --run-name")
    removal = disk.Removal(files=[p for p in found.run if p.name in RUN_OUTPUTS],
                           folders=[(p, RUN_FOLDERS[p.name]) for p in found.run if p.name in RUN_FOLDERS])
    removal.check()
    return removal


def apply_removal(run_dir: Path, removal: disk.Removal | None) -> str | None:
    """Delete what ``prepare_new`` found of the previous run (still holding the lock); returns the note."""
    if removal is None:
        return None
    removal.apply()
    return f"--overwrite: removed the previous run's {_names(removal.names(), limit=20)} from {run_dir}"


def check_resumable(run_dir: Path) -> None:
    """``--resume run_dir`` needs a run's config.json and checkpoint.pt; ``ConfigError`` says what is missing
    and what to do instead (each advice leads somewhere: a run without a checkpoint is started again)."""
    config, checkpoint = (run_dir / "config.json").is_file(), (run_dir / "checkpoint.pt").is_file()
    if config and checkpoint:
        return
    if not run_dir.is_dir():
        raise ConfigError(f"--resume {run_dir}: no such directory (give the folder of a run, OUT/RUN_NAME)")
    if config:
        raise ConfigError(f"--resume {run_dir}: the run there stopped before its first checkpoint, so there is "
                          f"nothing to resume; start it again with --out {run_dir.parent} --run-name {run_dir.name} "
                          "--overwrite")
    if checkpoint:
        raise ConfigError(f"--resume {run_dir}: checkpoint.pt is there but config.json is missing; restore it, or "
                          f"start again with --out {run_dir.parent} --run-name {run_dir.name} --overwrite")
    raise ConfigError(f"--resume {run_dir}: not a run directory (no config.json, no checkpoint.pt); give the folder of "
                      "a run, OUT/RUN_NAME")


def clean_temporaries(run_dir: Path) -> str | None:
    """Delete the temporaries of the run's own outputs that interrupted atomic writes left in ``run_dir`` and
    its ``RUN_FOLDERS``; returns a note when any were found."""
    folders = {run_dir: RUN_OUTPUTS.__contains__,
               **{run_dir / name: pattern.match for name, pattern in RUN_FOLDERS.items()}}
    found = disk.sweep_temporaries(folders)
    if not found:
        return None
    size = sum(n for _, n in found)
    return f"removed {len(found)} temporary file(s) ({size / 2**20:.1f} MiB) left by interrupted writes in {run_dir}"
