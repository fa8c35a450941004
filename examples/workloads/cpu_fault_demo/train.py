#!/usr/bin/env python3
"""CPU fault-injection demo: a Megatron-like training loop whose ranks really communicate.

Every rank (one Slurm task each) runs a small "training" loop. Each iteration does two real
all-reduces over TCP (gradients and loss on the data-parallel group) with a collective timeout, so
a rank that stops taking part makes its peers time out, name the missing rank(s), write an NCCL
flight-recorder style dump (`_dump_<rank>`, pickled like PyTorch's) and abort, the way a PyTorch
NCCL watchdog does. The 12 fault types of NVRx's `shared_utils/inject_fault.py` are injected the way
Megatron's fault injector schedules them (marker line after iteration FAULT_AT_ITER, fault after
FAULT_DELAY seconds). See README.md beside this file.

Collectives: rank 0 hosts a small TCP coordinator (a thread) on a port derived from SLURM_JOB_ID;
every rank, rank 0 included, connects to it, sends its contribution and waits for the reduced
result. On a timeout a rank asks the coordinator which ranks have not contributed; if the
coordinator itself does not answer, rank 0 is the missing one.

Standard library only: it runs on compute nodes with a plain python3.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import logging
import math
import os
import pickle
import re
import resource
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

FAULT_TYPES = (
    "GPU_ERROR",
    "GPU_SLEEP",
    "WORKLOAD_EXC",
    "ASYNC_EXC",
    "SIGNAL_EXC",
    "OS_ABORT",
    "LOCK_GIL",
    "SEGFAULT",
    "SIGINT",
    "SIGKILL",
    "SIGTERM",
    "SIGSTOP",
)
SIGNAL_FAULTS = {
    "SIGNAL_EXC": signal.SIGUSR1,
    "SIGINT": signal.SIGINT,
    "SIGKILL": signal.SIGKILL,
    "SIGTERM": signal.SIGTERM,
    "SIGSTOP": signal.SIGSTOP,
}
INJECT_LOGGER = "nvidia_resiliency_ext.shared_utils.inject_fault"
MARKER_TIME = "%Y-%m-%d %H:%M:%S.%f"

# Flight-recorder constants, as observed in real dumps (see shared reference fr-traces.md).
FR_VERSION = "2.9"
FR_NCCL_VERSION = "2.27.3"
FR_PICKLE_PROTOCOL = 2

# Nominal tensor metadata recorded in the flight recorder (the bytes really exchanged are small).
GRAD_NUMEL = 2097152
DEFAULT_PG_DESC = "default_pg"
TP_DESC = "TENSOR_MODEL_PARALLEL_GROUP"
DP_DESC = "DATA_PARALLEL_GROUP"


class InjectedException(Exception):
    """The exception NVRx's injector raises (WORKLOAD_EXC, ASYNC_EXC, SIGNAL_EXC)."""


# Tracebacks and the ASYNC_EXC message name the class as NVRx's does.
InjectedException.__module__ = INJECT_LOGGER


class CollectiveTimeout(Exception):
    """A collective did not complete within the collective timeout."""

    def __init__(self, work: Work, waited_s: float, missing: list[int], note: str) -> None:
        super().__init__(f"collective {work.op_type} SeqNum={work.seq} timed out")
        self.work = work
        self.waited_s = waited_s
        self.missing = missing
        self.note = note


# --------------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------------


def env_str(names: tuple[str, ...], default: str) -> str:
    """The first non-empty environment variable of `names`, else `default`."""
    for name in names:
        raw = os.environ.get(name, "").strip()
        if raw:
            return raw
    return default


def env_int(names: tuple[str, ...], default: int) -> int:
    return int(env_str(names, str(default)))


def env_float(names: tuple[str, ...], default: float) -> float:
    return float(env_str(names, str(default)))


def default_port(job_id: str) -> int:
    """A port below the Linux ephemeral range, derived from the job id."""
    digits = re.sub(r"\D", "", job_id) or "0"
    return 20000 + int(digits) % 12000


