"""Reading NVRx cycle-info files: the exact format, the skip rules, dedup/sort, and the cache."""

from __future__ import annotations

import base64
import errno
import importlib.util
import json
import os
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from nvrx.watch import cyclecache, cycles
from nvrx.watch.cyclecache import CycleCache
from nvrx.watch.cycleformat import REQUIRED_KEYS, CycleParseError, parse_cycle_info
from nvrx.watch.cycles import (
    REASON_BAD_NAME,
    REASON_CURRENT,
    REASON_SYMLINK,
    REASON_TMP,
    read_cycles,
)
from nvrx.watch.model import CycleInfo, SkippedFile, to_us

REPO = Path(__file__).resolve().parent.parent
OLD_NS = 1_700_000_000 * 1_000_000_000  # Nov 2023: far outside the cache's racy window
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def payload(
    job: str = "4242",
    attempt: int = 0,
    cycle: int = 0,
    start: str = "2025-02-05T14:30:00.123456Z",
    end: str = "",
    generation: str | int = "0",
    active: str = "node[001-004,007]",
    standby: str = "node[008-009]",
    **extra: Any,
) -> dict[str, Any]:
    """An NVRxCycleInfo as protobuf JSON prints it: every field, generation as a string."""
    data: dict[str, Any] = {
        "job_id": job,
        "attempt_index": attempt,
        "cycle_number": cycle,
        "cycle_start_time": start,
        "cycle_end_time": end,
        "cycle_log_file": f"/w/logs/app_cycle{cycle}.log",
        "active_nodes": active,
        "standby_nodes": standby,
        "generation": generation,
        "active_ranks": "0-4",
    }
    data.update(extra)
    return data


def write(
    directory: Path,
    name: str | None = None,
    *,
    mtime_ns: int | None = OLD_NS,
    **fields: Any,
) -> Path:
    """Write a cycle file the way NVRx does (indent 2), named after its content by default."""
    data = payload(**fields)
    name = name or f"cycle_info.{data['job_id']}.{data['attempt_index']}.{data['cycle_number']}"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(json.dumps(data, indent=2))
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))
    return path


def reasons(skipped: list[SkippedFile]) -> dict[str, str]:
    return {Path(s.path).name: s.reason for s in skipped}


def keys(found: Sequence[CycleInfo]) -> list[str]:
    return [c.key for c in found]


# ----------------------------------------------------------------------------- parsing


def test_parse_exact_open_file_as_nvrx_writes_it() -> None:
    text = json.dumps(payload(), indent=2)
    info = parse_cycle_info(text, "/d/cycle_info.4242.0.0")
    assert info.job_id == "4242"
    assert (info.attempt_index, info.cycle_number) == (0, 0)
    assert info.start == datetime(2025, 2, 5, 14, 30, 0, 123456, tzinfo=UTC)
    assert info.end is None and info.is_open
    assert info.log_file == "/w/logs/app_cycle0.log"
    assert info.active_nodes == ("node001", "node002", "node003", "node004", "node007")
    assert info.standby_nodes == ("node008", "node009")
    assert info.active_ranks == "0-4"
    assert info.write_count == 0
    assert info.path == "/d/cycle_info.4242.0.0"
    assert info.key == "4242.0.0"


@pytest.mark.parametrize("generation", ["3", 3])
def test_parse_closed_file_generation_as_string_or_number(generation: str | int) -> None:
    text = json.dumps(
        payload(end="2025-02-05T15:00:00.000001Z", generation=generation, standby=""), indent=2
    )
    info = parse_cycle_info(text, "p")
    assert info.write_count == 3
    assert info.end == datetime(2025, 2, 5, 15, 0, 0, 1, tzinfo=UTC)
    assert not info.is_open
    assert info.standby_nodes == ()
    assert info.duration(datetime.now(UTC)) == pytest.approx(30 * 60 - 0.123455)


def test_a_cycle_that_ends_before_it_starts_is_refused() -> None:
    text = json.dumps(payload(end="2025-02-05T14:00:00.000000Z", generation="1"))
    with pytest.raises(CycleParseError, match="cycle_end_time .* is before cycle_start_time"):
        parse_cycle_info(text, "p")


def test_parse_64_bit_generation_string() -> None:
    info = parse_cycle_info(json.dumps(payload(generation="18446744073709551615")), "p")
    assert info.write_count == 2**64 - 1


def test_parse_tolerates_numeric_strings_plus_zero_offset_and_no_fraction() -> None:
    text = json.dumps(
        payload(
            job="77_3",
            attempt="2",  # type: ignore[arg-type]
            cycle="5",  # type: ignore[arg-type]
            start="2025-02-05T14:30:00Z",
            end="2025-02-05T14:31:00.5+00:00",
        )
    )
    info = parse_cycle_info(text, "p")
    assert (info.job_id, info.attempt_index, info.cycle_number) == ("77_3", 2, 5)
    assert info.start == datetime(2025, 2, 5, 14, 30, tzinfo=UTC)
    assert info.end == datetime(2025, 2, 5, 14, 31, 0, 500000, tzinfo=UTC)


def test_parse_nanosecond_fraction_is_truncated_to_microseconds() -> None:
    info = parse_cycle_info(json.dumps(payload(start="2025-02-05T14:30:00.123456789Z")), "p")
    assert info.start.microsecond == 123456


def test_parse_ignores_unknown_keys_for_forward_compatibility() -> None:
    info = parse_cycle_info(json.dumps(payload(new_field_from_nvrx_2={"x": 1})), "p")
    assert info.key == "4242.0.0"


@pytest.mark.parametrize("key", REQUIRED_KEYS)
def test_parse_missing_key_is_an_error_naming_the_key(key: str) -> None:
    data = payload()
    del data[key]
    with pytest.raises(CycleParseError, match=f"missing key '{key}'"):
        parse_cycle_info(json.dumps(data), "p")


def test_parse_names_every_missing_key() -> None:
    data = payload()
    del data["generation"], data["active_ranks"]
    with pytest.raises(CycleParseError, match="missing keys 'generation', 'active_ranks'"):
        parse_cycle_info(json.dumps(data), "p")


