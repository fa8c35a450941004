"""Campaign makespan: sliding window against upstream's batch barrier, on the local cluster.

The same pool of experiments with deliberately unequal durations (a stand-in workload sleeps
FAULT_AT_ITER seconds) runs twice in one invocation, BATCH_SIZE 2: once with nvrx's sliding
window, once with --barrier (upstream: wait for the whole batch). Prints both makespans, their
ratio, and the ideal bound max(total work / BATCH_SIZE, longest job).

Run with the local cluster up:  .venv/bin/python bench/inject_makespan.py
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from nvrx.campaign.session import Record, SessionState
from nvrx.config import load_config
from nvrx.inject.analysis import ExperimentAnalysis
from nvrx.inject.plan import make_plan, start_session
from nvrx.inject.run import Campaign
from nvrx.slurm import Slurm

WORKLOAD = """#!/bin/bash
sleep "$FAULT_AT_ITER"
"""


class Quiet:
    def submitted(self, record: Record, done: int, total: int) -> None: ...
    def ended(self, record: Record, done: int, total: int) -> None: ...
    def analysed(
        self, record: Record, result: ExperimentAnalysis, done: int, total: int
    ) -> None: ...
    def waiting(self, state: SessionState, blind: str | None) -> None: ...
    def note(self, text: str) -> None: ...


def makespan(base: Path, script: Path, durations: list[int], batch: int, barrier: bool) -> float:
    pool = " ".join(f"SIGKILL:0:{d}:2" for d in durations)
    cli = {
        "inject.workload": ("cpu_fault_demo", "bench"),
        "inject.sbatch_script": (str(script), "bench"),
        "inject.pool": (pool, "bench"),
        "inject.base_experiments_dir": (str(base), "bench"),
        "inject.batch_size": (batch, "bench"),
        "slurm.poll_interval": (0.5, "bench"),
    }
    loaded = load_config(cli=cli, environ={})
    plan = make_plan(loaded, allow_duplicates=True)
    session = start_session(plan, loaded, ["bench"])
    slurm = Slurm(loaded.config.slurm)
    started = time.monotonic()
    outcome = Campaign(
        session,
        slurm,
        Quiet(),
        batch_size=batch,
        barrier=barrier,
        poll_interval=loaded.config.slurm.poll_interval,
    ).run()
    assert outcome.complete and outcome.error is None, outcome.error
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--durations", default="20,2,2,2,20,2", help="seconds each experiment runs, in pool order"
    )
    parser.add_argument("--batch-size", type=int, default=2)
    args = parser.parse_args()
    durations = [int(d) for d in args.durations.split(",")]
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        base = Path(tmp)
        script = base / "sleep.sbatch"
        script.write_text(WORKLOAD)
        sliding = makespan(base, script, durations, args.batch_size, barrier=False)
        barrier = makespan(base, script, durations, args.batch_size, barrier=True)
    ideal = max(sum(durations) / args.batch_size, max(durations))
    print(f"pool: {len(durations)} experiments of {durations} s, BATCH_SIZE {args.batch_size}")
    print(f"sliding window makespan: {sliding:6.1f} s")
    print(f"barrier makespan:        {barrier:6.1f} s")
    print(f"sliding / barrier:       {sliding / barrier:6.3f}")
    print(
        f"ideal bound:             {ideal:6.1f} s  (max(total work / BATCH_SIZE, longest job);"
        " plus scheduling and polling overhead per job)"
    )


if __name__ == "__main__":
    main()
