"""Files nvrx reads and files other processes read while nvrx writes them: inputs streamed in
bounded blocks; outputs whole or not at all, with the right mode."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from nvrx.files import InputError, file_sha256, read_key_file, read_line_blocks, write_atomic


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


def test_line_blocks_are_whole_lines_and_a_long_line_keeps_only_its_start(tmp_path: Path) -> None:
    path = tmp_path / "job.log"
    path.write_bytes(b"first\n" + b"x" * 5000 + b"\nthird\nlast, no newline")
    blocks = list(read_line_blocks(path, "log", max_line=100, block=64))
    assert all(b.endswith("\n") for b in blocks[:-1])
    lines = "".join(blocks).split("\n")
    assert lines == ["first", "x" * 100, "third", "last, no newline"]


def test_line_blocks_of_a_long_line_split_across_reads_keep_the_line_count(tmp_path: Path) -> None:
    path = tmp_path / "job.log"
    path.write_bytes(b"a" * 50 + b"b" * 300 + b"\n" + b"c" * 7 + b"\n")
    text = "".join(read_line_blocks(path, "log", max_line=64, block=16))
    assert text == "a" * 50 + "b" * 14 + "\n" + "c" * 7 + "\n"


def test_line_blocks_of_a_missing_file_name_it(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"log .*nope\.log: no such file"):
        list(read_line_blocks(tmp_path / "nope.log", "log", max_line=64))


def test_a_key_file_gives_its_stripped_text_and_mode_or_names_itself(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("  sk-secret-0000\n")
    key.chmod(0o600)
    text, mode = read_key_file(key, "API key file")
    assert text == "sk-secret-0000" and stat.S_IMODE(mode) == 0o600
    for content, says in ((b" \n", "is empty"), (b"\xff\xfe", "not UTF-8 text")):
        key.write_bytes(content)
        with pytest.raises(InputError, match=f"API key file .*key: {says}"):
            read_key_file(key, "API key file")


def test_read_tail_gives_the_last_whole_lines_of_a_file_of_any_size(tmp_path: Path) -> None:
    from nvrx.files import read_tail

    log = tmp_path / "big.log"
    with log.open("w") as f:
        for i in range(200_000):
            f.write(f"line {i}\n")
    tail = read_tail(log, "log", 1000)
    assert len(tail) <= 1000 and tail.endswith("line 199999\n")
    assert tail.split("\n", 1)[0].startswith("line ")  # starts at a whole line
    assert read_tail(log, "log", 10**9).startswith("line 0\n")  # smaller than the bound: all


def test_a_files_sha256_is_of_its_bytes_across_blocks_and_a_fifo_is_refused(
    tmp_path: Path,
) -> None:
    data = os.urandom((1 << 20) * 2 + 7)  # more than one block, and not a whole number of them
    (tmp_path / "job.log").write_bytes(data)
    assert file_sha256(tmp_path / "job.log", "job log") == hashlib.sha256(data).hexdigest()
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(InputError, match="job log .*fifo: not a regular file"):
        file_sha256(tmp_path / "fifo", "job log")
