#!/usr/bin/env python3
"""A tiny CPU "training loop" for rehearsing an NVRx chain without GPUs.

It behaves like a Megatron rank as far as the launcher and the chain can tell: it resumes from
`$NVRX_CHECKPOINT_DIR/latest_checkpointed_iteration.txt`, prints `iteration N` lines, rank 0
checkpoints the iteration every save interval (tmp file + os.replace, like Megatron), and a fault
can be injected the way Megatron's fault injector does it (NVRX_FAULT_* variables).

Faults fire only in cycle 0 of a generation (NVRX_CYCLE, set by the rehearsal launcher; under
NVRx's own launcher the cycle-info file or TORCHELASTIC_RESTART_COUNT), so a rehearsal makes
progress after its first in-job restart instead of failing forever.

Standard library only: it runs on compute nodes with a plain python3.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

CHECKPOINT_FILE = "latest_checkpointed_iteration.txt"
FAULT_TYPES = (
    "async_exc",
    "workload_exc",
    "segfault",
    "sigkill",
    "os_abort",
    "sigterm",
    "sigint",
    "gpu_error",
)


class InjectedFault(RuntimeError):
    """The exception an injected async_exc / workload_exc fault raises in the training loop."""


def env_int(name: str, default: int) -> int:
    """An integer environment variable; unset or empty means the default."""
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else default


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-iters", type=int, default=100000, help="stop after this iteration")
    parser.add_argument("--step-seconds", type=float, default=0.2, help="sleep per iteration")
    parser.add_argument(
        "--save-interval",
        type=int,
        default=None,
        help="checkpoint every N iterations (default: $NVRX_SAVE_INTERVAL, else 20)",
    )
    parser.add_argument(
        "--checkpoint-dir",
        default=None,
        help="where latest_checkpointed_iteration.txt lives (default: $NVRX_CHECKPOINT_DIR)",
    )
    args = parser.parse_args(argv)
    if args.save_interval is None:
        args.save_interval = env_int("NVRX_SAVE_INTERVAL", 20)
    if args.checkpoint_dir is None:
        args.checkpoint_dir = os.environ.get("NVRX_CHECKPOINT_DIR") or "checkpoints"
    if args.save_interval < 1:
        parser.error("--save-interval must be >= 1")
    return args


def read_iteration(path: Path) -> int:
    """The checkpointed iteration to resume from; missing or unreadable means a fresh start."""
    try:
        return int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def write_iteration(path: Path, iteration: int) -> None:
    """Atomic like Megatron: readers (the launcher's progress tracker) never see a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{iteration}\n")
    os.replace(tmp, path)


def say(message: str) -> None:
    # The launcher prefixes each line with the rank; flush so lines arrive as they happen.
    print(message, flush=True)


# Set by an injected sigterm/sigint fault: the handler then dies of the signal for real. Only the
# main thread may change signal handlers, and the fault fires on a timer thread.
INJECTED_SIGNAL = threading.Event()


def on_termination(signum: int, _frame: FrameType | None) -> None:
    """The launcher stops workers with SIGTERM: leave promptly with the conventional 128+N."""
    if INJECTED_SIGNAL.is_set():
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    say(f"received {signal.Signals(signum).name}, exiting")
    sys.exit(128 + signum)


def planned_fault(rank: int, cycle: int) -> tuple[str, float] | None:
    """(type, delay) when this rank must fail in this cycle, else None.

    Only cycle 0 of a generation faults, so the cycles after the first restart can show progress.
    """
    if os.environ.get("NVRX_FAULT_INJECT", "0").strip() != "1" or cycle != 0:
        return None
    ranks = {int(r) for r in os.environ.get("NVRX_FAULT_RANKS", "").split(",") if r.strip()}
    if rank not in ranks:
        return None
    types = [t.strip().lower() for t in os.environ.get("NVRX_FAULT_TYPES", "").split(",")]
    kind = types[0] if types and types[0] else "async_exc"
    delay = float(os.environ.get("NVRX_FAULT_DELAY", "").strip() or 60)
    return kind, delay


def raise_in_main_thread() -> None:
    """Megatron's async_exc: raise asynchronously in the main thread (shows as its traceback)."""
    main_id = threading.main_thread().ident
    if main_id is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(main_id), ctypes.py_object(InjectedFault)
        )


