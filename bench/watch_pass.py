"""One `watch --platform none` pass over 10,000 cycle-info files, whole command, against a
baseline measured in the same run: upstream's stdlib-only watcher on the same files.

    .venv/bin/python bench/watch_pass.py --upstream-watch DIR [--files 10000] [--runs 5]
    .venv/bin/python bench/watch_pass.py --upstream-watch DIR --files 100000 --generations 1000

(the second: a long chain, 1,000 generations of 100 cycles, where the first pass's target is
met; on 10,000 files the start-up floor below is half of upstream's pass).

DIR is upstream's `examples/fault_tolerance/deployment/watch` folder (the one holding the
`nvrx_watch` package), fetched into a scratch directory: it is not part of this repository.

What is timed is what cron runs: a fresh process, from start-up to exit, with its state dir.
"first" is a pass with an empty state dir; "repeat" is the next pass over the same, unchanged
files. Upstream re-reads and re-parses every file on every pass; nvrx keeps a per-chain cache
keyed by (mtime, size, inode), so its repeat pass costs a listing and one lstat per file. The
targets: first <= 1.0x upstream's pass, repeat <= 0.5x. The "floor" line is what importing
typer and pydantic costs by itself (the one CLI and the one settings model every nvrx command
uses, against upstream's stdlib-only start-up): whatever nvrx does, a pass costs at least that.

The second part times the reader alone, in process (cold cache vs warm cache, and the floor:
listing + lstat, which no stat-keyed cache can go below). The OS page cache is warm for every
pass (the files were just written); on a shared filesystem, where every open and read is a
network round trip, nvrx's repeat pass gains more.
"""

from __future__ import annotations

import argparse
import gc
import glob
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from nvrx.watch.cyclecache import CycleCache
from nvrx.watch.cycles import ReadStats, read_cycles

OLD_NS = 1_700_000_000 * 1_000_000_000  # settled files: outside the cache's racy window


def populate(root: Path, files: int, generations: int) -> str:
    """NVRx-format files spread over `generations` array jobs, as a chain leaves them on disk:
    `<root>/nvrx/<array_job_id>/cycle_infos/cycle_info.<job>.<attempt>.<cycle>`, plus each
    generation's `.current` symlink. Returns the chain-wide glob the watcher would use."""
    per_gen = max(1, -(-files // generations))
    written = 0
    for g in range(generations):
        if written >= files:
            break
        job = str(100_000 + g)
        directory = root / "nvrx" / job / "cycle_infos"
        directory.mkdir(parents=True)
        last = ""
        for i in range(min(per_gen, files - written)):
            attempt, cycle = divmod(i, 10)
            start = OLD_NS // 1_000_000_000 + g * 86_400 + i * 600
            payload = {
                "job_id": job,
                "attempt_index": attempt,
                "cycle_number": cycle,
                "cycle_start_time": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(start)),
                "cycle_end_time": time.strftime(
                    "%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(start + 590)
                ),
                "cycle_log_file": f"/w/logs/app_cycle{cycle}.log",
                "active_nodes": "node[001-064]",
                "standby_nodes": "node[065-068]",
                "generation": "1",
                "active_ranks": "0-63",
            }
            last = f"cycle_info.{job}.{attempt}.{cycle}"
            path = directory / last
            path.write_text(json.dumps(payload, indent=2))
            os.utime(path, ns=(OLD_NS, OLD_NS))
            written += 1
        os.symlink(last, directory / f"cycle_info.{job}.current")
        # Earlier generations' directories are old too: nothing was renamed into them since.
        os.utime(directory, ns=(OLD_NS, OLD_NS))
    return str(root / "nvrx" / "*" / "cycle_infos" / "cycle_info.*")


@dataclass
class Pass:
    seconds: float
    digest: str  # of the cycles read: cold and warm must agree
    cycles: int
    skipped: int
    stats: ReadStats
    built: float = 0.0  # seconds to build every record afterwards (the pass builds only some)


def timed_pass(pattern: str, cache_path: Path) -> Pass:
    """One pass as a cron invocation does it (load the cache, read, save), timed from a clean
    heap: each cron pass is a fresh process, and results of an earlier pass still alive here
    would make the garbage collector, not the pass, dominate the measurement."""
    gc.collect()
    t0 = time.perf_counter()
    found, skipped, stats = read_cycles([pattern], CycleCache(cache_path))
    seconds = time.perf_counter() - t0
    # Outside the timing: every record, built (a warm read builds them only when asked for).
    t1 = time.perf_counter()
    records = list(found)
    built = time.perf_counter() - t1
    digest = hashlib.sha256(repr(records).encode()).hexdigest()
    return Pass(seconds, digest, len(found), len(skipped), stats, built)


def stat_floor(pattern: str) -> float:
    """Seconds to list the directories and lstat every file, nothing else: what any cache keyed
    on a file's stat must pay per pass, however it is implemented."""
    gc.collect()
    t0 = time.perf_counter()
    for directory in glob.glob(os.path.dirname(pattern)):
        with os.scandir(directory) as entries:
            for entry in entries:
                entry.stat(follow_symlinks=False)
    return time.perf_counter() - t0


def command_seconds(argv: list[str], cwd: Path | None, state: Path, first: bool) -> float:
    """Wall seconds of one whole watch command. The bench's chain has a critical finding, which
    nvrx says with exit 1 (docs/output-contract.md) and upstream's watcher with exit 2."""
    if first:
        shutil.rmtree(state, ignore_errors=True)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          timeout=600, check=False)  # fmt: skip
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1, 2):
        raise SystemExit(f"{argv[:4]} exited {done.returncode}")
    return seconds