def parse_args(argv: list[str]) -> argparse.Namespace:
    job_id = env_str(("SLURM_JOB_ID",), "0")
    experiment_dir = env_str(("EXPERIMENT_DIR",), "")
    default_prefix = (
        str(Path(experiment_dir) / "checkpoints" / "_dump_") if experiment_dir else "_dump_"
    )
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add = p.add_argument
    add("--fault-type", default=env_str(("FAULT_TYPE",), "GPU_SLEEP"))
    add("--fault-rank", type=int, default=env_int(("FAULT_RANK",), 1))
    add("--fault-at-iter", type=int, default=env_int(("FAULT_AT_ITER",), 5))
    add("--fault-delay", type=float, default=env_float(("FAULT_DELAY",), 15.0))
    add(
        "--enable-fault-injection",
        type=int,
        choices=(0, 1),
        default=env_int(("ENABLE_FAULT_INJECTION",), 1),
    )
    add("--train-iters", type=int, default=env_int(("CPU_FAULT_DEMO_TRAIN_ITERS",), 120))
    add("--iter-time", type=float, default=env_float(("CPU_FAULT_DEMO_ITER_TIME",), 0.5))
    add("--log-interval", type=int, default=env_int(("CPU_FAULT_DEMO_LOG_INTERVAL",), 1))
    add("--global-batch-size", type=int, default=32)
    add(
        "--collective-timeout",
        type=float,
        default=env_float(("CPU_FAULT_DEMO_COLLECTIVE_TIMEOUT",), 20.0),
        help="seconds a rank waits for a collective before it dumps and aborts",
    )
    add(
        "--rendezvous-timeout",
        type=float,
        default=env_float(("CPU_FAULT_DEMO_RDZV_TIMEOUT",), 120.0),
        help="seconds to wait for all ranks to join at start-up",
    )
    add("--master-addr", default=env_str(("CPU_FAULT_DEMO_MASTER_ADDR",), ""))
    add("--port", type=int, default=env_int(("CPU_FAULT_DEMO_PORT",), default_port(job_id)))
    add(
        "--dump-prefix",
        default=env_str(("TORCH_FR_DUMP_TEMP_FILE",), default_prefix),
        help="flight-recorder dumps go to <prefix><rank>",
    )
    add(
        "--fr-buffer-size",
        type=int,
        default=env_int(("TORCH_NCCL_TRACE_BUFFER_SIZE",), 2000),
        help="max entries per dump; 0 disables the flight recorder",
    )
    add(
        "--fr-history",
        type=int,
        default=env_int(("CPU_FAULT_DEMO_FR_HISTORY",), 4),
        help="completed entries kept in a dump before the in-flight ones (0: in-flight only)",
    )
    add(
        "--dump-on-timeout",
        type=int,
        choices=(0, 1),
        default=env_int(("TORCH_NCCL_DUMP_ON_TIMEOUT",), 1),
    )
    add(
        "--timeout-exit",
        choices=("abort", "exit"),
        default=env_str(("CPU_FAULT_DEMO_TIMEOUT_EXIT",), "abort"),
        help="how a rank ends after a collective timeout: SIGABRT like PyTorch, or exit(1)",
    )
    args = p.parse_args(argv)
    args.fault_type = args.fault_type.strip().upper()
    if args.enable_fault_injection and args.fault_type not in FAULT_TYPES:
        p.error(f"unknown fault type {args.fault_type!r}; known: {', '.join(FAULT_TYPES)}")
    if args.train_iters < 1 or args.iter_time <= 0 or args.collective_timeout <= 0:
        p.error("--train-iters, --iter-time and --collective-timeout must be positive")
    return args


@dataclass(frozen=True)
class Topology:
    rank: int
    world: int
    local_rank: int
    node: str
    job_id: str

    @classmethod
    def from_env(cls) -> Topology:
        return cls(
            rank=env_int(("SLURM_PROCID", "RANK"), 0),
            world=env_int(("SLURM_NTASKS", "WORLD_SIZE"), 1),
            local_rank=env_int(("SLURM_LOCALID", "LOCAL_RANK"), 0),
            node=env_str(("SLURMD_NODENAME",), socket.gethostname()),
            job_id=env_str(("SLURM_JOB_ID",), "0"),
        )


def first_host(nodelist: str) -> str:
    """The first host of a Slurm hostlist expression: 'n[1-2],m3' -> 'n1'."""
    item, depth = "", 0
    for ch in nodelist.strip():
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            break
        item += ch
    return re.sub(r"\[([^\]]*)\]", lambda m: m.group(1).split(",")[0].split("-")[0], item)


def coordinator_address(explicit: str) -> tuple[str, str]:
    """(address, how it was chosen) of rank 0's coordinator."""
    if explicit:
        return explicit, "CPU_FAULT_DEMO_MASTER_ADDR"
    nodelist = env_str(("SLURM_JOB_NODELIST", "SLURM_NODELIST"), "")
    host = first_host(nodelist) if nodelist else ""
    if not host:
        return "127.0.0.1", "no SLURM_JOB_NODELIST; using 127.0.0.1"
    try:
        return socket.gethostbyname(host), f"first node {host}"
    except OSError:
        return "127.0.0.1", f"first node {host} does not resolve; using 127.0.0.1"


# --------------------------------------------------------------------------------------------
# logging helpers
# --------------------------------------------------------------------------------------------


def out(line: str) -> None:
    print(line, flush=True)


