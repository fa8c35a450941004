"""`report.html`: one self-contained page per session, rebuilt from the journal like every other
report (so a resumed or re-analysed session gives the same page).

Self-contained means it works opened from a shared filesystem with no network: inline CSS and
SVG, no script, no font, no image, no link outside the session but its own files (relative
links). Everything from outside (log lines, judge notes, file names) is HTML-escaped. Each
experiment's evidence is cut (`EXCERPT_CHARS`, `TABLE_CHARS`) so that a 1,000-experiment page
stays a few megabytes; past `EVIDENCE_SECTIONS` experiments, only those that do not pass carry
their evidence (the first `EVIDENCE_SECTIONS` of them) and the others link to their files, and
the list of changes since the previous session is cut at `TREND_ITEMS`, the shape heatmap at
`SHAPE_COLUMNS`, and all the sections at `SECTIONS_BYTES` (past it a section leaves its text from
outside out): a 10,000-experiment page stays under 15 MB whatever the journal holds, and opens
in a browser in seconds.

One module because the page's sections and its size budget are one layout: what each part may
take is what keeps the whole bounded.

Pure: `page` is a function of the rows and the evidence, which `inject.report` reads from each
experiment's files (bounded reads) and `evidence_of` cuts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from nvrx.config import STOP_DIMENSIONS
from nvrx.display import counted
from nvrx.htmlpage import document, escape, escape_within, word_end, word_start
from nvrx.inject.rows import Change, Row, Stop, rank_position, stop_sentence
from nvrx.score.evidence import judge_excerpt
from nvrx.score.html import CSS as VERDICT_CSS
from nvrx.score.html import LEGEND, SHORT, VALUE_BYTES, verdict_cell
from nvrx.score.model import DIMENSIONS, passes_all

EXCERPT_CHARS = 1200
TABLE_CHARS = 900
NOTES_CHARS = 600
BRIEF_NOTES_CHARS = 200  # the judge's note in a section without its evidence
EVIDENCE_SECTIONS = 1000  # experiments whose section carries the evidence itself
EVIDENCE_BYTES = 6_000_000  # and the bytes those sections may take, all together
# The bytes every section may take, all together: past them a section leaves out its text from
# outside (`_sections`). The rest of the page (the heatmaps, the trend) takes under 1 MB
# whatever the journal holds, so a page stays under 15 MB.
SECTIONS_BYTES = 13_000_000
TREND_ITEMS = 500  # changes listed one by one; `nvrx report diff` lists every one
TREND_PICTURE_ROWS = 60  # changed experiments drawn in the picture of changes
# Shapes (nodes × rank position) drawn as columns of the shape heatmap: a pool of 12 node counts
# at every position; a journal of 10,000 node counts would draw 120,000 cells (35 MB).
SHAPE_COLUMNS = 48


@dataclass(frozen=True)
class Evidence:
    """What one experiment's page section shows besides its verdict."""

    excerpt: str = ""  # the blinded log's lines the judge saw
    attribution: str = ""  # the log analyser's 5-field text
    fr_table: str = ""  # the FR analyser's missing-rank table, or `no_dumps`
    files: tuple[str, ...] = ()  # paths relative to the session dir, for links
    cut: frozenset[str] = frozenset()  # the parts cut to their head: attribution, fr_table
    shown: bool = True  # False: past the page's evidence budget, the section links its files


def _cut(text: str, limit: int, *, keep: str = "tail") -> str:
    """At most `limit` characters: a log's tail (where it failed), or a note's head, cut
    between words (`htmlpage.word_end`)."""
    if len(text) <= limit:
        return text
    if keep == "tail":
        tail = text[-(limit - 1) :]
        return "…" + tail[word_start(tail, text[-limit]) :]
    head = text[: limit - 1]
    return head[: word_end(head, text[limit - 1])].rstrip() + "…"


def evidence_of(log: str, attribution: str, fr_table: str, files: tuple[str, ...]) -> Evidence:
    """An experiment's analysis files (their texts, "" where missing) cut for the page."""
    cut = frozenset(
        name
        for name, text in (("attribution", attribution), ("fr_table", fr_table))
        if len(text) > TABLE_CHARS
    )
    return Evidence(
        excerpt=_cut(judge_excerpt(log), EXCERPT_CHARS),
        # The analysers' answers lead with their decision: keep their heads.
        attribution=_cut(attribution, TABLE_CHARS, keep="head"),
        fr_table=_cut(fr_table, TABLE_CHARS, keep="head"),
        files=files,
        cut=cut,
    )


