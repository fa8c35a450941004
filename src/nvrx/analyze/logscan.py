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
nothing else failed); a collective timeout only when nothing else failed: the peers that
time out are the ones left waiting, so the rank that stopped is unknown; and last, what says only
that something raised or aborted (a C++ terminate whose `what():` names nothing, a traceback the
log ends inside, Horovod's shutdown). Symptoms (torch's
`DistBackendError` and `ChildFailedError`, `terminate called`, `Exception ignored in`) are
never the root.

Cost: linear in the log, memory flat in its length. `feed_blocks` looks only at the lines that
hold one of the readers' lower-case `KEYWORDS` (a few `str.find` scans of each block, in C), plus
every line while a reader asks for them all (`logattr` inside a traceback, `Scan` waiting for a
cure, a `what():` or the rest of Open MPI's summary); the patterns run on
a line's first `MAX_LINE` characters. `Scan` keeps what the root needs (the first failure of each
class, the first few failures, each rank's first strong one), so its memory grows with the
number of ranks (at most `MAX_RANKS`), never with the number of lines.

One module: the patterns, the keyword gate that must cover them (a test holds the two against
each other) and the scan whose tiers and consequence rules read their matches change together.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar

from ahocorasick_rs import AhoCorasick, Implementation

from nvrx.display import counted
from nvrx.limits import as_rank

K = TypeVar("K")

# A failure is said in its first characters; a 100 MB line must not cost 100 MB of matching.
MAX_LINE = 4096

# A NaN check that fired (terminal), and a training metric logged as NaN or Inf (`grad norm:
# nan`, `'rewards/chosen': nan`, `loss=nan`; not Megatron's `number of nan iterations: 0`), which
# is a failure only if the metric does not come back finite (`Scan`: mixed precision skips a
# step whose gradients overflowed, and logs it).
_NAN_CHECK = (
    r"found NaN|loss is nan|\bNaN or Inf\b|\bnan loss\b|NaN detected"
    # Mixed precision's loss scale at its floor: every step overflows and none can be skipped
    # any more (DeepSpeed's `Current loss scale already at minimum`, fairseq's and apex's
    # `Minimum loss scale reached`, DeepSpeed's `Attempted loss scale: 1, reducing to 1`).
    r"|loss scale already at minimum|minimum loss scale reached"
    r"|Attempted loss scale: (\S+), reducing to \1(?!\S)"
)
# A loss's parts count as the loss (`loss_net`, `loss_cls`), its scale does not.
_METRIC = (
    r"\b(loss(?:_(?!scale)[a-z]\w*)?|grad[ _]?norm|rewards?|logps|logits)(?:/\w+)?['\"]?\s*[:=]\s*"
)
_NAN_METRIC = _METRIC + r"[-+]?(?:nan|inf)\b"
_NAN_CHECK_RE = re.compile(_NAN_CHECK, re.IGNORECASE | re.ASCII)
_METRIC_NAN_RE = re.compile(_NAN_METRIC, re.IGNORECASE | re.ASCII)
_METRIC_FINITE_RE = re.compile(_METRIC + r"[-+]?\d", re.IGNORECASE | re.ASCII)


def _finite(text: str, name: str) -> bool:
    """Whether `text` logs the metric `name` with a finite value."""
    return any(_metric(m) == name for m in _METRIC_FINITE_RE.finditer(text))


# Lines read after a NaN metric for the same metric coming back finite, or after a stall
# warning for training progress.
NAN_RECOVERY_LINES = 200
# Horovod's stall inspector: some ranks wait for the others (`[missing ranks: 2]` names them).
_STALL = r"waiting for remainder of ranks for more than \d+ seconds|\[missing ranks: [\d, ]+\]"
_STALL_RE = re.compile(_STALL, re.IGNORECASE | re.ASCII)
_MISSING_ONE = re.compile(r"\[missing ranks: (\d{1,9})\]")
# A line that says training moved on: a step or iteration counter, a loss value.
_PROGRESS = re.compile(
    r"\b(?:step|iteration|iter|epoch|global_step)\b\s*[=:]?\s*\d|\bloss\s*[=:]\s*\d",
    re.IGNORECASE | re.ASCII,
)

# torch elastic's failure report: `Failures:` lists the other failed workers, then `Root Cause
# (first observed failure):` names the one that failed first, one entry each (`[0]:`, `time :`,
# `host :`, `rank : 3 (local_rank: 3)`, `exitcode : -9 (pid: ...)`, `error_file :`, `traceback :`).
_ROOT_CAUSE = "Root Cause (first observed failure)"
_REPORT_TIME = re.compile(r"^\s*time\s*:\s*\d")
_REPORT_FIELD = re.compile(r"^\s*(?:\[\d+\]:|(?:time|host|rank|exitcode|error_file|traceback)\s*:)")

# A Slurm client's request that failed, and why (`srun: error: Unable to create step for job 65:
# <reason>`, `sbatch: error: Batch job submission failed: <reason>`): the reason says whether
# Slurm was out of reach or refused the request as given.
_CLIENT_FAILED = r"\b(?:srun|sbatch|salloc): error: [A-Z][^:\n]{0,80}: "

# (fault class, pattern), most specific first; the first that matches a line names its failure.
# The names are logattr's FaultClass values.
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (fault, re.compile(pattern, re.IGNORECASE | re.ASCII))
    for fault, pattern in (
        (
            "CUDA_OOM",
            r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory"
            r"|CUBLAS_STATUS_ALLOC_FAILED|Cuda failure (?:\d+ )?'out of memory'"
            r"|cuda runtime error \(2\) : out of memory",
        ),
        ("DEVICE_ASSERT", r"device-side assert|\.cu:\d+: .*Assertion .* failed"),
        # A launch mistake NCCL reports: a code or configuration bug, not the network.
        ("WORKLOAD_EXC", r"ncclInvalidUsage|Duplicate GPU detected"),
        # torch elastic's report of a worker that exited non-zero on its own (negative codes are
        # signals, below): an error in the training code whose traceback is not in the log.
        (
            "WORKLOAD_EXC",
            r"failed \(exitcode: [1-9]\d*\)|^\s*exitcode\s*:\s*[1-9]\d* \(pid"
            r"|exits with return code = [1-9]\d*",  # DeepSpeed's launcher
        ),
        (
            "GPU_ERROR",
            r"\bXid\b|\bECC error|fallen off the bus|illegal memory access"
            r"|unspecified launch failure|illegal instruction|CUDA error|cudaError"
            # older torch's wording of the same (`cuda runtime error (101) : invalid device
            # ordinal`, `cuda runtime error (39) : uncorrectable ECC error encountered`)
            r"|cuda runtime error \(\d+\)"
            # NCCL's report of a failed CUDA call (`NCCL WARN Cuda failure 'invalid argument'`,
            # `Cuda failure 999 'unknown error'`); its 'out of memory' is a CUDA_OOM, above.
            r"|\bCuda failure (?:\d+ )?'"
            # ROCm's kernel driver: `Memory access fault by GPU node-4 (Agent handle: ...) on
            # address 0x7f... Reason: Page not present or supervisor privilege.`
            r"|Memory access fault by GPU\b",
        ),
        (
            "HOST_OOM",
            r"oom[-_]kill|\bOut Of Memory\b|Out of memory: Killed process|\bMemoryError\b"
            r"|killed by signal: Killed|Cannot allocate memory"
            r"|memory allocation of \d+ bytes failed"
            # C++'s failed allocation, as `terminate called after throwing ... std::bad_alloc`
            r"|\bstd::bad_alloc\b"
            # Slurm's memory limit killing the job (`slurmstepd: error: Job 34477 exceeded memory
            # limit (169384386560 > 161061273600), being killed`); its end-of-step note
            # `Exceeded step memory limit at some point` kills nothing.
            r"|\bexceeded memory limit \(\d+ > \d+\), being killed|\bExceeded job memory limit\b",
        ),
        ("NAN_LOSS", _NAN_CHECK + "|" + _NAN_METRIC),
        # Shared memory (/dev/shm) ran out: DataLoader workers and NCCL die of a bus error that
        # the message itself blames on it. A limit of the job's container or node: a resource.
        (
            "SHM_FULL",
            r"insufficient shared memory \(shm\)|killed by signal: Bus error"
            r"|No space left on device[^\n]*/dev/shm|/dev/shm[^\n]*No space left on device"
            # NCCL's segments in /dev/shm (`Error while creating shared memory segment
            # /dev/shm/nccl-c8G2vd (size 5767520)`, `shm.h:28 NCCL WARN Call to posix_fallocate
            # failed : No space left on device`)
            r"|\bError while creating shared memory segment\b|\bCall to posix_fallocate failed\b",
        ),
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
            r"|exited on signal 9\b|: line \d+: +\d+ Killed\b"
            # the shell's bare `Killed`, behind a rank's tag too (`[0]<stderr>:Killed`)
            r"|(?:^|:)\s*Killed\s*$|\bSIGKILL\b",
        ),
        # Slurm lost a node of the job: its ranks vanish without a word of their own.
        ("NODE_LOST", r"\bNode failure on\b|DUE TO NODE FAILURE|\bNODE_FAIL\b"),
        # The job's tasks could not be started on a node: srun's or slurmd's launch failing, a
        # launcher's ssh refused or unreachable (pdsh, DeepSpeed's multi-node runner).
        (
            "LAUNCH_FAILED",
            r"\bTask launch for \S+ failed on node\b|\btasks? \d+ launch failed\b"
            r"|slurmstepd: error: execve\(\)|ssh exited with exit code 255"
            r"|Permission denied \(publickey|not reachable via ssh"
            r"|\bssh: connect to host \S+ port \d+: (?:Connection refused|Connection timed out)"
            # Open MPI's runtime could not start its daemon on a node (ssh, a name, a library).
            r"|ORTE was unable to reliably start one or more daemons",
        ),
        # Slurm itself out of reach: a client's request (an allocation, a submission, a query)
        # failed because the controller did not answer or the messages could not be
        # authenticated (munge), or a daemon cannot find its controller. `srun: error: Unable to
        # allocate resources: Socket timed out on send/recv operation`, `sbatch: error: Batch job
        # submission failed: Protocol authentication error`, `slurm_load_jobs error: Unable to
        # contact slurm controller (connect failure)`, `error: Munge decode failed: Invalid
        # credential`, `slurmd: error: Unable to establish control machine address`. srun's bare
        # retry while its job runs (`srun: error: Unable to contact slurm controller`) names no
        # request that failed, and is no failure.
        (
            "SLURM_UNREACHABLE",
            _CLIENT_FAILED + r"(?:Unable to contact slurm controller|Socket timed out on send/recv"
            r"|Zero Bytes were transmitted or received|Protocol authentication error"
            r"|Socket communication error)"
            r"|\bslurm_load_\w+(?::| error:) (?:Unable to contact slurm controller"
            r"|Socket timed out on send/recv|Zero Bytes were transmitted or received)"
            r"|\bMunge (?:encode|decode) failed|\bhas authentication error"
            r"|\bUnable to establish control machine address"
            r"|\b(?:srun|sbatch|salloc): fatal: Could not establish a configuration source",
        ),
        # The job's request is wrong as given, so the same request fails again: Slurm refused it
        # (resources, limits, a site's submit policy: `srun: error: Unable to allocate resources:
        # Requested node configuration is not available`, `sbatch: error: Batch job submission
        # failed: ...`), or a launcher was handed a host name that cannot be one (a `host:slots`
        # pair taken whole, a host field that swallowed a command: `ssh: Could not resolve
        # hostname localhost:4`, `... hostname export ROLE=worker; ...`).
        (
            "JOB_REJECTED",
            r"\b(?:srun|sbatch|salloc): error: (?:Unable to allocate resources"
            r"|Batch job submission failed): "
            # Slurm's refusals are the same words whatever the request (an allocation, a
            # submission, a job step: `srun: error: Unable to create step for job 65: Requested
            # node configuration is not available`, `salloc: error: Job submit/allocate failed:
            # Job violates accounting/QOS policy ...`).
            r"|" + _CLIENT_FAILED + r"(?:Requested node configuration is not available"
            r"|Requested time limit is invalid|Invalid [\w ()/-]{1,60} specification"
            r"|Job violates accounting/QOS policy|Memory specification can not be satisfied)"
            r"|\bssh: Could not resolve hostname [^\s:;=]*(?::\d|[\s;=])",
        ),
        (
            "SIGTERM",
            r"\bSIGTERM\b|Received \d+ death signal|exitcode\s*:\s*-15\b"
            r"|CANCELLED AT \S+ DUE TO (?:TIME LIMIT|PREEMPTION)"
            r"|\*\*\* (?:STEP|JOB) \S+ ON \S+ CANCELLED AT(?![^\n]*DUE TO TASK FAILURE)"
            # submitit's handler for the scheduler's warning signal (SIGUSR1/2, SIGHUP):
            # `Caught signal SIGUSR1 on learnfair4096: this job is preempted.`
            r"|: this job is preempted\b",
        ),
        # The user's interrupt: Python's KeyboardInterrupt (as logattr reads a traceback ending
        # in it), and the terminal's echo of Ctrl-C at the start of a line (`^CTraceback ...`).
        ("SIGINT", r"\bKeyboardInterrupt\b|^\^C"),
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
            r"|[^\n]*\bSocket \w+ failed"
            r"|[^\n]*\bbootstrap\w*\b[^\n]*(?:failed|error)"
            r"|[^\n]*Connection (?:refused|reset|closed|timed out)|[^\n]*connection abort)"
            r"|\bIBV_WC_|ibv_\w+ failed"
            # NCCL's own error raised as an exception: with nothing before it, the network or
            # the fabric's setup (`NCCL error in: ProcessGroupNCCL.cpp:3376, internal error`,
            # `ncclSystemError: System call (e.g. socket, malloc) ... failed`); what its `Last
            # error:` line names comes first where the log holds it (shared memory, an OOM).
            r"|NCCL error.*(?:unhandled system error|remote error|internal error)"
            r"|^\W*(?:\[rank\d+\]: )?nccl(?:Internal|System)Error: "
            # NCCL's socket layer, also where an exception quotes it as its `Last error:`
            # (`Net : Call to recv from 10.0.0.2<38309> failed : Connection refused`)
            r"|\bCall to (?:recv|send|connect)\b[^\n]{0,120}? failed ?: "
            r"(?:Connection|Broken pipe|No route|Network is unreachable)"
            # a failed CHECK (glog) over a connection to a peer: the network, not a code bug
            # (`SocketChannel.cpp:54] Check failed: len >= 0  peer=10.89.199.23: Connection reset by
            # peer [104]`, `LightNetwork.cpp:397] Check failed: ... Connection refused [111]`)
            r"|:\d+\] Check failed: [^\n]*\bConnection (?:refused|reset|closed)"
            # Gloo's TCP transport losing or not reaching a peer (`[.../gloo/transport/tcp/
            # pair.cc:598] Connection closed by peer [10.0.0.2]:4343`, `pair.h:301] Connect
            # timeout`); its send/recv timeouts are hangs, below.
            r"|\bpair\.(?:cc|h):\d+\][^\n]*?(?:Connection (?:closed|refused|reset)|Connect timeout"
            r"|Read error|Write error)"
            # Gloo's full mesh not built, whatever its transport says (`... pair.cc:144] no
            # error` when the peer's address was wrong or unreachable)
            r"|\bGloo connectFullMesh failed",
        ),
        # glibc's heap checks abort the process: `*** Error in `python': malloc(): smallbin
        # double linked list corrupted`, `munmap_chunk(): invalid pointer`, `double free or
        # corruption`.
        (
            "OS_ABORT",
            # CPython's own fatal errors abort the process (`Fatal Python error: none_dealloc:
            # deallocating None`, `GC object already tracked`); its segfaults and bus errors
            # match the patterns above first.
            r"\(core dumped\)|\bSIGABRT\b|Fatal Python error: \S|\*\*\* Error in `"
            r"|exitcode\s*:\s*-6\b|return code = -6\b"
            r"|\b(?:malloc|free|realloc|munmap_chunk)\(\): (?:invalid|corrupted|smallbin|unsorted)"
            r"|double free or corruption"
            # Open MPI's report of the signal a process died of (`[node00:13555] Signal: Aborted
            # (6)`; its `Signal: Segmentation fault (11)` is a SEGFAULT, above)
            r"|\bSignal: Aborted \(6\)"
            # glog's and absl's fatal log (a failed CHECK in XLA, torch_xla, TensorFlow) aborts
            # the process: `F0912 11:59:01.941641 741969 shape_tree.cc:54] Check failed: ...`,
            # `2025-04-23 20:35:34.618070: F xla/.../autotuner.cc:1099] Non-OK-status: ...`.
            r"|\*\*\* Check failure stack trace: \*\*\*"
            # LLVM's fatal error (Triton, Inductor, XLA compiling a kernel) aborts the process.
            r"|\bLLVM ERROR: "
            r"|\bF(?:\d{4} \d\d:\d\d:\d\d\.\d+ +\d+)? [\w./-]+:\d+\] "
            r"(?:Check failed|Non-OK-status)",
        ),
        (
            "STORE_LOST",
            r"Connection reset by peer|recvValue failed|RendezvousConnectionError"
            r"|TCPStore\b.*(?:failed|timed out|timeout)|Broken pipe|keepalive"
            # the rendezvous store out of reach: torch's store-based barrier, Horovod's HTTP store
            r"|Timed out initializing process group in store based barrier"
            r"|http_store\.cc:\d+\] HTTP \w+ request failed"
            # c10d's client giving up on the store (not its `[W` line for each attempt)
            r"|client socket has timed out after \d+"
            r"|client socket has failed to connect to any network address"
            # the store's server could not listen: its port is taken (`The server socket has
            # failed to bind to 0.0.0.0:29500 (errno: 98 - Address already in use)`)
            r"|server socket has failed to (?:listen on any local network address|bind to)",
        ),
        # torch's watchdog: `Watchdog caught collective operation timeout`, its heartbeat monitor
        # (`watchdog got stuck for 480 seconds`), and a flight-recorder dump another rank asked
        # for on its own timeout.
        (
            "HANG",
            r"collective operation timeout|watchdog got stuck for \d+ seconds"
            r"|Received a dump signal due to a collective timeout"
            r"|Observed flight recorder dump signal from another rank"
            # Gloo's send/recv timeout raised as an error (quoted in a message, it may have been
            # handled), and Horovod's stall inspector (a warning until progress says otherwise)
            r"|(?:Error|Exception): \[[^\]]*\] Timed out waiting \d+ms for (?:send|recv) operation"
            r"|" + _STALL,
        ),
    )
)
# An exception line: a class name ending in Error or Exception (Python's own `Exception` too, as
# `raise Exception(msg)` prints it), then `:` or the end.
_EXCEPTION = re.compile(
    r"(?:^|[\s\]:>|])((?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception)|Exception))(?::|$)"
)
_TB_HEADER = "Traceback (most recent call last):"
# IPython's (Jupyter's) header: the exception's class, then the header without its colon (or
# what is left of it where a pasted excerpt cuts it: `ProcessRaisedException  Traceback (most re`).
_IPYTHON_TB_HEADER = re.compile(
    r"^[\s>]*(?:[A-Za-z_]\w*\.)*[A-Z]\w* +Traceback \(most(?: r[a-z ]*(?:last\))?)?\s*$"
)
# Slurm's teardown of a step after one of its tasks failed (srun's --kill-on-bad-exit):
# `*** STEP 52222788.0 ON nid002888 CANCELLED AT 2026-04-29T23:36:37 DUE TO TASK FAILURE ***`. A
# consequence of that failure, not a signal from outside; alone, a task failed by an exit code
# the log does not hold (an exception, as torch elastic's `exitcode: 1`).
_TASK_FAILURE = "DUE TO TASK FAILURE"
# Ray's notice that a worker process died (`(raylet) A worker died or was killed while executing
# a task by an unexpected system error. ... There are some potential root causes. (1) The process
# is killed by SIGKILL by OOM killer ... (3) ... SIGSEGV ...`).
_RAY_WORKER_DIED = "A worker died or was killed while executing a task"
# Horovod's own shutdown after an exception somewhere: "This was caused by an exception on one of
# the ranks", which it does not name. A consequence, and the root only if nothing else failed.
_HOROVOD_SHUTDOWN = "Horovod has been shut down"
# A frame of a native backtrace: c10's (`frame #3: c10::TensorImpl::release_resources() + 0x50
# (0x7fa7... in .../libc10.so)`) and UCX's (` 6 0x0000000000034ef3 ompi_comm_create()  comm.c:344`).
_NATIVE_FRAME = re.compile(
    r"^\s*(?:frame #\d{1,4}: \S|\d{1,4} +0x[0-9a-f]{8,16} +[\w:~<>]+\(\))", re.ASCII
)
# Open MPI's summary of a job that failed: `The first process to do so was:`, then `Process name:
# [[29973,1],0]` (job, vpid: the rank) and `Exit code: 1` on the lines after it. A positive code
# below 128 is an exception in that rank's code (like torch elastic's `exitcode: 1`).
_MPI_FIRST = "The first process to do so was:"
_MPI_PROCESS = re.compile(r"^\s*Process name:\s*\[\[\d{1,9},\d{1,9}\],(\d{1,9})\]")
_MPI_EXIT = re.compile(r"^\s*Exit code:\s*(\d{1,3})\s*$")
MPI_SUMMARY_LINES = 4
# The store out of reach before training (a client that never connected, the store-based barrier
# at start): it explains a worker's later exit code, unlike a reset store, which a peer's death
# explains (`Connection reset by peer` comes after a rank died).
_STORE_UNREACHED = re.compile(
    r"client socket has timed out after \d+|client socket has failed to connect"
    r"|Timed out initializing process group in store based barrier",
    re.IGNORECASE,
)
# A worker's exit code as torch elastic or DeepSpeed report it: says that it failed, not why.
_EXIT_REPORT = re.compile(
    r"failed \(exitcode: [1-9]\d*\)|^\s*exitcode\s*:\s*[1-9]\d* \(pid"
    r"|exits with return code = [1-9]"
)
# Consequences of another failure: never the root cause.
_SYMPTOM = re.compile(
    r"DistBackendError|ChildFailedError|terminate called|Exception ignored in"
    r"|DistNetworkError|NCCL communicator was aborted|SignalException|" + _HOROVOD_SHUTDOWN,
)
# Signals from outside that also tear a failed job down: after an exception, its consequence.
_TEARDOWN = frozenset({"SIGTERM", "SIGINT"})
# The weakest evidence first: a lost store and a timeout are what peers of a dead rank see.
_WEAK = ("STORE_LOST", "HANG")
# What names a failure for what it is (an exception line says only that something raised).
STRONG_FAULTS = frozenset(f for f, _ in PATTERNS) - {*_WEAK, "WORKLOAD_EXC"}

