"""The built-in log analyser: how often it agrees with the real-log corpus (per category and per
format), and its cost on a large generated log against a baseline measured in the same run
(streaming the same file in blocks of lines and counting them, which any analyser must do; and a
plain case-insensitive regex scan of it for `error`, what a grep-like tool costs).

    .venv/bin/python bench/log_attribution.py [--mb 1024] [--cycles 1000]

The cost is measured in a child process per figure, so each peak memory (ru_maxrss) is its own.
Then a log of `--cycles` restart cycles of a 131,072-task job (each ends with srun naming every
task in one line) against one cycle of it: its time, peak memory and `--json` size, which the
task-id cap (per log) and the rank lists (128 named) keep near one cycle's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.hostile.inputs import many_cycle_log  # noqa: E402
from tests.real_logs import DIMENSIONS, load_corpus  # noqa: E402

from nvrx.analyze.logattr import attribute_log  # noqa: E402

_CHILD = """
import json, resource, sys, time
from pathlib import Path
mode, path = sys.argv[1], sys.argv[2]
start = time.perf_counter()
if mode == "analyse":
    from nvrx.analyze.command import attribute_file
    decision = attribute_file(Path(path)).decision
elif mode == "json":
    from nvrx.analyze.command import attribute_file
    decision = str(len(json.dumps(attribute_file(Path(path)).to_json())))
elif mode == "regex":
    import re
    from nvrx.files import read_line_blocks
    error = re.compile("error", re.IGNORECASE)
    hits = sum(len(error.findall(b)) for b in read_line_blocks(path, "log", max_line=4096))
    decision = str(hits)
else:
    from nvrx.files import read_line_blocks
    lines = sum(b.count("\\n") for b in read_line_blocks(path, "log", max_line=4096))
    decision = str(lines)
elapsed = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": elapsed, "peak_mb": peak, "decision": decision}))
"""


def accuracy() -> None:
    cases = load_corpus()
    by_category: Counter[tuple[str, bool]] = Counter()
    by_format: Counter[tuple[str, bool]] = Counter()
    by_part: Counter[tuple[str, bool]] = Counter()
    by_dimension: Counter[tuple[str, str, bool]] = Counter()
    for case in cases:
        result = attribute_log(case.text)
        ok = not case.disagreements(result)
        by_category[(case.category, ok)] += 1
        by_part[(case.part, ok)] += 1
        for fmt in case.formats:
            by_format[(fmt, ok)] += 1
        for dimension, agrees in case.dimensions(result).items():
            if agrees is not None:
                by_dimension[(case.part, dimension, agrees)] += 1
    total = sum(n for (_, ok), n in by_category.items() if ok)
    print(f"corpus: {total} of {len(cases)} cases agree ({100 * total / max(len(cases), 1):.0f}%)")
    # The held-out part first: its figure is the one that says how the rules generalise.
    for part in ("check", "tune"):
        good, bad = by_part[(part, True)], by_part[(part, False)]
        share = f"{100 * good / (good + bad):.0f}%" if good + bad else "no case yet"
        threads = len({c.source.partition("#")[0] for c in cases if c.part == part})
        print(f"  {part}: {good} of {good + bad} ({share}), from {threads} threads")
        dims = []
        for dimension in DIMENSIONS:
            right, wrong = (
                by_dimension[(part, dimension, True)],
                by_dimension[(part, dimension, False)],
            )
            dims.append(f"{dimension} {right}/{right + wrong}")
        print(f"    by dimension: {', '.join(dims)}")
    for title, counts in (("category", by_category), ("format", by_format)):
        print(f"  by {title}:")
        for name in sorted({k for k, _ in counts}):
            good, bad = counts[(name, True)], counts[(name, False)]
            print(f"    {name:18} {good:3} of {good + bad:3}")


def generated_log(path: Path, megabytes: int) -> None:
    """Interleaved `srun --label` lines of 8 ranks training (Megatron's iteration line), then
    rank 3's CUDA error and its peers' watchdog timeouts: the shape of a long real job's log."""
    line = (
        "{r}: [2026-01-01 00:00:00] iteration {i:>8}/ 100000 | consumed samples: {s:>10} | "
        "elapsed time per iteration (ms): 1234.5 | learning rate: 1.000000E-04 | global batch "
        "size:   128 | lm loss: 2.345678E+00 | loss scale: 1.0 | grad norm: 1.234 | number of "
        "skipped iterations:   0 | number of nan iterations:   0 |\n"
    )
    with path.open("w", encoding="utf-8") as out:
        written, i = 0, 0
        while written < megabytes << 20:
            text = line.format(r=i % 8, i=i // 8, s=i * 16)
            out.write(text)
            written += len(text)
            i += 1
        out.write("3: RuntimeError: CUDA error: an illegal memory access was encountered\n")
        for r in (0, 1, 2, 4, 5, 6, 7):
            out.write(
                f"{r}: [rank{r}]:[E ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
                "collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, "
                "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds\n"
            )


def measure(mode: str, path: Path) -> dict[str, float | str]:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, str(path)],
        capture_output=True, text=True, check=True, timeout=3600, cwd=REPO,
    )  # fmt: skip
    doc: dict[str, float | str] = json.loads(proc.stdout)
    return doc


def cost(megabytes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.log"
        generated_log(path, megabytes)
        size = path.stat().st_size / (1 << 20)
        base = measure("split", path)
        scan = measure("regex", path)
        run = measure("analyse", path)
    print(f"large log: {size:.0f} MB generated ({megabytes} MB of iterations, then a failure)")
    rows = (
        ("read + count (baseline)", base),
        ("regex scan for 'error'", scan),
        ("attribute_file", run),
    )
    for name, doc in rows:
        seconds, peak = float(doc["seconds"]), float(doc["peak_mb"])
        print(f"  {name:24} {seconds:7.2f} s  {size / seconds:7.1f} MB/s  peak {peak:7.0f} MB")
    ratio = float(run["seconds"]) / float(base["seconds"])
    memory = float(run["peak_mb"]) / float(base["peak_mb"])
    print(f"  ratio: {ratio:.2f}x the baseline's time, {memory:.2f}x its peak memory")
    print(f"  ratio: {float(run['seconds']) / float(scan['seconds']):.2f}x the regex scan's time")
    print(f"  decision: {run['decision']}")


def many_cycles(cycles: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        one, many = Path(tmp) / "one.log", Path(tmp) / "many.log"
        many_cycle_log(one, 1)
        many_cycle_log(many, cycles)
        base, run = measure("json", one), measure("json", many)
        size = many.stat().st_size
    print(f"{cycles} cycles of a 131,072-task job ({size / 1e3:.0f} kB):")
    for name, doc in (("1 cycle (baseline)", base), (f"{cycles} cycles", run)):
        print(f"  {name:24} {float(doc['seconds']):7.2f} s  peak {float(doc['peak_mb']):5.0f} MB"
              f"  --json {int(doc['decision']) / 1e3:8.1f} kB")  # fmt: skip
    ratio = float(run["seconds"]) / float(base["seconds"])
    memory = float(run["peak_mb"]) / float(base["peak_mb"])
    print(f"  ratio: {ratio:.2f}x one cycle's time, {memory:.2f}x its peak memory")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="size of the generated log (MB)")
    parser.add_argument("--cycles", type=int, default=1000, help="cycles of the wide-job log")
    args = parser.parse_args()
    accuracy()
    cost(args.mb)
    many_cycles(args.cycles)


if __name__ == "__main__":
    main()