def with_evidence(rows: Sequence[Row], dimensions: Sequence[str] = STOP_DIMENSIONS) -> list[int]:
    """The positions of the rows whose section shows its evidence: every row up to
    EVIDENCE_SECTIONS; beyond, the first EVIDENCE_SECTIONS that do not pass (what a reader opens
    the page for)."""
    if len(rows) <= EVIDENCE_SECTIONS:
        return list(range(len(rows)))
    failing = (i for i, r in enumerate(rows) if not passes_all(r.verdict, dimensions))
    return [i for i, _ in zip(failing, range(EVIDENCE_SECTIONS), strict=False)]


# --- pure rendering --------------------------------------------------------------------------


_e = escape


def _colour(rate: float | None) -> str:
    """Red (0) through amber to green (1); grey when nothing was scored."""
    if rate is None:
        return "#d9d9d9"
    hue = round(120 * rate)  # 0 red, 60 amber, 120 green
    return f"hsl({hue},65%,62%)"


def _percent(rate: float | None) -> str:
    return "–" if rate is None else f"{round(100 * rate)}%"


_CHAR_PX = 8.5  # one character of the 12 px heatmap text, capitals included: cells fit theirs
# One hatch for the whole page (an SVG pattern serves every picture of the document): the cells
# below half, so that a cell's state never rests on red and green alone.
HATCH = (
    "<svg width='0' height='0' style='position:absolute' aria-hidden='true'><defs>"
    "<pattern id='hatch' width='6' height='6' patternUnits='userSpaceOnUse' "
    "patternTransform='rotate(45)'><rect width='2.5' height='6' fill='#000' fill-opacity='.28'/>"
    "</pattern></defs></svg>"
)
HEATMAP_LEGEND = (
    "<p class='legend'>Cells: the share of scored experiments that pass; ✓ all pass, ✗ and "
    "hatched below half; <span class='na'>–</span> ran but none scored; blank: no experiment "
    "of that kind.</p>"
)


def _heatmap(
    title: str,
    rows: Sequence[str],
    columns: Sequence[str],
    cells: dict[tuple[str, str], tuple[float | None, str]],
    labels: dict[tuple[str, str], str] | None = None,
    legend: str = HEATMAP_LEGEND,
) -> str:
    """An SVG grid: one row per `rows`, one column per `columns`, each cell coloured by its rate,
    hatched below half, and labelled (its percentage, or `labels`); `cells` maps (row, column) →
    (rate, tooltip). Columns and the row labels are as wide as their longest text."""

    def text_of(key: tuple[str, str]) -> str:
        if key not in cells:
            return ""
        rate = cells[key][0]
        if labels and key in labels:
            return labels[key]
        mark = "✓ " if rate == 1 else "✗ " if rate is not None and rate < 0.5 else ""
        return mark + _percent(rate)

    # A header `a · b` is two lines, so that neighbouring headers never overlap.
    heads = [c.partition(" · ")[::2] for c in columns]
    lines = max((2 if second else 1) for _, second in heads) if heads else 1
    longest = max(
        [len(t) for pair in heads for t in pair]
        + [len(text_of((r, c))) for r in rows for c in columns]
    )
    cw = max(72, round(longest * _CHAR_PX) + 16)
    left = max(60, round(max(len(r) for r in rows) * _CHAR_PX) + 14)
    ch, top = 26, 14 * lines + 12
    width, height = left + cw * len(columns) + 8, top + ch * len(rows) + 8
    out = [
        f"<figure><figcaption>{_e(title)}</figcaption>"
        f'<svg role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'style="max-width:100%;height:auto">'
    ]
    for j, (first, second) in enumerate(heads):
        x = left + j * cw + cw // 2
        parts = [first, second] if second else [first]
        spans = "".join(
            f'<tspan x="{x}" dy="{14 if k else 0}">{_e(t)}</tspan>' for k, t in enumerate(parts)
        )
        y = top - 8 - 14 * (len(parts) - 1)
        out.append(f'<text x="{x}" y="{y}" text-anchor="middle" class="h">{spans}</text>')
    for i, name in enumerate(rows):
        y = top + i * ch
        out.append(
            f'<text x="{left - 8}" y="{y + 17}" text-anchor="end" class="h">{_e(name)}</text>'
        )
        for j, column in enumerate(columns):
            key = (name, column)
            rate, tip = cells.get(key, (None, "no experiment"))
            x = left + j * cw
            absent = key not in cells
            fill = "#ffffff" if absent else _colour(rate)
            hatch = (
                f'<rect x="{x + 1}" y="{y + 1}" width="{cw - 2}" height="{ch - 2}" '
                'fill="url(#hatch)"/>'
                if rate is not None and rate < 0.5
                else ""
            )
            out.append(
                f'<g class="cell"><title>{_e(tip)}</title><rect x="{x + 1}" y="{y + 1}" '
                f'width="{cw - 2}" height="{ch - 2}" fill="{fill}" stroke="#bbb"/>{hatch}'
                f'<text x="{x + cw // 2}" y="{y + 17}" text-anchor="middle">'
                f"{_e(text_of(key))}</text></g>"
            )
    out.append(f"</svg>{legend}</figure>")
    return "".join(out)


