"""Runs of NVRx's own ft_launcher on one host, outside Slurm: the scenarios that
tests/data/real-nvrx/record.py records and the tests beside this file run.

A scenario starts a few real launchers (loopback, each with the settings several launchers on
one host need: NVRX_ENABLE_MULTI_LAUNCHERS_PER_NODE, one `is_host`, their own TCPStore and
log-server ports, a short TMPDIR), makes something happen to them (a worker raises, a node's
whole process tree is killed, a storage path disappears) and waits for every launcher to end.

The environment imitates one Slurm array task per launcher (SLURM_ARRAY_JOB_ID, ..._TASK_ID,
SLURM_JOB_ID, SLURM_PROCID=0, SLURM_TASKS_PER_NODE=1, SLURM_NNODES=1), which is what the
launcher reads to name its cycle-info files.

Only one scenario runs at a time on a machine, whoever starts it: each holds the lock
/tmp/nvrx-real-launcher.lock while its launchers live. Every process a scenario starts carries
its token in the environment, so none outlives it: torchelastic starts workers in sessions of
their own, which neither a process group nor the launcher's death ends.

Standard library only: it runs under the project's Python and under the launcher's.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .processes import TOKEN_VAR, argv_of, kill_tree, left_behind, tree

REPO = Path(__file__).resolve().parents[2]
STAND_IN = REPO / "examples" / "rehearsal" / "ft_launcher.py"
WORKERS = {
    "rehearsal": REPO / "examples" / "rehearsal" / "worker.py",  # independent ranks
    "ddp": REPO / "examples" / "rehearsal" / "ddp_worker.py",  # gloo DDP, sections client
}
LOCK_FILE = Path("/tmp/nvrx-real-launcher.lock")
ARRAY_JOB = 7300  # the imitated chain's array job id
# The generation script's section timeouts, for the worker that opens those sections.
SECTION_TIMEOUTS = "setup:900,step:60,checkpointing:300"


@dataclass(frozen=True)
class Scenario:
    """Launchers `nnodes` MIN:MAX with `count` of them started, and what happens when."""

    summary: str
    count: int
    nnodes: str
    fault: dict[str, str] = field(default_factory=dict)  # NVRX_FAULT_* for every worker
    events: list[tuple[float, str, int]] = field(default_factory=list)  # (at s, what, launcher)
    worker: str = "rehearsal"  # a key of WORKERS
    max_restarts: int = 3
    max_no_progress_cycles: int = 3
    static_progress: bool = False  # the iteration file never advances (the no-restart demo)
    storage_check: bool = False  # each launcher checks its own admit file before a rendezvous
    section_timeouts: str = SECTION_TIMEOUTS  # for the worker that opens sections (ddp)
    train_iters: int = 80
    # Seconds between the first MIN launchers and the rest: a spare started late is sure to
    # be the standby (started together, any of them may be).
    spare_after: float | None = None
    # Event times count from the first checkpoint (the iteration file appears) rather than from
    # the last launcher's start: "mid-training" however long the workers' start-up takes.
    events_after_checkpoint: bool = False
    deadline: float = 150.0  # seconds after the last launcher started; then trees are ended


SCENARIOS = {
    "restart-after-exception": Scenario(
        "2 launchers, 1 worker each; rank 1 raises in cycle 0, the group restarts in-job and "
        "trains to the end",
        count=2,
        nnodes="2:2",
        fault={
            "NVRX_FAULT_RANKS": "1",
            "NVRX_FAULT_DELAY": "4",
            "NVRX_FAULT_TYPES": "workload_exc",
        },
    ),
    "no-progress-exit-93": Scenario(
        "2 launchers; rank 1 raises in cycle 0 and the iteration file never advances: with "
        "--ft-max-no-progress-cycles 1 every launcher ends on the no-restart verdict (exit 93)",
        count=2,
        nnodes="2:2",
        fault={
            "NVRX_FAULT_RANKS": "1",
            "NVRX_FAULT_DELAY": "4",
            "NVRX_FAULT_TYPES": "workload_exc",
        },
        max_no_progress_cycles=1,
        static_progress=True,
    ),
    "storage-check-node-leaves": Scenario(
        "3 launchers for 2 nodes; launcher 1's storage-check path is removed at 6 s and rank 0 "
        "raises at 8 s: at the next rendezvous launcher 1 fails its check and leaves (exit 1); "
        "whichever launchers held ranks 0 and 1 train on (in the recording launcher 1 was the "
        "standby: it joined after round 0 closed)",
        count=3,
        nnodes="2:3",
        fault={
            "NVRX_FAULT_RANKS": "0",
            "NVRX_FAULT_DELAY": "8",
            "NVRX_FAULT_TYPES": "workload_exc",
        },
        events=[(6.0, "remove-admit", 1)],
        storage_check=True,
        train_iters=300,
    ),
    "hot-spare-takes-killed-node": Scenario(
        "3 launchers for 2 nodes, DDP workers, the spare started 3 s after the others; "
        "launcher 1 and every process under it are SIGKILLed 1 s after the first checkpoint: "
        "rank 0's next "
        "all-reduce fails, the group restarts and the spare takes the dead node's place, "
        "training to the end",
        count=3,
        nnodes="2:3",
        events=[(1.0, "kill-tree", 1)],
        worker="ddp",
        train_iters=100,
        spare_after=3.0,
        events_after_checkpoint=True,
    ),
    "hang-caught-by-section-timeout": Scenario(
        "2 launchers, DDP workers, a 5 s timeout on the step section; rank 1's worker is "
        "stopped (SIGSTOP) 1 s after the first checkpoint: its step section stays open, the "
        "rank monitor ends it, the group restarts in-job and trains to the end",
        count=2,
        nnodes="2:2",
        events=[(1.0, "stop-worker", 1)],
        worker="ddp",
        section_timeouts="setup:900,step:5,checkpointing:300",
        events_after_checkpoint=True,
    ),
}


@dataclass
class Run:
    """What a scenario's launchers did: for its tests and for record.py."""

    dir: Path
    argvs: list[list[str]]
    events: list[dict[str, object]]
    exit_codes: list[int]
    ended_by_deadline: list[int]  # launchers still running at the deadline
    left_behind: list[str]  # processes of the run alive after it ended (ended then): none


