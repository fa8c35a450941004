#!/usr/bin/env python3
"""A CPU training worker for NVRx's own ft_launcher: gloo DDP on a tiny model.

Unlike worker.py, whose ranks never talk to each other, the ranks here all-reduce their
gradients every step, as GPU ranks do over NCCL: when a node dies, its peers' next collective
fails, the worker group restarts, and a hot spare can take the dead node's place. It speaks
the contracts a Megatron rank speaks to the launcher and the chain:

- NVRx's rank-monitor client with the sections `setup`, `step` and `checkpointing` (the ones the
  generation script's `--ft-rank-section-timeouts` names), so a hung rank is caught by a section
  timeout;
- Megatron-like checkpoints: `$NVRX_CHECKPOINT_DIR/iter_0000020/mp_rank_00/model_optim_rng.pt`
  and `latest_checkpointed_iteration.txt`, each written atomically by rank 0, resumed from by
  every rank;
- `iteration N` lines, and worker.py's flags, NVRX_FAULT_* fault contract and cycle rule (faults
  fire in cycle 0 only), which it reuses from worker.py.

Run it with the Python of the launcher's venv (torch and nvidia-resiliency-ext):
deploy/real-nvrx/install makes one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

# worker.py sits beside this file (the script's directory is on sys.path when run as a script).
import worker as rehearsal

# Seconds a collective may wait for a peer: a dead peer's socket usually fails it at once, a
# stopped one only after this (the launcher's section timeout is the other net).
COLLECTIVE_TIMEOUT = rehearsal.env_int("NVRX_DDP_TIMEOUT", 30)
FEATURES = 16


def checkpoint_dir(root: Path, iteration: int) -> Path:
    """Megatron's name for the checkpoint of an iteration."""
    return root / f"iter_{iteration:07d}"


class Monitor:
    """NVRx's rank-monitor client when the launcher provides one, else nothing (so the worker
    also runs under torchrun or the rehearsal launcher)."""

    def __init__(self) -> None:
        self.client: Any = None
        if not os.environ.get("FT_RANK_MONITOR_IPC_SOCKET"):
            rehearsal.say("no NVRx rank monitor (FT_RANK_MONITOR_IPC_SOCKET unset): sections off")
            return
        from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient

        self.client = RankMonitorClient()
        self.client.init_workload_monitoring()

    def start(self, section: str) -> None:
        if self.client is not None:
            self.client.start_section(section)

    def end(self, section: str) -> None:
        if self.client is not None:
            self.client.end_section(section)

    def close(self) -> None:
        if self.client is not None:
            self.client.shutdown_workload_monitoring()


def save_checkpoint(root: Path, iteration: int, model: Any, optimizer: Any) -> None:
    """Rank 0: the iteration's directory under a temporary name, renamed whole, then the
    tracker file (atomic too): a reader never sees a tracker naming a partial checkpoint."""
    final = checkpoint_dir(root, iteration)
    tmp = root / f".{final.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "mp_rank_00").mkdir(parents=True)
    state = {
        "iteration": iteration,
        "model": model.module.state_dict(),
        "optimizer": optimizer.state_dict(),
    }
    torch.save(state, tmp / "mp_rank_00" / "model_optim_rng.pt")
    if final.exists():  # saved before a restart that resumed from an older one
        shutil.rmtree(final)
    os.replace(tmp, final)
    rehearsal.write_iteration(root / rehearsal.CHECKPOINT_FILE, iteration)


def load_checkpoint(root: Path, model: Any, optimizer: Any) -> int:
    """The iteration the tracker names, with its weights loaded; 0 when there is none yet."""
    iteration = rehearsal.read_iteration(root / rehearsal.CHECKPOINT_FILE)
    if iteration == 0:
        return 0
    path = checkpoint_dir(root, iteration) / "mp_rank_00" / "model_optim_rng.pt"
    state = torch.load(path, weights_only=True)
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return iteration


def batch(iteration: int, rank: int) -> tuple[Any, Any]:
    """Each rank's data for an iteration, the same after a restart (seeded by both)."""
    gen = torch.Generator().manual_seed(iteration * 1000 + rank)
    inputs = torch.randn(32, FEATURES, generator=gen)
    targets = inputs.sum(dim=1, keepdim=True)
    return inputs, targets


def train(
    args: argparse.Namespace, rank: int, monitor: Monitor, workload_flag: threading.Event
) -> int:
    root = Path(args.checkpoint_dir)
    monitor.start("setup")
    dist.init_process_group("gloo", timeout=timedelta(seconds=COLLECTIVE_TIMEOUT))
    torch.manual_seed(0)  # every rank starts from the same weights
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(FEATURES, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    iteration = load_checkpoint(root, model, optimizer)
    rehearsal.say(f"resuming from iteration {iteration} ({root / rehearsal.CHECKPOINT_FILE})")
    monitor.end("setup")
    while iteration < args.train_iters:
        monitor.start("step")
        time.sleep(args.step_seconds)
        if workload_flag.is_set():
            raise rehearsal.InjectedFault("injected workload exception")
        inputs, targets = batch(iteration, rank)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()  # DDP all-reduces the gradients: every rank takes part
        optimizer.step()
        monitor.end("step")
        iteration += 1
        rehearsal.say(f"iteration {iteration} loss {loss.item():.4f}")
        if iteration % args.save_interval == 0 or iteration == args.train_iters:
            monitor.start("checkpointing")
            if rank == 0:
                save_checkpoint(root, iteration, model, optimizer)
                rehearsal.say(f"saved checkpoint at iteration {iteration}")
            dist.barrier()  # nobody runs ahead of a checkpoint that may yet fail
            monitor.end("checkpointing")
    rehearsal.say(f"training complete at iteration {iteration}")
    dist.destroy_process_group()
    return 0


def main(argv: list[str]) -> int:
    args = rehearsal.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    cycle = rehearsal.current_cycle()
    signal.signal(signal.SIGTERM, rehearsal.on_termination)
    signal.signal(signal.SIGINT, rehearsal.on_termination)
    rehearsal.say(
        f"ddp worker rank {rank}/{os.environ.get('WORLD_SIZE', '1')} "
        f"local {os.environ.get('LOCAL_RANK', '0')} cycle {cycle} pid {os.getpid()}"
    )
    workload_flag = threading.Event()
    rehearsal.arm_fault(rank, cycle, workload_flag)
    monitor = Monitor()
    try:
        return train(args, rank, monitor, workload_flag)
    finally:
        monitor.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
