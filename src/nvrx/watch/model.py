"""What one watch pass sees (a Snapshot) and what it concludes (Findings): plain data.

Detectors are pure functions of (Snapshot, WatchSettings) → findings; everything that reads
files or asks Slurm builds a Snapshot first (upstream nvrx-watch's DESIGN: "detectors
are pure functions of (snapshot, config)", "a blind watcher must not look healthy").
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nvrx.slurm.states import ExitStatus, JobState


class Severity(enum.StrEnum):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """Sort order: critical first."""
        return {"critical": 0, "warning": 1, "info": 2}[self.value]


@dataclass(frozen=True, slots=True)
class CycleInfo:
    """One NVRx cycle-info file (`cycle_info.<job_id>.<attempt_index>.<cycle_number>`).

    `write_count` is the file's `generation` field: a compare-and-swap counter of rewrites, NOT
    a chain generation (in nvrx a generation is one array job of the chain).
    """

    job_id: str
    attempt_index: int
    cycle_number: int
    start: datetime  # UTC
    end: datetime | None  # None while open, or forever when the writer was killed
    log_file: str
    active_nodes: tuple[str, ...]  # expanded hostlist
    standby_nodes: tuple[str, ...]
    active_ranks: str
    write_count: int
    path: str

    @property
    def key(self) -> str:
        return f"{self.job_id}.{self.attempt_index}.{self.cycle_number}"

    @property
    def is_open(self) -> bool:
        return self.end is None

    def duration(self, now: datetime) -> float:
        """Seconds the cycle ran (until now while open)."""
        return ((self.end or now) - self.start).total_seconds()


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """A file in the cycle-info directory that was not read, and why (for the log)."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The checkpoint-iteration file: its value and mtime, plus what the state file remembers.

    `first_seen` is when the watcher first saw the current value (survives passes through the
    state file); `save_interval_seconds` is the observed time between checkpoint advances, when
    at least two advances were seen.
    """

    path: str | None
    value: int | None = None
    mtime: datetime | None = None
    first_seen: datetime | None = None
    save_interval_seconds: float | None = None
    error: str | None = None  # unreadable / not an integer (a missing file is not an error)
    # Since when the file has held the same text that is no integer (seen by two passes or
    # more): not a file caught mid-write, but one the watcher cannot read progress from.
    not_integer_since: datetime | None = None


@dataclass(frozen=True, slots=True)
class Generation:
    """One array job of the chain as the queue shows it (live generations only)."""

    job_id: str
    task_states: dict[int, JobState]  # task index → state, for every task row in squeue

    @property
    def task0_live(self) -> bool:
        state = self.task_states.get(0)
        return state is not None and state.is_live

    @property
    def pending(self) -> int:
        return sum(1 for s in self.task_states.values() if s is JobState.PENDING)

    @property
    def running(self) -> int:
        return sum(1 for s in self.task_states.values() if s is JobState.RUNNING)

    @property
    def live(self) -> bool:
        return any(s.is_live for s in self.task_states.values())


@dataclass(frozen=True, slots=True)
class TaskZeroEnding:
    """How a generation's task 0 ended, from accounting."""

    job_id: str  # the generation (array job id)
    state: JobState
    end: datetime | None
    exit: ExitStatus | None
    no_restart: bool  # exit code was the no-restart code, or the generation's no_restart flag


def ended_cleanly(state: JobState | None, exit: ExitStatus | None) -> bool:
    """Task 0 ended without a failure: COMPLETED, or CANCELLED with exit 0:0 (an nvrx
    generation's task 0 cancels its own array, itself included, once its launcher exited 0)."""
    if state is JobState.COMPLETED:
        return True
    return state is JobState.CANCELLED and exit is not None and exit.code == 0 and exit.signal == 0


@dataclass(frozen=True, slots=True)
class GenerationSpan:
    """A generation's task 0 in accounting: when it started and ended (None: not yet)."""

    job_id: str
    start: datetime | None
    end: datetime | None
    state: JobState | None = None
    exit: ExitStatus | None = None

    @property
    def clean(self) -> bool:
        return ended_cleanly(self.state, self.exit)


@dataclass(frozen=True, slots=True)
class SaveSeen:
    """A checkpoint save as watch passes saw it: the iteration, the file's mtime (when it was
    saved), and the last pass that still found the file so (no save in between)."""

    iteration: int
    at: datetime
    seen_until: datetime


