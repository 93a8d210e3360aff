"""Checksums of downloaded files, verified before use.

CIFAR archives: MD5 published by their authors (``scale.engine.cifar.ARCHIVES``), checked after every download
and on every read of the archive. E6 checkpoints (``scale.engine.pretrained_models.OFFICIAL_FILES``): their
authors publish no checksum and their file names carry none (unlike torchvision's
``NAME-<sha256 prefix>.pth``), so ``PUBLISHED_SHA256`` holds ``None`` for each until one is published;
a known digest there is passed to torch hub's download (``hash_prefix``) and checked on every use.
Whatever is published, the SHA256 of a downloaded file is recorded beside it (``FILE.sha256``) and the
cached file is checked against that record before every later use, so a truncated, corrupted or
replaced cache file is refused instead of loaded, and so is a cached file without a record when no digest
is published (nothing to check it against: put there by hand, or its record lost); the digest also goes
into the result record.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from scale.engine.checkpoint import atomic_write_text

# scale.engine.pretrained_models.OFFICIAL_FILES: none of the four full checkpoints has a published digest.
PUBLISHED_SHA256: dict[str, str | None] = {
    "dino_vits16": None,
    "dino_resnet50": None,
    "vicreg_resnet50": None,
    "barlow_resnet50": None,
}


class ChecksumError(ValueError):
    """A file's digest differs from the published or recorded one."""


def sha256sum(path: str | Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def record_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def record(path: Path) -> str:
    """Write ``PATH.sha256`` with the file's digest (right after a verified download); returns the digest."""

    digest = sha256sum(path)
    atomic_write_text(record_path(path), f"{digest}  {path.name}\n")
    return digest


def verify(path: Path, published: str | None, url: str) -> str:
    """The file's SHA256 after checking it against ``published`` (a full digest or a prefix) and ``PATH.sha256``."""
    digest = sha256sum(path)
    if published is not None and not digest.startswith(published.lower()):
        raise ChecksumError(f"{path} does not match the published SHA256 ({published}...; this file has {digest}): "
                            f"it is truncated, corrupt or not the official file; delete it and fetch {url} again")
    rec = record_path(path)
    if not rec.is_file():
        if published is None:  # nothing to check it against: refused, never used unverified
            raise ChecksumError(f"{path} has no recorded SHA256 ({rec.name} beside it): it was not downloaded by this "
                                f"project or its record was lost, so it cannot be checked; delete it to fetch {url} "
                                f"again, or record the digest of a copy you trust (sha256sum {path.name} > "
                                f"{rec.name}, in its folder), or pass it with --weights PATH")
        return digest
    expected = rec.read_text(encoding="utf-8", errors="replace").split()[:1]
    if expected[:1] != [digest]:
        raise ChecksumError(f"{path} has SHA256 {digest} but was downloaded with {expected[0] if expected else '?'} "
                            f"(recorded in {rec}): it changed since; delete both files and fetch {url} again")
    return digest
