"""A campaign session on disk: the upstream tracking file plus a journal of every intent and
outcome, from which the whole state is rebuilt (so a resumed or crashed driver loses nothing).

    <base>/fault_injection/<YYYYMMDD_HHMMSS>/
      experiments.tsv        upstream columns, one row per submitted job in pool order (appended,
                             fsynced)
      journal.jsonl          one JSON object per event (appended, fsynced)
      n<N>_<FAULT>_r<R>_i<I>/logs/slurm/, checkpoints/, tensorboard/

Journal events: `session` (what the campaign is), `planned` (one per experiment), `submitting`
(intent, before sbatch; `ahead_of` when it goes before a blocked experiment), `submitted` (job
id), `submit_failed`, `ended` (final state from accounting), `cancelled` (by the driver:
wall-clock cap or interrupt), `interrupted`,
`analysed` (validity, decision, FR ranks, the verdict and `judged`, the sha256 of every file it
is made from; appended again by a re-analysis).

One module because the journal's durable append, its replay and the tracking file are one
on-disk format: what a crash may leave in one, the others must read.
"""

from __future__ import annotations

import bisect
import errno
import json
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nvrx.campaign.errors import FORCE_HINT, JournalError, PoolError, SessionError
from nvrx.campaign.pool import Experiment, FaultType
from nvrx.display import counted
from nvrx.files import InputError, open_append, read_bounded

TSV_NAME = "experiments.tsv"
JOURNAL_NAME = "journal.jsonl"
TSV_HEADER = "JOB_ID\tFAULT_TYPE\tRANK\tITER\tNODES\tEXPERIMENT_DIR\n"


def utcnow() -> datetime:
    return datetime.now(UTC)


# How far back from the end a write cut short by a crash is looked for: one record's worth.
_TORN_SEARCH = 1 << 20


_CHUNK = 1 << 20


def _open_append(path: Path, what: str, *, read: bool = False) -> int:
    """A regular file of the session opened to append to (`files.open_append`): SessionError,
    one line with nothing written, for a link, a FIFO, a directory or an unopenable file."""
    try:
        return open_append(path, what, read=read)
    except InputError as exc:
        raise SessionError(str(exc)) from None


def _last_line_start(fd: int, size: int) -> int:
    """Where the bytes after the last newline begin (0 when there is none): searched backwards a
    chunk at a time, so a torn tail of any size is found whole."""
    end = size
    while end > 0:
        start = max(0, end - _CHUNK)
        at = os.pread(fd, end - start, start).rfind(b"\n")
        if at >= 0:
            return start + at + 1
        end = start
    return 0


def _move_torn_tail(fd: int, path: Path, cut: int, size: int) -> None:
    """Copy the journal's bytes from `cut` to its end, whole, onto `<file>.torn` (durably), then
    cut them off the journal. A `.torn` that cannot take them stops the append with nothing
    changed."""
    keep = _open_append(path.with_name(path.name + ".torn"), "torn-tail file")
    try:
        at = cut
        while at < size:
            chunk = os.pread(fd, min(_CHUNK, size - at), at)
            if not chunk:
                break
            os.write(keep, chunk)
            at += len(chunk)
        os.write(keep, b"\n")
        os.fsync(keep)
    except OSError as exc:
        raise SessionError(f"cannot keep the torn tail of {path}: {exc.strerror}") from None
    finally:
        os.close(keep)
    os.ftruncate(fd, cut)


def _append(path: Path, text: str) -> None:
    """Append and make it durable before going on: the next step may be a SIGKILL.

    A line is recorded once its newline is on disk. Bytes after the last newline are a write a
    crash cut short: they are moved, whole, to `<file>.torn` (kept, never silently dropped)
    before this append, so they cannot glue themselves to the new line and spoil it too.
    """
    fd = _open_append(path, "journal" if path.name == JOURNAL_NAME else "tracking file", read=True)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            cut = _last_line_start(fd, size)
            # One record is never a megabyte: a tail that long is torn, whatever it holds.
            if size - cut <= _TORN_SEARCH and _complete(os.pread(fd, size - cut, cut)):
                os.write(fd, b"\n")  # a whole record whose newline was lost: keep it
            else:
                _move_torn_tail(fd, path, cut, size)
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    except OSError as exc:
        raise SessionError(f"cannot append to {path}: {exc.strerror}") from None
    finally:
        os.close(fd)


