"""The first failure in a log of any format: what real training jobs print, beyond the
`srun --label` logs of the fault-injection runs that `logattr`'s rules read.

One pass over the lines. Each line's rank comes from its prefix (srun's `N: `, torch's
`[rankN]:`, anywhere in the first part of the line, behind timestamps and logger fields), else
from the message (`[Rank N]`, `rank: N (local_rank: ...)`), else it is unknown: a line without a
rank label is evidence all the same, never dropped. Its failure comes from the first pattern of
`PATTERNS` that it matches, most specific first (`CUDA error: out of memory` is an OOM, not a
GPU error; a device-side assert is a code bug, not hardware).

The root is the earliest failure in causal order: a strong one (an OOM, a GPU or CUDA error, a
crash, a kill, a signal, an I/O or network error) before anything else; else the earliest
exception; only then a lost store or rendezvous (a symptom of a peer's death, unless nothing
else failed); and a collective timeout only when nothing failed at all: the peers that time out
are the ones left waiting, so the rank that stopped is unknown. Symptoms (torch's
`DistBackendError` and `ChildFailedError`, `terminate called`, `Exception ignored in`) are
never the root. Linear in the log: each line is matched against a fixed set of patterns, on its
first `MAX_LINE` characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from nvrx.limits import small_int

# A failure is said in its first characters; a 100 MB line must not cost 100 MB of matching.
MAX_LINE = 4096

# (fault class, pattern), most specific first; the first that matches a line names its failure.
# The names are logattr's FaultClass values.
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (fault, re.compile(pattern, re.IGNORECASE))
    for fault, pattern in (
        (
            "CUDA_OOM",
            r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory"
            r"|CUBLAS_STATUS_ALLOC_FAILED|Cuda failure 2 'out of memory'",
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
        (
            "SIGTERM",
            r"\bSIGTERM\b|Received 15 death signal|exitcode\s*:\s*-15\b"
            r"|CANCELLED AT \S+ DUE TO (?:TIME LIMIT|PREEMPTION|NODE FAILURE)"
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
# A rank named in the message (the leftmost of these forms): `[PG ... Rank N]`, `Rank N:`,
# `(RANK N)`, srun's `task N:`, and the bare `rank N` of a failure message ("rank 3 and rank 2
# both on CUDA device 0").
_RANK_IN_TEXT = re.compile(
    r"\[(?:PG [^\]]*)?Rank (\d{1,9})\]|\bRank (\d{1,9}):|\(RANK (\d{1,9})\)"
    r"|srun: error: \S+: task (\d{1,9}):|\brank (\d{1,9})\b",
    re.IGNORECASE,
)
# Where a rank is said for the lines that follow: a traceback header `(RANK 3)`, torch
# elastic's failure summary `rank      : 3 (local_rank: 3)`.
_CONTEXT_RANK = re.compile(
    r"Traceback \(most recent call last\):.*\bRANK (\d{1,9})|\brank\s*:\s*(\d{1,9}) \(local_rank",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Failure:
    """One line's failure: its class, rank (None: unknown) and where it is."""

    fault: str
    rank: int | None
    line: int  # 1-based
    text: str


def line_rank(line: str) -> int | None:
    """The rank a line belongs to, from its prefix or its message; None when it does not say."""
    head = line[:200]
    for pattern in (_SRUN_LABEL, _RANK_PREFIX):
        if (m := pattern.search(head)) is not None:
            return small_int(m.group(1))
    if (m := _RANK_IN_TEXT.search(line[:MAX_LINE])) is not None:
        return small_int(next(g for g in m.groups() if g is not None))
    return None


def _failure(no: int, line: str) -> Failure | None:
    text = line[:MAX_LINE]
    for fault, pattern in PATTERNS:
        if pattern.search(text):
            return Failure(fault, line_rank(line), no, text.strip())
    if _EXCEPTION.search(text) and not _SYMPTOM.search(text):
        return Failure("WORKLOAD_EXC", line_rank(line), no, text.strip())
    return None


def _failures(text: str) -> list[Failure]:
    """Every failure line; one without a rank of its own takes the rank its context said (a
    traceback header's, an elastic summary's), if any."""
    found: list[Failure] = []
    context: int | None = None
    for no, line in enumerate(text.splitlines(), 1):
        if (m := _CONTEXT_RANK.search(line[:MAX_LINE])) is not None:
            context = small_int(m.group(1) or m.group(2))
        if (f := _failure(no, line)) is not None:
            found.append(f if f.rank is not None or context is None else replace(f, rank=context))
    return found


def first_failure(text: str) -> tuple[Failure | None, list[Failure]]:
    """The root failure of a log (None: nothing failed) and every failure line, in order. A
    root without a rank takes the rank of a later report of the same failure that says it (the
    watchdog's `[Rank 1] ... ECC error` after the traceback's own line)."""
    found = _failures(text)
    for tier in (
        [f for f in found if f.fault in STRONG_FAULTS],
        [f for f in found if f.fault == "WORKLOAD_EXC"],
        *([f for f in found if f.fault == weak] for weak in _WEAK),
    ):
        if tier:
            root = tier[0]
            if root.rank is None:
                later = next(
                    (f for f in tier if f.fault == root.fault and f.rank is not None), None
                )
                root = replace(root, rank=later.rank) if later else root
            return root, found
    return None, found
