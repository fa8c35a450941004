"""Restart cycles in one job log: where each begins, so that each is attributed on its own.

A job log can hold several restart cycles: ft_launcher's in-job restarts (it prints its profiling
events, `Cycle: N Event: <name> Node: ... Rank: ...`, at each cycle's rendezvous, start and
failure) and, in a log that several generations appended to, a launch script's
`[sbatch_script]: New run dir added:` line. A cycle begins at the first line that names a cycle
number above the current one (or at each new-run-dir line) and runs to the line before the next
begins; the lines before the first marker belong to the first cycle. A marker naming the current
cycle or an earlier one (a late event from another node) begins nothing.

`CycleSplitter` is a `logscan.LineReader`: it hands each line to the reader of the cycle it falls
in, and turns each reader into its result (`close`) as soon as its cycle ends, so a log of many
cycles costs one result per cycle, never one per line. Past `MAX_CYCLES` cycles no new cycle
begins: the rest of the log is read as part of the last one, and the split says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from nvrx.analyze.logscan import LineReader
from nvrx.limits import small_int

# ft_launcher's profiling event, as NVRx and the rehearsal launcher print it, and the older
# `profiling.py:... Cycle: N` form.
_CYCLE = re.compile(r"\bCycle:\s*(\d{1,9})\s+Event:|profiling\.py:.*\bCycle:\s*(\d{1,9})")
_NEW_RUN = "[sbatch_script]: New run dir added:"
# The lower-case words one of which every marker line holds (the gate of `feed_blocks`).
KEYWORDS = ("cycle:", "new run dir added")
MAX_CYCLES = 1000


def marker(line: str) -> int | None:
    """The cycle number a line begins (-1: the next one, for a new-run-dir line), or None."""
    if "ycle:" in line and (m := _CYCLE.search(line)) is not None:
        return small_int(m.group(1) or m.group(2))
    if _NEW_RUN in line:
        return -1
    return None


@dataclass(frozen=True, slots=True)
class CycleSpan:
    """One cycle of a log: its number (ft_launcher's, or counted from 0 when the log only has
    new-run-dir lines) and its first and last line (1-based, inclusive)."""

    number: int
    first_line: int
    last_line: int

    def where(self) -> str:
        """`cycle 1 (lines 70-84)`."""
        return f"cycle {self.number} (lines {self.first_line}-{self.last_line})"


R = TypeVar("R", bound=LineReader)
T = TypeVar("T")


class CycleSplitter(Generic[R, T]):
    """Feeds each line to the current cycle's reader (`new()` makes one per cycle) and closes a
    cycle's reader into its result (`close(reader, span)`) when the next cycle begins."""

    def __init__(self, new: Callable[[], R], close: Callable[[R, CycleSpan], T]) -> None:
        self._new, self._close = new, close
        self._reader = new()
        self._number: int | None = None  # None until the first marker names one
        self._first = 1
        self._last = 0
        self.done: list[tuple[CycleSpan, T]] = []
        self.capped = False  # MAX_CYCLES reached: later markers began nothing

    @property
    def every_line(self) -> bool:
        return self._reader.every_line

    def feed(self, no: int, line: str) -> None:
        number = marker(line)
        if number is not None:
            self._mark(no, number)
        self._last = no
        self._reader.feed(no, line)

    def _mark(self, no: int, number: int) -> None:
        current = self._number
        if current is None:  # the first marker names the cycle the log began in
            self._number = 0 if number < 0 else number
            return
        following = current + 1 if number < 0 else number
        if following <= current or no <= self._first:
            return
        if len(self.done) + 1 >= MAX_CYCLES:
            self.capped = True
            return
        span = CycleSpan(current, self._first, no - 1)
        self.done.append((span, self._close(self._reader, span)))
        self._reader, self._number, self._first = self._new(), following, no

    def finish(self, lines: int) -> list[tuple[CycleSpan, T]]:
        """Every cycle's span and result, the last one ending at line `lines` (the log's)."""
        span = CycleSpan(self._number or 0, self._first, max(lines, self._last, self._first))
        return [*self.done, (span, self._close(self._reader, span))]
