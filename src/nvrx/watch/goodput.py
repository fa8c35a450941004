"""Goodput: where a chain's wall time went, as a pure function of what the watcher knows.

Wall time runs from the first generation's start (or the first cycle's) to now while the chain
lives, else to its last end. It is split into (docs/goodput.md defines each and maps it to
ml-goodput-measurement's categories):

    productive        training whose progress was saved, or is still running in the open cycle
    progress_lost     training after the last save before a failure: redone after it
    stalled           an open cycle that `cycle_stalled` calls hung, since its last sign of
                      progress (the checkpoint's update, else the cycle's start)
    restart_overhead  a cycle's end to the next cycle of its generation (detect, tear down,
                      rendezvous, relaunch)
    queue_wait        a generation's end to the next one's start (the singleton dependency)
    startup           a generation's start to its first cycle (allocation to the launcher)
    checkpoint_save   time spent saving, where a source gives it (none does yet: 0, said so)
    unknown           the rest: what the sources cannot tell is never guessed

A cycle "ended in a failure" when another cycle followed it (in its generation or a later one),
or when its generation's task 0 did not end cleanly (`model.ended_cleanly`: a generation that
ended on the no-restart verdict did not, even when accounting shows CANCELLED 0:0, since its
launcher gave up on a cycle whose progress never advanced). Its progress lost
is known only when a watch pass at or after its end saw the checkpoint file still at a save
made before it (then nothing was saved in between), or saw no checkpoint file at all (then the
whole cycle is redone). Otherwise the cycle's time is unknown, not productive.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nvrx.display import counted
from nvrx.watch.model import (
    CycleBlock,
    CycleColumns,
    CycleInfo,
    Cycles,
    GenerationSpan,
    SaveSeen,
    from_us,
    to_us,
)

CATEGORIES = (
    "productive",
    "progress_lost",
    "stalled",
    "restart_overhead",
    "queue_wait",
    "startup",
    "checkpoint_save",
    "unknown",
)
SOURCES = {
    "productive": "cycle files, less progress lost",
    "progress_lost": "cycle files, and the checkpoint file (or its absence) as watch passes saw it",
    "stalled": "cycle files and the checkpoint file (an open cycle cycle_stalled calls hung)",
    "restart_overhead": "cycle files",
    "queue_wait": "sacct (generations' task 0 start and end)",
    "startup": "sacct start and the first cycle file",
    "checkpoint_save": "no source yet",
    "unknown": "what the sources above do not cover",
}
# Without accounting (--platform none, or sacct failed) these categories have no source.
_FROM_ACCOUNTING = ("queue_wait", "startup")
NOT_READ = "not read (no accounting this pass)"


def span_text(seconds: float) -> str:
    """`3.2h`, `12.5m`, `40s`: a stretch of wall time in a breakdown."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


@dataclass(frozen=True)
class Goodput:
    start: datetime | None
    end: datetime | None
    seconds: dict[str, float] = field(default_factory=dict)  # category → seconds
    notes: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=lambda: dict(SOURCES))  # what was read

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
            "sources": self.sources,
            "notes": list(self.notes),
        }


def fleet_goodput(parts: Sequence[Goodput]) -> Goodput:
    """A fleet's goodput: its chains' seconds added up, category by category (so the fraction
    weighs each chain by its wall time)."""
    seconds = {k: sum(g.seconds.get(k, 0.0) for g in parts) for k in CATEGORIES}
    starts = [g.start for g in parts if g.start]
    ends = [g.end for g in parts if g.end]
    sources = dict(SOURCES)
    for k in _FROM_ACCOUNTING:  # a source only some chains had says for how many
        unread = sum(g.sources.get(k) == NOT_READ for g in parts)
        if unread == len(parts) and parts:
            sources[k] = NOT_READ
        elif unread:
            sources[k] = f"{SOURCES[k]}, for {len(parts) - unread} of {len(parts)} chains"
    return Goodput(min(starts, default=None), max(ends, default=None), seconds, (), sources)


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

    def covering(self, lo: int, hi: int) -> list[list[int]]:
        """Every save that can prove an end in [lo, hi], as [at, seen_until clipped to hi]:
        all `last_before` can answer for those ends."""
        i = bisect.bisect_right(self.at, hi) - 1
        out = []
        while i >= 0 and self.reach[i] >= lo:
            if self.until[i] >= lo:
                out.append([self.at[i], min(self.until[i], hi)])
            i -= 1
        return out


