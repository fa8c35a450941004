"""Slurm job states, exit codes and their classification.

Every consumer asks one question of a state: is the job still in Slurm's hands (`is_live`), or
is it over (`is_terminal`)? `UNKNOWN` is neither: a state we could not read must never advance a
caller (docs/slurm-adapter.md).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class JobState(enum.StrEnum):
    """Every job state Slurm reports (squeue %T, sacct State, scontrol JobState)."""

    BOOT_FAIL = "BOOT_FAIL"
    CANCELLED = "CANCELLED"
    COMPLETED = "COMPLETED"
    COMPLETING = "COMPLETING"
    CONFIGURING = "CONFIGURING"
    DEADLINE = "DEADLINE"
    FAILED = "FAILED"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    PENDING = "PENDING"
    PREEMPTED = "PREEMPTED"
    REQUEUED = "REQUEUED"
    REQUEUE_FED = "REQUEUE_FED"
    REQUEUE_HOLD = "REQUEUE_HOLD"
    RESIZING = "RESIZING"
    RESV_DEL_HOLD = "RESV_DEL_HOLD"
    REVOKED = "REVOKED"
    RUNNING = "RUNNING"
    SIGNALING = "SIGNALING"
    SPECIAL_EXIT = "SPECIAL_EXIT"
    STAGE_OUT = "STAGE_OUT"
    STOPPED = "STOPPED"
    SUSPENDED = "SUSPENDED"
    TIMEOUT = "TIMEOUT"
    # Not a Slurm state: what nvrx reports when no source could tell. Neither live nor terminal.
    UNKNOWN = "UNKNOWN"

    @property
    def is_live(self) -> bool:
        """The job still holds or waits for resources; it may still run or change."""
        return self in _LIVE

    @property
    def is_terminal(self) -> bool:
        """The job is over for good (with --no-requeue nothing brings it back)."""
        return self in _TERMINAL

    @classmethod
    def parse(cls, text: str) -> JobState:
        """Parse a state as any Slurm command prints it.

        Accepts `CANCELLED by 0` (sacct), a trailing `+` (truncated sacct column) and lower case.
        Anything unrecognised is UNKNOWN, never a terminal state (QMCPACK/qmcpack#6009).
        """
        word = text.strip().split(" ", 1)[0].rstrip("+").upper()
        try:
            return cls(word)
        except ValueError:
            return cls.UNKNOWN


_LIVE = frozenset(
    {
        JobState.PENDING,
        JobState.RUNNING,
        JobState.REQUEUED,
        JobState.REQUEUE_FED,
        JobState.REQUEUE_HOLD,
        JobState.RESIZING,
        JobState.RESV_DEL_HOLD,
        JobState.SUSPENDED,
        JobState.COMPLETING,
        JobState.CONFIGURING,
        JobState.SIGNALING,
        JobState.STAGE_OUT,
        JobState.STOPPED,
        # SPECIAL_EXIT is a requeued job held after a special exit code: still queued.
        JobState.SPECIAL_EXIT,
    }
)

_TERMINAL = frozenset(
    {
        JobState.BOOT_FAIL,
        JobState.CANCELLED,
        JobState.COMPLETED,
        JobState.DEADLINE,
        JobState.FAILED,
        JobState.NODE_FAIL,
        JobState.OUT_OF_MEMORY,
        JobState.PREEMPTED,
        JobState.REVOKED,
        JobState.TIMEOUT,
    }
)


_EXIT_RE = re.compile(r"^\s*(\d+):(\d+)\s*$")


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """Slurm's `code:signal` pair. Both parts are kept: 0:15 (signalled) is not 0:0."""

    code: int
    signal: int

    @classmethod
    def parse(cls, text: str) -> ExitStatus | None:
        """`3:0` → ExitStatus(3, 0); an empty or malformed field → None (unknown)."""
        m = _EXIT_RE.match(text)
        if m is None:
            return None
        return cls(int(m.group(1)), int(m.group(2)))

    def __str__(self) -> str:
        return f"{self.code}:{self.signal}"
