"""The one atomic file writer of the project (``scale`` and ``bench`` write through it too).

``atomic_write_bytes(path, data)`` writes ``data`` to a uniquely named temporary file in the same
directory, flushes and fsyncs it, then ``os.replace``s it onto ``path`` (atomic on POSIX): a crash
or a kill leaves either the old file or the new one, never half of one. On any error the temporary
file is removed and the error re-raised. The new file gets the mode a plain ``open(path, "w")``
would give (``0o666`` less the process umask); ``tempfile.mkstemp`` alone would leave ``0o600``.
Temporary names are ``.<name>.<random>.tmp``, so a directory listing can tell them apart.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _umask() -> int:
    # The umask can only be read by setting it; set it back at once (the process is single-writer
    # here, and the value is restored before any file is created).
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file, fsync, ``os.replace``), creating parents."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o666 & ~_umask())
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """``atomic_write_bytes`` of ``text`` in UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))