def err(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def now_str(fmt: str = MARKER_TIME) -> str:
    return datetime.datetime.now().strftime(fmt)


def glog_prefix(rank: int, level: str = "E") -> str:
    """The prefix PyTorch's C++ logging puts on ProcessGroupNCCL messages."""
    now = datetime.datetime.now()
    return f"[rank{rank}]:[{level}{now:%m%d %H:%M:%S.%f} ProcessGroupNCCL.cpp]"


LOG_FORMAT = "[%(asctime)s] %(levelname)s:%(name)s: %(message)s"
INJECT_FORMATTER = logging.Formatter(LOG_FORMAT)


def setup_logging() -> logging.Logger:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(INJECT_FORMATTER)
    logger = logging.getLogger(INJECT_LOGGER)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


def critical_line(msg: str) -> str:
    """The CRITICAL line NVRx's injector logs, formatted without touching logging locks."""
    record = logging.LogRecord(INJECT_LOGGER, logging.CRITICAL, __file__, 0, msg, None, None)
    return INJECT_FORMATTER.format(record) + "\n"


# --------------------------------------------------------------------------------------------
# flight recorder
# --------------------------------------------------------------------------------------------


@dataclass
class ProcessGroup:
    name: str  # global group name, the key of pg_config
    desc: str
    ranks: list[int]
    local_id: int  # rank-local index, the key of pg_status and an entry's pg_id
    timeout_ms: int
    seq: int = 0
    last_enqueued: int = -1
    last_completed: int = -1


@dataclass
class Work:
    """One recorded collective (one flight-recorder entry)."""

    pg: ProcessGroup
    seq: int
    op_type: str  # e.g. ALLREDUCE
    numel: int
    entry: dict[str, Any] = field(default_factory=dict)


class FlightRecorder:
    """Records collectives the way PyTorch's NCCL flight recorder does and dumps them."""

    def __init__(self, rank: int, buffer_size: int, history: int) -> None:
        self.rank = rank
        self.buffer_size = buffer_size
        self.history = history
        self.groups: dict[str, ProcessGroup] = {}
        self.entries: list[dict[str, Any]] = []
        self.next_record_id = 0
        self.lock = threading.Lock()
        try:
            self.thread_name = Path("/proc/self/comm").read_text().strip() or "python3"
        except OSError:
            self.thread_name = "python3"

    def add_group(self, pg: ProcessGroup) -> None:
        self.groups[pg.name] = pg

    def record(
        self,
        pg: ProcessGroup,
        profiling_name: str,
        op_type: str,
        sizes: list[list[int]],
        dtype: str,
    ) -> Work:
        with self.lock:
            pg.seq += 1
            pg.last_enqueued = pg.seq
            entry: dict[str, Any] = {
                "record_id": self.next_record_id,
                "pg_id": pg.local_id,
                "process_group": (pg.name, pg.desc),
                "thread_name": self.thread_name,
                "thread_id": str(threading.get_ident()),
                "collective_seq_id": pg.seq,
                "p2p_seq_id": 0,
                "op_id": pg.seq,
                "profiling_name": profiling_name,
                "time_created_ns": time.time_ns(),
                "input_sizes": [list(s) for s in sizes],
                "input_dtypes": [dtype] * len(sizes),
                "output_sizes": [list(s) for s in sizes],
                "output_dtypes": [dtype] * len(sizes),
                "state": "scheduled",
                "time_discovered_started_ns": None,
                "time_discovered_completed_ns": None,
                "retired": False,
                "timeout_ms": pg.timeout_ms,
                "is_p2p": False,
            }
            self.next_record_id += 1
            if self.buffer_size > 0:
                self.entries.append(entry)
                # keep the ring buffer bounded; old completed entries go first
                limit = max(self.buffer_size, self.history) + 64
                if len(self.entries) > limit:
                    del self.entries[: len(self.entries) - limit]
        numel = math.prod(sizes[0]) if sizes else 0
        return Work(pg=pg, seq=pg.seq, op_type=op_type, numel=numel, entry=entry)

    def complete(self, work: Work) -> None:
        with self.lock:
            work.entry["state"] = "completed"
            work.entry["time_discovered_completed_ns"] = time.time_ns()
            work.entry["retired"] = True
            work.pg.last_completed = max(work.pg.last_completed, work.seq)

    def snapshot(self) -> dict[str, Any]:
        """The dump as PyTorch pickles it: version, pg_config, nccl_version, pg_status, entries."""
        with self.lock:
            pending = [e for e in self.entries if e["state"] != "completed"]
            done = [e for e in self.entries if e["state"] == "completed"]
            keep = done[-self.history :] if self.history > 0 else []
            entries = sorted(keep + pending, key=lambda e: int(e["record_id"]))
            if len(entries) > self.buffer_size:
                entries = entries[-self.buffer_size :]
            groups = sorted(self.groups.values(), key=lambda g: g.name)
            pg_config = {
                g.name: {"name": g.name, "desc": g.desc, "ranks": str(list(g.ranks))}
                for g in groups
            }
            by_local = sorted(groups, key=lambda g: str(g.local_id))
            pg_status = {
                str(g.local_id): {
                    "last_enqueued_collective": g.last_enqueued,
                    "last_started_collective": -1,
                    "last_completed_collective": g.last_completed,
                }
                for g in by_local
            }
            return {
                "version": FR_VERSION,
                "pg_config": pg_config,
                "nccl_version": FR_NCCL_VERSION,
                "pg_status": pg_status,
                "entries": [dict(e) for e in entries],
            }

    def dump(self, prefix: str) -> Path | None:
        if self.buffer_size <= 0:
            return None
        path = Path(f"{prefix}{self.rank}")
        path.parent.mkdir(parents=True, exist_ok=True)
        # the temporary name must not match the analyser's `_dump_*` pattern
        tmp = path.with_name(f".tmp{os.getpid()}.{path.name}")
        tmp.write_bytes(pickle.dumps(self.snapshot(), protocol=FR_PICKLE_PROTOCOL))
        os.replace(tmp, path)
        return path


# --------------------------------------------------------------------------------------------
# the TCP coordinator (rank 0) and the per-rank communicator
# --------------------------------------------------------------------------------------------


def send_json(sock: socket.socket, lock: threading.Lock, obj: dict[str, Any]) -> bool:
    data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
    try:
        with lock:
            sock.sendall(data)
        return True
    except OSError:
        return False


@dataclass
class PendingOp:
    op: str
    members: list[int]
    src: int
    contributions: dict[int, list[float]] = field(default_factory=dict)


class Coordinator:
    """Rank 0's collective server: reduces contributions once every member has sent one."""

    def __init__(self, port: int, world: int, bind_timeout: float) -> None:
        self.world = world
        self.lock = threading.Lock()
        self.conns: dict[int, tuple[socket.socket, threading.Lock]] = {}
        self.pending: dict[tuple[str, int], PendingOp] = {}
        self.completed: set[tuple[str, int]] = set()
        self.disconnected: set[int] = set()
        deadline = time.monotonic() + bind_timeout
        while True:
            try:
                self.server = socket.create_server(("", port), backlog=max(64, world * 2))
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"coordinator cannot listen on port {port}: {exc}") from exc
                time.sleep(0.5)
        threading.Thread(target=self._accept_loop, name="coordinator", daemon=True).start()

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        send_lock = threading.Lock()
        rank = -1
        try:
            with conn.makefile("rb") as reader:
                for raw in reader:
                    msg = json.loads(raw)
                    kind = msg.get("t")
                    if kind == "hello":
                        rank = int(msg["rank"])
                        with self.lock:
                            self.conns[rank] = (conn, send_lock)
                            self.disconnected.discard(rank)
                    elif kind == "op":
                        self._contribute(msg)
                    elif kind == "status":
                        send_json(conn, send_lock, self._status(msg))
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a broken or malformed connection counts as a disconnect
        finally:
            with self.lock:
                if rank >= 0 and self.conns.get(rank, (None,))[0] is conn:
                    del self.conns[rank]
                    self.disconnected.add(rank)
            conn.close()

    def _contribute(self, msg: dict[str, Any]) -> None:
        key = (str(msg["pg"]), int(msg["seq"]))
        outbox: list[tuple[socket.socket, threading.Lock]] = []
        result: dict[str, Any] = {}
        with self.lock:
            op = self.pending.get(key)
            if op is None:
                op = PendingOp(
                    op=str(msg["op"]), members=[int(r) for r in msg["members"]], src=int(msg["src"])
                )
                self.pending[key] = op
            op.contributions[int(msg["rank"])] = [float(v) for v in msg["value"]]
            if set(op.contributions) >= set(op.members):
                if op.op == "broadcast":
                    value = op.contributions.get(op.src, next(iter(op.contributions.values())))
                else:
                    vectors = list(op.contributions.values())
                    value = [math.fsum(col) for col in zip(*vectors, strict=True)]
                result = {"t": "res", "pg": key[0], "seq": key[1], "value": value}
                outbox = [self.conns[r] for r in op.members if r in self.conns]
                del self.pending[key]
                self.completed.add(key)
        for conn, lock in outbox:
            send_json(conn, lock, result)

    def _status(self, msg: dict[str, Any]) -> dict[str, Any]:
        key = (str(msg["pg"]), int(msg["seq"]))
        with self.lock:
            op = self.pending.get(key)
            reply: dict[str, Any] = {"t": "status", "pg": key[0], "seq": key[1]}
            if op is None:
                reply["completed"] = key in self.completed
                reply["missing"] = []
            else:
                reply["completed"] = False
                reply["missing"] = sorted(set(op.members) - set(op.contributions))
            reply["disconnected"] = sorted(self.disconnected)
            return reply

    def connected_ranks(self) -> set[int]:
        with self.lock:
            return set(self.conns)