def _by_dimension(rows: Sequence[Row]) -> str:
    faults = sorted({r.record.experiment.fault.value for r in rows})
    scored: dict[str, int] = defaultdict(int)
    passed: dict[tuple[str, str], int] = defaultdict(int)
    for r in rows:
        fault = r.record.experiment.fault.value
        if r.verdict.status == "scored":
            scored[fault] += 1
            for d in DIMENSIONS:
                passed[(fault, d)] += r.verdict.passed(d)
    cells = {
        (f, SHORT[d]): (
            passed[(f, d)] / scored[f] if scored[f] else None,
            f"{f} · {SHORT[d]}: {passed[(f, d)]} of {scored[f]} scored pass",
        )
        for f in faults
        for d in DIMENSIONS
    }
    return _heatmap(
        "Pass rate: fault type × dimension", faults, [SHORT[d] for d in DIMENSIONS], cells
    )


def _by_shape(rows: Sequence[Row], dimensions: Sequence[str]) -> str:
    """fault type × (nodes, rank position), coloured by the share of scored experiments that
    pass every stop dimension."""
    every: dict[tuple[str, int, str], list[Row]] = defaultdict(list)
    for r in rows:
        e = r.record.experiment
        every[(e.fault.value, e.nodes, rank_position(e.rank, r.case.truth.total_ranks))].append(r)
    faults = sorted({f for f, _, _ in every})
    order = {"0": 0, "1": 1, "mid": 2, "last": 3}
    shapes = sorted({(n, p) for _, n, p in every}, key=lambda s: (s[0], order.get(s[1], 9)))
    legend = HEATMAP_LEGEND
    if len(shapes) > SHAPE_COLUMNS:
        legend += (
            f"<p class='legend'>The first {SHAPE_COLUMNS} of {len(shapes)} shapes: "
            "<code>experiments_report.md</code>'s matrix lists every one.</p>"
        )
        shapes = shapes[:SHAPE_COLUMNS]
    columns = [f"{n} nodes · rank {p}" for n, p in shapes]
    cells = {}
    for (fault, nodes, pos), members in every.items():
        if (nodes, pos) not in shapes:
            continue
        scored = sum(r.verdict.status == "scored" for r in members)
        ok = sum(passes_all(r.verdict, dimensions) for r in members)
        rate = ok / scored if scored else None
        tip = f"{fault}, {nodes} nodes, rank {pos}: {ok} of {scored} scored pass all"
        cells[(fault, f"{nodes} nodes · rank {pos}")] = (rate, tip)
    title = "Pass rate (every stop dimension): fault type × nodes × rank position"
    return _heatmap(title, faults, columns, cells, legend=legend)


