"""`nvrx watch --html FILE`: the chain's timeline page, written after every pass.

What users rely on: the page draws every generation's cycles on their nodes with the restarts
and findings marked, is self-contained (no request, nothing injectable), stays bounded for a
chain of any length, and is never written over one of the pass's inputs.
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nvrx.watch.timeline import MAX_CYCLES
from nvrx.watch.tracklayout import axis_ticks

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
    assert "4 cycles in 2 generations, 2 restarts, on 3 nodes (1 of them a standby spare" in text
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


def axis_labels(page: str) -> list[str]:
    axis = re.search(r"<div class='axis'>(.*?)</div>", page)
    assert axis, page[-2000:]
    return re.findall(r"<span[^>]*>([^<]*)</span>", axis.group(1))


def test_a_short_chain_gets_ticks_to_the_second_none_repeated(tmp_path: Path) -> None:
    work = tmp_path / "work"
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    for i in range(3):  # three cycles in 70 s: two restarts
        at = start + timedelta(seconds=25 * i)
        cycle_file(work, "903", i, at, at + timedelta(seconds=20))
    page = tmp_path / "timeline.html"
    watch(work, tmp_path / "state", "--html", str(page))
    labels = axis_labels(page.read_text())
    assert len(labels) >= 3 and len(set(labels)) == len(labels), labels
    assert all(re.fullmatch(r"\d{2}:\d{2}:\d{2}", label) for label in labels), labels
    assert "3 cycles in 1 generation, 2 restarts, on 3 nodes" in page.read_text()


@pytest.mark.parametrize(
    "span",
    [timedelta(seconds=3), timedelta(seconds=70), timedelta(minutes=15), timedelta(hours=3),
     timedelta(hours=30), timedelta(days=9), timedelta(days=200), timedelta(days=900)],
)  # fmt: skip
def test_the_axis_of_a_chain_of_any_length_has_distinct_labels_at_whole_steps(
    span: timedelta,
) -> None:
    t0 = datetime(2026, 12, 31, 23, 59, 50, 250_000, tzinfo=UTC) - span / 2
    caption, ticks = axis_ticks(t0, t0 + span)
    labels = [label for _, label in ticks]
    assert 2 <= len(labels) <= 8 and len(set(labels)) == len(labels), labels
    assert all(0 <= p <= 100 for p, _ in ticks)
    assert [p for p, _ in ticks] == sorted(p for p, _ in ticks)
    # Within one day the caption says which and the labels are times; else each label says
    # its day, and the caption the year (or years) the labels leave out.
    if re.fullmatch(r"UTC, \d{4}-\d{2}-\d{2}", caption):
        assert all(re.fullmatch(r"\d{2}:\d{2}(:\d{2})?", label) for label in labels), labels
    else:
        assert re.fullmatch(r"UTC, \d{4}(–\d{4})?", caption), caption
        assert all(re.match(r"(\d{4}-)?\d{2}-\d{2}\b", label) for label in labels), labels


def storm_page(tmp_path: Path) -> tuple[str, str]:
    """The example storm chain's page and `nvrx watch`'s screen of the same pass."""
    from .cli_runner import nvrx

    chains = tmp_path / "chains"
    made = subprocess.run(
        [sys.executable, str(Path(__file__).parents[1] / "examples/chains/make_chains.py"),
         str(chains)], capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    page = tmp_path / "storm.html"
    done = nvrx(
        "watch", "--platform", "none", "--work-dir", str(chains / "storm"),
        "--state-dir", str(tmp_path / "state"), "--html", str(page),
    )  # fmt: skip
    return page.read_text(), done.stdout


def test_restarts_close_together_are_one_mark_and_findings_seen_together_the_most_severe_first(
    tmp_path: Path,
) -> None:
    text, _ = storm_page(tmp_path)
    marks = re.findall(
        r"<span class='mark' title='([^']*)'[^>]*>(.*?)</span>(?=<span class='mark'|</div>)", text
    )
    restarts = [(tip, drawn) for tip, drawn in marks if "restart-mark" in drawn]
    # Six restarts in fifteen minutes of a three-hour chain: fewer marks than restarts, each
    # saying how many it stands for, and every restart named in a tooltip.
    assert 1 <= len(restarts) < 6
    counts = [int(n) for _, drawn in restarts for n in re.findall(r"<small>(\d+)</small>", drawn)]
    assert sum(counts or [1]) + (len(restarts) - len(counts)) == 6
    assert sum(html.unescape(tip).count("restart: cycle 7101.0.") for tip, _ in restarts) == 6
    found = [(tip, drawn) for tip, drawn in marks if "sev-" in drawn]
    assert len(found) == 1  # all three seen by this pass: one mark...
    tip, drawn = found[0]
    assert drawn.startswith("<span class='sev-critical'>◆</span>")  # ...the critical one first
    assert drawn.count("sev-warning") == 2
    assert [line.split()[1] for line in html.unescape(tip).splitlines()] == [
        "stalled_progress:", "restart_storm:", "suspect_node:",
    ]  # fmt: skip


def test_the_page_shows_every_line_the_screen_shows_of_a_finding(tmp_path: Path) -> None:
    text, screen = storm_page(tmp_path)
    lines = [line.strip() for line in screen.splitlines() if line.strip().startswith("runbook: ")]
    assert len(lines) == 3
    for line in lines:
        assert html.escape(line, quote=True) in text, line


def test_under_platform_none_the_page_is_titled_by_its_work_dir(tmp_path: Path) -> None:
    work = tmp_path / "ranks-run"
    two_generations(work)
    page = tmp_path / "timeline.html"
    watch(work, tmp_path / "state", "--html", str(page))
    text = page.read_text()
    assert "<title>nvrx watch: ranks-run (cycle files only)</title>" in text
    assert "<h1>nvrx watch timeline: ranks-run (cycle files only)</h1>" in text
    assert f"Work dir: <code class='path'>{work}</code>" in text


def test_a_single_cycle_is_counted_in_the_singular(tmp_path: Path) -> None:
    work = tmp_path / "work"
    cycle_file(work, "904", 0, datetime.now(UTC) - timedelta(minutes=30), None)
    page = tmp_path / "timeline.html"
    watch(work, tmp_path / "state", "--html", str(page))
    text = page.read_text()
    assert "1 cycle in 1 generation, 0 restarts, on 3 nodes (1 of them a standby spare" in text
    assert not re.search(r"\w\(s\)", text)
