"""Built-in log attribution for fault-injection runs: deterministic, offline, no model.

The stand-in for upstream's LLM-based logsage, which had no rule per crash
type and called every one of them restartable. `attribute_log` reads one blinded `srun --label`
main log and answers logsage's 5-field text (`LogAttribution.text`): the restart decision, an
explanation, `Attribution: Primary issues: [...], Secondary issues: [...]`, a detail line (the
evidence, by log line number) and whether a checkpoint was saved. Ground truth is never read: the
input goes through `logtext.blind()` again here, so the injector's marker and CRITICAL lines (and
the exception line naming NVRx's `InjectedException`) are gone whatever the caller did.

Reading the log
---------------

    Rule              Read                                     Meaning
    ----------------  ---------------------------------------  ---------------------------------
    labels            `N: text`; from 10 tasks on padded       a line of rank N (srun's task id
                      (` 1: text`)                             is the global rank)
    nested labels     `N: M: text`, `N: [rankM]: text`         srun's task N is a launcher; M is
                                                               the rank, and srun's task exits
                                                               name launchers, not ranks
    system lines      `srun: ...`, `slurmstepd...`, even       srun's own view, never a rank's
                      behind a rank label                      output
    task exits        `srun: error: <node>: task(s) <list>:    how each task ended; <list> like
                      <status>`                                `1`, `2-3`, `0-1,3`
    teardown          `First task exited`, `task N: running`,  srun is killing tasks that did not
                      `_step_signal: Terminating`, `Job step   end by themselves: a task `Killed`
                      aborted`, `STEP ... CANCELLED`           after this hung, it was not SIGKILLed
    collateral        `Watchdog caught collective operation    a healthy peer that waited for the
                      timeout`, `Ranks missing from            root rank and took itself down
                      collective` on a rank; its `terminate    (watchdog abort): a secondary issue,
                      called ... c10::DistBackendError` and    never the root cause
                      srun `Aborted` follow
    named missing     `Ranks missing from collective ...:      a vote for rank N; with the note
                      [N, ...]`                                `connection to rank(s) [N] lost`
                                                               N's process had already exited
    lost rank 0       `the collective coordinator (rank 0)     a vote for rank 0, the silent
                      does not answer` / `is unreachable`;     coordinator: frozen as a whole
                      peers losing the master or TCPStore      (`does not answer`) or gone
    root rank         the named-missing rank with the earliest own evidence; else the most named
                      (ties: the lowest); else the rank of the earliest non-collateral evidence.
                      It is the primary issue; every other failing rank is a secondary one.

Classifying the root rank (the first row that matches wins)
-----------------------------------------------------------

    Class         Evidence on the root rank                                          Decision
    ------------  -----------------------------------------------------------------  --------
    GPU_ERROR     `CUDA error`, `cudaError`, `device-side assert`, `illegal memory   STOP
                  access`, a failed assertion in a `.cu` file, `Xid`
    SIGINT        srun's status `Interrupt`, or a traceback ending in                RESTART
                  `KeyboardInterrupt`
    SIGNAL_EXC    a traceback whose last frame is a `raise` that the frame before    RESTART
                  it does not call (entered between two lines: a signal handler),
                  or whose function is named like a handler
    WORKLOAD_EXC  a traceback whose last frame is a `raise` reached by ordinary      STOP
                  calls, or any traceback with a visible exception line
    ASYNC_EXC     a traceback ending on a line that is not a `raise` with no         STOP
                  exception line: raised where nothing raises (the injected
                  class's line is blinded away)
    SEGFAULT      srun's `Segmentation fault`, `SIGSEGV`, `Fatal Python error:       STOP
                  Segmentation fault`
    OS_ABORT      srun's `Aborted`, `core dumped`, `SIGABRT`, on a rank that is not   STOP
                  collateral (no watchdog timeout of its own)
    SIGTERM       srun's `Terminated`                                                RESTART
    SIGSTOP       srun's `Stopped`, `SIGSTOP`                                        RESTART
    SIGKILL       srun's `Killed` before the teardown, or after peers saw its        STOP
                  connection lost
    LOCK_GIL      a `GIL` message (PyTorch's `possible GIL induced hang`), or rank   RESTART
                  0 frozen as a whole (its coordinator thread does not answer)
    GPU_SLEEP     named missing while connected and silent, ended only by srun's     RESTART
                  teardown
    CRASH         any other abnormal end (`Exited with exit code N`, bus error, a    STOP
                  lost connection)
    HANG          peers time out but name no rank: the root is unknown              RESTART

Decisions follow the restart policy (docs/log-attribution-policy.md, the table the judge scores
against, which this package never imports): hangs and signals
restart; crashes, exceptions and GPU errors stop. A log these rules find no failing rank in (no
`srun --label` ranks, or none that failed by them) is read by `logscan` for its first failure in
causal order, in any format, with the classes real jobs add (CUDA_OOM, HOST_OOM, DEVICE_ASSERT,
NAN_LOSS, IO_ERROR, NCCL_ERROR, STORE_LOST, NODE_LOST); a CRASH whose rank's own lines say what
it was takes that class. Every class has a category and its decision
(docs/log-attribution-policy.md). No error at all → `ERRORS NOT FOUND`; an empty log → `NO
LOGS`.

Limits, stated rather than guessed around: a GPU sleep, a GIL lock and a SIGSTOP all leave a
non-zero rank silent but connected until srun kills it, so the log cannot tell them apart: such a
hang is reported as a GPU hang. On rank 0 a coordinator that stops answering tells a whole-process
freeze (reported as a GIL lock) from a GPU hang, but a SIGSTOP of rank 0 looks the same as a GIL
lock. The detail field says so when it applies. An asynchronous exception whose exception line
survives blinding reads as a workload exception.

Restart cycles: a log of several (ft_launcher's `Cycle: N Event:` lines, `logcycles`) is read
cycle by cycle, each with rules of its own; the job's answer is the last cycle's, STOP when a
restartable cause ends `REPEATS_TO_STOP` cycles in a row with no checkpoint saved. NVRx's
launcher lines (`launcherlog`) give each cycle the launcher's account: its restart or its
no-restart verdict (which stops the job), the nodes that left and why, and the rank of a worker
that torch reports by its local rank; they are never failures of the training themselves.

Cost: `attribute_blocks` reads a log as it streams, one pass, the rules' facts and logscan's scan
fed together; only lines that hold a keyword of either (`KEYWORDS`) are looked at, and every line
of a rank while its traceback is open. What is kept is per rank (at most `MAX_RANKS`), never per
line, so a log of any length is read in flat memory. srun's task ranges expand to at most
`MAX_TASKS` ids in the whole log (`_TaskIds`, shared by its cycles), and a list of ranks in a
sentence names `logscan.LISTED_RANKS` of them and counts the rest, so neither the work nor the
answer grows with cycles × tasks.

One module: the table of rules above, the facts they read and the streaming reader that gathers
those facts belong together (logscan, the any-format first-failure scan, is its own module).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any, Literal

from nvrx.analyze import launcherlog, logcycles, logscan
from nvrx.analyze.launcherlog import LauncherAccount, LauncherReader, Shape
from nvrx.analyze.logcycles import CycleSpan, CycleSplitter
from nvrx.analyze.logscan import (
    INNER_LABEL,
    Failure,
    Scan,
    feed_blocks,
    gate_words,
    ranks_text,
    text_blocks,
)
from nvrx.limits import MAX_RANKS, as_rank, small_int
from nvrx.logtext import MARKER_WORDS, RESTART, STOP, blind_line, rank_mentions

NO_LOGS = "NO LOGS"
ERRORS_NOT_FOUND = "ERRORS NOT FOUND"

FaultClass = Literal[
    "GPU_ERROR", "GPU_SLEEP", "WORKLOAD_EXC", "ASYNC_EXC", "SIGNAL_EXC", "OS_ABORT",
    "LOCK_GIL", "SEGFAULT", "SIGINT", "SIGKILL", "SIGTERM", "SIGSTOP", "CRASH", "HANG",
    # What real jobs print beyond the injected faults (logscan):
    "CUDA_OOM", "HOST_OOM", "DEVICE_ASSERT", "NAN_LOSS", "IO_ERROR", "NCCL_ERROR", "STORE_LOST",
    "NODE_LOST", "BUS_ERROR", "SHM_FULL", "LAUNCH_FAILED", "JOB_REJECTED",
    "SLURM_UNREACHABLE",
]  # fmt: skip

# The category of each class (docs/log-attribution-policy.md): what failed, which decides the
# restart decision.
Category = Literal["software", "resource", "hardware", "infrastructure", "hang", "none"]
CATEGORIES: dict[str, Category] = {
    "GPU_ERROR": "hardware",
    "SEGFAULT": "software",
    "OS_ABORT": "software",
    "WORKLOAD_EXC": "software",
    "ASYNC_EXC": "software",
    "CRASH": "software",
    "SIGKILL": "resource",
    "GPU_SLEEP": "hang",
    "LOCK_GIL": "hang",
    "SIGSTOP": "hang",
    "HANG": "hang",
    "SIGTERM": "infrastructure",
    "SIGINT": "infrastructure",
    "SIGNAL_EXC": "infrastructure",
    "CUDA_OOM": "resource",
    "HOST_OOM": "resource",
    "DEVICE_ASSERT": "software",
    "NAN_LOSS": "software",
    "IO_ERROR": "infrastructure",
    "NCCL_ERROR": "infrastructure",
    "STORE_LOST": "infrastructure",
    "NODE_LOST": "infrastructure",
    "BUS_ERROR": "software",
    "SHM_FULL": "resource",
    "LAUNCH_FAILED": "infrastructure",
    "JOB_REJECTED": "software",
    "SLURM_UNREACHABLE": "infrastructure",
}

# Decision and the reason given in the explanation field, per class
# (docs/log-attribution-policy.md).
DECISIONS: dict[str, tuple[str, str]] = {
    "GPU_SLEEP": (RESTART, "a GPU hang is transient and recoverable"),
    "LOCK_GIL": (RESTART, "a Python GIL hang is transient and recoverable"),
    "SIGTERM": (RESTART, "an external termination signal is recoverable"),
    "SIGINT": (RESTART, "an external interrupt signal is recoverable"),
    "SIGSTOP": (RESTART, "an external stop signal is recoverable"),
    "SIGNAL_EXC": (RESTART, "a signal-raised exception is typically recoverable"),
    "HANG": (RESTART, "a collective hang is typically transient"),
    "GPU_ERROR": (STOP, "a hardware GPU error may be persistent"),
    "SIGKILL": (STOP, "a hard kill suggests external pressure or OOM"),
    "SEGFAULT": (STOP, "a segmentation fault suggests code or memory corruption"),
    "OS_ABORT": (STOP, "an abort suggests a severe system or library fault"),
    "WORKLOAD_EXC": (STOP, "an uncaught application exception is likely a code bug"),
    "ASYNC_EXC": (STOP, "an asynchronous exception in the workload is likely a code bug"),
    "CRASH": (STOP, "a crash repeats on restart until its cause is fixed"),
    "CUDA_OOM": (STOP, "the same configuration runs out of GPU memory again"),
    "HOST_OOM": (STOP, "the same configuration runs out of host memory again"),
    "DEVICE_ASSERT": (STOP, "a device-side assert is a code or data bug that repeats"),
    "NAN_LOSS": (STOP, "a NaN or Inf loss repeats from the same checkpoint and data"),
    "IO_ERROR": (RESTART, "a filesystem error is outside the job; a new allocation recovers"),
    "NCCL_ERROR": (RESTART, "a network error is outside the job; a new allocation recovers"),
    "STORE_LOST": (RESTART, "the rendezvous host was lost; a new allocation recovers"),
    "NODE_LOST": (RESTART, "Slurm lost a node of the job; a new allocation recovers"),
    "BUS_ERROR": (STOP, "a bus error is a memory fault that repeats until its cause is fixed"),
    "SHM_FULL": (STOP, "the same configuration runs out of shared memory (/dev/shm) again"),
    "LAUNCH_FAILED": (RESTART, "a node could not start the job's tasks; a new allocation recovers"),
    "JOB_REJECTED": (STOP, "the job's request is wrong as given; the same request fails again"),
    "SLURM_UNREACHABLE": (RESTART, "Slurm did not answer; the same request succeeds once it does"),
}

# --- line grammar --------------------------------------------------------------------------------

# More digits is not a rank (nvrx.limits); `18:11:06.680 text` is a time, not rank 18.
_LABEL = re.compile(r"^ *(\d{1,9}):(?!\d\d[:.]) ?(.*)$")
_SYSTEM = re.compile(r"^(?:srun|slurmstepd)\b")
_TASK_EXIT = re.compile(
    r"^srun: error: (?P<node>[^:\s]+): tasks? (?P<tasks>[\d,\-]+): (?P<status>.+)$"
)
_TASK_RUNNING = re.compile(r"^srun: StepId=\S+ tasks? (?P<tasks>[\d,\-]+): running")
_TEARDOWN = re.compile(
    r"First task exited|_step_signal: Terminating|Job step aborted|STEP \S+ ON \S+ CANCELLED"
    r"|StepId=\S+ tasks? [\d,\-]+: running"
)
_TIMEOUT = re.compile(
    r"Watchdog caught collective operation timeout|Ranks missing from collective"
    r"|collective operation timeout"
)
_MISSING = re.compile(r"Ranks missing from collective[^:]*:\s*\[([\d,\s]*)\]")
_LOST = re.compile(r"connection to rank\(s\) \[([\d,\s]*)\] lost")
_COORD_FROZEN = re.compile(r"coordinator \(rank 0\) does not answer")
_COORD_GONE = re.compile(
    r"coordinator \(rank 0\) is unreachable"
    r"|(?:TCPStore|master|rendezvous)\b.*(?:connection (?:reset|refused|closed)|unreachable)",
    re.IGNORECASE | re.ASCII,
)
_CUDA = re.compile(
    r"CUDA error|cudaError|device-side assert|illegal memory access|CUBLAS_STATUS"
    r"|\.cu:\d+:.*Assertion .* failed|\bXid\b",
)
_GIL = re.compile(r"\bGIL\b|global interpreter lock", re.IGNORECASE | re.ASCII)
_SEGV_TEXT = re.compile(r"Fatal Python error: Segmentation fault|\bSIGSEGV\b")
_ABORT_TEXT = re.compile(r"\(core dumped\)|\bSIGABRT\b|Fatal Python error: Aborted")
_CHECKPOINT = re.compile(
    r"successfully saved checkpoint|saved checkpoint (?:from|at|to)|checkpoint saved",
    re.IGNORECASE | re.ASCII,
)
_TB_START = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+?)\s*$')
_CARET = re.compile(r"^\s*[\^~]+\s*$")
_EXC_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<msg>.*))?$")
_EXC_NAME = re.compile(r"(?:Error|Exception|Interrupt|Exit|Fault|Failure|Timeout)$")
_COLLATERAL_EXC = re.compile(
    r"DistBackendError|collective operation timeout|Watchdog|NCCL communicator was aborted"
)
_HANDLER_NAME = re.compile(r"signal|handler|_sig", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Evidence:
    """One log line that supports the attribution (1-based line number in the blinded log)."""

    line: int
    rank: int | None
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "rank": self.rank, "text": self.text}


@dataclass(frozen=True, slots=True)
class Issue:
    """One primary or secondary issue: the ranks it is about and its sentence."""

    ranks: tuple[int, ...]
    description: str

    def to_json(self) -> dict[str, Any]:
        return {"ranks": list(self.ranks), "description": self.description}


# The fifth field's label where people read it (`nvrx analyze log`).
CHECKPOINT_LABEL = "Checkpoint saved: "


@dataclass(frozen=True)
class LogAttribution:
    decision: str  # RESTART IMMEDIATE | STOP - DONT RESTART IMMEDIATE | ERRORS NOT FOUND | NO LOGS
    fault_class: FaultClass | None = None
    root_rank: int | None = None
    primary: tuple[Issue, ...] = ()
    secondary: tuple[Issue, ...] = ()
    collateral_ranks: tuple[int, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    explanation: str = ""
    detail: str = ""
    checkpoint_saved: bool = False
    rules: tuple[str, ...] = field(default=())
    # Each restart cycle of the log and its own attribution (one for a log of one cycle); the
    # fields above are the job's: the last cycle's, with the repeat rule (`_job`).
    cycles: tuple[CycleAttribution, ...] = ()
    # What NVRx's launcher said of the cycle (its verdict, who left), when the log holds its lines.
    launcher: LauncherAccount | None = None

    @property
    def category(self) -> Category:
        """What failed (docs/log-attribution-policy.md); `none` when nothing did."""
        return "none" if self.fault_class is None else CATEGORIES[self.fault_class]

    def text(self, *, labelled: bool = False) -> str:
        """logsage's 5 fields, newline-joined; a sentinel fills fields 1-4. A log of several
        cycles gives one block per cycle, each under a `Cycle N (lines A-B):` line, the last
        block being the job's answer (docs/log-attribution-policy.md, Restart cycles).
        `labelled`: the fifth field, bare `True` or `False` in logsage's format (and the files
        that keep it), says what it is, `Checkpoint saved: False`, for people to read."""
        if len(self.cycles) < 2:
            return self._fields(labelled)
        blocks = [f"{c.header()}\n{c.attribution._fields(labelled)}" for c in self.cycles[:-1]]
        return "\n".join([*blocks, f"{self.cycles[-1].header()}\n{self._fields(labelled)}"])

    def _fields(self, labelled: bool = False) -> str:
        saved = f"{CHECKPOINT_LABEL if labelled else ''}{self.checkpoint_saved}"
        if self.decision in (NO_LOGS, ERRORS_NOT_FOUND):
            # The launcher's account of a cycle nothing failed in (a node that left, its
            # restart) takes the explanation's place; the other fields keep the sentinel.
            tells = self.launcher is not None and self.launcher.tells and self.explanation
            said = [self.explanation] if tells else [self.decision]
            return "\n".join([self.decision, *said, self.decision, self.decision, saved])
        primary = "; ".join(i.description for i in self.primary)
        secondary = "; ".join(i.description for i in self.secondary)
        attribution = f"Attribution: Primary issues: [{primary}], Secondary issues: [{secondary}]"
        return "\n".join([self.decision, self.explanation, attribution, self.detail, saved])

    def to_json(self) -> dict[str, Any]:
        return {
            "analyzer": "nvrx-logattr",
            "decision": self.decision,
            "fault_class": self.fault_class,
            "category": self.category,
            "root_rank": self.root_rank,
            "primary": [i.to_json() for i in self.primary],
            "secondary": [i.to_json() for i in self.secondary],
            "collateral_ranks": list(self.collateral_ranks),
            "evidence": [e.to_json() for e in self.evidence],
            "explanation": self.explanation,
            "detail": self.detail,
            "checkpoint_saved": self.checkpoint_saved,
            "rules": list(self.rules),
            "cycles": [c.to_json() for c in self.cycles],
            "launcher": self.launcher.to_json() if self.launcher is not None else None,
        }


@dataclass(frozen=True)
class CycleAttribution:
    """One restart cycle of a log (its lines, `logcycles`) and what failed in it."""

    span: CycleSpan
    attribution: LogAttribution

    def header(self) -> str:
        where = self.span.where()
        return f"{where[0].upper()}{where[1:]}:"

    def to_json(self) -> dict[str, Any]:
        a = self.attribution
        return {
            "cycle": self.span.number,
            "first_line": self.span.first_line,
            "last_line": self.span.last_line,
            "decision": a.decision,
            "fault_class": a.fault_class,
            "category": a.category,
            "root_rank": a.root_rank,
            "explanation": a.explanation,
            "evidence_lines": [e.line for e in a.evidence],
            "checkpoint_saved": a.checkpoint_saved,
            "launcher": a.launcher.to_json() if a.launcher is not None else None,
        }


# --- parsing ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Line:
    no: int
    rank: int | None  # None: srun's / slurmstepd's own line, or an unlabelled line
    text: str
    system: bool
    nested: bool = False  # a worker's line in another task's line (`0: 3: text`): a launcher


@dataclass(frozen=True, slots=True)
class _Frame:
    file: str
    func: str
    source: str


@dataclass(frozen=True, slots=True)
class _Traceback:
    start: _Line
    frames: tuple[_Frame, ...]
    exc_type: str | None  # None: no exception line (blinded away, or the process died)
    exc_message: str
    lines: tuple[_Line, ...]  # its first line, the last frame and source, the exception line

    @property
    def collateral(self) -> bool:
        """A peer's exception about a collective it gave up on, not a fault of its own."""
        return _COLLATERAL_EXC.search(f"{self.exc_type or ''} {self.exc_message}") is not None