def test_parse_future_start_is_not_a_parse_error() -> None:
    future = (datetime.now(UTC) + timedelta(days=400)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    info = parse_cycle_info(json.dumps(payload(start=future)), "p")
    assert info.start > datetime.now(UTC) + timedelta(days=399)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"start": "2025-02-05 14:30:00Z"}, "cycle_start_time: not an ISO-8601 UTC time"),
        ({"start": "2025-02-05T14:30:00"}, "cycle_start_time: not an ISO-8601 UTC time"),
        ({"start": "2025-02-05T14:30:00+02:00"}, "cycle_start_time: not an ISO-8601 UTC time"),
        ({"start": "2025-13-05T14:30:00Z"}, "cycle_start_time: invalid date/time"),
        ({"start": ""}, "cycle_start_time: empty"),
        ({"end": "yesterday"}, "cycle_end_time: not an ISO-8601 UTC time"),
        ({"end": None}, "cycle_end_time: expected a string, got null"),
        ({"attempt": -1}, "attempt_index: negative"),
        ({"attempt": True}, "attempt_index: expected a number, got a boolean"),
        ({"cycle": 1.5}, "cycle_number: expected a non-negative integer"),
        ({"cycle": "x"}, "cycle_number: expected a non-negative integer"),
        ({"generation": "-1"}, "generation: expected a non-negative integer"),
        ({"generation": None}, "generation: expected a non-negative integer, got null"),
        ({"job": ""}, "job_id: empty"),
        ({"job": ["1"]}, "job_id: expected a string"),
        ({"active": "node[1-"}, "active_nodes: bad hostlist"),
        ({"standby": "n[3-1]"}, "standby_nodes: bad hostlist"),
        ({"active": 5}, "active_nodes: expected a string"),
    ],
)
def test_parse_rejects_malformed_fields(fields: dict[str, Any], reason: str) -> None:
    with pytest.raises(CycleParseError) as info:
        parse_cycle_info(json.dumps(payload(**fields)), "p")
    assert str(info.value).startswith(reason)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty (being written?)"),
        ("   \n", "empty (being written?)"),
        ('{\n  "job_id": "4242",\n  "attempt_', "incomplete JSON"),
        ('{\n  "job_id": "4242",\n', "incomplete JSON"),
        ('{"job_id": "4242" "x": 1}', "invalid JSON: Expecting ',' delimiter (line 1 column 19)"),
        ("[1, 2]", "not a JSON object (a list)"),
        ('"just a string"', "not a JSON object (a str)"),
        ("[" * 100_000, "invalid JSON"),
    ],
)
def test_parse_tells_incomplete_from_invalid_json(text: str, reason: str) -> None:
    with pytest.raises(CycleParseError) as info:
        parse_cycle_info(text, "p")
    assert str(info.value).startswith(reason)


def test_every_prefix_of_a_real_file_is_incomplete_not_parsed() -> None:
    """A reader that catches a file mid-write (any prefix) must skip it, never half-read it."""
    text = json.dumps(payload(end="2025-02-05T15:00:00.000000Z", generation="1"), indent=2)
    for cut in range(1, len(text) - 1):
        with pytest.raises(CycleParseError, match="incomplete JSON|empty|missing key"):
            parse_cycle_info(text[:cut], "p")


def test_cycle_parse_error_is_a_value_error() -> None:
    assert issubclass(CycleParseError, ValueError)


# ----------------------------------------------------------------------------- the real writer


def load_rehearsal_launcher(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    path = REPO / "examples" / "rehearsal" / "ft_launcher.py"
    spec = importlib.util.spec_from_file_location("rehearsal_ft_launcher_for_cycles", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    # Its hostlist() asks scontrol when present; keep these tests off the local cluster.
    monkeypatch.setattr(module, "shutil", SimpleNamespace(which=lambda _name: None))
    return module


def test_files_written_by_the_rehearsal_launcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launcher = load_rehearsal_launcher(monkeypatch)
    directory = tmp_path / "nvrx" / "900" / "cycle_infos"
    writer = launcher.CycleInfoWriter(directory, "900", 1, str(tmp_path / "app.log"))
    writer.open(0, ["n1", "n2"], ["n3"])
    writer.open(1, ["n1", "n3"], [])  # closes cycle 0 first, as NVRx does

    found, skipped, stats = read_cycles([str(directory)], None)

    assert keys(found) == ["900.1.0", "900.1.1"]
    first, second = found
    assert first.end is not None and first.write_count == 1
    assert second.is_open and second.write_count == 0
    assert first.active_nodes == ("n1", "n2") and first.standby_nodes == ("n3",)
    assert second.active_nodes == ("n1", "n3") and second.standby_nodes == ()
    assert second.log_file == str(tmp_path / "app_cycle1.log")
    assert reasons(skipped) == {"cycle_info.900.current": REASON_CURRENT}
    assert (stats.seen, stats.parsed, stats.skipped) == (3, 2, 1)


# ----------------------------------------------------------------------------- name rules


@pytest.mark.parametrize(
    "name", ["cycle_info.4242.0.0", "cycle_info.4242_3.2.17", "cycle_info.1.10.100"]
)
def test_cycle_file_names_that_are_read(tmp_path: Path, name: str) -> None:
    job, attempt, cycle = name.removeprefix("cycle_info.").rsplit(".", 2)
    write(tmp_path, name, job=job, attempt=int(attempt), cycle=int(cycle))
    found, skipped, _ = read_cycles([str(tmp_path)], None)
    assert keys(found) == [f"{job}.{attempt}.{cycle}"]
    assert skipped == []


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("cycle_info.4242.current", REASON_CURRENT),
        ("cycle_info.4242.current.tmp", REASON_TMP),
        ("cycle_info.4242.0.0.tmp", REASON_TMP),
        ("cycle_info.abc.0.0", REASON_BAD_NAME),
        ("cycle_info.4242.0", REASON_BAD_NAME),
        ("cycle_info.4242.0.0.bak", REASON_BAD_NAME),
        ("cycle_info.4242.x.0", REASON_BAD_NAME),
        ("cycle_info.4242_.0.0", REASON_BAD_NAME),
        ("cycle_info..0.0", REASON_BAD_NAME),
    ],
)
def test_other_names_are_skipped_with_a_reason(tmp_path: Path, name: str, reason: str) -> None:
    write(tmp_path, name)
    found, skipped, stats = read_cycles([str(tmp_path)], None)
    assert found == []
    assert skipped == [SkippedFile(str(tmp_path / name), reason)]
    assert (stats.seen, stats.skipped) == (1, 1)


def test_files_outside_the_glob_are_not_even_seen(tmp_path: Path) -> None:
    write(tmp_path, "notes.txt")
    write(tmp_path, ".cycle_info.4242.0.0.123.tmp")  # a hidden tmp name
    write(tmp_path)
    found, skipped, stats = read_cycles([str(tmp_path)], None)
    assert keys(found) == ["4242.0.0"]
    assert skipped == []
    assert stats.seen == 1


def test_name_and_content_must_agree(tmp_path: Path) -> None:
    write(tmp_path, "cycle_info.4242.0.3", cycle=4)
    write(tmp_path, "cycle_info.4243.0.0", job="4242")
    found, skipped, _ = read_cycles([str(tmp_path)], None)
    assert found == []
    assert reasons(skipped) == {
        "cycle_info.4242.0.3": "name says 4242.0.3 but content says 4242.0.4",
        "cycle_info.4243.0.0": "name says 4243.0.0 but content says 4242.0.0",
    }


def test_leading_zeros_in_the_name_compare_as_numbers(tmp_path: Path) -> None:
    write(tmp_path, "cycle_info.4242.00.01", cycle=1)
    found, _, _ = read_cycles([str(tmp_path)], None)
    assert keys(found) == ["4242.0.1"]


# ----------------------------------------------------------------------------- skip reasons


