"""`nvrx score --html [FILE]`: the verdicts as one self-contained page (nvrx.htmlpage), and the
verdict cell that the campaign's report.html shows too. A pure function of the verdicts.

Colour is never the only cue: every cell also says ✓ (pass), ✗ (below pass), – (invalid run,
not judged) or ? (unscored), and the page's legend says so.
"""

from __future__ import annotations

from collections.abc import Sequence

from nvrx.display import counted
from nvrx.htmlpage import document, escape, escape_within
from nvrx.score.model import DIMENSIONS, Case, Verdict
from nvrx.score.report import Summary, percent

SHORT = {
    "restart_correct": "restart",
    "rank_primary": "rank (primary)",
    "rank_any": "rank (any)",
    "fault_described": "fault described",
    "fr_rank_correct": "FR rank",
}
LEGEND = (
    "<p class='legend'><span class='ok'>✓ pass</span> <span class='bad'>✗ below pass</span> "
    "<span class='na'>– run invalid (fault not reached): not judged</span> "
    "<span class='na'>? unscored: no verdict</span></p>"
)
CSS = """
td.ok,span.ok{background:#dafbe1}td.bad,span.bad{background:#ffebe9;font-weight:600}
td.na,span.na{color:#666}.legend span{padding:1px 6px;margin-right:6px;border-radius:3px}
.changed{color:#9a6700}
.wide{overflow-x:auto}
table.verdicts{border-collapse:collapse;width:100%}
table.verdicts th,table.verdicts td{padding:3px 6px;border-bottom:1px solid #eee;
text-align:left;vertical-align:top;font-size:13px;word-break:normal;hyphens:none}
td.ok,td.bad,td.na{white-space:nowrap}
"""
# Why not `overflow-wrap:anywhere` on the cells: it lets a column shrink below its longest word,
# so a narrow window broke "restart" and "unscored" mid-word. Words are kept whole: a column is
# at least its longest word wide, and a table wider than the window scrolls in its `.wide` box.


# A dimension's value, as a verdict (a journal) holds it, in bytes once escaped: every value a
# judge gives is 8 characters at most (`no_dumps`, `partial`), so any of them fits, and a value
# that is text of some other kind is cut to its head rather than filling the page.
VALUE_BYTES = 48


def verdict_cell(verdict: Verdict, dimension: str) -> str:
    """One `<td>`: its class (the colour) and a glyph with the value (the same without it)."""
    value = escape_within(getattr(verdict, dimension) or "", VALUE_BYTES)
    if verdict.status == "unscored":
        return "<td class='na'>? unscored</td>"
    if verdict.status != "scored":
        return f"<td class='na'>– {value or 'invalid'}</td>"
    if verdict.passed(dimension):
        return f"<td class='ok'>✓ {value}</td>"
    return f"<td class='bad'>✗ {value}</td>"


def session_prefix(cases: Sequence[Case]) -> str:
    """`SESSION/` when every case id names the same session (`SESSION/EXPERIMENT`), else "": a
    page says it once, above the table, not on every row."""
    prefixes = {c.id.partition("/")[0] + "/" if "/" in c.id else "" for c in cases}
    return prefixes.pop() if len(prefixes) == 1 else ""


def page(cases: Sequence[Case], verdicts: Sequence[Verdict], summary: Summary, judge: str) -> str:
    rates = " · ".join(f"{SHORT[d]} {percent(summary.rates[d])}" for d in DIMENSIONS)
    head = (
        "<th>case</th><th>fault</th><th>rank</th>"
        + "".join(f"<th>{escape(SHORT[d])}</th>" for d in DIMENSIONS)
        + "<th>notes</th>"
    )
    prefix = session_prefix(cases)
    rows = []
    for case, v in zip(cases, verdicts, strict=True):
        notes = escape(v.reason if v.status == "unscored" else v.notes or "")
        if case.changed:
            notes = (
                f"<span class='changed'>⚠ changed after the campaign judged it: "
                f"{escape(', '.join(case.changed))}</span> {notes}"
            )
        rows.append(
            f"<tr><td><code>{escape(case.id.removeprefix(prefix))}</code></td>"
            f"<td>{escape(case.truth.fault.value)}</td>"
            f"<td>{case.truth.rank}</td>{''.join(verdict_cell(v, d) for d in DIMENSIONS)}"
            f"<td>{notes}</td></tr>"
        )
    below = "".join(
        f"<p class='bad'>Below threshold: {escape(d)} {percent(got)} &lt; {wanted:.0%}</p>"
        for d, wanted, got in summary.failed_thresholds
    )
    where = f"Session <code>{escape(prefix[:-1])}</code>: " if prefix else ""
    body = (
        f"<h1>nvrx score ({escape(judge)})</h1>"
        f"<p>{where}{counted(summary.cases, 'case')}: {summary.scored} scored, "
        f"{summary.invalid} invalid, {summary.unscored} unscored. Pass rates: {escape(rates)}.</p>"
        f"{below}{LEGEND}"
        f"<div class='wide'><table class='verdicts'><tr>{head}</tr>{''.join(rows)}</table></div>"
    )
    return document(f"nvrx score ({judge})", body, CSS)
