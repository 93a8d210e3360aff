"""The one atomic writer (``mini.atomic``): the umask is respected, errors leave no temporary file
and the previous content intact."""

from __future__ import annotations

import os
import stat

import pytest

from mini import atomic


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(old)


def test_mode_follows_the_umask_like_open(tmp_path, umask_027) -> None:
    path = tmp_path / "sub" / "out.txt"
    atomic.atomic_write_text(path, "hello\n")
    with open(tmp_path / "plain.txt", "w") as fh:  # what a plain open gives under the same umask
        fh.write("x")
    assert path.read_text() == "hello\n"
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode) == 0o640


def test_error_leaves_no_temporary_and_the_old_file(tmp_path, monkeypatch) -> None:
    path = tmp_path / "out.bin"
    atomic.atomic_write_bytes(path, b"old")
    with pytest.raises(TypeError):
        atomic.atomic_write_bytes(path, "not bytes")  # fails inside the write
    monkeypatch.setattr(atomic.os, "replace", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        atomic.atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_scale_and_bench_write_through_it() -> None:
    pytest.importorskip("torch")
    from scale.engine import checkpoint, disk

    assert checkpoint.atomic_write_bytes is disk.write_bytes  # the one owner of the disk
    assert checkpoint.atomic_write_text is disk.write_text
    assert disk.atomic_write_bytes is atomic.atomic_write_bytes  # which writes through the one atomic writer
