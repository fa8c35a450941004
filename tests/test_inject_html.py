"""`report.html`: a session's self-contained page, rebuilt from its journal.

What users rely on: it opens from a shared filesystem with no network (nothing outside the
session is referenced, a Content-Security-Policy forbids any load), nothing from a log or a judge
can inject markup, the same journal gives the same page, and a 1,000-experiment session's page
stays a few megabytes. tests/test_report_browser.py renders it in a real headless browser.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from nvrx.campaign.pool import Experiment, FaultType
from nvrx.campaign.session import Record
from nvrx.inject import html
from nvrx.inject.report import REPORT_HTML, write_html, write_reports
from nvrx.inject.rows import Change, Row, Stop, stop_rule
from nvrx.score.model import DIMENSIONS, Case, GroundTruth, Verdict

from .conftest import SCORE_DEMO
from .test_inject_report import session_with, verdict

# Anything that would make a browser fetch: a scheme or protocol-relative URL in an attribute,
# a CSS url(), a script, a frame, a base, a link element.
FETCHES = re.compile(
    r"""(?:src|href|action|data|poster)\s*=\s*["']?\s*(?:[a-z][a-z0-9+.-]*:|//)|url\(|<script|"""
    r"""<iframe|<object|<embed|<base|<link""",
    re.IGNORECASE,
)

NOT_YET = Stop(False, "not yet", stop_rule())


def demo_copy(tmp_path: Path) -> Path:
    session = tmp_path / SCORE_DEMO.name
    shutil.copytree(SCORE_DEMO, session)
    return session


def test_the_demo_sessions_page_is_self_contained_and_shows_every_experiment(
    tmp_path: Path,
) -> None:
    session = demo_copy(tmp_path)
    page = write_html(session).read_text()
    assert not FETCHES.search(page)
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    for entry in ("SEGFAULT:1:3:2", "GPU_SLEEP:2:3:2", "WORKLOAD_EXC:3:3:2", "SIGTERM:0:3:2"):
        assert f"<code>{entry}</code>" in page
    assert page.count('<svg role="img"') == 2  # the two heatmaps
    assert "Flight recorder: missing ranks" in page and "Blinded log excerpt" in page


def test_links_are_relative_and_reach_the_experiments_files(tmp_path: Path) -> None:
    session = demo_copy(tmp_path)
    page = write_html(session).read_text()
    links = re.findall(r"href='([^']+)'", page)
    assert links
    for link in links:
        assert not Path(link).is_absolute() and ".." not in Path(link).parts
        assert (session / link).is_file(), link


def test_nothing_from_a_log_or_a_judge_becomes_markup() -> None:
    hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    case = Case(
        id="c1",
        truth=GroundTruth(FaultType("SEGFAULT"), 1, 5, 2, 4, 32, True),
        experiment_dir="/s/n2_SEGFAULT_r1_i5",
    )
    record = Record(0, Experiment(FaultType("SEGFAULT"), 1, 5, 2), Path("/s/n2_SEGFAULT_r1_i5"))
    row = Row(record, case, Verdict.model_validate({**verdict(), "case": "c1", "notes": hostile}))
    evidence = html.Evidence(excerpt=hostile, attribution=hostile, fr_table=hostile)
    page = html.page(Path("/s"), [row], Stop(False, hostile, stop_rule()), [evidence], None)
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_same_journal_gives_the_same_page(tmp_path: Path) -> None:
    session = demo_copy(tmp_path)
    first = write_html(session).read_bytes()
    paths, _, _ = write_reports(session)  # what inject-loop and --reanalyze write at the end
    assert session / REPORT_HTML in paths
    assert (session / REPORT_HTML).read_bytes() == first


def test_the_trend_shows_what_changed_since_the_previous_session(tmp_path: Path) -> None:
    session_with(tmp_path, "20260101_000000", [("SEGFAULT:1:5:2", verdict(rank_primary="false"))])
    new = session_with(tmp_path, "20260102_000000", [("SEGFAULT:1:5:2", verdict())])
    page = write_html(new.dir).read_text()
    assert "1 improved, 0 regressed" in page
    assert "SEGFAULT:1:5:2 rank (primary): false → true" in page
    assert page.count('<svg role="img"') == 3  # the diff as a picture too
    assert "▲ false → true" in page