def free_ports(count: int) -> list[int]:
    """Ports free on loopback, all different (each held until every one is chosen)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


DEFAULT_VENV = Path("/var/lib/nvrx-ft/venv")  # deploy/real-nvrx/install's


def real_launcher() -> Path:
    """NVRx's ft_launcher as deploy/real-nvrx/install puts it ($NVRX_FT_VENV)."""
    return Path(os.environ.get("NVRX_FT_VENV") or DEFAULT_VENV) / "bin" / "ft_launcher"


def missing_launcher() -> str | None:
    """Why the real-launcher tests cannot run here (None: they can). Under
    NVRX_REQUIRE_REAL_NVRX=1 (CI) the caller fails instead of skipping: CI must never pass by
    skipping them."""
    if os.access(real_launcher(), os.X_OK):
        return None
    return (
        f"NVRx's ft_launcher is not installed at {real_launcher()} "
        "(run deploy/real-nvrx/install, or set NVRX_FT_VENV)"
    )


def required() -> bool:
    return os.environ.get("NVRX_REQUIRE_REAL_NVRX") == "1"


@contextlib.contextmanager
def real_launcher_lock() -> Iterator[None]:
    """The machine-wide lock every run of the real launcher holds (one scenario at a time)."""
    with open(LOCK_FILE, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ----------------------------------------------------------------------------
# A scenario.


def iteration_file(sc: Scenario, run: Path) -> Path:
    if sc.static_progress:
        return run / "control" / "static_iter.txt"
    return run / "checkpoints" / "latest_checkpointed_iteration.txt"


def launcher_argv(
    launcher: Path, sc: Scenario, run: Path, index: int, ports: list[int]
) -> list[str]:
    rdzv_port, log_port = ports
    # The generation script's flags (no --rdzv-backend: c10d is the launcher's default, and the
    # stand-in refuses the flag), and what several launchers on one host need.
    argv = [
        str(launcher),
        "--nnodes", sc.nnodes,
        "--nproc-per-node", "1",
        "--rdzv-endpoint", f"127.0.0.1:{rdzv_port}",
        "--rdzv-id", str(ARRAY_JOB),
        "--rdzv-conf", f"is_host={1 if index == 0 else 0},join_timeout=60",
        "--max-restarts", str(sc.max_restarts),
        "--ft-log-server-port", str(log_port),
        "--ft-cycle-info-dir", str(run / "cycle_infos"),
        "--ft-per-cycle-applog-prefix", str(run / "logs" / "app.log"),
        "--ft-nvrx-logfile", str(run / "logs" / "nvrx.log"),
        "--ft-checkpoint-iteration-file", str(iteration_file(sc, run)),
        "--ft-max-no-progress-cycles", str(sc.max_no_progress_cycles),
        "--ft-gpu-memory-reclaim-timeout", "0",
        "--ft-enable-nic-healthcheck", "false",
    ]  # fmt: skip
    if sc.worker == "ddp":
        argv += ["--ft-rank-section-timeouts", sc.section_timeouts,
                 "--ft-rank-out-of-section-timeout", "90"]  # fmt: skip
    if sc.storage_check:
        argv.append(f"--ft-storage-health-check-path={run / 'drain' / f'admit.{index}'}")
    return [*argv, str(WORKERS[sc.worker]), "--step-seconds", "0.1", "--save-interval", "5",
            "--train-iters", str(sc.train_iters)]  # fmt: skip


def launcher_env(run: Path, index: int, token: str, sc: Scenario, stand_in: bool) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "NVRX_", "TORCHELASTIC_", "FT_")) and k != "PYTHONPATH"
    }
    env.update(
        TMPDIR=str(run / "tmp"),
        NVRX_ENABLE_MULTI_LAUNCHERS_PER_NODE="1",
        SLURM_ARRAY_JOB_ID=str(ARRAY_JOB),
        SLURM_ARRAY_TASK_ID=str(index),
        SLURM_JOB_ID=str(ARRAY_JOB + 1 + index),
        SLURM_PROCID="0",
        SLURM_TASKS_PER_NODE="1",
        SLURM_NNODES="1",  # one node per array task (the array rendezvous needs it)
        SLURM_JOB_NUM_NODES="1",
        SLURM_RESTART_COUNT="0",
        NVRX_CHECKPOINT_DIR=str(run / "checkpoints"),
        NVRX_SAVE_INTERVAL="5",
        **{TOKEN_VAR: token},
    )
    if sc.fault:
        env.update(NVRX_FAULT_INJECT="1", **sc.fault)
    if stand_in:
        # The stand-in tells nodes apart by name, and the endpoint's host names its leader.
        env["SLURMD_NODENAME"] = f"127.0.0.{index + 1}"
    return env


