"""nvrx watch on the local cluster, watching rehearsal chains whose processes really die."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from nvrx.slurm import JobState, Slurm

from .conftest import REPO, local_slurm, wait_for
from .test_chain import NO_FAULTS, nvrx, running_task, submit

WORKER = REPO / "examples" / "rehearsal" / "worker.py"


@pytest.fixture
def work_root(shared_dir: Path) -> Iterator[Path]:
    yield shared_dir
    for manifest in shared_dir.glob("*/chain.json"):
        nvrx("--cancel", work=manifest.parent)


def watch(*args: str, state_dir: Path) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "nvrx.cli", "watch", "--json", "--state-dir", str(state_dir), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr
    doc: dict[str, Any] = json.loads(lines[-1])
    return proc.returncode, doc


def detectors(doc: dict[str, Any]) -> set[str]:
    return {f["detector"] for f in doc["findings"]}


def workers_of(work: Path) -> list[int]:
    """The rehearsal workers of a chain: processes of worker.py with this chain's checkpoints."""
    pids = []
    marker = f"NVRX_CHECKPOINT_DIR={work}/checkpoints\0".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            # the worker itself (python worker.py ...), not srun or the launcher that name it
            if (
                len(argv) > 1
                and argv[1].endswith(b"worker.py")
                and marker in (entry / "environ").read_bytes()
            ):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def cycle_files(work: Path) -> list[Path]:
    return sorted(
        p
        for p in (work / "nvrx").glob("*/cycle_infos/cycle_info.*.*.*")
        if not p.name.endswith(".current")
    )


def kill_a_worker_and_wait_for_the_next_cycle(work: Path) -> None:
    before = len(cycle_files(work))
    pids = wait_for(lambda: workers_of(work), what="running workers")
    os.kill(pids[0], signal.SIGKILL)
    wait_for(lambda: len(cycle_files(work)) > before, timeout=180, what="a new cycle")


def test_repeated_failures_without_checkpoint_progress_are_a_storm_and_a_stall(
    work_root: Path,
) -> None:
    work = work_root / "storm"
    ckpt = work / "checkpoints" / "latest_checkpointed_iteration.txt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_text("7\n")
    # Workers that never save: the checkpoint stays at 7 whatever the cycles do.
    submit(
        work,
        "-K",
        "1",
        "--train-tasks",
        "2",
        "--hot-spares",
        "0",
        "--cold-spares",
        "0",
        *NO_FAULTS,
        "--set",
        "chain.max_no_progress_cycles=100",
        "--set",
        f"chain.train_command={WORKER} --step-seconds 0.2 --save-interval 1000000",
    )
    wait_for(lambda: cycle_files(work), timeout=180, what="cycle 0")
    for _ in range(3):
        kill_a_worker_and_wait_for_the_next_cycle(work)

    code, doc = watch(
        "--work-dir", str(work), "--set", "watch.storm_cycles=3", state_dir=work_root / "state"
    )
    found = {f["detector"]: f for f in doc["findings"]}
    assert {"restart_storm", "stalled_progress"} <= set(found)
    assert found["stalled_progress"]["key"].endswith("-7")
    assert found["stalled_progress"]["severity"] == "critical"
    assert code == 1
    assert doc["snapshot"]["checkpoint"]["value"] == 7
    assert doc["snapshot"]["restarts"] >= 3

    # One step below the storm threshold, the same chain is no storm.
    _, calm = watch(
        "--work-dir", str(work), "--set", "watch.storm_cycles=10", state_dir=work_root / "state"
    )
    assert "restart_storm" not in detectors(calm)


