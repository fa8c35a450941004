#!/usr/bin/env python3
"""A CPU rehearsal stand-in for NVRx's `ft_launcher`.

It speaks the flags the nvrx generation script passes to `ft_launcher` and writes the same files
(cycle-info JSON and its `.current` symlink, the launcher log, per-cycle app logs), so a singleton
chain can be rehearsed end to end on any Slurm cluster before spending GPU hours.

What it fakes: the rendezvous goes through a directory on the shared filesystem instead of a
TCPStore (`<dirname(--ft-cycle-info-dir)>/rehearsal_rdzv/<rdzv-id>.<attempt>/`); the node whose
name is the host of `--rdzv-endpoint` plays the store host (the leader). No GPU, no section
timeouts, no attribution. See README.md next to this file for the full contract.

Standard library only: it runs on compute nodes with a plain python3.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import IO, Any, NamedTuple

NO_RESTART_EXIT_CODE = 93  # NVRx's "do not restart" verdict; the chain's teardown looks for it
# How often every wait loop looks at the shared directory; raise it for many nodes on Lustre/NFS.
POLL_SECONDS = float(os.environ.get("NVRX_REHEARSAL_POLL", "").strip() or 0.1)
HEARTBEAT_SECONDS = 1.0  # how often each launcher proves it is alive

# Flags of the generation script that take a value; everything else starting with --ft- is
# accepted and ignored so newer generation scripts still run.
VALUE_FLAGS = (
    "--nnodes",
    "--nproc-per-node",
    "--rdzv-id",
    "--rdzv-endpoint",
    "--rdzv-backend",
    "--rdzv-conf",
    "--max-restarts",
    "--ft-cycle-info-dir",
    "--ft-per-cycle-applog-prefix",
    "--ft-nvrx-logfile",
    "--ft-checkpoint-iteration-file",
    "--ft-rank-section-timeouts",
    "--ft-rank-out-of-section-timeout",
    "--ft-node-health-check-endpoint",
    "--ft-segment",
    "--ft-max-no-progress-cycles",
    "--ft-storage-health-check-path",
)


class LauncherExit(Exception):
    """Leave the launcher with this exit code; raised from anywhere, handled once in run()."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


# ----------------------------------------------------------------------------- small helpers


def utc_iso() -> str:
    """Cycle-info time format: ISO-8601 UTC with microseconds and a Z suffix."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    return float(raw) if raw else default


def atomic_write(path: Path, text: str) -> None:
    """Hidden tmp file + os.replace: a reader on another node never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object, or None when the file is missing or (being replaced and) unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def read_int_file(path: str | None) -> int | None:
    """The single integer in a checkpoint-iteration file; missing or garbage means no value."""
    if not path:
        return None
    try:
        raw = Path(path).read_text().strip()
        return int(raw) if raw else None
    except (OSError, ValueError):
        return None


def compress_ranks(ranks: list[int]) -> str:
    """[0, 1, 2, 3, 6] -> "0-3,6" (NVRx's active_ranks format)."""
    parts: list[str] = []
    start = prev = None
    for rank in sorted(ranks):
        if prev is not None and rank == prev + 1:
            prev = rank
            continue
        if start is not None:
            parts.append(f"{start}-{prev}" if start != prev else f"{start}")
        start = prev = rank
    if start is not None:
        parts.append(f"{start}-{prev}" if start != prev else f"{start}")
    return ",".join(parts)


