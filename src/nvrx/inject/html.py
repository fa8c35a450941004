"""`report.html`: one self-contained page per session, rebuilt from the journal like every other
report (so a resumed or re-analysed session gives the same page).

Self-contained means it works opened from a shared filesystem with no network: inline CSS and
SVG, no script, no font, no image, no link outside the session but its own files (relative
links). Everything from outside (log lines, judge notes, file names) is HTML-escaped. Each
experiment's evidence is cut (`EXCERPT_CHARS`, `TABLE_CHARS`) so that a 1,000-experiment page
stays a few megabytes; past `EVIDENCE_SECTIONS` experiments, only those that do not pass carry
their evidence (the first `EVIDENCE_SECTIONS` of them) and the others link to their files, and
the list of changes since the previous session is cut at `TREND_ITEMS`: a 10,000-experiment
page stays under 15 MB and opens in a browser in seconds.

One module because the page's sections and its size budget are one layout: what each part may
take is what keeps the whole bounded.

Pure: `page` is a function of the rows and the evidence, which `inject.report` reads from each
experiment's files (bounded reads) and `evidence_of` cuts.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from nvrx.config import STOP_DIMENSIONS
from nvrx.htmlpage import document, escape
from nvrx.inject.rows import Change, Row, rank_position
from nvrx.score.evidence import judge_excerpt
from nvrx.score.html import CSS as VERDICT_CSS
from nvrx.score.html import LEGEND, SHORT, verdict_cell
from nvrx.score.model import DIMENSIONS, passes_all

EXCERPT_CHARS = 1200
TABLE_CHARS = 900
NOTES_CHARS = 600
BRIEF_NOTES_CHARS = 200  # the judge's note in a section without its evidence
EVIDENCE_SECTIONS = 1000  # experiments whose section carries the evidence itself
EVIDENCE_BYTES = 6_000_000  # and the bytes those sections may take, all together
TREND_ITEMS = 500  # changes listed one by one; `nvrx report diff` lists every one
TREND_PICTURE_ROWS = 60  # changed experiments drawn in the picture of changes


@dataclass(frozen=True)
class Evidence:
    """What one experiment's page section shows besides its verdict."""

    excerpt: str = ""  # the blinded log's lines the judge saw
    attribution: str = ""  # the log analyser's 5-field text
    fr_table: str = ""  # the FR analyser's missing-rank table, or `no_dumps`
    files: tuple[str, ...] = ()  # paths relative to the session dir, for links
    shown: bool = True  # False: past the page's evidence budget, the section links its files


def _cut(text: str, limit: int, *, keep: str = "tail") -> str:
    """At most `limit` characters: a log's tail (where it failed), or a note's head."""
    if len(text) <= limit:
        return text
    return "…" + text[-(limit - 1) :] if keep == "tail" else text[: limit - 1] + "…"