# Stricter than logattr's label (a space after the colon): in a log of any format, `12:00:05`
# at the start of a line is a time, not rank 12.
_SRUN_LABEL = re.compile(r"^ *(\d{1,9}): ")
_RANK_PREFIX = re.compile(r"\[rank(\d{1,9})\]:")
# Open MPI's --tag-output (`[1,4]<stdout>:`, job and rank) and Horovod's (`[4]<stderr>:`).
_MPI_TAG = re.compile(r"\[(?:\d{1,9},)?(\d{1,9})\]<std(?:out|err)>:")
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
    named: bool = False  # a hang's rank that its peers name missing (not the rank reporting it)
    vehicle: bool = False  # a C++ terminate, replaced by the failure its `what():` line names
    when: Stamp | None = None  # the time its line (or its report entry) gives, if any

    def before(self, other: Failure) -> bool:
        """Whether this failure came first (`earliest` of the two)."""
        return earliest([self, other]) is self


def earliest(failures: list[Failure]) -> Failure:
    """The first of several failures: by time when every one gives it in the same form (the
    logs of several nodes or ranks concatenated, or interleaved by buffering, are not in time
    order), else by place in the log (times in mixed forms, or some missing, do not compare)."""
    kinds = {f.when[0] if f.when is not None else None for f in failures}
    if len(kinds) == 1 and None not in kinds:
        return min(failures, key=lambda f: (f.when[1] if f.when else "", f.line))
    return min(failures, key=lambda f: f.line)