def test_an_orphaned_generation_is_reported_and_only_acted_on_with_act(
    slurm: Slurm, work_root: Path
) -> None:
    work = work_root / "orphan"
    # 1 train + 1 hot running, 6 cold spares pending behind the throttle.
    doc = submit(
        work, "-K", "1", "--train-tasks", "1", "--hot-spares", "1", "--cold-spares", "6", *NO_FAULTS
    )
    (generation,) = [g["job_id"] for g in doc["generations"]]
    wait_for(
        lambda: (work / "nvrx" / generation / "control" / "rdzv_host").exists(),
        what="task 0 published the rendezvous host",
    )
    # SIGKILL task 0's batch shell: its EXIT trap cannot run, nobody cancels the spares.
    subprocess.run(["scancel", "--batch", "--signal=KILL", f"{generation}_0"], check=True)
    wait_for(
        lambda: [e for e in slurm.accounting([f"{generation}_0"]) if e.state.is_terminal],
        what="task 0 ended in sacct",
    )
    state = work_root / "state"

    _, doc = watch("--work-dir", str(work), "--set", "watch.grace=0", state_dir=state)
    orphan = [f for f in doc["findings"] if f["detector"] == "orphaned_generation"]
    assert [f["key"] for f in orphan] == [f"nvrx-orphan-{generation}"]
    assert orphan[0]["command"] == ["scancel", "--state=PENDING", generation]
    assert doc["actions"] == [
        f"[observe-only] not acting; owner should run: scancel --state=PENDING {generation}"
    ]
    pending = [r for r in slurm.queue([generation]) if r.state is JobState.PENDING]
    assert pending, "observe-only must leave the pending spares alone"

    _, doc = watch("--work-dir", str(work), "--set", "watch.grace=0", "--act", state_dir=state)
    assert doc["actions"] == [f"[act] ran: scancel --state=PENDING {generation}"]
    wait_for(
        lambda: not [r for r in slurm.queue([generation]) if r.state is JobState.PENDING],
        what="the pending spares cancelled",
    )

    code, doc = watch("--work-dir", str(work), "--set", "watch.grace=0", state_dir=state)
    assert "orphaned_generation" not in detectors(doc)
    assert code == 0  # clean: nothing but information left
    assert all(f["severity"] == "info" for f in doc["findings"])

    # Watching by any job id of the chain finds the same chain (through its manifest).
    dry_state = work_root / "dry-state"
    _, by_id = watch(f"{generation}_3", "--dry-run", state_dir=dry_state)
    assert by_id["chain"]["chain_id"] == doc["chain"]["chain_id"]
    assert by_id["chain"]["resolved_from"] == "manifest"
    # --dry-run keeps no state, not even what the id resolved to, and writes no log line.
    assert not [p for p in dry_state.rglob("*") if p.is_file()]
    _, by_id = watch(f"{generation}_3", state_dir=state)
    assert by_id["chain"]["chain_id"] == doc["chain"]["chain_id"]