def hostlist(nodes: list[str]) -> str:
    """A Slurm hostlist ("n[1-2]"), via scontrol when present; scontrol keeps the given order, so
    active_ranks stays aligned with it. Without scontrol, a plain comma list."""
    if not nodes:
        return ""
    scontrol = shutil.which("scontrol")
    if scontrol:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            proc = subprocess.run(
                [scontrol, "show", "hostlist", ",".join(nodes)],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
            if proc.returncode == 0 and proc.stdout.strip():
                return proc.stdout.strip()
    return ",".join(nodes)


def cycle_log_path(prefix: str | None, cycle: int) -> str:
    """NVRx's per-cycle app log name: `<prefix without extension>_cycle<N><extension or .log>`."""
    if not prefix:
        return ""
    base, ext = os.path.splitext(os.path.abspath(prefix))
    return f"{base}_cycle{cycle}{ext or '.log'}"


def node_name() -> str:
    """The Slurm node name; the short hostname outside Slurm."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def parse_injections(spec: str) -> set[tuple[int, int]]:
    """NVRX_INJECT_GPU_FAILURE "cycle:infra_rank,..." -> {(cycle, infra_rank)}; empty = off."""
    pairs: set[tuple[int, int]] = set()
    for entry in spec.split(","):
        if entry.strip():
            cycle, _, rank = entry.partition(":")
            pairs.add((int(cycle), int(rank)))
    return pairs


# ----------------------------------------------------------------------------- command line


@dataclass
class Config:
    min_nodes: int
    max_nodes: int
    nproc: int
    rdzv_id: str
    host: str
    port: str
    join_timeout: float
    store_connect_wait: float
    max_restarts: int
    cycle_info_dir: Path
    applog_prefix: str | None
    nvrx_logfile: str | None
    iteration_file: str | None
    max_no_progress_cycles: int
    script: str
    script_args: list[str]
    notes: list[str] = field(default_factory=list)  # log lines about ignored flags
    storage_paths: list[str] = field(default_factory=list)  # must exist before each rendezvous


def normalise_flag(token: str) -> str:
    """`--ft_cycle_info_dir=x` -> `--ft-cycle-info-dir=x`: NVRx accepts both spellings."""
    if not token.startswith("--"):
        return token
    name, eq, value = token.partition("=")
    return name.replace("_", "-") + eq + value


def looks_like_value(argv: list[str], index: int) -> bool:
    """Whether argv[index] is the value of an unknown `--ft-x VALUE` flag rather than the training
    script: not a flag, not a .py file, and something still follows it (the script)."""
    if index + 1 >= len(argv):
        return False
    token = argv[index]
    return not token.startswith("-") and not token.endswith(".py")


def split_argv(argv: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(launcher options, ignored unknown --ft-* options, [script, *script args]).

    argparse alone cannot skip unknown `--ft-x VALUE` flags without eating the training script.
    """
    options: list[str] = []
    ignored: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return options, ignored, argv[i + 1 :]
        if not token.startswith("-"):
            return options, ignored, argv[i:]
        token = normalise_flag(token)
        name, eq, _ = token.partition("=")
        if name.startswith("--ft-") and name not in VALUE_FLAGS:
            ignored.append(token)
            if not eq and looks_like_value(argv, i + 1):
                ignored[-1] += f" {argv[i + 1]}"
                i += 1
        else:
            options.append(token)
            if name in VALUE_FLAGS and not eq and i + 1 < len(argv):
                options.append(argv[i + 1])
                i += 1
        i += 1
    return options, ignored, []


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ft_launcher (rehearsal)",
        usage="%(prog)s [options] TRAIN_SCRIPT [TRAIN_ARGS...]",
        description="CPU rehearsal stand-in for NVRx ft_launcher (file rendezvous, no GPUs).",
        allow_abbrev=False,
    )
    add = parser.add_argument
    add("--nnodes", required=True, help="MIN:MAX (or N); nodes beyond MIN are hot spares")
    add("--nproc-per-node", type=int, default=1, help="workers per active node")
    add("--rdzv-id", default=None, help="rendezvous id (the array job id)")
    add("--rdzv-endpoint", required=True, help="HOST:PORT; the node named HOST leads")
    add("--rdzv-conf", default="", help="join_timeout=S,store_connect_wait_seconds=S")
    add("--max-restarts", type=int, default=0, help="in-job restarts before exit 1")
    add("--ft-cycle-info-dir", required=True, help="cycle-info directory (shared filesystem)")
    add("--ft-per-cycle-applog-prefix", default=None, help="app log prefix (<p>_cycle<N>.log)")
    add("--ft-nvrx-logfile", default=None, help="launcher log, appended")
    add("--ft-checkpoint-iteration-file", default=None, help="progress file (one integer)")
    add("--ft-max-no-progress-cycles", type=int, default=3, help="exit 93 after K (<=0: off)")
    add(
        "--ft-storage-health-check-path",
        default=None,
        help="comma-separated absolute paths that must exist before each rendezvous",
    )
    for unused in (
        "--rdzv-backend",  # NVRx's default and the generation script's is c10d: a file here
        "--ft-rank-section-timeouts",
        "--ft-rank-out-of-section-timeout",
        "--ft-node-health-check-endpoint",
        "--ft-segment",
    ):
        add(unused, default=None, help="accepted, not simulated")
    return parser


def parse_nnodes(parser: argparse.ArgumentParser, value: str) -> tuple[int, int]:
    low, _, high = value.partition(":")
    try:
        nodes = (int(low), int(high or low))
    except ValueError:
        parser.error(f"--nnodes {value!r}: expected MIN:MAX or N")
    if not 1 <= nodes[0] <= nodes[1]:
        parser.error(f"--nnodes {value!r}: need 1 <= MIN <= MAX")
    return nodes


def parse_rdzv_conf(value: str, notes: list[str]) -> dict[str, float]:
    conf = {"join_timeout": 600.0, "store_connect_wait_seconds": 300.0}
    for item in value.split(","):
        key, _, raw = item.partition("=")
        key = key.strip()
        if not key:
            continue
        if key in conf:
            conf[key] = float(raw)
        else:
            notes.append(f"ignoring --rdzv-conf key not simulated by the rehearsal: {item}")
    return conf