def _complete(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):
        return False


@dataclass(frozen=True)
class JournalLines:
    """A journal as read: its events with their line numbers, the damaged lines a forced read
    skipped, and whether the last line was a write cut short by a crash (ignored: never
    recorded)."""

    events: list[tuple[int, dict[str, Any]]]
    skipped: tuple[int, ...] = ()
    torn_tail: bool = False
    lines: int = 0  # whole lines read: the next append is line `lines + 1`


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one event, durably; the event as a reader of the journal will see it."""
        text = json.dumps({"event": event, "at": utcnow().isoformat(), **fields}, sort_keys=True)
        _append(self.path, text + "\n")
        written: dict[str, Any] = json.loads(text)
        return written

    def read(self, *, force: bool = False) -> JournalLines:
        """Every event, with its line number. A line that is not an event is an error naming
        the file and line (JournalError); with `force` it is skipped and counted. The last line
        without its newline is a write a crash cut short, and is ignored."""
        try:
            data, _ = read_bounded(self.path, "journal")
        except InputError as exc:
            if exc.errno == errno.ENOENT:
                return JournalLines([])
            raise
        lines = data.split(b"\n")
        last = lines.pop()  # after the final newline: b"" unless a write was cut short
        torn = bool(last.strip()) and not _complete(last)
        if last.strip() and not torn:
            lines.append(last)
        events: list[tuple[int, dict[str, Any]]] = []
        skipped: list[int] = []
        for n, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                problem = None if isinstance(record, dict) else "not a JSON object"
                if problem is None and not isinstance(record.get("event"), str):
                    problem = "no event name"
            except UnicodeDecodeError:
                problem = "not UTF-8 text"
            except (ValueError, RecursionError) as exc:
                problem = f"not JSON ({type(exc).__name__})"
            if problem is None:
                events.append((n, record))
            elif force:
                skipped.append(n)
            else:
                raise JournalError(f"{self.path} line {n}: {problem}{FORCE_HINT}")
        return JournalLines(events, tuple(skipped), torn, len(lines))


@dataclass
class Record:
    """One experiment as the journal tells it."""

    index: int
    experiment: Experiment
    dir: Path
    status: str = "planned"  # planned, submitting, submitted, ended
    job_id: str | None = None
    job_name: str = ""
    comment: str = ""
    intent_at: datetime | None = None  # when the open `submitting` intent was journalled
    submitted_at: datetime | None = None
    state: str | None = None  # final Slurm state
    exit: str | None = None  # code:signal
    start: str | None = None
    end: str | None = None
    cancelled: str | None = None  # why the driver cancelled it
    ahead_of: int | None = None  # the blocked experiment it was submitted before (pool index)
    analysis: dict[str, Any] | None = None  # the latest `analysed` event (validity, decision...)
    verdict: dict[str, Any] | None = None  # the verdict of that analysis
    analysed_line: int = 0  # the journal line of that event (an error about it names it)

    @property
    def analysed(self) -> bool:
        return self.analysis is not None

    @property
    def case_id(self) -> str:
        """`SESSION/EXPERIMENT`: the id of this experiment's case in scores and reports."""
        return f"{self.dir.parent.name}/{self.dir.name}"

    def to_json(self) -> dict[str, Any]:
        e = self.experiment
        return {
            "index": self.index,
            "entry": e.entry,
            "fault_type": e.fault.value,
            "rank": e.rank,
            "iter": e.iteration,
            "nodes": e.nodes,
            "experiment_dir": str(self.dir),
            "status": self.status,
            "job_id": self.job_id,
            "state": self.state,
            "exit": self.exit,
            "start": self.start,
            "end": self.end,
            "cancelled": self.cancelled,
            "ahead_of": self.ahead_of,
            "analysis": self.analysis,
            "verdict": self.verdict,
        }


