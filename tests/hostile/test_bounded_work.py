"""Bounded work, second pass: hostlists that expand to millions of names,
a timeline of hundreds of cycles on thousands of nodes. Each ends within the harness's memory
and time budget, in one line where it is refused. Each test failed before its fix."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from nvrx.slurm.hostlist import MAX_EXPANDED_HOSTS

from .harness import assert_no_traceback, run_nvrx

WALL = 30.0


def cycle(work: Path, job: str, n: int, start: datetime, end: datetime | None, nodes: str) -> None:
    directory = work / "nvrx" / job / "cycle_infos"
    directory.mkdir(parents=True, exist_ok=True)
    stamp = "%Y-%m-%dT%H:%M:%S.%fZ"
    (directory / f"cycle_info.{job}.0.{n}").write_text(
        json.dumps({
            "job_id": job, "attempt_index": 0, "cycle_number": n,
            "cycle_start_time": start.strftime(stamp),
            "cycle_end_time": end.strftime(stamp) if end else "", "cycle_log_file": "",
            "active_nodes": nodes, "standby_nodes": "", "generation": "1", "active_ranks": "0",
        })
    )  # fmt: skip


def test_cycle_files_naming_a_million_hosts_each_are_skipped_in_bounded_memory(
    tmp_path: Path, home: Path
) -> None:
    work = tmp_path / "work"
    start = datetime.now(UTC) - timedelta(hours=5)
    for i in range(48):  # each its own list, so no memo can share them
        at = start + timedelta(minutes=5 * i)
        cycle(work, "700", i, at, at + timedelta(minutes=4), f"h{i}x[0-999999]")
    proc = run_nvrx(
        "watch", "--platform", "none", "--work-dir", str(work), "--state-dir", str(tmp_path / "s"),
        "--json", cwd=home, wall=WALL, memory_mb=700,
    )  # fmt: skip
    assert_no_traceback(proc)
    doc = json.loads(proc.stdout)
    assert doc["snapshot"]["skipped_files"] == 48, proc.describe()
    assert doc["degraded"] is True  # a pass that read none of its cycle files is blind


def test_a_timeline_of_400_cycles_on_the_largest_hostlists_is_drawn_in_bounds(
    tmp_path: Path, home: Path
) -> None:
    work = tmp_path / "work"
    start = datetime.now(UTC) - timedelta(days=3)
    for i in range(400):
        at = start + timedelta(minutes=10 * i)
        cycle(work, "800", i, at, at + timedelta(minutes=9), f"n[{i}-{i + MAX_EXPANDED_HOSTS - 1}]")
    page = tmp_path / "timeline.html"
    proc = run_nvrx(
        "watch", "--platform", "none", "--work-dir", str(work), "--state-dir", str(tmp_path / "s"),
        "--html", str(page), cwd=home, wall=WALL, memory_mb=900, cpu_seconds=25,
    )  # fmt: skip
    assert_no_traceback(proc)
    assert proc.code in (0, 1), proc.describe()
    text = page.read_text()
    assert "Not drawn:" in text and len(text.encode()) < 2_000_000


def test_a_small_pickle_sharing_one_huge_list_is_refused_not_walked(
    tmp_path: Path, home: Path
) -> None:
    import pickle

    shared = [list(range(1000)) for _ in range(1000)]  # a million ints, pickled once
    entries = [{"input_sizes": shared, "profiling_name": "nccl:all_reduce"} for _ in range(1000)]
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    (dumps / "_dump_0").write_bytes(pickle.dumps({"entries": entries, "version": "2.4"}))
    assert (dumps / "_dump_0").stat().st_size < 5_000_000
    proc = run_nvrx("analyze", "fr", str(dumps), cwd=home, wall=WALL, cpu_seconds=10)
    assert_no_traceback(proc)
    assert proc.code == 2 and "once its shared parts are counted" in proc.stderr, proc.describe()