def test_a_1000_experiment_page_stays_under_5_mb() -> None:
    # Every experiment with the most evidence the page keeps, half of them failing.
    rows, evidences = [], []
    long = "x" * 10_000
    for i in range(1000):
        fault = FaultType(("SEGFAULT", "GPU_SLEEP", "SIGKILL", "WORKLOAD_EXC")[i % 4])
        nodes = (2, 4, 8)[i % 3]
        experiment = Experiment(fault, i % (nodes * 4), 5, nodes)
        case = Case(
            id=f"c{i}",
            truth=GroundTruth(fault, experiment.rank, 5, nodes, 4, 32, True),
            experiment_dir=f"/s/e{i}",
        )
        dims = {"rank_primary": "false"} if i % 2 else {}
        v = Verdict.model_validate({**verdict(**dims), "case": f"c{i}", "notes": long[:300]})
        rows.append(Row(Record(i, experiment, Path(f"/s/e{i}")), case, v))
        evidences.append(
            html.Evidence(
                excerpt=html._cut(long, html.EXCERPT_CHARS),
                attribution=html._cut(long, html.TABLE_CHARS),
                fr_table=html._cut(long, html.TABLE_CHARS),
                files=("e/analysis/stripped.log", "e/analysis/fr_analysis.txt"),
            )
        )
    trend: tuple[list[Change], list[str], list[str]] = (
        [Change("SEGFAULT:1:5:2", "rank_any", "false", "true", True)],
        [],
        [],
    )
    page = html.page(Path("/s"), rows, NOT_YET, evidences, trend)
    assert page.count("<details") == 1000
    assert len(page.encode()) < 5_000_000


def test_a_huge_log_still_shows_the_lines_where_it_ended(tmp_path: Path) -> None:
    session = demo_copy(tmp_path)
    stripped = next(session.glob("n2_SEGFAULT_*/analysis/stripped.log"))
    with stripped.open("w") as f:
        for i in range(100_000):  # ~3 MB: more than the page ever reads
            f.write(f"[rank0]: step {i} ok\n")
        f.write("[rank1]: Segmentation fault, the very last line\n")
    page = write_html(session).read_text()
    assert "Segmentation fault, the very last line" in page
    assert len(page.encode()) < 100_000  # the excerpt is cut, whatever the log's size


def test_a_long_attribution_keeps_its_decision_line(tmp_path: Path) -> None:
    # The analyser's answer leads with its decision: a cut keeps the head, never `…MMEDIATE`.
    session = demo_copy(tmp_path)
    attribution = next(session.glob("n2_SEGFAULT_*/analysis/log_attribution.txt"))
    first = attribution.read_text().splitlines()[0]
    attribution.write_text(attribution.read_text() + "detail line\n" * 500)
    page = write_html(session).read_text()
    assert f"<pre>{html._e(first)}\n" in page


def test_a_cut_attribution_ends_with_a_whole_word_and_links_the_whole_text(
    tmp_path: Path,
) -> None:
    session = demo_copy(tmp_path)
    attribution = next(session.glob("n2_SEGFAULT_*/analysis/log_attribution.txt"))
    attribution.write_text(attribution.read_text() + "collective timeout waiting " * 60)
    page = write_html(session).read_text()
    # Each attribution is shown whole, or cut after a whole word with a line after it saying
    # its whole file is linked; the SEGFAULT one, made long, is cut.
    cut = []
    for found in sorted(session.glob("n2_*/analysis/log_attribution.txt")):
        name = found.parent.parent.name.split("_", 1)[1].rsplit("_r", 1)[0]
        whole = html._e(found.read_text())
        section = next(s for s in page.split("<details ") if f"<code>{name}:" in s)
        assert "/analysis/log_attribution.txt'>log_attribution.txt</a>" in section
        shown = re.search(
            r"<h4>Log attribution</h4><pre>([^<]*)…</pre><p class='legend'>Only its head is "
            r"shown: its whole file is linked below.</p>",
            section,
        )
        if shown is None:
            assert f"<h4>Log attribution</h4><pre>{whole}</pre>" in section, name
            assert "Only its head is shown" not in section, name
            continue
        cut.append(name)
        head = shown.group(1)
        assert whole.startswith(head) and whole[len(head)].isspace(), (name, head[-30:])
    assert "SEGFAULT" in cut and len(cut) < 4
    assert page.count("Only its head is shown") == len(cut)


def test_a_note_cut_to_its_byte_budget_ends_with_a_whole_word() -> None:
    # Escaped, 'say "hi" ' is 19 bytes: the 600 characters kept are past the note's 1,200 bytes.
    rows = _rows(1, True, "n")
    rows = [
        replace(rows[0], verdict=rows[0].verdict.model_copy(update={"notes": 'say "hi" ' * 100}))
    ]
    page = html.page(Path("/s"), rows, NOT_YET, [html.Evidence()], None)
    note = re.search(r"<b>Judge \(rules\):</b> ([^<]*)</p>", page)
    assert note, page
    assert note.group(1).endswith("say &quot;hi&quot;…") and len(note.group(1).encode()) <= 1200


