"""nvrx inject-loop on the local cluster: the campaign runs, stays within its window, survives
its own driver being killed and the controller going away, and records every job's ending."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nvrx.slurm import Slurm

from .conftest import REPO, local_slurm, wait_for

DEMO = REPO / "examples" / "workloads" / "cpu_fault_demo"

SLEEPER = """#!/bin/bash
# A stand-in workload: runs FAULT_AT_ITER seconds, fails for SEGFAULT.
echo "experiment $FAULT_TYPE:$FAULT_RANK:$FAULT_AT_ITER in $EXPERIMENT_DIR"
sleep "$FAULT_AT_ITER"
[ "$FAULT_TYPE" = SEGFAULT ] && exit 11
exit 0
"""


def inject(
    *args: str, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nvrx.cli", "inject-loop", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


def session_of(base: Path) -> Path:
    (session,) = sorted((base / "fault_injection").iterdir())
    return session


def submitted_so_far(base: Path) -> int:
    """Submissions the session under `base` journalled so far: 0 while the driver is still
    creating it (the session's directory exists a moment before its journal does)."""
    sessions = sorted((base / "fault_injection").glob("*/journal.jsonl"))
    if not sessions:
        return 0
    return sum(e["event"] == "submitted" for e in journal(sessions[0].parent))


def journal(session: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (session / "journal.jsonl").read_text().splitlines()]


@pytest.fixture
def sleeper(shared_dir: Path) -> Path:
    script = shared_dir / "sleeper.sbatch"
    script.write_text(SLEEPER)
    return script


class QueueSampler:
    """Samples, twice a second, which of the user's jobs Slurm holds.

    The session's job ids are known only after the run, so each sample keeps every id and
    `in_slurm` counts a given session's jobs: jobs left by other runs never count.
    """

    def __init__(self, slurm: Slurm) -> None:
        self.slurm = slurm
        self.samples: list[set[str]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            rows = self.slurm.queue(user=Slurm.current_user())
            self.samples.append({r.array_job_id for r in rows})
            time.sleep(0.5)

    def in_slurm(self, job_ids: set[str]) -> list[int]:
        """How many of `job_ids` Slurm held at each sample."""
        return [len(sample & job_ids) for sample in self.samples]

    def __enter__(self) -> QueueSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def test_the_quick_pool_runs_end_to_end_within_its_window(slurm: Slurm, shared_dir: Path) -> None:
    base = shared_dir / "quick"
    with QueueSampler(slurm) as sampler:
        proc = inject(
            "--config",
            str(DEMO / "nvrx.yaml"),
            "--base-dir",
            str(base),
            "--json",
            "--set",
            "slurm.poll_interval=2",
        )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["complete"] and summary["experiments"] == 8

    session = session_of(base)
    rows = (session / "experiments.tsv").read_text().splitlines()
    assert rows[0] == "JOB_ID\tFAULT_TYPE\tRANK\tITER\tNODES\tEXPERIMENT_DIR"
    job_ids = {r.split("\t")[0] for r in rows[1:]}
    assert len(rows) == 9 and len(job_ids) == 8
    in_slurm = sampler.in_slurm(job_ids)
    assert max(in_slurm) <= 2, in_slurm
    assert max(in_slurm) == 2  # the window was used
    for result in summary["results"]:
        assert result["status"] == "ended" and result["state"], result
        assert result["state"] != "COMPLETED", result  # every one of them was faulted
        exp = Path(result["experiment_dir"])
        (log,) = exp.glob("logs/slurm/*.1.main_workload.log")
        text = log.read_text(errors="replace")
        markers = re.findall(
            r"^(\d+): .*FAULT INJECTION: Rank (\d+) will inject fault (\w+)", text, flags=re.M
        )
        assert markers == [(str(result["rank"]), str(result["rank"]), result["fault_type"])]
        if result["fault_type"] == "GPU_SLEEP":
            dumps = sorted(p.name for p in (exp / "checkpoints").glob("_dump_*"))
            ranks = result["nodes"] * 2
            assert f"_dump_{result['rank']}" not in dumps  # the hung rank writes none
            assert len(dumps) == ranks - 1

    # Each run was analysed and scored as it ended, and the report agrees with the journal.
    assert_report_matches_journal(session, 8)
    # The built-in analyser attributes every quick-pool fault fully: 100 % on every text
    # dimension of every cell (the FR dimension depends on what each fault lets dump).
    for cell in json.loads((session / "report.json").read_text())["matrix"]:
        for dimension in ("restart_correct", "rank_primary", "rank_any", "fault_described"):
            assert cell["pass_rates"][dimension] == 1.0, cell
    for result in summary["results"]:
        analysis = Path(result["experiment_dir"]) / "analysis"
        assert (analysis / "run_valid.txt").read_text().startswith("true\nvalid: ")
        for name in ("stripped.log", "log_attribution.txt", "fr_analysis.txt", "verdict.json"):
            text = (analysis / name).read_text()
            assert "FAULT INJECTION" not in text and "inject_fault" not in text, name
    report = json.loads((session / "report.json").read_text())
    assert report["summary"]["scored"] == 8
    assert sum(cell["experiments"] for cell in report["matrix"]) == 8


def assert_report_matches_journal(session: Path, experiments: int) -> None:
    """Every ended experiment is in the report exactly once, with its job from the journal."""
    ended = {e["index"]: e["job_id"] for e in journal(session) if e["event"] == "ended"}
    analysed = {e["index"] for e in journal(session) if e["event"] == "analysed"}
    assert len(ended) == experiments and analysed == set(ended)
    report = json.loads((session / "report.json").read_text())
    assert len(report["cases"]) == experiments
    assert sorted(c["job_id"] for c in report["cases"]) == sorted(ended.values())
    assert len({c["case"] for c in report["cases"]}) == experiments
    md = (session / "experiments_report.md").read_text()
    assert (
        sum(
            line.startswith("| ") and line.split("|")[6].strip() in ended.values()
            for line in md.splitlines()
        )
        == experiments
    )


def test_a_killed_driver_resumes_without_losing_or_repeating_an_experiment(
    slurm: Slurm, shared_dir: Path, sleeper: Path
) -> None:
    base = shared_dir / "crashes"
    pool = "SIGKILL:0:3:2 SEGFAULT:1:2:2 GPU_SLEEP:1:4:2 SIGTERM:1:2:2 OS_ABORT:0:3:2"
    common = ("--set", "slurm.poll_interval=1", "--set", "inject.batch_size=2")
    first = inject(
        "--workload",
        "cpu_fault_demo",
        "--sbatch-script",
        str(sleeper),
        "--pool",
        pool,
        "--base-dir",
        str(base),
        *common,
        env={"NVRX_INJECT_CRASH_AT": "after-submit:1"},
    )
    assert first.returncode == -9  # SIGKILL right after the first sbatch answered
    session = session_of(base)
    for point in ("before-submit:1", "waiting:2", "analysed:1"):
        again = inject("--resume", str(session), *common, env={"NVRX_INJECT_CRASH_AT": point})
        assert again.returncode == -9, again.stderr
    final = inject("--resume", str(session), "--json", *common)
    assert final.returncode == 0, final.stderr
    summary = json.loads(final.stdout)
    assert summary["complete"]
    states = {r["entry"]: r["state"] for r in summary["results"]}
    assert states["SEGFAULT:1:2:2"] == "FAILED" and states["SIGKILL:0:3:2"] == "COMPLETED"

    # Exactly one job per experiment: in the tracking file, and in Slurm itself.
    rows = (session / "experiments.tsv").read_text().splitlines()[1:]
    assert sorted(r.split("\t")[1] for r in rows) == sorted(e.split(":")[0] for e in pool.split())
    expected = sorted(f"fi-{session.name}-{i}" for i in range(5))

    def session_jobs() -> list[str] | None:
        jobs = slurm.accounting(user=Slurm.current_user())
        names = sorted(r.name for r in jobs if r.name.startswith(f"fi-{session.name}-"))
        return names if set(names) >= set(expected) else None

    # A job that ends before slurmdbd stored its submission is briefly a record named
    # "allocation" (the driver needs only its state and end, which are right); wait for names.
    assert wait_for(session_jobs, timeout=180, what="the session's job names in sacct") == expected
    # A driver killed during analysis lost no row and doubled none.
    assert_report_matches_journal(session, 5)


@pytest.fixture
def controller_restored() -> Iterator[None]:
    yield None
    local_slurm("up")


def test_a_controller_outage_never_ends_an_experiment_early(
    slurm: Slurm, shared_dir: Path, sleeper: Path, controller_restored: None
) -> None:
    base = shared_dir / "outage"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nvrx.cli",
            "inject-loop",
            "--workload",
            "cpu_fault_demo",
            "--sbatch-script",
            str(sleeper),
            "--pool",
            "SIGKILL:0:20:2 SIGTERM:1:20:2",
            "--base-dir",
            str(base),
            "--json",
            "--set",
            "slurm.poll_interval=1",
            "--set",
            "slurm.command_timeout=3",
            "--set",
            "slurm.retry_deadline=2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            lambda: submitted_so_far(base) == 2,
            timeout=180,
            what="both experiments submitted",
        )
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    local_slurm("down", "slurmctld")
    time.sleep(8)  # several poll intervals without a controller
    assert not [e for e in journal(session_of(base)) if e["event"] == "ended"]
    local_slurm("up")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert json.loads(out)["complete"]
    assert "squeue failed" in err  # the driver said it was blind, and waited
    ended = [e for e in journal(session_of(base)) if e["event"] == "ended"]
    assert len(ended) == 2 and all(e["state"] == "COMPLETED" for e in ended)


@pytest.mark.parametrize("barrier", [True, False], ids=["barrier", "sliding-window"])
def test_barrier_waits_for_the_whole_batch_where_the_window_does_not(
    slurm: Slurm, shared_dir: Path, sleeper: Path, barrier: bool
) -> None:
    # A long first job and short others, two at a time: upstream's barrier submits the third
    # only once the long one has left; the sliding window as soon as the short one has.
    base = shared_dir / ("barrier" if barrier else "window")
    pool = "SEGFAULT:0:12:2 SEGFAULT:1:1:2 SEGFAULT:2:1:2 SEGFAULT:3:1:2"
    with QueueSampler(slurm) as sampler:
        proc = inject(
            "--workload", "cpu_fault_demo", "--sbatch-script", str(sleeper), "--pool", pool,
            "--base-dir", str(base), "--no-analysis", "--json",
            "--set", "slurm.poll_interval=1", "--set", "inject.batch_size=2",
            "--window", "barrier" if barrier else "strict",
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    events = journal(session_of(base))
    jobs = {e["index"]: e["job_id"] for e in events if e["event"] == "submitted"}
    assert sorted(jobs) == [0, 1, 2, 3]
    first_batch, later = {jobs[0], jobs[1]}, {jobs[2], jobs[3]}
    overlap = [s for s in sampler.samples if s & first_batch and s & later]
    long_with_later = [s for s in sampler.samples if jobs[0] in s and s & later]
    if barrier:
        assert not overlap, overlap  # never two batches in Slurm at once
    else:
        assert long_with_later  # the window filled the short job's place at once


def test_a_job_that_fits_goes_ahead_of_one_that_waits_for_nodes_but_only_once(
    slurm: Slurm, shared_dir: Path, sleeper: Path
) -> None:
    # Two at a time on 8 nodes: a long 2-node job runs, so the 8-node one cannot start. The
    # node-aware window starts the 2-node one after it instead (once); the 8-node one then
    # goes next, before the last, and the tracking file and the report keep pool order.
    base = shared_dir / "node-aware"
    pool = "SEGFAULT:0:12:2 SEGFAULT:1:1:8 SEGFAULT:2:1:2 SEGFAULT:3:1:2"
    proc = inject(
        "--workload", "cpu_fault_demo", "--sbatch-script", str(sleeper), "--pool", pool,
        "--base-dir", str(base), "--no-analysis", "--json", "--window", "node-aware",
        "--set", "slurm.poll_interval=1", "--set", "inject.batch_size=2",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    session = session_of(base)
    events = journal(session)
    order = [e["index"] for e in events if e["event"] == "submitting"]
    assert order == [0, 2, 1, 3]
    assert [e.get("ahead_of") for e in events if e["event"] == "submitting"] == [
        None, 1, None, None
    ]  # fmt: skip
    assert "goes ahead of SEGFAULT:1:1:8" in proc.stderr
    ended = {e["index"]: e for e in events if e["event"] == "ended"}
    assert ended[2]["start"] < ended[1]["start"]  # it used the idle nodes first
    jobs = {e["index"]: e["job_id"] for e in events if e["event"] == "submitted"}
    rows = (session / "experiments.tsv").read_text().splitlines()[1:]
    assert [r.split("\t")[0] for r in rows] == [jobs[i] for i in range(4)]
    summary = json.loads(proc.stdout)
    assert [r["index"] for r in summary["results"]] == [0, 1, 2, 3]


def test_a_driver_killed_after_a_job_went_ahead_resumes_with_the_blocked_one_next(
    slurm: Slurm, shared_dir: Path, sleeper: Path
) -> None:
    # Killed right after the 2-node job went ahead of the 8-node one: the resumed driver knows
    # (from the journal) that the 8-node one was passed over, so it goes next, never overtaken
    # again, and every job gets exactly one tracking row, in pool order.
    base = shared_dir / "node-aware-crash"
    pool = "SEGFAULT:0:8:2 SEGFAULT:1:1:8 SEGFAULT:2:1:2 SEGFAULT:3:1:2 SEGFAULT:0:1:2"
    common = ("--set", "slurm.poll_interval=1", "--set", "inject.batch_size=2", "--no-analysis")
    first = inject(
        "--workload", "cpu_fault_demo", "--sbatch-script", str(sleeper), "--pool", pool,
        "--base-dir", str(base), "--window", "node-aware", *common,
        env={"NVRX_INJECT_CRASH_AT": "after-submit:2"},
    )  # fmt: skip
    assert first.returncode == -9, first.stderr
    session = session_of(base)
    assert len((session / "experiments.tsv").read_text().splitlines()) == 2  # 2's row waits
    final = inject("--resume", str(session), "--json", *common)
    assert final.returncode == 0, final.stderr
    assert json.loads(final.stdout)["complete"]
    events = journal(session)
    assert [e["index"] for e in events if e["event"] == "submitting"] == [0, 2, 1, 3, 4]
    assert sum("ahead_of" in e for e in events) == 1
    jobs = {e["index"]: e["job_id"] for e in events if e["event"] == "submitted"}
    rows = (session / "experiments.tsv").read_text().splitlines()[1:]
    assert [r.split("\t")[0] for r in rows] == [jobs[i] for i in range(5)]