# A time at the start of a line (behind a rank prefix or a bracket), in the forms training logs
# use; its form is kept beside it, since only times in one form compare. ISO dates (`2024-01-01
# 12:00:05,123`, `[2024-01-01T12:00:05.123Z]`, torch elastic's `2024-01-11_13:45:17`) and glog's
# and c10d's `E0421 02:05:38.764490` (month and day, no year; c10d drops the month's zero:
# `[E421 02:05:38.764490322 ProcessGroupGloo.cpp:143]`).
Stamp = tuple[str, str]
_ISO_TIME = re.compile(
    r"(?<![\d.])(\d{4}-\d\d-\d\d)[ T_](\d\d:\d\d:\d\d)(?:[.,](\d{1,9}))?(?![\d:])", re.ASCII
)
_GLOG_TIME = re.compile(r"(?<![\w])[EWIF](\d{1,2})(\d\d) (\d\d:\d\d:\d\d)\.(\d{1,9})\b", re.ASCII)
STAMP_SPAN = 80  # a time further into the line is a message's, not the line's


def line_time(text: str) -> Stamp | None:
    """The time at the start of a line, as (form, sortable key), or None."""
    head = text[:STAMP_SPAN]
    if (m := _ISO_TIME.search(head)) is not None:
        return "iso", f"{m.group(1)} {m.group(2)}.{(m.group(3) or '').ljust(9, '0')}"
    if (m := _GLOG_TIME.search(head)) is not None:
        month, day, clock, fraction = m.groups()
        return "glog", f"{month.zfill(2)}{day} {clock}.{fraction.ljust(9, '0')}"
    return None