def whole_commands(root: Path, pattern: str, upstream: Path | None, runs: int) -> None:
    py = sys.executable
    common = ["--platform", "none", "--work-dir", str(root), "--cycle-info-glob", pattern,
              "--job-name", "bench"]  # fmt: skip
    commands: dict[str, tuple[list[str], Path | None]] = {
        "nvrx watch": ([py, "-c", "from nvrx.cli import main; main()", "watch", *common], None),
    }
    if upstream is not None:
        commands["upstream nvrx-watch"] = ([py, "-m", "nvrx_watch", *common], upstream)
    figures: dict[tuple[str, str], float] = {}
    for name, (argv, cwd) in commands.items():
        state = root / "state" / name.replace(" ", "-")
        firsts, repeats = [], []
        for _ in range(runs):  # interleaved, so a noisy moment costs both alike
            firsts.append(command_seconds([*argv, "--state-dir", str(state)], cwd, state, True))
            repeats.append(command_seconds([*argv, "--state-dir", str(state)], cwd, state, False))
        figures[name, "first"] = statistics.median(firsts)
        figures[name, "repeat"] = statistics.median(repeats)
    # The floor of any typer + pydantic command on this machine: start-up with nothing read.
    floor = statistics.median(
        command_seconds([py, "-c", "import typer, typer._adapters, pydantic"], None, root, False)
        for _ in range(runs)
    )
    print(f"whole command, median of {runs} fresh processes each:")
    base = "upstream nvrx-watch"
    for name in commands:
        for kind in ("first", "repeat"):
            seconds = figures[name, kind]
            ratio = ""
            if name != base and (base, "first") in figures:
                # Upstream has no cache: its repeat pass is another first pass, so both of
                # nvrx's passes are compared with upstream's pass of the same kind.
                ratio = f"  {seconds / figures[base, kind]:5.2f}x upstream's {kind} pass"
            print(f"  {name:20} {kind:6} {seconds * 1000:7.0f} ms{ratio}")
    if (base, "first") not in figures:
        print("  (no --upstream-watch DIR given: no baseline, no ratios)")
    else:
        share = floor / figures[base, "repeat"]
        print(
            f"  floor: importing typer and pydantic alone takes {floor * 1000:.0f} ms, "
            f"{share:.2f}x upstream's pass, before nvrx reads a file"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--generations", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3, help="best of N, reader alone")
    parser.add_argument("--runs", type=int, default=5, help="median of N, whole commands")
    parser.add_argument("--upstream-watch", type=Path, help="upstream's watch/ folder")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="nvrx-watch-bench-") as tmp:
        root = Path(tmp)
        pattern = populate(root, args.files, args.generations)
        whole_commands(root, pattern, args.upstream_watch, args.runs)
        print()
        print("reader alone, in process:")
        colds: list[Pass] = []
        warms: list[Pass] = []
        for run in range(args.repeat):
            cache_path = root / "state" / f"cycles-cache-{run}.json"
            colds.append(timed_pass(pattern, cache_path))
            # A new CycleCache loads the file the cold pass wrote, as the next cron run would.
            warms.append(timed_pass(pattern, cache_path))
        floor = min(stat_floor(pattern) for _ in range(args.repeat))
        cold = min(colds, key=lambda p: p.seconds)
        warm = min(warms, key=lambda p: p.seconds)
        same = len({p.digest for p in colds + warms}) == 1
        ratio = warm.seconds / cold.seconds if cold.seconds else float("inf")
        size = (root / "state" / "cycles-cache-0.json").stat().st_size

        print(f"files: {args.files} in {args.generations} generation dirs; cycles: {cold.cycles}")
        print(f"skipped per pass: {cold.skipped} (the .current symlinks)")
        print(
            f"cold (empty cache):  {cold.seconds * 1000:8.1f} ms   "
            f"parsed={cold.stats.parsed} cached={cold.stats.cached}"
        )
        print(
            f"warm (cache loaded): {warm.seconds * 1000:8.1f} ms   "
            f"parsed={warm.stats.parsed} cached={warm.stats.cached}"
        )
        print(
            f"  + building every record of the warm read: {warm.built * 1000:.1f} ms (a pass "
            "builds the current generation's only)"
        )
        print(f"floor (list + lstat every file, no cache, no parse): {floor * 1000:.1f} ms")
        print(f"cache file: {size / 1024:.0f} KiB; every pass read the same cycles: {same}")
        print(f"warm / cold = {ratio:.3f} (best of {args.repeat} each)")
        verdict = "holds" if ratio <= 0.2 else "does NOT hold"
        print(f"expectation warm <= 0.2 x cold: {verdict}")


if __name__ == "__main__":
    main()
