"""Start-up: how long `nvrx --help` and `nvrx watch --help` take, against a baseline measured in
the same run: upstream's stdlib-only watcher, `python -m nvrx_watch --help`.

    .venv/bin/python bench/startup.py --upstream-watch DIR [--runs 15]

DIR is upstream's `examples/fault_tolerance/deployment/watch` folder (the one that holds the
`nvrx_watch` package), fetched into a scratch directory: it is not part of this repository.
Without it the baseline is a stdlib argparse command line of the same shape, and the output says
so. Each figure is the median of `--runs` fresh processes, all run by this interpreter.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STDLIB_CLI = (
    "import argparse, json, logging, dataclasses, datetime, pathlib\n"
    "p = argparse.ArgumentParser(prog='watch')\n"
    "for flag in ('--config', '--work-dir', '--job-name', '--state-dir', '--interval'):\n"
    "    p.add_argument(flag)\n"
    "p.parse_args(['--help'])\n"
)


def median_seconds(argv: list[str], runs: int, cwd: Path | None = None) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=True, timeout=60)  # fmt: skip
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream-watch", type=Path, help="upstream's watch/ folder")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    py = sys.executable
    if args.upstream_watch is not None:
        baseline_name = f"upstream nvrx-watch --help ({args.upstream_watch})"
        baseline = median_seconds(
            [py, "-m", "nvrx_watch", "--help"], args.runs, args.upstream_watch
        )
    else:
        baseline_name = "a stdlib argparse CLI (no --upstream-watch given)"
        baseline = median_seconds([py, "-c", STDLIB_CLI], args.runs)
    nvrx = [py, "-c", "from nvrx.cli import main; main()"]
    figures = {
        "nvrx --help": median_seconds([*nvrx, "--help"], args.runs, REPO),
        "nvrx watch --help": median_seconds([*nvrx, "watch", "--help"], args.runs, REPO),
    }
    print(f"baseline: {baseline_name}: {baseline * 1000:.0f} ms")
    for name, seconds in figures.items():
        print(f"  {name:20} {seconds * 1000:6.0f} ms  {seconds / baseline:5.2f}x the baseline")


if __name__ == "__main__":
    main()
