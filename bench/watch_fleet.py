"""A fleet watch pass over many chains, whole command, against 100 single-chain watches of the
same chains measured in the same run, on the local cluster (Slurm answers for every chain).

    .venv/bin/python bench/watch_fleet.py [--chains 100] [--files 1000] [--runs 5]

Each chain is a work dir with a chain manifest and `--files` NVRx cycle-info files (spread over
10 generations, as `bench/watch_pass.py` writes them). What is timed is what cron runs: a fresh
`nvrx watch` process, from start-up to exit, with its state dir, after one cold pass filled
every chain's cycle cache ("warm"). Printed: the warm fleet pass (target at most 1 s for 100
chains x 1,000 files), the same chains watched one `nvrx watch --work-dir` each, one after
another (target: the fleet at most 0.1x that), the Slurm commands a fleet pass ran (the goal: 1
squeue + at most 1 sacct), and the warm fleet pass at 1k / 10k / 100k files, per file, to show
the growth is linear or better. For scale, the same pass over one chain of 10 files, timed in
turns with the fleet pass: start-up, settings and the two Slurm commands, what no fleet pass can
go below.

Every figure is the median of `--runs` fresh processes (this machine's timings spread by a
tenth or more from run to run). nvrx's modules are byte-compiled first, as an installed package
is: an editable checkout under PYTHONDONTWRITEBYTECODE would otherwise compile every edited
module in every run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from watch_pass import populate

NVRX = [sys.executable, "-c", "from nvrx.cli import main; main()", "watch"]


def make_chain(root: Path, index: int, files: int) -> Path:
    work = root / f"chain{index:03d}"
    work.mkdir(parents=True)
    populate(work, files, 10)
    script = work / "generation.sh"
    script.write_text("#!/bin/bash\n")
    now = datetime.now(UTC).isoformat()
    manifest = {
        "schema_version": 1,
        "chain_id": secrets.token_hex(5),
        "job_name": f"bench-fleet-{index:03d}",
        "work_dir": str(work),
        "script": str(script),
        "script_sha256": hashlib.sha256(script.read_bytes()).hexdigest(),
        "depth": 10,
        "shape": {},
        "submit_options": {},
        "settings": {},
        "submitter": {
            "user": "root",
            "host": "bench",
            "nvrx_version": "0",
            "argv": [],
            "cwd": str(work),
        },
        "created_at": now,
        "updated_at": now,
        "generations": [
            {
                "index": g,
                "job_id": str(100_000 + g),
                "comment": f"nvrx-chain=x gen={g}",
                "submitted_at": now,
            }
            for g in range(10)
        ],
        "cancelled_at": now,  # a finished chain: nothing is expected in the queue
    }
    (work / "chain.json").write_text(json.dumps(manifest))
    return work


def run(argv: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 2):
        raise SystemExit(f"{' '.join(argv[4:8])}... exited {done.returncode}: {done.stderr}")
    return seconds, done.stdout


def fleet_pass(root: Path, state: Path, runs: int) -> tuple[float, int]:
    """(median warm seconds, Slurm commands of a pass)."""
    argv = [*NVRX, "--fleet", str(root), "--state-dir", str(state), "--json"]
    run(argv)  # cold: fills every chain's cycle cache
    # On a cluster the files were written long ago: flush what was just written (the files, the
    # caches) rather than time the passes against the kernel's writeback of it.
    os.sync()
    times, commands = [], 0
    for _ in range(runs):
        seconds, out = run(argv)
        times.append(seconds)
        commands = json.loads(out.strip().splitlines()[-1])["slurm_commands"]
    return statistics.median(times), commands


def paired(fleet: list[str], floor: list[str], runs: int) -> tuple[list[float], list[float]]:
    """Warm passes of the fleet and of the one-chain floor, taken in turns (fleet, floor,
    fleet, ...) so both see the machine in the same state: this machine's speed drifts by a
    tenth or more over a minute."""
    run(fleet)
    run(floor)  # cold: fills the caches
    os.sync()
    a: list[float] = []
    b: list[float] = []
    for _ in range(runs):
        a.append(run(fleet)[0])
        b.append(run(floor)[0])
    return a, b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=100)
    parser.add_argument("--files", type=int, default=1000, help="cycle files per chain")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    package = Path(__file__).resolve().parents[1] / "src" / "nvrx"
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(package)], check=True, capture_output=True
    )
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        base = Path(tmp)
        root = base / "team"
        dirs = [make_chain(root, i, args.files) for i in range(args.chains)]
        total = args.chains * args.files
        make_chain(base / "floor", 0, 10)
        fleet_argv = [*NVRX, "--fleet", str(root), "--state-dir", str(base / "state-fleet")]
        floor_argv = [*NVRX, "--fleet", str(base / "floor"), "--state-dir", str(base / "s1")]
        fleet_times, floor_times = paired(
            [*fleet_argv, "--json"], [*floor_argv, "--json"], args.runs
        )
        warm, floor = statistics.median(fleet_times), statistics.median(floor_times)
        commands = json.loads(run([*fleet_argv, "--json"])[1].strip().splitlines()[-1])[
            "slurm_commands"
        ]
        singles = 0.0
        state = base / "state-single"
        for d in dirs:  # warm each chain's own cache first, as a cron per chain would have
            run([*NVRX, "--work-dir", str(d), "--state-dir", str(state), "--json"])
        for d in dirs:
            singles += run([*NVRX, "--work-dir", str(d), "--state-dir", str(state), "--json"])[0]
        print(f"{args.chains} chains x {args.files} cycle files ({total:,} files), warm passes:")
        low, high = min(fleet_times), max(fleet_times)
        print(f"  fleet pass:                 {warm:7.3f} s  (target <= 1 s; {low:.3f}-{high:.3f})")
        print(
            f"  one chain of 10 files:      {floor:7.3f} s  (start-up, settings, Slurm: the floor,"
            " taken in turns with the fleet)"
        )
        above = warm - floor
        print(f"  fleet above the floor:      {above:7.3f} s  (the {args.chains} chains alone)")
        print(f"  {args.chains} single-chain watches: {singles:7.3f} s")
        print(f"  fleet / singles:            {warm / singles:7.3f}  (target <= 0.1)")
        print(f"  Slurm commands per fleet pass: {commands} (goal: 1 squeue + at most 1 sacct)")
        print("growth (warm fleet pass, 10 chains, then 100):")
        for chains, files in ((10, 100), (10, 1000), (100, 1000)):
            sub = base / f"growth-{chains}-{files}"
            for i in range(chains):
                make_chain(sub, i, files)
            seconds, _ = fleet_pass(sub, base / f"state-{chains}-{files}", args.runs)
            n = chains * files
            print(f"  {n:>7,} files: {seconds:7.3f} s, {1e6 * seconds / n:8.1f} us per file")
            shutil.rmtree(sub)


if __name__ == "__main__":
    main()
