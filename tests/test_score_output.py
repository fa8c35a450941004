"""The verdict table at a terminal: every case while it can be read, then the ones to look at."""

from __future__ import annotations

from rich.console import Console

from nvrx.campaign.pool import FaultType
from nvrx.score.model import Case, GroundTruth, Verdict
from nvrx.score.output import EVERY_CASE_SCORE, TABLE_ROWS, render
from nvrx.score.report import summarise

PASS = {"restart_correct": "true", "rank_primary": "true", "rank_any": "true",
        "fault_described": "true", "fr_rank_correct": "rank"}  # fmt: skip


def _table(count: int, failing: set[int], unscored: frozenset[int] | set[int] = frozenset()) -> str:
    cases, verdicts = [], []
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
    assert "listed 3 of 5000 case(s)" in text and EVERY_CASE_SCORE in text


def test_never_more_rows_than_a_table_holds_and_every_further_line_is_counted() -> None:
    many = set(range(0, 600, 2))
    text = _table(600, many, unscored={1, 3, 5} | set(range(101, 400, 2)))
    lines = text.splitlines()
    table_rows = [line for line in lines if " case00" in line and not line.startswith("unscored")]
    assert len(table_rows) == TABLE_ROWS
    unscored_lines = [line for line in lines if line.startswith("unscored s/")]
    assert len(unscored_lines) == TABLE_ROWS
    assert f"... and {153 - TABLE_ROWS} more unscored case(s)" in text
