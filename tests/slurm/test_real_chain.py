"""submit-chain on the local cluster under NVRx's own ft_launcher (deploy/real-nvrx/install),
not the stand-in: the generation script as users get it, but for the launcher and training
command and the one-host rehearsal every node of this cluster needs (docs/submit-chain.md,
"Rehearsing with NVRx's own launcher").

Skipped unless the launcher is installed; under NVRX_REQUIRE_REAL_NVRX=1 a missing launcher
fails instead. Each test holds the real-launcher lock for its whole run (one multi-launcher
scenario on the machine at a time), trains for seconds, and leaves no job behind.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from nvrx.slurm import JobState, Slurm

from ..real_nvrx.harness import missing_launcher, real_launcher, real_launcher_lock, required
from .conftest import REPO, cycle_info, live, wait_for

FT_LAUNCHER = real_launcher()
WORKER = REPO / "examples" / "rehearsal" / "worker.py"
# Ranks that talk to each other (gloo all-reduce): a dead node is noticed by its peers.
DDP_WORKER = REPO / "examples" / "rehearsal" / "ddp_worker.py"
RESTART_LINE = re.compile(r"Worker group (FAILED|UNHEALTHY)\. \d+/\d+ attempts left; will restart")


@pytest.fixture(autouse=True)
def held_alone() -> Iterator[None]:
    """The real launcher, held alone: every other run of it on this machine waits (and this
    test waits for theirs)."""
    why = missing_launcher()
    if why is not None:
        if required():
            pytest.fail(f"NVRX_REQUIRE_REAL_NVRX=1 but {why}")
        pytest.skip(why)
    with real_launcher_lock():
        yield


def rehearsal_config(path: Path, worker: Path = WORKER) -> Path:
    """The launcher and training command of a CPU rehearsal under NVRx's launcher, and the
    one-host rehearsal; everything else is nvrx's defaults or the test's own --set."""
    launcher = [
        # NVRx wraps each worker in numactl when NVRX_GPUS_PER_NUMA is set; no numactl here.
        "env", "-u", "NVRX_GPUS_PER_NUMA", str(FT_LAUNCHER),
        # No GPU, no NIC to check on these nodes.
        "--ft-gpu-memory-reclaim-timeout", "0", "--ft-enable-nic-healthcheck", "false",
    ]  # fmt: skip
    train = [str(worker), "--step-seconds", "0.2"]
    path.write_text(
        "slurm:\n"
        "  gpus_per_node: 1\n"
        "chain:\n"
        f"  launcher: {json.dumps(launcher)}\n"
        f"  train_command: {json.dumps(train)}\n"
        "  one_host_rehearsal: true\n"
        '  segment: ""\n'  # --ft-segment asks nvidia-smi for the NVLink domain
        '  time_limit: "00:05:00"\n'
        "  save_interval: 5\n"
        "  max_restarts: 3\n"
        "  join_timeout: 20\n"  # the rendezvous after a failure: survivors give up after this
        "  store_connect_wait: 30\n"
        "  rdzv_host_wait: 60\n"
    )
    return path


@dataclass
class Chains:
    """The chains a test submits; every one is cancelled afterwards and must leave no job."""

    root: Path
    slurm: Slurm
    submitted: list[dict[str, Any]] = field(default_factory=list)

    def submit(self, name: str, *args: str, worker: Path = WORKER) -> tuple[Path, list[str]]:
        work = self.root / name
        config = rehearsal_config(self.root / f"{name}.yaml", worker)
        proc = run_nvrx("--config", str(config), "--work-dir", str(work), "--json", *args)
        assert proc.returncode == 0, proc.stderr
        doc: dict[str, Any] = json.loads(proc.stdout)
        self.submitted.append({"work": work, **doc})
        return work, [g["job_id"] for g in doc["generations"]]

    def job_ids(self) -> list[str]:
        return [g["job_id"] for doc in self.submitted for g in doc["generations"]]

    def cancel_all(self) -> None:
        for doc in self.submitted:
            run_nvrx("--cancel", "--work-dir", str(doc["work"]))
            subprocess.run(
                ["scancel", f"--name={doc['job_name']}", f"--user={Slurm.current_user()}"],
                capture_output=True, timeout=30, check=False,
            )  # fmt: skip


def run_nvrx(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nvrx.cli", "submit-chain", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def chains(shared_dir: Path, slurm: Slurm, held_alone: None) -> Iterator[Chains]:
    made = Chains(shared_dir, slurm)
    try:
        yield made
    finally:
        made.cancel_all()
        ids = made.job_ids()
        if ids:
            wait_for(lambda: not live(slurm.queue(ids)), timeout=120, what="no job left")


def launcher_log(work: Path, generation: str) -> str:
    """Every launcher's log of the generation (--ft-nvrx-logfile, through the log server)."""
    logs = sorted((work / "nvrx" / generation / "logs").glob("nvrx_*[0-9].log"))
    return "".join(p.read_text(errors="replace") for p in logs)


