"""The campaign driver: a sliding window of at most BATCH_SIZE jobs of the session in Slurm.

The next experiment is submitted as soon as one leaves (not when the whole batch has; `barrier`
reproduces upstream's batches for comparison). Which one is `inject.window.choose`'s answer: in
pool order, or (node-aware, the default) a later one that can start now when the next one
needs more nodes than are idle. All in-flight jobs cost one squeue per pass (plus one sacct for
those that left the queue, and one sinfo when a slot is free for a node-aware choice); a job
leaves the window only when accounting has its final state — a failed query is never "done"
(upstream read a failed squeue as "batch done").
Every intent is journalled before it is carried out, so a driver killed at any point resumes
without resubmitting or losing an experiment: a job submitted just before the crash is found by
its comment or its unique job name.

One module because the window, the journal writes and the recovery of a killed driver are one
protocol: each step's order is what makes exactly-once hold.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from nvrx.campaign.errors import CampaignError, SessionError
from nvrx.campaign.pool import Experiment
from nvrx.campaign.session import Record, Session, SessionState, utcnow
from nvrx.config import redact_argv
from nvrx.display import counted
from nvrx.inject.analyst import Analyst, ExperimentAnalysis
from nvrx.inject.window import Submit, Waiting, Window, WindowMode, choose
from nvrx.slurm import ErrorKind, Slurm, SlurmError, SlurmValueError, SubmitOptions
from nvrx.slurm.poller import JobStatus, StatePoller
from nvrx.slurm.states import JobState

# Exported to every job besides the experiment's own values: upstream's (the four paths and
# NVRX_ATTR_SCRIPT_DIR, always), and the cache-staging ones when set (docs/upstream-parity.md).
SITE_VARIABLES = (
    "NVRX_ATTR_SCRIPT_DIR",
    "MEGATRON_REPO_HOST_PATH",
    "CONTAINER_IMAGE",
    "SHARED_TMP_BASE_DIR",
    "WORKSPACE_HOST_PATH",
    "ENABLE_NFS_CACHE_STAGING",
    "NFS_TRITON_CACHE",
    "NFS_INDUCTOR_CACHE",
)


@dataclass(frozen=True)
class CampaignSpec:
    """What the session's jobs look like; recorded in the journal so --resume submits the same."""

    workload: str
    script: str
    gpus_per_node: int
    time_limit: str
    partition: str | None = None
    account: str | None = None
    fault_delay: int | None = None
    exports: dict[str, str] = field(default_factory=dict)  # site variables and workload env
    extra_args: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: Any) -> CampaignSpec:
        """The spec a session's journal recorded; SessionError when it is not one."""
        if not isinstance(data, dict):
            raise SessionError("the session's journal has no campaign spec (no 'session' event)")
        values = dict(data)
        values["extra_args"] = tuple(values.get("extra_args") or ())
        try:
            return cls(**values)
        except TypeError as exc:
            raise SessionError(
                f"the session's journal has an unusable campaign spec: {exc}"
            ) from None


def job_name(session_id: str, index: int) -> str:
    """Unique per session and experiment: accounting can find a job by it after a crash."""
    return f"fi-{session_id}-{index}"


def experiment_options(spec: CampaignSpec, session: Session, record: Record) -> SubmitOptions:
    """The sbatch options of one experiment (as upstream's launcher sets them), every value
    validated."""
    e = record.experiment
    logs = str(record.dir / "logs" / "slurm").replace("%", "%%")
    exports = {
        "FAULT_TYPE": e.fault.value,
        "FAULT_RANK": str(e.rank),
        "FAULT_AT_ITER": str(e.iteration),
        "GPUS_PER_NODE": str(spec.gpus_per_node),
        "EXPERIMENT_DIR": str(record.dir),
        "BASE_EXPERIMENTS_DIR": str(session.dir.parent.parent),
        **({"FAULT_DELAY": str(spec.fault_delay)} if spec.fault_delay is not None else {}),
        # A session recorded before NVRX_ATTR_SCRIPT_DIR was: the script's directory.
        "NVRX_ATTR_SCRIPT_DIR": str(Path(spec.script).parent),
        **spec.exports,
    }
    return SubmitOptions(
        job_name=job_name(session.session_id, record.index),
        nodes=e.nodes,
        ntasks_per_node=spec.gpus_per_node,
        gpus_per_node=spec.gpus_per_node,
        time=spec.time_limit,
        partition=spec.partition,
        account=spec.account,
        exclusive=True,
        mem="0",
        output=f"{logs}/%j.launch.out",
        error=f"{logs}/%j.launch.err",
        comment=f"nvrx-fi={session.session_id} exp={record.index}",
        export=("ALL", *(f"{k}={v}" for k, v in exports.items())),
        extra_args=spec.extra_args,
    )


