"""Bounds that held for one part but not for the whole (issue 40, item 4): a job log's task-id
cap held per restart cycle, so cycles × tasks multiplied the work and the answer; the report
page's verdict and trend text had no byte budget; a journalled verdict's text reached `nvrx
report`'s terminal raw. Each test failed before its fix."""

from __future__ import annotations

import json
from pathlib import Path

from .harness import assert_no_traceback, run_nvrx

TASKS = 1 << 17  # a 131,072-task job: every srun range of it is at the task-id cap


def many_cycle_log(path: Path, cycles: int) -> None:
    """`cycles` restart cycles of a 131,072-task job: rank 0 segfaults in each, and srun
    reports every other task's exit in one 60-byte line."""
    with path.open("w") as out:
        for c in range(cycles):
            out.write(f"[ft_launcher] Cycle: {c} Event: rendezvous Node: n1 Rank: 0\n")
            out.write("0: iteration 5 / 100\n0: Fatal Python error: Segmentation fault\n")
            out.write("srun: error: n1: task 0: Segmentation fault (core dumped)\n")
            out.write(f"srun: error: n2: tasks 1-{TASKS - 1}: Exited with exit code 1\n")


def test_a_many_cycle_many_task_log_costs_what_its_lines_say(tmp_path: Path, home: Path) -> None:
    # Before: each cycle expanded its own 131,072 task ids and listed every one in its
    # explanation (0.6 s, 10 MB and 1.3 MB of JSON a cycle: 8 cycles took 5 s and 10 MB).
    cycles = 8
    log = tmp_path / "job.log"
    many_cycle_log(log, cycles)
    assert log.stat().st_size < 300 * cycles
    for fmt in (["--json"], []):
        proc = run_nvrx(
            "analyze", "log", str(log), *fmt, cwd=home, wall=4.0, cpu_seconds=4, memory_mb=256
        )
        assert_no_traceback(proc, stdout=False)
        assert proc.code == 0, proc.describe()
        # A few KB a cycle, whatever the job's width: the answer is bounded by the log's lines.
        assert len(proc.stdout_bytes) < 4096 * cycles, len(proc.stdout_bytes)
    doc = json.loads(run_nvrx("analyze", "log", str(log), "--json", cwd=home).stdout)
    assert len(doc["cycles"]) == cycles
    assert (doc["fault_class"], doc["root_rank"]) == ("SEGFAULT", 0)
    assert f"(and {TASKS - 1 - 128} more) ended after it" in doc["cycles"][0]["explanation"]