def parse_config(argv: list[str]) -> Config:
    options, ignored, command = split_argv(argv)
    parser = build_parser()
    args = parser.parse_args(options)
    if not command:
        parser.error("missing TRAIN_SCRIPT")
    notes = [f"ignoring unknown flag (newer ft_launcher?): {flag}" for flag in ignored]
    for name in ("rank_section_timeouts", "rank_out_of_section_timeout", "segment"):
        if getattr(args, f"ft_{name}") is not None:
            notes.append(f"--ft-{name.replace('_', '-')} accepted but not simulated")
    if args.ft_node_health_check_endpoint:
        notes.append("--ft-node-health-check-endpoint is not contacted; NVRX_INJECT_GPU_FAILURE is")
    host, _, port = args.rdzv_endpoint.rpartition(":")
    if not host:
        host, port = args.rdzv_endpoint, "29400"
    min_nodes, max_nodes = parse_nnodes(parser, args.nnodes)
    conf = parse_rdzv_conf(args.rdzv_conf, notes)
    storage_paths = [p.strip() for p in (args.ft_storage_health_check_path or "").split(",")]
    storage_paths = [p for p in storage_paths if p]
    for path in storage_paths:
        if not path.startswith("/"):
            parser.error(f"--ft-storage-health-check-path: path must be absolute: {path!r}")
    return Config(
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        nproc=args.nproc_per_node,
        rdzv_id=args.rdzv_id or job_id() or "local",
        host=host,
        port=port,
        join_timeout=conf["join_timeout"],
        store_connect_wait=conf["store_connect_wait_seconds"],
        max_restarts=args.max_restarts,
        cycle_info_dir=Path(args.ft_cycle_info_dir).absolute(),
        applog_prefix=args.ft_per_cycle_applog_prefix,
        nvrx_logfile=args.ft_nvrx_logfile,
        iteration_file=args.ft_checkpoint_iteration_file,
        max_no_progress_cycles=args.ft_max_no_progress_cycles,
        script=command[0],
        script_args=command[1:],
        notes=notes,
        storage_paths=storage_paths,
    )


def job_id() -> str:
    """The cycle-info job id: the array job id, else the job id ("" outside Slurm)."""
    return os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID") or ""


def attempt_index() -> int:
    # Slurm sets SLURM_RESTART_COUNT; upstream NVRx reads SLURM_RESTART_CNT. Accept both.
    raw = os.environ.get("SLURM_RESTART_COUNT") or os.environ.get("SLURM_RESTART_CNT") or "0"
    try:
        return int(raw)
    except ValueError:
        return 0


# ----------------------------------------------------------------------------- logging