def test_truncated_and_half_rewritten_files_are_skipped(tmp_path: Path) -> None:
    full = json.dumps(payload(), indent=2)
    (tmp_path / "cycle_info.1.0.0").write_text(full[: len(full) // 2])
    (tmp_path / "cycle_info.1.0.1").write_text("")  # created, not yet written
    (tmp_path / "cycle_info.1.0.2").write_text(full[:-1])  # missing the closing brace
    write(tmp_path)
    found, skipped, stats = read_cycles([str(tmp_path)], None)
    assert keys(found) == ["4242.0.0"]
    got = reasons(skipped)
    assert got["cycle_info.1.0.0"].startswith("incomplete JSON")
    assert got["cycle_info.1.0.1"] == "empty (being written?)"
    assert got["cycle_info.1.0.2"].startswith("incomplete JSON")
    assert (stats.seen, stats.parsed, stats.skipped) == (4, 1, 3)


def test_binary_garbage_and_invalid_utf8_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "cycle_info.1.0.0").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "cycle_info.1.0.1").write_bytes(b'{"job_id": "\xff\xfe"}')
    (tmp_path / "cycle_info.1.0.2").write_bytes(b"\x00" * 512)  # a sparse hole, never written
    found, skipped, _ = read_cycles([str(tmp_path)], None)
    assert found == []
    assert reasons(skipped) == {
        "cycle_info.1.0.0": "binary content (NUL bytes)",
        "cycle_info.1.0.1": "binary content (not UTF-8)",
        "cycle_info.1.0.2": "binary content (NUL bytes)",
    }


def test_symlinks_are_not_followed(tmp_path: Path) -> None:
    elsewhere = write(tmp_path / "elsewhere", job="1")
    directory = tmp_path / "cycle_infos"
    directory.mkdir()
    (directory / "cycle_info.1.0.0").symlink_to(elsewhere)
    (directory / "cycle_info.1.0.1").symlink_to(directory / "cycle_info.1.0.1")  # a loop
    (directory / "cycle_info.1.0.2").symlink_to(tmp_path / "missing")  # dangling
    found, skipped, _ = read_cycles([str(directory)], None)
    assert found == []
    assert reasons(skipped) == {
        "cycle_info.1.0.0": REASON_SYMLINK,
        "cycle_info.1.0.1": REASON_SYMLINK,
        "cycle_info.1.0.2": REASON_SYMLINK,
    }


def test_a_file_swapped_for_a_symlink_after_listing_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, job="1")
    target = write(tmp_path / "elsewhere", job="1")
    real_scandir = os.scandir

    def scandir_then_swap(directory: str) -> Any:
        entries = list(real_scandir(directory))
        for entry in entries:
            entry.is_symlink()  # cache d_type as "regular file"
            entry.stat(follow_symlinks=False)
        path.unlink()
        path.symlink_to(target)
        return _ListedDir(entries)

    monkeypatch.setattr(os, "scandir", scandir_then_swap)
    found, skipped, _ = read_cycles([str(tmp_path)], None)
    monkeypatch.undo()
    assert found == []
    assert reasons(skipped) == {"cycle_info.1.0.0": REASON_SYMLINK}


class _ListedDir:
    """A stand-in for the context manager os.scandir returns."""

    def __init__(self, entries: list[os.DirEntry[str]]) -> None:
        self.entries = entries

    def __enter__(self) -> list[os.DirEntry[str]]:
        return self.entries

    def __exit__(self, *exc: object) -> None:
        return None


def test_a_symlink_loop_in_the_directory_path_does_not_raise(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    found, skipped, stats = read_cycles(
        [str(loop / "cycle_info.*"), str(loop / "*" / "cycle_infos" / "cycle_info.*")], None
    )
    assert found == []
    assert skipped == [
        SkippedFile(str(loop), "symlink loop"),
        SkippedFile(str(loop), "symlink loop"),
    ]
    assert stats.seen == 0


def test_a_huge_file_is_skipped_by_size_without_being_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    huge = tmp_path / "cycle_info.4242.0.1"
    with open(huge, "wb") as handle:
        handle.truncate(50 * 1024 * 1024)  # sparse: instant, no disk used
    small = write(tmp_path)
    real_read = os.read
    read: list[int] = []

    def spy(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        read.append(len(data))
        return data

    monkeypatch.setattr(os, "read", spy)
    found, skipped, _ = read_cycles([str(tmp_path)], None)
    assert keys(found) == ["4242.0.0"]
    assert reasons(skipped) == {
        "cycle_info.4242.0.1": f"too large ({50 * 1024 * 1024} bytes > {1 << 20}); not read"
    }
    assert sum(read) == small.stat().st_size  # the small file, and not a byte of the huge one


def test_a_file_that_grows_past_the_cap_while_read_is_skipped(tmp_path: Path) -> None:
    path = write(tmp_path)
    found, skipped, _ = read_cycles([str(tmp_path)], None, max_bytes=100)
    assert found == []
    assert reasons(skipped)[path.name].startswith(f"too large ({path.stat().st_size} bytes > 100)")


def test_directories_and_fifos_with_cycle_names_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "cycle_info.1.0.0").mkdir()
    os.mkfifo(tmp_path / "cycle_info.1.0.1")  # reading this would block forever
    found, skipped, _ = read_cycles([str(tmp_path)], None)
    assert found == []
    assert reasons(skipped) == {
        "cycle_info.1.0.0": "directory, not a file",
        "cycle_info.1.0.1": "not a regular file",
    }


def test_missing_directories_are_reported_not_raised(tmp_path: Path) -> None:
    plain = tmp_path / "nvrx" / "123" / "cycle_infos"
    globbed = tmp_path / "nope" / "*" / "cycle_infos" / "cycle_info.*"
    found, skipped, stats = read_cycles([str(plain), str(globbed)], None)
    assert found == []
    assert skipped == [
        SkippedFile(str(plain), "directory not found"),
        SkippedFile(str(tmp_path / "nope"), "directory not found"),
    ]
    assert stats == cycles.ReadStats()


def test_patterns_that_match_nothing_say_so(tmp_path: Path) -> None:
    (tmp_path / "nvrx").mkdir()
    (tmp_path / "empty").mkdir()
    dir_glob = str(tmp_path / "nvrx" / "*" / "cycle_infos" / "cycle_info.*")
    found, skipped, _ = read_cycles([dir_glob, str(tmp_path / "empty")], None)
    assert found == []
    assert skipped == [
        SkippedFile(dir_glob, "no directory matches"),
        SkippedFile(str(tmp_path / "empty"), "no files match"),
    ]


def test_a_pattern_that_is_a_file_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "plainfile").write_text("x")
    found, skipped, _ = read_cycles([str(tmp_path / "plainfile")], None)
    assert found == []
    assert skipped == [SkippedFile(str(tmp_path / "plainfile"), "not a directory")]


@pytest.mark.skipif(IS_ROOT, reason="root reads files whatever their mode")
def test_an_unreadable_file_is_skipped(tmp_path: Path) -> None:
    path = write(tmp_path)
    path.chmod(0)
    try:
        found, skipped, _ = read_cycles([str(tmp_path)], None)
    finally:
        path.chmod(0o644)
    assert found == []
    assert reasons(skipped) == {path.name: "unreadable: permission denied"}