@dataclass
class SessionState:
    """The session rebuilt from its journal (a pure fold of the events), and kept current
    event by event by the driver (`Session.record`): what a pass asks of it (the records of a
    status, how many, the first planned ones) costs what changed, never the journal's length."""

    info: dict[str, Any] = field(default_factory=dict)
    records: list[Record] = field(default_factory=list)
    interruptions: int = 0
    skipped_lines: tuple[int, ...] = ()  # damaged journal lines a forced read skipped
    journal_path: Path | None = None  # what an error about one of its lines names
    orphaned_events: int = 0  # and the events about experiments those lines planned
    torn_tail: bool = False  # the last line was a write cut short by a crash
    passed_over: set[int] = field(default_factory=set)  # experiments something went ahead of
    by_index: dict[int, Record] = field(default_factory=dict, repr=False)
    lines: int = 0  # journal lines folded in: the line number of the latest event
    analysed_count: int = 0  # records with an analysis
    ended_order: list[int] = field(default_factory=list, repr=False)  # as they ended
    # Pool indices by status, each list sorted (pool order): kept by `set_status`.
    _by_status: dict[str, list[int]] = field(default_factory=dict, repr=False)

    def notes(self, journal: Path) -> list[str]:
        """What a forced or crash-cut read left out, for the user to see."""
        out = []
        if self.skipped_lines:
            lines = ", ".join(str(n) for n in self.skipped_lines[:10])
            more = ", ..." if len(self.skipped_lines) > 10 else ""
            orphaned = (
                f", and {counted(self.orphaned_events, 'event')} about the "
                + ("experiment it" if len(self.skipped_lines) == 1 else "experiments they")
                + " planned"
                if self.orphaned_events
                else ""
            )
            out.append(
                f"skipped {counted(len(self.skipped_lines), 'damaged line')} of {journal} "
                f"(line {lines}{more}){orphaned}"
            )
        if self.torn_tail:
            out.append(f"{journal}: the last line is a write cut short by a crash; ignored")
        return out

    def set_status(self, record: Record, status: str) -> None:
        """Move a record to `status` (every status change goes through here)."""
        if record.status == status:
            return
        old = self._by_status.get(record.status)
        if old is not None:
            at = bisect.bisect_left(old, record.index)
            if at < len(old) and old[at] == record.index:
                del old[at]
        record.status = status
        bisect.insort(self._by_status.setdefault(status, []), record.index)

    def by_status(self, status: str) -> list[Record]:
        """The records of `status`, in pool order."""
        return [self.by_index[i] for i in self._by_status.get(status, ())]

    def first(self, status: str, count: int) -> list[Record]:
        """The first `count` records of `status` in pool order."""
        return [self.by_index[i] for i in self._by_status.get(status, ())[:count]]

    def count(self, status: str) -> int:
        return len(self._by_status.get(status, ()))

    def gpus_per_node(self, default: int = 1) -> int:
        """GPUs per node of the campaign the journal records (`default` when it has none)."""
        spec = self.info.get("spec")
        value = spec.get("gpus_per_node") if isinstance(spec, dict) else None
        return value if type(value) is int and value > 0 else default


def replay(journal: JournalLines, session_dir: Path, *, force: bool = False) -> SessionState:
    """Fold the events into the session's state. An event whose fields are damaged is an error
    naming the file and line (JournalError); with `force` it is skipped and counted."""
    state = SessionState(
        torn_tail=journal.torn_tail,
        journal_path=session_dir / JOURNAL_NAME,
        lines=journal.lines,
    )
    skipped = list(journal.skipped)
    orphaned = 0
    for n, ev in journal.events:
        try:
            _apply(state, ev, session_dir, n)
        except (KeyError, TypeError, ValueError, PoolError) as exc:
            if force:
                if isinstance(exc, _Unplanned) and skipped:
                    orphaned += 1  # about an experiment whose `planned` line was skipped
                else:
                    skipped.append(n)
                continue
            detail = str(exc)[:200]
            raise JournalError(
                f"{session_dir / JOURNAL_NAME} line {n}: event {str(ev.get('event'))[:40]!r} "
                f"is damaged: {type(exc).__name__}: {detail}{FORCE_HINT}"
            ) from None
    state.skipped_lines = tuple(sorted(skipped))
    state.orphaned_events = orphaned
    return state


class _Unplanned(ValueError):
    """An event about an experiment no (readable) `planned` line planned."""


# Events about one experiment, by its `index`. Other event names (from a newer nvrx) are ignored.
_RECORD_EVENTS = frozenset(
    {"submitting", "submitted", "not_submitted", "ended", "cancelled", "analysed", "submit_failed"}
)