class Log:
    """Launcher lines go to stdout and are appended to --ft-nvrx-logfile (shared by all nodes)."""

    def __init__(self, node: str, logfile: str | None) -> None:
        self.node = node
        self.lock = threading.Lock()
        self.fd: int | None = None
        if logfile:
            Path(logfile).parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(logfile, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def info(self, message: str) -> None:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._emit(f"[launcher {self.node} {stamp}] {message}", self.fd)

    def event(self, cycle: int, event: str, rank: int | None) -> None:
        """NVRx profiler-style line; watch and people read rendezvous/restart timings from these."""
        stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        line = f"  - Cycle: {cycle} Event: {event} Node: {self.node} Rank: {rank} Time: {stamp} UTC"
        self._emit(line, self.fd)

    def worker_line(self, line: str, applog_fd: int | None) -> None:
        """A worker's output line: to stdout and to the cycle's app log, not the launcher log."""
        self._emit(line, applog_fd)

    def _emit(self, line: str, fd: int | None) -> None:
        with self.lock:
            with contextlib.suppress(OSError, ValueError):
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            if fd is not None:
                # One write per line on an O_APPEND fd: lines from several nodes do not interleave.
                with contextlib.suppress(OSError):
                    os.write(fd, (line + "\n").encode(errors="replace"))


# ----------------------------------------------------------------------------- rendezvous files


@dataclass(frozen=True)
class Roster:
    """Who is in a closed round: `order` is active then standby; infra rank = index in it."""

    active: list[str]
    standby: list[str]

    @property
    def order(self) -> list[str]:
        return self.active + self.standby


class RdzvDir:
    """The shared-directory replacement for the TCPStore. Layout (all JSON, atomic writes):

    heartbeat.<node>        every launcher rewrites it each second (liveness)
    left.<node>             a launcher that exits on purpose says so (faster than a stale beat)
    stop                    the leader's generation-wide verdict: {"code", "reason"}
    round.<c>/join.<node>   a node joined round c
    round.<c>/closed        the leader closed round c: {"active": [...], "standby": [...]}
    round.<c>/result.<node> an active node's workers finished: {"ok": bool, "reason"}
    round.<c>/end           the leader ended cycle c: {"outcome", "reason", "stop_code"}
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def round_dir(self, cycle: int) -> Path:
        path = self.root / f"round.{cycle}"
        path.mkdir(exist_ok=True)
        return path

    def latest_round(self) -> int:
        """Where a launcher that starts late joins: the newest round anyone has opened."""
        rounds = [0]
        for entry in self.root.glob("round.*"):
            with contextlib.suppress(ValueError):
                rounds.append(int(entry.name.split(".", 1)[1]))
        return max(rounds)

    def join(self, cycle: int, node: str) -> None:
        info = {"node": node, "time": time.time(), "pid": os.getpid()}
        atomic_write(self.round_dir(cycle) / f"join.{node}", json.dumps(info))

    def joins(self, cycle: int) -> dict[str, float]:
        """node -> join time (wall clock of the joiner) for round c."""
        found: dict[str, float] = {}
        for path in self.round_dir(cycle).glob("join.*"):
            info = read_json(path)
            if info is not None:
                found[path.name[len("join.") :]] = float(info.get("time", 0.0))
        return found

    def close(self, cycle: int, roster: Roster) -> None:
        data = {"active": roster.active, "standby": roster.standby, "closed_at": utc_iso()}
        atomic_write(self.round_dir(cycle) / "closed", json.dumps(data))

    def closed(self, cycle: int) -> Roster | None:
        data = read_json(self.round_dir(cycle) / "closed")
        if data is None:
            return None
        return Roster(list(data["active"]), list(data["standby"]))

    def write_result(self, cycle: int, node: str, ok: bool, reason: str) -> None:
        data = {"ok": ok, "reason": reason}
        atomic_write(self.round_dir(cycle) / f"result.{node}", json.dumps(data))

    def result(self, cycle: int, node: str) -> dict[str, Any] | None:
        return read_json(self.round_dir(cycle) / f"result.{node}")

    def write_end(self, cycle: int, outcome: str, reason: str, stop_code: int | None) -> None:
        data = {"outcome": outcome, "reason": reason, "stop_code": stop_code}
        atomic_write(self.round_dir(cycle) / "end", json.dumps(data))

    def end(self, cycle: int) -> dict[str, Any] | None:
        return read_json(self.round_dir(cycle) / "end")

    def write_stop(self, code: int, reason: str, by: str) -> None:
        atomic_write(self.root / "stop", json.dumps({"code": code, "reason": reason, "by": by}))

    def stop(self) -> dict[str, Any] | None:
        return read_json(self.root / "stop")

    def heartbeat_path(self, node: str) -> Path:
        return self.root / f"heartbeat.{node}"

    def write_left(self, node: str, code: int, reason: str) -> None:
        atomic_write(self.root / f"left.{node}", json.dumps({"code": code, "reason": reason}))

    def has_left(self, node: str) -> bool:
        return (self.root / f"left.{node}").exists()


class Heartbeat(threading.Thread):
    """Rewrites heartbeat.<node> every second with a counter. Readers time how long the content
    has not changed on their own monotonic clock, so node clock skew does not matter."""

    def __init__(self, path: Path) -> None:
        super().__init__(name="heartbeat", daemon=True)
        self.path = path
        self.stopped = threading.Event()

    def run(self) -> None:
        beat = 0
        while not self.stopped.is_set():
            beat += 1
            with contextlib.suppress(OSError):
                atomic_write(self.path, f"{beat} {utc_iso()} {os.getpid()}\n")
            self.stopped.wait(HEARTBEAT_SECONDS)


class Freshness:
    """Seconds since each watched file last changed, as seen by this process."""

    def __init__(self) -> None:
        self.seen: dict[Path, tuple[str, float]] = {}

    def age(self, path: Path) -> float | None:
        """None until the file has been seen at least once."""
        content = read_text(path)
        now = time.monotonic()
        previous = self.seen.get(path)
        if content is not None and (previous is None or previous[0] != content):
            self.seen[path] = (content, now)
            return 0.0
        return None if previous is None else now - previous[1]


# ----------------------------------------------------------------------------- cycle-info


class CycleInfoWriter:
    """NVRx cycle-info files, exactly as ft_launcher's rendezvous host writes them (watch.md 1)."""

    def __init__(self, directory: Path, job: str, attempt: int, applog_prefix: str | None) -> None:
        self.directory = directory
        self.job = job
        self.attempt = attempt
        self.applog_prefix = applog_prefix
        self.current: tuple[Path, dict[str, Any]] | None = None
        directory.mkdir(parents=True, exist_ok=True)

    @property
    def symlink(self) -> Path:
        return self.directory / f"cycle_info.{self.job}.current"

    def open(self, cycle: int, active: list[str], standby: list[str]) -> None:
        self.close()  # NVRx closes a still-open previous cycle first
        payload: dict[str, Any] = {
            "job_id": self.job,
            "attempt_index": self.attempt,
            "cycle_number": cycle,
            "cycle_start_time": utc_iso(),
            "cycle_end_time": "",
            "cycle_log_file": cycle_log_path(self.applog_prefix, cycle),
            "active_nodes": hostlist(active),
            "standby_nodes": hostlist(standby),
            "generation": "0",  # protobuf JSON renders uint64 as a string
            "active_ranks": compress_ranks(list(range(len(active)))),
        }
        path = self.directory / f"cycle_info.{self.job}.{self.attempt}.{cycle}"
        self._write(path, payload)
        self._point_current_at(path.name)
        self.current = (path, payload)

    def close(self) -> None:
        """Set cycle_end_time and bump generation (the CAS counter), once per cycle."""
        if self.current is None:
            return
        path, payload = self.current
        payload["cycle_end_time"] = utc_iso()
        payload["generation"] = str(int(payload["generation"]) + 1)
        self._write(path, payload)
        self.current = None

    @staticmethod
    def _write(path: Path, payload: dict[str, Any]) -> None:
        # `<name>.tmp` is what NVRx uses and what readers skip.
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(payload, indent=2))
        os.replace(tmp, path)

    def _point_current_at(self, name: str) -> None:
        # Relative target: the shared filesystem may be mounted at another path on the reader.
        tmp = self.directory / f"cycle_info.{self.job}.current.tmp"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        os.symlink(name, tmp)
        os.replace(tmp, self.symlink)


# ----------------------------------------------------------------------------- progress