Span = tuple[bool, bool, int | None]  # a job's task 0: (ended, ended cleanly, end µs)
Shares = dict[str, list[Any]]  # block ident → [fingerprint, share]: what `goodput` remembers


@dataclass(frozen=True, slots=True)
class _Around:
    """What a block's share depends on besides its cycles and the cycle after it."""

    by_span: dict[str, Span]
    proofs: _Proofs
    unsaved: float  # the last "no checkpoint file yet" pass, µs (-inf: none)
    end: int  # the chain's end (now while it lives), µs: an open cycle runs until then


def _share(cols: CycleColumns, after: tuple[str, int] | None, around: _Around) -> list[int]:
    """One block's [productive, progress_lost, restart_overhead, unknown, unproven] in µs (and
    a count); `after`, the (job, start) of the cycle after the block's last. This loop runs
    once per cycle that nothing remembered covers, so its sums stay in locals."""
    by_span, unsaved, end = around.by_span, around.unsaved, around.end
    last_before = around.proofs.last_before
    no_saves = not around.proofs.at
    unproven = productive = lost_us = overhead = unknown = 0
    jobs, starts, ends = cols.jobs, cols.starts, cols.ends
    n_jobs = itertools.chain(itertools.islice(jobs, 1, None), (after[0] if after else None,))
    n_starts = itertools.chain(itertools.islice(starts, 1, None), (after[1] if after else 0,))
    for job, c_start, c_end, n_job, n_start in zip(jobs, starts, ends, n_jobs, n_starts):  # noqa: B905
        if c_end is None:
            productive += max(end - c_start, 0)  # the open cycle: training now
            continue
        ran = c_end - c_start if c_end > c_start else 0
        if n_job == job:
            overhead += max(n_start - c_end, 0)
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
    return [productive, lost_us, overhead, unknown, unproven]


def _fingerprint(block: CycleBlock, after: tuple[str, int] | None, around: _Around) -> list[Any]:
    """Everything outside a closed block that its share depends on, exactly: how the cycle after
    it relates to its last, its jobs' task-0 endings, the saves that can prove one of its
    ends, and where `unsaved_until` falls among its ends."""
    summary = block.summary
    lo, hi = summary.min_end, summary.max_end
    assert lo is not None and hi is not None  # a closed block has ends
    if after is None:
        nxt: Any = None
    elif after[0] == summary.last[3]:
        nxt = ["same", after[1]]
    else:
        nxt = "other"
    # Lists, not tuples: what the state file gives back compares equal.
    spans = [
        [job, None if (s := around.by_span.get(job)) is None else list(s)]
        for job in sorted(summary.job_starts)
    ]
    return [
        nxt,
        spans,
        around.proofs.covering(lo, hi),
        int(min(max(around.unsaved, lo - 1), hi)),
    ]


