"""submit-chain on the local cluster, rehearsed with the CPU stand-in launcher: what an operator
relies on a chain to do when tasks, workers and task 0 itself fail."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from nvrx.chain.manifest import read_manifest
from nvrx.slurm import JobState, QueueRow, Slurm
from nvrx.slurm.hostlist import expand as expand_hosts

from .conftest import REPO, cycle_info, live, wait_for

REHEARSAL = REPO / "examples" / "rehearsal" / "nvrx.yaml"
NO_FAULTS = [
    "--set",
    "chain.no_restart_demo=false",
    "--set",
    "chain.fault_inject=false",
    "--set",
    "chain.inject_gpu_failure=",
]


@pytest.fixture
def work_root(shared_dir: Path) -> Iterator[Path]:
    """Work dirs on a filesystem every node sees; every chain submitted under it is cancelled
    afterwards."""
    yield shared_dir
    for manifest in shared_dir.glob("*/chain.json"):
        nvrx("--cancel", work=manifest.parent)


def nvrx(
    *args: str,
    work: Path,
    path_prefix: Path | None = None,
    exported: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **(exported or {})}
    if path_prefix is not None:
        env["PATH"] = f"{path_prefix}:{env['PATH']}"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "nvrx.cli",
            "submit-chain",
            "--config",
            str(REHEARSAL),
            "--work-dir",
            str(work),
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def submit(
    work: Path,
    *args: str,
    path_prefix: Path | None = None,
    exported: dict[str, str] | None = None,
) -> dict[str, Any]:
    proc = nvrx("--json", *args, work=work, path_prefix=path_prefix, exported=exported)
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def test_a_chain_is_k_generations_of_one_singleton_array(slurm: Slurm, work_root: Path) -> None:
    work = work_root / "shape"
    doc = submit(
        work, "-K", "3", "--train-tasks", "2", "--hot-spares", "1", "--cold-spares", "1", *NO_FAULTS
    )
    ids = [g["job_id"] for g in doc["generations"]]
    assert len(ids) == 3 and len(set(ids)) == 3
    assert read_manifest(work / "chain.json").job_ids == ids
    first, *later = ids

    def first_generation_up() -> list[QueueRow] | None:
        rows = slurm.queue([first])
        running = [r for r in rows if r.state is JobState.RUNNING]
        return rows if len(running) == 3 else None

    rows = wait_for(first_generation_up, what="3 running tasks in generation 1")
    (cold,) = [r for r in rows if r.state is JobState.PENDING]
    assert (cold.task_id, cold.reason) == (3, "JobArrayTaskLimit")

    def evaluated(generation: str) -> list[QueueRow] | None:
        # The reason is "None" until the scheduler's next pass has looked at the job.
        rows = slurm.queue([generation])
        return rows if rows and all(r.reason for r in rows) else None

    for generation in later:
        queued = wait_for(partial(evaluated, generation), what="the later generations evaluated")
        assert len(queued) == 4
        assert all(r.state is JobState.PENDING and r.reason == "Dependency" for r in queued)
    by_name = slurm.queue(name=doc["job_name"], user=Slurm.current_user())
    assert {r.array_job_id for r in by_name} == set(ids)

    info = wait_for(lambda: cycle_info(work, first, 0), what="cycle 0's cycle-info file")
    assert info["cycle_end_time"] == "" and info["generation"] == "0"
    assert info["standby_nodes"] != ""  # the hot spare waits in the rendezvous


def test_a_worker_failure_is_a_new_cycle_not_a_new_generation(
    slurm: Slurm, work_root: Path
) -> None:
    work = work_root / "restart"
    doc = submit(
        work,
        "-K",
        "1",
        "--train-tasks",
        "2",
        "--hot-spares",
        "0",
        "--cold-spares",
        "0",
        "--set",
        "chain.no_restart_demo=false",
        "--set",
        "chain.fault_inject=true",
        "--set",
        "chain.inject_gpu_failure=",
        "--set",
        "chain.fault_ranks=1",
        "--set",
        "chain.fault_delay=3",
    )
    (generation,) = [g["job_id"] for g in doc["generations"]]
    wait_for(lambda: cycle_info(work, generation, 1), timeout=180, what="cycle 1")
    closed = cycle_info(work, generation, 0)
    assert closed is not None and closed["cycle_end_time"] != "" and closed["generation"] == "1"
    task0 = [r for r in slurm.queue([generation]) if r.task_id == 0]
    assert task0 and task0[0].state is JobState.RUNNING

    # The generation's log holds both cycles; the analyser attributes each on its own: the
    # fault ended cycle 0 (on rank 1), and the job's answer is cycle 1's, which still runs.
    (log,) = (work / "logs" / "slurm").glob(f"*_{generation}_0.out")
    wait_for(lambda: "Cycle: 1 Event:" in log.read_text(errors="replace"), what="cycle 1's events")
    analyzed = subprocess.run(
        [sys.executable, "-m", "nvrx.cli", "analyze", "log", str(log), "--json"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    doc = json.loads(analyzed.stdout)
    first, *_, last = doc["cycles"]
    assert (first["cycle"], first["root_rank"], first["category"]) == (0, 1, "software"), doc
    assert first["evidence_lines"] and all(
        first["first_line"] <= n <= first["last_line"] for n in first["evidence_lines"]
    )
    spans = [(c["first_line"], c["last_line"]) for c in doc["cycles"]]
    assert spans[0][0] == 1 and all(b[0] == a[1] + 1 for a, b in itertools.pairwise(spans))
    assert last["cycle"] >= 1
    assert doc["decision"] == last["decision"] == "ERRORS NOT FOUND", doc


def test_losing_task_0_hands_off_to_the_next_generation_which_resumes(
    slurm: Slurm, work_root: Path
) -> None:
    work = work_root / "handoff"
    # Cycle 0: a workload fault after 3 s of checkpointing; cycle 1: the health check of infra
    # rank 0 (task 0's node, the rendezvous host) fails, which ends the generation.
    doc = submit(
        work,
        "-K",
        "2",
        "--train-tasks",
        "2",
        "--hot-spares",
        "1",
        "--cold-spares",
        "0",
        "--set",
        "chain.no_restart_demo=false",
        "--set",
        "chain.fault_inject=true",
        "--set",
        "chain.inject_gpu_failure=1:0",
        "--set",
        "chain.fault_ranks=1",
        "--set",
        "chain.fault_delay=3",
    )
    first, second = (g["job_id"] for g in doc["generations"])
    wait_for(lambda: not live(slurm.queue([first])), timeout=120, what="generation 1 to end")
    assert (work / "nvrx" / first / "control" / "rdzv_closed").exists()
    iteration = int((work / "checkpoints" / "latest_checkpointed_iteration.txt").read_text())
    assert iteration > 0

    wait_for(
        lambda: any(r.state is JobState.RUNNING for r in slurm.queue([second])),
        timeout=180,
        what="generation 2 running",
    )

    def resumed() -> str | None:
        for log in (work / "logs").glob(f"*_{second}_*_cycle0.log"):
            for line in log.read_text(errors="replace").splitlines():
                if "resuming from iteration" in line:
                    return line
        return None

    line = wait_for(resumed, what="generation 2's first worker line")
    resumed_at = int(line.split("resuming from iteration", 1)[1].split()[0])
    assert resumed_at >= iteration > 0


def test_no_restart_cancels_exactly_its_own_chain(slurm: Slurm, work_root: Path) -> None:
    name = f"nvrx-test-{uuid.uuid4().hex[:8]}"
    # Chain A is the no-restart demo (the rehearsal config opts in): a fault in cycle 0, no
    # checkpoint progress (the demo's static iteration file), every launcher exits 93.
    a = submit(
        work_root / "a",
        "-K",
        "3",
        "--train-tasks",
        "2",
        "--hot-spares",
        "0",
        "--cold-spares",
        "0",
        "--job-name",
        name,
        "--set",
        "chain.fault_delay=3",
    )
    # Chain B shares the name (so singleton queues it behind A) and must survive A's verdict.
    b = submit(
        work_root / "b", "-K", "2", "--job-name", name, "--share-name", *NO_FAULTS, "--", "--hold"
    )
    a_ids = [g["job_id"] for g in a["generations"]]
    b_ids = [g["job_id"] for g in b["generations"]]

    wait_for(lambda: not live(slurm.queue(a_ids)), timeout=120, what="chain A to end")
    assert (work_root / "a" / "nvrx" / a_ids[0] / "control" / "no_restart").exists()
    acct = wait_for(
        lambda: (
            (rows := slurm.accounting(a_ids[1:]))
            and all(r.state is JobState.CANCELLED for r in rows)
            and rows
        ),
        what="A's later generations CANCELLED in sacct",
    )
    assert {r.array_job_id for r in acct} == set(a_ids[1:])
    survivors = live(slurm.queue(b_ids))
    assert {r.array_job_id for r in survivors} == set(b_ids)


def sbatch_wrapper(bin_dir: Path, script: str) -> Path:
    """A `sbatch` earlier on PATH that misbehaves on chosen calls and otherwise runs the real
    one, as a flaky controller or a policy change would."""
    real = shutil.which("sbatch")
    assert real is not None
    bin_dir.mkdir(parents=True)
    wrapper = bin_dir / "sbatch"
    counter = bin_dir / "calls"
    wrapper.write_text(
        "#!/bin/bash\n"
        f'n=$(( $(cat {counter} 2>/dev/null || echo 0) + 1 )); echo "$n" > {counter}\n'
        f"REAL={real}\n{script}\n"
        'exec "$REAL" "$@"\n'
    )
    wrapper.chmod(0o755)
    return bin_dir


def test_transient_sbatch_failures_still_give_exactly_k_generations(
    slurm: Slurm, work_root: Path
) -> None:
    bin_dir = sbatch_wrapper(
        work_root / "flaky-bin",
        (
            'case "$n" in\n'
            # the job is created but the answer is lost
            '  2) "$REAL" "$@" >/dev/null; echo "sbatch: error: Socket timed out on send/recv operation" >&2; exit 1;;\n'
            # the controller is unreachable: nothing is created
            '  3) echo "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)" >&2; exit 1;;\n'
            "esac"
        ),
    )
    work = work_root / "flaky"
    doc = submit(work, "-K", "3", *NO_FAULTS, "--", "--hold", path_prefix=bin_dir)
    ids = [g["job_id"] for g in doc["generations"]]
    assert len(set(ids)) == 3
    assert (bin_dir / "calls").read_text().strip() == "4"
    queued = slurm.queue(name=doc["job_name"], user=Slurm.current_user())
    assert {r.array_job_id for r in queued} == set(ids)


def test_a_permanent_failure_keeps_the_manifest_true_and_extend_finishes_the_chain(
    slurm: Slurm, work_root: Path
) -> None:
    bin_dir = sbatch_wrapper(
        work_root / "broken-bin",
        (
            'if [ "$n" -ge 2 ]; then echo "sbatch: error: Batch job submission failed: '
            'Invalid partition name specified" >&2; exit 1; fi'
        ),
    )
    work = work_root / "partial"
    proc = nvrx("-K", "3", *NO_FAULTS, "--", "--hold", work=work, path_prefix=bin_dir)
    assert proc.returncode == 1
    assert "generation 1 was not submitted" in proc.stderr
    assert f"nvrx: note: finish the chain with: nvrx submit-chain --extend --work-dir {work}" in (
        proc.stderr
    )
    manifest = read_manifest(work / "chain.json")
    assert len(manifest.job_ids) == 1
    assert {
        r.array_job_id for r in slurm.queue(name=manifest.job_name, user=Slurm.current_user())
    } == set(manifest.job_ids)

    proc = nvrx("--extend", work=work)
    assert proc.returncode == 0, proc.stderr
    manifest = read_manifest(work / "chain.json")
    assert [g.index for g in manifest.generations] == [0, 1, 2]
    queued = slurm.queue(name=manifest.job_name, user=Slurm.current_user())
    assert {r.array_job_id for r in queued} == set(manifest.job_ids)
    assert all(r.reason == "JobHeldUser" for r in queued)  # pass-through args kept by --extend

    # A second --extend has nothing to add; --cancel removes exactly these generations.
    assert nvrx("--extend", work=work).returncode == 0
    assert len(read_manifest(work / "chain.json").job_ids) == 3
    assert nvrx("--cancel", work=work).returncode == 0
    wait_for(lambda: not live(slurm.queue(manifest.job_ids)), what="the chain cancelled")
    assert read_manifest(work / "chain.json").cancelled_at is not None


def test_validate_asks_slurm_and_writes_nothing(work_root: Path) -> None:
    work = work_root / "validate"
    proc = nvrx("--validate", "-K", "2", *NO_FAULTS, work=work)
    assert proc.returncode == 0, proc.stderr
    notes = [ln for ln in proc.stdout.splitlines() if ln.startswith("generation ")]
    # When, in UTC, and on which nodes; never the epoch seconds nvrx asks Slurm for, nor the
    # id of a job that does not exist.
    assert [ln.split(":")[0] for ln in notes] == ["generation 0", "generation 1"]
    for line in notes:
        assert re.fullmatch(
            r"generation \d: would start at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC on n\S+ "
            r"\(partition \S+, \d+ processors\)",
            line,
        ), line
        assert "Job " not in line
    steps = [ln for ln in proc.stdout.splitlines() if ln.startswith("Checked generation")]
    assert steps == [  # as they come, numbered as the generations are
        f"Checked generation {i} ({i + 1} of 2) with sbatch --test-only" for i in (0, 1)
    ]
    assert not work.exists()
    # The script Slurm was asked about, kept to read where the user says (never in the work dir).
    copy = work_root / "validated.sbatch"
    proc = nvrx(
        "--validate", "-K", "2", *NO_FAULTS, "--write-script", str(copy), "--json", work=work
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["script_copy"] == str(copy) and len(doc["test_only"]) == 2
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == doc["script_sha256"]
    assert not work.exists()

    proc = nvrx("--validate", "-K", "1", "--nodes-per-task", "9", *NO_FAULTS, work=work)
    assert proc.returncode == 1
    assert "Requested node configuration is not available" in proc.stderr


def test_cancel_removes_exactly_its_chain_and_names_are_not_shared_by_accident(
    slurm: Slurm, work_root: Path
) -> None:
    name = f"nvrx-test-{uuid.uuid4().hex[:8]}"
    a = submit(work_root / "a", "-K", "2", "--job-name", name, *NO_FAULTS, "--", "--hold")
    refused = nvrx("-K", "2", "--job-name", name, *NO_FAULTS, "--", "--hold", work=work_root / "b")
    assert refused.returncode == 2
    assert f"jobs named '{name}' are already queued or running" in refused.stderr
    assert "--share-name" in refused.stderr
    assert not (work_root / "b").exists()

    b = submit(
        work_root / "b", "-K", "2", "--job-name", name, "--share-name", *NO_FAULTS, "--", "--hold"
    )
    a_ids = [g["job_id"] for g in a["generations"]]
    b_ids = [g["job_id"] for g in b["generations"]]
    proc = nvrx("--cancel", "--json", work=work_root / "a")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["cancelled"] == a_ids
    wait_for(lambda: not live(slurm.queue(a_ids)), what="chain A cancelled")
    assert {r.array_job_id for r in live(slurm.queue(b_ids))} == set(b_ids)
    # The summary says what it ended, never that the cancelled jobs are still queued.
    text = nvrx("--cancel", work=work_root / "b")
    assert text.returncode == 0, text.stderr
    assert f"Cancelled (were queued or running): {' '.join(b_ids)}" in text.stdout
    assert "Queued or running:" not in text.stdout

    # The cancelled chain's work dir can start a new chain; the old record is kept.
    c = submit(
        work_root / "a", "-K", "1", "--job-name", name, "--share-name", *NO_FAULTS, "--", "--hold"
    )
    assert (work_root / "a" / f"chain.{a['chain_id']}.json").exists()
    assert read_manifest(work_root / "a" / "chain.json").chain_id == c["chain_id"]


def test_a_generation_that_hits_its_time_limit_hands_off(slurm: Slurm, work_root: Path) -> None:
    # The most common way a generation ends: Slurm signals the batch shell at the time limit;
    # task 0's trap must still close the gate and release the generation for the next one.
    work = work_root / "timelimit"
    doc = submit(
        work,
        "-K",
        "2",
        "--train-tasks",
        "1",
        "--hot-spares",
        "1",
        "--cold-spares",
        "0",
        "--time-limit",
        "1",
        *NO_FAULTS,
    )
    first, second = (g["job_id"] for g in doc["generations"])
    wait_for(
        lambda: not live(slurm.queue([first])),
        timeout=180,
        interval=2,
        what="generation 1 to reach its time limit",
    )
    assert (work / "nvrx" / first / "control" / "rdzv_closed").exists()
    wait_for(
        lambda: any(r.state is JobState.RUNNING for r in slurm.queue([second])),
        timeout=180,
        what="generation 2 running",
    )
    acct = wait_for(lambda: slurm.accounting([first]), what="generation 1 in sacct")
    assert {r.state for r in acct} <= {JobState.TIMEOUT, JobState.CANCELLED}


# --- drained nodes leave the rendezvous (docs/submit-chain.md) ---------------------------------


def set_node_state(node: str, state: str) -> None:
    subprocess.run(
        ["scontrol", "update", f"nodename={node}", f"state={state}",
         *(["reason=nvrx test: drained on purpose"] if state == "drain" else [])],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip


@pytest.fixture
def drain_node() -> Iterator[Any]:
    """Drain a node for the test; every node drained this way is resumed afterwards."""
    drained: list[str] = []

    def drain(node: str) -> None:
        drained.append(node)
        set_node_state(node, "drain")

    yield drain
    for node in drained:
        set_node_state(node, "resume")


def marker(work: Path, generation: str, task: int) -> dict[str, str] | None:
    path = work / "nvrx" / generation / "drain" / f"task_{task}.drained"
    try:
        return dict(line.split("=", 1) for line in path.read_text().splitlines())
    except (OSError, ValueError):
        return None


def running_task(slurm: Slurm, generation: str, task: int) -> QueueRow | None:
    rows = [r for r in slurm.queue([generation]) if r.task_id == task]
    return rows[0] if rows and rows[0].state is JobState.RUNNING and rows[0].nodes else None


def test_a_drained_node_leaves_at_the_next_rendezvous_and_a_spare_takes_its_task(
    slurm: Slurm, work_root: Path, drain_node: Any
) -> None:
    work = work_root / "drain"
    # Cycle 0 ends with a workload fault on rank 0 (task 0) after 25 s: by then task 1's node
    # is drained, so the rendezvous of cycle 1 must form without it.
    doc = submit(
        work, "-K", "2", "--train-tasks", "2", "--hot-spares", "1", "--cold-spares", "1",
        "--set", "chain.no_restart_demo=false", "--set", "chain.fault_inject=true",
        "--set", "chain.inject_gpu_failure=", "--set", "chain.fault_ranks=0",
        "--set", "chain.fault_delay=25", "--set", "chain.drain_poll_interval=1",
    )  # fmt: skip
    first, second = (g["job_id"] for g in doc["generations"])
    cycle0 = wait_for(lambda: cycle_info(work, first, 0), what="cycle 0")
    active = expand_hosts(cycle0["active_nodes"])

    def training_peer() -> QueueRow | None:
        # The task that trains beside task 0 (tasks 1 and 2 race to the rendezvous: either may
        # be the one in standby).
        for task in (1, 2):
            row = running_task(slurm, first, task)
            if row is not None and row.nodes in active:
                return row
        return None

    drained_task = wait_for(training_peer, what="a training task besides task 0")
    k = drained_task.task_id
    assert k is not None
    clean = wait_for(lambda: marker(work, first, k), what="the poller's first pass")
    assert clean == {"job_id": drained_task.job_id, "nodes": drained_task.nodes, "drained": ""}

    def checkpointed() -> int | None:
        try:
            return int((work / "checkpoints" / "latest_checkpointed_iteration.txt").read_text())
        except (OSError, ValueError):
            return None

    wait_for(checkpointed, what="a first checkpoint")
    drain_node(drained_task.nodes)
    wait_for(
        lambda: (marker(work, first, k) or {}).get("drained") == drained_task.nodes,
        timeout=60, what="the task's marker to say drained",
    )  # fmt: skip
    assert not (work / "nvrx" / first / "drain" / f"admit.{drained_task.job_id}").exists()
    saved = checkpointed()
    assert saved is not None

    cycle1 = wait_for(lambda: cycle_info(work, first, 1), timeout=180, what="cycle 1")
    assert drained_task.nodes not in expand_hosts(cycle1["active_nodes"]), cycle1
    assert drained_task.nodes not in expand_hosts(cycle1["standby_nodes"]), cycle1
    wait_for(
        lambda: not any(r.task_id == k and r.state.is_live for r in slurm.queue([first])),
        what="the drained task to end",
    )
    cold = wait_for(lambda: running_task(slurm, first, 3), what="the cold spare to start")
    assert cold.nodes != drained_task.nodes
    # The generation goes on: task 0 runs, no no-restart verdict, generation 2 still waits.
    assert running_task(slurm, first, 0) is not None
    assert not (work / "nvrx" / first / "control" / "no_restart").exists()
    assert all(r.state is JobState.PENDING for r in slurm.queue([second]))

    def resumed() -> int | None:
        for log in (work / "logs").glob(f"*_{first}_*_cycle1.log"):
            for line in log.read_text(errors="replace").splitlines():
                if "resuming from iteration" in line:
                    return int(line.split("resuming from iteration", 1)[1].split()[0])
        return None

    assert wait_for(resumed, what="cycle 1's workers") >= saved > 0
    launcher_logs = "".join(
        p.read_text(errors="replace") for p in (work / "nvrx" / first / "logs").glob("nvrx_*")
    )
    assert f"storage health check failed on {drained_task.nodes}" in launcher_logs


def test_a_drain_query_that_times_out_publishes_nothing(
    slurm: Slurm, work_root: Path, drain_node: Any
) -> None:
    work = work_root / "blind"
    real = shutil.which("sinfo")
    assert real is not None
    fake = work_root / "fakebin"
    fake.mkdir()
    hang = work_root / "sinfo.hang"
    (fake / "sinfo").write_text(f'#!/bin/bash\n[ -e {hang} ] && sleep 30\nexec {real} "$@"\n')
    (fake / "sinfo").chmod(0o755)
    doc = submit(
        work, "-K", "1", "--train-tasks", "1", "--hot-spares", "1", "--cold-spares", "0",
        *NO_FAULTS, "--set", "chain.drain_poll_interval=1",
        "--set", "chain.drain_command_timeout=2", path_prefix=fake,
    )  # fmt: skip
    (generation,) = [g["job_id"] for g in doc["generations"]]
    spare = wait_for(lambda: running_task(slurm, generation, 1), what="the hot spare running")
    wait_for(lambda: marker(work, generation, 1), what="the poller's first pass")
    hang.touch()
    drain_node(spare.nodes)
    time.sleep(8)  # several passes, each of which times out
    assert marker(work, generation, 1) == {
        "job_id": spare.job_id, "nodes": spare.nodes, "drained": ""
    }  # fmt: skip
    (log,) = (work / "logs" / "slurm").glob(f"*_{generation}_0.out")
    assert "sinfo failed or timed out after 2s; this pass publishes nothing" in log.read_text()
    hang.unlink()  # the controller answers again: the next pass sees the drain
    wait_for(
        lambda: (marker(work, generation, 1) or {}).get("drained") == spare.nodes,
        timeout=60, what="the marker once sinfo answers",
    )  # fmt: skip


def test_a_drain_is_seen_whatever_partition_the_job_exports(
    slurm: Slurm, work_root: Path, drain_node: Any
) -> None:
    # The job inherits the submitter's environment (--export=ALL): a sinfo that honoured this
    # would answer "nothing drained" for the partition that does not exist, every pass.
    work = work_root / "exported"
    doc = submit(
        work, "-K", "1", "--train-tasks", "1", "--hot-spares", "1", "--cold-spares", "0",
        *NO_FAULTS, "--set", "chain.drain_poll_interval=1",
        exported={"SINFO_PARTITION": "nvrx-no-such-partition"},
    )  # fmt: skip
    (generation,) = [g["job_id"] for g in doc["generations"]]
    spare = wait_for(lambda: running_task(slurm, generation, 1), what="the hot spare running")
    wait_for(lambda: marker(work, generation, 1), what="the poller's first pass")
    drain_node(spare.nodes)
    wait_for(
        lambda: (marker(work, generation, 1) or {}).get("drained") == spare.nodes,
        timeout=60, what="the marker to say drained",
    )  # fmt: skip
    assert not (work / "nvrx" / generation / "drain" / f"admit.{spare.job_id}").exists()


def test_a_stale_marker_from_an_earlier_allocation_is_ignored(
    slurm: Slurm, work_root: Path
) -> None:
    work = work_root / "stale"
    doc = submit(
        work, "-K", "2", "--train-tasks", "2", "--hot-spares", "0", "--cold-spares", "0",
        *NO_FAULTS, "--set", "chain.drain_poll=on", "--set", "chain.drain_poll_interval=1",
    )  # fmt: skip
    first, second = (g["job_id"] for g in doc["generations"])
    # Generation 2's directory holds, before it starts, a verdict of another allocation that
    # names every node drained.
    drain_dir = work / "nvrx" / second / "drain"
    drain_dir.mkdir(parents=True)
    every = ",".join(f"n{i}" for i in range(1, 9))
    for task in (0, 1):
        (drain_dir / f"task_{task}.drained").write_text(
            f"job_id=1\nnodes={every}\ndrained={every}\n"
        )
    subprocess.run(["scancel", first], check=True, timeout=30)
    info = wait_for(lambda: cycle_info(work, second, 0), timeout=180, what="generation 2 cycle 0")
    assert len(expand_hosts(info["active_nodes"])) == 2, info
    task1 = wait_for(lambda: running_task(slurm, second, 1), what="task 1 running")
    wait_for(
        lambda: (
            marker(work, second, 1) == {"job_id": task1.job_id, "nodes": task1.nodes, "drained": ""}
        ),
        what="the stale marker replaced by this allocation's",
    )
    assert (drain_dir / f"admit.{task1.job_id}").exists()


def test_the_fault_warning_comes_before_any_generation_is_queued(
    slurm: Slurm, work_root: Path
) -> None:
    # The rehearsal's demo, submitted for real (held: nothing runs). Both streams into one, in
    # the order a terminal shows them: the warning first, then each generation as it queues.
    work = work_root / "warned"
    proc = subprocess.run(
        [sys.executable, "-m", "nvrx.cli", "submit-chain", "--config", str(REHEARSAL),
         "--work-dir", str(work), "-K", "2", "--", "--hold"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("WARNING: this chain injects faults into itself: the no-restart")
    assert [ln.split(":")[0] for ln in lines if ln.startswith("Submitted")] == [
        "Submitted generation 0",
        "Submitted generation 1",
    ]
    assert "Drain poller: on (auto: " in proc.stdout


def test_a_found_config_submits_its_faults_only_with_allow_faults(
    slurm: Slurm, work_root: Path
) -> None:
    here = work_root / "example"
    here.mkdir()
    found = here / "nvrx.yaml"
    text = REHEARSAL.read_text()
    for name in ("./ft_launcher.py", "./worker.py"):  # the copy runs the example's programs
        text = text.replace(name, str(REHEARSAL.parent / name[2:]))
    found.write_text(text)
    argv = [sys.executable, "-m", "nvrx.cli", "submit-chain", "--work-dir",
            str(work_root / "allowed"), "-K", "1", "--json"]  # fmt: skip

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*argv, *extra, "--", "--hold"], capture_output=True, text=True,
                              cwd=here, timeout=300, check=False)  # fmt: skip

    refused = run()
    assert refused.returncode == 2 and "pass --allow-faults" in refused.stderr
    assert json.loads(refused.stdout)["ok"] is False
    allowed = run("--allow-faults")
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stderr.splitlines()[0] == (
        f"nvrx: note: reading settings from {found}, found by the search (not named by "
        "--config or NVRX_CONFIG)"
    )
    assert len(json.loads(allowed.stdout)["generations"]) == 1
