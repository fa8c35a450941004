"""A campaign session on disk: the upstream tracking file plus a journal of every intent and
outcome, from which the whole state is rebuilt (so a resumed or crashed driver loses nothing).

    <base>/fault_injection/<YYYYMMDD_HHMMSS>/
      experiments.tsv        upstream columns, one row per submitted job (appended, fsynced)
      journal.jsonl          one JSON object per event (appended, fsynced)
      n<N>_<FAULT>_r<R>_i<I>/logs/slurm/, checkpoints/, tensorboard/

Journal events: `session` (what the campaign is), `planned` (one per experiment), `submitting`
(intent, before sbatch), `submitted` (job id), `submit_failed`, `ended` (final state from
accounting), `cancelled` (by the driver: wall-clock cap or interrupt), `interrupted`,
`analysed` (validity, decision, FR ranks and the verdict; appended again by a re-analysis).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nvrx.inject.pool import Experiment, FaultType, PoolError

TSV_NAME = "experiments.tsv"
JOURNAL_NAME = "journal.jsonl"
TSV_HEADER = "JOB_ID\tFAULT_TYPE\tRANK\tITER\tNODES\tEXPERIMENT_DIR\n"


def utcnow() -> datetime:
    return datetime.now(UTC)


def _append(path: Path, text: str) -> None:
    """Append and make it durable before going on: the next step may be a SIGKILL."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, event: str, **fields: Any) -> None:
        record = {"event": event, "at": utcnow().isoformat(), **fields}
        _append(self.path, json.dumps(record, sort_keys=True) + "\n")

    def read(self) -> list[dict[str, Any]]:
        """Every complete event; a line cut short by a crash mid-write is ignored."""
        try:
            # A byte that is not UTF-8 spoils its line, not the journal.
            text = self.path.read_bytes().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return []
        events = []
        for line in text.splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and "event" in record:
                events.append(record)
        return events


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
    analysis: dict[str, Any] | None = None  # the latest `analysed` event (validity, decision...)
    verdict: dict[str, Any] | None = None  # the verdict of that analysis

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
            "analysis": self.analysis,
            "verdict": self.verdict,
        }


@dataclass
class SessionState:
    """The session rebuilt from its journal (a pure fold of the events)."""

    info: dict[str, Any] = field(default_factory=dict)
    records: list[Record] = field(default_factory=list)
    interruptions: int = 0

    def by_status(self, status: str) -> list[Record]:
        return [r for r in self.records if r.status == status]

    def gpus_per_node(self, default: int = 1) -> int:
        """GPUs per node of the campaign the journal records (`default` when it has none)."""
        spec = self.info.get("spec")
        value = spec.get("gpus_per_node") if isinstance(spec, dict) else None
        return value if type(value) is int and value > 0 else default


def replay(events: list[dict[str, Any]], session_dir: Path) -> SessionState:
    state = SessionState()
    for n, ev in enumerate(events, start=1):
        try:
            _apply(state, ev, session_dir)
        except (KeyError, TypeError, ValueError) as exc:
            raise PoolError(
                f"{session_dir / JOURNAL_NAME}: event {n} ({ev.get('event')!r}) is damaged: "
                f"{type(exc).__name__}: {exc}"
            ) from None
    return state


def _apply(state: SessionState, ev: dict[str, Any], session_dir: Path) -> None:
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
        state.records.append(Record(int(ev["index"]), e, session_dir / e.dir_name))
    elif kind == "interrupted":
        state.interruptions += 1
    else:
        index = ev.get("index")
        if not isinstance(index, int) or not 0 <= index < len(state.records):
            return
        r = state.records[index]
        if kind == "submitting":
            r.status, r.job_name, r.comment = "submitting", ev["job_name"], ev["comment"]
            r.intent_at = datetime.fromisoformat(ev["at"])
        elif kind == "submitted":
            r.status, r.job_id = "submitted", str(ev["job_id"])
            r.comment = ev.get("comment", r.comment)
            r.submitted_at = datetime.fromisoformat(ev["at"])
        elif kind == "not_submitted":
            r.status = "planned"  # the queue proved the intent never became a job
        elif kind == "ended":
            r.status = "ended"
            r.job_id = str(ev.get("job_id", r.job_id))
            r.state, r.exit = ev.get("state"), ev.get("exit")
            r.start, r.end = ev.get("start"), ev.get("end")
        elif kind == "cancelled":
            r.cancelled = ev.get("reason")
        elif kind == "analysed":  # the latest wins: --reanalyze appends, never rewrites
            r.analysis = {k: v for k, v in ev.items() if k not in ("event", "verdict")}
            r.verdict = ev.get("verdict")


class Session:
    """One campaign's directory, tracking file and journal."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.journal = Journal(directory / JOURNAL_NAME)
        self.tsv = directory / TSV_NAME

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
        raise PoolError(f"cannot create a session directory under {parent}")

    @classmethod
    def open(cls, directory: Path) -> Session:
        session = cls(directory)
        if not session.journal.path.is_file():
            raise PoolError(f"{directory} is not an nvrx inject-loop session (no {JOURNAL_NAME})")
        return session

    def state(self) -> SessionState:
        return replay(self.journal.read(), self.dir)

    def prepare_dir(self, record: Record) -> None:
        for sub in ("logs/slurm", "checkpoints", "tensorboard"):
            (record.dir / sub).mkdir(parents=True, exist_ok=True)

    def track(self, record: Record) -> None:
        """The upstream tracking row, appended at submission (upstream readers keep working)."""
        e = record.experiment
        _append(
            self.tsv,
            f"{record.job_id}\t{e.fault.value}\t{e.rank}\t{e.iteration}\t{e.nodes}\t{record.dir}\n",
        )
