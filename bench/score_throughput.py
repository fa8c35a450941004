"""Judge throughput: 34 experiments (the upstream campaign's job count in the reference) against
a local OpenAI-compatible server that answers after 1 s. Three runs in one invocation: sequential
(concurrency 1, upstream's behaviour), concurrency 8, and a re-run answered from the cache.
Prints wall times, their ratios against the sequential run, and the requests each run made.

Run:  .venv/bin/python bench/score_throughput.py [--cases 34] [--delay 1.0] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fake_openai import GOOD_ANSWER, FakeOpenAI, Reply

from nvrx.score.cache import VerdictCache
from nvrx.score.llm import Endpoint, LlmJudge
from nvrx.score.model import Case, GroundTruth

FAULTS = ["SEGFAULT", "GPU_SLEEP", "SIGKILL", "LOCK_GIL", "WORKLOAD_EXC", "SIGTERM", "GPU_ERROR"]


def cases(n: int) -> list[Case]:
    return [
        Case(
            id=f"exp-{i}",
            truth=GroundTruth.build(FAULTS[i % len(FAULTS)], i % 8, 5, 2, 4, 32),
            log_excerpt=f"{i % 8}: something went wrong in experiment {i}",
            log_attribution=f"STOP - DONT RESTART IMMEDIATE\nPrimary issues: [rank {i % 8}]",
            fr_output="no_dumps",
        )
        for i in range(n)
    ]


def timed(judge: LlmJudge, batch: list[Case]) -> tuple[float, int, int]:
    started = time.perf_counter()
    verdicts = asyncio.run(judge.judge_all(batch))
    elapsed = time.perf_counter() - started
    assert all(v.status == "scored" for v in verdicts), [v.reason for v in verdicts]
    return elapsed, judge.usage.requests, sum(v.cache_hit for v in verdicts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=34)
    parser.add_argument("--delay", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    batch = cases(args.cases)
    slow = Reply(content=GOOD_ANSWER, delay=args.delay)
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAI(default=slow) as srv:

        def judge(concurrency: int, cache: VerdictCache | None) -> LlmJudge:
            return LlmJudge(
                Endpoint(srv.base_url, "bench-judge"), concurrency=concurrency, cache=cache
            )

        seq = timed(judge(1, None), batch)
        cache = VerdictCache(Path(tmp) / "cache")
        par = timed(judge(args.concurrency, cache), batch)
        hit = timed(judge(args.concurrency, cache), batch)

    print(f"{args.cases} experiments, server answers after {args.delay:g} s")
    print(f"{'run':<28} {'wall s':>8} {'vs seq':>8} {'requests':>9} {'cache hits':>11}")
    for name, (wall, requests, hits) in [
        ("sequential (upstream)", seq),
        (f"concurrency {args.concurrency}", par),
        (f"concurrency {args.concurrency}, cached", hit),
    ]:
        print(f"{name:<28} {wall:>8.2f} {wall / seq[0]:>8.3f} {requests:>9} {hits:>11}")


if __name__ == "__main__":
    main()