def evidence_of(log: str, attribution: str, fr_table: str, files: tuple[str, ...]) -> Evidence:
    """An experiment's analysis files (their texts, "" where missing) cut for the page."""
    return Evidence(
        excerpt=_cut(judge_excerpt(log), EXCERPT_CHARS),
        # The analysers' answers lead with their decision: keep their heads.
        attribution=_cut(attribution, TABLE_CHARS, keep="head"),
        fr_table=_cut(fr_table, TABLE_CHARS, keep="head"),
        files=files,
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
    columns = [f"{n} nodes · rank {p}" for n, p in shapes]
    cells = {}
    for (fault, nodes, pos), members in every.items():
        scored = sum(r.verdict.status == "scored" for r in members)
        ok = sum(passes_all(r.verdict, dimensions) for r in members)
        rate = ok / scored if scored else None
        tip = f"{fault}, {nodes} nodes, rank {pos}: {ok} of {scored} scored pass all"
        cells[(fault, f"{nodes} nodes · rank {pos}")] = (rate, tip)
    title = "Pass rate (every stop dimension): fault type × nodes × rank position"
    return _heatmap(title, faults, columns, cells)


def _trend(
    changes: Sequence[Change] | None, only_old: Sequence[str], only_new: Sequence[str]
) -> str:
    if changes is None:
        return "<p class='dim'>No previous session to compare with.</p>"
    if not changes and not only_old and not only_new:
        return "<p>No cell changed since the previous session.</p>"
    items = [
        f"<li class='{'up' if c.improved else 'down'}'>{'▲' if c.improved else '▼'} "
        f"{_e(c.entry)} {_e(SHORT.get(c.dimension, c.dimension))}: {_e(c.before)} → "
        f"{_e(c.after)}</li>"
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
        cells: dict[tuple[str, str], tuple[float | None, str]] = {
            (c.entry, SHORT.get(c.dimension, c.dimension)): (
                1.0 if c.improved else 0.0,
                f"{c.entry} {c.dimension}: {c.before} → {c.after}",
            )
            for c in changes
        }
        labels = {
            key: ("▲ " if rate else "▼ ") + tip.rsplit(": ", 1)[1]
            for key, (rate, tip) in cells.items()
        }
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


def _escaped(text: str, limit: int, *, keep: str = "head") -> str:
    """`text` HTML-escaped in at most `limit` bytes of UTF-8, its head or its tail (neither a
    character nor an entity cut in two): escaping can make text six times longer, and non-Latin
    text is three bytes a character, so a part's budget is counted in what the page carries."""
    out = _e(text)
    if len(out) * 4 <= limit:  # UTF-8 is at most 4 bytes a character: no need to encode
        return out
    data = out.encode()
    if len(data) <= limit:
        return out
    room = max(limit - 3, 0)  # "…" is 3 bytes
    if keep == "tail":
        piece = data[len(data) - room :].decode("utf-8", "ignore")
        entity_tail = _ENTITY_TAIL.match(piece)
        return "…" + (piece[entity_tail.end() :] if entity_tail else piece)
    piece = data[:room].decode("utf-8", "ignore")
    amp = piece.rfind("&")
    if amp != -1 and ";" not in piece[amp:]:
        piece = piece[:amp]  # an entity cut short
    return piece + "…"


_ENTITY_TAIL = re.compile(r"[#\w]{1,8};")  # the end of an entity whose `&` a tail cut off


def _section_bytes(chars: int) -> int:
    """The bytes a part of `chars` characters may take on the page: twice its characters (room
    for the quotes and brackets of a traceback), never six times."""
    return 2 * chars


def _experiment(row: Row, ev: Evidence, dimensions: Sequence[str]) -> str:
    """One experiment's section: its verdict, the judge's note, the evidence (unless past the
    page's budget: a brief section) and the links to its files. Every part from outside has a
    byte budget, so a section's size is bounded whatever the journal and the files hold."""
    r, v = row.record, row.verdict
    e = r.experiment
    badge = {"scored": "pass" if passes_all(v, dimensions) else "fail"}.get(v.status, v.status)
    state = _escaped(f"{r.state or r.status}{' exit ' + r.exit if r.exit else ''}", 120)
    parts = [
        f"<details id='{_escaped(row.case.id, 300)}'><summary><span class='badge {badge}'>"
        f"{_e(badge)}</span> <code>{_e(e.entry)}</code> job {_escaped(r.job_id or '–', 60)} "
        f"{state}</summary>"
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
        parts.append(
            "<p class='changed'>⚠ Changed after it was judged: "
            f"{_escaped(', '.join(row.case.changed), 200)} (the verdict shown is the one judged "
            "before).</p>"
        )
    chars = NOTES_CHARS if ev.shown else BRIEF_NOTES_CHARS
    why = _escaped(_cut(v.notes or v.reason or "", chars, keep="head"), _section_bytes(chars))
    if why:
        parts.append(f"<p><b>Judge ({_escaped(v.judge, 60)}):</b> {why}</p>")
    if ev.attribution:
        text = _escaped(ev.attribution, _section_bytes(TABLE_CHARS))
        parts.append(f"<h4>Log attribution</h4><pre>{text}</pre>")
    if ev.excerpt:
        text = _escaped(ev.excerpt, _section_bytes(EXCERPT_CHARS), keep="tail")
        parts.append(f"<h4>Blinded log excerpt (what the judge saw)</h4><pre>{text}</pre>")
    if ev.fr_table:
        text = _escaped(ev.fr_table, _section_bytes(TABLE_CHARS))
        parts.append(f"<h4>Flight recorder: missing ranks</h4><pre>{text}</pre>")
    if ev.files:
        # The section names its experiment: a link says the file's name.
        links = " · ".join(
            f"<a href='{_escaped(f, 300)}'>{_escaped(Path(f).name, 60)}</a>" for f in ev.files
        )
        lead = "" if ev.shown else "Evidence not on this page: "
        parts.append(f"<p class='files'>{lead}{links}</p>")
    parts.append("</details>")
    return "".join(parts)


def _sections(
    rows: Sequence[Row], evidences: Sequence[Evidence], dimensions: Sequence[str]
) -> tuple[list[str], int]:
    """Every experiment's section, in order, and how many show their evidence; once those have
    taken EVIDENCE_BYTES, the rest are brief (the page's size is bounded, whatever the
    evidence)."""
    out, spent, shown = [], 0, 0
    for row, ev in zip(rows, evidences, strict=True):
        if ev.shown and spent >= EVIDENCE_BYTES:
            ev = replace(ev, excerpt="", attribution="", fr_table="", shown=False)
        section = _experiment(row, ev, dimensions)
        if ev.shown:
            spent += len(section)
            shown += 1
        out.append(section)
    return out, shown


def _evidence_note(sections: int, shown: int) -> str:
    if shown == sections:
        return ""
    return (
        f"<p class='legend'>{sections} experiments: the evidence itself is shown for "
        f"{shown} of them, those that do not pass first (at most "
        f"{EVIDENCE_SECTIONS}); every other section links to its files.</p>"
    )


_CSS = """
details{border:1px solid #ddd;border-radius:4px;margin:4px 0;padding:4px 8px}
summary{cursor:pointer}.badge{display:inline-block;min-width:56px;text-align:center;
border-radius:3px;padding:0 4px;color:#fff;font-size:12px}
.pass{background:#1a7f37}.fail{background:#b42318}.invalid{background:#6e7781}
.unscored{background:#9a6700}table.dims td,table.dims th{padding:2px 8px;font-size:12px}
ul.trend{columns:2}.files a{font-size:12px}p.legend{font-size:12px;color:#555;margin:4px 0}
"""


def page(
    session_dir: Path,
    rows: Sequence[Row],
    stop: tuple[bool, str],
    evidences: Sequence[Evidence],
    trend: tuple[Sequence[Change], Sequence[str], Sequence[str]] | None,
    dimensions: Sequence[str] = STOP_DIMENSIONS,
) -> str:
    """The whole page, a pure function of its inputs (the same journal gives the same page).
    `evidences` holds one per row (`shown` False past the page's budget: `with_evidence`)."""
    scored = [r for r in rows if r.verdict.status == "scored"]
    sections, shown = _sections(rows, evidences, dimensions)

    def rate(d: str) -> float | None:
        return sum(r.verdict.passed(d) for r in scored) / len(scored) if scored else None

    rates = " · ".join(f"{SHORT[d]} {_percent(rate(d))}" for d in DIMENSIONS)
    changes, only_old, only_new = trend if trend is not None else (None, (), ())
    body = [
        HATCH,
        f"<h1>Fault-injection campaign {_e(session_dir.name)}</h1>",
        f"<p>{len(rows)} experiment(s), {len(scored)} scored. Pass rates: {_e(rates)}.</p>",
        f"<p><b>Stop condition: {'met' if stop[0] else 'not met'}</b> ({_e(stop[1])})</p>",
        "<h2>Where attribution fails</h2>",
        _by_dimension(rows) if rows else "<p class='dim'>No experiment.</p>",
        _by_shape(rows, dimensions) if rows else "",
        "<h2>Against the previous session</h2>",
        _trend(changes, only_old, only_new),
        "<h2>Experiments</h2>",
        LEGEND,
        _evidence_note(len(sections), shown),
        *sections,
    ]
    return document(f"nvrx report {session_dir.name}", "".join(body), VERDICT_CSS + _CSS)