class Counter(BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        Counter.hits.append(self.path)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def heartbeat_server() -> Iterator[str]:
    Counter.hits = []
    server = HTTPServer(("127.0.0.1", 0), Counter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/beat"
    server.shutdown()


@pytest.fixture
def controller_restored() -> Iterator[None]:
    yield None
    local_slurm("up")


def test_a_blind_watcher_exits_3_and_sends_no_heartbeat(
    slurm: Slurm, work_root: Path, heartbeat_server: str, controller_restored: None
) -> None:
    work = work_root / "blind"
    doc = submit(work, "-K", "1", *NO_FAULTS, "--", "--hold")
    generations = [g["job_id"] for g in doc["generations"]]
    state = work_root / "state"
    code, doc = watch("--work-dir", str(work), "--heartbeat-url", heartbeat_server, state_dir=state)
    assert code == 0 and doc["degraded"] is False
    assert Counter.hits == ["/beat"]
    assert [g["job_id"] for g in doc["snapshot"]["platform"]["generations"]] == generations

    local_slurm("down", "slurmctld")
    code, doc = watch(
        "--work-dir",
        str(work),
        "--heartbeat-url",
        heartbeat_server,
        "--set",
        "slurm.command_timeout=3",
        "--set",
        "slurm.retry_deadline=4",
        state_dir=state,
    )
    assert code == 3
    assert doc["degraded"] is True
    assert any(f["key"].startswith("nvrx-watch-blind-") for f in doc["findings"])
    assert doc["snapshot"]["platform"]["queue_ok"] is False
    assert "chain_exhausted" not in detectors(doc)  # blind, not "the chain is gone"
    assert Counter.hits == ["/beat"]  # no heartbeat from a blind pass


def test_one_fleet_pass_reports_three_chains_and_what_the_failure_cost(
    slurm: Slurm, work_root: Path
) -> None:
    # Three rehearsal chains at once; one gets a workload fault 4 s into its first cycle, before
    # its first save (every 25 iterations of 0.2 s): that whole cycle is redone. A fleet watch
    # passes every second meanwhile, as an operator's --interval loop would.
    train = f"{WORKER} --step-seconds 0.2 --train-iters 120"
    common = ["-K", "1", "--train-tasks", "2", "--hot-spares", "0", "--cold-spares", "0",
              "--set", f"chain.train_command={train}", "--set", "chain.save_interval=25"]  # fmt: skip
    root = work_root / "fleet"
    for name in ("clean-a", "clean-b"):
        submit(root / name, "--job-name", f"fleet-{name}-{os.getpid()}", *common, *NO_FAULTS)
    submit(
        root / "faulty", "--job-name", f"fleet-faulty-{os.getpid()}", *common,
        "--set", "chain.no_restart_demo=false", "--set", "chain.fault_inject=true",
        "--set", "chain.inject_gpu_failure=",
        "--set", "chain.fault_ranks=1", "--set", "chain.fault_delay=4",
    )  # fmt: skip
    state = work_root / "fleet-state"
    loop = subprocess.Popen(
        [sys.executable, "-m", "nvrx.cli", "watch", "--fleet", str(root), "--interval", "1",
         "--json", "--state-dir", str(state)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        names = [f"fleet-{n}-{os.getpid()}" for n in ("clean-a", "clean-b", "faulty")]
        wait_for(
            lambda: not [r for r in slurm.queue(name=names) if r.state.is_live],
            timeout=240,
            what="the three chains to finish",
        )
        wait_for(
            lambda: (
                len(slurm.accounting(name=names, user=Slurm.current_user())) >= 6
                and all(r.end for r in slurm.accounting(name=names, user=Slurm.current_user()))
            ),
            what="accounting",
        )
    finally:
        loop.send_signal(signal.SIGINT)
        loop.wait(timeout=60)
    _, doc = watch("--fleet", str(root), state_dir=state)
    assert doc["fleet"] is True and doc["slurm_commands"] <= 3
    chains = {Path(c["work_dir"]).name: c for c in doc["chains"]}
    assert set(chains) == {"clean-a", "clean-b", "faulty"}
    assert all(not c["degraded"] for c in chains.values())
    assert [chains[n]["restarts_in_window"] for n in ("clean-a", "clean-b", "faulty")] == [0, 0, 1]

    # The faulty chain's cost, from its own cycle files: cycle 0 is lost whole (nothing was
    # saved before it failed), and the gap to cycle 1 is restart overhead.
    (generation,) = {p.parent.name for p in (root / "faulty" / "nvrx").glob("*/cycle_infos")}
    c0 = cycle_window(root / "faulty", generation, 0)
    c1 = cycle_window(root / "faulty", generation, 1)
    seconds = chains["faulty"]["goodput"]["seconds"]
    assert seconds["progress_lost"] == pytest.approx(c0[1] - c0[0], abs=0.5)
    assert seconds["restart_overhead"] == pytest.approx(c1[0] - c0[1], abs=1.5)
    assert seconds["unknown"] <= 1.5
    fraction = {n: c["goodput"]["fraction"] for n, c in chains.items()}
    assert fraction["faulty"] < min(fraction["clean-a"], fraction["clean-b"]) - 0.05


def cycle_window(work: Path, generation: str, cycle: int) -> tuple[float, float]:
    from datetime import datetime

    data = json.loads(
        (
            work / "nvrx" / generation / "cycle_infos" / f"cycle_info.{generation}.0.{cycle}"
        ).read_text()
    )
    return tuple(  # type: ignore[return-value]
        datetime.fromisoformat(data[k].replace("Z", "+00:00")).timestamp()
        for k in ("cycle_start_time", "cycle_end_time")
    )


def test_a_job_name_slurm_does_not_know_is_a_blind_pass_not_a_clean_one(
    slurm: Slurm, work_root: Path
) -> None:
    # Cycle files of a job the real Slurm never ran, watched under a name nothing uses (a
    # typo): squeue and sacct answer "none", which must not read as a quiet, healthy chain.
    from datetime import UTC, datetime, timedelta

    work = work_root / "typo"
    cycles = work / "nvrx" / "987654321" / "cycle_infos"
    cycles.mkdir(parents=True)
    start = datetime.now(UTC) - timedelta(hours=3)
    (cycles / "cycle_info.987654321.0.0").write_text(
        json.dumps(
            {"job_id": "987654321", "attempt_index": 0, "cycle_number": 0,
             "cycle_start_time": start.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "cycle_end_time": "",
             "cycle_log_file": "", "active_nodes": "n1", "standby_nodes": "",
             "generation": "0", "active_ranks": "0"}
        )
    )  # fmt: skip
    name = f"nvrx-no-such-{os.getpid()}"
    code, doc = watch(
        "--work-dir", str(work), "--job-name", name, state_dir=work_root / "typo-state"
    )
    assert (code, doc["degraded"], doc["state"]) == (3, True, "blind")
    (finding,) = [f for f in doc["findings"] if "unseen" in f["key"]]
    assert f"Slurm knows no job 987654321 of name '{name}'" in finding["summary"]


def test_a_drained_node_a_chain_runs_on_shows_in_one_pass_of_watch_and_of_the_fleet(
    slurm: Slurm, work_root: Path
) -> None:
    work = work_root / "drained"
    doc = submit(
        work, "-K", "1", "--train-tasks", "1", "--hot-spares", "1", "--cold-spares", "0", *NO_FAULTS
    )
    (generation,) = [g["job_id"] for g in doc["generations"]]
    spare = wait_for(lambda: running_task(slurm, generation, 1), what="the hot spare running")
    node = spare.nodes
    prom = work_root / "nvrx.prom"
    subprocess.run(
        ["scontrol", "update", f"nodename={node}", "state=drain", "reason=nvrx test: xid 79"],
        check=True, timeout=30,
    )  # fmt: skip
    try:
        _, one = watch(
            "--work-dir", str(work), "--set", f"watch.prom_file={prom}",
            state_dir=work_root / "state",
        )  # fmt: skip
        (found,) = [f for f in one["findings"] if f["detector"] == "drained_node_in_use"]
        assert f"{node} (task 1, draining" in found["summary"]
        assert "'nvrx test: xid 79'" in found["summary"]
        assert found["command"] == []  # reported, never acted on
        (held,) = one["snapshot"]["platform"]["drained_in_use"]
        assert (held["generation"], held["task"], held["node"]) == (generation, 1, node)
        assert f'nvrx_watch_drained_nodes_in_use{{chain="{one["chain"]["name"]}"}} 1' in (
            prom.read_text()
        )

        _, fleet = watch("--fleet", str(work), state_dir=work_root / "fleet-state")
        (chain,) = fleet["chains"]
        assert "drained_node_in_use" in detectors(chain)
        table = subprocess.run(
            [sys.executable, "-m", "nvrx.cli", "watch", "--fleet", str(work),
             "--state-dir", str(work_root / "fleet-state")],
            capture_output=True, text=True, timeout=300, check=False,
        ).stdout  # fmt: skip
        header, row = table.splitlines()[1:3]
        # The drained node of the 2 the chain's tasks hold, and the poller its spare turns on.
        cells = dict(zip(header.split(), row.split(), strict=False))
        assert (cells["drained"], cells["poller"]) == (f"{node}(1/2)", "on")
        assert (one["drains"]["drained"], one["drains"]["chain_nodes"]) == (1, 2)
    finally:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], timeout=30)


def test_a_chain_ended_by_the_no_restart_verdict_trained_nothing_and_says_its_drains(
    slurm: Slurm, work_root: Path
) -> None:
    # The rehearsal's no-restart demo (deploy/quickstart's): a fault in cycle 0, no checkpoint
    # progress, every launcher exits 93 and task 0's trap cancels the rest of the chain, so
    # accounting shows task 0 CANCELLED 0:0, as a clean end would.
    work = work_root / "verdict"
    doc = submit(
        work, "-K", "2", "--train-tasks", "2", "--hot-spares", "1", "--cold-spares", "1",
        "--job-name", f"verdict-{os.getpid()}", "--set", "chain.fault_delay=3",
    )  # fmt: skip
    ids = [g["job_id"] for g in doc["generations"]]
    wait_for(lambda: not [r for r in slurm.queue(ids) if r.state.is_live], timeout=180,
             what="the verdict to end the chain")  # fmt: skip
    wait_for(lambda: all(r.end for r in slurm.accounting(ids[:1])), what="accounting")
    assert (work / "nvrx" / ids[0] / "control" / "no_restart").exists()
    code, doc = watch("--work-dir", str(work), state_dir=work_root / "verdict-state")
    assert code == 1 and "chain_exhausted" in detectors(doc)
    (ending,) = [e for e in doc["snapshot"]["platform"]["task0_endings"] if e["job_id"] == ids[0]]
    assert ending["no_restart"] is True
    good = doc["goodput"]
    assert good["seconds"]["productive"] == 0 and good["fraction"] == 0
    assert good["seconds"]["progress_lost"] > 0  # the cycle, redone from the last save
    # Drains: the chain's spares make the in-job poller on; sinfo answered; nothing runs now.
    drains = doc["drains"]
    assert (drains["poller"], drains["sinfo"], drains["chain_nodes"]) == ("on", "ok", 0)
    assert drains["drain_suspects"] is False
