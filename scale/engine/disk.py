"""The one owner of the disk: every file the project creates, replaces or deletes goes through here.

The rules (``docs/disk.md`` states them for users, with the tests that hold each one):

1. Never through a symbolic link. A file is replaced by an atomic write (``mini.atomic``: a fresh
   temporary created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` beside it, fsync, ``os.replace``) only where
   nothing stands or a regular file with one link stands: a symlink, hard link, FIFO, device or folder there
   is refused with one line (``NotOurs``, exit 2) and nothing is written. A lock file is opened with
   ``O_NOFOLLOW | O_NONBLOCK`` and must be a regular file with one link.
2. Only names the project wrote are deleted: a ``Removal`` lists the files and folders a caller's writers
   produce, and removes a regular file of one link only; a folder only when every entry in it matches its
   writer's pattern. Temporaries of interrupted writes are removed only where they are a
   project output's own (``.NAME.XXXXXXXX.tmp`` beside ``NAME``, ``temporary_of``). A command writing into a
   folder you name replaces its outputs there only beside its own record (``check_outputs_ours``).
3. Check first, delete after: the callers compute a ``Removal`` (what would go), run every check they can,
   and only then ``Removal.apply()``.
4. Stores of results are append-only: one file per unit written once (``write_once``), a grid plan's other
   files in its own folder; a command of another plan refuses (``scale.e4_study``'s plan check) or keeps to
   its own files; it never rewrites another plan's.
5. No setting from a file authorises a deletion (``scale.runs.config_file`` refuses ``overwrite``).

Readers live in ``scale.engine.read`` (bounded, typed, non-blocking); this module only writes and deletes.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from mini.atomic import UnsafeTarget, atomic_write_bytes, atomic_writer
from mini.atomic import check_replaceable as _check
from mini.atomic import describe_kind as _kind

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)

# The atomic writer's temporaries: ``.NAME.`` + 8 hex digits + ``.tmp``, created beside ``NAME``.
TEMPORARY = re.compile(r"^\.(?P<name>.+)\.[0-9a-f]{8}\.tmp$")
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class NotOurs(UnsafeTarget):
    """A path the project would write, lock or delete holds something it did not write there: refused, exit 2
    (``scale.runs.faults`` turns it into one line)."""

    code = 2


def _ours(st: os.stat_result) -> bool:
    """A regular file with one name: the only kind of file the project writes."""
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def check_replaceable(path: str | Path) -> None:
    """``NotOurs`` unless ``path`` is absent or a regular file with one link (rule 1)."""
    try:
        _check(path)
    except UnsafeTarget as exc:
        raise NotOurs(str(exc)) from None


def make_dirs(path: str | Path) -> list[Path]:
    """Create ``path`` and its missing parents; returns the folders created (outermost first). An existing
    component that is not a folder (or a link to one) raises ``NotADirectoryError`` as ``mkdir`` does."""
    path = Path(path)
    missing = [d for d in (path, *path.parents) if not os.path.lexists(d)][::-1]
    created = []
    for d in missing:
        try:
            d.mkdir()
        except FileExistsError:  # made meanwhile by another process: not ours
            continue
        created.append(d)
    if not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
    return created


def check_folders(top: str | Path, folders: Iterable[str | Path]) -> None:
    """``NotOurs`` where one of ``folders`` (paths relative to ``top``), or a folder between it and ``top``, is a
    symbolic link or something other than a folder: a file written there would land where the link points
    (rule 1). Absent folders are fine (they are created as folders); ``top`` itself may be a link (a user's
    choice of where the output goes). Run before anything is written."""
    for rel in folders:
        d = Path(top)
        for part in Path(rel).parts:
            d = d / part
            st = _lstat(d)
            if st is None:
                break
            if stat.S_ISLNK(st.st_mode):
                raise NotOurs(f"{d} is a symbolic link: the project writes its outputs only into folders of its "
                              "own, never through a link; nothing was written. Move it away, or choose another "
                              "output folder")
            if not stat.S_ISDIR(st.st_mode):
                raise NotOurs(f"{d} is {_kind(st)}, not a folder: the project keeps its outputs there; nothing was "
                              "written. Move it away, or choose another output folder")


def remove_created(folders: Iterable[Path]) -> None:
    """Remove folders this process created (``make_dirs``'s result), innermost first, while they are empty."""
    for d in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        try:
            st = os.lstat(d)
            if stat.S_ISDIR(st.st_mode):
                d.rmdir()
        except OSError:  # not empty, or gone: it and the folders above it stay
            return


@contextlib.contextmanager
def naming(path: str | Path) -> Iterator[None]:
    """An ``OSError`` raised inside without a file name gets ``path``'s: a write that fails on a full disk or above
    ``ulimit -f`` says only "File too large", and the line a command prints would name no file."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno is not None and not isinstance(exc, UnsafeTarget):
            raise OSError(exc.errno, exc.strerror or os.strerror(exc.errno), str(path)) from None
        raise


def write_bytes(path: str | Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically (``mini.atomic``: a fresh ``.NAME.XXXXXXXX.tmp`` beside it created
    with ``O_EXCL | O_NOFOLLOW``, fsync, ``os.replace``): a kill leaves the old file or the new one. Refused
    (``NotOurs``, exit 2) where ``path`` is a symlink, a hard link or not a regular file; parents are created."""
    make_dirs(Path(path).parent)
    try:
        with naming(path):
            atomic_write_bytes(path, data)
    except UnsafeTarget as exc:
        raise NotOurs(str(exc)) from None


@contextlib.contextmanager
def writing(path: str | Path) -> Iterator[BinaryIO]:
    """``write_bytes`` for content written in pieces: a binary file that replaces ``path`` atomically when the
    block ends without an error (``mini.atomic.atomic_writer``); an error in the block leaves ``path`` as it was."""
    make_dirs(Path(path).parent)
    try:
        with naming(path), atomic_writer(path) as fh:
            yield fh
    except UnsafeTarget as exc:
        raise NotOurs(str(exc)) from None


def write_once(path: str | Path, data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless the name exists (anything there, a link included); True if written.
    The store's primitive (append-only stores, rule 4): the data go to a fresh ``O_EXCL | O_NOFOLLOW`` temporary,
    are fsynced and hard-linked to ``path`` (``link`` fails on an existing name, so nothing is ever replaced and
    the file appears whole or not at all); the temporary, ours alone, is removed either way."""
    path = Path(path)
    make_dirs(path.parent)
    with contextlib.ExitStack() as stack:
        while True:  # a fresh name: one already taken (ours or not) is never opened, nor removed
            tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
            try:
                fd = os.open(tmp, _CREATE, 0o644)
                break
            except FileExistsError:
                continue
        stack.callback(tmp.unlink, missing_ok=True)
        with naming(path), os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path, follow_symlinks=False)
        except FileExistsError:
            return False
        return True


def write_text(path: str | Path, text: str) -> None:
    """``write_bytes`` of ``text`` in UTF-8."""
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str | Path, obj: Any) -> None:
    """``write_text`` of ``obj`` as indented JSON with sorted keys (non-JSON values by ``str``)."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def open_lock(path: str | Path) -> int:
    """A read-write descriptor on the lock file ``path``, created if absent, never through a link and never a
    FIFO's endless wait (``O_NOFOLLOW | O_NONBLOCK``); ``NotOurs`` where ``path`` is not a regular file with one
    link (nothing is read from or written to it then)."""
    path = Path(path)
    try:
        fd = os.open(path, _LOCK_FLAGS, 0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            st = _lstat(path)
            raise NotOurs(f"{path} is {_kind(st) if st else 'not a regular file'}, not a lock of this project; "
                          "nothing was written to it or through it. Remove it yourself if it is not yours to keep, "
                          "or choose another run directory") from None
        raise
    st = os.fstat(fd)
    if not (stat.S_ISREG(st.st_mode) and st.st_nlink <= 1):  # 0: unlinked by a releasing holder (caller reopens)
        os.close(fd)
        raise NotOurs(f"{path} is {_kind(st)}, not a lock of this project; nothing was written to it. Remove it "
                      "yourself if it is not yours to keep, or choose another run directory")
    os.set_blocking(fd, True)
    return fd


def remove_lock(path: str | Path, fd: int) -> None:
    """Unlink the lock at ``path`` if it is still the file open on ``fd`` (same device and inode)."""
    st, own = _lstat(Path(path)), os.fstat(fd)
    if st is not None and _ours(st) and (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino):
        Path(path).unlink()


def temporary_of(path: Path, outputs: Callable[[str], bool]) -> bool:
    """Whether ``path`` is a temporary of the atomic writer for an output whose name ``outputs`` accepts."""
    m = TEMPORARY.match(path.name)
    return m is not None and outputs(m["name"])


@dataclass
class Removal:
    """What a command will delete, computed and checked before anything goes (rule 3): plain files the
    project wrote (``files``) and folders of its own files (``folders``, each with the pattern of its
    writer's names)."""

    files: list[Path] = field(default_factory=list)
    folders: list[tuple[Path, re.Pattern[str]]] = field(default_factory=list)

    def names(self) -> list[str]:
        return [p.name for p in self.files] + [d.name + "/" for d, _ in self.folders]

    def check(self) -> None:
        """``NotOurs`` naming the first entry that is not the project's kind of file (rule 1 and 2). A folder may
        hold folders listed before it (removed first, so it is empty of them by then)."""
        for p in self.files:
            check_replaceable(p)
        listed: set[Path] = set()
        for d, pattern in self.folders:
            st = _lstat(d)
            if st is not None and not stat.S_ISDIR(st.st_mode):
                raise NotOurs(f"{d} is {_kind(st)}, not a folder the project wrote; nothing was deleted")
            for q in (d.iterdir() if st is not None else ()):
                qs = os.lstat(q)
                if q in listed and stat.S_ISDIR(qs.st_mode):
                    continue
                if not (_ours(qs) and (pattern.match(q.name) or temporary_of(q, pattern.match))):
                    raise NotOurs(f"{q} was not written by the project ({_kind(qs)}); nothing was deleted")
            listed.add(d)

    def apply(self) -> None:
        """Check again (the folder is locked, but a user may still have moved things), then delete."""
        self.check()
        for p in self.files:
            p.unlink(missing_ok=True)
        for d, _ in self.folders:
            if d.is_dir():
                for q in d.iterdir():
                    q.unlink()
                d.rmdir()


def sweep_temporaries(folders: dict[Path, Callable[[str], bool]]) -> list[tuple[Path, int]]:
    """Remove the atomic writer's temporaries left by a killed write, only directly in each folder and only
    those of an output whose name the folder's predicate accepts (regular files with one link; rule 2).
    Safe only while the caller holds the folder's lock (no live writer owns them). Returns what was removed,
    with each file's size."""
    removed = []
    for folder, outputs in folders.items():
        st = _lstat(folder)
        if st is None or not stat.S_ISDIR(st.st_mode):
            continue
        for p in sorted(folder.iterdir()):
            st = os.lstat(p)
            if temporary_of(p, outputs) and _ours(st):
                p.unlink(missing_ok=True)
                removed.append((p, st.st_size))
    return removed


def append_text(path: str | Path, text: str) -> None:
    """Append ``text`` to the log ``path`` (created if absent) with ``O_APPEND | O_NOFOLLOW | O_NONBLOCK``: never
    through a link, never into a FIFO, a hard link or anything but a plain file (``NotOurs``, rule 1)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     0o666)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            check_replaceable(path)
        raise
    try:
        if not _ours(os.fstat(fd)):
            check_replaceable(path)  # names what stands there
        os.set_blocking(fd, True)
        with naming(path):
            os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


def check_outputs_ours(folder: str | Path, outputs: Iterable[str], record: str,
                       is_record: Callable[[Path], bool] = lambda p: True) -> None:
    """Before a command replaces ``outputs`` in ``folder``: ``NotOurs`` when one of them stands there but the
    command's own ``record`` (a file it writes beside them, which ``is_record`` accepts) does not. Then they are
    a user's files of the same names, and a command never rewrites what it did not write (rule 2)."""
    folder = Path(folder)
    found = [n for n in outputs if os.path.lexists(folder / n)]
    if not found:
        return
    rec = folder / record
    st = _lstat(rec)
    if st is None or not _ours(st) or not is_record(rec):
        raise NotOurs(f"{folder} holds {', '.join(found)} but no {record} this command wrote: they are not its own, "
                      "so nothing was written. Choose another output, or move them away")