def test_the_flight_recorders_table_keeps_its_columns_in_a_narrow_window(
    tmp_path: Path,
) -> None:
    page = write_html(demo_copy(tmp_path)).read_text()
    # Its lines are never wrapped (the box scrolls instead): a wrapped line loses the columns.
    assert re.search(r"<h4>Flight recorder: missing ranks</h4><pre class='table'>PGID +\|", page)
    assert "pre.table{white-space:pre}" in page


def test_the_page_counts_in_the_singular_and_the_plural(tmp_path: Path) -> None:
    one = session_with(tmp_path / "a", "20260101_000000", [("SEGFAULT:1:5:2", verdict())])
    page = write_html(one.dir).read_text()
    assert "<p>1 experiment, 1 scored." in page and "(s)" not in page
    two = session_with(tmp_path / "b", "20260101_000000", [
        ("SEGFAULT:1:5:2", verdict(rank_any="false")), ("GPU_SLEEP:2:5:4", None),
    ])  # fmt: skip
    page = write_html(two.dir).read_text()
    assert "<p>2 experiments, 1 scored." in page and "2 of 2 experiments do not pass" in page
    assert "(s)" not in page


def test_no_cell_rests_on_colour_alone_and_every_kind_of_cell_is_explained(
    tmp_path: Path,
) -> None:
    old = session_with(tmp_path, "20260101_000000", [("SEGFAULT:1:5:2", verdict())])
    new = session_with(tmp_path, "20260102_000000", [
        ("SEGFAULT:1:5:2", verdict(rank_any="false")), ("GPU_SLEEP:2:5:4", None),
    ])  # fmt: skip
    assert old.dir.is_dir()
    page = write_html(new.dir).read_text()
    # Heatmap cells: a mark beside the colour, a hatch below half; the legend names each kind.
    assert "✗ 0%" in page and "✓ 100%" in page and 'fill="url(#hatch)"' in page
    assert "<pattern id='hatch'" in page
    for words in ("✓ all pass", "hatched below half", "ran but none scored",
                  "blank: no experiment"):  # fmt: skip
        assert words in page
    # Changed cells say which way; verdict cells carry ✓/✗ as well as their class.
    assert "▼ true → false" in page and "▼ regressed (red, hatched)" in page
    assert "<td class='bad'>✗ false</td>" in page and "<td class='ok'>✓ true</td>" in page


def test_a_heatmap_starts_right_under_its_caption() -> None:
    picture = html._heatmap("t", ["A"], ["one", "two"], {("A", "one"): (1.0, "tip")})
    first_cell_y = float(re.search(r'<rect x="[\d.]+" y="([\d.]+)"', picture).group(1))  # type: ignore[union-attr]
    assert first_cell_y <= 30  # one line of column heads above it, no blank band