@dataclass(frozen=True, slots=True)
class _Exit:
    line: _Line
    status: str
    after_teardown: bool


@dataclass
class _RankTracebacks:
    """What the rules read of one rank's tracebacks (a log may hold thousands)."""

    own: _Traceback | None = None  # the first that is not collateral
    collateral: int = 0
    own_cuda: list[_Line] = field(default_factory=list)  # own exception lines naming CUDA (4)

    def add(self, tb: _Traceback) -> None:
        if tb.collateral:
            self.collateral += 1
            return
        self.own = self.own or tb
        if tb.exc_type and _CUDA.search(tb.exc_message) and len(self.own_cuda) < 4:
            self.own_cuda.append(tb.lines[-1])


@dataclass
class _Facts:
    """Everything the rules read, per rank and for the whole log: bounded by the ranks (at most
    MAX_RANKS), never by the lines."""

    ranks: set[int] = field(default_factory=set)  # ranks that printed a line looked at
    exits: dict[int, _Exit] = field(default_factory=dict)
    running_at_teardown: set[int] = field(default_factory=set)
    timed_out: dict[int, _Line] = field(default_factory=dict)  # collateral: first timeout line
    votes: Counter[int] = field(default_factory=Counter)
    vote_lines: dict[int, _Line] = field(default_factory=dict)
    lost: set[int] = field(default_factory=set)
    coordinator_frozen: bool = False
    tracebacks: dict[int, _RankTracebacks] = field(default_factory=dict)
    cuda: dict[int, _Line] = field(default_factory=dict)
    gil: dict[int, _Line] = field(default_factory=dict)
    segv: dict[int, _Line] = field(default_factory=dict)
    abort: dict[int, _Line] = field(default_factory=dict)
    checkpoint_saved: bool = False
    teardown: bool = False  # srun has started tearing the step down
    launchers: bool = False  # srun's tasks are launchers of labelled workers, not ranks