def test_an_open_that_is_refused_is_skipped_even_as_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    denied = write(tmp_path, cycle=1)
    write(tmp_path)
    real_open = os.open

    def refuse(path: str, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path) == str(denied):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(os, "open", refuse)
        found, skipped, _ = read_cycles([str(tmp_path)], None)
    assert keys(found) == ["4242.0.0"]
    assert reasons(skipped) == {denied.name: "unreadable: permission denied"}


@pytest.mark.skipif(IS_ROOT, reason="root lists directories whatever their mode")
def test_an_unreadable_directory_is_reported(tmp_path: Path) -> None:
    directory = tmp_path / "cycle_infos"
    write(directory)
    directory.chmod(0)
    try:
        found, skipped, _ = read_cycles([str(directory)], None)
    finally:
        directory.chmod(0o755)
    assert found == []
    assert skipped == [SkippedFile(str(directory), "directory not readable: permission denied")]


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (errno.EIO, "directory not readable: Input/output error"),
        (errno.EACCES, "directory not readable: permission denied"),
        (errno.ESTALE, "directory not readable: Stale file handle"),
    ],
)
def test_a_directory_listing_that_fails_is_reported_even_as_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, reason: str
) -> None:
    write(tmp_path)

    def fail(directory: str) -> Any:
        raise OSError(code, os.strerror(code), directory)

    with monkeypatch.context() as patch:
        patch.setattr(os, "scandir", fail)
        found, skipped, _ = read_cycles([str(tmp_path)], None)
    assert found == []
    assert skipped == [SkippedFile(str(tmp_path), reason)]


def test_a_future_start_time_is_read(tmp_path: Path) -> None:
    future = (datetime.now(UTC) + timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    write(tmp_path, start=future)
    found, skipped, _ = read_cycles([str(tmp_path)], None)
    assert [c.start.strftime("%Y-%m-%dT%H:%M:%S.%fZ") for c in found] == [future]
    assert skipped == []


def test_one_bad_file_does_not_hide_the_others(tmp_path: Path) -> None:
    for cycle in range(5):
        write(tmp_path, cycle=cycle, start=f"2025-02-05T1{cycle}:00:00.000000Z")
    (tmp_path / "cycle_info.4242.0.9").write_bytes(b"\x00garbage")
    found, skipped, stats = read_cycles([str(tmp_path)], None)
    assert keys(found) == [f"4242.0.{c}" for c in range(5)]
    assert len(skipped) == 1
    assert stats.seen == stats.parsed + stats.cached + stats.skipped == 6


# ----------------------------------------------------------------------------- glob, dedup, sort


def test_a_chain_wide_glob_reads_every_generation(tmp_path: Path) -> None:
    for gen, start in (("300", "10"), ("100", "08"), ("200", "09")):
        write(tmp_path / "nvrx" / gen / "cycle_infos", job=gen, start=f"2025-02-05T{start}:00:00Z")
    (tmp_path / "nvrx" / "stray-file").write_text("x")  # a non-directory match of the dir glob
    pattern = str(tmp_path / "nvrx" / "*" / "cycle_infos" / "cycle_info.*")
    found, skipped, _ = read_cycles([pattern], None)
    assert keys(found) == ["100.0.0", "200.0.0", "300.0.0"]
    assert skipped == []


def test_plain_directory_with_trailing_slash_and_file_patterns(tmp_path: Path) -> None:
    write(tmp_path, cycle=0)
    write(tmp_path, cycle=1, start="2025-02-05T15:00:00Z")
    only_one = str(tmp_path / "cycle_info.4242.0.1")
    assert keys(read_cycles([str(tmp_path) + os.sep], None)[0]) == ["4242.0.0", "4242.0.1"]
    assert keys(read_cycles([only_one], None)[0]) == ["4242.0.1"]
    assert keys(read_cycles([str(tmp_path / "cycle_info.4242.0.[1-9]")], None)[0]) == ["4242.0.1"]


def test_overlapping_patterns_read_each_file_once(tmp_path: Path) -> None:
    write(tmp_path)
    (tmp_path.parent / f"{tmp_path.name}-link").symlink_to(tmp_path, target_is_directory=True)
    link = tmp_path.parent / f"{tmp_path.name}-link"
    patterns = [str(tmp_path), str(tmp_path / "cycle_info.*"), str(link)]
    try:
        found, skipped, stats = read_cycles(patterns, None)
    finally:
        link.unlink()
    assert keys(found) == ["4242.0.0"]
    assert skipped == []
    assert stats.seen == 1 and stats.duplicates == 0


def test_duplicate_keys_keep_the_closed_file(tmp_path: Path) -> None:
    closed = write(tmp_path / "a", end="2025-02-05T15:00:00Z", generation="1", mtime_ns=OLD_NS)
    stale = write(tmp_path / "b", end="", mtime_ns=OLD_NS + 10**9)  # newer mtime, but open
    found, skipped, stats = read_cycles([str(tmp_path / "b"), str(tmp_path / "a")], None)
    assert [c.path for c in found] == [str(closed)]
    assert skipped == [SkippedFile(str(stale), f"duplicate of 4242.0.0 (kept {closed})")]
    assert stats.duplicates == 1 and stats.parsed == 2


def test_duplicate_keys_with_equal_ends_keep_the_newest_mtime(tmp_path: Path) -> None:
    older = write(tmp_path / "a", mtime_ns=OLD_NS)
    newer = write(tmp_path / "b", mtime_ns=OLD_NS + 1)
    found, skipped, _ = read_cycles([str(tmp_path / "b"), str(tmp_path / "a")], None)
    assert [c.path for c in found] == [str(newer)]
    assert skipped == [SkippedFile(str(older), f"duplicate of 4242.0.0 (kept {newer})")]


def test_cycles_sort_by_start_then_attempt_then_cycle(tmp_path: Path) -> None:
    same = "2025-02-05T12:00:00Z"
    write(tmp_path, job="10", attempt=0, cycle=10, start="2025-02-05T09:00:00Z")
    write(tmp_path, job="10", attempt=0, cycle=2, start="2025-02-05T11:00:00Z")
    write(tmp_path, job="10", attempt=1, cycle=0, start=same)
    write(tmp_path, job="10", attempt=0, cycle=3, start=same)
    write(tmp_path, job="10", attempt=0, cycle=1, start=same)
    write(tmp_path, job="9", attempt=5, cycle=0, start="2025-02-05T13:00:00Z")
    found, _, _ = read_cycles([str(tmp_path)], None)
    assert keys(found) == ["10.0.10", "10.0.2", "10.0.1", "10.0.3", "10.1.0", "9.5.0"]


# ----------------------------------------------------------------------------- the cache


def make_files(directory: Path, n: int) -> list[Path]:
    return [write(directory, cycle=i, start=f"2025-02-05T10:{i:02d}:00.000000Z") for i in range(n)]


def fail_parse(text: str, path: str) -> Any:
    raise AssertionError(f"{path} was parsed although it is cached")


def test_second_pass_parses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_files(tmp_path / "d", 5)
    cache_path = tmp_path / "state" / "chain" / "cycles-cache.json"
    first, _, stats1 = read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    assert (stats1.parsed, stats1.cached, stats1.cache_written) == (5, 0, True)
    assert cache_path.exists()

    monkeypatch.setattr(cycles, "parse_record", fail_parse)
    monkeypatch.setattr(cycles, "_read_capped", fail_parse)
    second, skipped, stats2 = read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    assert second == first
    assert skipped == []
    assert (stats2.parsed, stats2.cached, stats2.cache_written) == (0, 5, False)


def test_cache_trusts_mtime_size_inode_and_does_not_reopen(tmp_path: Path) -> None:
    """Garbage of the same size written in place with the mtime restored is not noticed: proof
    that an unchanged (mtime, size, inode) is all the second pass looks at."""
    (path,) = make_files(tmp_path / "d", 1)
    cache = CycleCache(tmp_path / "cache.json")
    first, _, _ = read_cycles([str(tmp_path / "d")], cache)
    size, ino = path.stat().st_size, path.stat().st_ino
    with open(path, "r+b") as handle:
        handle.write(b"\x00" * size)
    os.utime(path, ns=(OLD_NS, OLD_NS))
    assert (path.stat().st_size, path.stat().st_ino) == (size, ino)

    second, skipped, stats = read_cycles([str(tmp_path / "d")], CycleCache(tmp_path / "cache.json"))
    assert second == first and skipped == [] and stats.cached == 1


def test_a_touched_file_is_parsed_again(tmp_path: Path) -> None:
    paths = make_files(tmp_path / "d", 3)
    cache = CycleCache(tmp_path / "cache.json")
    read_cycles([str(tmp_path / "d")], cache)
    write(tmp_path / "d", cycle=1, start="2025-02-05T10:01:00.000000Z", end="2025-02-05T11:00:00Z")
    os.utime(paths[1], ns=(OLD_NS + 5, OLD_NS + 5))
    found, _, stats = read_cycles([str(tmp_path / "d")], CycleCache(tmp_path / "cache.json"))
    assert (stats.parsed, stats.cached) == (1, 2)
    assert found[1].end == datetime(2025, 2, 5, 11, tzinfo=UTC)


def test_a_replaced_file_with_same_size_and_mtime_is_parsed_again(tmp_path: Path) -> None:
    """NVRx rewrites by tmp file + rename: the inode changes even when mtime and size do not."""
    (path,) = make_files(tmp_path / "d", 1)
    cache = CycleCache(tmp_path / "cache.json")
    read_cycles([str(tmp_path / "d")], cache)
    text = path.read_text().replace('"/w/logs/app_cycle0.log"', '"/w/logs/app_cycleX.log"')
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    keep_alive = open(path, "rb")  # noqa: SIM115 - hold the old inode so it cannot be reused
    try:
        os.replace(tmp, path)
        os.utime(path, ns=(OLD_NS, OLD_NS))
        found, _, stats = read_cycles([str(tmp_path / "d")], CycleCache(tmp_path / "cache.json"))
    finally:
        keep_alive.close()
    assert stats.parsed == 1
    assert found[0].log_file == "/w/logs/app_cycleX.log"


def test_a_deleted_file_drops_out_of_results_and_cache(tmp_path: Path) -> None:
    paths = make_files(tmp_path / "d", 3)
    cache_path = tmp_path / "cache.json"
    read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    paths[0].unlink()
    cache = CycleCache(cache_path)
    found, _, stats = read_cycles([str(tmp_path / "d")], cache)
    assert keys(found) == ["4242.0.1", "4242.0.2"]
    assert str(paths[0]) not in cache and str(paths[1]) in cache
    assert stats.cache_written
    (record,) = json.loads(cache_path.read_text())["dirs"].values()
    assert unpack(record["cols"])[2] == [1, 2]  # the cycle numbers


def test_a_removed_generation_directory_drops_its_entries(tmp_path: Path) -> None:
    for gen in ("1", "2"):
        write(tmp_path / gen, job=gen)
    pattern = str(tmp_path / "*" / "cycle_info.*")
    cache_path = tmp_path / "cache.json"
    read_cycles([pattern], CycleCache(cache_path))
    (tmp_path / "1" / "cycle_info.1.0.0").unlink()
    (tmp_path / "1").rmdir()
    found, _, _ = read_cycles([pattern], CycleCache(cache_path))
    assert keys(found) == ["2.0.0"]
    assert len(CycleCache(cache_path)) == 1


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\xff not json",
        b'{"schema": "nvrx.watch.cycles-cache/1", "entries": {',
        b"[]",
        b'{"schema": "nvrx.watch.cycles-cache/0", "entries": {}}',
        b'{"schema": "nvrx.watch.cycles-cache/1", "entries": []}',
        b"",
    ],
)
def test_a_corrupt_or_old_cache_starts_empty(tmp_path: Path, content: bytes) -> None:
    make_files(tmp_path / "d", 2)
    cache_path = tmp_path / "cache.json"
    cache_path.write_bytes(content)
    cache = CycleCache(cache_path)
    assert len(cache) == 0 and cache.load_error is not None
    found, _, stats = read_cycles([str(tmp_path / "d")], cache)
    assert len(found) == 2 and stats.parsed == 2
    assert stats.cache_error == cache.load_error
    assert stats.cache_written
    assert len(CycleCache(cache_path)) == 2  # and the next pass has a good cache again


