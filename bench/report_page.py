"""The report page of a 1,000-experiment session: its size, and how long the headless browser
takes to render it, against an empty page rendered in the same run (the browser's own start-up).

    .venv/bin/python bench/report_page.py [--experiments 1000] [--runs 5]

The session is built on disk as inject-loop leaves it (journal, analysis files with the longest
evidence the page keeps), and the page is written by `write_html`, as `nvrx report --html` does.
Targets: under 5 MB, and rendered in under 2 s beyond the empty page.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from nvrx.campaign.pool import Experiment, FaultType
from nvrx.campaign.session import Session
from nvrx.inject.driver import CampaignSpec, record_session
from nvrx.inject.report import write_html
from nvrx.inject.window import Window
from nvrx.score.model import DIMENSIONS, PASS_VALUE

FAULTS = ("SEGFAULT", "GPU_SLEEP", "SIGKILL", "WORKLOAD_EXC", "GPU_ERROR", "SIGTERM")


def build_session(base: Path, experiments: int) -> Path:
    session = Session.create(base, now=datetime(2026, 1, 1))
    planned = []
    for i in range(experiments):
        nodes = (2, 4, 8)[i % 3]
        planned.append(Experiment(FaultType(FAULTS[i % len(FAULTS)]), i % (nodes * 4), 5, nodes))
    spec = CampaignSpec(workload="w", script="s", gpus_per_node=4, time_limit="00:10:00")
    record_session(session, spec, planned, pool_source="b", settings={}, argv=[], window=Window(2))
    line = "[rank3]: RuntimeError: NCCL watchdog timeout waiting for rank 1 " * 2
    records = session.state().records
    for i, record in enumerate(records):
        session.journal.append("submitted", index=i, job_id=str(1000 + i), comment="c")
        session.journal.append("ended", index=i, job_id=str(1000 + i), state="FAILED", exit="1:0")
        analysis = record.dir / "analysis"
        analysis.mkdir(parents=True, exist_ok=True)
        (analysis / "stripped.log").write_text((line + "\n") * 400)
        (analysis / "log_attribution.txt").write_text("RESTART IMMEDIATE\n" + line * 20)
        (analysis / "fr_analysis.txt").write_text("pg  missing\n" + "0 1\n" * 500)
        dims = {d: PASS_VALUE[d] for d in DIMENSIONS}
        if i % 3 == 0:
            dims["rank_primary"] = "false"
        verdict = {"case": f"c{i}", "status": "scored", "judge": "rules", "notes": line, **dims}
        session.journal.append("analysed", index=i, validity="valid", reason="r", verdict=verdict)
    return session.dir


def render_seconds(browser: str, page: Path, profile: Path) -> float:
    shot = profile / "shot.png"
    argv = [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
            "--window-size=1200,900", f"--screenshot={shot}", page.as_uri()]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True, timeout=300)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--experiments", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    with tempfile.TemporaryDirectory(prefix="nvrx-page-bench-") as tmp:
        root = Path(tmp)
        session = build_session(root / "sessions", args.experiments)
        start = time.perf_counter()
        page = write_html(session)
        build = time.perf_counter() - start
        size = page.stat().st_size
        print(f"{args.experiments} experiments: page {size / 1e6:.3f} MB (target < 5 MB), "
              f"written in {build:.2f} s")  # fmt: skip
        if browser is None:
            sys.exit("no chromium on PATH: no render time (apt install chromium)")
        empty = root / "empty.html"
        empty.write_text("<!DOCTYPE html><html><body></body></html>")
        base = statistics.median(
            render_seconds(browser, empty, root / f"p{i}") for i in range(args.runs)
        )
        full = statistics.median(
            render_seconds(browser, page, root / f"q{i}") for i in range(args.runs)
        )
        print(f"headless render, median of {args.runs}: empty page {base:.2f} s, "
              f"the report {full:.2f} s: {full - base:.2f} s beyond the browser's start-up "
              f"(target < 2 s), {full / base:.2f}x the empty page")  # fmt: skip


if __name__ == "__main__":
    main()