def die_by_signal(sig: signal.Signals) -> None:
    # The handler sees the flag and dies of the signal, rather than exiting 128+N politely.
    INJECTED_SIGNAL.set()
    os.kill(os.getpid(), sig)


def inject(kind: str, rank: int, delay: float, workload_flag: threading.Event) -> None:
    """Runs on a timer thread after the delay; each branch mimics how that fault looks for real."""
    say(f"INJECTING FAULT: type={kind} rank={rank} delay={delay:g}s cycle=0")
    if kind == "async_exc":
        raise_in_main_thread()
    elif kind == "workload_exc":
        # The loop raises it at its next step, like NVRx's maybe_raise_workload_exception.
        workload_flag.set()
    elif kind == "segfault":
        ctypes.string_at(1)  # reads address 1: a real SIGSEGV
    elif kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "os_abort":
        os.abort()
    elif kind == "sigterm":
        die_by_signal(signal.SIGTERM)
    elif kind == "sigint":
        die_by_signal(signal.SIGINT)
    elif kind == "gpu_error":
        print(
            "RuntimeError: CUDA error: an illegal memory access was encountered\n"
            "CUDA kernel errors might be asynchronously reported at some other API call, "
            "so the stacktrace below might be incorrect.",
            file=sys.stderr,
            flush=True,
        )
        os._exit(1)  # from a thread, sys.exit would end only the thread


def arm_fault(rank: int, cycle: int, workload_flag: threading.Event) -> None:
    """Start the fault timer if this rank faults; an unknown type is a usage error (exit 2) now,
    not after the delay, so a typo in NVRX_FAULT_TYPES is seen at once."""
    plan = planned_fault(rank, cycle)
    if plan is None:
        return
    kind, delay = plan
    if kind not in FAULT_TYPES:
        print(
            f"unknown NVRX_FAULT_TYPES entry {kind!r}; known: {', '.join(FAULT_TYPES)}",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(2)
    say(f"fault armed: type={kind} in {delay:g}s")
    timer = threading.Timer(delay, inject, args=(kind, rank, delay, workload_flag))
    timer.daemon = True
    timer.start()


def train(args: argparse.Namespace, rank: int, workload_flag: threading.Event) -> int:
    """The loop: one sleep per iteration, rank 0 checkpoints every save interval and at the end."""
    ckpt = Path(args.checkpoint_dir) / CHECKPOINT_FILE
    iteration = read_iteration(ckpt)
    say(f"resuming from iteration {iteration} ({ckpt})")
    while iteration < args.train_iters:
        time.sleep(args.step_seconds)
        if workload_flag.is_set():
            raise InjectedFault("injected workload exception")
        iteration += 1
        say(f"iteration {iteration}")
        if rank == 0 and iteration % args.save_interval == 0:
            write_iteration(ckpt, iteration)
            say(f"saved checkpoint at iteration {iteration}")
    if rank == 0:
        write_iteration(ckpt, iteration)
    say(f"training complete at iteration {iteration}")
    return 0


def current_cycle() -> int:
    """This generation's restart cycle: NVRX_CYCLE (the rehearsal launcher sets it), else what
    NVRx's own launcher says: the cycle number in the cycle-info file NVRX_CURRENT_CYCLE_INFO
    names, or the worker group's restarts so far (TORCHELASTIC_RESTART_COUNT), whichever is
    larger (the file may lag the workers' start by a moment; a promoted spare restarts less)."""
    if os.environ.get("NVRX_CYCLE", "").strip():
        return env_int("NVRX_CYCLE", 0)
    cycle = env_int("TORCHELASTIC_RESTART_COUNT", 0)
    info = os.environ.get("NVRX_CURRENT_CYCLE_INFO", "")
    if info:
        try:
            number = json.loads(Path(info).read_text(encoding="utf-8"))["cycle_number"]
            cycle = max(cycle, int(number))
        except (OSError, ValueError, KeyError, TypeError):
            pass  # not written yet, or being replaced: the restart count stands
    return cycle


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    cycle = current_cycle()
    signal.signal(signal.SIGTERM, on_termination)
    signal.signal(signal.SIGINT, on_termination)
    say(
        f"worker rank {rank}/{os.environ.get('WORLD_SIZE', '1')} "
        f"local {os.environ.get('LOCAL_RANK', '0')} cycle {cycle} pid {os.getpid()}"
    )
    workload_flag = threading.Event()
    arm_fault(rank, cycle, workload_flag)
    return train(args, rank, workload_flag)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
