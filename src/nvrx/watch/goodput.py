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

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from nvrx.watch.model import CycleInfo, GenerationSpan, SaveSeen

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


def _last_save_before(saves: Sequence[SaveSeen], end: datetime) -> SaveSeen | None:
    """The save the file held at `end`, when a pass at or after `end` proves it."""
    if not saves:
        return None
    proven = [s for s in saves if s.at <= end <= s.seen_until]
    return max(proven, key=lambda s: s.at, default=None)


def goodput(
    cycles: Sequence[CycleInfo],
    spans: Sequence[GenerationSpan],
    saves: Sequence[SaveSeen],
    now: datetime,
    unsaved_until: datetime | None = None,
) -> Goodput:
    """The chain's wall time by category (see the module doc); `cycles` sorted by start;
    `unsaved_until`, the last pass that found no checkpoint file yet."""
    spans = sorted((s for s in spans if s.start is not None), key=lambda s: s.start or now)
    starts = [s.start for s in spans if s.start] + [c.start for c in cycles]
    if not starts:
        return Goodput(None, None, {k: 0.0 for k in CATEGORIES})
    start = min(starts)
    live = any(c.end is None for c in cycles) or any(s.end is None for s in spans)
    ends = [c.end for c in cycles if c.end] + [s.end for s in spans if s.end]
    end = now if live or not ends else max(ends)
    out = {k: 0.0 for k in CATEGORIES}
    notes: list[str] = []

    for a, b in itertools.pairwise(spans):
        if a.end is not None and b.start is not None:
            out["queue_wait"] += _seconds(a.end, b.start)
    by_job: dict[str, list[CycleInfo]] = {}
    for c in cycles:
        by_job.setdefault(c.job_id, []).append(c)
    for span in spans:
        first = by_job.get(span.job_id)
        if first and span.start is not None:
            out["startup"] += _seconds(span.start, first[0].start)
    by_span = {s.job_id: s for s in spans}
    unproven = 0
    for i, c in enumerate(cycles):
        nxt = cycles[i + 1] if i + 1 < len(cycles) else None
        ran = _seconds(c.start, c.end or end)
        if c.end is None:
            out["productive"] += ran  # the open cycle: training now
            continue
        of_job = by_span.get(c.job_id)
        if nxt is not None and nxt.job_id == c.job_id:
            out["restart_overhead"] += _seconds(c.end, nxt.start)
        elif of_job is not None and of_job.end is not None and not of_job.clean:
            # A failed generation's last cycle: its end to task 0's (tearing it down).
            out["restart_overhead"] += _seconds(c.end, of_job.end)
        if nxt is None:
            how = of_job.state if of_job is not None else None
            if of_job is not None and of_job.clean:
                out["productive"] += ran  # training finished
                continue
            if how is None:
                out["unknown"] += ran  # ended, and accounting does not say how
                unproven += 1
                continue
        # Ended in a failure: what it did after the last save before its end is redone.
        save = _last_save_before(saves, c.end)
        if save is None and unsaved_until is not None and c.end <= unsaved_until:
            out["progress_lost"] += ran  # nothing saved yet: the next cycle starts over
            continue
        if save is None:
            out["unknown"] += ran
            unproven += 1
            continue
        lost = _seconds(max(save.at, c.start), c.end)
        out["progress_lost"] += lost
        out["productive"] += ran - lost
    if unproven:
        notes.append(
            f"{unproven} ended cycle(s) without a save proven before their end: their time is "
            "unknown"
        )
    covered = sum(out.values())
    wall = _seconds(start, end)
    if covered > wall + 1e-6:
        notes.append(f"the sources overlap by {covered - wall:.1f} s (clock skew?)")
    out["unknown"] += max(wall - covered, 0.0)
    return Goodput(start, end, out, tuple(notes))