@dataclass
class FaultFlags:
    """Set by fault threads, checked by the main thread in the training / collective path."""

    hang: threading.Event = field(default_factory=threading.Event)  # GPU_SLEEP
    cuda_error: threading.Event = field(default_factory=threading.Event)  # GPU_ERROR
    workload_exc: threading.Event = field(default_factory=threading.Event)  # WORKLOAD_EXC


FLAGS = FaultFlags()

CUDA_ERROR_TEXT = (
    "CUDA error: device-side assert triggered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)


def check_device() -> None:
    """Where a real rank would hit a pending asynchronous CUDA error or a sleeping stream."""
    if FLAGS.cuda_error.is_set():
        raise RuntimeError(CUDA_ERROR_TEXT)
    if FLAGS.hang.is_set():
        # GPU_SLEEP: the stream never drains, so the host blocks here for good.
        threading.Event().wait()


class Communicator:
    """A rank's connection to the coordinator; collectives are synchronous with a timeout."""

    def __init__(self, topo: Topology, addr: str, port: int, recorder: FlightRecorder) -> None:
        self.topo = topo
        self.addr = addr
        self.port = port
        self.recorder = recorder
        self.sock: socket.socket | None = None
        self.send_lock = threading.Lock()
        self.buf = b""
        self.inbox: dict[tuple[str, str, int], dict[str, Any]] = {}
        self.closed_reason = ""

    def connect(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last_error: OSError | None = None
        while time.monotonic() < deadline:
            try:
                sock = socket.create_connection((self.addr, self.port), timeout=2.0)
                break
            except OSError as exc:
                last_error = exc
                time.sleep(0.2)
        else:
            raise RuntimeError(
                f"rank {self.topo.rank}: cannot reach the collective coordinator "
                f"{self.addr}:{self.port} within {timeout:.0f}s: {last_error}"
            )
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(0.2)
        self.sock = sock
        self._send({"t": "hello", "rank": self.topo.rank})

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None

    def _send(self, obj: dict[str, Any]) -> bool:
        if self.sock is None or self.closed_reason:
            return False
        return send_json(self.sock, self.send_lock, obj)

    def _pump(self) -> None:
        """Read what has arrived (waits at most the 0.2 s socket timeout)."""
        if self.sock is None or self.closed_reason:
            time.sleep(0.2)
            return
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            return
        except OSError as exc:
            self.closed_reason = f"connection error: {exc}"
            return
        if not chunk:
            self.closed_reason = "connection closed by the coordinator"
            return
        self.buf += chunk
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            msg = json.loads(line)
            self.inbox[(str(msg["t"]), str(msg["pg"]), int(msg["seq"]))] = msg

    def _wait_for(self, key: tuple[str, str, int], deadline: float) -> dict[str, Any] | None:
        while key not in self.inbox:
            if time.monotonic() >= deadline:
                return None
            self._pump()
        return self.inbox.pop(key)

    def collective(
        self,
        pg: ProcessGroup,
        op: str,
        value: list[float],
        sizes: list[list[int]],
        dtype: str,
        timeout: float,
        src: int | None = None,
    ) -> list[float]:
        check_device()
        op_type = {"all_reduce": "ALLREDUCE", "broadcast": "BROADCAST"}[op]
        work = self.recorder.record(pg, f"nccl:{op}", op_type, sizes, dtype)
        started = time.monotonic()
        self._send(
            {
                "t": "op",
                "pg": pg.name,
                "seq": work.seq,
                "op": op,
                "src": pg.ranks[0] if src is None else src,
                "members": pg.ranks,
                "rank": self.topo.rank,
                "value": value,
            }
        )
        msg = self._wait_for(("res", pg.name, work.seq), started + timeout)
        if msg is None:
            missing, note = self._who_is_missing(pg, work.seq)
            msg = self._wait_for(("res", pg.name, work.seq), time.monotonic())  # a late result?
            if msg is None:
                raise CollectiveTimeout(work, time.monotonic() - started, missing, note)
        self.recorder.complete(work)
        return [float(v) for v in msg["value"]]

    def _who_is_missing(self, pg: ProcessGroup, seq: int) -> tuple[list[int], str]:
        if self._send({"t": "status", "pg": pg.name, "seq": seq}):
            reply = self._wait_for(("status", pg.name, seq), time.monotonic() + 5.0)
            if reply is not None:
                gone = [r for r in reply.get("disconnected", []) if r in reply["missing"]]
                note = (
                    f"; connection to rank(s) {gone} lost (remote process exited or there was "
                    "a network error)"
                    if gone
                    else ""
                )
                return [int(r) for r in reply["missing"]], note
            note = "the collective coordinator (rank 0) does not answer"
        else:
            note = f"the collective coordinator (rank 0) is unreachable ({self.closed_reason})"
        return ([0] if self.topo.rank != 0 else []), f"; {note}"


# --------------------------------------------------------------------------------------------
# fault injection (mirrors NVRx shared_utils/inject_fault.py)
# --------------------------------------------------------------------------------------------


def async_raise(tid: int, exc_type: type[BaseException]) -> None:
    set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)
    set_async_exc.restype = ctypes.c_int
    res = set_async_exc(tid, exc_type)
    if res > 1:
        set_async_exc(tid, None)
        raise RuntimeError("PyThreadState_SetAsyncExc hit more than one thread")


def raise_injected_exception(signum: int, frame: object) -> None:
    if not sys.is_finalizing():
        raise InjectedException


class FaultInjector:
    def __init__(self, fault: str, topo: Topology) -> None:
        self.fault = fault
        self.topo = topo
        self.log = logging.getLogger(INJECT_LOGGER)

    def schedule(self, delay: float) -> None:
        """Print Megatron's marker line, then dispatch the fault (it fires after `delay`)."""
        now = datetime.datetime.now()
        fire_at = now + datetime.timedelta(seconds=delay)
        out(
            f"[{now.strftime(MARKER_TIME)}] FAULT INJECTION: Rank {self.topo.rank} will inject "
            f"fault {self.fault} at {fire_at.strftime(MARKER_TIME)}"
        )
        if self.fault in SIGNAL_FAULTS:
            self._dispatch_signal(SIGNAL_FAULTS[self.fault], delay)
            return
        handlers: dict[str, Callable[[], None]] = {
            "GPU_ERROR": self._gpu_error,
            "GPU_SLEEP": self._gpu_sleep,
            "WORKLOAD_EXC": self._workload_exc,
            "ASYNC_EXC": self._async_exc,
            "OS_ABORT": self._os_abort,
            "LOCK_GIL": self._lock_gil,
            "SEGFAULT": self._segfault,
        }
        handler = handlers[self.fault]

        def run() -> None:
            time.sleep(delay)
            handler()

        threading.Thread(target=run, name=f"inject-{self.fault.lower()}", daemon=True).start()

    # thread-based faults -------------------------------------------------------------------

    def _gpu_error(self) -> None:
        self.log.critical(f"raising GPU error on cuda:{self.topo.local_rank}")
        # what the device-side assert of the out-of-bounds index write prints
        err(
            "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:93: operator(): block: [0,0,0], "
            "thread: [0,0,0] Assertion `-sizes[i] <= index && index < sizes[i] && "
            '"index out of bounds"` failed.'
        )
        FLAGS.cuda_error.set()

    def _gpu_sleep(self) -> None:
        device = self.topo.local_rank
        self.log.critical(f"GPU sleep on {device=}")
        FLAGS.hang.set()

    def _workload_exc(self) -> None:
        self.log.critical(f"raising workload exception at {now_str()}")
        FLAGS.workload_exc.set()

    def _async_exc(self) -> None:
        self.log.critical(f"asynchronously raising {InjectedException}")
        main_tid = threading.main_thread().ident
        if main_tid is not None:
            async_raise(main_tid, InjectedException)

    def _os_abort(self) -> None:
        self.log.critical("aborting")
        os.abort()

    def _lock_gil(self) -> None:
        self.log.critical("locking GIL")
        # catastrophic backtracking inside one C call: the GIL is never released
        re.match(r"(a?){40}a{40}", "a" * 40)

    def _segfault(self) -> None:
        self.log.critical("raising segmentation fault")
        ctypes.string_at(1)

    # signal faults: a forked child sends the signal, as NVRx does -------------------------

    def _dispatch_signal(self, sig: signal.Signals, delay: float) -> None:
        if sig == signal.SIGUSR1:
            signal.signal(signal.SIGUSR1, raise_injected_exception)
        parent = os.getpid()
        child = os.fork()
        if child == 0:  # pragma: no cover - runs in the forked child
            try:
                time.sleep(delay)
                if os.getppid() == parent:
                    line = critical_line(f"sending signal={sig!r} to pid={parent}")
                    os.write(2, line.encode())
                    os.kill(parent, sig)
            finally:
                os._exit(0)
        threading.Thread(target=os.waitpid, args=(child, 0), daemon=True).start()


def maybe_raise_workload_exception() -> None:
    if FLAGS.workload_exc.is_set():
        FLAGS.workload_exc.clear()
        raise InjectedException


# --------------------------------------------------------------------------------------------
# the training loop
# --------------------------------------------------------------------------------------------


@dataclass
class Run:
    args: argparse.Namespace
    topo: Topology
    recorder: FlightRecorder
    comm: Communicator
    coordinator: Coordinator | None
    default_pg: ProcessGroup
    tp_pg: ProcessGroup
    dp_pg: ProcessGroup


def build_groups(topo: Topology, timeout_ms: int) -> tuple[ProcessGroup, ...]:
    """Megatron-like groups with TP=PP=1: default_pg, one TP group per rank, one DP group.

    Names are global creation counters (the same on every rank), local ids count the groups
    this rank belongs to, as in PyTorch.
    """
    everyone = list(range(topo.world))
    default_pg = ProcessGroup("0", DEFAULT_PG_DESC, everyone, 0, timeout_ms)
    tp_pg = ProcessGroup(str(1 + topo.rank), TP_DESC, [topo.rank], 1, timeout_ms)
    dp_pg = ProcessGroup(str(1 + topo.world), DP_DESC, everyone, 2, timeout_ms)
    return default_pg, tp_pg, dp_pg


def synthetic_loss(iteration: int, rank: int) -> float:
    base = 2.2 + 8.6 * math.exp(-iteration / 60.0)
    return base + 0.05 * math.sin(1.7 * iteration + 0.9 * rank)


def interruptible_sleep(seconds: float) -> None:
    """Sleep in short slices, so async exceptions and device errors surface promptly."""
    end = time.monotonic() + seconds
    while True:
        check_device()
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(0.05, left))


