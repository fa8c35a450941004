"""`nvrx watch --html FILE`: the chain's timeline page, written after every pass.

What users rely on: the page draws every generation's cycles on their nodes with the restarts
and findings marked, is self-contained (no request, nothing injectable), stays bounded for a
chain of any length, and is never written over one of the pass's inputs.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from nvrx.watch.timeline import MAX_CYCLES

from .test_inject_html import FETCHES
from .test_watch_watcher import cycle_file, watch


def two_generations(work: Path) -> None:
    now = datetime.now(UTC)
    start = now - timedelta(hours=3)
    for i in range(3):  # generation 901: three cycles, two restarts
        cycle_file(
            work,
            "901",
            i,
            start + timedelta(minutes=20 * i),
            start + timedelta(minutes=20 * i + 15),
        )
    cycle_file(work, "902", 0, now - timedelta(minutes=30), None)  # the next one, still open


def test_the_page_draws_generations_cycles_restarts_and_findings(tmp_path: Path) -> None:
    work = tmp_path / "work"
    two_generations(work)
    page = tmp_path / "timeline.html"
    code, doc, _ = watch(work, tmp_path / "state", "--html", str(page))
    text = page.read_text()
    assert "4 cycles in 2 generation(s), 2 restart(s), on 3 node(s) (1 of them standby" in text
    assert text.count("class='bar standby'") == 4  # n3 stood by in every cycle
    for key in ("generation 901", "generation 902", "cycle still open", "standby spare",
                "restart (dashed)"):  # fmt: skip
        assert key in text  # a legend for every kind of mark drawn
    assert "<b>Goodput: " in text
    # Rows a label fits in, restarts wider than a hairline (and dashed: not colour alone).
    assert "height:18px;line-height:18px" in text
    assert re.search(r"\.tl \.restart\{[^}]*width:3px", text)
    assert text.count("class='bar cycle") == 4  # one bar per cycle: its two nodes are neighbours
    assert len(re.findall(r"title='restart: cycle 901\.0\.[12]'", text)) == 2
    assert text.count("class='bar cycle open'") == 1  # the open cycle is hatched
    for finding in doc["findings"]:
        assert finding["detector"] in text
    assert not FETCHES.search(text) and "default-src 'none'" in text
    assert code == doc["exit_code"]
    # The state word heads the page (not "exit 1"), every time in one format.
    assert f"<b>{doc['state'].upper()}</b>: seen " in text and "exit " not in text
    assert not re.search(r"\d{2}:\d{2}:\d{2}[+.]", text)  # no ISO offsets or fractions


def test_a_long_chain_is_drawn_to_a_bound_and_says_so(tmp_path: Path) -> None:
    work = tmp_path / "work"
    start = datetime.now(UTC) - timedelta(days=30)
    for i in range(MAX_CYCLES + 50):
        at = start + timedelta(minutes=10 * i)
        cycle_file(work, "700", i, at, at + timedelta(minutes=9))
    page = tmp_path / "timeline.html"
    watch(work, tmp_path / "state", "--html", str(page))
    text = page.read_text()
    assert text.count("class='bar cycle") == MAX_CYCLES
    assert "Not drawn: the 50 earliest cycles" in text


def test_the_page_never_replaces_an_input(tmp_path: Path) -> None:
    work = tmp_path / "work"
    two_generations(work)
    target = work / "nvrx" / "901" / "cycle_infos" / "cycle_info.901.0.0"
    before = target.read_bytes()
    from .test_watch_watcher import nvrx_watch

    proc = nvrx_watch(
        "--platform", "none", "--work-dir", str(work), "--state-dir", str(tmp_path / "s"),
        "--html", str(target),
    )  # fmt: skip
    assert proc.returncode == 2
    assert "refusing to write over an input" in proc.stderr
    assert target.read_bytes() == before