def _picture_value(value: str) -> str:
    """A verdict value as the picture of changes draws it (`_heatmap` escapes it, and sizes its
    columns by it): a character escapes to 6 bytes at most, so VALUE_BYTES // 6 characters
    keep it within VALUE_BYTES, as in a verdict cell."""
    return _cut(value, VALUE_BYTES // 6, keep="head")


def _trend(
    changes: Sequence[Change] | None, only_old: Sequence[str], only_new: Sequence[str]
) -> str:
    if changes is None:
        return "<p class='dim'>No previous session to compare with.</p>"
    if not changes and not only_old and not only_new:
        return "<p>No cell changed since the previous session.</p>"
    items = [
        f"<li class='{'up' if c.improved else 'down'}'>{'▲' if c.improved else '▼'} "
        f"{_e(c.entry)} {_e(SHORT.get(c.dimension, c.dimension))}: "
        f"{escape_within(c.before, VALUE_BYTES)} → {escape_within(c.after, VALUE_BYTES)}</li>"
        for c in changes[:TREND_ITEMS]
    ]
    room = max(TREND_ITEMS - len(items), 0)
    items += [
        f"<li class='dim'>only in the previous session: {_e(e)}</li>" for e in only_old[:room]
    ]
    room = max(TREND_ITEMS - len(items), 0)
    items += [f"<li class='dim'>new in this session: {_e(e)}</li>" for e in only_new[:room]]
    left = len(changes) + len(only_old) + len(only_new) - len(items)
    if left:
        items.append(
            f"<li class='dim'>… and {left} more: <code>nvrx report diff</code> lists every one</li>"
        )
    up = sum(c.improved for c in changes)
    picture = ""
    entries = sorted({c.entry for c in changes})
    if changes and len(entries) <= TREND_PICTURE_ROWS:
        # report diff as a picture: changed experiments × dimensions (a picture of thousands of
        # rows is not read; the list says them)
        cells: dict[tuple[str, str], tuple[float | None, str]] = {}
        labels: dict[tuple[str, str], str] = {}
        for c in changes:
            key = (c.entry, SHORT.get(c.dimension, c.dimension))
            values = f"{_picture_value(c.before)} → {_picture_value(c.after)}"
            cells[key] = (1.0 if c.improved else 0.0, f"{c.entry} {c.dimension}: {values}")
            labels[key] = ("▲ " if c.improved else "▼ ") + values
        picture = _heatmap(
            "Changed since the previous session",
            entries,
            [SHORT[d] for d in DIMENSIONS],
            cells,
            labels,
            "<p class='legend'>▲ improved (green), ▼ regressed (red, hatched), blank: unchanged."
            "</p>",
        )
    return (
        f"<p>{up} improved, {len(changes) - up} regressed since the previous session.</p>"
        f"{picture}<ul class='trend'>{''.join(items)}</ul>"
    )


def _section_bytes(chars: int) -> int:
    """The bytes a part of `chars` characters may take on the page: twice its characters (room
    for the quotes and brackets of a traceback), never six times."""
    return 2 * chars


def _experiment(row: Row, ev: Evidence, dimensions: Sequence[str], *, bare: bool = False) -> str:
    """One experiment's section: its verdict, the judge's note, the evidence (unless past the
    page's budget: a brief section) and the links to its files. Every part from outside has a
    byte budget, so a section's size is bounded whatever the journal and the files hold. A
    `bare` section (brief, past SECTIONS_BYTES) leaves out the job, its state and the judge's
    note: what is left is nvrx's own text."""
    r, v = row.record, row.verdict
    e = r.experiment
    badge = {"scored": "pass" if passes_all(v, dimensions) else "fail"}.get(v.status, v.status)
    job = ""
    if not bare:
        state = escape_within(f"{r.state or r.status}{' exit ' + r.exit if r.exit else ''}", 120)
        job = f" job {escape_within(r.job_id or '–', 60)} {state}"
    parts = [
        f"<details id='{escape_within(row.case.id, 300)}'><summary><span class='badge {badge}'>"
        f"{_e(badge)}</span> <code>{_e(e.entry)}</code>{job}</summary>"
    ]
    if ev.shown:
        dims = "".join(verdict_cell(v, d) for d in DIMENSIONS)
        parts.append(
            "<table class='dims'><tr>"
            + "".join(f"<th>{_e(SHORT[d])}</th>" for d in DIMENSIONS)
            + f"</tr><tr>{dims}</tr></table>"
        )
    elif passes_all(v, DIMENSIONS):
        parts.append("<p class='dim'>Every dimension passes.</p>")
    else:  # brief: the dimensions on one line, those that do not pass marked
        marks = " · ".join(f"{SHORT[d]} {'✓' if v.passed(d) else '✗'}" for d in DIMENSIONS)
        status = "" if v.status == "scored" else f"{_e(v.status)}: "
        parts.append(f"<p class='dim'>{status}{marks}</p>")
    if row.case.changed:
        which = "" if bare else f": {escape_within(', '.join(row.case.changed), 200)}"
        parts.append(
            f"<p class='changed'>⚠ Changed after it was judged{which} (the verdict shown is the "
            "one judged before).</p>"
        )
    chars = NOTES_CHARS if ev.shown else BRIEF_NOTES_CHARS
    why = escape_within(_cut(v.notes or v.reason or "", chars, keep="head"), _section_bytes(chars))
    if why and not bare:
        parts.append(f"<p><b>Judge ({escape_within(v.judge, 60)}):</b> {why}</p>")
    if ev.attribution:
        parts.append(_evidence_part("Log attribution", "", ev.attribution, "attribution" in ev.cut))
    if ev.excerpt:
        text = escape_within(ev.excerpt, _section_bytes(EXCERPT_CHARS), keep="tail")
        parts.append(f"<h4>Blinded log excerpt (what the judge saw)</h4><pre>{text}</pre>")
    if ev.fr_table:
        # A table keeps its columns: its lines are not wrapped, the box scrolls instead.
        parts.append(
            _evidence_part(
                "Flight recorder: missing ranks", "table", ev.fr_table, "fr_table" in ev.cut
            )
        )
    if ev.files:
        # The section names its experiment: a link says the file's name.
        links = " · ".join(
            f"<a href='{escape_within(f, 300)}'>{escape_within(Path(f).name, 60)}</a>"
            for f in ev.files
        )
        lead = "" if ev.shown else "Evidence not on this page: "
        parts.append(f"<p class='files'>{lead}{links}</p>")
    parts.append("</details>")
    return "".join(parts)


def _evidence_part(title: str, css_class: str, text: str, cut: bool) -> str:
    """An analyser's answer under its title; when the page shows only its head (`cut` to it, or
    past its bytes here), a line after it says so: the section links its whole file."""
    budget = _section_bytes(TABLE_CHARS)
    attr = f" class='{css_class}'" if css_class else ""
    out = f"<h4>{_e(title)}</h4><pre{attr}>{escape_within(text, budget)}</pre>"
    if cut or len(escape(text).encode()) > budget:
        out += "<p class='legend'>Only its head is shown: its whole file is linked below.</p>"
    return out


def _sections(
    rows: Sequence[Row], evidences: Sequence[Evidence], dimensions: Sequence[str]
) -> tuple[list[str], int, int]:
    """Every experiment's section, in order, how many show their evidence and how many are
    bare. Once the evidence has taken EVIDENCE_BYTES, the rest are brief; a section that would
    leave too little of SECTIONS_BYTES for the bare sections after it is bare itself. So the
    sections take SECTIONS_BYTES at most, whatever the journal and the evidence hold (as long
    as the bare ones fit: 10,000 take about 5 MB), and the first keep the most.

    A bare section is never larger than its full one, so when the full sections fit, none is
    bare: they are laid out once, and the bare ones are drawn only for a page that needs them
    (a second drawing of every section was a fifth of a 10,000-experiment page's time)."""
    brief = [replace(ev, excerpt="", attribution="", fr_table="", shown=False) for ev in evidences]
    out, shown, bared, spent = _laid_out(rows, evidences, brief, dimensions, None)
    if spent <= SECTIONS_BYTES:
        return out, shown, bared
    bare = [
        _experiment(row, ev, dimensions, bare=True) for row, ev in zip(rows, brief, strict=True)
    ]
    out, shown, bared, _ = _laid_out(rows, evidences, brief, dimensions, bare)
    return out, shown, bared


def _laid_out(
    rows: Sequence[Row],
    evidences: Sequence[Evidence],
    brief: Sequence[Evidence],
    dimensions: Sequence[str],
    bare: Sequence[str] | None,
) -> tuple[list[str], int, int, int]:
    """`_sections`' layout, and the bytes it took; `bare` None: no section is made bare."""
    # What the bare sections from each position to the end take: room kept for them.
    after = [0] * (len(rows) + 1)
    for i in range(len(rows) - 1, -1, -1):
        after[i] = after[i + 1] + (len(bare[i].encode()) if bare is not None else 0)
    out: list[str] = []
    spent = evidence_spent = shown = bared = 0
    for i, (row, ev) in enumerate(zip(rows, evidences, strict=True)):
        if ev.shown and evidence_spent >= EVIDENCE_BYTES:
            ev = brief[i]
        section = _experiment(row, ev, dimensions)
        size = len(section.encode())
        if bare is not None and spent + size + after[i + 1] > SECTIONS_BYTES:
            ev, section, size = brief[i], bare[i], after[i] - after[i + 1]
            bared += 1
        if ev.shown:
            evidence_spent += size
            shown += 1
        spent += size
        out.append(section)
    return out, shown, bared, spent


def _evidence_note(sections: int, shown: int, bare: int) -> str:
    note = ""
    if shown != sections:
        note = (
            f"<p class='legend'>{sections} experiments: the evidence itself is shown for "
            f"{shown} of them, those that do not pass first (at most "
            f"{EVIDENCE_SECTIONS}); every other section links to its files.</p>"
        )
    if bare:
        note += (
            f"<p class='legend'>Past the page's budget, {counted(bare, 'section')} "
            f"{'leaves' if bare == 1 else 'leave'} out the job, its "
            "state and the judge's note: <code>experiments_report.md</code> and "
            "<code>report.json</code> have them.</p>"
        )
    return note


_CSS = """
details{border:1px solid #ddd;border-radius:4px;margin:4px 0;padding:4px 8px}
summary{cursor:pointer}.badge{display:inline-block;min-width:56px;text-align:center;
border-radius:3px;padding:0 4px;color:#fff;font-size:12px}
.pass{background:#1a7f37}.fail{background:#b42318}.invalid{background:#6e7781}
.unscored{background:#9a6700}table.dims td,table.dims th{padding:2px 8px;font-size:12px}
ul.trend{columns:2}.files a{font-size:12px}p.legend{font-size:12px;color:#555;margin:4px 0}
pre.table{white-space:pre}
"""


def page(
    session_dir: Path,
    rows: Sequence[Row],
    stop: Stop,
    evidences: Sequence[Evidence],
    trend: tuple[Sequence[Change], Sequence[str], Sequence[str]] | None,
    dimensions: Sequence[str] = STOP_DIMENSIONS,
) -> str:
    """The whole page, a pure function of its inputs (the same journal gives the same page).
    `evidences` holds one per row (`shown` False past the page's budget: `with_evidence`)."""
    scored = [r for r in rows if r.verdict.status == "scored"]
    sections, shown, bare = _sections(rows, evidences, dimensions)

    def rate(d: str) -> float | None:
        return sum(r.verdict.passed(d) for r in scored) / len(scored) if scored else None

    rates = " · ".join(f"{SHORT[d]} {_percent(rate(d))}" for d in DIMENSIONS)
    sentence = stop_sentence(stop)
    changes, only_old, only_new = trend if trend is not None else (None, (), ())
    body = [
        HATCH,
        f"<h1>Fault-injection campaign {_e(session_dir.name)}</h1>",
        f"<p>{counted(len(rows), 'experiment')}, {len(scored)} scored. "
        f"Pass rates: {_e(rates)}.</p>",
        f"<p><b>{_e(sentence[:1].upper() + sentence[1:])}.</b></p>",
        "<h2>Where attribution fails</h2>",
        _by_dimension(rows) if rows else "<p class='dim'>No experiment.</p>",
        _by_shape(rows, dimensions) if rows else "",
        "<h2>Against the previous session</h2>",
        _trend(changes, only_old, only_new),
        "<h2>Experiments</h2>",
        LEGEND,
        _evidence_note(len(sections), shown, bare),
        *sections,
    ]
    return document(f"nvrx report {session_dir.name}", "".join(body), VERDICT_CSS + _CSS)