# Ranks an explanation or an issue names one by one; past it, how many more. Every rank of a
# 16-node job of 8 GPUs (the widest upstream pool, `n3_super_8n_16n`, on the widest nodes) is
# still named, so a judge finds any injected rank; a 131,072-task job's list stays ~0.6 KB.
LISTED_RANKS = 128


def ranks_text(ranks: Collection[int]) -> str:
    """`rank 3`, `ranks 0, 2, 3`; past LISTED_RANKS, the first of them and how many more:
    `ranks 0, 1, ..., 127 (and 130944 more)` (the count in parentheses, which
    `logtext.rank_mentions` never reads as a rank)."""
    ordered = sorted(ranks)
    if len(ordered) == 1:
        return f"rank {ordered[0]}"
    shown = ", ".join(map(str, ordered[:LISTED_RANKS]))
    more = len(ordered) - LISTED_RANKS
    return f"ranks {shown}" + (f" (and {more} more)" if more > 0 else "")


def lines_text(lines: list[int], count: int | None = None) -> str:
    """`line 5`, `lines 5, 9`, `lines 5, 9 and 12 more`: a few line numbers and how many."""
    shown = sorted(set(lines))
    if not shown:
        return "no line"
    more = (count if count is not None else len(shown)) - len(shown)
    head = ("line " if len(shown) == 1 and more <= 0 else "lines ") + ", ".join(map(str, shown))
    return head + (f" and {more} more" if more > 0 else "")