def _apply(state: SessionState, ev: dict[str, Any], session_dir: Path, line: int = 0) -> None:
    kind = ev.get("event")
    if kind == "session":
        state.info = ev
    elif kind == "planned":
        e = Experiment(
            FaultType(ev["fault"]),
            int(ev["rank"]),
            int(ev["iter"]),
            int(ev["nodes"]),
            int(ev.get("copy", 0)),
        )
        index = int(ev["index"])
        if index in state.by_index:
            raise ValueError(f"experiment {index} is planned twice")
        record = Record(index, e, session_dir / e.dir_name)
        state.records.append(record)
        state.by_index[index] = record
        bisect.insort(state._by_status.setdefault(record.status, []), index)
    elif kind == "interrupted":
        state.interruptions += 1
    elif kind in _RECORD_EVENTS:
        ref = ev.get("index")
        r = state.by_index.get(ref) if type(ref) is int else None
        if r is None:
            raise _Unplanned(f"index {str(ref)[:20]!r} names no planned experiment")
        if kind == "submitting":
            r.job_name, r.comment = ev["job_name"], ev["comment"]
            state.set_status(r, "submitting")
            r.intent_at = datetime.fromisoformat(ev["at"])
            ahead = ev.get("ahead_of")
            if ahead is not None:
                if type(ahead) is not int or ahead not in state.by_index:
                    raise ValueError(f"ahead_of {str(ahead)[:20]!r} names no planned experiment")
                r.ahead_of = ahead
                state.passed_over.add(ahead)
        elif kind == "submitted":
            r.job_id = str(ev["job_id"])
            state.set_status(r, "submitted")
            r.comment = ev.get("comment", r.comment)
            r.submitted_at = datetime.fromisoformat(ev["at"])
        elif kind == "not_submitted":
            state.set_status(r, "planned")  # the queue proved the intent never became a job
        elif kind == "ended":
            if r.status != "ended":
                state.ended_order.append(r.index)
            state.set_status(r, "ended")
            r.job_id = str(ev.get("job_id", r.job_id))
            r.state, r.exit = ev.get("state"), ev.get("exit")
            r.start, r.end = ev.get("start"), ev.get("end")
        elif kind == "cancelled":
            r.cancelled = ev.get("reason")
        elif kind == "analysed":  # the latest wins: --reanalyze appends, never rewrites
            verdict = ev.get("verdict")
            if verdict is not None and not isinstance(verdict, dict):
                raise TypeError(f"its verdict is a {type(verdict).__name__}, not an object")
            if "judged" in ev:
                _check_judged(ev["judged"])
            state.analysed_count += r.analysis is None
            r.analysis = {k: v for k, v in ev.items() if k not in ("event", "verdict")}
            r.verdict, r.analysed_line = verdict, line


_SHA256 = re.compile(r"[0-9a-f]{64}")
_JUDGED_FILES_MAX = 32  # a verdict is made of a handful of files
_JUDGED_NAME_MAX = 1024


def _check_judged(judged: Any) -> None:
    """`judged` of an `analysed` event: an object of file → sha256 (null: absent), each file a
    path inside the experiment directory (`analysis/fr_analysis.txt`; an older nvrx wrote the
    analysis files' bare names; null or no `judged`: no digests were recorded). ValueError saying
    what is wrong: the replay names the line."""
    if judged is None:
        return
    if not isinstance(judged, dict):
        raise ValueError(f"its judged digests are a {type(judged).__name__}, not an object")
    if len(judged) > _JUDGED_FILES_MAX:
        raise ValueError(
            f"its judged digests name {len(judged)} files (at most {_JUDGED_FILES_MAX})"
        )
    for name, digest in judged.items():
        if (
            not 0 < len(name) <= _JUDGED_NAME_MAX
            or "\x00" in name
            or any(part in ("", ".", "..") for part in name.split("/"))
        ):
            raise ValueError(
                "its judged digests name a path that is no file of the experiment directory"
            )
        if digest is not None and not (isinstance(digest, str) and _SHA256.fullmatch(digest)):
            raise ValueError("its judged digests hold a value that is no sha256")