def run_scenario(sc: Scenario, launcher: Path, run: Path) -> Run:
    """Run the scenario in the empty directory RUN (short: Unix socket paths live in its
    tmp/) under the real-launcher lock; every process it started has ended when it returns.
    LAUNCHER is NVRx's ft_launcher or the stand-in, examples/rehearsal/ft_launcher.py."""
    stand_in = launcher.suffix == ".py"
    for sub in ("cycle_infos", "logs", "checkpoints", "control", "drain", "tmp"):
        (run / sub).mkdir(parents=True)
    if sc.static_progress:
        (run / "control" / "static_iter.txt").write_text("1\n")  # non-zero, never advancing
    token = uuid.uuid4().hex
    procs: list[subprocess.Popen[bytes]] = []
    argvs: list[list[str]] = []
    done: list[dict[str, object]] = []
    timed_out: list[int] = []
    with real_launcher_lock():
        ports = free_ports(2)
        try:
            min_nodes = int(sc.nnodes.split(":")[0])
            for index in range(sc.count):
                if index == min_nodes and sc.spare_after is not None:
                    time.sleep(sc.spare_after)
                if sc.storage_check:
                    (run / "drain" / f"admit.{index}").touch()
                argv = launcher_argv(launcher, sc, run, index, ports)
                argvs.append(argv)
                with open(run / "logs" / f"launcher{index}.console", "wb") as console:
                    procs.append(
                        subprocess.Popen(
                            argv,
                            env=launcher_env(run, index, token, sc, stand_in),
                            stdout=console,
                            stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL,
                            cwd=run,
                        )
                    )
                time.sleep(0.5)  # the host's store first
            done, timed_out = drive(sc, run, procs)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    kill_tree(proc.pid)
            codes = [proc.wait(timeout=60) for proc in procs]
            left = left_behind(token)
    return Run(run, argvs, done, codes, timed_out, left)


def drive(
    sc: Scenario, run: Path, procs: list[subprocess.Popen[bytes]]
) -> tuple[list[dict[str, object]], list[int]]:
    """Make the scenario's events happen while its launchers run, until they have all ended or
    the deadline passed: (the events done, the launchers still running)."""
    started = time.monotonic()
    clock = None if sc.events_after_checkpoint else started  # when event times count from
    pending = sorted(sc.events)
    done: list[dict[str, object]] = []
    while any(p.poll() is None for p in procs) and time.monotonic() - started < sc.deadline:
        if clock is None and iteration_file(sc, run).exists():
            clock = time.monotonic()
        while clock is not None and pending and pending[0][0] <= time.monotonic() - clock:
            _, what, index = pending.pop(0)
            if what == "kill-tree":
                kill_tree(procs[index].pid)
            elif what == "stop-worker":  # a hung rank: alive, silent, its sockets open
                worker = str(WORKERS[sc.worker])
                for pid in tree(procs[index].pid):
                    # `python3 -u SCRIPT ...`: the launchers name SCRIPT too, further on.
                    if worker in argv_of(pid)[:3]:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGSTOP)
            elif what == "remove-admit":
                (run / "drain" / f"admit.{index}").unlink()
            done.append(
                {"at_s": round(time.monotonic() - clock, 1), "what": what, "launcher": index}
            )
        time.sleep(0.2)
    return done, [i for i, p in enumerate(procs) if p.poll() is None]
