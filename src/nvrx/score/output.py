"""`nvrx score` at a terminal: the verdict table, pass rates and what could not be scored."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from nvrx.display import counted, printable
from nvrx.score.model import DIMENSIONS, PASS_VALUE, Case, Verdict, passes_all
from nvrx.score.report import Summary, percent

SHORT_NAMES = {
    "restart_correct": "restart",
    "rank_primary": "primary",
    "rank_any": "any",
    "fault_described": "described",
    "fr_rank_correct": "fr_rank",
}


def _value(verdict: Verdict, dimension: str) -> Text:
    if verdict.status == "unscored":
        return Text("unscored", style="bold red")
    # A journalled verdict's dimension may hold any text (`nvrx report` shows what the journal
    # says): printable, like its notes.
    value = printable(getattr(verdict, dimension) or "")
    if verdict.status == "invalid":
        return Text(value, style="dim")
    return Text(value, style="green" if value == PASS_VALUE[dimension] else "yellow")


# What a changed analysis file means, by who reads it: `score` judges the files as they are now,
# `report` shows the verdict the campaign journalled from the files as they were.
CHANGED_SCORE = "this score reads them as they are now; the session's report keeps its verdict"
CHANGED_REPORT = (
    "the verdict shown is the one judged before; `nvrx inject-loop --reanalyze SESSION` "
    "judges the files again"
)
# Where every case is when the terminal lists only some, by command.
EVERY_CASE_SCORE = "--json, --junit and --markdown list every case"
EVERY_CASE_REPORT = "the session's experiments_report.md and --json list every one"

# Past this many rows a terminal table is not read but scrolled: the table then lists the cases
# that do not pass every dimension (the ones to look at), this many at most, and says where the
# rest are. Rich lays a table out at about a millisecond a row: 10,000 rows took 7 s.
TABLE_ROWS = 100


def listed_rows(verdicts: Sequence[Verdict]) -> list[int]:
    """The positions the terminal table shows: all of them up to TABLE_ROWS; beyond, the first
    TABLE_ROWS that do not pass every dimension."""
    if len(verdicts) <= TABLE_ROWS:
        return list(range(len(verdicts)))
    failing = (i for i, v in enumerate(verdicts) if not passes_all(v))
    return [i for i, _ in zip(failing, range(TABLE_ROWS), strict=False)]


def _capped(lines: Sequence[str], what: str) -> list[str]:
    """At most TABLE_ROWS of `lines`, then one saying how many more `what` (a noun, singular)
    there are."""
    if len(lines) <= TABLE_ROWS:
        return list(lines)
    return [*lines[:TABLE_ROWS], f"... and {counted(len(lines) - TABLE_ROWS, 'more ' + what)}"]


def for_unreachable(verdict: Verdict, unreachable: Collection[str]) -> bool:
    """Whether the verdict is unscored only because a judge could not be reached (one of the
    `unreachable` reasons): the command says that once, not once per case."""
    if verdict.status != "unscored" or not unreachable:
        return False
    failed = [v for v in verdict.judges or [verdict] if v.status == "unscored"]
    return all(v.reason in unreachable for v in failed)


def render(
    out: Console,
    cases: Sequence[Case],
    verdicts: Sequence[Verdict],
    summary: Summary,
    judge: str,
    changed_means: str = CHANGED_SCORE,
    every_case_in: str = EVERY_CASE_SCORE,
    unreachable: Collection[str] = (),
) -> None:
    """The table and what follows it. A case unscored for one of the `unreachable` reasons
    (said once, on stderr) keeps its row but gets no line of its own below."""
    # Cases of one session are named within it (the session is said once, above): a name never
    # folds mid-word for the sake of a prefix they all share.
    sessions = {c.id.rpartition("/")[0] for c in cases}
    session = sessions.pop() if len(sessions) == 1 else ""
    names = [c.id.removeprefix(f"{session}/") if session else c.id for c in cases]
    if session:
        out.print(Text(printable(f"session {session}"), style="bold"))
    table = Table(header_style="bold", box=None, pad_edge=False)
    widest = {"case": max(map(len, names), default=4),
              "fault": max((len(c.truth.fault.value) for c in cases), default=5)}  # fmt: skip
    for column in ("#", "case", "fault", "rank", *(SHORT_NAMES[d] for d in DIMENSIONS), "notes"):
        width = len(column) if column in SHORT_NAMES.values() else widest.get(column, 0)
        table.add_column(column, overflow="fold", min_width=min(width, 40))
    shown = listed_rows(verdicts)
    for i in shown:
        case, name, v = cases[i], names[i], verdicts[i]
        notes = v.notes or ""
        if v.status == "unscored":
            notes = "judge unreachable" if for_unreachable(v, unreachable) else "(see below)"
        if v.cache_hit:
            notes = f"(cached) {notes}"
        table.add_row(
            str(i + 1),
            printable(name),
            case.truth.fault.value,
            str(case.truth.rank),
            *(_value(v, d) for d in DIMENSIONS),
            Text(printable(notes)),
        )
    out.print(table)
    if len(shown) < len(cases):
        out.print(
            Text(
                f"listed {len(shown)} of {counted(len(cases), 'case')}: those that do not pass "
                f"every dimension, the first {TABLE_ROWS} at most; {every_case_in}",
                style="dim",
            )
        )
    rates = ", ".join(f"{SHORT_NAMES[d]} {percent(r)}" for d, r in summary.rates.items())
    out.print(
        Text(
            printable(
                f"{judge}: {counted(summary.cases, 'case')}, {summary.scored} scored, "
                f"{summary.invalid} invalid, {summary.unscored} unscored; pass rates: {rates}"
            )
        )
    )
    if summary.agreement is not None:
        out.print(Text(f"judges agreed on {summary.agreement:.0%} of the dimensions"))
    u = summary.usage
    if u.requests or summary.cache_hits:
        out.print(
            Text(
                f"judge calls: {counted(u.requests, 'request')}, {u.prompt_tokens} prompt + "
                f"{u.completion_tokens} completion tokens, "
                f"{counted(summary.cache_hits, 'cache hit')}"
            )
        )
    changed = [c for c in cases if c.changed]
    said = [
        f"changed after the campaign judged it: {c.id}: {', '.join(c.changed)}" for c in changed
    ]
    for line in _capped(said, "changed case"):
        out.print(Text(printable(line), style="yellow"))
    if changed:
        out.print(Text(f"{counted(len(changed), 'case')} changed: {changed_means}", style="yellow"))
    for dimension, wanted, got in summary.failed_thresholds:
        out.print(
            Text(f"below threshold: {dimension} {percent(got)} < {wanted:.0%}", style="bold red")
        )
    if summary.unscored:
        unscored = [
            f"unscored {case.id}: {v.reason}"
            for case, v in zip(cases, verdicts, strict=True)
            if v.status == "unscored" and not for_unreachable(v, unreachable)
        ]
        for line in _capped(unscored, "unscored case"):
            out.print(Text(printable(line), style="red"))
        out.print(
            Text(f"{counted(summary.unscored, 'case')} unscored: no verdict", style="bold red")
        )
