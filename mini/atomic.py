"""The one atomic file writer of the project (``scale`` writes through it via ``scale.engine.disk``; ``bench``
and the docs directly).

``atomic_write_bytes(path, data)`` writes ``data`` to a fresh temporary file ``.<name>.<8 hex>.tmp`` in the
same directory (created with ``O_CREAT | O_EXCL | O_NOFOLLOW``: never an existing file, never through a
symbolic link), flushes and fsyncs it, then ``os.replace``s it onto ``path`` (atomic on POSIX): a crash or a
kill leaves either the old file or the new one, never half of one. On any error the temporary file is removed
and the error re-raised. Only a plain file is ever replaced: where ``path`` is a symbolic link, a file with
several hard links, a FIFO, a device or a folder, ``UnsafeTarget`` is raised and nothing is written (replacing
a link would destroy the user's link; writing through one would change its target). The new file gets the
mode a plain ``open(path, "w")`` would give (``0o666`` less the process umask). ``atomic_writer(path)`` is
the same for content written in pieces (a download).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class UnsafeTarget(OSError):
    """The path to be replaced is not a plain file of one link; nothing was written."""


def describe_kind(st: os.stat_result) -> str:
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link"
    if stat.S_ISDIR(st.st_mode):
        return "a folder"
    if stat.S_ISFIFO(st.st_mode):
        return "a FIFO"
    if stat.S_ISREG(st.st_mode):
        return f"a file with {st.st_nlink} hard links"
    return "a device or socket"


def check_replaceable(path: str | os.PathLike) -> None:
    """``UnsafeTarget`` unless ``path`` is absent or a regular file with exactly one link."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not (stat.S_ISREG(st.st_mode) and st.st_nlink == 1):
        raise UnsafeTarget(f"{path} is {describe_kind(st)}; only plain files are replaced, never through a link, so "
                           "nothing was written there. Move it away or choose another output")


def _umask() -> int:
    # The umask can only be read by setting it; set it back at once (the value is restored before any file
    # is created).
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s new content into: a fresh temporary (``O_EXCL | O_NOFOLLOW``) beside
    it, fsynced and ``os.replace``d onto ``path`` when the block ends without an error, removed otherwise."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    check_replaceable(path)
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(tmp, _FLAGS, 0o666 & ~_umask())
            break
        except FileExistsError:  # the name is taken (ours or not): draw another, never reuse one
            continue
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        check_replaceable(path)  # a link planted while the data was written is refused too
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (fresh temporary, fsync, ``os.replace``), creating parents."""
    with atomic_writer(path) as fh:
        fh.write(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """``atomic_write_bytes`` of ``text`` in UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))