def _rows(count: int, failing: bool, notes: str, text: str = "", nodes: int = 4) -> list[Row]:
    """`count` experiments; with `text`, every field of the journal that the page shows (the
    verdict's values, its judge, the job, its state and exit, the files changed) is `text`."""
    rows = []
    hostile = dict.fromkeys(DIMENSIONS, text) if text else {}
    if text:
        hostile["judge"] = text
    fail = Verdict.model_validate({**verdict(rank_primary="false"), "notes": notes, **hostile})
    ok = Verdict.model_validate({**verdict(), "notes": notes})
    for i in range(count):
        experiment = Experiment(FaultType("SEGFAULT"), i % 16, 5 + i // 16, nodes or 4 + i)
        case = Case(
            id=f"s/e{i}",
            truth=GroundTruth(experiment.fault, experiment.rank, 5, 4, 4, 16, True),
            experiment_dir=f"/s/e{i}",
            changed=(text,) if text else (),
        )
        v = fail if failing or i % 2 else ok
        record = Record(i, experiment, Path(f"/s/e{i}"))
        if text:
            record = replace(record, job_id=text, state=text, exit=text)
        rows.append(Row(record, case, v))
    return rows


SIXFOLD = '"' * 10_000  # each character escapes to `&quot;`: the most a character can grow


def test_a_10000_experiment_page_stays_under_15_mb_even_when_every_one_fails() -> None:
    # The worst case: every experiment fails (a brief section keeps its table), every note and
    # every piece of evidence as long as the page keeps, every field of the journal the page
    # shows (verdict values, judge, job, state, the files changed) text that escapes sixfold,
    # every experiment a shape of its own, and as many changes since the previous session.
    long = "<" * 10_000  # escaped, each character grows fourfold: the longest evidence can be
    rows = _rows(10_000, True, SIXFOLD, SIXFOLD, nodes=0)
    shown = set(html.with_evidence(rows))
    assert len(shown) == html.EVIDENCE_SECTIONS
    files = ("e/analysis/stripped.log", "e/analysis/log_attribution.txt", "e/analysis/fr.txt")
    cut = html.evidence_of(long, long, long, files)
    evidences = [
        cut if i in shown else html.Evidence(files=files, shown=False) for i in range(len(rows))
    ]
    changes = [
        Change(r.record.experiment.entry, d, SIXFOLD, SIXFOLD, i % 2 == 0)
        for i, r in enumerate(rows)
        for d in DIMENSIONS
    ]
    page = html.page(Path("/s"), rows, NOT_YET, evidences, (changes, [], []))
    assert page.count("<details") == 10_000
    # Past the evidence's byte budget, even some of the first 1,000 are brief; past the page's,
    # sections leave their text from outside out, and say so.
    brief = page.count("Evidence not on this page")
    assert brief > 9_000
    assert f"the evidence itself is shown for {10_000 - brief} of them" in page
    assert re.search(r"Past the page's budget, \d+ sections leave out the job", page)
    assert f"The first {html.SHAPE_COLUMNS} of 10000 shapes" in page
    assert len(page.encode()) < 15_000_000


def test_a_verdict_value_and_a_change_take_48_bytes_whatever_the_journal_holds() -> None:
    rows = _rows(2, True, "n", SIXFOLD)
    changes = [Change(rows[0].record.experiment.entry, "rank_any", SIXFOLD, SIXFOLD, True)]
    page = html.page(Path("/s"), rows, NOT_YET, [html.Evidence()] * 2, (changes, [], []))
    cut = "&quot;" * 7 + "…"  # 45 bytes: no entity cut in two
    assert f"<td class='bad'>✗ {cut}</td>" in page
    assert f"rank (any): {cut} → {cut}</li>" in page
    assert f"▲ {'&quot;' * 7}… → " in page  # the picture's label: cut, then escaped
    assert len(page.encode()) < 40_000
    # The values a judge gives are shown whole.
    plain = html.page(Path("/s"), _rows(2, True, "n"), NOT_YET, [html.Evidence()] * 2, None)
    assert "<td class='bad'>✗ false</td>" in plain and "<td class='ok'>✓ true</td>" in plain


def test_past_the_evidence_budget_the_experiments_that_fail_keep_their_evidence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(html, "EVIDENCE_SECTIONS", 2)
    outcomes: list[tuple[str, dict[str, object] | None]] = [
        (f"SEGFAULT:{i}:5:2", verdict(rank_primary="false") if i in (1, 3, 4) else verdict())
        for i in range(5)
    ]
    session = session_with(tmp_path, "20260101_000000", outcomes)
    for record in session.state().records:
        analysis = record.dir / "analysis"
        analysis.mkdir(parents=True)
        (analysis / "log_attribution.txt").write_text(f"ATTRIBUTION-OF-{record.index}\n")
    page = write_html(session.dir).read_text()
    # The first two that fail (1 and 3) show theirs; the others link to their files.
    assert "ATTRIBUTION-OF-1" in page and "ATTRIBUTION-OF-3" in page
    for hidden in (0, 2, 4):
        assert f"ATTRIBUTION-OF-{hidden}" not in page
    assert page.count("Evidence not on this page") == 3
    assert "the evidence itself is shown for 2 of them" in page
    for link in re.findall(r"href='([^']+)'", page):
        assert (session.dir / link).is_file(), link


def test_a_long_trend_is_cut_and_says_where_every_change_is() -> None:
    changes = [Change(f"SEGFAULT:{i}:5:2", "rank_any", "false", "true", True) for i in range(900)]
    rows = _rows(2, False, "n")
    page = html.page(
        Path("/s"), rows, NOT_YET, [html.Evidence()] * 2, (changes, ["GPU_SLEEP:0:5:2"], [])
    )
    assert page.count("<li class='up'>") == html.TREND_ITEMS
    assert f"… and {900 + 1 - html.TREND_ITEMS} more" in page
    assert "nvrx report diff</code> lists every one" in page
    assert page.count('<svg role="img"') == 2  # no picture of 900 rows: the two heatmaps only