def unpack(text: str) -> Any:
    """A packed part of a cache record: base64 of zlib of JSON."""
    return json.loads(zlib.decompress(base64.b64decode(text)))


def _respell(record: dict[str, Any], part: str, change: Callable[[Any], Any]) -> None:
    """Change a record's columns or rows and keep its crc right: junk the crc cannot catch."""
    value = unpack(record[part])
    change(value)
    record[part] = base64.b64encode(zlib.compress(json.dumps(value).encode())).decode()
    record["crc"] = zlib.crc32(f"{record['cols']}\n{record['rows']}".encode())


def _damage(record: dict[str, Any]) -> None:
    """One character of the stored rows changed: what the crc is for."""
    text = record["rows"]
    record["rows"] = ("B" if text[0] == "A" else "A") + text[1:]


@pytest.mark.parametrize(
    "spoil",
    [
        lambda r: _respell(r, "cols", lambda c: c[3].__setitem__(0, "2025-02-05T10:00:00Z")),
        lambda r: _respell(r, "cols", lambda c: c[1].__setitem__(0, "0")),  # attempt as text
        lambda r: _respell(r, "cols", lambda c: c[4].pop()),  # columns of different lengths
        lambda r: _respell(r, "cols", lambda c: c[0].__setitem__(0, "4243")),  # not its summary
        _damage,
        lambda r: _respell(r, "rows", lambda rows: rows[0].__setitem__(4, "node[1-")),  # hostlist
        lambda r: _respell(r, "rows", lambda rows: rows[0].pop()),  # a short row
        lambda r: r["summary"].__setitem__("count", "1"),
        lambda r: r.clear(),
    ],
)
def test_a_corrupt_cache_record_is_a_miss(
    tmp_path: Path, spoil: Callable[[dict[str, Any]], Any]
) -> None:
    make_files(tmp_path / "d", 1)
    cache_path = tmp_path / "cache.json"
    read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    data = json.loads(cache_path.read_text())
    (record,) = data["dirs"].values()
    spoil(record)
    cache_path.write_text(json.dumps(data))
    found, _, stats = read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    assert (stats.parsed, stats.cached) == (1, 0)
    assert found[0].start == datetime(2025, 2, 5, 10, tzinfo=UTC)
    assert found[0].attempt_index == 0 and found[0].active_nodes[0] == "node001"
    (repaired,) = json.loads(cache_path.read_text())["dirs"].values()
    assert unpack(repaired["cols"])[3] == [to_us(datetime(2025, 2, 5, 10, tzinfo=UTC))]