MAX_TASKS = MAX_RANKS


@dataclass
class _TaskIds:
    """How many task ids srun's range lists may still expand to: MAX_TASKS for the whole log,
    shared by all its cycles (one budget per cycle would let 1,000 cycles cost 1,000 times a
    131,072-task table, and their explanations list it 1,000 times)."""

    left: int = MAX_TASKS

    def expand(self, spec: str) -> list[int]:
        """The task ids of an srun range list (`0-3,7`), while the budget lasts: past it a
        range is not taken (its lines are still in the log, and logscan still reads them)."""
        out: list[int] = []
        for part in spec.split(","):
            low, _, high = part.partition("-")
            if not low.isdigit() or (high and not high.isdigit()):
                continue
            first, last = small_int(low), small_int(high or low)
            if first is not None and last is not None:
                count = last - first + 1
                if 0 < count <= self.left and last < MAX_TASKS:
                    self.left -= count
                    out.extend(range(first, last + 1))
        return out


def _int_list(spec: str) -> list[int]:
    """The ranks of a list in a log line (no job has MAX_RANKS or more)."""
    return [n for n in map(as_rank, re.findall(r"\d+", spec)) if n is not None]


def _line(no: int, raw: str) -> _Line:
    m = _LABEL.match(raw)
    rank, body = (as_rank(m.group(1)), m.group(2)) if m else (None, raw)
    nested = False
    if m and (inner := INNER_LABEL.match(body)) is not None:
        # `0: 1: text`, `0: [rank1]: text`: srun's task runs a launcher, whose workers label
        # their own lines; the inner label is the rank. (`2: [rank2]: text` is one process that
        # torch labels too: its task is its rank.)
        outer, rank = rank, as_rank(inner.group(1) or inner.group(2))
        body, nested = body[inner.end() :], rank != outer
    system = _SYSTEM.match(body) is not None
    return _Line(no, None if system else rank, body, system, nested)


