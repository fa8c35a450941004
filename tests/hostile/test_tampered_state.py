"""The watcher's own files, tampered with: a cycle cache whose crc is valid
over a cut zlib stream, whose summary does not match its rows, or that is a zlib bomb; a cache
that is a FIFO. Never a traceback nor a MemoryError: the cache is derived data, so a damaged one
is set aside, the cycle files read again, and the pass says so. Each test failed before its fix."""

from __future__ import annotations

import base64
import json
import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nvrx.watch.cyclecache import _crc

from ..test_watch_watcher import healthy_run
from .harness import Result, assert_no_traceback, run_nvrx

WALL = 20.0


def settled_run(work: Path) -> None:
    """A healthy chain whose files are older than the cache's racy window (so it caches them)."""
    healthy_run(work)
    settle(work)


def settle(work: Path) -> None:
    old = os.stat(work).st_mtime - 60
    for path in [work, *work.rglob("*")]:
        os.utime(path, (old, old))


def watch(work: Path, state: Path, home: Path) -> Result:
    return run_nvrx(
        "watch", "--platform", "none", "--work-dir", str(work), "--state-dir", str(state),
        "--json", cwd=home, wall=WALL, memory_mb=900,
    )  # fmt: skip


def cut_zlib(record: dict[str, Any]) -> None:
    raw = base64.b64decode(record["rows"])
    record["rows"] = base64.b64encode(raw[: len(raw) // 2]).decode()


def wrong_count(record: dict[str, Any]) -> None:
    record["summary"]["count"] += 5


def bomb(record: dict[str, Any]) -> None:
    # About 1 GiB of JSON once inflated, a megabyte on disk (more than a reader without its cap
    # could hold within the test's memory budget). Built from one compressed block of 16 MiB
    # repeated: after a full flush a block refers to nothing before it, so copies of it inflate
    # to copies of its text (compressing the whole GiB took the test 3 s).
    squeeze = zlib.compressobj(9)
    head = squeeze.compress(b"[") + squeeze.flush(zlib.Z_FULL_FLUSH)
    block = squeeze.compress(b" " * (16 << 20)) + squeeze.flush(zlib.Z_FULL_FLUSH)
    tail = squeeze.compress(b"]") + squeeze.flush()
    record["rows"] = base64.b64encode(head + block * 64 + tail).decode()


def short_rows(record: dict[str, Any]) -> None:
    rows = json.loads(zlib.decompress(base64.b64decode(record["rows"])))
    record["rows"] = base64.b64encode(zlib.compress(json.dumps(rows[:-1]).encode())).decode()


@pytest.mark.parametrize("trusted", [True, False], ids=["listing-trusted", "relisted"])
@pytest.mark.parametrize("tamper", [cut_zlib, wrong_count, bomb, short_rows])
def test_a_tampered_cycle_cache_is_set_aside_and_the_files_read_again(
    tmp_path: Path, home: Path, tamper: Callable[[dict[str, Any]], None], trusted: bool
) -> None:
    # Trusted: the directory's record is used without listing it (its rows decoded when a
    # record is asked for); relisted: its files are looked up in the record.
    work, state = tmp_path / "work", tmp_path / "state"
    settled_run(work)
    first = watch(work, state, home)
    assert first.code == 0, first.describe()
    (cache,) = state.glob("*/cycles-cache.json")
    doc = json.loads(cache.read_text())
    for record in doc["dirs"].values():
        tamper(record)
        record["crc"] = _crc(record["cols"], record["rows"])  # the crc says all is well
        if not trusted:
            record["listed"] = None
    cache.write_text(json.dumps(doc))
    again = watch(work, state, home)
    assert_no_traceback(again)
    assert again.code == 0, again.describe()
    if trusted:  # found out when decoded: said, and the damaged file kept aside
        assert any("set aside" in n for n in json.loads(again.stdout)["notes"]), again.describe()
        assert cache.with_name("cycles-cache.json.damaged").is_file()
    assert (
        json.loads(again.stdout)["snapshot"]["cycles"]
        == json.loads(first.stdout)["snapshot"]["cycles"]
    )
    third = watch(work, state, home)  # the cache rebuilt from the files
    assert third.code == 0 and "set aside" not in third.stdout, third.describe()


def test_a_cycle_cache_that_is_a_fifo_never_blocks_the_pass(tmp_path: Path, home: Path) -> None:
    work, state = tmp_path / "work", tmp_path / "state"
    settled_run(work)
    assert watch(work, state, home).code == 0
    (cache,) = state.glob("*/cycles-cache.json")
    cache.unlink()
    os.mkfifo(cache)
    again = watch(work, state, home)
    assert_no_traceback(again)
    assert again.code == 0, again.describe()


HUGE = 10**400
ANCIENT = "0001-01-01T00:00:00+00:00"


def huge_counters(doc: dict[str, Any]) -> None:
    doc["checkpoint"]["value"] = doc["checkpoint"]["high"] = HUGE
    doc["cycle_high"] = {"901.0": HUGE}


def ancient_times(doc: dict[str, Any]) -> None:
    doc["checkpoint"]["first_seen"] = ANCIENT
    doc["last_pass"] = "9999-12-31T23:59:59+00:00"
    doc["saves"] = [[1, ANCIENT, "0001-01-01T00:00:01+00:00"]]
    doc["spans"] = [["901", ANCIENT, None, None, None]]


def negative_shares(doc: dict[str, Any]) -> None:
    assert doc["goodput_shares"], "no share remembered to tamper with"
    doc["goodput_shares"] = {k: [v[0], [-(10**9)] * 5] for k, v in doc["goodput_shares"].items()}


@pytest.mark.parametrize("tamper", [huge_counters, ancient_times, negative_shares])
def test_a_state_file_out_of_range_is_no_traceback_and_no_negative_time(
    tmp_path: Path, home: Path, tamper: Callable[[dict[str, Any]], None]
) -> None:
    from ..test_watch_timeline import two_generations

    work, state = tmp_path / "work", tmp_path / "state"
    two_generations(work)  # a closed generation: its goodput share is remembered
    settle(work)
    assert watch(work, state, home).code in (0, 1)
    assert watch(work, state, home).code in (0, 1)
    (path,) = state.glob("*/state.json")
    doc = json.loads(path.read_text())
    tamper(doc)
    path.write_text(json.dumps(doc))
    again = watch(work, state, home)
    assert_no_traceback(again)
    assert again.code in (0, 1), again.describe()
    good = json.loads(again.stdout)["goodput"]
    assert 0 <= good["fraction"] <= 1, again.describe()
    assert min(good["seconds"].values()) >= 0, good  # no category below nothing
    assert not any(n.startswith("-") for n in good["notes"]), good


def test_a_journalled_verdict_that_is_no_verdict_stops_report_naming_the_line(
    tmp_path: Path, home: Path
) -> None:
    import shutil

    from ..conftest import SCORE_DEMO
    from .harness import assert_bad_input

    for damage in ("a string", "no dimensions"):
        session = tmp_path / damage / "fault_injection" / SCORE_DEMO.name
        shutil.copytree(SCORE_DEMO, session)
        journal = session / "journal.jsonl"
        lines = journal.read_text().splitlines()
        # Every analysis of one experiment (the demo was re-analysed: two each) is damaged, so
        # --force is left with no verdict for it.
        events = [(i, json.loads(line)) for i, line in enumerate(lines) if '"analysed"' in line]
        target = events[0][1]["index"]
        damaged = [(i, event) for i, event in events if event["index"] == target]
        for i, event in damaged:
            if damage == "a string":
                event["verdict"] = "great"
            else:
                for d in ("restart_correct", "rank_primary", "rank_any", "fault_described"):
                    event["verdict"].pop(d)
            lines[i] = json.dumps(event)
        journal.write_text("\n".join(lines) + "\n")
        proc = run_nvrx("report", str(session), cwd=home, wall=WALL)
        said = assert_bad_input(proc, "--force")
        assert any(f"journal.jsonl line {i + 1}: " in said for i, _ in damaged), said
        forced = run_nvrx("report", str(session), "--force", cwd=home, wall=WALL)
        assert forced.code == 0 and "1 unscored" in forced.stdout, forced.describe()


def test_a_read_only_session_is_one_line_for_reanalyze_and_the_page(
    tmp_path: Path, home: Path
) -> None:
    # Root writes through file modes, so the session is made read-only as a filesystem: a
    # read-only bind mount of itself (skipped where mounting is not allowed).
    import shutil
    import subprocess

    from ..conftest import SCORE_DEMO

    session = tmp_path / "fault_injection" / SCORE_DEMO.name
    shutil.copytree(SCORE_DEMO, session)
    mounted = subprocess.run(["mount", "--bind", str(session), str(session)], check=False,
                             capture_output=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {mounted.stderr.decode()[:100]}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(session)], check=True)
        before = (session / "journal.jsonl").read_bytes()
        reanalyze = run_nvrx("inject-loop", "--reanalyze", str(session), cwd=home, wall=WALL)
        assert_no_traceback(reanalyze)
        assert reanalyze.code in (1, 2), (
            reanalyze.describe()
        )  # (write_output says 1 for a failed write)
        (line,) = reanalyze.stderr.splitlines()
        assert "journal.jsonl" in line and "Read-only file system" in line, line
        page = run_nvrx("report", str(session), "--html", cwd=home, wall=WALL)
        assert_no_traceback(page)
        assert page.code == 1 and "Read-only file system" in page.stderr, page.describe()
        assert (session / "journal.jsonl").read_bytes() == before
    finally:
        subprocess.run(["umount", str(session)], check=False)