class ProgressTracker:
    """NVRx's TrainingProgressTracker on the checkpoint-iteration file: the baseline is seeded from
    the file, so a file that never changes never shows progress (the exit-93 demo)."""

    def __init__(self, path: str | None, max_cycles: int, log: Log) -> None:
        self.path = path
        self.max_cycles = max_cycles
        self.log = log
        self.baseline = read_int_file(path) or 0
        self.no_progress = 0
        self.warned = False

    def cycle_start(self) -> None:
        self.baseline = max(self.baseline, read_int_file(self.path) or 0)

    def should_stop(self, cycle: int) -> bool:
        """Called when cycle `cycle` failed, before deciding to restart."""
        if self.max_cycles <= 0:
            return False
        start, end = self.baseline, read_int_file(self.path) or 0
        self.baseline = end
        if start == 0 and end == 0:
            # Like NVRx: no iteration reported at all is "unknown", not "no progress".
            if not self.warned:
                self.log.info("progress tracking inactive: no checkpoint iteration reported yet")
                self.warned = True
            return False
        if end - start >= 1:
            self.log.info(f"Training cycle #{cycle} made progress: {start} → {end}")
            self.no_progress = 0
            return False
        self.no_progress += 1
        self.log.info(
            f"Training cycle #{cycle} made NO progress: {start} → {end} "
            f"({end - start} iterations, need 1). Consecutive cycles without progress: "
            f"{self.no_progress}/{self.max_cycles}"
        )
        if self.no_progress < self.max_cycles:
            return False
        self.log.info(
            f"EARLY TERMINATION: {self.no_progress} consecutive training cycles without progress "
            f"(threshold: {self.max_cycles}). Training stuck at iteration ~{end}."
        )
        return True


# ----------------------------------------------------------------------------- workers


class WorkerPoll(NamedTuple):
    state: str  # "running", "failed" or "succeeded"
    rank: int = -1
    code: int = 0


@dataclass
class Worker:
    rank: int
    proc: subprocess.Popen[bytes]
    reader: threading.Thread