def train(run: Run, injector: FaultInjector | None) -> None:
    args, topo, comm = run.args, run.topo, run.comm
    timeout = args.collective_timeout
    world = topo.world
    lr = 1.0e-4
    if injector is not None and args.fault_at_iter <= 0:
        injector.schedule(args.fault_delay)
    if topo.rank == 0:
        out(f"[before the start of training step] datetime: {now_str('%Y-%m-%d %H:%M:%S')}")
    last = time.monotonic()
    for iteration in range(1, args.train_iters + 1):
        # forward / backward
        interruptible_sleep(args.iter_time * 0.8)
        local_loss = synthetic_loss(iteration, topo.rank)
        grad_sq = (0.8 + 0.1 * math.cos(iteration + topo.rank)) ** 2
        grads = comm.collective(
            run.dp_pg, "all_reduce", [grad_sq], [[GRAD_NUMEL]], "BFloat16", timeout
        )
        losses = comm.collective(
            run.dp_pg, "all_reduce", [local_loss, 1.0], [[2]], "Float", timeout
        )
        maybe_raise_workload_exception()
        # pace the loop at --iter-time per iteration
        interruptible_sleep(max(0.0, args.iter_time - (time.monotonic() - last)))
        now = time.monotonic()
        elapsed_ms, last = (now - last) * 1000.0, now
        if iteration % args.log_interval == 0 or iteration == args.train_iters:
            out(
                f" [{now_str('%Y-%m-%d %H:%M:%S')}] iteration {iteration:8d}/{args.train_iters:8d}"
                f" | consumed samples: {iteration * args.global_batch_size:12d}"
                f" | elapsed time per iteration (ms): {elapsed_ms:.1f}"
                f" | learning rate: {lr:.6E}"
                f" | global batch size: {args.global_batch_size:5d}"
                f" | lm loss: {losses[0] / max(losses[1], 1.0):.6E}"
                f" | loss scale: 1.0"
                f" | grad norm: {math.sqrt(grads[0] / world):.3f}"
                f" | number of skipped iterations:   0 | number of nan iterations:   0 |"
            )
        if injector is not None and iteration == args.fault_at_iter:
            injector.schedule(args.fault_delay)
    comm.collective(run.default_pg, "all_reduce", [1.0], [[1]], "Float", timeout)
    if topo.rank == 0:
        out(f"[after training is done] datetime: {now_str('%Y-%m-%d %H:%M:%S')}")


