"""`nvrx watch --html [FILE]`: the chain's timeline as one self-contained page, for the post-mortem
of a run: its generations, their cycles on each node over time (a restart is where one cycle
ends and the next begins), the spares standing by, the checkpoint, where the wall time went
(goodput), and the pass's findings marked where they were first seen.

A pure function of one pass's result. Bounded whatever the chain: the last `MAX_CYCLES` cycles,
on at most `MAX_NODES` nodes (the page says what it left out).

Laid out with HTML and CSS, not a fixed-size picture: times are percentages of the track, so the
timeline fills the width of any window while its text keeps its size. Colour is never the only
cue: open cycles and standby spares are hatched, restarts are dashed, each finding's marker has
its own shape, and a legend says which is which.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from nvrx.htmlpage import document, escape
from nvrx.slurm.hostlist import compress
from nvrx.watch.detectors.common import utc_text
from nvrx.watch.goodput import CATEGORIES, Goodput, span_text
from nvrx.watch.model import CycleInfo, Finding, Severity

if TYPE_CHECKING:
    from nvrx.watch.watcher import PassResult

MAX_CYCLES = 400
MAX_NODES = 96
# One colour per generation, in turn (a generation is one array job of the chain).
_PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#e15759")
_SEVERITY = {Severity.CRITICAL: "#b42318", Severity.WARNING: "#9a6700", Severity.INFO: "#1f6feb"}
_MARK = {Severity.CRITICAL: "◆", Severity.WARNING: "▲", Severity.INFO: "●"}  # shape, not colour
_CHAR_PX = 7.5  # about one character of the 12 px labels: a node name column that fits them
_CSS = """
.tl{margin:14px 0;font-size:12px}.tl .row{display:flex}
.tl .names{flex:none;text-align:right;padding-right:8px;color:#444}
.tl .names div{white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.tl .track{flex:1;position:relative;min-width:0;background:#fafafa;border:1px solid #ddd}
.tl .marks,.tl .axis{position:relative;flex:1;min-width:0}
.tl .marks{height:18px}.tl .axis{height:18px;color:#555}
.tl .axis span{position:absolute;top:2px;white-space:nowrap}
.tl .grid{position:absolute;top:0;bottom:0;width:1px;background:#e6e6e6}
.tl .bar{position:absolute;box-sizing:border-box;min-width:2px;border-radius:2px;overflow:hidden;
color:#fff;font-size:11px;line-height:1;white-space:nowrap;padding:2px 3px}
.tl .bar span{background:rgba(0,0,0,.45);border-radius:2px;padding:0 2px}
.tl .open{background-image:repeating-linear-gradient(45deg,rgba(255,255,255,.55) 0 3px,
transparent 3px 7px)}
.tl .standby{background:repeating-linear-gradient(45deg,#c9ced6 0 3px,#eef0f3 3px 7px);
border:1px dashed #8c959f}
.tl .restart{position:absolute;top:0;bottom:0;width:3px;margin-left:-1px;
background:repeating-linear-gradient(#b42318 0 5px,transparent 5px 8px)}
.tl .mark{position:absolute;top:0;font-size:13px;line-height:16px;margin-left:-6px}
.tl .restart-mark{position:absolute;top:1px;font-size:11px;color:#b42318;margin-left:-4px}
.legend{display:flex;flex-wrap:wrap;gap:4px 16px;font-size:12px;margin:6px 0}
.legend .key{display:inline-block;width:22px;height:11px;vertical-align:middle;margin-right:4px;
border-radius:2px}
table.good{border-collapse:collapse;font-size:13px}
table.good td,table.good th{padding:2px 10px;text-align:left;border-bottom:1px solid #eee}
table.good td.n{text-align:right}
"""


def _nodes(cycles: list[CycleInfo]) -> list[str]:
    """Nodes in the order they first worked, then the spares that only stood by."""
    # dict.fromkeys keeps first-seen order at C speed: 400 cycles on 16k nodes are 6M names.
    seen = dict.fromkeys(itertools.chain.from_iterable(c.active_nodes for c in cycles))
    seen.update(dict.fromkeys(itertools.chain.from_iterable(c.standby_nodes for c in cycles)))
    return list(seen)


def _runs(rows: list[int]) -> list[tuple[int, int]]:
    """[1, 2, 3, 7, 8] → [(1, 3), (7, 8)]."""
    runs: list[tuple[int, int]] = []
    for r in rows:
        if runs and r == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], r)
        else:
            runs.append((r, r))
    return runs


def _ticks(t0: datetime, t1: datetime) -> tuple[str, list[tuple[float, str]]]:
    """The axis caption and five ticks (percent of the track, label): hours and minutes when the
    span is within one UTC day (the caption gives the date), else the date too."""
    a, b = t0.astimezone(UTC), t1.astimezone(UTC)
    same_day = a.date() == b.date()
    caption = f"UTC, {a:%Y-%m-%d}" if same_day else "UTC"
    span = max((b - a).total_seconds(), 1.0)
    ticks = []
    for k in range(5):
        at = datetime.fromtimestamp(a.timestamp() + span * k / 4, tz=UTC)
        ticks.append((25.0 * k, f"{at:%H:%M}" if same_day else f"{at:%m-%d %H:%M}"))
    return caption, ticks


def _tick_style(pct: float) -> str:
    # The first label starts at its tick, the last ends at it: none reaches past the track.
    if pct <= 0:
        return "left:0"
    if pct >= 100:
        return "right:0"
    return f"left:{pct:.2f}%;transform:translateX(-50%)"


def _timeline(
    cycles: list[CycleInfo],
    nodes: list[str],
    now: datetime,
    findings: list[Finding],
    colour: dict[str, str],
) -> str:
    # From the first cycle drawn to the last one's end (now, while one is open): a chain that
    # ended long ago is drawn at its own scale; findings seen later sit at the right edge.
    t0, t1 = cycles[0].start, max(c.end or now for c in cycles)
    span = max((t1 - t0).total_seconds(), 1.0)
    row = 18 if len(nodes) <= 32 else 14
    caption, ticks = _ticks(t0, t1)
    widest = max(len(caption), *(len(n) for n in nodes))
    names_px = round(min(widest * _CHAR_PX + 12, 240))
    row_of = {n: i for i, n in enumerate(nodes)}

    def pct(at: datetime) -> float:
        return min(max((at - t0).total_seconds() / span * 100, 0.0), 100.0)

    names = f"<div class='names' style='width:{names_px}px'>"
    marks, bars = [], []
    for p, _ in ticks:
        bars.append(f"<div class='grid' style='left:{p:.2f}%'></div>")
    for c in cycles:
        x0, x1 = pct(c.start), pct(c.end or now)
        tip = escape(
            f"generation {c.job_id}, cycle {c.key}: {utc_text(c.start)} → "
            f"{utc_text(c.end) if c.end else 'open'} on {compress(c.active_nodes)}"
        )
        open_ = " open" if c.end is None else ""
        # One bar per run of adjacent node rows: a cycle on 64 neighbouring nodes is one bar.
        # A bar wide enough for its generation's id carries it (about 1000 px of track).
        wide = (x1 - x0) * 10 > len(c.job_id) * _CHAR_PX + 8
        label = f"<span>{escape(c.job_id)}</span>" if wide else ""
        for first, last in _runs(sorted(row_of[n] for n in c.active_nodes if n in row_of)):
            bars.append(
                f"<div class='bar cycle{open_}' title='{tip}' style='left:{x0:.3f}%;"
                f"width:{x1 - x0:.3f}%;top:{first * row + 2}px;"
                f"height:{(last - first + 1) * row - 4}px;"
                f"background-color:{colour[c.job_id]}'>{label}</div>"
            )
        standby = sorted(row_of[n] for n in c.standby_nodes if n in row_of)
        for first, last in _runs(standby):
            bars.append(
                f"<div class='bar standby' title='standby during cycle {escape(c.key)}' "
                f"style='left:{x0:.3f}%;width:{x1 - x0:.3f}%;top:{first * row + 4}px;"
                f"height:{(last - first + 1) * row - 8}px'></div>"
            )
    previous: CycleInfo | None = None
    for c in cycles:  # a restart: a cycle that follows another of the same generation
        if previous is not None and previous.job_id == c.job_id:
            at = pct(c.start)
            bars.append(
                f"<div class='restart' title='restart: cycle {escape(c.key)}' "
                f"style='left:{at:.3f}%'></div>"
            )
            marks.append(
                f"<span class='restart-mark' style='left:clamp(4px, {at:.3f}%, calc(100% - 8px))'>"
                "↻</span>"
            )
        previous = c
    for f in findings:
        at = pct(f.first_seen or now)
        marks.append(
            f"<span class='mark' title='{escape(f.severity.value)} {escape(f.detector)}: "
            f"{escape(f.summary)}' style='left:clamp(6px, {at:.3f}%, calc(100% - 8px));"
            f"color:{_SEVERITY[f.severity]}'>{_MARK[f.severity]}</span>"
        )
    labels = "".join(
        f"<div style='height:{row}px;line-height:{row}px' title='{escape(n)}'>{escape(n)}</div>"
        for n in nodes
    )
    axis = "".join(f"<span style='{_tick_style(p)}'>{escape(label)}</span>" for p, label in ticks)
    return (
        "<div class='tl'>"
        f"<div class='row'>{names}</div><div class='marks'>{''.join(marks)}</div></div>"
        f"<div class='row'>{names}{labels}</div>"
        f"<div class='track' style='height:{row * len(nodes)}px'>{''.join(bars)}</div></div>"
        f"<div class='row'>{names}{escape(caption)}</div><div class='axis'>{axis}</div></div>"
        "</div>"
    )


def _legend(generations: dict[str, str], cycles: list[CycleInfo], findings: list[Finding]) -> str:
    """A key for each kind of mark the timeline holds (and only those)."""
    keys = [
        f"<span><span class='key' style='background:{c}'></span>generation {escape(job)}</span>"
        for job, c in generations.items()
    ]
    if any(c.end is None for c in cycles):
        keys.append(
            "<span><span class='key open' style='background-color:#4e79a7'></span>"
            "cycle still open (hatched)</span>"
        )
    if any(c.standby_nodes for c in cycles):
        keys.append("<span><span class='key standby'></span>standby spare</span>")
    if len(cycles) > len(generations):
        keys.append(
            "<span><span class='key restart' style='position:static;display:inline-block;"
            "width:3px'></span> ↻ restart (dashed)</span>"
        )
    for severity in (Severity.CRITICAL, Severity.WARNING, Severity.INFO):
        if any(f.severity is severity for f in findings):
            keys.append(
                f"<span><span style='color:{_SEVERITY[severity]}'>{_MARK[severity]}</span> "
                f"{severity.value} finding, where first seen</span>"
            )
    return f"<div class='legend tl'>{''.join(keys)}</div>"


def _goodput(good: Goodput | None) -> str:
    if good is None or good.fraction is None:
        return "<p class='dim'>Goodput: nothing ran yet.</p>"
    rows = "".join(
        f"<tr><td>{escape(k)}</td><td class='n'>{escape(span_text(good.seconds.get(k, 0.0)))}</td>"
        f"<td class='n'>{100 * good.seconds.get(k, 0.0) / good.wall:.1f}%</td>"
        f"<td class='dim'>{escape(good.sources.get(k, ''))}</td></tr>"
        for k in CATEGORIES
        if good.seconds.get(k, 0.0) > 0 or k == "productive"
    )
    return (
        f"<p><b>Goodput: {100 * good.fraction:.1f}%</b> of {escape(span_text(good.wall))} "
        "(categories with no time are left out).</p>"
        "<table class='good'><tr><th>category</th><th>time</th><th>share</th><th>source</th></tr>"
        f"{rows}</table>"
    )


def timeline_page(result: PassResult) -> str:
    snap = result.snapshot
    chain = snap.chain
    name = chain.name or "(cycle files only)"
    cycles = list(snap.cycles[-MAX_CYCLES:])
    body = [f"<h1>nvrx watch timeline: {escape(name)}</h1>"]
    body.append(
        # The pass's state word, as on the screen (an exit code means nothing to a reader).
        f"<p><b>{escape(result.state.upper())}</b>: seen {utc_text(snap.observed_at)} "
        f"from {escape(snap.host)}"
        f"{' (blind: the watcher could not see everything)' if result.degraded else ''}.</p>"
    )
    ckpt = snap.checkpoint
    if ckpt.value is not None:
        when = f", written {utc_text(ckpt.mtime)}" if ckpt.mtime else ""
        body.append(f"<p>Checkpoint: iteration {escape(ckpt.value)}{escape(when)}.</p>")
    body.append(_goodput(result.goodput))
    if not cycles:
        body.append("<p class='dim'>No cycle-info files yet: nothing to draw.</p>")
    else:
        nodes = _nodes(cycles)
        left_out = []
        if len(snap.cycles) > len(cycles):
            left_out.append(f"the {len(snap.cycles) - len(cycles)} earliest cycles")
        if len(nodes) > MAX_NODES:
            left_out.append(f"{len(nodes) - MAX_NODES} nodes")
            nodes = nodes[:MAX_NODES]
        generations = dict.fromkeys(c.job_id for c in cycles)
        restarts = len(cycles) - len(generations)
        spares = {n for c in cycles for n in c.standby_nodes}
        body.append(
            f"<h2>Timeline</h2><p>{len(cycles)} cycles in {len(generations)} generation(s), "
            f"{restarts} restart(s), on {len(nodes)} node(s)"
            f"{f' ({len(spares)} of them standby spares at some point)' if spares else ''}. "
            "Each bar is a cycle on a run of neighbouring nodes.</p>"
        )
        if left_out:
            body.append(f"<p class='dim'>Not drawn: {escape(', '.join(left_out))}.</p>")
        # One colour per generation, the same in the legend and on the bars.
        palette = {job: _PALETTE[i % len(_PALETTE)] for i, job in enumerate(generations)}
        body.append(_legend(palette, cycles, result.findings))
        body.append(_timeline(cycles, nodes, snap.observed_at, result.findings, palette))
    body.append("<h2>Findings</h2>")
    if not result.findings:
        body.append("<p>None.</p>")
    body.append("<ul>")
    for f in result.findings:
        body.append(
            f"<li><b style='color:{_SEVERITY[f.severity]}'>{_MARK[f.severity]} "
            f"{escape(f.severity.value.upper())}</b> "
            f"{escape(f.detector)}: {escape(f.summary)}"
            + (f"<br><span class='dim'>{escape(f.detail)}</span>" if f.detail else "")
            + "</li>"
        )
    body.append("</ul>")
    return document(f"nvrx watch {name}", "".join(body), _CSS)
