"""The first failure in a log of any format: what real training jobs print, beyond the
`srun --label` logs of the fault-injection runs that `logattr`'s rules read.

One pass over the lines. Each line's rank comes from its prefix (srun's `N: `, torch's
`[rankN]:`, anywhere in the first part of the line, behind timestamps and logger fields), else
from the message (`[Rank N]`, `rank: N (local_rank: ...)`), else it is unknown: a line without a
rank label is evidence all the same, never dropped. Its failure comes from the first pattern of
`PATTERNS` that it matches, most specific first (`CUDA error: out of memory` is an OOM, not a
GPU error; a device-side assert is a code bug, not hardware).

The root is the earliest failure in causal order: a strong one (an OOM, a GPU or CUDA error, a
crash, a kill, a signal, a lost node, an I/O or network error) before anything else; else the
earliest exception; only then a lost store or rendezvous (a symptom of a peer's death, unless
nothing else failed); and a collective timeout only when nothing failed at all: the peers that
time out are the ones left waiting, so the rank that stopped is unknown. Symptoms (torch's
`DistBackendError` and `ChildFailedError`, `terminate called`, `Exception ignored in`) are
never the root.

Cost: linear in the log, memory flat in its length. `feed_blocks` looks only at the lines that
hold one of the readers' lower-case `KEYWORDS` (a few `str.find` scans of each block, in C), plus
every line while a reader asks for them all (`logattr` inside a traceback); the patterns run on
a line's first `MAX_LINE` characters. `Scan` keeps what the root needs (the first failure of each
class, the first few failures, each rank's first strong one), so its memory grows with the
number of ranks (at most `MAX_RANKS`), never with the number of lines.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Protocol

from ahocorasick_rs import AhoCorasick, Implementation

from nvrx.limits import as_rank

# A failure is said in its first characters; a 100 MB line must not cost 100 MB of matching.
MAX_LINE = 4096

# (fault class, pattern), most specific first; the first that matches a line names its failure.
# The names are logattr's FaultClass values.
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (fault, re.compile(pattern, re.IGNORECASE | re.ASCII))
    for fault, pattern in (
        (
            "CUDA_OOM",
            r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory"
            r"|CUBLAS_STATUS_ALLOC_FAILED|Cuda failure (?:\d+ )?'out of memory'",
        ),
        ("DEVICE_ASSERT", r"device-side assert|\.cu:\d+: .*Assertion .* failed"),
        # A launch mistake NCCL reports: a code or configuration bug, not the network.
        ("WORKLOAD_EXC", r"ncclInvalidUsage|Duplicate GPU detected"),
        (
            "GPU_ERROR",
            r"\bXid\b|\bECC error|fallen off the bus|illegal memory access"
            r"|unspecified launch failure|illegal instruction|CUDA error|cudaError",
        ),
        (
            "HOST_OOM",
            r"oom[-_]kill|\bOut Of Memory\b|Out of memory: Killed process|\bMemoryError\b"
            r"|killed by signal: Killed|Cannot allocate memory"
            r"|memory allocation of \d+ bytes failed",
        ),
        ("NAN_LOSS", r"found NaN|loss is nan|\bNaN or Inf\b|\bnan loss\b|NaN detected"),
        # A fatal signal as UCX and the CUDA runtime report it (`[host:pid :0:tid] Caught signal
        # 7 (Bus error: nonexistent physical address)`), as Python's faulthandler and torch
        # elastic do: the process touched memory that is not there.
        (
            "BUS_ERROR",
            r"Caught signal 7 \(Bus error|Fatal Python error: Bus error|\bSIGBUS\b|Signal 7\b"
            r"|exitcode\s*:\s*-7\b|return code = -7\b|\btasks? [\d,\-]+: Bus error",
        ),
        (
            "SEGFAULT",
            r"Segmentation fault|Segfault encountered|\bSIGSEGV\b|Signal 11\b"
            r"|exitcode\s*:\s*-11\b|return code = -11\b",
        ),
        (
            "SIGKILL",
            r"Signal 9 \(SIGKILL\)|exitcode\s*:\s*-9\b|return code = -9\b|: Killed$"
            r"|^\s*Killed\s*$|\bSIGKILL\b",
        ),
        # Slurm lost a node of the job: its ranks vanish without a word of their own.
        ("NODE_LOST", r"\bNode failure on\b|DUE TO NODE FAILURE|\bNODE_FAIL\b"),
        (
            "SIGTERM",
            r"\bSIGTERM\b|Received 15 death signal|exitcode\s*:\s*-15\b"
            r"|CANCELLED AT \S+ DUE TO (?:TIME LIMIT|PREEMPTION)"
            r"|\*\*\* (?:STEP|JOB) \S+ ON \S+ CANCELLED AT",
        ),
        (
            "IO_ERROR",
            r"Input/output error|Stale file handle|Disk quota exceeded|No space left on device"
            r"|file write failed|failed writing file",
        ),
        (
            "NCCL_ERROR",
            r"remote process exited or there was a network error|NCCL WARN NET/"
            # NCCL's socket layer and bootstrap giving up on a peer: `NCCL WARN socketStartConnect:
            # Connect to 10.0.0.2<38007> failed : Connection refused`, `... Connection closed by
            # remote peer`, `bootstrap ... failed`.
            r"|NCCL WARN (?:[^\n]*\bConnect(?:ion)? to \S+ failed|[^\n]*\bsocket\w*:"
            r"|[^\n]*\bbootstrap\w*\b[^\n]*(?:failed|error)"
            r"|[^\n]*Connection (?:refused|reset|closed|timed out)|[^\n]*connection abort)"
            r"|\bIBV_WC_|ibv_\w+ failed|NCCL error.*(?:unhandled system error|remote error)",
        ),
        ("OS_ABORT", r"\(core dumped\)|\bSIGABRT\b|Fatal Python error: Aborted"),
        (
            "STORE_LOST",
            r"Connection reset by peer|recvValue failed|RendezvousConnectionError"
            r"|TCPStore\b.*(?:failed|timed out|timeout)|Broken pipe|keepalive",
        ),
        ("HANG", r"collective operation timeout"),  # torch's watchdog: `Watchdog caught ...`
    )
)
# An exception line: a class name ending in Error or Exception, then `:` or the end.
_EXCEPTION = re.compile(r"(?:^|[\s\]:>|])((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception))(?::|$)")
# Consequences of another failure: never the root cause.
_SYMPTOM = re.compile(
    r"DistBackendError|ChildFailedError|terminate called|Exception ignored in"
    r"|DistNetworkError|NCCL communicator was aborted|SignalException",
)
# The weakest evidence first: a lost store and a timeout are what peers of a dead rank see.
_WEAK = ("STORE_LOST", "HANG")
# What names a failure for what it is (an exception line says only that something raised).
STRONG_FAULTS = frozenset(f for f, _ in PATTERNS) - {*_WEAK, "WORKLOAD_EXC"}

# Stricter than logattr's label (a space after the colon): in a log of any format, `12:00:05`
# at the start of a line is a time, not rank 12.
_SRUN_LABEL = re.compile(r"^ *(\d{1,9}): ")
_RANK_PREFIX = re.compile(r"\[rank(\d{1,9})\]:")
# A worker's own label inside an srun task's line (`0: 3: text`, `0: [rank3]: text`).
INNER_LABEL = re.compile(r" *(?:(\d{1,9}): |\[rank(\d{1,9})\]: ?)")
# A rank named in the message (the leftmost of these forms): `[PG ... Rank N]`, `Rank N:`,
# `(RANK N)`, srun's `task N:`, and the bare `rank N` of a failure message ("rank 3 and rank 2
# both on CUDA device 0").
_RANK_IN_TEXT = re.compile(
    r"\[(?:PG [^\]]*)?Rank (\d{1,9})\]|\bRank (\d{1,9}):|\(RANK (\d{1,9})\)"
    r"|srun: error: \S+: task (\d{1,9}):|\brank (\d{1,9})\b",
    re.IGNORECASE | re.ASCII,
)
# Where a rank is said for the lines that follow: a traceback header `(RANK 3)`, torch
# elastic's failure summary `rank      : 3 (local_rank: 3)`.
_CONTEXT_RANK = re.compile(
    r"Traceback \(most recent call last\):.*\bRANK (\d{1,9})|\brank\s*:\s*(\d{1,9}) \(local_rank",
    re.IGNORECASE | re.ASCII,
)


@dataclass(frozen=True, slots=True)
class Failure:
    """One line's failure: its class, rank (None: unknown) and where it is."""

    fault: str
    rank: int | None
    line: int  # 1-based
    text: str