class _TracebackReader:
    """One rank's traceback, read a line of that rank at a time: the header, then frames (each
    `File ...` line, its source line, caret lines), then the exception line, if any."""

    def __init__(self, start: _Line) -> None:
        self.start = start
        self.frames: list[_Frame] = []
        self.last: list[_Line] = []  # the last frame and its source line
        self.state = "frames"  # "source" after a frame line, "carets" after its source

    def feed(self, line: _Line) -> tuple[_Traceback, bool] | None:
        """None while the traceback goes on; else the traceback and whether `line` was its
        last line (if not, the line is read afresh: it may start the next traceback)."""
        text = line.text
        if self.state == "source":
            self.state = "carets"
            if text[:1] == " " and not _FRAME.match(text):
                self.frames[-1] = replace(self.frames[-1], source=text.strip())
                self.last.append(line)
                return None
        if self.state == "carets":
            if _CARET.match(text):
                return None
            self.state = "frames"
        if (m := _FRAME.match(text)) is not None:
            self.frames.append(_Frame(m.group("file"), m.group("func"), ""))
            self.last, self.state = [line], "source"
            return None
        if (m := _EXC_LINE.match(text.strip())) is not None:
            name = m.group("type")
            if _EXC_NAME.search(name) or "." in name or m.group("msg"):
                return self._done(name, m.group("msg") or "", line), True
        return self.close(), False

    def close(self) -> _Traceback:
        return _Traceback(self.start, tuple(self.frames), None, "", (self.start, *self.last))

    def _done(self, exc_type: str, message: str, line: _Line) -> _Traceback:
        lines = (self.start, *self.last, line)
        return _Traceback(self.start, tuple(self.frames), exc_type, message, lines)


# The lower-case words one of which every line that the rules read holds (with logscan's and
# the blinding markers: the gate of `feed_blocks`).
_KEYWORDS = (
    "srun", "slurmstepd", "checkpoint", "timeout", "ranks missing", "connection", "coordinator",
    "unreachable", "cuda", "device-side", "illegal memory", "cublas", "assertion", "xid", "gil",
    "global interpreter", "segmentation", "sigsegv", "core dumped", "sigabrt", "aborted",
    "traceback",
)  # fmt: skip
KEYWORDS = gate_words(
    _KEYWORDS, logscan.KEYWORDS, logcycles.KEYWORDS, launcherlog.KEYWORDS, MARKER_WORDS
)


