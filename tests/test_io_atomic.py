"""atomic_write_bytes: the whole file or the old one, never a torn write, with normal permissions."""

from __future__ import annotations

import os
import stat

import pytest

from prm_critic._io import atomic_write_bytes


def test_atomic_write_replaces_whole_file_with_umask_permissions(tmp_path):
    p = tmp_path / "sub" / "f.json"
    atomic_write_bytes(p, b"one")
    atomic_write_bytes(p, b"two")
    assert p.read_bytes() == b"two"
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~umask  # not mkstemp's owner-only 0600
    assert [q.name for q in p.parent.iterdir()] == ["f.json"]  # no temp file left behind


def test_atomic_write_failure_keeps_the_old_file(tmp_path):
    p = tmp_path / "f.bin"
    atomic_write_bytes(p, b"old")
    with pytest.raises(TypeError):
        atomic_write_bytes(p, "not bytes")  # fails while writing the temp file
    assert p.read_bytes() == b"old" and [q.name for q in tmp_path.iterdir()] == ["f.bin"]
