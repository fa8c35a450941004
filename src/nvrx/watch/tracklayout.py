"""Where the timeline page's (`watch.timeline`) tick labels and marks go, so that none meets
another: the time axis at whole steps, and marks too close to draw apart grouped into one.

Laid out in pixels for every track width the page is drawn for (`MIN_TRACK_PX` to
`MAX_TRACK_PX`), and drawn in CSS that places each the same way at whatever width the window
gives: a label or a mark is its box, `pct` of the track, clamped within it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

CHAR_PX = 7.5  # about one character of the 12 px labels: a node name column that fits them
# The track is drawn for windows whose track is MIN_TRACK_PX to MAX_TRACK_PX wide (about a
# 780 px window up to the body's 1200 px): tick labels and marks are laid out so that none
# meets another at any width in between (a narrower window may crowd them).
MIN_TRACK_PX = 600
MAX_TRACK_PX = 1200
# Tick steps in seconds, each a whole unit of the clock or the calendar: the axis takes the
# smallest whose labels keep apart.
_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200,
          86400, 2 * 86400, 7 * 86400, 14 * 86400, 28 * 86400, 91 * 86400, 364 * 86400)  # fmt: skip
_MAX_TICKS = 8
_GLYPH_PX = 13.0  # a mark's glyph (13 px ◆▲●, 11 px ↻), with room: what a mark is laid out with
_DIGIT_PX = 7.0


@dataclass(frozen=True)
class Box:
    """Something drawn above or below the track: `width` px wide, the point `anchor` px from
    its left edge at `pct` of the track, and clamped within the track."""

    pct: float
    width: float
    anchor: float

    def left(self, track: float) -> float:
        return min(max(self.pct / 100 * track - self.anchor, 0.0), track - self.width)

    def css(self) -> str:
        """`left` as CSS, for the track's width whatever it is."""
        return (
            f"left:clamp(0px, calc({self.pct:.3f}% - {self.anchor:.1f}px), "
            f"calc(100% - {self.width:.1f}px));width:{self.width:.1f}px"
        )

    def bends(self) -> list[float]:
        """The track widths where `left` stops or starts being clamped: between them it is a
        straight line of the width."""
        out = [self.anchor * 100 / self.pct] if self.pct > 0 else []
        if self.pct < 100:
            out.append((self.width - self.anchor) / (1 - self.pct / 100))
        return [w for w in out if MIN_TRACK_PX < w < MAX_TRACK_PX]


def apart(boxes: Sequence[Box], gap: float) -> bool:
    """Whether each box ends `gap` px before the next one starts, at every track width drawn.
    The distance between two boxes is straight between their bends, so it is least at a bend or
    at either end of the widths: those are the widths tried."""
    return all(
        a.left(w) + a.width + gap <= b.left(w)
        for a, b in itertools.pairwise(boxes)
        for w in (MIN_TRACK_PX, MAX_TRACK_PX, *a.bends(), *b.bends())
    )


def axis_ticks(t0: datetime, t1: datetime) -> tuple[str, list[tuple[float, str]]]:
    """The axis caption and its ticks (percent of the track, label), at whole steps of time
    (10 s, 5 min, 1 h, 1 day...): the smallest step whose labels keep apart, so that a chain of
    any length gets distinct labels, each as precise as its step (seconds when the step is
    under a minute). The caption says what the labels leave out: the day, or the year."""
    a = t0.astimezone(UTC).timestamp()
    span = max((t1 - t0).total_seconds(), 1.0)
    first, last = datetime.fromtimestamp(a, UTC), datetime.fromtimestamp(a + span, UTC)
    if first.date() == last.date():
        caption, day = f"UTC, {first:%Y-%m-%d}", ""
    elif first.year == last.year:
        caption, day = f"UTC, {first:%Y}", "%m-%d"
    else:
        caption, day = f"UTC, {first:%Y}–{last:%Y}", "%Y-%m-%d"
    ticks: list[tuple[float, str]] = []
    for step in itertools.chain(_STEPS, (_STEPS[-1] * k for k in (2, 5, 10, 20, 50, 100))):
        if span / step > 4 * _MAX_TICKS:
            continue  # far too many: not even worth laying out
        clock = "%H:%M:%S" if step < 60 else "%H:%M"
        if step >= 86400:
            fmt = day or "%m-%d"
        else:
            fmt = f"{day.removeprefix('%Y-')} {clock}" if day else clock
        at = math.ceil(a / step) * step
        ticks = []
        while at <= a + span:
            ticks.append(((at - a) / span * 100, f"{datetime.fromtimestamp(at, UTC):{fmt}}"))
            at += step
        if len(ticks) <= _MAX_TICKS and apart([label_box(p, t) for p, t in ticks], CHAR_PX):
            break
    return caption, ticks


def label_box(pct: float, label: str) -> Box:
    """A tick's label, centred on its tick (or moved in from the track's edge)."""
    width = len(label) * CHAR_PX
    return Box(pct, width, width / 2)


@dataclass
class Cluster:
    """Marks so close that they are drawn as one, at the first one's place: its glyphs side by
    side (`◆▲▲+4`: the first SHOWN, then how many more), or one glyph and a count when they are
    all alike (`↻6`: six restarts)."""

    pct: float
    members: list[tuple[str, str, str]]  # (glyph, CSS class, tooltip line), as drawn in turn

    SHOWN = 3

    def drawn(self) -> tuple[list[tuple[str, str, str]], str]:
        """The members whose glyph is drawn, and the count after them."""
        if len(self.members) > 1 and len({g for g, _, _ in self.members}) == 1:
            return self.members[:1], str(len(self.members))
        more = len(self.members) - self.SHOWN
        return self.members[: self.SHOWN], f"+{more}" if more > 0 else ""

    def box(self) -> Box:
        glyphs, count = self.drawn()
        return Box(self.pct, len(glyphs) * _GLYPH_PX + len(count) * _DIGIT_PX + 2, _GLYPH_PX / 2)


def clusters(marks: Sequence[tuple[float, tuple[str, str, str]]]) -> list[Cluster]:
    """`marks` (percent of the track, what is drawn) grouped so that no two groups' labels
    meet at any track width drawn: a mark joins the group before it when it would."""
    out: list[Cluster] = []
    for pct, member in sorted(marks, key=lambda m: m[0]):
        alone = Cluster(pct, [member])
        if out and not apart([out[-1].box(), alone.box()], 2):
            out[-1].members.append(member)
        else:
            out.append(alone)
    # A group grown at the right edge is pushed left, towards the one before it: merge again
    # until every pair keeps apart.
    merged = True
    while merged:
        merged = False
        for i in range(len(out) - 1):
            if not apart([out[i].box(), out[i + 1].box()], 2):
                out[i].members.extend(out.pop(i + 1).members)
                merged = True
                break
    return out
