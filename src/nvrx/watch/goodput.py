"""Goodput: where a chain's wall time went, as a pure function of what the watcher knows.

Wall time runs from the first generation's start (or the first cycle's) to now while the chain
lives, else to its last end. It is split into (docs/goodput.md defines each and maps it to
ml-goodput-measurement's categories):

    productive        training whose progress was saved, or is still running in the open cycle
    progress_lost     training after the last save before a failure: redone after it
    restart_overhead  a cycle's end to the next cycle of its generation (detect, tear down,
                      rendezvous, relaunch)
    queue_wait        a generation's end to the next one's start (the singleton dependency)
    startup           a generation's start to its first cycle (allocation to the launcher)
    checkpoint_save   time spent saving, where a source gives it (none does yet: 0, said so)
    unknown           the rest: what the sources cannot tell is never guessed

A cycle "ended in a failure" when another cycle followed it (in its generation or a later one),
or when its generation's task 0 did not end cleanly (`model.ended_cleanly`). Its progress lost
is known only when a watch pass at or after its end saw the checkpoint file still at a save
made before it (then nothing was saved in between), or saw no checkpoint file at all (then the
whole cycle is redone). Otherwise the cycle's time is unknown, not productive.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from nvrx.watch.model import CycleInfo, Cycles, GenerationSpan, SaveSeen, from_us, to_us

CATEGORIES = (
    "productive",
    "progress_lost",
    "restart_overhead",
    "queue_wait",
    "startup",
    "checkpoint_save",
    "unknown",
)
SOURCES = {
    "productive": "cycle files, less progress lost",
    "progress_lost": "cycle files, and the checkpoint file (or its absence) as watch passes saw it",
    "restart_overhead": "cycle files",
    "queue_wait": "sacct (generations' task 0 start and end)",
    "startup": "sacct start and the first cycle file",
    "checkpoint_save": "no source yet",
    "unknown": "what the sources above do not cover",
}


@dataclass(frozen=True)
class Goodput:
    start: datetime | None
    end: datetime | None
    seconds: dict[str, float] = field(default_factory=dict)  # category → seconds
    notes: tuple[str, ...] = ()

    @property
    def wall(self) -> float:
        return sum(self.seconds.values())

    @property
    def fraction(self) -> float | None:
        """Productive time over wall time (None before anything ran)."""
        wall = self.wall
        return self.seconds.get("productive", 0.0) / wall if wall > 0 else None

    def to_json(self) -> dict[str, object]:
        return {
            "start": self.start.isoformat() if self.start else None,
            "end": self.end.isoformat() if self.end else None,
            "wall_seconds": round(self.wall, 3),
            "fraction": None if self.fraction is None else round(self.fraction, 4),
            "seconds": {k: round(self.seconds.get(k, 0.0), 3) for k in CATEGORIES},
            "sources": SOURCES,
            "notes": list(self.notes),
        }


def fleet_goodput(parts: Sequence[Goodput]) -> Goodput:
    """A fleet's goodput: its chains' seconds added up, category by category (so the fraction
    weighs each chain by its wall time)."""
    seconds = {k: sum(g.seconds.get(k, 0.0) for g in parts) for k in CATEGORIES}
    starts = [g.start for g in parts if g.start]
    ends = [g.end for g in parts if g.end]
    return Goodput(min(starts, default=None), max(ends, default=None), seconds)


def _seconds(a: datetime, b: datetime) -> float:
    return max((b - a).total_seconds(), 0.0)


class _Proofs:
    """`SaveSeen`s by save time, to answer "which save did the file hold at time T, as a pass
    at or after T proved?" in O(log n) per cycle (a chain may keep thousands of saves)."""

    def __init__(self, saves: Sequence[SaveSeen]) -> None:
        ordered = sorted(saves, key=lambda s: s.at)
        self.at = [to_us(s.at) for s in ordered]
        self.until = [to_us(s.seen_until) for s in ordered]
        self.reach = list(itertools.accumulate(self.until, max))  # latest seen_until so far

    def last_before(self, end: int) -> int | None:
        """The save time (µs) of the latest save with at <= end <= seen_until, or None."""
        i = bisect.bisect_right(self.at, end) - 1
        if i < 0 or self.reach[i] < end:
            return None  # no save made by then was still seen at `end`
        while i >= 0:
            if self.until[i] >= end:
                return self.at[i]
            i -= 1
        return None