def task_log(work: Path, generation: str, task: int) -> str:
    paths = list((work / "logs" / "slurm").glob(f"*_{generation}_{task}.out"))
    return paths[0].read_text(errors="replace") if paths else ""


def resumed_at(work: Path, generation: str) -> str | None:
    """The iteration rank 0 of the generation's first cycle resumed from (as written)."""
    for log in (work / "logs").glob(f"*_{generation}_*_cycle0.log"):
        found = re.search(r"^0: resuming from iteration (\d+)", log.read_text(), re.MULTILINE)
        if found:
            return found.group(1)
    return None


def ended(slurm: Slurm, generation: str) -> bool:
    return not live(slurm.queue([generation]))


def test_a_chain_with_spares_trains_and_hands_over_generation_to_generation(
    chains: Chains, slurm: Slurm
) -> None:
    # Each generation: 2 training tasks, a hot spare waiting in the rendezvous, a cold spare
    # pending. Cycle 0 trains until rank 1 raises; at cycle 1's rendezvous the health check of
    # infra rank 0 (task 0, the rendezvous host) fails, which ends the generation: the next one
    # resumes from the last checkpoint.
    work, ids = chains.submit(
        "handoff", "-K", "3", "--train-tasks", "2", "--hot-spares", "1", "--cold-spares", "1",
        "--set", "chain.fault_inject=true", "--set", "chain.fault_ranks=1",
        "--set", "chain.fault_types=workload_exc", "--set", "chain.fault_delay=4",
        "--set", "chain.inject_gpu_failure=1:0",
    )  # fmt: skip
    first = ids[0]

    def trained(generation: str) -> dict[str, Any] | None:
        return cycle_info(work, generation, 0)

    wait_for(lambda: trained(first), what="generation 1's cycle 0")
    rows = slurm.queue([first])
    running = [r for r in rows if r.state is JobState.RUNNING]
    pending = [r for r in rows if r.state is JobState.PENDING]
    assert len(running) == 3 and [r.task_id for r in pending] == [3]  # a hot, a cold spare

    starts: list[int] = []
    for generation in ids:
        start = wait_for(partial(resumed_at, work, generation), timeout=240,
                         what=f"generation {generation} training")  # fmt: skip
        # (As written: a fresh start, 0, would read as no answer yet.)
        starts.append(int(start))
        wait_for(partial(ended, slurm, generation), timeout=240,
                 what=f"generation {generation} to end")  # fmt: skip
        assert "launching" in task_log(work, generation, 2)  # the hot spare ran its launcher
    assert starts[0] == 0 and 0 < starts[1] < starts[2], starts
    final = int((work / "checkpoints" / "latest_checkpointed_iteration.txt").read_text())
    assert final > starts[2]
    # The real launcher, not the stand-in, and the one-host rehearsal said what it did.
    log = launcher_log(work, first)
    assert RESTART_LINE.search(log), log[-2000:]
    assert "a real cluster needs none of this" in task_log(work, first, 0)


