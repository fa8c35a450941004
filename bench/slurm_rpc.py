"""Slurm commands per poll pass, with 1, 8 and 64 jobs in flight, on the local cluster.

nvrx's StatePoller should cost a constant number of Slurm commands per pass: 1 (one squeue),
or 2 when some jobs just left the queue (plus one sacct). The baseline, measured in the same run
on the same jobs, is upstream's per-job polling (one `scontrol show job` per job per pass).

Run with the local cluster up:  .venv/bin/python bench/slurm_rpc.py [--sizes 1,8,64]
"""

from __future__ import annotations

import argparse
import subprocess
import time
import uuid

from nvrx.config import SlurmSettings
from nvrx.slurm import Slurm, SubmitOptions
from nvrx.slurm.poller import StatePoller


def naive_pass(job_ids: list[str]) -> int:
    """Upstream watch_and_analyze.sh: one scontrol per job per pass. Returns commands run."""
    for job_id in job_ids:
        subprocess.run(
            ["scontrol", "show", "job", "-o", job_id], capture_output=True, timeout=30, check=False
        )
    return len(job_ids)


def measure(size: int, passes: int) -> tuple[list[int], list[int], float, float]:
    slurm = Slurm(SlurmSettings())
    name = f"nvrx-bench-{uuid.uuid4().hex[:6]}"
    # A quarter of the jobs end at once (they leave the queue mid-run); the rest stay in flight.
    short = max(1, size // 4) if size > 1 else 0
    ids: list[str] = []
    try:  # from the first submit on: a failed one must not leave `sleep 300` jobs behind
        for i in range(size):
            wrap = "true" if i < short else "sleep 300"
            ids.append(slurm.submit(SubmitOptions(job_name=name), wrap=wrap).job_id)
        poller = StatePoller(slurm, min_interval=0)
        nvrx_counts: list[int] = []
        naive_counts: list[int] = []
        nvrx_seconds = naive_seconds = 0.0
        for _ in range(passes):
            t0 = time.perf_counter()
            nvrx_counts.append(poller.poll(ids).commands)
            t1 = time.perf_counter()
            naive_counts.append(naive_pass(ids))
            t2 = time.perf_counter()
            nvrx_seconds += t1 - t0
            naive_seconds += t2 - t1
            time.sleep(1.0)
        return nvrx_counts, naive_counts, nvrx_seconds / passes, naive_seconds / passes
    finally:
        slurm.cancel(name=name, user=Slurm.current_user())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,8,64")
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes must be comma-separated whole numbers, got {args.sizes!r}")
    if args.passes < 1 or any(size < 1 for size in sizes):
        parser.error(f"--passes and every size must be at least 1 (--passes {args.passes})")
    print(
        f"{'jobs':>5}  {'nvrx cmds/pass':<18} {'per-job cmds/pass':<20} "
        f"{'cmd ratio':>9}  {'s/pass nvrx':>11}  {'s/pass per-job':>14}  {'time ratio':>10}"
    )
    for size in sizes:
        ours, naive, t_ours, t_naive = measure(size, args.passes)
        ratio = sum(ours) / sum(naive)
        print(
            f"{size:>5}  {','.join(map(str, ours)):<18} {','.join(map(str, naive)):<20} "
            f"{ratio:>9.3f}  {t_ours:>11.3f}  {t_naive:>14.3f}  {t_ours / t_naive:>10.3f}"
        )
    print("expected: nvrx 1 command per pass, 2 in a pass where some jobs just left the queue")


if __name__ == "__main__":
    main()
