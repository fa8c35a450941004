"""Pure readings of the judge's inputs: the restart table, the blinded log excerpt, the FR
missing-rank table and its scope, and the attribution text (docs/score.md;
docs/file-contracts.md). Shared by the rules judge, the LLM prompt and the answer normaliser.

One module because the judge's inputs are read one way for every judge: the rules judge,
the prompt and the normaliser must never disagree on what a table or an excerpt says.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Literal

from nvrx.campaign.pool import FaultType
from nvrx.limits import small_int
from nvrx.logtext import RESTART, STOP, blind, has_marker, numbers, rank_mentions
from nvrx.score.model import GroundTruth

# Expected restart decision per fault type, with the reason given to the judge.
RESTART_TABLE: dict[FaultType, tuple[str, str]] = {
    FaultType.GPU_SLEEP: (RESTART, "transient GPU hang, recoverable"),
    FaultType.LOCK_GIL: (RESTART, "transient Python GIL hang, recoverable"),
    FaultType.SIGTERM: (RESTART, "external termination signal, recoverable"),
    FaultType.SIGINT: (RESTART, "external interrupt signal, recoverable"),
    FaultType.SIGSTOP: (RESTART, "external stop signal, recoverable"),
    FaultType.SIGNAL_EXC: (RESTART, "signal-raised exception, typically recoverable"),
    FaultType.GPU_ERROR: (STOP, "hardware GPU error, may be persistent"),
    FaultType.SIGKILL: (STOP, "hard kill, possibly external pressure or OOM"),
    FaultType.SEGFAULT: (STOP, "segmentation fault, likely code or memory corruption"),
    FaultType.OS_ABORT: (STOP, "OS abort, likely severe system or hardware fault"),
    FaultType.WORKLOAD_EXC: (STOP, "application exception, likely a code bug"),
    FaultType.ASYNC_EXC: (STOP, "asynchronous exception in the workload, likely a code bug"),
}

# --- the log: blinding and the judge's excerpt --------------------------------------------------

EXCERPT_LINES = 400

# --- run validity ------------------------------------------------------------------------------

ValidityKind = Literal["valid", "not_reached", "infra_failed"]
_FIRED = re.compile(r"CRITICAL.*nvidia_resiliency_ext\.shared_utils\.inject_fault")
_ITERATION = re.compile(r"\biteration\s+\d+\s*/")


@dataclass(frozen=True, slots=True)
class Validity:
    kind: ValidityKind
    reason: str

    @property
    def run_valid(self) -> bool:
        return self.kind == "valid"


def run_validity(raw_log: str | None) -> Validity:
    """Whether a run reached its fault, from its unblinded main log.

    Upstream's rule (the marker is in the log) decides `valid`; the marker says the fault was
    scheduled, the injector's CRITICAL line that it fired. Without the marker, a log with
    training iterations never reached the injection point; one without any (or no log) failed
    before training: an infrastructure failure, not an attribution result.
    """
    if raw_log is None:
        return Validity("infra_failed", "no main workload log: the workload never started")
    if has_marker(raw_log):
        if _FIRED.search(raw_log):
            return Validity("valid", "the fault was scheduled and fired")
        return Validity("valid", "the fault was scheduled (its firing is not in the log)")
    if _ITERATION.search(raw_log):
        return Validity("not_reached", "training ran but never reached the injection point")
    return Validity("infra_failed", "no training iteration in the log: failed before training")


def judge_excerpt(text: str, lines: int = EXCERPT_LINES) -> str:
    """The last `lines` lines the judge sees: markers stripped, NVRx's own chatter dropped,
    workload lines kept only when they carry a `Cycle:`, as upstream's judge input."""
    kept = [
        line
        for line in blind(text).splitlines()  # blind() has dropped the marker lines
        if "nvidia_resiliency_ext" not in line and ("[workload:" not in line or "Cycle:" in line)
    ]
    return "\n".join(kept[-lines:])


# --- the FR table and its scope ------------------------------------------------------------------

FrScope = Literal["rank", "node", "segment", "false", "no_dumps"]
_INT = re.compile(r"\d+")


def _fr_rows(fr_output: str) -> Iterator[tuple[int, str]]:
    """(line number, Missing Ranks column) of every table row."""
    for n, line in enumerate(fr_output.splitlines(), start=1):
        if "|" not in line or "Missing Ranks" in line:
            continue
        parts = line.split("|")
        if len(parts) >= 6:
            yield n, parts[-1]


def fr_table_problem(fr_output: str) -> str | None:
    """Why an FR table cannot be read (`line N: ...`), or None: a missing rank too long to be
    a number is a damaged row, not a row without ranks."""
    for n, column in _fr_rows(fr_output):
        for digits in _INT.findall(column):
            if small_int(digits) is None:
                return f"line {n}: a missing rank of {len(digits)} digits"
    return None


def fr_ranks(fr_output: str) -> frozenset[int]:
    """Every rank in the `Missing Ranks` column: rows with ≥ 6 `|` parts, header skipped."""
    ranks: set[int] = set()
    for _, column in _fr_rows(fr_output):
        ranks.update(numbers(_INT.findall(column)))
    return frozenset(ranks)