def test_a_worker_exception_is_an_in_job_restart_of_the_real_launcher(
    chains: Chains, slurm: Slurm
) -> None:
    work, (generation,) = chains.submit(
        "restart", "-K", "1", "--train-tasks", "2", "--hot-spares", "0", "--cold-spares", "0",
        "--set", "chain.fault_inject=true", "--set", "chain.fault_ranks=1",
        "--set", "chain.fault_types=workload_exc", "--set", "chain.fault_delay=4",
    )  # fmt: skip
    wait_for(lambda: cycle_info(work, generation, 1), timeout=180, what="cycle 1")
    closed = cycle_info(work, generation, 0)
    assert closed is not None and closed["cycle_end_time"] != ""
    task0 = [r for r in slurm.queue([generation]) if r.task_id == 0]
    assert task0 and task0[0].state is JobState.RUNNING  # the same generation goes on
    wait_for(
        lambda: RESTART_LINE.search(launcher_log(work, generation)),
        what="the launcher's restart line",
    )
    cycle0 = (work / "logs").glob(f"*_{generation}_*_cycle0.log")
    assert "InjectedFault: injected workload exception" in "".join(
        p.read_text(errors="replace") for p in cycle0
    )


def test_no_progress_ends_the_chain_with_93_on_every_launcher_and_cancels_the_queue(
    chains: Chains, slurm: Slurm
) -> None:
    # The no-restart demo: a fault in cycle 0 and a progress file that never advances, with
    # --ft-max-no-progress-cycles 1: every launcher concludes no restart and exits 93.
    work, ids = chains.submit(
        "verdict", "-K", "3", "--train-tasks", "2", "--hot-spares", "0", "--cold-spares", "0",
        "--set", "chain.no_restart_demo=true", "--set", "chain.fault_ranks=1",
        "--set", "chain.fault_delay=4",
    )  # fmt: skip
    first, *later = ids
    wait_for(lambda: not live(slurm.queue(ids)), timeout=240, what="the chain to end")
    assert (work / "nvrx" / first / "control" / "no_restart").exists()
    for task in (0, 1):
        assert "launcher step ended with exit code 93" in task_log(work, first, task)
    # The launcher that found no progress says why; the others learn it from the store.
    assert "EARLY TERMINATION" in launcher_log(work, first)
    teardown = task_log(work, first, 0)
    assert "NVRx requested no restart" in teardown
    assert f"cancelled the rest of chain {chains.submitted[0]['chain_id']}" in teardown
    acct = wait_for(
        lambda: (
            (rows := slurm.accounting(later))
            and all(r.state is JobState.CANCELLED for r in rows)
            and rows
        ),
        what="the queued generations CANCELLED in sacct",
    )
    assert {r.array_job_id for r in acct} == set(later)
    assert not (work / "nvrx" / later[0]).exists()  # never started


@pytest.fixture
def drained_nodes() -> Iterator[list[str]]:
    """Nodes a test drains; resumed afterwards whatever happened."""
    nodes: list[str] = []
    try:
        yield nodes
    finally:
        for node in nodes:
            subprocess.run(
                ["scontrol", "update", f"nodename={node}", "state=resume"],
                capture_output=True, timeout=30, check=False,
            )  # fmt: skip


