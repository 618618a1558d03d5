"""Sparse files in a run's archive (orchestrator/store/sparse.py): a big file that is mostly holes goes into
the tar as a GNU sparse member, holes left out, and comes back byte for byte."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

from orchestrator.store.sparse import SPARSE_MIN, add_sparse, is_sparse


def sparse_file(path: Path, size: int, data: dict[int, bytes]) -> Path:
    """A file of `size` bytes that holds only `data` (offset -> bytes); the rest is holes."""
    with open(path, "wb") as f:
        f.truncate(size)
        for offset, chunk in data.items():
            f.seek(offset)
            f.write(chunk)
    return path


def test_a_big_file_of_holes_is_sparse_and_a_small_or_full_one_is_not(tmp_path: Path) -> None:
    assert is_sparse(os.lstat(sparse_file(tmp_path / "disk.img", 64 * SPARSE_MIN, {0: b"boot"})))
    assert not is_sparse(os.lstat(sparse_file(tmp_path / "small", SPARSE_MIN // 2, {0: b"x"})))  # under the minimum
    full = tmp_path / "full"
    full.write_bytes(os.urandom(2 * SPARSE_MIN))
    assert not is_sparse(os.lstat(full))


def test_the_archive_holds_the_data_not_the_holes_and_gives_the_file_back_whole(tmp_path: Path) -> None:
    size = 256 * SPARSE_MIN  # 256 MiB apparent, a few bytes of data
    data = {0: b"head", 100 * SPARSE_MIN: b"middle", size - 4: b"tail"}
    original = sparse_file(tmp_path / "db.sqlite", size, data)
    archive = tmp_path / "run.tar"
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        with open(original, "rb") as f:
            note = add_sparse(tar, f, os.fstat(f.fileno()), "workspace/db.sqlite")
    assert "written sparse: db.sqlite (256.0 MiB" in note
    assert archive.stat().st_size < 64 * 1024  # the holes are not in the archive

    out = tmp_path / "out"
    with tarfile.open(archive) as tar:
        member = tar.getmembers()[0]
        assert member.name == "workspace/db.sqlite" and member.size == size  # GNU.sparse.name and realsize win
        tar.extractall(out, filter="tar")
    restored = out / "workspace" / "db.sqlite"
    assert restored.stat().st_size == size
    with open(restored, "rb") as f:
        for offset, chunk in data.items():
            f.seek(offset)
            assert f.read(len(chunk)) == chunk
        f.seek(SPARSE_MIN)
        assert f.read(16) == b"\0" * 16


def test_a_file_that_holds_no_data_at_all_still_round_trips(tmp_path: Path) -> None:
    empty = sparse_file(tmp_path / "zeros", 8 * SPARSE_MIN, {})
    archive = tmp_path / "run.tar"
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        with open(empty, "rb") as f:
            add_sparse(tar, f, os.fstat(f.fileno()), "workspace/zeros")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "out", filter="tar")
    assert (tmp_path / "out" / "workspace" / "zeros").stat().st_size == 8 * SPARSE_MIN
