"""`nvrx watch --html FILE`: the chain's timeline as one self-contained page, for the post-mortem
of a run: its generations, their cycles on each node over time (a restart is where one cycle
ends and the next begins), the checkpoint, and the pass's findings marked where they were seen.

A pure function of one pass's result. Bounded whatever the chain: the last `MAX_CYCLES` cycles,
on at most `MAX_NODES` nodes (the page says what it left out).
"""

from __future__ import annotations

from datetime import datetime

from nvrx.htmlpage import document, escape
from nvrx.slurm.hostlist import compress
from nvrx.watch.model import CycleInfo, Finding, Severity
from nvrx.watch.run import PassResult

MAX_CYCLES = 400
MAX_NODES = 96
_WIDTH, _LEFT, _ROW, _TOP = 960, 120, 12, 40
# One colour per generation, in turn (a generation is one array job of the chain).
_PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#e15759")
_SEVERITY = {Severity.CRITICAL: "#b42318", Severity.WARNING: "#9a6700", Severity.INFO: "#1f6feb"}


def _nodes(cycles: list[CycleInfo]) -> list[str]:
    seen: dict[str, None] = {}
    for c in cycles:
        for node in c.active_nodes:
            seen.setdefault(node, None)
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


def _axis(t0: datetime, t1: datetime) -> tuple[float, list[tuple[float, str]]]:
    """Pixels per second and five labelled ticks between t0 and t1."""
    span = max((t1 - t0).total_seconds(), 1.0)
    scale = (_WIDTH - _LEFT - 50) / span
    ticks = []
    for k in range(5):
        seconds = span * k / 4
        at = datetime.fromtimestamp(t0.timestamp() + seconds, tz=t0.tzinfo)
        ticks.append((_LEFT + seconds * scale, at.strftime("%m-%d %H:%M")))
    return scale, ticks


def _svg(cycles: list[CycleInfo], nodes: list[str], now: datetime, findings: list[Finding]) -> str:
    # From the first cycle drawn to the last one's end (now, while one is open): a chain that
    # ended long ago is drawn at its own scale; findings seen later sit at the right edge.
    t0, t1 = cycles[0].start, max(c.end or now for c in cycles)
    scale, ticks = _axis(t0, t1)
    height = _TOP + _ROW * len(nodes) + 30
    row_of = {n: i for i, n in enumerate(nodes)}
    colour = {
        job: _PALETTE[i % len(_PALETTE)]
        for i, job in enumerate(dict.fromkeys(c.job_id for c in cycles))
    }

    def x(at: datetime) -> float:
        return _LEFT + (at - t0).total_seconds() * scale

    out = [f'<svg role="img" width="{_WIDTH}" height="{height}" viewBox="0 0 {_WIDTH} {height}">']
    for px, label in ticks:
        out.append(
            f'<line x1="{px:.1f}" y1="{_TOP - 6}" x2="{px:.1f}" y2="{height - 24}" stroke="#eee"/>'
            f'<text x="{px:.1f}" y="{height - 10}" text-anchor="middle" class="h">'
            f"{escape(label)}</text>"
        )
    for node, i in row_of.items():
        out.append(
            f'<text x="{_LEFT - 6}" y="{_TOP + i * _ROW + 10}" text-anchor="end" '
            f'class="h" font-size="10">{escape(node)}</text>'
        )
    for c in cycles:
        x0, x1 = x(c.start), x(c.end or now)
        w = max(x1 - x0, 1.0)
        state = "open" if c.end is None else "ended"
        tip = escape(
            f"generation {c.job_id}, cycle {c.key}: {c.start:%Y-%m-%d %H:%M:%S} → "
            f"{f'{c.end:%H:%M:%S}' if c.end else 'open'} on {compress(c.active_nodes)}"
        )
        fill = colour[c.job_id]
        opacity = "0.45" if state == "open" else "0.9"
        # One bar per run of adjacent node rows: a cycle on 64 neighbouring nodes is one bar.
        for first, last in _runs(sorted(row_of[n] for n in c.active_nodes if n in row_of)):
            y, h = _TOP + first * _ROW, (last - first + 1) * _ROW
            out.append(
                f'<rect x="{x0:.1f}" y="{y + 1}" width="{w:.1f}" height="{h - 2}" '
                f'fill="{fill}" fill-opacity="{opacity}"><title>{tip}</title></rect>'
            )
    previous: CycleInfo | None = None
    for c in cycles:  # a restart: a cycle that follows another of the same generation
        if previous is not None and previous.job_id == c.job_id:
            px, bottom = x(c.start), _TOP + _ROW * len(nodes)
            out.append(
                f'<line x1="{px:.1f}" y1="{_TOP - 4}" x2="{px:.1f}" y2="{bottom}" stroke="#b42318" '
                f'stroke-width="0.6"><title>restart: cycle {escape(c.key)}</title></line>'
            )
        previous = c
    for f in findings:
        at = f.first_seen or now
        px = min(max(x(at), _LEFT), _WIDTH - 50)
        top = _TOP - 22
        out.append(
            f'<path d="M{px - 5:.1f},{top} L{px + 5:.1f},{top} L{px:.1f},{top + 10} Z" '
            f'fill="{_SEVERITY[f.severity]}"><title>{escape(f.detector)}: {escape(f.summary)}'
            "</title></path>"
        )
    out.append("</svg>")
    return "".join(out)


def timeline_page(result: PassResult) -> str:
    snap = result.snapshot
    chain = snap.chain
    name = chain.name or "(cycle files only)"
    cycles = list(snap.cycles[-MAX_CYCLES:])
    body = [f"<h1>nvrx watch timeline: {escape(name)}</h1>"]
    body.append(
        # The pass's state word, as on the screen (an exit code means nothing to a reader),
        # and one time format on the page: UTC, to the second.
        f"<p><b>{escape(result.state.upper())}</b>: seen {snap.observed_at:%Y-%m-%d %H:%M:%S} "
        f"UTC from {escape(snap.host)}"
        f"{' (blind: the watcher could not see everything)' if result.degraded else ''}.</p>"
    )
    ckpt = snap.checkpoint
    if ckpt.value is not None:
        when = f", written {ckpt.mtime:%Y-%m-%d %H:%M:%S} UTC" if ckpt.mtime else ""
        body.append(f"<p>Checkpoint: iteration {escape(ckpt.value)}{escape(when)}.</p>")
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
        generations = len({c.job_id for c in cycles})
        restarts = len(cycles) - generations
        body.append(
            f"<p>{len(cycles)} cycles in {generations} generation(s), {restarts} restart(s), on "
            f"{len(nodes)} node(s). Each bar is a cycle on a node, one colour per generation "
            "(pale while open); red lines are restarts; triangles are findings.</p>"
        )
        if left_out:
            body.append(f"<p class='dim'>Not drawn: {escape(', '.join(left_out))}.</p>")
        body.append(_svg(cycles, nodes, snap.observed_at, result.findings))
    body.append("<h2>Findings</h2>")
    if not result.findings:
        body.append("<p>None.</p>")
    body.append("<ul>")
    for f in result.findings:
        body.append(
            f"<li><b style='color:{_SEVERITY[f.severity]}'>{escape(f.severity.value.upper())}</b> "
            f"{escape(f.detector)}: {escape(f.summary)}"
            + (f"<br><span class='dim'>{escape(f.detail)}</span>" if f.detail else "")
            + "</li>"
        )
    body.append("</ul>")
    return document(f"nvrx watch {name}", "".join(body))