class Reporter(Protocol):
    def submitted(self, record: Record, done: int, total: int) -> None: ...
    def ended(self, record: Record, done: int, total: int) -> None: ...
    def analysed(
        self, record: Record, result: ExperimentAnalysis, done: int, total: int
    ) -> None: ...
    def waiting(self, state: SessionState, blind: str | None) -> None: ...
    def note(self, text: str) -> None: ...


@dataclass
class Outcome:
    state: SessionState
    error: str | None = None
    interrupted: bool = False

    @property
    def complete(self) -> bool:
        return all(r.status == "ended" for r in self.state.records)


def _placed(status: JobStatus) -> bool:
    """The job holds its nodes or has given them back: whatever sinfo says idle it won't take.
    Pending, or unknown to every source, it still may."""
    if status.state is JobState.PENDING:
        return False
    return not (status.state is JobState.UNKNOWN and status.source == "none")


def _crash_point() -> tuple[str, int] | None:
    """Test seam: NVRX_INJECT_CRASH_AT=<point>:<n> kills the driver with SIGKILL at that point
    after n submissions (points: before-submit, after-submit, waiting), or once n analyses are
    journalled (point: analysed). How crash-safety is
    proven on a real cluster; never set in normal use."""
    raw = os.environ.get("NVRX_INJECT_CRASH_AT", "")
    point, _, count = raw.partition(":")
    return (point, int(count)) if point and count.isdigit() else None