def linger_for_peers(run: Run, seconds: float, ignore: tuple[int, ...] = ()) -> None:
    """Rank 0 keeps the coordinator up until the other ranks have gone (or `seconds` pass).

    Peers may still need it: to fetch the last result, or to ask who is missing.
    """
    if run.coordinator is None:
        return
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and run.coordinator.connected_ranks() - {0, *ignore}:
        time.sleep(0.1)


def pg_tag(pg: ProcessGroup, rank: int) -> str:
    return f"[PG ID {pg.local_id} PG GUID {pg.name}({pg.desc}) Rank {rank}]"


def on_timeout(run: Run, exc: CollectiveTimeout) -> NoReturn:
    """What PyTorch's NCCL watchdog does on a timeout: report, dump, take the process down."""
    rank, work, pg = run.topo.rank, exc.work, exc.work.pg
    ran_ms = int(exc.waited_s * 1000)
    what = (
        f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={work.seq}, "
        f"OpType={work.op_type}, NumelIn={work.numel}, NumelOut={work.numel}, "
        f"Timeout(ms)={pg.timeout_ms}) ran for {ran_ms} milliseconds before timing out."
    )
    tag = pg_tag(pg, rank)
    err(f"{glog_prefix(rank)} {what}")
    err(
        f"{glog_prefix(rank)} {tag} failure detected by watchdog at work sequence id: {work.seq} "
        f"PG status: last enqueued work: {pg.last_enqueued}, last completed work: "
        f"{pg.last_completed}"
    )
    missing = ", ".join(str(r) for r in exc.missing) or "unknown"
    err(
        f"{glog_prefix(rank)} {tag} Ranks missing from collective {work.op_type} "
        f"SeqNum={work.seq}: [{missing}]{exc.note}"
    )
    err(
        f"{glog_prefix(rank)} {tag} Some NCCL operations have failed or timed out. Due to the "
        "asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
        "corrupted/incomplete data."
    )
    err(
        f"{glog_prefix(rank)} {tag} To avoid data inconsistency, we are taking the entire "
        "process down."
    )
    if run.args.dump_on_timeout:
        write_dump(run)
    linger_for_peers(run, 10.0, ignore=tuple(exc.missing))
    err("terminate called after throwing an instance of 'c10::DistBackendError'")
    err(f"  what():  {tag} Process group watchdog thread terminated with exception: {what}")
    die(run.args.timeout_exit, 1)