def goodput(
    cycles: Sequence[CycleInfo],
    spans: Sequence[GenerationSpan],
    saves: Sequence[SaveSeen],
    now: datetime,
    unsaved_until: datetime | None = None,
) -> Goodput:
    """The chain's wall time by category (see the module doc); `cycles` sorted by start (a
    `Cycles` is read by its columns: no record is built); `unsaved_until`, the last pass that
    found no checkpoint file yet."""
    table = cycles if isinstance(cycles, Cycles) else Cycles.of(cycles)
    spans = sorted((s for s in spans if s.start is not None), key=lambda s: s.start or now)
    times = list(table.times())  # (job, start µs, end µs | None)
    starts = [to_us(s.start) for s in spans if s.start] + ([times[0][1]] if times else [])
    if not starts:
        return Goodput(None, None, {k: 0.0 for k in CATEGORIES})
    start = min(starts)
    live = any(e is None for _, _, e in times) or any(s.end is None for s in spans)
    ends = [to_us(s.end) for s in spans if s.end]
    closed = [e for _, _, e in times if e is not None]
    if closed:
        ends.append(max(closed))
    end = to_us(now) if live or not ends else max(ends)
    us = {k: 0 for k in CATEGORIES}  # whole microseconds: exact sums
    notes: list[str] = []

    for a, b in itertools.pairwise(spans):
        if a.end is not None and b.start is not None:
            us["queue_wait"] += max(to_us(b.start) - to_us(a.end), 0)
    first_start: dict[str, int] = {}
    for job, c_start, _ in times:
        first_start.setdefault(job, c_start)
    for span in spans:
        first = first_start.get(span.job_id)
        if first is not None and span.start is not None:
            us["startup"] += max(first - to_us(span.start), 0)
    # job → (ended, clean, end µs) of its task 0, when accounting showed one
    by_span = {
        s.job_id: (s.state is not None, s.clean, None if s.end is None else to_us(s.end))
        for s in spans
    }
    proofs = _Proofs(saves)
    last_before = proofs.last_before
    no_saves = not saves
    unsaved = -math.inf if unsaved_until is None else to_us(unsaved_until)
    unproven = productive = lost_us = overhead = unknown = 0
    # Local sums and each cycle beside the next one: this loop runs once per cycle of the
    # chain on every pass (100,000 in the fleet bench).
    nexts = itertools.chain(itertools.islice(times, 1, None), ((None, None, None),))
    for (job, c_start, c_end), (n_job, n_start, _) in zip(times, nexts, strict=False):
        if c_end is None:
            productive += max(end - c_start, 0)  # the open cycle: training now
            continue
        ran = c_end - c_start if c_end > c_start else 0
        if n_job == job:
            overhead += max(n_start - c_end, 0)  # type: ignore[operator]
        else:
            of_job = by_span.get(job)
            if of_job is not None and of_job[2] is not None and not of_job[1]:
                # A failed generation's last cycle: its end to task 0's (tearing it down).
                overhead += max(of_job[2] - c_end, 0)
            if n_job is None:
                if of_job is not None and of_job[1]:
                    productive += ran  # training finished
                    continue
                if of_job is None or not of_job[0]:
                    unknown += ran  # ended, and accounting does not say how
                    unproven += 1
                    continue
        # Ended in a failure: what it did after the last save before its end is redone.
        save = None if no_saves else last_before(c_end)
        if save is None:
            if c_end <= unsaved:
                lost_us += ran  # nothing saved yet: the next cycle starts over
            else:
                unknown += ran
                unproven += 1
            continue
        lost = max(c_end - max(save, c_start), 0)
        lost_us += lost
        productive += ran - lost
    us["productive"] += productive
    us["progress_lost"] += lost_us
    us["restart_overhead"] += overhead
    us["unknown"] += unknown
    if unproven:
        notes.append(
            f"{unproven} ended cycle(s) without a save proven before their end: their time is "
            "unknown"
        )
    covered = sum(us.values())
    wall = max(end - start, 0)
    if covered > wall:
        notes.append(f"the sources overlap by {(covered - wall) / 1e6:.1f} s (clock skew?)")
    us["unknown"] += max(wall - covered, 0)
    out = {k: v / 1e6 for k, v in us.items()}
    return Goodput(from_us(start), from_us(end), out, tuple(notes))