class Campaign:
    def __init__(
        self,
        session: Session,
        slurm: Slurm,
        reporter: Reporter,
        *,
        window: Window,
        poll_interval: float = 30.0,
        cap_seconds: float | None = None,
        cancel_on_interrupt: bool = False,
        analyst: Analyst | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.session = session
        self.slurm = slurm
        self.reporter = reporter
        self.window = window
        self.poll_interval = poll_interval
        self.cap_seconds = cap_seconds
        self.cancel_on_interrupt = cancel_on_interrupt
        self.analyst = analyst
        self.sleep = sleep
        self.clock = clock
        self._last_pass = clock()
        self.poller = StatePoller(slurm, min_interval=0)
        self.crash = _crash_point()
        self.submissions = 0
        self.analysed = 0  # analyses journalled by this driver
        # Job ids the latest pass saw past pending: every other in-flight job may still take
        # nodes the partition shows idle (pending, unseen, or submitted after that pass).
        self._placed: set[str] = set()
        self._blind_nodes: str | None = None  # why idle nodes are unknown (said once)
        self.state = SessionState()  # the session as the journal says, once `run` read it

    # --- the loop -------------------------------------------------------------------------

    def run(self) -> Outcome:
        # The journal is read once; from then on every event this driver writes is folded into
        # `state` as it is journalled (`Session.record`): a pass costs what changed.
        self.state = state = self.session.follow()
        try:
            spec = CampaignSpec.from_json(state.info.get("spec"))
            self._reconcile(state)
            self.session.track(state)  # rows a killed driver had not written
            if self.analyst is not None:  # ended before a crash or an interrupt, not analysed
                for record in state.by_status("ended"):
                    if not record.analysed:
                        self.analyst.submit(record)
            while True:
                self._collect()
                if not (
                    state.count("submitted") or state.count("submitting") or state.count("planned")
                ):
                    self._collect(block=True)
                    self.session.track(state, flush=True)
                    return Outcome(state)
                if state.count("submitting"):
                    self._reconcile(state)
                in_flight = state.count("submitted")
                free = self.window.size - in_flight - state.count("submitting")
                if self.window.mode is WindowMode.BARRIER and in_flight:
                    free = 0
                for pick in self._choose(spec, state, free):
                    self._submit(spec, state.by_index[pick.index], state, pick.ahead_of)
                self._check("waiting")
                # Passes start every poll interval: the time a pass takes (queries, journal,
                # submissions) is not added to the wait for the next.
                self.sleep(max(0.0, self._last_pass + self.poll_interval - self.clock()))
                self._last_pass = self.clock()
                self._poll(state)
        except KeyboardInterrupt:
            return self._interrupted()
        except (SlurmError, SlurmValueError, CampaignError) as exc:
            self._collect(block=True)  # what ended is still analysed and journalled
            self.session.track(state, flush=True)
            return Outcome(state, error=str(exc))

    def _choose(self, spec: CampaignSpec, state: SessionState, free: int) -> list[Submit]:
        if free <= 0 or not state.count("planned"):
            return []
        # `choose` never looks past the free slots and the look-ahead: the head of the pool is
        # all it needs, whatever the pool's length.
        planned = state.first("planned", free + self.window.look_ahead + 1)
        idle = None
        if self.window.mode is WindowMode.NODE_AWARE:
            idle = self._idle_nodes(spec, state)
        picks = choose(
            [Waiting(r.index, r.experiment.nodes) for r in planned],
            free,
            idle,
            mode=self.window.mode,
            look_ahead=self.window.look_ahead,
            passed_over=state.passed_over,
        )
        for pick in picks:
            if pick.ahead_of is not None:
                head = state.by_index[pick.ahead_of].experiment
                self.reporter.note(
                    f"{state.by_index[pick.index].experiment.entry} goes ahead of {head.entry}, "
                    f"which needs {counted(head.nodes, 'node')} ({idle} idle)"
                )
        return picks

    def _idle_nodes(self, spec: CampaignSpec, state: SessionState) -> int | None:
        """Nodes of the partition a job of this session can start on now: sinfo's idle ones,
        less those the session's own jobs not yet running will take. None (pool order) when
        sinfo cannot say."""
        try:
            nodes = self.slurm.partition_nodes(spec.partition)
        except (SlurmError, SlurmValueError) as exc:
            if self._blind_nodes is None:
                self.reporter.note(f"idle nodes unknown ({exc}); submitting in pool order")
            self._blind_nodes = str(exc)
            return None
        if self._blind_nodes is not None:
            self.reporter.note("idle nodes known again; node-aware order resumes")
            self._blind_nodes = None
        waiting = sum(
            r.experiment.nodes
            for r in state.by_status("submitted") + state.by_status("submitting")
            if r.job_id not in self._placed
        )
        return max(nodes.idle - waiting, 0)

    def _collect(self, *, block: bool = False) -> None:
        if self.analyst is None:
            return
        finished = self.analyst.collect(block=block)
        if finished:
            state = self.state
            for record, result in finished:
                self.reporter.analysed(record, result, state.analysed_count, len(state.records))
            self.analysed += len(finished)
            self._check("analysed", self.analysed)

    def _check(self, point: str, count: int | None = None) -> None:
        count = self.submissions if count is None else count
        if self.crash is not None and self.crash[0] == point and count >= self.crash[1]:
            os.kill(os.getpid(), signal.SIGKILL)

    def _submit(
        self, spec: CampaignSpec, record: Record, state: SessionState, ahead_of: int | None = None
    ) -> None:
        options = experiment_options(spec, self.session, record)
        self.session.prepare_dir(record)
        self._check("before-submit")
        self.session.record(
            "submitting",
            index=record.index,
            job_name=options.job_name,
            comment=options.comment,
            **({"ahead_of": ahead_of} if ahead_of is not None else {}),
        )
        try:
            sub = self.slurm.submit(options, script=Path(spec.script))
        except SlurmError as exc:
            if exc.kind is ErrorKind.TRANSIENT:
                # sbatch's answer is lost and the queue cannot tell: the intent stays open and
                # is settled by the queue (or accounting) before anything is submitted again.
                self.reporter.note(f"submission of {record.experiment.entry} unsettled: {exc}")
                return
            self.session.record("submit_failed", index=record.index, error=str(exc))
            self.session.record("not_submitted", index=record.index)
            raise
        self.submissions += 1
        self.session.record("submitted", index=record.index, job_id=sub.job_id, comment=sub.comment)
        self.session.track(state)
        self.reporter.submitted(record, state.count("ended"), len(state.records))
        self._check("after-submit")

    def _poll(self, state: SessionState) -> None:
        in_flight = state.by_status("submitted")
        if not in_flight:
            return
        result = self.poller.poll([r.job_id for r in in_flight if r.job_id])
        self._placed = {i for i, status in result.jobs.items() if _placed(status)}
        blind = None
        if result.queue_error is not None:
            blind = f"squeue failed ({result.queue_error}); nothing is marked done"
        elif result.accounting_error is not None:
            blind = f"sacct failed ({result.accounting_error}); ended jobs wait for it"
        for record in in_flight:
            assert record.job_id is not None
            status = result.jobs.get(record.job_id)
            if status is not None and status.final:
                self._ended(record, status, state)
            elif status is not None and status.state.is_live:
                self._cap(record)
        self.reporter.waiting(state, blind)

    def _ended(self, record: Record, status: JobStatus, state: SessionState) -> None:
        task = status.tasks[0] if status.tasks else None
        self.session.record(
            "ended",
            index=record.index,
            job_id=record.job_id,
            state=status.state.value,
            exit=str(task.exit) if task and task.exit else None,
            start=task.start.isoformat() if task and task.start else None,
            end=task.end.isoformat() if task and task.end else None,
        )
        self.reporter.ended(record, state.count("ended"), len(state.records))
        if self.analyst is not None:
            self.analyst.submit(record)

    def _cap(self, record: Record) -> None:
        """The per-experiment wall-clock cap: a job over it is cancelled (once)."""
        if self.cap_seconds is None or record.submitted_at is None or record.cancelled:
            return
        if (utcnow() - record.submitted_at).total_seconds() < self.cap_seconds:
            return
        assert record.job_id is not None
        self.slurm.cancel([record.job_id])
        self.session.record(
            "cancelled", index=record.index, reason=f"over the {self.cap_seconds:g}s cap"
        )
        self.reporter.note(
            f"{record.experiment.entry} (job {record.job_id}) over its cap: cancelled"
        )

    def _reconcile(self, state: SessionState) -> None:
        """Settle every intent the journal left open (a crash between the intent and sbatch's
        answer): the queue by comment, then accounting by the unique job name. Only a clear
        "no such job" from both sends the experiment back to the pool; a failed query leaves it
        open for the next pass (never resubmitted on a guess)."""
        unsure = state.by_status("submitting")
        if not unsure:
            return
        try:
            rows = self.slurm.queue(user=self.slurm.current_user(), include_finished=True)
        except SlurmError as exc:
            self.reporter.note(
                f"cannot settle {counted(len(unsure), 'open submission')} yet: {exc}"
            )
            return
        for record in unsure:
            found = [
                r
                for r in rows
                if r.comment == record.comment
                or r.comment.startswith(record.comment + " nvrx-submit=")
            ]
            job = found[0].array_job_id if found else None
            if job is None:
                try:
                    acct = self.slurm.accounting(
                        name=record.job_name, user=self.slurm.current_user()
                    )
                except SlurmError as exc:
                    self.reporter.note(f"cannot settle {record.experiment.entry} yet: {exc}")
                    continue
                job = acct[0].array_job_id if acct else None
            if job is None:
                # An sbatch whose answer was lost can still turn into a job a little later:
                # "never submitted" is decided only once the intent is older than that.
                settle = 2 * self.slurm.settings.command_timeout
                age = (utcnow() - record.intent_at).total_seconds() if record.intent_at else settle
                if age < settle:
                    self.reporter.note(
                        f"{record.experiment.entry}: no job yet; deciding after {settle:g} s"
                    )
                    continue
                self.session.record("not_submitted", index=record.index)
                continue
            self.session.record(
                "submitted", index=record.index, job_id=job, comment=record.comment, recovered=True
            )
            self.session.track(state)
            self.reporter.note(
                f"found {record.experiment.entry} as job {job} (submitted before the restart)"
            )

    def _interrupted(self) -> Outcome:
        if self.analyst is not None:  # keep what finished; the rest is redone on --resume
            self._collect()
            self.analyst.close(cancel=True)
        state = self.state
        in_flight = [r.job_id for r in state.by_status("submitted") if r.job_id]
        cancelled: list[str] = []
        if self.cancel_on_interrupt and in_flight:
            try:
                self.slurm.cancel(in_flight)
                cancelled = in_flight
            except SlurmError as exc:
                self.reporter.note(f"could not cancel in-flight jobs {in_flight}: {exc}")
        self.session.record("interrupted", cancelled=cancelled)
        self.session.track(state, flush=True)
        return Outcome(state, interrupted=True)


def record_session(
    session: Session,
    spec: CampaignSpec,
    experiments: Sequence[Experiment],
    *,
    pool_source: str,
    settings: dict[str, Any],
    argv: Sequence[str],
    window: Window,
) -> None:
    """The session's first events: what the campaign is, then one `planned` per experiment."""
    session.journal.append(
        "session",
        spec=asdict(spec),
        pool=pool_source,
        batch_size=window.size,
        window=window.mode.value,
        look_ahead=window.look_ahead,
        settings=settings,
        argv=redact_argv(argv),  # a key given with --set never reaches the journal
        created=datetime.now().isoformat(),
    )
    for index, e in enumerate(experiments):
        session.journal.append(
            "planned",
            index=index,
            fault=e.fault.value,
            rank=e.rank,
            iter=e.iteration,
            nodes=e.nodes,
            copy=e.copy,
        )
