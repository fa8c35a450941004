"""Files other processes read while nvrx writes them: whole or not at all, with the right mode."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from nvrx.files import write_atomic


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_replaced_file_is_whole_and_no_temporary_file_is_left(tmp_path: Path) -> None:
    path = tmp_path / "new" / "dir" / "report.md"
    write_atomic(path, "old\n")
    write_atomic(path, "new\n")
    assert path.read_text() == "new\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["report.md"]


def test_the_mode_is_what_the_umask_allows_unless_given(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        write_atomic(tmp_path / "team.txt", "x")
        write_atomic(tmp_path / "private.json", "x", mode=0o600)
        write_atomic(tmp_path / "script.sh", "x", mode=0o755, durable=True)
    finally:
        os.umask(old)
    assert mode(tmp_path / "team.txt") == 0o640
    assert mode(tmp_path / "private.json") == 0o600
    assert mode(tmp_path / "script.sh") == 0o755


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_atomic(path, "recorded\n")
    with pytest.raises(UnicodeEncodeError):
        write_atomic(path, "\udcff")  # a lone surrogate cannot be written as UTF-8
    assert path.read_text() == "recorded\n"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]
