#!/usr/bin/env python3
"""Write three example chains for `nvrx watch` to read, dated relative to now (cycle-info files
age: a file written for yesterday would show any chain as stalled today).

    python3 examples/chains/make_chains.py DIR        # DIR/healthy, DIR/storm, DIR/stalled
    nvrx watch --platform none --work-dir DIR/storm   # cycle files only: no cluster needed
    nvrx watch --platform none --fleet DIR            # all three in one pass

The docs use DIR=/tmp/exrun/chains, outside the repository (`chains` in its root is ignored by
git, so a run from there leaves nothing untracked either).

Each chain is what a real one leaves in its work dir (docs/file-contracts.md): cycle-info files
under nvrx/<job>/cycle_infos/ as ft_launcher writes them, and Megatron's checkpoint-iteration
file under checkpoints/ with the mtime of its last save.

- healthy: generation 7001, one cycle open for 2 hours with a hot spare, saved 4 minutes ago.
- storm:   generation 7101, six cycles of about 90 s each in the last 15 minutes on the same
  nodes, no save since the storm began: restart_storm, stalled_progress and suspect_node.
- stalled: generation 7201, one cycle open for 3 hours whose last save was 2.5 hours ago:
  cycle_stalled (training may be hung).

Standard library only; it writes nothing outside DIR and refuses a DIR that already holds one
of the chains, even as a link (nothing already there is overwritten), and a DIR that is a link
to no directory (it never writes through a link).
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

STAMP = "%Y-%m-%dT%H:%M:%S.%fZ"
CHAINS = ("healthy", "storm", "stalled")


def cycle(work: Path, job: str, n: int, start: datetime, end: datetime | None, nodes: str,
          standby: str) -> None:  # fmt: skip
    directory = work / "nvrx" / job / "cycle_infos"
    directory.mkdir(parents=True, exist_ok=True)  # below `work`, which this run created
    doc = {
        "job_id": job,
        "attempt_index": 0,
        "cycle_number": n,
        "cycle_start_time": start.strftime(STAMP),
        "cycle_end_time": end.strftime(STAMP) if end else "",
        "cycle_log_file": str(work / "logs" / f"train_{job}_cycle{n}.log"),
        "active_nodes": nodes,
        "standby_nodes": standby,
        "generation": str(n + 1 if end else n),
        "active_ranks": "0-15",
    }
    write_new(directory / f"cycle_info.{job}.0.{n}", json.dumps(doc, indent=2) + "\n")


def checkpoint(work: Path, iteration: int, saved: datetime) -> None:
    path = work / "checkpoints" / "latest_checkpointed_iteration.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_new(path, f"{iteration}\n")
    os.utime(path, (saved.timestamp(), saved.timestamp()))


def write_new(path: Path, text: str) -> None:
    """A new file: never one already there, nor the target of a link put in its place."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: make_chains.py DIR\n")
        return 2
    root = Path(os.path.abspath(argv[0]))  # not resolved: a link is seen as a link
    if root.is_symlink() and not root.is_dir():
        sys.stderr.write(f"make_chains.py: {root} is a link to no directory; choose a DIR\n")
        return 2
    taken = [name for name in CHAINS if os.path.lexists(root / name)]
    if taken:
        sys.stderr.write(f"make_chains.py: {root / taken[0]} exists; choose an empty DIR\n")
        return 2
    try:
        write_chains(root)
    except OSError as exc:  # one line naming the path, not a traceback
        sys.stderr.write(f"make_chains.py: {exc.filename or root}: {exc.strerror}\n")
        return 1
    for name in CHAINS:
        sys.stdout.write(f"{root / name}\n")
    return 0


def write_chains(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name in CHAINS:
        (root / name).mkdir()  # new: what is written below it cannot be reached through a link
    now = datetime.now(UTC)
    minutes = lambda m: now - timedelta(minutes=m)  # noqa: E731

    healthy = root / "healthy"
    cycle(healthy, "7001", 0, minutes(125), None, "n[1-2]", "n3")
    checkpoint(healthy, 4200, minutes(4))

    storm = root / "storm"
    cycle(storm, "7101", 0, minutes(180), minutes(16), "n[4-5]", "n6")
    for n, started in enumerate((15, 12.5, 10, 7.5, 5), start=1):
        cycle(storm, "7101", n, minutes(started), minutes(started - 1.5), "n[4-5]", "n6")
    cycle(storm, "7101", 6, minutes(2.5), None, "n[4-5]", "n6")
    checkpoint(storm, 900, minutes(20))

    stalled = root / "stalled"
    cycle(stalled, "7201", 0, minutes(180), None, "n[7-8]", "n9")
    checkpoint(stalled, 1500, minutes(150))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