def _within(ranks: frozenset[int], block: tuple[int, int]) -> bool:
    return all(block[0] <= r <= block[1] for r in ranks)


def fr_scope(ranks: frozenset[int], truth: GroundTruth) -> FrScope:
    """How narrowly the FR missing ranks isolate the injected rank, from the ranks alone.

    `rank` only when FR names exactly the injected rank (a set that also names bystanders did not
    isolate it); `node`/`segment` when every named rank lies in the injected rank's node or
    segment block; `false` otherwise; `no_dumps` when FR named no rank at all.
    """
    if not ranks:
        return "no_dumps"
    if ranks == {truth.rank}:
        return "rank"
    if _within(ranks, truth.node_block):
        return "node"
    if _within(ranks, truth.segment_block):
        return "segment"
    return "false"


def normalise_fr_label(label: str, fr_output: str, truth: GroundTruth) -> FrScope:
    """The FR dimension, decided by the FR table alone (upstream's rule, made symmetric).

    Upstream corrects `node` and `segment` against the table but lets `rank` and `false` through
    unchecked. Here every label is replaced by `fr_scope` of the table's missing ranks, so the
    dimension means the same whichever judge answered; the judge's own label is kept beside it
    (`fr_label_answered`) so a disagreement stays visible.
    """
    del label  # recorded by the caller; the table decides
    return fr_scope(fr_ranks(fr_output), truth)


# --- the attribution text (logsage's 5-field format, or its repr quirk) ------------------------

Decision = Literal["STOP", "RESTART", "CONTINUE", "NO LOGS", "LLM FAILURE", "UNKNOWN"]


def _bracketed(text: str, label: str) -> str | None:
    """The `[...]` after `label`, brackets balanced (issues may contain brackets themselves)."""
    start = text.find(label)
    if start < 0:
        return None
    i = text.find("[", start + len(label))
    if i < 0:
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "[":
            depth += 1
        elif text[j] == "]":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return text[i + 1 :]  # cut short: keep what is there


# A log of several restart cycles is answered one block per cycle: under a `Cycle N (lines
# A-B):` line each (nvrx's analyser), or one `RawAnalysisResultItem(` each (logsage's repr).
_CYCLE_HEADER = re.compile(r"^Cycle \d{1,9} \(lines \d{1,12}-\d{1,12}\):[ \t]*$", re.MULTILINE)
_LOGSAGE_ITEM = "RawAnalysisResultItem("


def _cycle_blocks(text: str) -> list[str]:
    """Each cycle's part of an answer, in order; the whole text when it has one cycle."""
    headers = list(_CYCLE_HEADER.finditer(text))
    if len(headers) < 2:
        parts = text.split(_LOGSAGE_ITEM)[1:]
        return parts if len(parts) > 1 else [text]
    ends = [m.start() for m in headers[1:]] + [len(text)]
    return [text[m.end() : end] for m, end in zip(headers, ends, strict=True)]


@dataclass(frozen=True)
class Attribution:
    """What a log analyser said, parsed by substring (never by line position). An answer of
    several cycles is the last cycle's (the job's decision), each cycle's in `cycles`."""

    text: str
    decision: Decision
    primary: str | None = None
    secondary: str | None = None
    primary_ranks: frozenset[int] = field(default_factory=frozenset)
    secondary_ranks: frozenset[int] = field(default_factory=frozenset)
    ranks: frozenset[int] = field(default_factory=frozenset)
    cycles: tuple[Attribution, ...] = ()  # each cycle's answer, when there are several

    @classmethod
    def parse(cls, raw: str) -> Attribution:
        text = raw
        if "raw_text=" in text and "\\n" in text:  # logsage's --emit-stdout prints a repr
            text = text.replace("\\n", "\n").replace("\\'", "'")
        blocks = _cycle_blocks(text)
        if len(blocks) == 1:
            return cls._one(text)
        cycles = tuple(cls._one(block) for block in blocks)
        return replace(cycles[-1], text=text, ranks=rank_mentions(text), cycles=cycles)

    def judged(self) -> Attribution:
        """The answer a fault-injection run is judged on: the first cycle that failed (the
        workload is sound until the injected fault, so its cycle is the first to fail), else
        the last cycle; the answer itself when it has one cycle."""
        for cycle in self.cycles:
            if cycle.decision in ("STOP", "RESTART"):
                return cycle
        return self.cycles[-1] if self.cycles else self

    @classmethod
    def _one(cls, text: str) -> Attribution:
        if STOP in text:
            decision: Decision = "STOP"
        elif RESTART in text:
            decision = "RESTART"
        elif "ERRORS NOT FOUND" in text:
            decision = "CONTINUE"
        elif "NO LOGS" in text:
            decision = "NO LOGS"
        elif "LLM FAILURE" in text:
            decision = "LLM FAILURE"
        else:
            decision = "UNKNOWN"
        primary = _bracketed(text, "Primary issues:")
        secondary = _bracketed(text, "Secondary issues:")
        return cls(
            text=text,
            decision=decision,
            primary=primary,
            secondary=secondary,
            primary_ranks=rank_mentions(primary or ""),
            secondary_ranks=rank_mentions(secondary or ""),
            ranks=rank_mentions(text),
        )


