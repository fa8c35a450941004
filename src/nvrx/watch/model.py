"""What one watch pass sees (a Snapshot) and what it concludes (Findings): plain data.

Detectors are pure functions of (Snapshot, WatchSettings) → findings; everything that reads
files or asks Slurm builds a Snapshot first (upstream nvrx-watch's DESIGN: "detectors
are pure functions of (snapshot, config)", "a blind watcher must not look healthy").

One module: every plain-data type a pass hands from the readers to the detectors and outputs,
so nothing below the detectors needs more than this module to describe what a pass saw.
"""

from __future__ import annotations

import bisect
import enum
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, overload

from nvrx.slurm.parse import DrainedNode
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


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


def to_us(t: datetime) -> int:
    """An aware time as whole microseconds since the epoch (exact, unlike a float timestamp)."""
    return (t - _EPOCH) // _US


def from_us(us: int) -> datetime:
    return _EPOCH + timedelta(0, 0, us)  # positional: twice as fast as microseconds=us


Key = tuple[int, int, int, str]  # (start µs, attempt, cycle, job): the order of cycles


@dataclass(frozen=True, slots=True)
class CycleColumns:
    """A run of cycles in order, as columns: what goodput needs of every cycle, without a
    record per cycle. Times are microseconds since the epoch, UTC (`to_us`); an end is None
    while the cycle is open."""

    jobs: Sequence[str]
    attempts: Sequence[int]
    numbers: Sequence[int]
    starts: Sequence[int]
    ends: Sequence[int | None]

    @classmethod
    def of(cls, records: Sequence[CycleInfo]) -> CycleColumns:
        # `to_us` spelled out: a first pass runs this once per cycle file it read.
        epoch, us = _EPOCH, _US
        return cls(
            tuple([c.job_id for c in records]),
            tuple([c.attempt_index for c in records]),
            tuple([c.cycle_number for c in records]),
            tuple([(c.start - epoch) // us for c in records]),
            tuple([None if c.end is None else (c.end - epoch) // us for c in records]),
        )


@dataclass(frozen=True, slots=True)
class BlockSummary:
    """What a pass needs of a run of cycles without its columns: the count and order keys,
    each job's first start (goodput's start-up), each attempt's highest cycle number (counter
    drops), how many are open, and the range of their ends (the fleet window)."""

    count: int
    first: Key
    last: Key
    job_starts: dict[str, int]
    highs: dict[tuple[str, int], int]
    open: int
    min_end: int | None
    max_end: int | None

    @classmethod
    def of(cls, c: CycleColumns) -> BlockSummary:
        job_starts: dict[str, int] = {}
        highs: dict[tuple[str, int], int] = {}
        for job, start in zip(c.jobs, c.starts, strict=True):
            job_starts.setdefault(job, start)
        for scope, number in zip(zip(c.jobs, c.attempts, strict=True), c.numbers, strict=True):
            if number > highs.get(scope, -1):
                highs[scope] = number
        ends = [e for e in c.ends if e is not None]
        return cls(
            count=len(c.starts),
            first=(c.starts[0], c.attempts[0], c.numbers[0], c.jobs[0]),
            last=(c.starts[-1], c.attempts[-1], c.numbers[-1], c.jobs[-1]),
            job_starts=job_starts,
            highs=highs,
            open=len(c.ends) - len(ends),
            min_end=min(ends, default=None),
            max_end=max(ends, default=None),
        )


class CycleBlock:
    """A non-empty run of cycles in order: its summary always, its columns and records on
    demand. The cycle cache hands out an unchanged directory as a block that decodes its
    columns only for goodput (when nothing remembered covers it) and builds records only when
    something asks for them, one by one (the latest cycle, a detector's few), so a warm pass
    over 100,000 files builds a handful of records, not one per file. A record is built once:
    asked for again, one by one or with the whole block, it is the same object. `ident` names
    an unchanged directory's content (goodput remembers its share by it); None for cycles read
    this pass."""

    __slots__ = (
        "_built",
        "_columns",
        "_load_columns",
        "_load_mtimes",
        "_load_record",
        "_records",
        "ident",
        "summary",
    )

    def __init__(
        self,
        summary: BlockSummary,
        *,
        columns: CycleColumns | None = None,
        load_columns: Callable[[], CycleColumns] | None = None,
        records: Sequence[CycleInfo] | None = None,
        load_record: Callable[[CycleColumns, int], CycleInfo] | None = None,
        load_mtimes: Callable[[], Sequence[int]] | None = None,
        ident: str | None = None,
    ) -> None:
        self.summary = summary
        self._load_mtimes = load_mtimes
        self.ident = ident
        self._columns = columns
        self._load_columns = load_columns
        self._records: tuple[CycleInfo, ...] | None = None if records is None else tuple(records)
        self._load_record = load_record
        self._built: dict[int, CycleInfo] = {}

    @classmethod
    def of(cls, records: Sequence[CycleInfo], mtimes: Sequence[int] | None = None) -> CycleBlock:
        """Records already in order (and their files' mtimes, when known)."""
        columns = CycleColumns.of(records)
        return cls(
            BlockSummary.of(columns),
            columns=columns,
            records=records,
            load_mtimes=None if mtimes is None else lambda: mtimes,
        )

    def __len__(self) -> int:
        return self.summary.count

    @property
    def built(self) -> int:
        """How many of its records exist (all of them for cycles read this pass)."""
        return len(self) if self._records is not None else len(self._built)

    @property
    def columns(self) -> CycleColumns:
        if self._columns is None:
            assert self._load_columns is not None
            columns = self._load_columns()
            if len(columns.starts) != self.summary.count:
                raise ValueError(f"a block of {len(self)} cycles loaded other columns")
            self._columns = columns
        return self._columns

    def record(self, i: int) -> CycleInfo:
        if self._records is not None:
            return self._records[i]
        if not 0 <= i < len(self):
            raise IndexError("cycle index out of range")
        built = self._built.get(i)
        if built is None:
            assert self._load_record is not None
            built = self._built[i] = self._load_record(self.columns, i)
        return built

    def mtimes(self) -> Sequence[int]:
        """Each record's file mtime (ns) when it was read; 0 where the block does not know."""
        if self._load_mtimes is None:
            return [0] * len(self)
        mtimes = self._load_mtimes()
        if len(mtimes) != len(self):
            raise ValueError(f"a block of {len(self)} cycles loaded {len(mtimes)} mtimes")
        return mtimes

    def records(self) -> tuple[CycleInfo, ...]:
        if self._records is None:
            self._records = tuple(self.record(i) for i in range(len(self)))
            self._built = {}
        return self._records


class Cycles(Sequence[CycleInfo]):
    """A chain's cycles, deduplicated by key and sorted by (start, attempt, cycle): a sequence
    of `CycleInfo` made of blocks (in order, not overlapping) whose records are built only when
    indexed or iterated. What every cycle is needed for reads the summaries (`highs`,
    `ended_since`) or the columns (`times`, for goodput) instead."""

    __slots__ = ("_offsets", "blocks")

    def __init__(self, blocks: Iterable[CycleBlock] = ()) -> None:
        self.blocks = tuple(b for b in blocks if len(b))
        self._offsets = list(itertools.accumulate(len(b) for b in self.blocks))

    @classmethod
    def of(cls, records: Iterable[CycleInfo]) -> Cycles:
        """Records already in order, as one block."""
        listed = tuple(records)
        return cls([CycleBlock.of(listed)] if listed else [])

    def __len__(self) -> int:
        return self._offsets[-1] if self._offsets else 0

    @overload
    def __getitem__(self, index: int) -> CycleInfo: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[CycleInfo, ...]: ...

    def __getitem__(self, index: int | slice) -> CycleInfo | tuple[CycleInfo, ...]:
        n = len(self)
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            return tuple(self[i] for i in range(start, stop, step))
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("cycle index out of range")
        b = bisect.bisect_right(self._offsets, index)
        return self.blocks[b].record(index - (self._offsets[b - 1] if b else 0))

    def __iter__(self) -> Iterator[CycleInfo]:
        for block in self.blocks:
            yield from block.records()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Cycles | tuple | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Cycles({len(self)} cycles in {len(self.blocks)} blocks)"

    def of_job(self, job_id: str) -> list[CycleInfo]:
        """The cycles of one generation; builds the records of the blocks that hold it only."""
        return [
            c
            for b in self.blocks
            if job_id in b.summary.job_starts
            for c in b.records()
            if c.job_id == job_id
        ]

    def count_of(self, job_id: str) -> int:
        """How many cycles one generation has (no record built)."""
        return sum(
            b.columns.jobs.count(job_id) for b in self.blocks if job_id in b.summary.job_starts
        )

    def last_start_of(self, job_id: str) -> datetime | None:
        """No cycle of the generation started after this (its latest start when its blocks
        hold it alone, as a generation's directory does); None when it has no cycle."""
        starts = [b.summary.last[0] for b in self.blocks if job_id in b.summary.job_starts]
        return from_us(max(starts)) if starts else None

    def times_of(self, job_id: str) -> list[tuple[int, int, int | None]]:
        """(index, start, end) of one generation's cycles in order, in microseconds since the
        epoch, from the columns: `self[index]` builds the record of just that one."""
        out: list[tuple[int, int, int | None]] = []
        base = 0
        for block in self.blocks:
            if job_id in block.summary.job_starts:
                c = block.columns
                out += [
                    (base + i, start, end)
                    for i, (job, start, end) in enumerate(
                        zip(c.jobs, c.starts, c.ends, strict=True)
                    )
                    if job == job_id
                ]
            base += len(block)
        return out

    def times(self) -> Iterator[tuple[str, int, int | None]]:
        """(job, start, end) of every cycle in order, in microseconds since the epoch."""
        for block in self.blocks:
            c = block.columns
            yield from zip(c.jobs, c.starts, c.ends, strict=True)

    def highs(self) -> dict[str, int]:
        """The highest cycle number of each generation attempt (`<job>.<attempt>`)."""
        high: dict[tuple[str, int], int] = {}
        for block in self.blocks:
            for scope, number in block.summary.highs.items():
                if number > high.get(scope, -1):
                    high[scope] = number
        return {f"{job}.{attempt}": n for (job, attempt), n in high.items()}

    def ended_since(self, cutoff_us: int) -> list[tuple[CycleInfo, bool]]:
        """The cycles that ended at or after `cutoff_us`, each with whether it was its
        generation's last cycle. Blocks whose every end is older build nothing."""
        hits: list[int] = []
        base = 0
        for block in self.blocks:
            latest = block.summary.max_end
            if latest is not None and latest >= cutoff_us:
                ends = block.columns.ends
                hits += [base + i for i, e in enumerate(ends) if e is not None and e >= cutoff_us]
            base += len(block)
        if not hits:
            return []
        found = [self[i] for i in hits]
        last = {job: self.times_of(job)[-1][0] for job in {c.job_id for c in found}}
        return [(c, last[c.job_id] == i) for i, c in zip(hits, found, strict=True)]


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
    # The file holds Megatron's `release` (a released checkpoint, no iteration): no value, as
    # no checkpoint yet.
    released: bool = False


@dataclass(frozen=True, slots=True)
class Generation:
    """One array job of the chain as the queue shows it (live generations only)."""

    job_id: str
    task_states: dict[int, JobState]  # task index → state, for every task row in squeue
    task_nodes: dict[int, tuple[str, ...]] = field(default_factory=dict)  # running tasks' nodes

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

    @property
    def clean(self) -> bool:
        return ended_cleanly(self.state, self.exit, self.no_restart)


def ended_cleanly(
    state: JobState | None, exit: ExitStatus | None, no_restart: bool = False
) -> bool:
    """Task 0 ended without a failure: COMPLETED, or CANCELLED with exit 0:0 (an nvrx
    generation's task 0 cancels its own array, itself included, once its launcher exited 0),
    and not on the no-restart verdict (`no_restart`: its exit code, or the generation's flag
    file). The verdict's task 0 also cancels its own array, so accounting may show it
    CANCELLED 0:0 too: the flag file is what tells it apart."""
    if no_restart:
        return False
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
    no_restart: bool = False  # ended on the no-restart verdict (exit code or flag file)

    @property
    def clean(self) -> bool:
        return ended_cleanly(self.state, self.exit, self.no_restart)


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
    accounting_window: float | None = None  # seconds back sacct was asked about the chain's name
    # Drained and draining nodes, cluster-wide (one sinfo per pass); None when sinfo failed.
    drained: tuple[DrainedNode, ...] | None = ()
    drained_error: str | None = None

    def drained_node(self, name: str) -> DrainedNode | None:
        return next((d for d in self.drained or () if d.name == name), None)

    def drained_in_use(self) -> list[tuple[str, int, DrainedNode]]:
        """(generation, task, node) for each drained node a running task of the chain holds."""
        if not self.drained:
            return []
        by_name = {d.name: d for d in self.drained}
        return [
            (g.job_id, task, by_name[node])
            for g in self.generations
            for task, nodes in sorted(g.task_nodes.items())
            for node in nodes
            if node in by_name
        ]

    def chain_nodes(self) -> set[str]:
        """The nodes the chain's running tasks hold (squeue's view)."""
        return {node for g in self.generations for nodes in g.task_nodes.values() for node in nodes}

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
    # The iteration training ends at (Megatron's train samples over the global batch), when
    # known: tells a chain that finished from one that ran out of generations.
    train_iterations: int | None = None
    resolved_from: str = ""  # "manifest", "batch script", "work dir", "flags"
    # Whether the generations run nvrx's in-job drain poller: "on", "off", or "unknown" (no
    # manifest, or one older than chain.drain_poll).
    drain_poller: str = "unknown"

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
    cycles: Cycles  # deduplicated by key, sorted by (start, attempt, cycle); a tuple is wrapped
    checkpoint: Checkpoint
    platform: Platform | None
    skipped: tuple[SkippedFile, ...] = ()
    notes: tuple[str, ...] = ()  # about the observation itself (e.g. the cycle cache)
    # Why the cycle-info location could not be read (missing, unreadable): a pass that cannot
    # see the cycle files is as blind as one that cannot see Slurm.
    cycles_blind: str | None = None
    counter_drops: tuple[CounterDrop, ...] = ()  # against the highest values the state saw
    # Generations whose no-restart flag file this pass found without accounting to say how
    # they ended (`--platform none`): the latest generation's, once its last cycle closed.
    no_restart_flags: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not isinstance(self.cycles, Cycles):
            object.__setattr__(self, "cycles", Cycles.of(self.cycles))

    @property
    def latest(self) -> CycleInfo | None:
        return self.cycles[-1] if self.cycles else None

    @property
    def current_job(self) -> str | None:
        """The generation of the latest cycle (the one that is, or was last, training)."""
        return self.latest.job_id if self.latest else None

    def cycles_of(self, job_id: str) -> list[CycleInfo]:
        return self.cycles.of_job(job_id)


@dataclass(frozen=True, slots=True)
class CancelPending:
    """The watcher's one action: cancel the pending tasks of an orphaned generation (its task 0
    ended, so they can never train), as `scancel --state=PENDING <generation>`."""

    generation: str

    @property
    def argv(self) -> tuple[str, ...]:
        """The command an owner would run by hand (printed in observe-only mode)."""
        return ("scancel", "--state=PENDING", self.generation)


# The finding a pass makes of an action it refused (watch.detectors.observer.refuse_actions):
# not a detector of the snapshot, but counted and listed beside them.
ACTION_REFUSED = "action_refused"


@dataclass(frozen=True, slots=True)
class DrainNode:
    """The watcher's other action, only with `watch.drain_suspects` and --act: drain the one
    node a suspect_node finding names, as `scontrol update nodename=N state=drain reason=...`."""

    node: str
    reason: str

    @property
    def argv(self) -> tuple[str, ...]:
        return (
            "scontrol",
            "update",
            f"nodename={self.node}",
            "state=drain",
            f"reason={self.reason}",
        )


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
    action: CancelPending | DrainNode | None = None  # what `--act` would do about it, if anything
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
