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
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from nvrx.display import counted
from nvrx.htmlpage import document, escape
from nvrx.slurm.hostlist import compress
from nvrx.watch.detectors.common import cycle_log, utc_text
from nvrx.watch.goodput import CATEGORIES, Goodput, span_text
from nvrx.watch.model import CycleInfo, Finding, Severity, Snapshot
from nvrx.watch.tracklayout import CHAR_PX, Cluster, axis_ticks, clusters, label_box

if TYPE_CHECKING:
    from nvrx.watch.watcher import PassResult

MAX_CYCLES = 400
MAX_NODES = 96
# One colour per generation, in turn (a generation is one array job of the chain).
_PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#e15759")
_SEVERITY = {Severity.CRITICAL: "#b42318", Severity.WARNING: "#9a6700", Severity.INFO: "#1f6feb"}
_MARK = {Severity.CRITICAL: "◆", Severity.WARNING: "▲", Severity.INFO: "●"}  # shape, not colour
_SEVERITY_ORDER = {f"sev-{s.value}": s.rank for s in Severity}  # a mark's class: its rank
_CSS = """
.tl{margin:14px 0;font-size:12px}.tl .row{display:flex}
.tl .names{flex:none;text-align:right;padding-right:8px;color:#444}
.tl .names div{white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.tl .track{flex:1;position:relative;min-width:0;background:#fafafa;border:1px solid #ddd}
.tl .marks,.tl .axis{position:relative;flex:1;min-width:0}
.tl .marks{height:18px}.tl .axis{height:18px;color:#555}
.tl .axis span{position:absolute;top:2px;white-space:nowrap;text-align:center}
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
.tl .mark{position:absolute;top:0;font-size:13px;line-height:16px;white-space:nowrap}
.tl .mark small{font-size:11px;color:#444}.tl .restart-mark{font-size:11px;color:#b42318}
.tl .sev-critical{color:#b42318}.tl .sev-warning{color:#9a6700}.tl .sev-info{color:#1f6feb}
code.path{overflow-wrap:anywhere}
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


def _marks_row(title: str, groups: list[Cluster], names: str) -> str:
    """A row of marks above the track, `title` in the names column: each group one span whose
    tooltip lists every member."""
    spans = []
    for c in groups:
        glyphs, count = c.drawn()
        drawn = "".join(f"<span class='{css}'>{escape(g)}</span>" for g, css, _ in glyphs)
        if count:
            drawn += f"<small>{escape(count)}</small>"
        tip = escape("\n".join(line for _, _, line in c.members))
        spans.append(f"<span class='mark' title='{tip}' style='{c.box().css()}'>{drawn}</span>")
    return (
        f"<div class='row'>{names}{escape(title)}</div>"
        f"<div class='marks'>{''.join(spans)}</div></div>"
    )


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
    caption, ticks = axis_ticks(t0, t1)
    widest = max(len(caption), len("restarts"), *(len(n) for n in nodes))
    names_px = round(min(widest * CHAR_PX + 12, 240))
    row_of = {n: i for i, n in enumerate(nodes)}

    def pct(at: datetime) -> float:
        return min(max((at - t0).total_seconds() / span * 100, 0.0), 100.0)

    names = f"<div class='names' style='width:{names_px}px'>"
    bars = [f"<div class='grid' style='left:{p:.2f}%'></div>" for p, _ in ticks]
    for c in cycles:
        x0, x1 = pct(c.start), pct(c.end or now)
        tip = escape(
            f"generation {c.job_id}, cycle {c.key}: {utc_text(c.start)} → "
            f"{utc_text(c.end) if c.end else 'open'} on {compress(c.active_nodes)}"
            + (f"\nlog: {cycle_log(c)}" if c.log_file else "")
        )
        open_ = " open" if c.end is None else ""
        # One bar per run of adjacent node rows: a cycle on 64 neighbouring nodes is one bar.
        # A bar wide enough for its generation's id carries it (about 1000 px of track).
        wide = (x1 - x0) * 10 > len(c.job_id) * CHAR_PX + 8
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
    restarts: list[tuple[float, tuple[str, str, str]]] = []
    previous: CycleInfo | None = None
    for c in cycles:  # a restart: a cycle that follows another of the same generation
        if previous is not None and previous.job_id == c.job_id:
            at = pct(c.start)
            bars.append(
                f"<div class='restart' title='restart: cycle {escape(c.key)}' "
                f"style='left:{at:.3f}%'></div>"
            )
            line = f"restart: cycle {c.key}, {utc_text(c.start)}"
            restarts.append((at, ("↻", "restart-mark", line)))
        previous = c
    seen = [
        (
            pct(f.first_seen or now),
            (
                _MARK[f.severity],
                f"sev-{f.severity.value}",
                f"{f.severity.value} {f.detector}: {f.summary}",
            ),
        )
        for f in findings
    ]
    marks = []
    if restarts:
        marks.append(_marks_row("restarts", clusters(restarts), names))
    if seen:
        groups = clusters(seen)
        for g in groups:  # each group lists (and draws) its most severe first
            g.members.sort(key=lambda m: _SEVERITY_ORDER[m[1]])
        marks.append(_marks_row("findings", groups, names))
    labels = "".join(
        f"<div style='height:{row}px;line-height:{row}px' title='{escape(n)}'>{escape(n)}</div>"
        for n in nodes
    )
    axis = "".join(
        f"<span style='{label_box(p, label).css()}'>{escape(label)}</span>" for p, label in ticks
    )
    return (
        "<div class='tl'>" + "".join(marks) + f"<div class='row'>{names}{labels}</div>"
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
            "width:3px'></span> ↻ restart (dashed); ↻N: N restarts too close to draw apart</span>"
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


def page_title(snap: Snapshot) -> str:
    """What the page is about: the chain's name (and its id), else its id, else its work dir's
    name; and "(cycle files only)" when no scheduler was asked (`--platform none`)."""
    chain = snap.chain
    name = chain.name or chain.chain_id or (Path(chain.work_dir).name if chain.work_dir else "")
    if chain.name and chain.chain_id:
        name += f" (chain {chain.chain_id})"
    only = "(cycle files only)" if snap.platform is None else ""
    return " ".join(part for part in (name, only) if part) or "cycles"


def timeline_page(result: PassResult) -> str:
    snap = result.snapshot
    chain = snap.chain
    title = page_title(snap)
    cycles = list(snap.cycles[-MAX_CYCLES:])
    body = [f"<h1>nvrx watch timeline: {escape(title)}</h1>"]
    body.append(
        # The pass's state word, as on the screen (an exit code means nothing to a reader).
        f"<p><b>{escape(result.state.upper())}</b>: seen {utc_text(snap.observed_at)} "
        f"from {escape(snap.host)}"
        f"{' (blind: the watcher could not see everything)' if result.degraded else ''}.</p>"
    )
    if chain.work_dir:
        body.append(f"<p>Work dir: <code class='path'>{escape(chain.work_dir)}</code></p>")
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
            left_out.append(f"the {counted(len(snap.cycles) - len(cycles), 'earliest cycle')}")
        if len(nodes) > MAX_NODES:
            left_out.append(counted(len(nodes) - MAX_NODES, "node"))
            nodes = nodes[:MAX_NODES]
        generations = dict.fromkeys(c.job_id for c in cycles)
        restarts = len(cycles) - len(generations)
        spares = {n for c in cycles for n in c.standby_nodes}
        standing_by = (
            f" ({len(spares)} of them {'a standby spare' if len(spares) == 1 else 'standby spares'}"
            " at some point)"
        )
        body.append(
            f"<h2>Timeline</h2><p>{counted(len(cycles), 'cycle')} in "
            f"{counted(len(generations), 'generation')}, {counted(restarts, 'restart')}, "
            f"on {counted(len(nodes), 'node')}{standing_by if spares else ''}. "
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
        # What the screen says of a finding, line for line: its detail and its runbook.
        extra = "".join(
            f"<br><span class='dim'>{escape(line)}</span>"
            for line in (f.detail, f"runbook: {f.runbook}" if f.runbook else "")
            if line
        )
        body.append(
            f"<li><b style='color:{_SEVERITY[f.severity]}'>{_MARK[f.severity]} "
            f"{escape(f.severity.value.upper())}</b> "
            f"{escape(f.detector)}: {escape(f.summary)}{extra}</li>"
        )
    body.append("</ul>")
    body += [f"<p><b>{escape(action)}</b></p>" for action in result.actions]
    body += [f"<p class='dim'>note: {escape(line)}</p>" for line in result.notes]
    return document(f"nvrx watch: {title}", "".join(body), _CSS)