def test_a_missing_cache_file_is_not_an_error(tmp_path: Path) -> None:
    cache = CycleCache(tmp_path / "never" / "written.json")
    assert len(cache) == 0 and cache.load_error is None


def test_read_only_cache_never_writes(tmp_path: Path) -> None:
    make_files(tmp_path / "d", 2)
    cache_path = tmp_path / "state" / "cache.json"
    found, _, stats = read_cycles([str(tmp_path / "d")], CycleCache(cache_path, read_only=True))
    assert len(found) == 2 and not stats.cache_written
    assert not (tmp_path / "state").exists()


def test_read_only_cache_is_still_used(tmp_path: Path) -> None:
    make_files(tmp_path / "d", 2)
    cache_path = tmp_path / "cache.json"
    read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    before = cache_path.stat().st_mtime_ns
    (tmp_path / "d" / "cycle_info.4242.0.0").unlink()
    _, _, stats = read_cycles([str(tmp_path / "d")], CycleCache(cache_path, read_only=True))
    assert stats.cached == 1 and not stats.cache_written
    assert cache_path.stat().st_mtime_ns == before


def test_cache_is_saved_atomically_and_only_when_changed(tmp_path: Path) -> None:
    make_files(tmp_path / "d", 2)
    cache_path = tmp_path / "cache.json"
    read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache.json", "d"]  # no tmp left
    os.utime(cache_path, ns=(OLD_NS, OLD_NS))
    _, _, stats = read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    assert not stats.cache_written
    assert cache_path.stat().st_mtime_ns == OLD_NS


def test_cache_file_format(tmp_path: Path) -> None:
    (path,) = make_files(tmp_path / "d", 1)
    cache_path = tmp_path / "cache.json"
    read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    data = json.loads(cache_path.read_text())
    st = path.stat()
    start = to_us(datetime(2025, 2, 5, 10, tzinfo=UTC))
    row = [
        st.st_mtime_ns,
        st.st_size,
        st.st_ino,
        "/w/logs/app_cycle0.log",
        "node[001-004,007]",  # active_nodes, compressed as written
        "node[008-009]",
        "0-4",  # active_ranks
        0,  # write_count (the file's generation field)
    ]
    record = data["dirs"][str(tmp_path / "d" / "cycle_info.*")]
    assert unpack(record["cols"]) == [["4242"], [0], [0], [start], [None]]
    assert unpack(record["rows"]) == [row]
    assert data == {
        "schema": "nvrx.watch.cycles-cache/4",
        "dirs": {
            str(tmp_path / "d" / "cycle_info.*"): {
                "listed": None,  # the directory changed just now: not trusted as unchanged yet
                "summary": {
                    "count": 1,
                    "first": [start, 0, 0, "4242"],  # start (us since the epoch), attempt, ...
                    "last": [start, 0, 0, "4242"],
                    "jobs": {"4242": start},  # each job's first start
                    "highs": [["4242", 0, 0]],  # each attempt's highest cycle number
                    "open": 1,
                    "ends": [None, None],  # earliest and latest end: none yet
                },
                "open": [["cycle_info.4242.0.0", st.st_mtime_ns, st.st_size, st.st_ino]],
                "cols": record["cols"],
                "rows": record["rows"],
                "crc": zlib.crc32(f"{record['cols']}\n{record['rows']}".encode()),
            }
        },
    }
    assert len(cyclecache.CACHE_FIELDS) == len(cyclecache.COLUMNS) + len(row) - 3


def test_a_cache_that_cannot_be_saved_does_not_fail_the_pass(tmp_path: Path) -> None:
    make_files(tmp_path / "d", 1)
    (tmp_path / "blocker").write_text("a file where the state dir should be")
    cache = CycleCache(tmp_path / "blocker" / "cache.json")
    found, _, stats = read_cycles([str(tmp_path / "d")], cache)
    assert len(found) == 1
    assert stats.cache_error is not None and stats.cache_error.startswith("cache not saved")
    assert not stats.cache_written


def test_a_just_written_file_is_not_cached_until_it_settles(tmp_path: Path) -> None:
    write(tmp_path / "d", mtime_ns=None)  # mtime = now: inside the racy window
    cache_path = tmp_path / "cache.json"
    read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    _, _, stats = read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    assert (stats.parsed, stats.cached) == (1, 0)
    _, _, stats = read_cycles([str(tmp_path / "d")], CycleCache(cache_path, racy_seconds=0))
    _, _, stats = read_cycles([str(tmp_path / "d")], CycleCache(cache_path, racy_seconds=0))
    assert (stats.parsed, stats.cached) == (0, 1)


def test_skipped_files_are_never_cached(tmp_path: Path) -> None:
    bad = tmp_path / "d" / "cycle_info.1.0.0"
    bad.parent.mkdir()
    bad.write_text("{")
    os.utime(bad, ns=(OLD_NS, OLD_NS))
    cache_path = tmp_path / "cache.json"
    for _ in range(2):
        _, skipped, stats = read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
        assert stats.skipped == 1 and len(skipped) == 1
    assert str(bad) not in CycleCache(cache_path)


def test_stats_count_every_outcome(tmp_path: Path) -> None:
    make_files(tmp_path / "d", 3)
    write(tmp_path / "d", "cycle_info.4242.current")
    cache_path = tmp_path / "cache.json"
    read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    write(tmp_path / "d", cycle=7, start="2025-02-05T11:00:00Z")
    _, _, stats = read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    assert (stats.seen, stats.parsed, stats.cached, stats.skipped) == (5, 1, 3, 1)


def test_relative_patterns_are_read_as_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "d")
    monkeypatch.chdir(tmp_path)
    found, _, _ = read_cycles(["d"], None)
    assert [c.path for c in found] == [str(tmp_path / "d" / "cycle_info.4242.0.0")]


def test_skips_are_reported_in_a_stable_order(tmp_path: Path) -> None:
    names = [f"cycle_info.1.0.{i}" for i in range(20)]
    for name in names:
        (tmp_path / name).write_text("{")
    _, skipped, _ = read_cycles([str(tmp_path)], None)
    assert [Path(s.path).name for s in skipped] == sorted(names)


