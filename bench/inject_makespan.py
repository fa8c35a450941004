"""Campaign makespan: upstream's batch barrier, the strict sliding window and the node-aware
window, on the local cluster, in one run.

The pool is upstream's default (34 entries on 2, 4 and 8 nodes) in its own order and shuffled
(a fixed seed, printed). A stand-in workload hangs 10 s for the hang faults (GPU_SLEEP,
LOCK_GIL, SIGSTOP) and crashes after 2 s for the others, BATCH_SIZE 2, a 1 s poll. Every
window runs each pool once; the bench prints each makespan, its ratio to the barrier's, and its
ratio to the pool's lower bound:

    wide jobs (more nodes than half the partition: no two run together) one after another, plus
    the rest at max(their work / BATCH_SIZE, their node-seconds / nodes)

computed from the nominal durations (10 s, 2 s), so the bound has no Slurm or polling overhead
in it; it is also printed from the durations accounting measured (the jobs' own start-up).
Slurm commands per window are printed (squeue, sacct, sinfo, sbatch). A last run puts the
same jobs in an order chosen knowing every duration (wide jobs back to back, then longest
first) in a strict window: a reference for what foresight, which no window has, reaches with
the same driver and cluster.

Run with the local cluster up:  .venv/bin/python bench/inject_makespan.py [--seed N] [--quick]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from nvrx.campaign.pool import split_pool
from nvrx.campaign.poolfile import pool_entries
from nvrx.campaign.session import Record, SessionState
from nvrx.config import load_config
from nvrx.inject.analyst import ExperimentAnalysis
from nvrx.inject.driver import Campaign
from nvrx.inject.plan import make_plan, start_session
from nvrx.inject.window import Window, WindowMode
from nvrx.slurm import Slurm

HANGS = ("GPU_SLEEP", "LOCK_GIL", "SIGSTOP")
HANG_SECONDS, CRASH_SECONDS = 10, 2
WORKLOAD = f"""#!/bin/bash
case "$FAULT_TYPE" in
  {"|".join(HANGS)}) sleep {HANG_SECONDS} ;;
  *) sleep {CRASH_SECONDS}; exit 1 ;;
