#!/usr/bin/env python3
"""Record what NVRx's own `ft_launcher` writes, outside Slurm, for nvrx's tests to read.

    $NVRX_FT_VENV/bin/python tests/data/real-nvrx/record.py SCENARIO [--out DIR]

Each scenario starts a few real launchers on this host (loopback, each with the settings
several launchers on one host need: NVRX_ENABLE_MULTI_LAUNCHERS_PER_NODE, one `is_host`, own
TCPStore and log-server ports, a short TMPDIR), running examples/rehearsal/worker.py, makes
something happen to them (a worker raises, a node's whole process tree is killed, a storage
path disappears), waits for every launcher to end and copies what they wrote into
DIR/SCENARIO/ (default: beside this file): the cycle-info files and their `.current` link, the
launcher log, the per-cycle application logs, each launcher's console output and
`scenario.json` (the command lines, what was done when, every exit code).

The environment imitates one Slurm array task per launcher (SLURM_ARRAY_JOB_ID, ..._TASK_ID,
SLURM_JOB_ID, SLURM_PROCID=0, SLURM_TASKS_PER_NODE=1, SLURM_NNODES=1), which is what the launcher reads to
name its cycle-info files. Run with the launcher's own Python (it has psutil, used to end a
process tree, since torchelastic starts workers in sessions of their own).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
WORKER = REPO / "examples" / "rehearsal" / "worker.py"
ARRAY_JOB = 7300  # the recorded chain's array job id


@dataclass
class Scenario:
    """Launchers `nnodes` MIN:MAX with `count` of them started, and what happens when."""

    summary: str
    count: int
    nnodes: str
    fault: dict[str, str] = field(default_factory=dict)  # NVRX_FAULT_* for every worker
    events: list[tuple[float, str, int]] = field(default_factory=list)  # (at s, what, launcher)
    max_restarts: int = 3
    max_no_progress_cycles: int = 3
    static_progress: bool = False  # the iteration file never advances (the no-restart demo)
    storage_check: bool = False  # each launcher checks its own admit file before a rendezvous
    train_iters: int = 80
    deadline: float = 150.0


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
        "raises at 8 s: at the next rendezvous launcher 1 fails its check and leaves (exit 1), "
        "the spare takes its place",
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
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def end_tree(pid: int) -> None:
    """SIGKILL a launcher and every process under it (a node that dies)."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGKILL)


def launcher_argv(
    launcher: str, sc: Scenario, run: Path, index: int, ports: tuple[int, int]
) -> list[str]:
    rdzv_port, log_port = ports
    argv = [
        launcher,
        "--nnodes", sc.nnodes,
        "--nproc-per-node", "1",
        "--rdzv-backend", "c10d",
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
    if sc.storage_check:
        argv.append(f"--ft-storage-health-check-path={run / 'drain' / f'admit.{index}'}")
    return [*argv, str(WORKER), "--step-seconds", "0.1", "--save-interval", "5",
            "--train-iters", str(sc.train_iters)]  # fmt: skip


def iteration_file(sc: Scenario, run: Path) -> Path:
    if sc.static_progress:
        return run / "control" / "static_iter.txt"
    return run / "checkpoints" / "latest_checkpointed_iteration.txt"


def record(name: str, launcher: str, out: Path) -> int:
    sc = SCENARIOS[name]
    run = Path(tempfile.mkdtemp(prefix="nr-", dir="/tmp"))  # short: Unix socket paths
    for sub in ("cycle_infos", "logs", "checkpoints", "control", "drain", "tmp"):
        (run / sub).mkdir()
    if sc.static_progress:
        (run / "control" / "static_iter.txt").write_text("1\n")  # non-zero, never advancing
    ports = (free_port(), free_port())
    procs: list[subprocess.Popen[bytes]] = []
    argvs = []
    for index in range(sc.count):
        if sc.storage_check:
            (run / "drain" / f"admit.{index}").touch()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "NVRX_"))}
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
        )
        if sc.fault:
            env.update(NVRX_FAULT_INJECT="1", **sc.fault)
        argv = launcher_argv(launcher, sc, run, index, ports)
        argvs.append(argv)
        console = open(run / "logs" / f"launcher{index}.console", "wb")  # noqa: SIM115
        procs.append(
            subprocess.Popen(argv, env=env, stdout=console, stderr=subprocess.STDOUT, cwd=run)
        )
        time.sleep(0.5)  # the host's store first
    started = time.monotonic()
    done: list[dict[str, object]] = []
    pending = sorted(sc.events)
    while any(p.poll() is None for p in procs) and time.monotonic() - started < sc.deadline:
        now = time.monotonic() - started
        while pending and pending[0][0] <= now:
            _, what, index = pending.pop(0)
            if what == "kill-tree":
                end_tree(procs[index].pid)
            elif what == "remove-admit":
                (run / "drain" / f"admit.{index}").unlink()
            done.append({"at_s": round(now, 1), "what": what, "launcher": index})
        time.sleep(0.2)
    timed_out = [i for i, p in enumerate(procs) if p.poll() is None]
    for i in timed_out:
        end_tree(procs[i].pid)
    codes = [p.wait() for p in procs]
    target = out / name
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    shutil.copytree(run / "cycle_infos", target / "cycle_infos", symlinks=True)
    shutil.copytree(run / "logs", target / "logs")
    meta = {
        "scenario": name,
        "summary": sc.summary,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "run_dir": str(run),
        "launcher_version": launcher_version(launcher),
        "argv": [[Path(a).name if a == launcher else a for a in argv] for argv in argvs],
        "events": done,
        "exit_codes": codes,
        "ended_by_deadline": timed_out,
    }
    (target / "scenario.json").write_text(json.dumps(meta, indent=2) + "\n")
    shutil.rmtree(run, ignore_errors=True)
    print(f"{name}: exit codes {codes}, events {done}, timed out {timed_out}")
    return 0 if not timed_out else 1


def launcher_version(launcher: str) -> str:
    python = Path(launcher).with_name("python")
    proc = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('nvidia-resiliency-ext'))"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    return proc.stdout.strip() or "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=[*SCENARIOS, "all"])
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument(
        "--launcher", default=str(Path(sys.executable).with_name("ft_launcher")),
        help="NVRx's ft_launcher (default: the one beside this Python)",
    )  # fmt: skip
    args = parser.parse_args()
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    return max(record(n, args.launcher, args.out) for n in names)


if __name__ == "__main__":
    sys.exit(main())