def _keep_earliest(table: dict[K, Failure], key: K, f: Failure) -> None:
    if key not in table or f.before(table[key]):
        table[key] = f


def _metric(m: re.Match[str]) -> str:
    return m.group(1).lower().replace(" ", "_")


def line_rank(line: str) -> int | None:
    """The rank a line belongs to, from its prefix or its message; None when it does not say
    (or says a number no job has as a rank)."""
    head = line[:200]
    if (m := _SRUN_LABEL.search(head)) is not None:
        # `0: 3: text`, `0: [rank3]: text`: the srun task is a launcher; its worker says the rank.
        inner = INNER_LABEL.match(head, m.end())
        return as_rank(inner.group(1) or inner.group(2) if inner else m.group(1))
    for pattern in (_RANK_PREFIX, _MPI_TAG):
        if (m := pattern.search(head)) is not None:
            return as_rank(m.group(1))
    if (m := _RANK_IN_TEXT.search(line[:MAX_LINE])) is not None:
        return as_rank(next(g for g in m.groups() if g is not None))
    return None


# The launcher's own fan-out once a rank failed: torch elastic's agent stops the surviving
# workers (`Sending process 59460 closing signal SIGTERM`). A consequence, never a failure: the
# rank that failed is named elsewhere (`failed (exitcode: -9) local_rank: 3`), and an outside
# SIGTERM says so in its own words (`Received 15 death signal`).
_FAN_OUT = re.compile(r"Sending process \d+ closing signal SIG[A-Z]+")