class _Reader:
    """The facts and logscan's scan of a log, fed its lines (logscan.LineReader)."""

    def __init__(self, tasks: _TaskIds, shape: Shape) -> None:
        self.facts = _Facts()
        self.tasks = tasks  # the log's, shared by its cycles' readers
        self.scan = Scan()
        self.launcher = LauncherReader(shape)  # NVRx's launcher lines (shape: the log's)
        self.open: dict[int, _TracebackReader] = {}  # ranks inside a traceback
        self.text = False  # a line with text has been read

    @property
    def every_line(self) -> bool:
        return bool(self.open) or self.scan.watching

    def feed(self, no: int, raw: str) -> None:
        blinded = blind_line(raw)
        if blinded is None:  # ground truth: the line is not in the log the rules read
            return
        self.text = self.text or bool(blinded.strip())
        said = self.launcher.feed(no, blinded)
        if said is None or said[0] not in ("verdict", "leave"):
            # The launcher's verdicts and a node's departure on its health check are how the
            # launcher handled a cycle (its account), not a failure of the training.
            self.scan.feed(no, blinded, rank=said[1] if said is not None else None)
        line = _line(no, blinded)
        self._facts(line)
        if line.rank is None:
            return
        rank = line.rank
        reader = self.open.get(rank)
        if reader is not None:
            result = reader.feed(line)
            if result is None:
                return
            tb, consumed = result
            del self.open[rank]
            self.facts.tracebacks.setdefault(rank, _RankTracebacks()).add(tb)
            if consumed:
                return
        if line.text.strip() == _TB_START:
            self.open[rank] = _TracebackReader(line)

    def finish(self) -> tuple[_Facts, Scan]:
        for rank, reader in self.open.items():
            self.facts.tracebacks.setdefault(rank, _RankTracebacks()).add(reader.close())
        self.open.clear()
        if self.facts.launchers:  # srun's task ids are launchers': how they ended is no rank's
            self.facts.exits.clear()
            self.facts.running_at_teardown.clear()
        return self.facts, self.scan

    def _facts(self, line: _Line) -> None:
        facts, body = self.facts, line.text
        # Said only by a line the keyword gate lets through (a worker's error inside a task's
        # line): what the log's shape means must not depend on whether every line was read.
        if line.nested and not facts.launchers:
            lowered = body.lower()
            facts.launchers = any(word in lowered for word in KEYWORDS)
        if line.system:
            facts.teardown = facts.teardown or _TEARDOWN.search(body) is not None
            if m := _TASK_RUNNING.match(body):
                facts.running_at_teardown.update(self.tasks.expand(m.group("tasks")))
            if m := _TASK_EXIT.match(body):
                for task in self.tasks.expand(m.group("tasks")):
                    status = m.group("status").strip()
                    facts.exits.setdefault(task, _Exit(line, status, facts.teardown))
            return
        facts.checkpoint_saved = facts.checkpoint_saved or _CHECKPOINT.search(body) is not None
        if line.rank is None:
            return
        rank = line.rank
        facts.ranks.add(rank)
        if _TIMEOUT.search(body):
            facts.timed_out.setdefault(rank, line)
        missing = _MISSING.search(body)
        named = _int_list(missing.group(1)) if missing else []
        if _COORD_GONE.search(body) and rank != 0:
            facts.lost.add(0)  # its connection closed or refused: rank 0's process is gone
            if missing is None:
                named = [0]  # a peer lost the master: rank 0 went silent
        for r in named:
            facts.votes[r] += 1
            facts.vote_lines.setdefault(r, line)
        if m := _LOST.search(body):
            facts.lost.update(_int_list(m.group(1)))
        facts.coordinator_frozen = facts.coordinator_frozen or bool(_COORD_FROZEN.search(body))
        for pattern, table in (
            (_CUDA, facts.cuda),
            (_GIL, facts.gil),
            (_SEGV_TEXT, facts.segv),
            (_ABORT_TEXT, facts.abort),
        ):
            if pattern.search(body):
                table.setdefault(rank, line)


# --- the rules ----------------------------------------------------------------------------------


def _is_collateral(facts: _Facts, rank: int) -> bool:
    """A rank that waited for a peer (watchdog timeout) or died of a collateral exception."""
    if rank in facts.timed_out:
        return True
    tbs = facts.tracebacks.get(rank)
    return tbs is not None and tbs.own is None and tbs.collateral > 0


def _own_traceback(facts: _Facts, rank: int) -> _Traceback | None:
    """The rank's first traceback that is not collateral."""
    tbs = facts.tracebacks.get(rank)
    return tbs.own if tbs is not None else None


def _own_evidence(facts: _Facts, rank: int) -> list[_Line]:
    """The rank's own fault evidence, in log order: never a collateral rank's end (its watchdog
    abort, or srun killing it), which is a consequence of someone else's fault."""
    found = [t[rank] for t in (facts.cuda, facts.gil, facts.segv, facts.abort) if rank in t]
    if (tb := _own_traceback(facts, rank)) is not None:
        found.append(tb.start)
    exit_ = facts.exits.get(rank)
    if exit_ is not None and not _is_collateral(facts, rank):
        found.append(exit_.line)
    return sorted(found, key=lambda line: line.no)


def _root(facts: _Facts) -> tuple[int | None, str]:
    """The first failing rank, and the rule that chose it."""
    if facts.votes:
        evidenced = [(ev[0].no, r) for r in facts.votes if (ev := _own_evidence(facts, r))]
        if evidenced:
            return min(evidenced)[1], "root: named missing by its peers, earliest own evidence"
        top = max(facts.votes.values())
        return min(r for r, n in facts.votes.items() if n == top), (
            "root: the rank its peers name missing most often"
        )
    candidates = [
        (ev[0].no, r)
        for r in sorted(facts.ranks | set(facts.exits))
        if not _is_collateral(facts, r) and (ev := _own_evidence(facts, r))
    ]
    if candidates:
        return min(candidates)[1], "root: the earliest non-collateral evidence"
    return None, "root: none"


def _called(caller: _Frame, callee: _Frame) -> bool:
    """Whether the caller's line calls the callee (by name); unknown counts as called."""
    if callee.func.startswith("<") or not caller.source:
        return True  # <module>, <lambda>, comprehensions, no source: cannot tell
    return re.search(rf"\b{re.escape(callee.func)}\s*\(", caller.source) is not None


def _classify_traceback(tb: _Traceback) -> tuple[FaultClass, str]:
    last = tb.frames[-1] if tb.frames else None
    where = f" in {last.func} ({PurePosixPath(last.file).name})" if last else ""
    if tb.exc_type is not None and tb.exc_type.endswith("KeyboardInterrupt"):
        return "SIGINT", "the traceback ends in KeyboardInterrupt"
    if last is not None and last.source.startswith("raise"):
        caller = tb.frames[-2] if len(tb.frames) >= 2 else None
        if (caller is not None and not _called(caller, last)) or _HANDLER_NAME.search(last.func):
            return "SIGNAL_EXC", (
                f"raised{where}, a frame its caller's line `{caller.source if caller else ''}` "
                "does not call: a signal handler interrupted it"
            )
        return "WORKLOAD_EXC", f"raised{where} by the training code"
    if tb.exc_type is None and last is not None:
        return "ASYNC_EXC", (
            f"it surfaced{where} at `{last.source}`, a line that raises nothing, with no "
            "exception line: raised asynchronously into the main thread"
        )
    return "WORKLOAD_EXC", f"uncaught {tb.exc_type or 'exception'}{where}"