def die_with_launcher(launcher_pid: int) -> None:
    """preexec_fn: on Linux, SIGTERM the worker when its launcher dies (even by SIGKILL). On Slurm
    the step cgroup does this; on a plain machine orphans would otherwise train on."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    if os.getppid() != launcher_pid:  # the launcher died before prctl took effect
        os._exit(1)


def describe_code(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


class WorkerGroup:
    """The G workers of one active node in one cycle."""

    def __init__(self, log: Log, applog: str) -> None:
        self.log = log
        self.workers: list[Worker] = []
        self.applog_fd: int | None = None
        if applog:
            Path(applog).parent.mkdir(parents=True, exist_ok=True)
            self.applog_fd = os.open(applog, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def start(self, command: list[str], envs: list[dict[str, str]]) -> None:
        launcher_pid = os.getpid()
        for env in envs:
            proc = subprocess.Popen(
                command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: stop() also reaches grandchildren
                preexec_fn=lambda: die_with_launcher(launcher_pid),
            )
            rank = int(env["RANK"])
            reader = threading.Thread(target=self._pump, args=(rank, proc.stdout), daemon=True)
            reader.start()
            self.workers.append(Worker(rank, proc, reader))

    def _pump(self, rank: int, stream: IO[bytes]) -> None:
        """Copy one worker's output, line by line with a `<rank>: ` prefix."""
        for raw in iter(stream.readline, b""):
            text = raw.decode(errors="replace").rstrip("\r\n")
            self.log.worker_line(f"{rank}: {text}", self.applog_fd)
        stream.close()

    def poll(self) -> WorkerPoll:
        codes = [(w.rank, w.proc.poll()) for w in self.workers]
        for rank, code in codes:
            if code is not None and code != 0:
                return WorkerPoll("failed", rank, code)
        if all(code == 0 for _, code in codes):
            return WorkerPoll("succeeded")
        return WorkerPoll("running")

    def running(self) -> bool:
        return any(w.proc.poll() is None for w in self.workers)

    def stop(self, grace: float) -> None:
        """SIGTERM every live worker's process group, SIGKILL what is left after `grace` seconds."""
        live = [w for w in self.workers if w.proc.poll() is None]
        for worker in live:
            self._signal(worker, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(w.proc.poll() is None for w in live):
            time.sleep(0.05)
        for worker in live:
            if worker.proc.poll() is None:
                self.log.info(f"rank {worker.rank} ignored SIGTERM for {grace:g}s: SIGKILL")
                self._signal(worker, signal.SIGKILL)
            worker.proc.wait()
        for worker in self.workers:
            worker.reader.join(timeout=2)
        if self.applog_fd is not None:
            os.close(self.applog_fd)
            self.applog_fd = None

    @staticmethod
    def _signal(worker: Worker, sig: signal.Signals) -> None:
        try:
            os.killpg(worker.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                worker.proc.send_signal(sig)


# ----------------------------------------------------------------------------- the launcher


class Launcher:
    """One node's launcher. The leader (store host) closes rounds, judges cycles, writes cycle-info
    and publishes verdicts; followers join, run workers and obey."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.node = node_name()
        self.leader = cfg.host
        self.is_leader = self.node in (cfg.host, cfg.host.split(".")[0])
        self.log = Log(self.node, cfg.nvrx_logfile)
        self.job = job_id() or cfg.rdzv_id
        self.attempt = attempt_index()
        root = cfg.cycle_info_dir.parent / "rehearsal_rdzv" / f"{cfg.rdzv_id}.{self.attempt}"
        self.rdzv = RdzvDir(root)
        self.injections = parse_injections(os.environ.get("NVRX_INJECT_GPU_FAILURE", ""))
        self.last_call = env_float("NVRX_REHEARSAL_LAST_CALL", 2.0)
        self.node_timeout = env_float("NVRX_REHEARSAL_NODE_TIMEOUT", 10.0)
        self.store_timeout = min(
            env_float("NVRX_REHEARSAL_STORE_TIMEOUT", 15.0), cfg.store_connect_wait
        )
        self.term_grace = env_float("NVRX_REHEARSAL_TERM_GRACE", 5.0)
        self.freshness = Freshness()
        self.heartbeat = Heartbeat(self.rdzv.heartbeat_path(self.node))
        self.started = time.monotonic()
        self.workers: WorkerGroup | None = None
        self.infra_rank: int | None = 0 if self.is_leader else None
        self.previous_active: list[str] = []
        self.stop_published = False
        self.cycle_info: CycleInfoWriter | None = None
        self.tracker: ProgressTracker | None = None
        if self.is_leader:
            self.cycle_info = CycleInfoWriter(
                cfg.cycle_info_dir, self.job, self.attempt, cfg.applog_prefix
            )
            self.tracker = ProgressTracker(cfg.iteration_file, cfg.max_no_progress_cycles, self.log)

    # --- entry point

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        try:
            self._announce()
            self.heartbeat.start()
            code, reason = self._main(), "training finished"
        except LauncherExit as exc:
            code, reason = exc.code, exc.reason
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)  # a second signal must not interrupt the cleanup
        self._shutdown(code, reason)
        return code

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        raise LauncherExit(128 + signum, f"received {signal.Signals(signum).name}")

    def _announce(self) -> None:
        cfg = self.cfg
        role = "leader (store host)" if self.is_leader else f"follower of {self.leader}"
        self.log.info(
            f"rehearsal ft_launcher on {self.node}: {role}; nnodes {cfg.min_nodes}:{cfg.max_nodes}"
            f", {cfg.nproc} workers/node, max restarts {cfg.max_restarts}, rendezvous dir "
            f"{self.rdzv.root}"
        )
        for note in cfg.notes:
            self.log.info(note)

    def _main(self) -> int:
        cycle = 0 if self.is_leader else self.rdzv.latest_round()
        while True:
            cycle, roster = self._rendezvous(cycle)
            stop_code = self._run_cycle(cycle, roster)
            if stop_code is not None:
                return stop_code
            cycle += 1

    # --- rendezvous

    def _rendezvous(self, cycle: int) -> tuple[int, Roster]:
        """Join round `cycle`; a node that arrives after the round closed waits for the next."""
        while True:
            self._storage_check(cycle)
            self.rdzv.join(cycle, self.node)
            self.log.event(cycle, "rendezvous_started", self.infra_rank)
            roster = self._close_round(cycle) if self.is_leader else self._await_close(cycle)
            if self.node in roster.order:
                return cycle, roster
            self.log.info(f"cycle {cycle}: joined after the round closed; standby for the next")
            cycle += 1

    def _storage_check(self, cycle: int) -> None:
        """--ft-storage-health-check-path, as ft_launcher runs it: every path must exist before
        this node joins a rendezvous, else the node is unhealthy and leaves (exit 1, never the
        no-restart code). The chain's drain poller removes a task's path while it holds a
        drained node."""
        missing = [p for p in self.cfg.storage_paths if not os.path.exists(p)]
        if not missing:
            return
        self.log.event(cycle, "failure_detected", self.infra_rank)
        raise LauncherExit(
            1, f"storage health check failed on {self.node}: {', '.join(missing)} missing"
        )

    def _await_close(self, cycle: int) -> Roster:
        while True:
            self._check_leader()
            roster = self.rdzv.closed(cycle)
            if roster is not None:
                return roster
            time.sleep(POLL_SECONDS)

    def _close_round(self, cycle: int) -> Roster:
        """Close when MAX joined, or >= MIN joined and nobody new came for the last-call period;
        fail the generation when MIN did not join within join_timeout."""
        start = last_join = time.monotonic()
        seen: set[str] = set()
        while True:
            joins = {n: t for n, t in self.rdzv.joins(cycle).items() if self._node_alive(n)}
            if set(joins) - seen:
                seen |= set(joins)
                last_join = time.monotonic()
            count, now = len(joins), time.monotonic()
            if count >= self.cfg.max_nodes or (
                count >= self.cfg.min_nodes and now - last_join >= self.last_call
            ):
                roster = self._assign(joins)
                self.rdzv.close(cycle, roster)
                return roster
            if now - start > self.cfg.join_timeout:
                raise LauncherExit(
                    1,
                    f"rendezvous timed out: {count} of {self.cfg.min_nodes} nodes joined round "
                    f"{cycle} within {self.cfg.join_timeout:g}s",
                )
            time.sleep(POLL_SECONDS)

    def _assign(self, joins: dict[str, float]) -> Roster:
        """Leader first; then last cycle's active nodes in their old order (stable group ranks);
        then the rest in join order. The first MIN are active, the others hot spares."""

        def priority(node: str) -> tuple[int, float, str]:
            if node in self.previous_active:
                return (0, float(self.previous_active.index(node)), node)
            return (1, joins[node], node)

        others = sorted((n for n in joins if n != self.node), key=priority)
        order = [self.node, *others]
        return Roster(order[: self.cfg.min_nodes], order[self.cfg.min_nodes :])

    def _node_alive(self, node: str) -> bool:
        """Leader's view of another node: not left, heartbeat not stale."""
        if node == self.node:
            return True
        if self.rdzv.has_left(node):
            return False
        age = self.freshness.age(self.rdzv.heartbeat_path(node))
        return age is None or age <= self.node_timeout

    def _check_leader(self) -> None:
        """Follower: obey a published stop; give up when the store host is gone."""
        stop = self.rdzv.stop()
        if stop is not None:
            raise LauncherExit(int(stop["code"]), f"stop from {stop['by']}: {stop['reason']}")
        if self.rdzv.has_left(self.leader):
            raise LauncherExit(1, f"rendezvous store unreachable: {self.leader} left")
        age = self.freshness.age(self.rdzv.heartbeat_path(self.leader))
        if age is None:
            waited = time.monotonic() - self.started
            if waited > self.cfg.store_connect_wait:
                raise LauncherExit(
                    1,
                    f"rendezvous store unreachable: no heartbeat from {self.leader} "
                    f"in {waited:.0f}s",
                )
        elif age > self.store_timeout:
            raise LauncherExit(
                1, f"rendezvous store unreachable: {self.leader} heartbeat stale for {age:.0f}s"
            )

    # --- one cycle

    def _run_cycle(self, cycle: int, roster: Roster) -> int | None:
        """Run cycle `cycle` to its end. Returns an exit code to stop with, or None to restart."""
        self.infra_rank = roster.order.index(self.node)
        self.log.event(cycle, "rendezvous_completed", self.infra_rank)
        self.log.info(
            f"cycle {cycle}: rendezvous closed: active {hostlist(roster.active)} "
            f"standby {hostlist(roster.standby) or '-'}"
        )
        if self.is_leader:
            self._leader_opens(cycle, roster)
        active = self.node in roster.active
        self._health_check(cycle, active)
        if active:
            self._start_workers(cycle, roster.active.index(self.node))
        else:
            self.log.info(f"cycle {cycle}: standby (hot spare), no workers")
        end = self._watch_cycle(cycle, roster)
        return self._finish_cycle(cycle, roster, end)

    def _leader_opens(self, cycle: int, roster: Roster) -> None:
        assert self.cycle_info is not None and self.tracker is not None
        self.cycle_info.open(cycle, roster.active, roster.standby)
        self.tracker.cycle_start()
        self.previous_active = list(roster.active)

    def _health_check(self, cycle: int, active: bool) -> None:
        """NVRX_INJECT_GPU_FAILURE: fail this node's check at (cycle, infra rank)."""
        if (cycle, self.infra_rank) not in self.injections:
            self.log.event(cycle, "health_check_completed", self.infra_rank)
            return
        self.log.info(
            f"INJECTING FAILURE: node={self.node}, infra_rank={self.infra_rank}, cycle={cycle}"
        )
        reason = f"node health check failed on {self.node} (injected, cycle {cycle})"
        self.log.event(cycle, "failure_detected", self.infra_rank)
        if active and not self.is_leader:
            # The cycle fails; the others go on into the next round without this node.
            self.rdzv.write_result(cycle, self.node, False, reason)
        raise LauncherExit(1, reason)  # a leader's exit publishes the stop: the generation ends

    def _worker_env(self, cycle: int, group_rank: int, local_rank: int) -> dict[str, str]:
        cfg = self.cfg
        env = dict(os.environ)
        env.update(
            RANK=str(group_rank * cfg.nproc + local_rank),
            LOCAL_RANK=str(local_rank),
            WORLD_SIZE=str(cfg.min_nodes * cfg.nproc),
            LOCAL_WORLD_SIZE=str(cfg.nproc),
            GROUP_RANK=str(group_rank),
            GROUP_WORLD_SIZE=str(cfg.min_nodes),
            MASTER_ADDR=cfg.host,
            MASTER_PORT=cfg.port,
            NVRX_CYCLE=str(cycle),
            NVRX_CURRENT_CYCLE_INFO=str(cfg.cycle_info_dir / f"cycle_info.{self.job}.current"),
            TORCHELASTIC_RESTART_COUNT=str(cycle),
            TORCHELASTIC_MAX_RESTARTS=str(cfg.max_restarts),
            TORCHELASTIC_RUN_ID=cfg.rdzv_id,
            PYTHONUNBUFFERED="1",
        )
        return env

    def _start_workers(self, cycle: int, group_rank: int) -> None:
        self.log.event(cycle, "worker_start_started", group_rank)
        envs = [self._worker_env(cycle, group_rank, local) for local in range(self.cfg.nproc)]
        self.workers = WorkerGroup(self.log, cycle_log_path(self.cfg.applog_prefix, cycle))
        self.workers.start([sys.executable, self.cfg.script, *self.cfg.script_args], envs)
        ranks = ", ".join(env["RANK"] for env in envs)
        self.log.info(f"cycle {cycle}: started {self.cfg.nproc} workers (ranks {ranks})")
        self.log.event(cycle, "worker_start_completed", group_rank)

    def _watch_cycle(self, cycle: int, roster: Roster) -> dict[str, Any]:
        """Until the cycle ends: report our workers' outcome; the leader also judges the cycle."""
        reported = False
        while True:
            if not self.is_leader:
                self._check_leader()
            if self.workers is not None and not reported:
                reported = self._report_workers(cycle)
            if self.is_leader:
                verdict = self._judge(cycle, roster)
                if verdict is not None:
                    return self._leader_ends(cycle, *verdict)
            else:
                end = self.rdzv.end(cycle)
                if end is not None:
                    return end
            time.sleep(POLL_SECONDS)

    def _report_workers(self, cycle: int) -> bool:
        """Write this node's result once its workers failed or all finished; True once written."""
        assert self.workers is not None
        poll = self.workers.poll()
        if poll.state == "running":
            return False
        if poll.state == "failed":
            reason = f"rank {poll.rank} on {self.node} failed ({describe_code(poll.code)})"
            self.log.event(cycle, "failure_detected", self.infra_rank)
            self.log.info(f"cycle {cycle}: {reason}")
            self.rdzv.write_result(cycle, self.node, False, reason)
        else:
            self.log.info(f"cycle {cycle}: all workers on {self.node} finished")
            self.rdzv.write_result(cycle, self.node, True, "")
        return True

    def _judge(self, cycle: int, roster: Roster) -> tuple[str, str] | None:
        """Leader: ("failure", why) as soon as any active node fails or is lost, ("success", "")
        once every active node's workers finished, else None."""
        finished = 0
        for node in roster.active:
            result = self.rdzv.result(cycle, node)
            if result is not None:
                if not result.get("ok"):
                    return "failure", str(result.get("reason", f"{node} failed"))
                finished += 1
            elif not self._node_alive(node):
                return "failure", f"lost node {node} (launcher left or heartbeat stale)"
        return ("success", "") if finished == len(roster.active) else None

    def _leader_ends(self, cycle: int, outcome: str, reason: str) -> dict[str, Any]:
        """Leader: decide restart vs stop, publish the end of the cycle, close the cycle-info."""
        assert self.cycle_info is not None and self.tracker is not None
        stop_code: int | None = None
        if outcome == "success":
            stop_code, reason = 0, "all workers finished"
        elif self.tracker.should_stop(cycle):
            stop_code = NO_RESTART_EXIT_CODE
            reason = f"{reason}; no checkpoint progress: no restart (exit {NO_RESTART_EXIT_CODE})"
        elif cycle + 1 > self.cfg.max_restarts:
            stop_code = 1
            reason = f"{reason}; max restarts exhausted ({self.cfg.max_restarts})"
        self.rdzv.write_end(cycle, outcome, reason, stop_code)
        if stop_code is not None:
            # Late joiners wait on the next round, not on this end file: tell them too.
            self.rdzv.write_stop(stop_code, reason, self.node)
            self.stop_published = True
        self.cycle_info.close()
        return {"outcome": outcome, "reason": reason, "stop_code": stop_code}

    def _finish_cycle(self, cycle: int, roster: Roster, end: dict[str, Any]) -> int | None:
        """Every node: stop our workers if the cycle failed, then stop or go to the next round."""
        failed = end.get("outcome") != "success"
        if failed:
            self.log.info(f"cycle {cycle}: cycle failed: {end.get('reason')}")
            if self.workers is not None and self.workers.running():
                self.log.event(cycle, "failure_detected", self.infra_rank)
        self._stop_workers(cycle)
        stop_code = end.get("stop_code")
        if stop_code is not None:
            raise LauncherExit(int(stop_code), str(end.get("reason")))
        if cycle + 1 > self.cfg.max_restarts:  # the leader says so too; belt and braces
            raise LauncherExit(1, f"max restarts exhausted ({self.cfg.max_restarts})")
        self.log.info(f"cycle {cycle}: restarting ({cycle + 1}/{self.cfg.max_restarts})")
        return None

    def _stop_workers(self, cycle: int | None) -> None:
        if self.workers is None:
            return
        was_running = self.workers.running()
        self.workers.stop(self.term_grace)
        self.workers = None
        if was_running and cycle is not None:
            self.log.event(cycle, "worker_terminated", self.infra_rank)

    # --- exit

    def _shutdown(self, code: int, reason: str) -> None:
        """Every exit path: stop workers, close the cycle-info, tell the others, say why."""
        self._stop_workers(None)
        # A store host killed by a signal (its job torn down, its batch shell SIGKILLed) vanishes
        # like a dead TCPStore: it says nothing, and followers and late spares find out from its
        # silent heartbeat, as real ones find out from connection timeouts.
        vanished = self.is_leader and code > 128
        if self.is_leader:
            if not self.stop_published and not vanished:
                # The store host is going away: the generation ends for every node.
                follower_code = code if code in (0, 1, NO_RESTART_EXIT_CODE) else 1
                with contextlib.suppress(OSError):
                    self.rdzv.write_stop(follower_code, reason, self.node)
            if self.cycle_info is not None:
                with contextlib.suppress(OSError):
                    self.cycle_info.close()  # like NVRx shutdown(): fill in a missing end time
        self.heartbeat.stopped.set()
        if not vanished:
            with contextlib.suppress(OSError):
                self.rdzv.write_left(self.node, code, reason)
        self.log.info(f"exiting with code {code}: {reason}")
        if self.log.fd is not None:
            os.close(self.log.fd)
            self.log.fd = None


def main(argv: list[str]) -> int:
    cfg = parse_config(argv)
    return Launcher(cfg).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