# NCCL's error as torch raises it (`DistBackendError: NCCL error in: ..., internal error`, its
# `ncclSystemError: ...` line): what failed is often on the `Last error:` lines after it.
_NCCL_RAISED = re.compile(r"NCCL error in: |\bnccl(?:Internal|System)Error: ")
RAISED_LINES = 4

# C++'s `terminate called after throwing an instance of 'c10::CUDAError'`: the runtime aborts the
# process (SIGABRT) over an exception whose type says little and whose `what():` line, next, says
# what failed (`CUDA error: device-side assert triggered`). The line's failure (the abort, or what
# the type names) is replaced by the failure its `what():` names (`Scan`: TERMINATE_LINES), and is
# the root only if nothing else failed; a symptom's type (torch's `DistBackendError` after a
# peer's failure) is no failure at all.
_TERMINATE = re.compile(r"terminate called after throwing an instance of '([^']{0,200})'")
TERMINATE_LINES = 3


def _failure(no: int, line: str) -> Failure | None:
    text = line[:MAX_LINE]
    if _FAN_OUT.search(text):
        return None
    said = text
    if (m := _TERMINATE.search(text)) is not None:
        if _SYMPTOM.search(m.group(1)):
            return None
        # The type is not the failure; a `what():` on the same line (a collapsed log) may say it.
        said = text[: m.start()] + text[m.end() :]
    for fault, pattern in PATTERNS:
        if pattern.search(said):
            return Failure(fault, line_rank(line), no, text.strip())
    if m is not None:
        # Until its `what():` says otherwise, the failure is what the type names (`std::bad_alloc`
        # is an allocation that failed), else the abort itself.
        typed = next((f for f, pattern in PATTERNS if pattern.search(m.group(1))), "OS_ABORT")
        return Failure(typed, line_rank(line), no, text.strip(), vehicle=True)
    if _EXCEPTION.search(text) and not _SYMPTOM.search(text):
        return Failure("WORKLOAD_EXC", line_rank(line), no, text.strip())
    return None


