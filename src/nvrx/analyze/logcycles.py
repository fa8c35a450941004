"""Restart cycles in one job log: where each begins, so that each is attributed on its own.

A job log can hold several restart cycles: ft_launcher's in-job restarts (it prints its profiling
events, `Cycle: N Event: <name> Node: ... Rank: ...`, at each cycle's rendezvous, start and
failure) and, in a log that several generations appended to, a launch script's
`[sbatch_script]: New run dir added:` line. A cycle begins at the first event of its start (the
rendezvous, the health check, the workers' start: any event but those of a cycle's end) that
names a cycle number above the current one (or at each new-run-dir line) and runs to the line
before the next begins; the lines before the first marker belong to the first cycle. NVRx
numbers a cycle's end events (`failure_detected`, `worker_terminated`) with the next cycle's
number already: they end their cycle and begin nothing. A marker naming the current cycle or an
earlier one (a late event from another launcher) begins nothing, nor does one that says no
cycle (cut before its event's name, a number of more than 9 digits, a jump of more than
MAX_CYCLES): those are counted and named in the answer, never dropped silently.

`CycleSplitter` is a `logscan.LineReader`: it hands each line to the reader of the cycle it falls
in (a launcher's line that comes after another launcher began the next cycle, to the cycle that
launcher is still in), and turns each reader into its result (`close`) once it can get no more
lines, so a log of many cycles costs two open readers, never one per line. Past `MAX_CYCLES`
cycles no new cycle begins: the rest of the log is read as part of the last one, and the split
says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from nvrx.analyze.launcherlog import launcher_of
from nvrx.analyze.logscan import LineReader
from nvrx.limits import small_int

# ft_launcher's profiling event, as NVRx and the rehearsal launcher print it (`Cycle: N Event:
# NAME`), and the older `profiling.py:... Cycle: N` form. More digits than a number may have are
# read, so that a huge number is said to begin nothing rather than cut to its first digits.
# Possessive quantifiers: a run of blanks is never given back, so a line of 4 KiB of blanks
# and `Cycle:` costs one pass.
_EVENT = re.compile(r"\bCycle:[ \t]*+(\d{1,40})[ \t]++Event:[ \t]*+(\w+)")
_OLDER = "profiling.py:"
# More digits than a cycle number may have (nvrx.limits.MAX_DIGITS): a garbled line, no cycle.
_LONG = re.compile(r"\bCycle:[ \t]*+\d{10}")
# NVRx counts a cycle at its failure: `failure_detected` already names the next cycle, and the
# workers' stop after it belongs to the cycle that failed. The next cycle begins at its
# rendezvous (any other event).
ENDING_EVENTS = frozenset(
    {
        "failure_detected", "worker_terminated", "attribution_get_started",
        "attribution_get_completed",
    }
)  # fmt: skip
STARTING_EVENTS = frozenset(
    {
        "rendezvous_started", "health_check_completed", "rendezvous_completed",
        "worker_start_started", "worker_start_completed",
    }
)  # fmt: skip
_KNOWN_EVENTS = ENDING_EVENTS | STARTING_EVENTS
_NEW_RUN = "[sbatch_script]: New run dir added:"
# The lower-case words one of which every marker line holds (the gate of `feed_blocks`).
KEYWORDS = ("cycle:", "new run dir added")
MAX_CYCLES = 1000
MAX_LAUNCHERS = 1 << 17  # launchers whose cycle is followed (a job has no more nodes)
UNREAD_LINES = 4  # unread markers cited by line number (with how many more)

Marker = tuple[Literal["begins", "ends", "unread"], int | None]


def read_marker(line: str) -> Marker | None:
    """What a line says of cycles: `("begins", N)` (N = -1: the next one, for a new-run-dir
    line), `("ends", N)` for an event of the end of a cycle (NVRx's N is already the next
    cycle's), `("unread", None)` for a `Cycle:` line that says no cycle (cut before its event's
    name, or a number of more than MAX_DIGITS digits), or None."""
    if "Cycle:" in line:
        if ("Event:" in line or "profiling.py:" in line) and _LONG.search(line) is not None:
            return "unread", None
        if (m := _EVENT.search(line)) is not None:
            number = small_int(m.group(1))
            if number is None:
                return "unread", None
            name = m.group(2)
            if name in ENDING_EVENTS:
                return "ends", number
            cut = not line[m.end() :].strip() and name not in STARTING_EVENTS
            if cut and any(e.startswith(name) for e in _KNOWN_EVENTS):
                # The line ends inside a known event's name: which event it was is unknown.
                return "unread", None
            return "begins", number  # a start event, or a newer launcher's event
        if _OLDER in line or "- Cycle:" in line:  # the launcher's profiling line
            digits, after = _after_cycle(line)
            if not (digits or after) or (digits and after and "Event:".startswith(after)):
                return "unread", None  # cut before its event's name (a partial write)
            if digits and _OLDER in line:
                return "begins", int(digits)  # at most 9 digits (_LONG)
    if _NEW_RUN in line:
        return "begins", -1
    return None


def _after_cycle(line: str) -> tuple[str, str]:
    """The digits after a line's last `Cycle:` and the text after them (stripped)."""
    rest = line[line.rfind("Cycle:") + len("Cycle:") :].lstrip(" \t")
    digits = len(rest) - len(rest.lstrip("0123456789"))
    return rest[:digits], rest[digits:].strip()


