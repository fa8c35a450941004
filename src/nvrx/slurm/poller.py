"""A pass-level poller: the state of many jobs for the cost of one or two Slurm commands.

Per pass: one `squeue` (finished-but-remembered jobs included) for every tracked job that is not
final yet, then one `sacct` only for the jobs that are no longer live in the queue (for their
final state and exit code). A job whose accounting record is terminal is final and never queried
again. Passes closer together than the minimum interval return the previous answer.

Nothing is ever inferred from silence: a failed query or an empty accounting answer leaves the
job UNKNOWN (upstream read a failed squeue as "done").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from nvrx.slurm.errors import SlurmError
from nvrx.slurm.ids import check_job_id
from nvrx.slurm.parse import AccountingRow, QueueRow
from nvrx.slurm.states import ExitStatus, JobState

if TYPE_CHECKING:
    from nvrx.slurm.client import Slurm


@dataclass(frozen=True, slots=True)
class TaskStatus:
    """One job, or one task of an array, as the latest pass saw it."""

    task_id: int | None
    state: JobState
    reason: str = ""
    nodes: str = ""
    exit: ExitStatus | None = None
    start: datetime | None = None
    end: datetime | None = None


@dataclass(frozen=True, slots=True)
class JobStatus:
    """A tracked job (a plain job or a whole array) after one pass.

    `source` says what the state rests on: `squeue` (live, or just ended and still in the
    controller's memory), `sacct` (accounting; `final` when terminal), or `none` (no source
    answered: UNKNOWN).
    """

    job_id: str
    state: JobState
    source: str
    tasks: tuple[TaskStatus, ...] = ()
    final: bool = False

    @property
    def exit(self) -> ExitStatus | None:
        """The exit status of a plain job (or of array task 0)."""
        for task in self.tasks:
            if task.task_id in (None, 0):
                return task.exit
        return None


def aggregate_state(states: Sequence[JobState]) -> JobState:
    """One state for a whole array: live while any task is live, else its worst ending.

    A RUNNING task makes the array RUNNING; otherwise the first live task's state. When all
    tasks are terminal: COMPLETED only if every task completed, else the first other ending.
    UNKNOWN as soon as any task is unknown and none is live.
    """
    if not states:
        return JobState.UNKNOWN
    live = [s for s in states if s.is_live]
    if live:
        return JobState.RUNNING if JobState.RUNNING in live else live[0]
    if any(s is JobState.UNKNOWN or not s.is_terminal for s in states):
        return JobState.UNKNOWN
    failed = [s for s in states if s is not JobState.COMPLETED]
    return failed[0] if failed else JobState.COMPLETED


@dataclass(frozen=True)
class PollPass:
    """What one pass learnt. `blind` when the queue could not be read."""

    at: datetime
    jobs: dict[str, JobStatus]
    queue_error: SlurmError | None = None
    accounting_error: SlurmError | None = None
    commands: int = 0

    @property
    def blind(self) -> bool:
        return self.queue_error is not None


def _task_from_queue(row: QueueRow) -> TaskStatus:
    return TaskStatus(row.task_id, row.state, row.reason, row.nodes)


def _task_from_accounting(row: AccountingRow) -> TaskStatus:
    return TaskStatus(row.task_id, row.state, "", row.nodes, row.exit, row.start, row.end)


@dataclass
class StatePoller:
    """Coalesces the state of many jobs into one squeue (+ one sacct) per pass.

    `min_interval` (default: the adapter's `slurm.poll_interval`) is the site's rate limit: a
    pass inside it runs no command and answers from the previous pass; a job that pass did not
    cover is UNKNOWN until the next real pass.
    """

    slurm: Slurm
    min_interval: float | None = None
    clock: Callable[[], float] = time.monotonic
    _final: dict[str, JobStatus] = field(default_factory=dict)
    # Every array task index the queue has shown per tracked job, across passes: accounting
    # must cover them all before an array is final (slurmdbd may have recorded only some).
    _seen_tasks: dict[str, set[int]] = field(default_factory=dict)
    _last: PollPass | None = None
    _last_clock: float = 0.0

    def __post_init__(self) -> None:
        if self.min_interval is None:
            self.min_interval = self.slurm.settings.poll_interval

    def poll(self, job_ids: Iterable[str | int], *, force: bool = False) -> PollPass:
        """The status of every job in `job_ids` (plain or array job ids)."""
        ids = sorted({check_job_id(j) for j in job_ids}, key=lambda s: (len(s), s))
        now = self.clock()
        last = self._last
        if not force and last is not None and now - self._last_clock < (self.min_interval or 0):
            return PollPass(
                last.at,
                {i: last.jobs.get(i) or JobStatus(i, JobState.UNKNOWN, "none") for i in ids},
                last.queue_error,
                last.accounting_error,
                0,
            )
        before = sum(self.slurm.calls.values())
        result = self._pass(ids)
        result = PollPass(
            result.at,
            result.jobs,
            result.queue_error,
            result.accounting_error,
            sum(self.slurm.calls.values()) - before,
        )
        self._last, self._last_clock = result, now
        return result

    def _pass(self, ids: list[str]) -> PollPass:
        at = datetime.now(UTC)
        statuses: dict[str, JobStatus] = {i: self._final[i] for i in ids if i in self._final}
        open_ids = [i for i in ids if i not in self._final]
        if not open_ids:
            return PollPass(at, statuses)

        try:
            rows = self.slurm.queue(open_ids, include_finished=True)
        except SlurmError as exc:
            for i in open_ids:
                statuses[i] = JobStatus(i, JobState.UNKNOWN, "none")
            return PollPass(at, statuses, queue_error=exc)

        by_job: dict[str, list[QueueRow]] = {}
        for row in rows:
            # A tracked id may be the array's id, one task as `123_4`, or a task's own job id.
            keys = {row.array_job_id, row.job_id}
            if row.task_id is not None:
                keys.add(f"{row.array_job_id}_{row.task_id}")
            for key in keys:
                by_job.setdefault(key, []).append(row)

        need_accounting: list[str] = []
        for i in open_ids:
            tasks = tuple(_task_from_queue(r) for r in by_job.get(i, []))
            seen = {t.task_id for t in tasks if t.task_id is not None}
            if seen:
                self._seen_tasks.setdefault(i, set()).update(seen)
            state = aggregate_state([t.state for t in tasks])
            if state.is_live:
                statuses[i] = JobStatus(i, state, "squeue", tasks)
                continue
            # Not live in the queue: ended (the controller may already have purged some of an
            # array's tasks) or unknown to it. Only accounting can say how it ended.
            statuses[i] = JobStatus(i, JobState.UNKNOWN, "squeue" if tasks else "none", tasks)
            need_accounting.append(i)

        accounting_error: SlurmError | None = None
        if need_accounting:
            try:
                acct = self.slurm.accounting(need_accounting)
            except SlurmError as exc:
                accounting_error = exc
            else:
                self._apply_accounting(need_accounting, acct, statuses)
        return PollPass(at, statuses, accounting_error=accounting_error)

    def _apply_accounting(
        self, ids: list[str], rows: list[AccountingRow], statuses: dict[str, JobStatus]
    ) -> None:
        by_job: dict[str, list[AccountingRow]] = {}
        for row in rows:
            for key in {row.array_job_id, row.raw_job_id, row.job_id}:
                by_job.setdefault(key, []).append(row)
        for i in ids:
            acct_rows = by_job.get(i)
            if not acct_rows:
                continue  # accounting does not know it yet: it stays UNKNOWN
            tasks = tuple(_task_from_accounting(r) for r in acct_rows)
            state = aggregate_state([t.state for t in tasks])
            covered = {t for r in acct_rows for t in (r.ref.task_ids or ())}
            # Right after slurmdbd reconnects it can show a terminal state with End=Unknown and a
            # stale exit code: only a record with every end time is final, and only one that
            # covers every task the queue showed.
            final = (
                state.is_terminal
                and all(t.end for t in tasks)
                and self._seen_tasks.get(i, set()) <= covered
            )
            status = JobStatus(i, state, "sacct", tasks, final=final)
            statuses[i] = status
            if final:
                self._final[i] = status
                self._seen_tasks.pop(i, None)