class Session:
    """One campaign's directory, tracking file and journal."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.journal = Journal(directory / JOURNAL_NAME)
        self.tsv = directory / TSV_NAME
        self._tracked: set[str] | None = None  # job ids with a tracking row, read once
        self._tracked_upto = 0  # every record before this pool index has its row
        self.live: SessionState | None = None  # kept current by `record` once `follow` read it

    @property
    def session_id(self) -> str:
        return self.dir.name

    @classmethod
    def create(cls, base: Path, now: datetime | None = None) -> Session:
        """A new `<base>/fault_injection/<YYYYMMDD_HHMMSS>/` (a suffix if that second is
        taken: nothing already recorded is ever reused)."""
        parent = base / "fault_injection"
        parent.mkdir(parents=True, exist_ok=True)
        stamp = (now or datetime.now()).strftime("%Y%m%d_%H%M%S")
        for n in range(1, 1000):
            candidate = parent / (stamp if n == 1 else f"{stamp}_{n}")
            try:
                candidate.mkdir()
            except FileExistsError:
                continue
            session = cls(candidate)
            _append(session.tsv, TSV_HEADER)
            return session
        raise SessionError(f"cannot create a session directory under {parent}")

    @classmethod
    def open(cls, directory: Path) -> Session:
        """The session in `directory`; SessionError naming it when there is none: a path that
        does not exist says so, a directory without a journal is not a session."""
        if not directory.exists():
            raise SessionError(f"{directory} does not exist")
        session = cls(directory)
        if not session.journal.path.is_file():
            raise SessionError(
                f"{directory} is not an nvrx inject-loop session (no {JOURNAL_NAME})"
            )
        return session

    def state(self, *, force: bool = False) -> SessionState:
        """The state from the journal; `force` skips damaged lines (counted in the state)."""
        return replay(self.journal.read(force=force), self.dir, force=force)

    def follow(self) -> SessionState:
        """The state, read from the journal once and from then on kept current by `record`:
        the one writer's view (the driver's), which never reads the journal again."""
        self.live = self.state()
        return self.live

    def record(self, event: str, **fields: Any) -> None:
        """Journal one event durably, then fold it into the followed state (when there is
        one): the state is always what a fresh replay of the journal would give."""
        written = self.journal.append(event, **fields)
        if self.live is not None:
            self.live.lines += 1
            try:
                _apply(self.live, written, self.dir, self.live.lines)
            except (KeyError, TypeError, ValueError, PoolError) as exc:  # a bug of the writer
                raise JournalError(
                    f"{self.journal.path} line {self.live.lines}: event {event!r} does not "
                    f"apply: {type(exc).__name__}: {str(exc)[:200]}"
                ) from None

    def prepare_dir(self, record: Record) -> None:
        for sub in ("logs/slurm", "checkpoints", "tensorboard"):
            (record.dir / sub).mkdir(parents=True, exist_ok=True)

    def track(self, state: SessionState, *, flush: bool = False) -> None:
        """Append the upstream tracking rows (upstream readers keep working) in pool order:
        a submitted job's row goes in once every experiment before it in the pool has its own,
        so a job that went ahead of a blocked one waits for it (one decision at most). `flush`
        writes the rows still held, out of order, when the driver stops first: a job that ran
        always has its row. Rows already in the file (an earlier run) are never repeated."""
        if self._tracked is None:
            self._tracked = self._tracked_job_ids()
        rows: list[str] = []
        for position in range(self._tracked_upto, len(state.records)):
            record = state.records[position]
            if record.job_id is None:
                if not flush:
                    break
                continue
            if record.job_id not in self._tracked:
                e = record.experiment
                rows.append(
                    f"{record.job_id}\t{e.fault.value}\t{e.rank}\t{e.iteration}\t{e.nodes}"
                    f"\t{record.dir}\n"
                )
                self._tracked.add(record.job_id)
            if self._tracked_upto == position:
                self._tracked_upto = position + 1
        if rows:
            _append(self.tsv, "".join(rows))

    def _tracked_job_ids(self) -> set[str]:
        """The job ids the tracking file has rows for (its first column)."""
        try:
            data, _ = read_bounded(self.tsv, "tracking file")
        except InputError as exc:
            if exc.errno == errno.ENOENT:
                return set()
            raise SessionError(str(exc)) from None
        return {
            line.split(b"\t", 1)[0].decode("utf-8", "replace")
            for line in data.split(b"\n")[1:]
            if line.strip()
        }