def test_a_drained_nodes_task_leaves_at_its_next_rendezvous_and_a_spare_takes_its_place(
    chains: Chains, slurm: Slurm, drained_nodes: list[str]
) -> None:
    # The drain poller removes task 1's admit token; the launcher's storage check fails at the
    # next rendezvous (after rank 0 raises), so task 1 leaves and the hot spare trains instead.
    work, (generation,) = chains.submit(
        "drain", "-K", "1", "--train-tasks", "2", "--hot-spares", "1", "--cold-spares", "1",
        "--set", "chain.drain_poll=on", "--set", "chain.drain_poll_interval=2",
        "--set", "chain.fault_inject=true", "--set", "chain.fault_ranks=0",
        "--set", "chain.fault_types=workload_exc", "--set", "chain.fault_delay=15",
    )  # fmt: skip
    wait_for(lambda: cycle_info(work, generation, 0), what="cycle 0")
    (task1,) = [r for r in slurm.queue([generation]) if r.task_id == 1]
    assert task1.state is JobState.RUNNING
    node = task1.nodes
    drained_nodes.append(node)
    subprocess.run(
        ["scontrol", "update", f"nodename={node}", "state=drain", "reason=nvrx-test drain"],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    token = work / "nvrx" / generation / "drain" / f"admit.{task1.job_id}"
    wait_for(lambda: not token.exists(), timeout=60, what="task 1's admit token removed")
    wait_for(lambda: cycle_info(work, generation, 1), timeout=180, what="cycle 1")
    wait_for(
        lambda: "launcher step ended with exit code 1" in task_log(work, generation, 1),
        what="task 1 to leave",
    )
    assert f"holds drained node {node}" in task_log(work, generation, 0)
    # Cycle 1 trains with the spare: both ranks of the world, task 0 still the host.
    cycle1 = list((work / "logs").glob(f"*_{generation}_*_cycle1.log"))
    wait_for(
        lambda: cycle1 and all(
            f"worker rank {r}/2" in "".join(p.read_text(errors="replace") for p in cycle1)
            for r in (0, 1)
        ),
        what="both ranks in cycle 1",
    )  # fmt: skip
    rows = slurm.queue([generation])
    assert [r.state for r in rows if r.task_id == 0] == [JobState.RUNNING]
    assert not [r for r in rows if r.task_id == 1 and r.state.is_live]


def step_processes() -> Iterator[tuple[int, dict[str, str]]]:
    """Every process of a launcher step (step 0) on this machine, with its environment."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = dict(
                item.split("=", 1)
                for item in (proc / "environ").read_text(errors="replace").split("\0")
                if "=" in item
            )
        except OSError:
            continue
        if env.get("SLURM_STEP_ID") == "0":
            yield int(proc.name), env


def task_training_rank(generation: str, rank: int) -> str | None:
    """The job id of the generation's array task whose node trains `rank` (which task that is
    depends on the order the launchers joined in, not on the task ids)."""
    for _, env in step_processes():
        if env.get("SLURM_ARRAY_JOB_ID") == generation and env.get("RANK") == str(rank):
            return env.get("SLURM_JOB_ID")
    return None


def kill_task_processes(job_id: str) -> int:
    """SIGKILL every process of the task's launcher step (the launcher, its log server, its
    workers, which torchelastic starts in sessions of their own): what a dead node leaves."""
    killed = 0
    for pid, env in step_processes():
        if env.get("SLURM_JOB_ID") == job_id:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


def test_a_hot_spare_takes_the_place_of_a_node_whose_whole_process_tree_was_killed(
    chains: Chains, slurm: Slurm
) -> None:
    work, (generation,) = chains.submit(
        "killed", "-K", "1", "--train-tasks", "2", "--hot-spares", "1", "--cold-spares", "0",
        worker=DDP_WORKER,
    )  # fmt: skip
    wait_for(lambda: cycle_info(work, generation, 0), what="cycle 0")
    # The node that trains rank 1, whichever task joined for it (the standby trains nothing).
    victim = wait_for(lambda: task_training_rank(generation, 1), what="rank 1's worker")
    assert kill_task_processes(victim) > 0
    wait_for(lambda: cycle_info(work, generation, 1), timeout=180, what="cycle 1 with the spare")

    def both_ranks_train_in_cycle_1() -> bool:
        # The launcher's log server writes the cycle's log as the workers print, a moment late.
        logs = (work / "logs").glob(f"*_{generation}_*_cycle1.log")
        text = "".join(p.read_text(errors="replace") for p in logs)
        return "worker rank 0/2" in text and "worker rank 1/2" in text

    wait_for(both_ranks_train_in_cycle_1, timeout=120, what="both ranks in cycle 1's log")