def write_dump(run: Run) -> None:
    rank = run.topo.rank
    tag = pg_tag(run.default_pg, rank)
    err(f"{glog_prefix(rank)} {tag} ProcessGroupNCCL preparing to dump debug info.")
    try:
        path = run.recorder.dump(run.args.dump_prefix)
    except OSError as exc:
        err(f"{glog_prefix(rank)} {tag} failed to write the flight recorder dump: {exc}")
        return
    if path is not None:
        err(f"{glog_prefix(rank, 'I')} {tag} Flight recorder dump written to {path}")


def die(mode: str, code: int) -> NoReturn:
    sys.stdout.flush()
    sys.stderr.flush()
    if mode == "abort":
        # like std::terminate in PyTorch's watchdog; no core file from the survivors
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.abort()
    os._exit(code)


def on_cuda_error(run: Run) -> NoReturn:
    """GPU_ERROR: the traceback of the main thread, then the watchdog sees the CUDA error too."""
    traceback.print_exc()
    rank = run.topo.rank
    tag = pg_tag(run.dp_pg, rank)
    what = "CUDA error: device-side assert triggered"
    err(
        f"{glog_prefix(rank)} {tag} Process group watchdog thread terminated with exception: {what}"
    )
    if run.args.dump_on_timeout:
        write_dump(run)
    err("terminate called after throwing an instance of 'c10::DistBackendError'")
    err(f"  what():  {tag} Process group watchdog thread terminated with exception: {what}")
    die("abort", 1)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    topo = Topology.from_env()
    setup_logging()
    timeout_ms = int(args.collective_timeout * 1000)
    recorder = FlightRecorder(topo.rank, args.fr_buffer_size, args.fr_history)
    default_pg, tp_pg, dp_pg = build_groups(topo, timeout_ms)
    for pg in (default_pg, tp_pg, dp_pg):
        recorder.add_group(pg)

    addr, how = coordinator_address(args.master_addr)
    coordinator = None
    if topo.rank == 0:
        coordinator = Coordinator(args.port, topo.world, bind_timeout=30.0)
        out(
            f"> initializing torch distributed ... world size {topo.world}, collective "
            f"coordinator on port {args.port}"
        )
        out(
            f"using world size: {topo.world}, data-parallel size: {topo.world}, "
            "tensor-model-parallel size: 1, pipeline-model-parallel size: 1"
        )
    comm = Communicator(topo, addr, args.port, recorder)
    comm.connect(args.rendezvous_timeout)
    out(
        f"> rank {topo.rank} (local rank {topo.local_rank}) on node {topo.node}, pid {os.getpid()}"
        f": joined the collective coordinator at {addr}:{args.port} ({how})"
    )
    run = Run(args, topo, recorder, comm, coordinator, default_pg, tp_pg, dp_pg)

    injector = None
    if args.enable_fault_injection and args.fault_rank == topo.rank:
        injector = FaultInjector(args.fault_type, topo)
    if args.enable_fault_injection and topo.rank == 0 and not 0 <= args.fault_rank < topo.world:
        err(f"WARNING: FAULT_RANK={args.fault_rank} is outside 0..{topo.world - 1}; no fault")

    try:
        # start-up collectives: a barrier on default_pg, then Megatron-like group set-up
        comm.collective(default_pg, "all_reduce", [1.0], [[1]], "Float", args.rendezvous_timeout)
        comm.collective(tp_pg, "broadcast", [0.0], [[1024]], "Float", args.collective_timeout)
        comm.collective(dp_pg, "broadcast", [0.0], [[1024]], "Float", args.collective_timeout)
        if topo.rank == 0:
            out(f"> initialized data parallel with size {topo.world}")
            out(f"training for {args.train_iters} iterations ...")
        train(run, injector)
    except CollectiveTimeout as exc:
        on_timeout(run, exc)
    except RuntimeError:
        if not FLAGS.cuda_error.is_set():
            raise
        on_cuda_error(run)
    comm.close()
    linger_for_peers(run, 10.0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