def test_a_file_that_grows_while_being_read_is_not_half_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path)
    real_fstat = os.fstat

    def stale_fstat(fd: int) -> os.stat_result:  # the size before the writer appended
        fields = list(real_fstat(fd))
        fields[6] = 10  # st_size
        return os.stat_result(fields)

    with monkeypatch.context() as patch:
        patch.setattr(os, "fstat", stale_fstat)
        with pytest.raises(cycles._Skip, match=r"too large \(grew past 100 bytes"):
            cycles._read_capped(str(path), 100)
    data, _ = cycles._read_capped(str(path), 1 << 20)
    assert data == path.read_bytes()


def backdate(path: Path, seconds: int = 3600) -> None:
    old = time.time_ns() - seconds * 1_000_000_000
    os.utime(path, ns=(old, old))


def aged_files(directory: Path, n: int, *, closed: bool = False) -> list[Path]:
    """`n` cycle files in `directory`, files and directory old enough for the listing cache;
    `closed` cycles are trusted from the cache without even a stat."""
    if closed:
        files = [
            write(directory, cycle=i, start=f"2025-02-05T10:{i:02d}:00.000000Z",
                  end=f"2025-02-05T10:{i:02d}:30.000000Z", generation="1")
            for i in range(n)
        ]  # fmt: skip
    else:
        files = make_files(directory, n)
    for path in files:
        backdate(path)
    backdate(directory)
    return files


def test_an_unchanged_directory_is_not_even_listed_on_the_next_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    aged_files(tmp_path / "d", 3)
    cache_path = tmp_path / "cache.json"
    first, _, _ = read_cycles([str(tmp_path / "d")], CycleCache(cache_path))

    def no_listing(*args: object, **kwargs: object) -> object:
        raise AssertionError("scandir called for an unchanged directory")

    monkeypatch.setattr("nvrx.watch.cycles.os.scandir", no_listing)
    again, _, stats = read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    assert [c.key for c in again] == [c.key for c in first]
    assert (stats.cached, stats.parsed) == (3, 0)


def test_a_cycle_file_replaced_by_rename_is_seen_although_its_directory_was_cached(
    tmp_path: Path,
) -> None:
    (path,) = aged_files(tmp_path / "d", 1)
    cache_path = tmp_path / "cache.json"
    (before,), _, _ = read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    assert before.end is None
    # The cycle ends: NVRx writes a new file and renames it over the old one.
    closed = json.loads(path.read_text())
    closed["cycle_end_time"] = "2025-02-05T11:00:00.000000Z"
    closed["generation"] = "1"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(closed, indent=2))
    os.replace(tmp, path)
    (after,), _, stats = read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    assert after.end is not None and after.write_count == 1
    assert stats.parsed == 1


def test_an_open_cycle_rewritten_in_place_is_seen_although_its_directory_was_cached(
    tmp_path: Path,
) -> None:
    (path,) = aged_files(tmp_path / "d", 1)  # cycle 0, open
    cache_path = tmp_path / "cache.json"
    read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    closed = json.loads(path.read_text())
    closed["cycle_end_time"] = "2025-02-05T11:00:00.000000Z"
    path.write_text(json.dumps(closed, indent=2))  # in place: the directory does not change
    backdate(tmp_path / "d")
    (after,), _, _ = read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    assert after.end is not None


def count_listings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The directories the reader lists (scandir) from now on, in order."""
    listed: list[str] = []
    real = os.scandir

    def counting(path: str) -> object:
        listed.append(path)
        return real(path)

    monkeypatch.setattr("nvrx.watch.cycles.os.scandir", counting)
    return listed


def test_an_unchanged_directory_is_listed_again_after_the_listing_ttl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    aged_files(tmp_path / "d", 2)
    cache_path = tmp_path / "cache.json"
    read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    monkeypatch.setattr(cyclecache, "LISTING_TTL_NS", -1)
    listed = count_listings(monkeypatch)
    read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    assert listed == [str(tmp_path / "d")]


def test_a_directory_listed_again_after_the_ttl_is_trusted_again_for_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listing time is the last listing's: a chain watched for more than an hour must not
    be listed on every pass from then on."""
    aged_files(tmp_path / "d", 2)
    cache_path = tmp_path / "cache.json"
    read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    later = time.time_ns() + cyclecache.LISTING_TTL_NS + 1
    monkeypatch.setattr("nvrx.watch.cyclecache.time.time_ns", lambda: later)
    listed = count_listings(monkeypatch)
    for _ in range(3):  # the first pass past the TTL lists it; the next ones trust it again
        read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    assert listed == [str(tmp_path / "d")]


@pytest.mark.parametrize(
    "spoil",
    [
        lambda r: r["listed"].__setitem__(2, "not a stamp"),
        lambda r: r.__setitem__("listed", [1, 2]),
        lambda r: r.__setitem__("open", [["cycle_info.101.0.0", 1, 2, 3]]),  # none is open
        lambda r: r.__setitem__("open", "none"),
    ],
)
def test_a_corrupt_directory_listing_in_the_cache_is_a_miss(
    tmp_path: Path, spoil: Callable[[dict[str, Any]], Any]
) -> None:
    aged_files(tmp_path / "d", 2, closed=True)
    cache_path = tmp_path / "cache.json"
    first, _, _ = read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    data = json.loads(cache_path.read_text())
    spoil(data["dirs"][str(tmp_path / "d" / "cycle_info.*")])
    cache_path.write_text(json.dumps(data))
    again, _, stats = read_cycles([str(tmp_path / "d")], CycleCache(cache_path))
    assert [c.key for c in again] == [c.key for c in first]
    assert stats.seen == 2


# --- unchanged generations are columns until asked for -----------------------------------------


def generations(root: Path, jobs: Sequence[str], per_job: int = 3) -> str:
    """Generation directories as NVRx lays them out (`<root>/<job>/cycle_infos`), every cycle
    closed, all old enough for the listing cache; returns the pattern a chain watches."""
    for g, job in enumerate(jobs):
        directory = root / job / "cycle_infos"
        for i in range(per_job):
            begin = datetime(2025, 2, 5, 10, tzinfo=UTC) + timedelta(
                minutes=max(10, 2 * per_job) * g + 2 * i
            )
            backdate(write(directory, job=job, cycle=i, start=f"{begin:%Y-%m-%dT%H:%M:%SZ}",
                       end=f"{begin + timedelta(minutes=1):%Y-%m-%dT%H:%M:%SZ}", generation="1"))  # fmt: skip
        backdate(directory)
    return str(root / "*" / "cycle_infos" / "cycle_info.*")