def goodput(
    cycles: Sequence[CycleInfo],
    spans: Sequence[GenerationSpan],
    saves: Sequence[SaveSeen],
    now: datetime,
    unsaved_until: datetime | None = None,
    shares: Shares | None = None,
    *,
    stalled_since: datetime | None = None,
    accounting: bool = True,
    verdicts: Collection[str] = (),
) -> Goodput:
    """The chain's wall time by category (see the module doc); `cycles` sorted by start;
    `unsaved_until`, the last pass that found no checkpoint file yet; `stalled_since`, the last
    sign of progress of an open cycle a detector calls hung; `accounting`, whether sacct was
    read (without it, the categories it is the source of say so); `verdicts`, generations that
    ended on the no-restart verdict as their flag file says (with no span to say it: no
    accounting).

    A `Cycles` is read by block: its summaries, and the columns of a block only when `shares`
    (what earlier passes computed for closed blocks of unchanged directories, keyed by their
    content, with everything else the share depends on) does not cover it; `shares` is then
    updated. It changes no figure: a share is reused only for exactly the same inputs."""
    table = cycles if isinstance(cycles, Cycles) else Cycles.of(cycles)
    blocks = table.blocks
    spans = sorted((s for s in spans if s.start is not None), key=lambda s: s.start or now)
    starts = [to_us(s.start) for s in spans if s.start]
    if blocks:
        starts.append(blocks[0].summary.first[0])
    sources = dict(SOURCES)
    if not accounting:
        sources.update(dict.fromkeys(_FROM_ACCOUNTING, NOT_READ))
    if not starts:
        return Goodput(None, None, {k: 0.0 for k in CATEGORIES}, (), sources)
    start = min(starts)
    live = any(b.summary.open for b in blocks) or any(s.end is None for s in spans)
    ends = [to_us(s.end) for s in spans if s.end]
    closed = [b.summary.max_end for b in blocks if b.summary.max_end is not None]
    if closed:
        ends.append(max(closed))
    end = to_us(now) if live or not ends else max(ends)
    us = {k: 0 for k in CATEGORIES}  # whole microseconds: exact sums
    notes: list[str] = []

    for a, b in itertools.pairwise(spans):
        if a.end is not None and b.start is not None:
            us["queue_wait"] += max(to_us(b.start) - to_us(a.end), 0)
    first_start: dict[str, int] = {}
    for block in blocks:
        for job, c_start in block.summary.job_starts.items():
            first_start.setdefault(job, c_start)
    for span in spans:
        first = first_start.get(span.job_id)
        if first is not None and span.start is not None:
            us["startup"] += max(first - to_us(span.start), 0)
    by_span: dict[str, Span] = {
        s.job_id: (s.state is not None, s.clean, None if s.end is None else to_us(s.end))
        for s in spans
    }
    for job in verdicts:
        ending = by_span.get(job)
        by_span[job] = (True, False, None if ending is None else ending[2])
    unsaved = -math.inf if unsaved_until is None else to_us(unsaved_until)
    around = _Around(by_span, _Proofs(saves), unsaved, end)
    share = [0, 0, 0, 0, 0]
    for i, block in enumerate(blocks):
        first_after = blocks[i + 1].summary.first if i + 1 < len(blocks) else None
        after = None if first_after is None else (first_after[3], first_after[0])
        if shares is not None and block.ident is not None and not block.summary.open:
            fingerprint = _fingerprint(block, after, around)
            known = shares.get(block.ident)
            if known is not None and known[0] == fingerprint:
                part = known[1]
            else:
                part = _share(block.columns, after, around)
                shares[block.ident] = [fingerprint, part]
        else:
            part = _share(block.columns, after, around)
        share = [a + b for a, b in zip(share, part, strict=True)]
    productive, lost, overhead, unknown, unproven = share
    if stalled_since is not None and live:
        # The hung open cycle is the chain's last: its time since the last sign of progress
        # was counted productive above (the open cycle runs until `end`); it is not.
        hung = min(max(end - to_us(stalled_since), 0), productive)
        productive -= hung
        us["stalled"] += hung
    us["productive"] += productive
    us["progress_lost"] += lost
    us["restart_overhead"] += overhead
    us["unknown"] += unknown
    if unproven:
        notes.append(
            f"{counted(unproven, 'ended cycle')} without a save proven before "
            f"{'its end: its' if unproven == 1 else 'their end: their'} time is unknown"
        )
    covered = sum(us.values())
    wall = max(end - start, 0)
    if covered > wall:
        notes.append(f"the sources overlap by {(covered - wall) / 1e6:.1f} s (clock skew?)")
    us["unknown"] += max(wall - covered, 0)
    out = {k: v / 1e6 for k, v in us.items()}
    return Goodput(from_us(start), from_us(end), out, tuple(notes), sources)