# Failures kept in log order beyond the first of each class: evidence for the report.
EARLY = 4
# A report's entries held until its root cause: one per failed worker, bounded like the ranks.
MAX_LISTED = 4096


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
    # A failure held until NAN_RECOVERY_LINES pass without it being cured: a metric logged as
    # NaN (cured by the same metric finite again: `held_metric`), a stall warning (by progress).
    held: Failure | None = None
    held_metric: str = ""
    held_until: int = 0
    # A C++ terminate waiting for its `what():` line (TERMINATE_LINES).
    vehicle: Failure | None = None
    # NCCL's error raised as an exception, waiting for its `Last error:` to name what failed
    # (RAISED_LINES after its last line: `DistBackendError: NCCL error in: ...`, then
    # `ncclSystemError: ...`, `Last error:`, `Error while creating shared memory segment ...`).
    raised: Failure | None = None
    raised_until: int = 0
    # Slurm said it tore the step down because a task failed (`... DUE TO TASK FAILURE`): the
    # tasks it reports `Terminated` then are that teardown, not a signal from outside.
    task_failed: bool = False
    # A traceback header no exception line has followed yet: a log cut inside the traceback
    # (a paste, a store's excerpt, a process killed mid-print) still shows that code raised.
    unended: Failure | None = None
    unended_unranked: bool = False  # the unended header said no rank: its next line may
    # The earliest failure that says only that something raised or aborted (a terminate whose
    # `what():` named nothing, a cut traceback, Horovod's shutdown): the root only if nothing
    # else failed.
    last_resort: Failure | None = None
    store_unreached: Failure | None = None  # the earliest store never reached (_STORE_UNREACHED)
    # Open MPI's summary being read: the line that began it, the rank its process name gave.
    mpi_first: int = 0
    mpi_rank: int | None = None
    # A report's entries before its root cause: other failures once the root cause comes.
    listed: list[Failure] = field(default_factory=list)
    in_root_cause: bool = False
    displaced: list[Failure] = field(default_factory=list)  # listed before the root cause
    root_cause_found: bool = False  # the root cause entry held a failure
    entry_when: Stamp | None = None  # the root cause entry's `time :` field
    # Consequences set aside, for the explanation: the agent's SIGTERM fan-out and the other
    # failures a report lists before its root cause (the first few lines of each, and counts).
    fanout_lines: list[int] = field(default_factory=list)
    fanout: int = 0
    listed_lines: list[int] = field(default_factory=list)
    listed_count: int = 0  # lines
    listed_ranks: set[int] = field(default_factory=set)

    @property
    def watching(self) -> bool:
        """Whether every line is wanted now (a held failure waits to be cured)."""
        return (
            self.held is not None
            or self.vehicle is not None
            or self.raised is not None
            or self.mpi_first > 0
            or self.unended_unranked
            or self.in_root_cause  # its `time :` field holds no keyword
        )

    def feed(self, no: int, line: str, *, rank: int | None = None) -> None:
        """Read one line; `rank`: the rank another reader knows the line is about, over any the
        line itself seems to say (NVRx's launcher names a worker by its node and local rank; an
        srun label on a launcher's line is the launcher's task, not a rank)."""
        text = line[:MAX_LINE]
        if self.unended_unranked and text.strip():
            # A header whose rank prefix an excerpt cut: its first frame's prefix says it.
            self.unended_unranked = False
            if self.unended is not None and (rank := line_rank(line)) is not None:
                self.unended = replace(self.unended, rank=rank)
        if self.vehicle is not None and no > self.vehicle.line + TERMINATE_LINES:
            self._record(self.vehicle)  # its `what():` named nothing: an abort
            self.vehicle = None
        if self.raised is not None and no > self.raised_until:
            self._record(self.raised)  # its last error named nothing else: the NCCL error it is
            self.raised = None
        if self.held is not None:
            cured = _finite(text, self.held_metric) if self.held_metric else _PROGRESS.search(text)
            if cured:
                self.held = None  # the step was skipped, or the stall passed: training went on
            elif no > self.held_until:
                self.settle()
        if (m := _CONTEXT_RANK.search(text)) is not None:
            self.context = as_rank(m.group(1) or m.group(2))
        if _FAN_OUT.search(text):
            self.fanout += 1
            if len(self.fanout_lines) < EARLY:
                self.fanout_lines.append(no)
            return
        field_line = _REPORT_FIELD.match(text) is not None
        if _ROOT_CAUSE in text:
            # The entries listed before it failed after it: consequences, never the root, once
            # its own entry says what failed (a log cut inside it keeps them).
            self._close_root_cause()
            self.displaced, self.listed = self.listed, []
            self.in_root_cause, self.root_cause_found = True, False
            self.entry_when = None
            return
        if self.in_root_cause and _REPORT_TIME.match(text):
            # When it failed: with two reports (two nodes' agents), the earlier time is the root.
            self.entry_when = line_time(text)
        if self.in_root_cause and not field_line and text.strip():
            # A blank line inside the report is a paste's doubled line break, not its end.
            self._close_root_cause()
        if self.mpi_first and self._mpi_summary(no, text):
            return
        if _MPI_FIRST in text:
            self.mpi_first, self.mpi_rank = no, None
        if _RAY_WORKER_DIED in text:
            # Ray's notice lists what might have killed the worker (the OOM killer, `ray stop`,
            # a SIGSEGV): guesses, not evidence. Alone, the first of them: killed (SIGKILL).
            self._record_last_resort(Failure("SIGKILL", None, no, text.strip()))
            return
        if _TASK_FAILURE in text:
            self.task_failed = True
        if _HOROVOD_SHUTDOWN in text or _TASK_FAILURE in text:
            self._record_last_resort(Failure("WORKLOAD_EXC", None, no, text.strip()))
        if _NATIVE_FRAME.match(text):
            # A native backtrace whose signal or error line the log does not hold: a crash, the
            # root only when nothing else failed (after an exception its frames are that one's).
            self._record_last_resort(Failure("CRASH", line_rank(line), no, text.strip()))
            return
        ipython = _IPYTHON_TB_HEADER.match(text) is not None
        if ipython or text.rstrip().endswith(_TB_HEADER):
            # A line of its own (behind a prefix), not quoted. IPython's names the exception's
            # class, which may say what failed (`OutOfMemoryError  Traceback ...`).
            if self.unended is None:
                named = _failure(no, line) if ipython else None
                fault = named.fault if named is not None else "WORKLOAD_EXC"
                self.unended = Failure(fault, line_rank(line), no, text.strip())
                self.unended_unranked = self.unended.rank is None
            return
        if self.unended is not None and _EXCEPTION.search(text):
            self.unended = None  # the traceback ended (its exception may be a symptom)
        f = _failure(no, line)
        if f is None:
            return
        when = self.entry_when if self.in_root_cause and self.entry_when else line_time(text)
        f = replace(f, when=when)
        self.unended = None
        if rank is not None:
            f = replace(f, rank=rank)
        if f.rank is None and self.context is not None:
            f = replace(f, rank=self.context)
        if f.fault == "NCCL_ERROR" and not field_line and _NCCL_RAISED.search(text):
            if self.raised is None:
                self.raised = f
            self.raised_until = no + RAISED_LINES  # the same error's next line extends it
            return
        if self.raised is not None:
            raised, self.raised = self.raised, None
            if f.fault in STRONG_FAULTS and f.rank in (None, raised.rank):
                # What its last error names failed (shared memory, an OOM, the network itself).
                f = replace(f, rank=raised.rank)
            else:
                self._record(raised)
        if f.vehicle:
            if self.vehicle is not None:
                self._record(self.vehicle)
            self.vehicle = f
            return
        if self.vehicle is not None:
            f = replace(f, rank=self.vehicle.rank if f.rank is None else f.rank)
            self.vehicle = None  # the failure its `what():` names is the terminate's
        if field_line and not self.in_root_cause and len(self.listed) < MAX_LISTED:
            self.listed.append(f)  # an entry of a report whose root cause may follow
            return
        self.root_cause_found = self.root_cause_found or self.in_root_cause
        nan = _METRIC_NAN_RE.search(text) if f.fault == "NAN_LOSS" else None
        stall = f.fault == "HANG" and _STALL_RE.search(text) is not None
        if (nan is not None and not _NAN_CHECK_RE.search(text)) or stall:
            one = _MISSING_ONE.search(text) if stall else None
            metric = _metric(nan) if nan is not None else ""
            if self.held is not None and self.held_metric != metric:
                self._record(f)  # one failure is held at a time: another kind is taken as it is
                return
            if self.held is None:
                self.held, self.held_metric = f, metric
            if one is not None and not self.held.named and not self.held_metric:
                # The stall report names the rank it waits for: the hang is that rank's.
                self.held = replace(self.held, rank=as_rank(one.group(1)), named=True)
            self.held_until = no + NAN_RECOVERY_LINES
            return
        self._record(f)

    def _mpi_summary(self, no: int, text: str) -> bool:
        """Read a line of Open MPI's summary; whether it was one."""
        if no > self.mpi_first + MPI_SUMMARY_LINES:
            self.mpi_first, self.mpi_rank = 0, None
            return False
        if (m := _MPI_PROCESS.match(text)) is not None:
            self.mpi_rank = as_rank(m.group(1))
            return True
        if (m := _MPI_EXIT.match(text)) is not None:
            code, rank = int(m.group(1)), self.mpi_rank
            self.mpi_first, self.mpi_rank = 0, None
            if 0 < code < 128:
                self._record(Failure("WORKLOAD_EXC", rank, no, text.strip()))
            return True
        return not text.strip()

    def settle(self) -> None:
        """Take a held failure that nothing cured as the failure it is, and a report's entries
        that no root cause followed as failures of their own."""
        if self.held is not None:
            f, self.held = self.held, None
            self._record(f)
        if self.vehicle is not None:
            f, self.vehicle = self.vehicle, None
            self._record(f)
        if self.raised is not None:
            f, self.raised = self.raised, None
            self._record(f)
        if self.unended is not None:
            f, self.unended = self.unended, None
            if f.rank is None and self.context is not None:
                f = replace(f, rank=self.context)
            self._record_last_resort(f)
        self._close_root_cause()
        listed, self.listed = self.listed, []
        for f in listed:
            self._record(f)

    def _close_root_cause(self) -> None:
        displaced, self.displaced = self.displaced, []
        for f in displaced:
            if self.root_cause_found:
                if f.rank is not None:  # another failure: a secondary issue
                    self.ranks.add(f.rank)
                    self.listed_ranks.add(f.rank)
                self.listed_count += 1
                if len(self.listed_lines) < EARLY:
                    self.listed_lines.append(f.line)
            else:
                self._record(f)
        self.in_root_cause = False

    def _record(self, f: Failure) -> None:
        if f.vehicle:
            # A terminate whose `what():` named nothing: the abort is the root only when nothing
            # else failed (`aborting. See exception message above` said it on the line before).
            self._record_last_resort(replace(f, vehicle=False))
            if f.rank is not None:
                self.ranks.add(f.rank)
            return
        # A held failure is recorded after lines that follow it: each table keeps the earliest.
        _keep_earliest(self.first, f.fault, f)
        if (
            f.fault == "STORE_LOST"
            and _STORE_UNREACHED.search(f.text)
            and (self.store_unreached is None or f.line < self.store_unreached.line)
        ):
            self.store_unreached = f
        self.early = sorted([*self.early, f], key=lambda e: e.line)[:EARLY]
        if f.rank is not None:
            _keep_earliest(self.first_ranked, f.fault, f)
            self.ranks.add(f.rank)
            if f.fault in STRONG_FAULTS:
                _keep_earliest(self.strong, f.rank, f)

    def _record_last_resort(self, f: Failure) -> None:
        if self.last_resort is None or f.line < self.last_resort.line:
            self.last_resort = f

    def root(self) -> Failure | None:
        """The root failure (None: nothing failed). A root without a rank takes the rank of a
        later report of the same failure that says it (the watchdog's `[Rank 1] ... ECC error`
        after the traceback's own line)."""
        self.settle()
        hang = self.first.get("HANG")
        for tier in (STRONG_FAULTS, {"WORKLOAD_EXC"}, *({weak} for weak in _WEAK)):
            found = [
                self.first[fault]
                for fault in tier
                if fault in self.first
                # An abort after a collective timeout is the watchdog's own (it takes the
                # process down, SIGABRT, exit code -6): a consequence of the hang.
                and not (fault == "OS_ABORT" and hang and hang.line < self.first[fault].line)
            ]
            if found:
                root = earliest(found)
                exc = self.first.get("WORKLOAD_EXC")
                if root.fault in _TEARDOWN and exc is not None and exc.before(root):
                    # A job torn down after an exception (Slurm's CANCELLED, the user's Ctrl-C
                    # on what was left hanging): the exception ended it, the signal followed.
                    root = exc
                store = self.store_unreached
                if (
                    root.fault == "WORKLOAD_EXC"
                    and _EXIT_REPORT.search(root.text)
                    and store is not None
                    and store.line < root.line
                ):
                    root = store  # the exit code is the store timeout's: it raised, it exited
                if root.rank is None and (later := self.first_ranked.get(root.fault)):
                    root = replace(root, rank=later.rank)
                return root
        return self.last_resort

    def set_aside(self) -> list[str]:
        """The consequences this scan set aside, each with its lines (for an explanation)."""
        self.settle()
        out = []
        if self.fanout:
            out.append(
                f"the launcher's SIGTERM to {counted(self.fanout, 'worker')} "
                f"({lines_text(self.fanout_lines, self.fanout)})"
            )
        if self.listed_count:
            who = ranks_text(self.listed_ranks) if self.listed_ranks else "other workers"
            out.append(
                f"the failures of {who} that the report lists before its root cause "
                f"({lines_text(self.listed_lines, self.listed_count)})"
            )
        return out

    def others(self, root: Failure) -> tuple[list[int], list[Failure]]:
        """The ranks that failed besides the root's, and the first few other failures in log
        order: after the root, or before it where the root outranks them (weaker evidence)."""
        self.settle()
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
    "node fail", "node_fail", "launch failed", "task launch", "execve", "ssh exited",
    "permission denied", "via ssh", "shared memory", "/dev/shm", ": nan", ":nan", "= nan",
    "=nan", ": inf", ":inf", "= inf", "=inf", "-inf", "watchdog", "dump signal", "root cause",
    "*** error in", "double free", "malloc()", "free()", "munmap_chunk()", "store based barrier",
    "http_store", "timed out", "access fault", "bad_alloc", "fatal python",
    "remainder of ranks", "missing ranks", "loss scale already", "minimum loss scale",
    "attempted loss scale", "terminate called",
    "client socket", "horovod has been shut down", "first process to do so",
    "check fail", "non-ok-status", "llvm error", "ssh: connect to host", "unable to allocate",
    "batch job submission failed", "configuration source", "exceeded memory limit",
    "exceeded job memory limit", "frame #", " 0x0000", "orte was unable", "resolve hostname",
    "slurm_load_", "connectfullmesh", "server socket", "preempted", "keyboardinterrupt", "^c",
    "call to", "shared memory segment",
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