def marker(line: str) -> int | None:
    """The cycle number a line begins (-1: the next one, for a new-run-dir line), or None."""
    found = read_marker(line)
    return found[1] if found is not None and found[0] == "begins" else None


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
    """Feeds each line to its cycle's reader (`new()` makes one per cycle) and closes a cycle's
    reader into its result (`close(reader, span)`) once the cycle after the next begins.

    Several launchers write one log (NVRx's log server: each line names its launcher,
    `infra:K`, and a launcher's lines come in chunks, seconds behind another's): the cycle
    boundary is the first launcher's start of the new cycle, and a line of a launcher that is
    still in the cycle before (its cycle's end, written after another launcher's rendezvous) is
    read with that cycle. `launcher` says whose a line is (None: nobody's known, and the line is
    read where it stands); it never guesses from the lines around, which the keyword gate may not
    show. Spans still tile the log by position."""

    def __init__(
        self,
        new: Callable[[], R],
        close: Callable[[R, CycleSpan], T],
        launcher: Callable[[str], int | None] = launcher_of,
    ) -> None:
        self._new, self._close, self._launcher_of = new, close, launcher
        self._reader = new()
        self._number: int | None = None  # None until the first marker names one
        self._first = 1
        self._last = 0
        # The cycle before the current one, still read for launchers that are behind: its
        # reader and span, closed when the next cycle begins or the log ends.
        self._previous: tuple[R, CycleSpan] | None = None
        self._launcher: int | None = None  # the launcher of the line being fed
        self._launcher_cycle: dict[int, int] = {}  # each launcher's cycle, by its own events
        self.done: list[tuple[CycleSpan, T]] = []
        self.capped = False  # MAX_CYCLES reached: later markers began nothing
        self.unread: list[int] = []  # marker lines that said no cycle (the first few)
        self.unread_count = 0

    @property
    def every_line(self) -> bool:
        previous = self._previous
        return self._reader.every_line or (previous is not None and previous[0].every_line)

    def feed(self, no: int, line: str) -> None:
        tag = self._launcher = self._launcher_of(line)
        found = read_marker(line)
        if found is not None:
            kind, number = found
            if kind == "unread":
                self._unread(no)
            elif kind == "begins" and number is not None:
                followed = tag in self._launcher_cycle or len(self._launcher_cycle) < MAX_LAUNCHERS
                if number >= 0 and tag is not None and followed:
                    self._launcher_cycle[tag] = number
                self._mark(no, number)
        self._last = no
        self._reader_of_line().feed(no, line)

    def _reader_of_line(self) -> R:
        previous, launcher = self._previous, self._launcher
        if previous is not None and launcher is not None:
            behind = self._launcher_cycle.get(launcher)
            if behind is not None and behind == previous[1].number:
                return previous[0]
        return self._reader

    def _unread(self, no: int) -> None:
        self.unread_count += 1
        if len(self.unread) < UNREAD_LINES:
            self.unread.append(no)

    def _mark(self, no: int, number: int) -> None:
        current = self._number
        if current is None:  # the first marker names the cycle the log began in
            self._number = 0 if number < 0 else number
            return
        following = current + 1 if number < 0 else number
        if following <= current or no <= self._first:
            return
        if following - current > MAX_CYCLES:
            self._unread(no)  # a jump no job makes: a garbled number, not a cycle
            return
        if len(self.done) + (self._previous is not None) + 1 >= MAX_CYCLES:
            self.capped = True
            return
        self._close_previous()
        span = CycleSpan(current, self._first, no - 1)
        self._previous = (self._reader, span)
        self._reader, self._number, self._first = self._new(), following, no

    def _close_previous(self) -> None:
        if self._previous is not None:
            reader, span = self._previous
            self.done.append((span, self._close(reader, span)))
            self._previous = None

    def finish(self, lines: int) -> list[tuple[CycleSpan, T]]:
        """Every cycle's span and result, the last one ending at line `lines` (the log's)."""
        self._close_previous()
        span = CycleSpan(self._number or 0, self._first, max(lines, self._last, self._first))
        return [*self.done, (span, self._close(self._reader, span))]