def test_a_warm_pass_builds_no_record_of_an_unchanged_generation_until_one_is_asked_for(
    tmp_path: Path,
) -> None:
    pattern = generations(tmp_path / "w", ["101", "102", "103"])
    cache_path = tmp_path / "cache.json"
    cold, _, _ = read_cycles([pattern], CycleCache(cache_path))
    warm, skipped, stats = read_cycles([pattern], CycleCache(cache_path))
    assert (stats.cached, stats.parsed, skipped) == (9, 0, [])
    assert len(warm.blocks) == 3 and not any(b.built for b in warm.blocks)
    # What a pass needs of every cycle comes from the columns alone.
    assert len(warm) == 9
    assert [job for job, _, _ in warm.times()] == ["101"] * 3 + ["102"] * 3 + ["103"] * 3
    assert warm.highs() == {"101.0": 2, "102.0": 2, "103.0": 2}
    assert warm.count_of("102") == 3 and not any(b.built for b in warm.blocks)
    # Asking for one generation builds that one's records only; one cycle, that one only.
    assert [c.key for c in warm.of_job("103")] == ["103.0.0", "103.0.1", "103.0.2"]
    assert [b.built for b in warm.blocks] == [0, 0, 3]
    assert warm[3].key == "102.0.0" and [b.built for b in warm.blocks] == [0, 1, 3]
    assert warm[3] is warm.of_job("102")[0]  # built once: the same record either way
    # And the records are the ones a read without any cache gives, in the same order.
    uncached, _, _ = read_cycles([pattern], None)
    assert warm == uncached == cold


def test_a_warm_pass_computes_goodput_failures_and_detectors_from_the_current_generation_only(
    tmp_path: Path,
) -> None:
    from nvrx.config import WatchSettings
    from nvrx.watch.detectors import run_detectors
    from nvrx.watch.detectors.fleet import failed_cycles
    from nvrx.watch.goodput import goodput
    from nvrx.watch.model import ChainRef, Checkpoint, SaveSeen, Snapshot

    pattern = generations(tmp_path / "w", ["101", "102", "103"])
    cache_path = tmp_path / "cache.json"
    read_cycles([pattern], CycleCache(cache_path))
    warm, _, _ = read_cycles([pattern], CycleCache(cache_path))
    at = datetime(2025, 2, 5, 11, tzinfo=UTC)
    chain = ChainRef(name="train", user="alice", work_dir=None)
    snap = Snapshot(at, "login1", chain, warm, Checkpoint(path=None), None)
    saves = [SaveSeen(10, datetime(2025, 2, 5, 10, 0, 30, tzinfo=UTC), at)]
    lazy = goodput(warm, [], saves, at)
    run_detectors(snap, WatchSettings())
    assert failed_cycles(snap, 600) == []  # nothing ended in the last 10 minutes
    assert [b.built for b in warm.blocks] == [0, 0, 3]
    uncached, _, _ = read_cycles([pattern], None)
    assert lazy == goodput(list(uncached), [], saves, at)
    assert lazy.seconds["restart_overhead"] > 0 and lazy.seconds["progress_lost"] > 0
    assert [c.key for c in failed_cycles(snap, 3600)][:2] == ["101.0.0", "101.0.1"]


def test_the_detectors_build_only_the_records_they_look_at(tmp_path: Path) -> None:
    """A current generation of 20 short cycles, long past the storm window: the suspect-node
    detector compares the nodes of the last 3, the others need the latest (one of them): 3
    records of 20, and the findings of a read that built every record."""
    from nvrx.config import WatchSettings
    from nvrx.watch.detectors import run_detectors
    from nvrx.watch.model import ChainRef, Checkpoint, Snapshot

    pattern = generations(tmp_path / "w", ["101", "102"], per_job=20)
    cache_path = tmp_path / "cache.json"
    read_cycles([pattern], CycleCache(cache_path))
    warm, _, _ = read_cycles([pattern], CycleCache(cache_path))
    chain = ChainRef(name="train", user="alice", work_dir=None)
    at = datetime(2025, 2, 5, 13, tzinfo=UTC)
    found = run_detectors(
        Snapshot(at, "h", chain, warm, Checkpoint(path=None), None), WatchSettings()
    )
    assert [b.built for b in warm.blocks] == [0, 3]
    uncached, _, _ = read_cycles([pattern], None)
    everything = Snapshot(at, "h", chain, uncached, Checkpoint(path=None), None)
    assert found == run_detectors(everything, WatchSettings())  # the same findings
    assert "nvrx-suspect-node-102" in [f.key for f in found]


def test_unchanged_directories_holding_one_job_are_merged_and_deduplicated_like_fresh_files(
    tmp_path: Path,
) -> None:
    """A copy of a generation's files in a second directory: the warm pass must keep one of
    each key and say so, exactly as the first pass did."""
    for name in ("a", "b"):
        for i in range(2):
            backdate(write(tmp_path / name, job="7", cycle=i, start=f"2025-02-05T10:0{i}:00Z",
                       end=f"2025-02-05T10:0{i}:30Z", generation="1"))  # fmt: skip
        backdate(tmp_path / name)
    patterns = [str(tmp_path / "a"), str(tmp_path / "b")]
    cache_path = tmp_path / "cache.json"
    cold, cold_skips, _ = read_cycles(patterns, CycleCache(cache_path))
    warm, warm_skips, stats = read_cycles(patterns, CycleCache(cache_path))
    assert stats.parsed == 0
    assert keys(warm) == keys(cold) == ["7.0.0", "7.0.1"]
    assert [c.path for c in warm] == [c.path for c in cold]
    assert sorted(s.reason for s in warm_skips) == sorted(s.reason for s in cold_skips)
    assert all(s.reason.startswith("duplicate of 7.0.") for s in warm_skips) and warm_skips


def test_of_two_cached_files_claiming_one_key_the_newer_is_kept_as_on_the_first_pass(
    tmp_path: Path,
) -> None:
    """Equal ends: the later mtime wins, whether the files were read this pass or cached (the
    path only breaks a tie of mtimes too)."""
    newer = write(
        tmp_path / "a",
        job="7",
        start="2025-02-05T10:00:00Z",
        end="2025-02-05T10:00:30Z",
        mtime_ns=OLD_NS + 10**9,
    )
    older = write(
        tmp_path / "b",
        job="7",
        start="2025-02-05T10:00:00Z",
        end="2025-02-05T10:00:30Z",
        mtime_ns=OLD_NS,
    )
    for name in ("a", "b"):
        backdate(tmp_path / name)
    patterns = [str(tmp_path / "a"), str(tmp_path / "b")]
    cache_path = tmp_path / "cache.json"
    cold, _, _ = read_cycles(patterns, CycleCache(cache_path))
    warm, warm_skips, stats = read_cycles(patterns, CycleCache(cache_path))
    assert stats.parsed == 0  # both directories came from the cache
    assert [c.path for c in cold] == [c.path for c in warm] == [str(newer)]
    assert [s.path for s in warm_skips] == [str(older)]


def test_a_damaged_record_of_an_unchanged_directory_makes_it_read_again(tmp_path: Path) -> None:
    pattern = generations(tmp_path / "w", ["101"])
    cache_path = tmp_path / "cache.json"
    first, _, _ = read_cycles([pattern], CycleCache(cache_path))
    data = json.loads(cache_path.read_text())
    (record,) = data["dirs"].values()
    assert record["listed"] is not None
    _damage(record)
    cache_path.write_text(json.dumps(data))
    again, _, stats = read_cycles([pattern], CycleCache(cache_path))
    assert stats.parsed == 3 and again == first
    assert again[0].active_nodes[0] == "node001"