def line_rank(line: str) -> int | None:
    """The rank a line belongs to, from its prefix or its message; None when it does not say
    (or says a number no job has as a rank)."""
    head = line[:200]
    if (m := _SRUN_LABEL.search(head)) is not None:
        # `0: 3: text`, `0: [rank3]: text`: the srun task is a launcher; its worker says the rank.
        inner = INNER_LABEL.match(head, m.end())
        return as_rank(inner.group(1) or inner.group(2) if inner else m.group(1))
    if (m := _RANK_PREFIX.search(head)) is not None:
        return as_rank(m.group(1))
    if (m := _RANK_IN_TEXT.search(line[:MAX_LINE])) is not None:
        return as_rank(next(g for g in m.groups() if g is not None))
    return None


# The launcher's own fan-out once a rank failed: torch elastic's agent stops the surviving
# workers (`Sending process 59460 closing signal SIGTERM`). A consequence, never a failure: the
# rank that failed is named elsewhere (`failed (exitcode: -9) local_rank: 3`), and an outside
# SIGTERM says so in its own words (`Received 15 death signal`).
_FAN_OUT = re.compile(r"Sending process \d+ closing signal SIG[A-Z]+")


def _failure(no: int, line: str) -> Failure | None:
    text = line[:MAX_LINE]
    if _FAN_OUT.search(text):
        return None
    for fault, pattern in PATTERNS:
        if pattern.search(text):
            return Failure(fault, line_rank(line), no, text.strip())
    if _EXCEPTION.search(text) and not _SYMPTOM.search(text):
        return Failure("WORKLOAD_EXC", line_rank(line), no, text.strip())
    return None


