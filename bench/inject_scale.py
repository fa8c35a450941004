"""Campaigns at scale: what the driver costs per pass as a campaign grows, and what a 10,000-
experiment session costs to report, page and resume.

    .venv/bin/python bench/inject_scale.py journal [--experiments 1000 10000] [--hostile]
    .venv/bin/python bench/inject_scale.py cluster [--experiments 1000] [--window 8]

`journal` generates sessions of each size as inject-loop leaves them (a journal of every
experiment submitted, ended and analysed, each with its analysis files; a third fail), then runs
the commands a person runs on one, each in its own process, timed and with its peak memory:
`nvrx report`, `nvrx report --html` (the page's size, and its render time in headless chromium
against an empty page's in the same run) and `nvrx inject-loop --resume` (a finished session:
the journal read, the tracking file and every report rebuilt). Each figure is printed per size, and
what one more experiment adds between consecutive sizes: the same at every step is linear.
Targets at 10,000: report under 5 s; page under 15 MB, rendered in under 5 s. `--hostile` makes
the page's worst case: every experiment fails, a shape of its own (its own node count), every
field of the journal the page shows (the verdict's values, notes and judge, the job id, state and
exit) and every analysis file text that escapes sixfold (`'`), and the previous session beside
it ran the same experiments and passed most of their cells (each one a change).

`cluster` runs a campaign of near-instant experiments on the local cluster (Slurm up:
deploy/local-slurm/up), window 8, a 1 s poll, no analysis, in this process, and records the
driver's own CPU time (its thread: Slurm's commands are other processes) at every pass. It
prints the CPU per pass and per experiment for each hundred experiments ended, and the last
hundred's against the first's: flat means a pass costs what changed, not the journal's length.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from report_page import render_seconds  # the one headless render timing

NVRX = [sys.executable, "-m", "nvrx.cli"]
FAULTS = ("SEGFAULT", "GPU_SLEEP", "SIGKILL", "WORKLOAD_EXC", "GPU_ERROR", "SIGTERM")
PASS = {"restart_correct": "true", "rank_primary": "true", "rank_any": "true",
        "fault_described": "true", "fr_rank_correct": "rank"}  # fmt: skip
LINE = "[rank3]: RuntimeError: NCCL watchdog timeout waiting for rank 1"
SIXFOLD = "'" * 1000  # `&#x27;` once escaped (the most a character grows), and as it is in JSON


# --- journal: a generated session ------------------------------------------------------------


def generate_session(
    base: Path,
    experiments: int,
    *,
    hostile: bool = False,
    spread: bool = False,
    name: str = "20260101_000000",
) -> Path:
    """A finished session of `experiments` experiments as inject-loop leaves it: the journal
    (written in one go: its lines are what `Journal.append` writes), the tracking file's header,
    and each experiment's analysis files, as long as the page keeps them. `hostile`: the page's
    worst case (the module's docstring); `spread`: each experiment a node count of its own."""
    from nvrx.campaign.session import JOURNAL_NAME, TSV_HEADER, TSV_NAME

    text = SIXFOLD if hostile else LINE
    session = base / "fault_injection" / name
    session.mkdir(parents=True)
    (session / TSV_NAME).write_text(TSV_HEADER)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    spec = {"workload": "w", "script": str(base / "missing.sbatch"), "gpus_per_node": 4,
            "time_limit": "00:10:00"}  # fmt: skip
    lines = [{"event": "session", "spec": spec, "pool": "bench", "batch_size": 8,
              "window": "node-aware", "look_ahead": 8, "settings": {},
              "argv": ["bench"]}]  # fmt: skip
    shapes = []
    for i in range(experiments):
        nodes = 2 + i if hostile or spread else (2, 4, 8)[i % 3]
        fault, rank, iteration = FAULTS[i % len(FAULTS)], i % (nodes * 4), 5 + i // 24
        shapes.append((fault, rank, iteration, nodes))
        lines.append({"event": "planned", "index": i, "fault": fault, "rank": rank,
                      "iter": iteration, "nodes": nodes, "copy": 0})  # fmt: skip
    for i, (fault, rank, iteration, nodes) in enumerate(shapes):
        job = SIXFOLD if hostile else str(100_000 + i)
        state, exit_ = (SIXFOLD, SIXFOLD) if hostile else ("FAILED", "1:0")
        lines += [
            {"event": "submitting", "index": i, "job_name": f"fi-{name}-{i}",
             "comment": f"nvrx-fi={name} exp={i}"},
            {"event": "submitted", "index": i, "job_id": job, "comment": "c"},
            {"event": "ended", "index": i, "job_id": job, "state": state, "exit": exit_,
             "start": "2026-01-01T00:00:00", "end": "2026-01-01T00:01:00"},
        ]  # fmt: skip
        dims = {**PASS, "rank_primary": "false"} if i % 3 == 0 else PASS
        if hostile:
            dims = dict.fromkeys(PASS, SIXFOLD)
        verdict = {"case": f"{name}/n{nodes}_{fault}_r{rank}_i{iteration}",
                   "status": "scored", "judge": SIXFOLD if hostile else "rules", "notes": text,
                   **dims}  # fmt: skip
        lines.append({"event": "analysed", "index": i, "validity": "valid", "reason": "r",
                      "decision": "RESTART", "verdict": verdict})  # fmt: skip
        analysis = session / f"n{nodes}_{fault}_r{rank}_i{iteration}" / "analysis"
        analysis.mkdir(parents=True)
        (analysis / "stripped.log").write_text((text + "\n") * 60)
        (analysis / "log_attribution.txt").write_text("RESTART IMMEDIATE\n" + text * 14)
        fr_rows = (text + "\n") * 2 if hostile else "0 1\n" * 250
        (analysis / "fr_analysis.txt").write_text("pg  missing\n" + fr_rows)
    with (session / JOURNAL_NAME).open("w") as journal:
        for n, event in enumerate(lines):
            stamp = (at + timedelta(seconds=n)).isoformat()
            journal.write(json.dumps({**event, "at": stamp}, sort_keys=True) + "\n")
    return session


@dataclass(frozen=True)
class Measured:
    seconds: float
    peak_mb: float


def measure(argv: Sequence[str], env: dict[str, str]) -> Measured:
    """Run one command to its end: wall time and the peak resident memory of its process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):  # 1: the stop condition or a finding; anything else is a failure
        err = proc.stderr.read().decode() if proc.stderr else ""
        sys.exit(f"{' '.join(argv)} exited {code}: {err.strip()[-500:]}")
    return Measured(seconds, usage.ru_maxrss / 1024)


def journal_bench(sizes: Sequence[int], runs: int, *, hostile: bool = False) -> None:
    env = dict(os.environ)
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    per: dict[int, dict[str, Measured]] = {}
    pages: dict[int, tuple[float, float]] = {}  # size MB, render s beyond the empty page
    with tempfile.TemporaryDirectory(prefix="nvrx-scale-") as tmp:
        root = Path(tmp)
        empty = root / "empty.html"
        empty.write_text("<!DOCTYPE html><html><body></body></html>")
        for size in sizes:
            start = time.perf_counter()
            session = generate_session(root / f"s{size}", size, hostile=hostile)
            if hostile:  # the same experiments, passing before: their cells are changes
                generate_session(root / f"s{size}", size, spread=True, name="20251231_000000")
            print(f"{size} experiments: session generated in {time.perf_counter() - start:.1f} s")
            page = root / f"page{size}.html"
            commands = {
                "report": [*NVRX, "report", str(session)],
                "report --html": [*NVRX, "report", str(session), "--html", str(page)],
                "inject-loop --resume": [*NVRX, "inject-loop", "--resume", str(session),
                                         "--no-progress", "--set", "slurm.poll_interval=0"],
            }  # fmt: skip
            per[size] = {}
            for name, argv in commands.items():
                best = min((measure(argv, env) for _ in range(runs)), key=lambda m: m.seconds)
                per[size][name] = best
                print(f"  {name:22} {best.seconds:6.2f} s  {best.peak_mb:6.0f} MB peak  "
                      f"{1000 * best.seconds / size:.2f} ms per experiment")  # fmt: skip
            megabytes = page.stat().st_size / 1e6
            render = float("nan")
            if browser is not None:
                base = statistics.median(
                    render_seconds(browser, empty, root / f"e{size}-{i}") for i in range(3)
                )
                full = statistics.median(
                    render_seconds(browser, page, root / f"p{size}-{i}") for i in range(3)
                )
                render = full - base
            pages[size] = (megabytes, render)
            print(f"  page {megabytes:.1f} MB, rendered in {render:.2f} s beyond an empty "
                  f"page's start-up{'' if browser else ' (no chromium on PATH)'}")  # fmt: skip
    large = max(sizes)
    # What each experiment adds, between consecutive sizes (start-up cancels out): the same
    # figure at every step is linear growth; a rising one is not.
    for a, b in itertools.pairwise(sizes):
        print(f"each experiment from {a} to {b} adds:")
        for name in per[b]:
            time_each = (per[b][name].seconds - per[a][name].seconds) / (b - a) * 1000
            memory_each = (per[b][name].peak_mb - per[a][name].peak_mb) / (b - a) * 1000
            print(f"  {name:22} {time_each:.3f} ms, {memory_each:.1f} kB of peak memory")
    top = per[large]
    megabytes, render = pages[large]
    print(f"targets at {large}: report {top['report'].seconds:.2f} s (< 5 s); page "
          f"{megabytes:.1f} MB (< 15 MB), rendered in {render:.2f} s (< 5 s)")  # fmt: skip


# --- cluster: the driver's cost per pass -----------------------------------------------------

NEAR_INSTANT = "#!/bin/bash\nexit 0\n"


@dataclass
class PassClock:
    """A reporter that notes, at the end of every pass, the driver thread's CPU time and how
    many experiments had ended."""

    passes: list[tuple[float, int]] = field(default_factory=list)

    def submitted(self, record: object, done: int, total: int) -> None: ...
    def ended(self, record: object, done: int, total: int) -> None: ...
    def analysed(self, record: object, result: object, done: int, total: int) -> None: ...
    def note(self, text: str) -> None: ...

    def waiting(self, state: object, blind: str | None) -> None:
        from nvrx.campaign.session import SessionState

        assert isinstance(state, SessionState)
        self.passes.append((time.thread_time(), state.count("ended")))


def cluster_bench(experiments: int, window: int) -> None:
    from nvrx.config import load_config
    from nvrx.inject.driver import Campaign
    from nvrx.inject.plan import make_plan, start_session
    from nvrx.inject.window import Window
    from nvrx.slurm import Slurm

    pool = " ".join(f"SIGKILL:{i % 8}:{1 + i // 8}:2" for i in range(experiments))
    with tempfile.TemporaryDirectory(prefix="nvrx-scale-", dir=os.environ.get("TMPDIR")) as tmp:
        base = Path(tmp)
        script = base / "near_instant.sbatch"
        script.write_text(NEAR_INSTANT)
        cli = {
            "inject.workload": ("cpu_fault_demo", "bench"),
            "inject.sbatch_script": (str(script), "bench"),
            "inject.pool": (pool, "bench"),
            "inject.base_experiments_dir": (str(base), "bench"),
            "inject.batch_size": (window, "bench"),
            "slurm.poll_interval": (1.0, "bench"),
            "slurm.gpus_per_node": (4, "bench"),
        }
        loaded = load_config(cli=cli, environ={})
        plan = make_plan(loaded)
        session = start_session(plan, loaded, ["bench"], window=Window(window))
        clock = PassClock()
        started, cpu0 = time.monotonic(), time.thread_time()
        outcome = Campaign(
            session, Slurm(loaded.config.slurm), clock, window=Window(window), poll_interval=1.0
        ).run()
        wall = time.monotonic() - started
        assert outcome.complete and outcome.error is None, outcome.error
    print(f"{experiments} experiments, window {window}: {wall:.0f} s, {len(clock.passes)} passes, "
          f"driver CPU {time.thread_time() - cpu0:.1f} s")  # fmt: skip
    # Passes grouped by the hundred of experiments ended when they ran.
    groups: dict[int, list[float]] = {}
    previous = cpu0
    for cpu, ended in clock.passes:
        groups.setdefault(min(ended // 100, experiments // 100 - 1), []).append(cpu - previous)
        previous = cpu
    print("  ended      passes  CPU per pass  CPU per experiment")
    firsts = lasts = (0.0, 0.0)
    for hundred in sorted(groups):
        costs = groups[hundred]
        per_pass = statistics.mean(costs) * 1000
        per_experiment = sum(costs) / 100 * 1000
        if hundred == min(groups):
            firsts = (per_pass, per_experiment)
        lasts = (per_pass, per_experiment)
        print(f"  {hundred * 100:4}-{hundred * 100 + 99:<4}  {len(costs):6}  {per_pass:9.2f} ms"
              f"  {per_experiment:11.2f} ms")  # fmt: skip
    print(f"last hundred against the first: {lasts[0] / firsts[0]:.2f}x per pass, "
          f"{lasts[1] / firsts[1]:.2f}x per experiment (target: flat, about 1.0x)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="part", required=True)
    journal = sub.add_parser("journal", help="report, page and resume of generated sessions")
    journal.add_argument("--experiments", type=int, nargs="+", default=[100, 1000, 10_000])
    journal.add_argument("--runs", type=int, default=1, help="runs of each command (best kept)")
    journal.add_argument("--hostile", action="store_true", help="the page's worst case")
    cluster = sub.add_parser("cluster", help="driver CPU per pass on the local cluster")
    cluster.add_argument("--experiments", type=int, default=1000)
    cluster.add_argument("--window", type=int, default=8)
    args = parser.parse_args()
    if args.part == "journal":
        journal_bench(sorted(args.experiments), args.runs, hostile=args.hostile)
    else:
        cluster_bench(args.experiments, args.window)


if __name__ == "__main__":
    main()