esac
"""
QUICK_POOL = "SIGKILL:0:5:2 GPU_SLEEP:0:5:2 GPU_SLEEP:0:5:8 SIGKILL:1:5:2 SIGKILL:2:5:2"


class Quiet:
    def submitted(self, record: Record, done: int, total: int) -> None: ...
    def ended(self, record: Record, done: int, total: int) -> None: ...
    def analysed(
        self, record: Record, result: ExperimentAnalysis, done: int, total: int
    ) -> None: ...
    def waiting(self, state: SessionState, blind: str | None) -> None: ...
    def note(self, text: str) -> None: ...


@dataclass(frozen=True)
class Run:
    makespan: float
    measured: list[tuple[int, float]]  # (nodes, seconds accounting measured) per job
    calls: dict[str, int]
    overtakes: int


def lower_bound(jobs: Sequence[tuple[int, float]], nodes: int, batch: int) -> float:
    """No schedule of `jobs` (nodes, seconds) with at most `batch` at once on `nodes` nodes
    ends sooner: wide jobs cannot overlap each other or, in a pair-fitting pool, anything."""
    wide = [d for n, d in jobs if 2 * n > nodes]
    rest = [(n, d) for n, d in jobs if 2 * n <= nodes]
    return sum(wide) + max(
        sum(d for _, d in rest) / batch, sum(n * d for n, d in rest) / nodes, 0.0
    )


def nominal(entry: str) -> tuple[int, float]:
    fault, _, _, nodes = entry.split(":")
    return int(nodes), float(HANG_SECONDS if fault in HANGS else CRASH_SECONDS)


def clairvoyant(entries: Sequence[str], nodes: int) -> list[str]:
    """The pool reordered knowing every duration (not admissible: it ignores pool order): the
    wide jobs back to back (Slurm starts each the moment the previous ends), then the rest
    longest first, so two slots end together. What any order could reach with this driver."""
    return sorted(entries, key=lambda e: (2 * nominal(e)[0] <= nodes, -nominal(e)[1]))


def run_campaign(base: Path, script: Path, entries: list[str], batch: int, mode: WindowMode) -> Run:
    cli = {
        "inject.workload": ("cpu_fault_demo", "bench"),
        "inject.sbatch_script": (str(script), "bench"),
        "inject.pool": (" ".join(entries), "bench"),
        "inject.base_experiments_dir": (str(base / mode.value), "bench"),
        "inject.batch_size": (batch, "bench"),
        "slurm.poll_interval": (1.0, "bench"),
        "slurm.gpus_per_node": (4, "bench"),
    }
    loaded = load_config(cli=cli, environ={})
    plan = make_plan(loaded, allow_duplicates=True)
    window = Window(batch, mode)
    session = start_session(plan, loaded, ["bench"], window=window)
    slurm = Slurm(loaded.config.slurm)
    started = time.monotonic()
    outcome = Campaign(
        session, slurm, Quiet(), window=window, poll_interval=loaded.config.slurm.poll_interval
    ).run()
    makespan = time.monotonic() - started
    assert outcome.complete and outcome.error is None, outcome.error
    measured = [
        (
            r.experiment.nodes,
            (datetime.fromisoformat(r.end) - datetime.fromisoformat(r.start)).total_seconds(),
        )
        for r in outcome.state.records
        if r.start and r.end
    ]
    return Run(makespan, measured, dict(slurm.calls), len(outcome.state.passed_over))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1, help="the shuffled pool's seed")
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a 5-entry pool (a smoke run)")
    parser.add_argument(
        "--no-clairvoyant", action="store_true", help="skip the run in the best order known"
    )
    args = parser.parse_args()
    default = split_pool(QUICK_POOL) if args.quick else pool_entries("default")
    shuffled = list(default)
    random.Random(args.seed).shuffle(shuffled)
    slurm = Slurm(load_config(cli={}, environ={}).config.slurm)
    nodes = slurm.partition_nodes().total
    pools = {"default": default, f"shuffled (seed {args.seed})": shuffled}
    modes = (WindowMode.BARRIER, WindowMode.STRICT, WindowMode.NODE_AWARE)
    best: Run | None = None
    print(
        f"BATCH_SIZE {args.batch_size}, {nodes} nodes, hangs {HANG_SECONDS} s, crashes "
        f"{CRASH_SECONDS} s, 1 s poll"
    )
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        base = Path(tmp)
        script = base / "toy.sbatch"
        script.write_text(WORKLOAD)
        for name, entries in pools.items():
            bound = lower_bound([nominal(e) for e in entries], nodes, args.batch_size)
            runs = {m: run_campaign(base, script, entries, args.batch_size, m) for m in modes}
            measured = lower_bound(runs[WindowMode.STRICT].measured, nodes, args.batch_size)
            barrier = runs[WindowMode.BARRIER].makespan
            if best is None and not args.no_clairvoyant:  # the same jobs in every pool
                best = run_campaign(
                    base, script, clairvoyant(entries, nodes), args.batch_size, WindowMode.STRICT
                )
            print(f"\n{name} pool, {len(entries)} experiments: lower bound {bound:.1f} s")
            print(f"  (from the durations accounting measured: {measured:.1f} s)")
            print(f"  {'window':<11} {'makespan':>9} {'/barrier':>9} {'/bound':>7}  commands")
            for mode, run in runs.items():
                calls = ", ".join(
                    f"{k} {run.calls.get(k, 0)}" for k in ("squeue", "sacct", "sinfo", "sbatch")
                )
                print(
                    f"  {mode.value:<11} {run.makespan:8.1f}s {run.makespan / barrier:9.3f} "
                    f"{run.makespan / bound:7.3f}  {calls}; {run.overtakes} passed over"
                )
            if best is not None:
                print(
                    f"  {'clairvoyant':<11} {best.makespan:8.1f}s {best.makespan / barrier:9.3f} "
                    f"{best.makespan / bound:7.3f}  (strict window, the pool reordered knowing "
                    "every duration)"
                )


if __name__ == "__main__":
    main()
