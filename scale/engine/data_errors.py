"""The datasets' one error, ``DataError``: a dataset cannot be found or read, and the message says exactly which
file to put where (missing or corrupt files, an image that cannot be decoded, a folder that cannot be listed);
``unreadable`` is its one line for a file or folder the system refuses to read. Its own module so that the image
reader (``scale.engine.images``), CIFAR's reader (``scale.engine.cifar``), the folders' loader
(``scale.engine.folders``) and the loader by name (``scale.engine.data``) raise the same error without importing
one another.
"""

from __future__ import annotations

import errno
from pathlib import Path


class DataError(RuntimeError):
    """A dataset cannot be found or read; the message says what to do."""


def unreadable(exc: OSError, where: str | Path) -> str:
    """One line for a data file or folder that cannot be read."""
    hint = "; check its permissions" if exc.errno in (errno.EACCES, errno.EPERM) else ""
    return f"cannot read {exc.filename or where} ({exc.strerror or exc}){hint}"
