"""The verdicts as people read them: the table at a terminal (every case while it can be read,
then the ones to look at) and the page (`score --html`)."""

from __future__ import annotations

from rich.console import Console

from nvrx.campaign.pool import FaultType
from nvrx.score.html import page
from nvrx.score.model import Case, GroundTruth, Verdict
from nvrx.score.output import EVERY_CASE_SCORE, TABLE_ROWS, render
from nvrx.score.report import summarise

PASS = {"restart_correct": "true", "rank_primary": "true", "rank_any": "true",
        "fault_described": "true", "fr_rank_correct": "rank"}  # fmt: skip


def _verdicts(
    count: int, failing: set[int], unscored: frozenset[int] | set[int] = frozenset()
) -> tuple[list[Case], list[Verdict]]:
    cases: list[Case] = []
    verdicts: list[Verdict] = []
    for i in range(count):
        cases.append(
            Case(
                id=f"s/case{i:05d}",
                truth=GroundTruth(FaultType("SEGFAULT"), 1, 5, 2, 4, 8, True),
                experiment_dir=f"/s/case{i:05d}",
            )
        )
        if i in unscored:
            verdicts.append(
                Verdict(case=cases[-1].id, status="unscored", judge="j", reason=f"why{i:05d}")
            )
            continue
        dims = {**PASS, "rank_any": "false"} if i in failing else PASS
        verdicts.append(Verdict.model_validate({"case": cases[-1].id, "status": "scored",
                                                "judge": "j", **dims}))  # fmt: skip
    return cases, verdicts


def _table(count: int, failing: set[int], unscored: frozenset[int] | set[int] = frozenset()) -> str:
    cases, verdicts = _verdicts(count, failing, unscored)
    out = Console(record=True, width=200, color_system=None)
    render(out, cases, verdicts, summarise(verdicts), "rules")
    return out.export_text()


def test_a_table_a_person_can_read_lists_every_case() -> None:
    text = _table(TABLE_ROWS, {3})
    assert all(f"case{i:05d}" in text for i in range(TABLE_ROWS))
    assert "listed" not in text


def test_a_longer_table_lists_the_cases_that_do_not_pass_and_says_where_the_rest_are() -> None:
    text = _table(5000, {10, 4000}, unscored={77})
    listed = [i for i in range(5000) if f"case{i:05d} " in text]
    assert listed == [10, 77, 4000]
    row = next(line for line in text.splitlines() if "case04000" in line)
    assert row.split()[0] == "4001"  # numbered by its place among all the cases
    assert "listed 3 of 5000 cases" in text and EVERY_CASE_SCORE in text


def test_never_more_rows_than_a_table_holds_and_every_further_line_is_counted() -> None:
    many = set(range(0, 600, 2))
    text = _table(600, many, unscored={1, 3, 5} | set(range(101, 400, 2)))
    lines = text.splitlines()
    table_rows = [line for line in lines if " case00" in line and not line.startswith("unscored")]
    assert len(table_rows) == TABLE_ROWS
    unscored_lines = [line for line in lines if line.startswith("unscored s/")]
    assert len(unscored_lines) == TABLE_ROWS
    assert f"... and {153 - TABLE_ROWS} more unscored cases" in text


def test_the_page_names_the_session_once_and_each_row_by_its_experiment() -> None:
    cases, verdicts = _verdicts(3, {1}, unscored={2})
    text = page(cases, verdicts, summarise(verdicts), "rules")
    assert "<p>Session <code>s</code>: 3 cases: 2 scored, 0 invalid, 1 unscored." in text
    assert [f"<td><code>case{i:05d}</code></td>" in text for i in range(3)] == [True] * 3
    assert "s/case" not in text
    one_case, one_verdict = _verdicts(1, set())
    assert "<p>Session <code>s</code>: 1 case: 1 scored" in page(
        one_case, one_verdict, summarise(one_verdict), "rules"
    )


def test_the_page_lets_no_column_shrink_below_its_longest_word() -> None:
    # "resta|rt", "unsco|red": a fixed layout and `overflow-wrap:anywhere` let a narrow window
    # break words; the table keeps its words whole and scrolls in its box when it must.
    # (tests/test_report_browser.py checks every word on the page as laid out.)
    cases, verdicts = _verdicts(2, {1})
    text = page(cases, verdicts, summarise(verdicts), "rules")
    assert "anywhere" not in text and "table-layout:fixed" not in text
    assert "<div class='wide'><table class='verdicts'>" in text