# Failures kept in log order beyond the first of each class: evidence for the report.
EARLY = 4


@dataclass
class Scan:
    """The failures of a log, fed a line at a time: what `root` needs, in memory that grows with
    the ranks, not the lines. A failure line without a rank of its own takes the rank its
    context said (a traceback header's, an elastic summary's), if any."""

    context: int | None = None
    first: dict[str, Failure] = field(default_factory=dict)  # per class
    first_ranked: dict[str, Failure] = field(default_factory=dict)  # per class, with a rank
    early: list[Failure] = field(default_factory=list)  # the first EARLY failures
    ranks: set[int] = field(default_factory=set)  # every rank that failed
    strong: dict[int, Failure] = field(default_factory=dict)  # each rank's first strong failure

    def feed(self, no: int, line: str) -> None:
        if (m := _CONTEXT_RANK.search(line[:MAX_LINE])) is not None:
            self.context = as_rank(m.group(1) or m.group(2))
        f = _failure(no, line)
        if f is None:
            return
        if f.rank is None and self.context is not None:
            f = replace(f, rank=self.context)
        self.first.setdefault(f.fault, f)
        if len(self.early) < EARLY:
            self.early.append(f)
        if f.rank is not None:
            self.first_ranked.setdefault(f.fault, f)
            self.ranks.add(f.rank)
            if f.fault in STRONG_FAULTS:
                self.strong.setdefault(f.rank, f)

    def root(self) -> Failure | None:
        """The root failure (None: nothing failed). A root without a rank takes the rank of a
        later report of the same failure that says it (the watchdog's `[Rank 1] ... ECC error`
        after the traceback's own line)."""
        for tier in (STRONG_FAULTS, {"WORKLOAD_EXC"}, *({weak} for weak in _WEAK)):
            found = [self.first[fault] for fault in tier if fault in self.first]
            if found:
                root = min(found, key=lambda f: f.line)
                if root.rank is None and (later := self.first_ranked.get(root.fault)):
                    root = replace(root, rank=later.rank)
                return root
        return None

    def others(self, root: Failure) -> tuple[list[int], list[Failure]]:
        """The ranks that failed besides the root's, and the first failures after it."""
        ranks = sorted(self.ranks - {root.rank} if root.rank is not None else self.ranks)
        return ranks, [f for f in self.early if f.line != root.line][: EARLY - 1]


# --- reading only the lines that can matter -----------------------------------------------------