# --- fault classes: what "describing the fault" means -------------------------------------------

_HANG = (
    "hang", "hangs", "hung", "stuck", "stall", "stalled", "timeout", "timed out", "watchdog",
    "unresponsive", "deadlock", "not responding", "no progress",
)  # fmt: skip
_CRASH = (
    "crash", "crashed", "died", "core dumped", "fatal", "exited", "exit code", "abnormal",
    "terminated unexpectedly",
)  # fmt: skip
_SIGNAL = ("signal", "killed", "terminated", "interrupt")
_EXCEPTION = ("exception", "traceback", "raised", "error")

# Per fault: the words that name it (→ `true`), and its class's words (→ `partial`).
FAULT_WORDS: dict[FaultType, tuple[tuple[str, ...], tuple[str, ...]]] = {
    FaultType.GPU_SLEEP: (
        ("gpu hang", "gpu sleep", "gpu stall", "gpu stuck", "gpu unresponsive", "kernel hang",
         "cuda kernel", "sleep"),
        _HANG,
    ),
    FaultType.LOCK_GIL: (
        ("gil", "global interpreter lock", "interpreter lock", "python hang", "python thread"),
        _HANG,
    ),
    # Not the bare word "stopped": "rank 2 stopped contributing" is every hang's symptom.
    FaultType.SIGSTOP: (
        ("sigstop", "signal 19", "suspended", "stopped by signal"),
        _HANG + _SIGNAL,
    ),
    FaultType.SIGTERM: (("sigterm", "signal 15", "termination signal"), _SIGNAL + _CRASH),
    FaultType.SIGINT: (
        ("sigint", "signal 2", "keyboardinterrupt", "keyboard interrupt"),
        _SIGNAL + _CRASH,
    ),
    FaultType.SIGKILL: (
        ("sigkill", "signal 9", "kill -9", "killed", "oom", "out of memory", "oom-kill"),
        _SIGNAL + _CRASH,
    ),
    FaultType.SEGFAULT: (
        ("segmentation fault", "segfault", "sigsegv", "signal 11", "invalid memory"),
        _CRASH + _SIGNAL,
    ),
    FaultType.OS_ABORT: (
        ("abort", "aborted", "sigabrt", "signal 6", "os.abort"),
        _CRASH + _SIGNAL,
    ),
    FaultType.GPU_ERROR: (
        ("cuda error", "cudaerror", "gpu error", "xid", "illegal memory access", "ecc",
         "device-side", "nvml", "uncorrectable", "cuda failure", "gpu failure",
         # The log-attribution policy's words for the category (docs/log-attribution-policy.md).
         "gpu hardware", "hardware failure", "hardware error", "fallen off the bus"),
        _CRASH + _EXCEPTION,
    ),
    FaultType.WORKLOAD_EXC: (
        ("workload exception", "python exception", "uncaught exception", "unhandled exception",
         "runtimeerror", "exception raised", "raised an exception", "traceback"),
        _EXCEPTION + _CRASH,
    ),
    FaultType.ASYNC_EXC: (
        ("asynchronous exception", "async exception", "exception in thread",
         "background thread", "asyncexc", "async_exc"),
        _EXCEPTION + _CRASH,
    ),
    FaultType.SIGNAL_EXC: (
        ("signal exception", "signal-raised", "exception raised by signal",
         "exception from a signal", "signal handler", "signalexception"),
        _EXCEPTION + _SIGNAL,
    ),
}  # fmt: skip


def _words_in(words: tuple[str, ...], text: str) -> list[str]:
    low = text.lower()
    return [w for w in words if re.search(rf"(?<![a-z0-9]){re.escape(w)}(?![a-z0-9])", low)]


def fault_description(
    fault: FaultType, text: str
) -> tuple[Literal["true", "partial", "false"], list[str]]:
    """Whether `text` names the fault (`true`), only its class (`partial`), or neither; with the
    words that decided it."""
    specific, generic = FAULT_WORDS[fault]
    hits = _words_in(specific, text)
    if hits:
        return "true", hits
    hits = _words_in(generic, text)
    if hits:
        return "partial", hits
    return "false", []


# logsage's answers that say the analyser itself failed: there is no
# attribution to judge, so the case is unscored rather than scored as a wrong answer.
_ANALYSER_FAILURES: dict[str, str] = {
    "LLM FAILURE": "the log analyser's model failed",
    "NO LOGS": "the log analyser saw no log",
}


def analyser_failure(attribution: str) -> str | None:
    """Why an attribution text is not an answer to judge, or None when it is one."""
    decision = Attribution.parse(attribution).decision
    reason = _ANALYSER_FAILURES.get(decision)
    return f"{reason} (its answer is {decision})" if reason else None