@dataclass(frozen=True)
class Platform:
    """What Slurm said this pass. A failed query is recorded, never read as 'nothing'."""

    queue_ok: bool
    queue_error: str | None = None
    accounting_ok: bool = True
    accounting_error: str | None = None
    generations: tuple[Generation, ...] = ()  # live generations of this chain
    endings: tuple[TaskZeroEnding, ...] = ()  # task-0 endings within the churn window (+ orphans)
    spans: tuple[GenerationSpan, ...] = ()  # every task 0 accounting showed (running ones too)

    def generation(self, job_id: str) -> Generation | None:
        return next((g for g in self.generations if g.job_id == job_id), None)

    def ending(self, job_id: str) -> TaskZeroEnding | None:
        return next((e for e in self.endings if e.job_id == job_id), None)


@dataclass(frozen=True)
class ChainRef:
    """Which chain is watched, and how it was resolved."""

    name: str | None
    user: str | None
    work_dir: str | None
    chain_id: str | None = None  # from the manifest (nvrx chains)
    manifest_job_ids: tuple[str, ...] = ()
    # (job id, submitted at) per manifest generation: tells generations an operator added with
    # --extend after a no-restart verdict from the ones the verdict should have cancelled.
    manifest_submitted: tuple[tuple[str, datetime], ...] = ()
    expect_running: bool = False  # a manifest that was not cancelled: the chain should be alive
    max_restarts: int | None = None
    no_restart_exit_code: int = 93
    save_interval_iterations: int | None = None  # Megatron --save-interval, when known
    resolved_from: str = ""  # "manifest", "batch script", "work dir", "flags"

    @property
    def label(self) -> str:
        """How outputs name the chain: its job name, else its id, work dir or "cycles"."""
        return self.name or self.chain_id or self.work_dir or "cycles"


@dataclass(frozen=True, slots=True)
class CounterDrop:
    """A counter that only ever grows was seen lower than before: the checkpoint iteration
    (`counter="checkpoint"`), or a generation attempt's highest cycle number (`"cycle"`, scope
    `<job>.<attempt>`): a checkpoint rolled back, cycle files removed or rewritten, or another
    run writing into this one's files."""

    counter: str
    scope: str
    before: int
    after: int


@dataclass(frozen=True)
class Snapshot:
    """Everything one pass observed. `platform` is None with `--platform none`."""

    observed_at: datetime
    host: str
    chain: ChainRef
    cycles: tuple[CycleInfo, ...]  # deduplicated by key, sorted by (start, attempt, cycle)
    checkpoint: Checkpoint
    platform: Platform | None
    skipped: tuple[SkippedFile, ...] = ()
    notes: tuple[str, ...] = ()  # about the observation itself (e.g. the cycle cache)
    # Why the cycle-info location could not be read (missing, unreadable): a pass that cannot
    # see the cycle files is as blind as one that cannot see Slurm.
    cycles_blind: str | None = None
    counter_drops: tuple[CounterDrop, ...] = ()  # against the highest values the state saw

    @property
    def latest(self) -> CycleInfo | None:
        return self.cycles[-1] if self.cycles else None

    @property
    def current_job(self) -> str | None:
        """The generation of the latest cycle (the one that is, or was last, training)."""
        return self.latest.job_id if self.latest else None

    def cycles_of(self, job_id: str) -> list[CycleInfo]:
        return [c for c in self.cycles if c.job_id == job_id]


@dataclass(frozen=True, slots=True)
class CancelPending:
    """The watcher's one action: cancel the pending tasks of an orphaned generation (its task 0
    ended, so they can never train), as `scancel --state=PENDING <generation>`."""

    generation: str

    @property
    def argv(self) -> tuple[str, ...]:
        """The command an owner would run by hand (printed in observe-only mode)."""
        return ("scancel", "--state=PENDING", self.generation)


@dataclass(frozen=True)
class Finding:
    """One conclusion of one detector. `key` is stable across passes and hosts (dedup, pager);
    `first_seen` is filled in by the shell from the state file."""

    detector: str
    severity: Severity
    key: str
    summary: str
    detail: str = ""
    runbook: str = ""
    action: CancelPending | None = None  # what `--act` would do about it, if anything
    evidence: dict[str, Any] = field(default_factory=dict)
    first_seen: datetime | None = None

    @property
    def command(self) -> tuple[str, ...]:
        """The action as a command line (empty when there is none): what JSON and pagers show."""
        return self.action.argv if self.action is not None else ()

    def sort_key(self) -> tuple[int, str, str]:
        return (self.severity.rank, self.detector, self.key)

    def to_json(self) -> dict[str, Any]:
        """The finding as JSON output and the webhook show it."""
        return {
            "key": self.key,
            "detector": self.detector,
            "severity": self.severity.value,
            "summary": self.summary,
            "detail": self.detail,
            "runbook": self.runbook,
            "command": list(self.command),
            "first_seen": self.first_seen.isoformat() if self.first_seen else None,
            "evidence": self.evidence,
        }