# Lower-case words one of which every line that a pattern above can match holds (a line without
# any cannot fail by these patterns, so it is not looked at). `tests/test_logscan.py` checks the
# gate against the patterns on the corpus and on generated lines.
KEYWORDS = (
    "memory", "cublas", "device-side", "assert", "ncclinvalid", "duplicate gpu", "xid", "error",
    "fallen off", "illegal", "launch failure", "cuda", "oom", "kill", "found nan", "loss is nan",
    "nan or inf", "nan loss", "nan detected", "fault", "sig", "exitcode", "return code",
    "cancelled", "stale file", "quota", "no space", "write failed", "failed writing",
    "remote process", "nccl warn", "ibv_", "core dumped", "abort", "connection", "recvvalue",
    "tcpstore", "broken pipe", "keepalive", "timeout", "exception", "traceback", "local_rank",
    "node fail", "node_fail",
)  # fmt: skip


class LineReader(Protocol):
    """What `feed_blocks` feeds."""

    def feed(self, no: int, line: str) -> None: ...

    @property
    def every_line(self) -> bool:
        """Whether the reader needs every line now, keywords or not."""
        ...


def text_blocks(text: str, size: int = 1 << 20) -> Iterator[str]:
    """`text` in blocks of whole lines of about `size` characters."""
    start = 0
    while start < len(text):
        end = text.find("\n", min(start + size, len(text)) - 1)
        end = len(text) if end < 0 else end + 1
        yield text[start:end]
        start = end


def gate_words(*keywords: Iterable[str]) -> tuple[str, ...]:
    """The words of a gate: every keyword of each reader, less those that hold a shorter one
    (a line holding `sigkill` holds `sig`), so that each block is searched fewer times."""
    words = sorted(set().union(*map(set, keywords)), key=len)
    kept: list[str] = []
    for word in words:
        if not any(k in word for k in kept):
            kept.append(word)
    return tuple(kept)


def feed_blocks(
    blocks: Iterable[str], reader: LineReader, keywords: Iterable[str], *, gate: bool = True
) -> tuple[bool, int]:
    """Feed `reader` each line of `blocks` (whole lines; `read_line_blocks`, `text_blocks`) that
    holds one of the lower-case `keywords`, or every line while `reader.every_line`; with
    `gate=False`, every line. Lines are numbered from 1 by newline; a line's `\\r`-separated
    parts (progress bars) are fed as lines of that number. Each line is cut at MAX_LINE.

    Returns whether a line that was not fed holds text (not only white space), and the number
    of lines read."""
    words = tuple(keywords)
    before = 0  # lines before `pos`
    unfed_text = False
    for block in blocks:
        starts = _keyword_lines(block, words) if gate else None
        pos, end_of_block, i = 0, len(block), 0
        while pos < end_of_block:
            if starts is not None and not reader.every_line:
                while i < len(starts) and starts[i] < pos:
                    i += 1
                nxt = starts[i] if i < len(starts) else end_of_block
                if nxt > pos:
                    unfed_text = unfed_text or not block[pos:nxt].isspace()
                    before += block.count("\n", pos, nxt)
                    if nxt == end_of_block and block[-1] != "\n":
                        before += 1  # the log's last line, without its newline
                    pos = nxt
                    if pos >= end_of_block:
                        break
            end = block.find("\n", pos)
            if end < 0:
                end = end_of_block
            before += 1
            for part in block[pos : min(end, pos + MAX_LINE)].splitlines() or [""]:
                reader.feed(before, part)
            pos = end + 1
    return unfed_text, before


@functools.lru_cache(maxsize=8)
def _searcher(words: tuple[str, ...]) -> AhoCorasick:
    # A DFA: the fastest of the crate's automata to search with, and small for a few dozen words.
    return AhoCorasick(list(words), implementation=Implementation.DFA)


def _keyword_lines(block: str, words: tuple[str, ...]) -> list[int] | None:
    """The start offsets of the lines of `block` that hold one of `words`, in order; None when
    lower-casing changes the block's length (a few non-ASCII letters do), so that offsets into
    the lower-cased text are not offsets into the block: then every line is read. One search
    for all the words at once (Aho-Corasick), not one pass per word."""
    low = block.lower()
    if len(low) != len(block):
        return None
    starts: list[int] = []
    line_end = -1  # the end of the last line taken: later matches in it add nothing
    for _, at, _ in _searcher(words).find_matches_as_indexes(low):
        if at <= line_end:
            continue
        starts.append(block.rfind("\n", 0, at) + 1)
        end = block.find("\n", at)
        line_end = end if end >= 0 else len(block)
    return starts