def _classify(facts: _Facts, root: int) -> tuple[FaultClass, str, list[_Line]]:
    """(class, why, evidence lines) for the root rank: the first matching row of the table."""
    exit_ = facts.exits.get(root)
    status = exit_.status if exit_ else ""
    said = f"srun reports task {root}: {status}"
    ends = [exit_.line] if exit_ else []
    tb = _own_traceback(facts, root)
    if root in facts.cuda:
        cuda = [facts.cuda[root], *facts.tracebacks[root].own_cuda] if tb else [facts.cuda[root]]
        return "GPU_ERROR", f"first seen at log line {cuda[0].no}", cuda + ends
    if status.startswith("Interrupt"):
        return "SIGINT", said, [*(tb.lines if tb else ()), *ends]
    if tb is not None:
        fault, why = _classify_traceback(tb)
        return fault, why, [*tb.lines, *ends]
    if "Segmentation fault" in status or root in facts.segv:
        own = [facts.segv[root]] if root in facts.segv else []
        return "SEGFAULT", said if status else "SIGSEGV", own + ends
    if status.startswith("Aborted") or root in facts.abort:
        why = (said if status else "SIGABRT") + ", without a watchdog timeout of its own"
        own = [facts.abort[root]] if root in facts.abort else []
        return "OS_ABORT", why, own + ends
    if status.startswith("Terminated"):
        return "SIGTERM", said, ends
    if status.startswith("Stopped") or "SIGSTOP" in status:
        return "SIGSTOP", said, ends
    hung = root not in facts.lost and (
        root in facts.running_at_teardown
        or (exit_ is not None and exit_.after_teardown)
        or (exit_ is None and root in facts.votes)
    )
    if status.startswith("Killed") and not hung:
        return "SIGKILL", f"{said}, while its peers still ran", ends
    if hung or (root == 0 and facts.coordinator_frozen):
        named = [facts.vote_lines[root]] if root in facts.vote_lines else []
        if root in facts.gil:
            return (
                "LOCK_GIL",
                f"a GIL message at log line {facts.gil[root].no}",
                [
                    facts.gil[root],
                    *ends,
                ],
            )
        if root == 0 and facts.coordinator_frozen:
            why = "its collective coordinator thread stopped answering too: the process froze"
            return "LOCK_GIL", why, named + ends
        why = (
            "its peers name it missing from the collective while it stays connected; it ends "
            "only when srun tears the step down"
        )
        return "GPU_SLEEP", why, named + ends
    if exit_ is not None:
        return "CRASH", said, ends
    return "CRASH", "its peers lost the connection to it: the process exited", []


# The primary issue's words per class: they name the fault (evidence.FAULT_WORDS' specific words).
_PRIMARY: dict[str, str] = {
    "GPU_ERROR": "CUDA error (GPU error on the rank's device), which crashed the rank",
    "GPU_SLEEP": "GPU hang: the rank stopped making progress, silent but still connected, while "
    "its peers timed out waiting for it",
    "LOCK_GIL": "Python hang holding the GIL (global interpreter lock)",
    "SIGSTOP": "process suspended by SIGSTOP (stopped by signal)",
    "SIGTERM": "terminated by SIGTERM (termination signal)",
    "SIGINT": "interrupted by SIGINT (KeyboardInterrupt)",
    "SIGKILL": "Killed (SIGKILL): the process died at once, without a traceback",
    "SEGFAULT": "Segmentation fault (SIGSEGV): the process crashed without a traceback",
    "OS_ABORT": "aborted (SIGABRT, os.abort) on its own, before any collective timeout",
    "WORKLOAD_EXC": "uncaught exception in the training loop (Traceback)",
    "ASYNC_EXC": "asynchronous exception raised into the main thread (Traceback)",
    "SIGNAL_EXC": "signal exception: an exception raised from a signal handler (Traceback)",
    "CRASH": "crashed",
    "CUDA_OOM": "CUDA out of memory (GPU memory exhausted)",
    "HOST_OOM": "out of host memory (killed by the OOM killer, or MemoryError)",
    "DEVICE_ASSERT": "CUDA device-side assert (an assertion in a GPU kernel: a code or data bug)",
    "NAN_LOSS": "NaN or Inf loss or gradients",
    "IO_ERROR": "filesystem I/O error",
    "NCCL_ERROR": "NCCL network error (a peer or link lost)",
    "STORE_LOST": "lost the rendezvous store (TCPStore) or its connection",
    "NODE_LOST": "node failure: Slurm lost the node (the ranks on it vanished)",
    "BUS_ERROR": "Bus error (SIGBUS, signal 7): the process touched memory that is not there",
    "SHM_FULL": "shared memory (/dev/shm) exhausted: a worker died of a bus error",
    "LAUNCH_FAILED": "task launch failed: a node could not start the job's processes",
    "JOB_REJECTED": "the job's request is wrong as given: Slurm refused it (resources, limits, "
    "account or partition) or the launcher was given a host name that cannot be one",
    "SLURM_UNREACHABLE": "Slurm did not answer: its controller was out of reach or its messages "
    "failed authentication (munge)",
}

# Text that would change how `evidence.Attribution.parse` reads the fields if quoted from the log.
_SENTINELS = re.compile(
    r"STOP - DONT RESTART IMMEDIATE|RESTART IMMEDIATE|ERRORS NOT FOUND|NO LOGS|LLM FAILURE"
    r"|Primary issues:|Secondary issues:"
)


def _defuse(text: str) -> str:
    return _SENTINELS.sub(lambda m: m.group(0).lower(), text)


def _clean(text: str) -> str:
    """Issue text: one line, `[...]` replaced (the judge balances brackets), no sentinels."""
    return _defuse(" ".join(text.replace("[", "(").replace("]", ")").split()))


def _primary(fault: FaultClass, root: int, why: str) -> Issue:
    words = _PRIMARY[fault]
    for text in (f"rank {root}: {words}; {why}", f"rank {root}: {words}"):
        text = _clean(text)
        if rank_mentions(text) == {root}:  # quoted code must not name another rank
            return Issue((root,), text)
    return Issue((root,), f"rank {root}: {fault}")  # pragma: no cover - words name no rank


def _secondary(facts: _Facts, root: int | None) -> tuple[list[Issue], list[int]]:
    collateral = sorted(r for r in facts.timed_out if r != root)
    issues = []
    if collateral:
        waited = f" waiting for rank {root}" if root is not None else ""
        issues.append(
            Issue(
                tuple(collateral),
                f"{ranks_text(collateral)}: collective timeout (watchdog){waited}, then a "
                "flight-recorder dump and a collateral abort",
            )
        )
    by_status: dict[str, list[int]] = {}
    for r, e in sorted(facts.exits.items()):
        if r != root and r not in facts.timed_out:
            by_status.setdefault(e.status, []).append(r)
    for status, ranks in by_status.items():
        issues.append(Issue(tuple(ranks), _clean(f"{ranks_text(ranks)}: task ended ({status})")))
    return issues, collateral


def _explained(cause: str, evidence: tuple[Evidence, ...], reason: str, aside: list[str]) -> str:
    """`CUDA_OOM on rank 3 at line 812: <reason>. Set aside as consequences: ...` (cited lines)."""
    at = f" at line {evidence[0].line}" if evidence else ""
    text = f"{cause}{at}: {reason}."
    if aside:
        text += f" Set aside as consequences: {'; '.join(aside)}."
    return _defuse(text)


