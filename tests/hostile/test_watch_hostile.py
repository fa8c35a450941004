"""The watcher against cycle directories that lie: names that are not UTF-8, counters that go
backwards between passes, a directory of nothing but symlinks."""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..test_watch_watcher import cycle_file, healthy_run
from .harness import assert_no_traceback, run_nvrx

WALL = 15.0


def watch_json(work: Path, state: Path, home: Path) -> tuple[int, dict[str, Any]]:
    proc = run_nvrx(
        "watch", "--platform", "none", "--work-dir", str(work), "--state-dir", str(state),
        "--json", cwd=home, wall=WALL,
    )  # fmt: skip
    assert_no_traceback(proc)
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.describe()
    doc: dict[str, Any] = json.loads(lines[-1])
    return proc.code, doc


def detectors(doc: dict[str, Any]) -> list[str]:
    return [f["detector"] for f in doc["findings"]]


def test_a_non_utf8_cycle_file_name_is_no_logging_error(tmp_path: Path, home: Path) -> None:
    work, state = tmp_path / "w", tmp_path / "state"
    healthy_run(work)
    cycles = os.fsencode(work / "nvrx" / "901" / "cycle_infos")
    for name in (b"cycle_info.901.0.\xff\xfe", b"cycle_info.\xe9t\xe9.0.1"):
        with open(os.path.join(cycles, name), "w") as handle:
            handle.write("{}")
    for fmt in ([], ["--json"]):
        proc = run_nvrx(
            "watch", "--platform", "none", "--work-dir", str(work), "--state-dir", str(state),
            *fmt, cwd=home, wall=WALL,
        )  # fmt: skip
        assert_no_traceback(proc)
        assert proc.code == 0, proc.describe()


def test_a_checkpoint_iteration_going_down_is_a_counter_regressed_finding(
    tmp_path: Path, home: Path
) -> None:
    work, state = tmp_path / "w", tmp_path / "state"
    healthy_run(work)
    ckpt = work / "checkpoints" / "latest_checkpointed_iteration.txt"
    ckpt.write_text("250\n")
    _, first = watch_json(work, state, home)
    assert first["snapshot"]["checkpoint"]["value"] == 250
    assert "counter_regressed" not in detectors(first), first["findings"]
    ckpt.write_text("5\n")
    _, second = watch_json(work, state, home)
    assert second["snapshot"]["checkpoint"]["value"] == 5, second["snapshot"]["checkpoint"]
    assert "counter_regressed" in detectors(second), second["findings"]


def test_a_generations_latest_cycle_going_down_is_a_counter_regressed_finding(
    tmp_path: Path, home: Path
) -> None:
    work, state = tmp_path / "w", tmp_path / "state"
    now = datetime.now(UTC)
    for cycle in range(6):  # cycles 0..5 of generation 900, an hour each, the last one open
        start = now - timedelta(hours=6 - cycle)
        cycle_file(work, "900", cycle, start, None if cycle == 5 else start + timedelta(minutes=55))
    _, first = watch_json(work, state, home)
    assert first["snapshot"]["latest_cycle"]["cycle_number"] == 5, first["snapshot"]["latest_cycle"]
    assert "counter_regressed" not in detectors(first), first["findings"]
    cycles = work / "nvrx" / "900" / "cycle_infos"
    for cycle in (4, 5):
        (cycles / f"cycle_info.900.0.{cycle}").unlink()
    _, second = watch_json(work, state, home)
    latest = second["snapshot"]["latest_cycle"]
    assert latest["cycle_number"] == 3, latest
    assert "counter_regressed" in detectors(second), second["findings"]


def test_a_cycle_dir_holding_only_symlinks_is_a_degraded_pass(tmp_path: Path, home: Path) -> None:
    work, state = tmp_path / "w", tmp_path / "state"
    healthy_run(work)
    cycles = work / "nvrx" / "901" / "cycle_infos"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for path in list(cycles.iterdir()):
        shutil.move(path, elsewhere / path.name)
        path.symlink_to(elsewhere / path.name)
    code, doc = watch_json(work, state, home)
    assert (code, doc["degraded"]) == (3, True), doc