def _set_aside(facts: _Facts, root: int, collateral: list[int]) -> list[str]:
    """The rules' consequences of the root's failure, with their lines."""
    out = []
    if collateral:
        lines = [facts.timed_out[r].no for r in collateral]
        out.append(
            f"{ranks_text(collateral)} timed out waiting for rank {root} "
            f"({logscan.lines_text(lines[:EARLY_LINES], len(lines))})"
        )
    ended = sorted((r, e) for r, e in facts.exits.items() if r != root and r not in facts.timed_out)
    if ended:
        ranks = [r for r, _ in ended]
        lines = [e.line.no for _, e in ended]
        out.append(
            f"{ranks_text(ranks)} ended after it, by srun's account "
            f"({logscan.lines_text(lines[:EARLY_LINES], len(set(lines)))})"
        )
    return out


EARLY_LINES = 4  # line numbers cited per consequence (with how many more)


def _evidence(lines: list[_Line]) -> tuple[Evidence, ...]:
    seen = {line.no: Evidence(line.no, line.rank, line.text.strip()) for line in lines}
    return tuple(seen[n] for n in sorted(seen))


def _detail(evidence: tuple[Evidence, ...], note: str = "") -> str:
    parts = [f"line {e.line}: {e.text}" for e in evidence]
    if note:
        parts.append(f"note: {note}")
    return _defuse(" | ".join(parts))


def attribute_log(text: str) -> LogAttribution:
    """Attribute one blinded `srun --label` main log (the rules: the module docstring)."""
    return attribute_blocks(text_blocks(text))


def attribute_blocks(blocks: Iterable[str], *, gate: bool = True) -> LogAttribution:
    """`attribute_log` of a log read in blocks of whole lines (`files.read_line_blocks`): a log
    of any size in flat memory. Lines are blinded as they are read (`logtext.blind_line`);
    line numbers are the input's. Each restart cycle (`logcycles`) is attributed on its own.
    `gate=False` reads every line, not only those that hold a keyword (the tests' check that
    the gate changes nothing)."""
    unfed = [True]  # a cycle that ends before the log does holds its marker line: never empty
    accounts: list[LauncherAccount] = []  # the cycles' accounts so far (the last one is read)

    def close(reader: _Reader, _: CycleSpan) -> LogAttribution:
        account = reader.launcher.account()
        previous = accounts[-1] if accounts else None
        accounts[:] = [account]
        return _with_launcher(_attribute(reader, unfed[0]), account, previous)

    tasks, shape = _TaskIds(), Shape()
    splitter: CycleSplitter[_Reader, LogAttribution] = CycleSplitter(
        lambda: _Reader(tasks, shape), close, shape.launcher
    )
    unfed[0], lines = feed_blocks(blocks, splitter, KEYWORDS, gate=gate)
    cycles = tuple(CycleAttribution(span, a) for span, a in splitter.finish(lines))
    unread = _unread_note(splitter)
    if len(cycles) == 1:
        one = cycles[0].attribution
        if unread:
            one = replace(one, detail=_joined(one.detail, unread))
        return replace(one, cycles=(CycleAttribution(cycles[0].span, one),))
    job = _job(cycles, splitter.capped)
    return replace(job, detail=_joined(job.detail, unread)) if unread else job


def _joined(detail: str, note: str) -> str:
    return f"{detail} | {note}" if detail and detail not in (ERRORS_NOT_FOUND, NO_LOGS) else note


def _unread_note(splitter: CycleSplitter[Any, Any]) -> str:
    """The `Cycle:` lines that said no cycle, named (never dropped silently)."""
    if not splitter.unread_count:
        return ""
    lines = logscan.lines_text(splitter.unread, splitter.unread_count)
    return (
        f"note: {splitter.unread_count} `Cycle:` line(s) began no cycle ({lines}): cut before "
        "their event's name, or a cycle number no job reaches"
    )


def _with_launcher(
    a: LogAttribution, account: LauncherAccount, previous: LauncherAccount | None
) -> LogAttribution:
    """A cycle's attribution with what NVRx's launcher said of it: its restart or its
    no-restart verdict, and the nodes that left. The launcher's no-restart verdict (EARLY
    TERMINATION: no progress in K cycles) stops the job whatever the cause: a restart would
    meet a job that does not advance (docs/log-attribution-policy.md, NVRx's launcher log)."""
    if not account.said:
        return a
    said = account.explain(previous)
    decision, rules = a.decision, (*a.rules, "launcher: NVRx's own account of the cycle")
    explanation = a.explanation
    if account.verdict == "stop" and decision in (RESTART, ERRORS_NOT_FOUND):
        decision = STOP
        rules = (*rules, "launcher: its no-restart verdict stops the job")
        explanation = f"Stop job: the launcher's no-restart verdict. {explanation}".strip()
    if a.fault_class is not None and account.app_logs:
        # The launcher's log holds no worker's output: where this cycle's is, for its traceback.
        said = f"{said} The workers' output of this cycle: {', '.join(account.app_logs)}.".strip()
    if said:
        explanation = f"{explanation} {said}".strip() if explanation else said
    return replace(
        a, decision=decision, explanation=_defuse(explanation), rules=rules, launcher=account
    )


def _attribute(reader: _Reader, unfed_text: bool) -> LogAttribution:
    """One cycle's attribution (the whole log's, for a log of one cycle)."""
    facts, scan = reader.finish()
    if not (reader.text or unfed_text):
        return LogAttribution(NO_LOGS, rules=("empty log",))
    root, root_rule = _root(facts)
    if root is None:
        failure = scan.root()
        if failure is not None and failure.fault != "HANG":
            return _first_failure(facts, failure, scan)
        if facts.timed_out:
            return _hang_without_root(facts)
        if failure is not None:
            return _first_failure(facts, failure, scan)
        return LogAttribution(
            ERRORS_NOT_FOUND, checkpoint_saved=facts.checkpoint_saved, rules=("no errors",)
        )
    fault, why, lines = _classify(facts, root)
    if fault == "SIGTERM" and scan.task_failed and (first := scan.root()) is not None:
        # srun's `Terminated` tasks are Slurm's teardown after a task failed (`CANCELLED ... DUE
        # TO TASK FAILURE`): the failure is the one the log states, else that task's exit.
        return _first_failure(facts, first, scan)
    # CRASH is the rules' catch-all: the root's own lines may say what it was. Else a failure
    # that the log states before the exit explains it: an exit code is a consequence, never a
    # cause of its own (srun's `task 0: Exited with exit code 1` after the OOM that caused it, or
    # for an agent whose report names the worker that failed).
    said = scan.strong.get(root) if fault == "CRASH" else None
    if fault == "CRASH" and said is None and (first := scan.root()) is not None:
        ended = lines[0].no if lines else None
        if first.fault in logscan.STRONG_FAULTS and (ended is None or first.line < ended):
            return _first_failure(facts, first, scan)
    # A traceback says only that something raised; its own exception line may name what
    # (`torch.OutOfMemoryError: CUDA out of memory`: a resource, not a code bug).
    tb = _own_traceback(facts, root)
    own = scan.strong.get(root) if fault == "WORKLOAD_EXC" and tb is not None else None
    if own is not None and tb is not None and tb.exc_type and own.line == tb.lines[-1].no:
        said = own
    if said is not None:
        fault = said.fault  # type: ignore[assignment]
        why = f"{why}; the log says: {said.text[:160]}"
    if root in facts.vote_lines:
        lines.append(facts.vote_lines[root])
    secondary, collateral = _secondary(facts, root)
    decision, reason = DECISIONS[fault]
    note = ""
    if fault == "GPU_SLEEP" and root != 0:
        note = (
            "a GPU sleep, a GIL lock and a SIGSTOP leave a non-zero rank equally silent; "
            "this log cannot tell them apart"
        )
    elif fault == "LOCK_GIL" and root not in facts.gil:
        note = "a SIGSTOP of rank 0 would look the same in this log"
    evidence = _evidence(lines)
    aside = _set_aside(facts, root, collateral) + scan.set_aside()
    return LogAttribution(
        decision=decision,
        fault_class=fault,
        root_rank=root,
        primary=(_primary(fault, root, why),),
        secondary=tuple(secondary),
        collateral_ranks=tuple(collateral),
        evidence=evidence,
        explanation=_explained(f"{fault} on rank {root}", evidence, reason, aside),
        detail=_detail(evidence, note),
        checkpoint_saved=facts.checkpoint_saved,
        rules=(root_rule, f"class: {fault}"),
    )


def _first_failure(facts: _Facts, root: Failure, scan: Scan) -> LogAttribution:
    """A log the rank rules above cannot read (no `srun --label` ranks, or no rank that they
    can tell failed): its first failure in causal order (logscan), on its rank if the log says
    which, else on an unknown rank."""
    fault: FaultClass = root.fault  # type: ignore[assignment]
    decision, reason = DECISIONS[fault]
    # A hang's own line is a waiting peer's, unless it names the rank waited for.
    ranked = root.rank is not None and (fault != "HANG" or root.named)
    who = f"rank {root.rank}" if ranked else "unknown rank"
    primary = Issue(
        (root.rank,) if ranked and root.rank is not None else (),
        _clean(f"{who}: {_PRIMARY.get(fault, 'collective timeout (watchdog hang)')}"),
    )
    others, also = scan.others(root)
    secondary = (
        (Issue(tuple(others), _clean(f"{ranks_text(others)}: failed after it")),) if others else ()
    )
    lines = [root, *also]
    evidence = tuple(Evidence(f.line, f.rank, _defuse(f.text)) for f in lines)
    # The other failures kept: those after the root, and weaker evidence before it (a store
    # lost, an exception a teardown signal followed) that the root outranks.
    later = [f.line for f in also if f.line > root.line]
    earlier = [f.line for f in also if f.line < root.line]
    aside = [f"what failed after it ({logscan.lines_text(later)})"] if later else []
    if earlier:
        aside.append(f"weaker evidence before it ({logscan.lines_text(earlier)})")
    return LogAttribution(
        decision=decision,
        fault_class=fault,
        root_rank=root.rank if ranked else None,
        primary=(primary,),
        secondary=secondary,
        evidence=evidence,
        explanation=_explained(
            f"{fault} on {who}", evidence[:1], reason, [*aside, *scan.set_aside()]
        ),
        detail=_detail(evidence),
        checkpoint_saved=facts.checkpoint_saved,
        rules=("root: the first failure in causal order (any log format)", f"class: {fault}"),
    )


def _hang_without_root(facts: _Facts) -> LogAttribution:
    """Peers time out but nothing names the rank they waited for."""
    ranks = sorted(facts.timed_out)
    primary = Issue(
        tuple(ranks),
        f"{ranks_text(ranks)}: collective timeout (watchdog hang); the log does not name the "
        "rank that stopped contributing",
    )
    decision, reason = DECISIONS["HANG"]
    evidence = _evidence([facts.timed_out[r] for r in ranks][:4])
    return LogAttribution(
        decision=decision,
        fault_class="HANG",
        primary=(primary,),
        evidence=evidence,
        explanation=f"HANG: {reason}.",
        detail=_detail(evidence),
        checkpoint_saved=facts.checkpoint_saved,
        rules=("root: none named", "class: HANG"),
    )


# --- restart cycles -----------------------------------------------------------------------------

# A cause that a restart should cure but that ends this many cycles in a row, none of which saved
# a checkpoint, is not transient: the job stops (docs/log-attribution-policy.md, Restart cycles).
REPEATS_TO_STOP = 3
_SHOWN_CYCLES = 5  # earlier cycles summed up in the job's detail line (the JSON lists all)


def _cause(a: LogAttribution) -> str:
    if a.fault_class is None:
        return a.decision
    who = "an unknown rank" if a.root_rank is None else f"rank {a.root_rank}"
    return f"{a.fault_class} on {who}"


def _repeated(cycles: tuple[CycleAttribution, ...]) -> tuple[CycleAttribution, ...]:
    """The last REPEATS_TO_STOP cycles when they all ended the same restartable way with no
    checkpoint saved in any of them; else ()."""
    tail = cycles[-REPEATS_TO_STOP:]
    last = tail[-1].attribution
    if len(tail) < REPEATS_TO_STOP or last.decision != RESTART or last.fault_class is None:
        return ()
    same = all(
        (c.attribution.fault_class, c.attribution.root_rank) == (last.fault_class, last.root_rank)
        for c in tail
    )
    return tail if same and not any(c.attribution.checkpoint_saved for c in tail) else ()


def _job(cycles: tuple[CycleAttribution, ...], capped: bool) -> LogAttribution:
    """The job's answer for a log of several cycles: the last cycle's (what a restart now would
    meet), STOP when a restartable cause repeats (`_repeated`), with the earlier cycles named."""
    last = cycles[-1]
    job = last.attribution
    where = last.span.where()
    said = job.explanation or ("no log lines" if job.decision == NO_LOGS else "no error found")
    explanation = f"In {where}, the last of {len(cycles)}: {said}"
    rules = [*job.rules, f"cycles: {len(cycles)}, the decision rests on the last"]
    decision = job.decision
    if repeats := _repeated(cycles):
        decision = STOP
        numbers = ", ".join(str(c.span.number) for c in repeats)
        explanation = (
            f"Stop job due to repeated issue: {_cause(job)} ended cycles {numbers} in a row with "
            f"no checkpoint saved in between. {explanation}"
        )
        rules.append(f"repeat: the same restartable cause {REPEATS_TO_STOP} cycles in a row")
    earlier = [f"{c.span.where()}: {_cause(c.attribution)}" for c in cycles[:-1]]
    if len(earlier) > _SHOWN_CYCLES:
        earlier = [f"{len(earlier) - _SHOWN_CYCLES} earlier cycles", *earlier[-_SHOWN_CYCLES:]]
    detail = " | ".join(p for p in (job.detail, "earlier: " + "; ".join(earlier)) if p)
    if capped:
        detail += (
            f" | note: past {logcycles.MAX_CYCLES} cycles the rest of the log is read as the last"
        )
    return replace(
        job,
        decision=decision,
        explanation=_defuse(explanation),
        detail=_defuse(detail),
        rules=tuple(rules),
        cycles=cycles,
    )
