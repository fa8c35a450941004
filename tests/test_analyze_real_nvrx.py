"""`nvrx analyze log` on what NVRx's own `ft_launcher` writes: the launcher's log
(`--ft-nvrx-logfile`, every launcher's lines through its log server) is split into the job's
restart cycles and each cycle is explained with the launcher's own account (its restart, its
no-restart verdict, the node that left), on logs of real runs (tests/data/real-nvrx/, README.md
there) and on hostile variants of the launcher's line families (docs/log-attribution-policy.md,
NVRx's launcher log)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nvrx.analyze import logcycles
from nvrx.analyze.logattr import (
    ERRORS_NOT_FOUND,
    LogAttribution,
    attribute_blocks,
    attribute_log,
)
from nvrx.analyze.logscan import text_blocks
from nvrx.campaign.pool import FaultType
from nvrx.logtext import RESTART, STOP, rank_mentions
from nvrx.score.evidence import Attribution
from nvrx.score.model import Case, GroundTruth
from nvrx.score.rules import judge_rules
from tests.cli_runner import nvrx as nvrx_cli

REAL = Path(__file__).parent / "data" / "real-nvrx"


def analysed(scenario: str, name: str = "nvrx.log") -> LogAttribution:
    return attribute_log((REAL / scenario / "logs" / name).read_text(encoding="utf-8"))


def line_of(scenario: str, words: str, name: str = "nvrx.log") -> int:
    """The number of the first line of a recorded log that holds `words`."""
    text = (REAL / scenario / "logs" / name).read_text(encoding="utf-8")
    return next(no for no, line in enumerate(text.splitlines(), 1) if words in line)


# --- the recordings ----------------------------------------------------------------------------


def test_a_restart_after_an_exception_is_two_cycles_the_first_ended_by_rank_1_and_restarted() -> (
    None
):
    result = analysed("restart-after-exception")
    first, second = result.cycles
    restart_line = line_of("restart-after-exception", "will restart worker group")
    next_rendezvous = line_of("restart-after-exception", "Cycle: 1 Event: rendezvous_started")
    # The failure, the launcher's decision and the workers' stop are the end of cycle 0; cycle 1
    # begins at its rendezvous (NVRx numbers `failure_detected` with the next cycle already).
    assert (first.span.first_line, first.span.last_line) == (1, next_rendezvous - 1)
    assert second.span.first_line == next_rendezvous
    a = first.attribution
    # torch's `failed (exitcode: 1) local_rank: 0 (pid: 6662)` is launcher 6640's worker: the
    # node localhost_6640_0 holds group rank 1, one worker per node.
    assert (a.fault_class, a.root_rank, a.decision) == ("WORKLOAD_EXC", 1, STOP)
    assert a.launcher is not None and a.launcher.verdict == "restart"
    assert a.launcher.verdict_line is not None and a.launcher.verdict_line.line == restart_line
    assert "The launcher restarted the worker group (3/3 attempts left" in a.explanation
    assert "app_cycle0.log" in a.explanation  # where the workers' traceback is
    # Cycle 1 trained to the end: the job needs nothing.
    assert second.attribution.decision == ERRORS_NOT_FOUND and result.decision == ERRORS_NOT_FOUND
    # The cycle's own application log holds the traceback: rank 1's InjectedFault.
    app = analysed("restart-after-exception", "app_cycle0.log")
    assert (app.fault_class, app.root_rank, app.decision) == ("WORKLOAD_EXC", 1, STOP)
    assert any("InjectedFault" in e.text for e in app.evidence)


def test_the_judge_reads_the_real_restart_as_the_injected_exception_on_rank_1() -> None:
    answer = analysed("restart-after-exception").text()
    truth = GroundTruth(
        fault=FaultType.WORKLOAD_EXC, rank=1, iteration=40, nodes=2, gpus_per_node=1,
        segment_size=1,
    )  # fmt: skip
    verdict = judge_rules(Case(id="real", truth=truth, log_attribution=answer))
    assert (verdict.restart_correct, verdict.rank_primary) == ("true", "true"), verdict.notes
    # The launcher's account names nodes and launchers, never another rank.
    assert Attribution.parse(answer).judged().ranks == {1}


def test_early_termination_is_the_launchers_no_restart_verdict_and_stops_the_job() -> None:
    result = analysed("no-progress-exit-93")
    early = line_of("no-progress-exit-93", "EARLY TERMINATION")
    # No cycle 1 ever began: the failure's `Cycle: 1 Event: failure_detected` is cycle 0's end.
    assert len(result.cycles) == 1
    assert (result.decision, result.fault_class, result.root_rank) == (STOP, "WORKLOAD_EXC", 1)
    assert result.launcher is not None and result.launcher.verdict == "stop"
    assert result.launcher.verdict_line is not None and result.launcher.verdict_line.line == early
    assert result.launcher.reason.startswith("EARLY TERMINATION: 1 consecutive training cycles")
    assert "The launcher gave its no-restart verdict (EARLY TERMINATION" in result.explanation
    doc = result.to_json()
    assert doc["launcher"]["decision"] == "stop" and doc["cycles"][0]["launcher"]["decision"]


def test_a_node_that_fails_its_storage_check_is_cycle_1s_membership_change_not_a_failure() -> None:
    result = analysed("storage-check-node-leaves")
    first, second = result.cycles
    check = line_of("storage-check-node-leaves", "Storage path health check failed for node")
    raised = line_of("storage-check-node-leaves", "raised UnhealthyNodeException")
    assert (first.attribution.fault_class, first.attribution.root_rank) == ("WORKLOAD_EXC", 0)
    assert first.attribution.launcher is not None
    assert first.attribution.launcher.verdict == "restart"
    a = second.attribution
    # The launcher handled it (the node left, the rendezvous formed without it) and the job
    # trained to the end: the `UnhealthyNodeException` is no exception of the training.
    assert (a.decision, a.fault_class) == (ERRORS_NOT_FOUND, None)
    assert a.launcher is not None
    [left] = a.launcher.departures
    assert (left.node, left.why.launcher, left.why.line, left.also) == (
        "localhost_7096_0",
        1,
        check,
        (raised,),
    )
    assert "invalid or unreadable paths" in left.why.text
    # In cycle 0 that node waited as a spare (it tried to join; the two others hold the ranks).
    assert "localhost_7096_0" in first.attribution.launcher.attempted
    assert "localhost_7096_0" not in dict(first.attribution.launcher.joined)
    text = result.text()
    block = text[text.index("Cycle 1 (") :]
    assert "node localhost_7096_0 (launcher 1), a spare in the cycle before, left the job" in block
    assert f"(lines {check}, {raised})" in block
    assert block.splitlines()[1] == ERRORS_NOT_FOUND  # the decision field keeps the sentinel


def test_analyze_log_prints_the_cycles_of_a_real_launcher_log(tmp_path: Path) -> None:
    log = REAL / "storage-check-node-leaves" / "logs" / "nvrx.log"
    out = nvrx_cli("analyze", "log", str(log), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [c["decision"] for c in doc["cycles"]] == [STOP, ERRORS_NOT_FOUND]
    assert doc["cycles"][1]["launcher"]["departures"][0]["node"] == "localhost_7096_0"


# --- the launcher's line families ----------------------------------------------------------------

TAG = "[INFO] [vm] [workload:?(?) infra:{k}(?)]"


def nvrx(k: int, text: str, stamp: str = "2026-12-08 00:03:38,891") -> str:
    """A line of launcher `k` as NVRx's log server writes it."""
    return f"{stamp} {TAG.format(k=k)} {text}"


def event(k: int, cycle: int, name: str, node: str | None = None) -> str:
    node = node or f"n_{100 + k}_0"
    return nvrx(
        k,
        f"profiling.py:93   - Cycle: {cycle} Event: {name} Node: {node} Rank: {k} "
        "Time: 2026-12-08 00:03:34.572 UTC",
    )


def joined(k: int, rank: int) -> str:
    return nvrx(
        k,
        f"ft_rendezvous_barrier.py:2786 The node 'n_{100 + k}_0' has joined the rendezvous "
        f"'7300' as rank {rank} in a world of size 2.",
    )


def exited(k: int, code: int = 1) -> str:
    """torch's report of launcher k's worker (local rank 0) exiting, with the launcher's pid."""
    return (
        f"E1208 00:03:38.890000 {100 + k} torch/distributed/elastic/multiprocessing/api.py:1002] "
        f"failed (exitcode: {code}) local_rank: 0 (pid: 9{k}) of binary: /venv/bin/python3"
    )


def start(k: int, cycle: int) -> list[str]:
    return [
        event(k, cycle, "rendezvous_started"),
        joined(k, k),
        event(k, cycle, "worker_start_completed"),
    ]


SHAPE = [nvrx(0, "launcher.py:2735 Using nproc_per_node=1."), *start(0, 0), *start(1, 0)]


def account_of(lines: list[str]) -> LogAttribution:
    return attribute_log("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("line", "verdict"),
    [
        ("launcher.py:636 [default] Worker group FAILED. 3/3 attempts left; will restart worker "
         "group", "restart"),
        ("launcher.py:636 [default] Worker group UNHEALTHY. 1/3 attempts left; will restart "
         "worker group", "restart"),
        ("api.py:958 [default] Detected 1 new nodes from group_rank=0; will restart worker group",
         "restart"),
        ("launcher.py:636 [default] Joining cluster restart (group_rank=1)", "restart"),
        ("progress_tracker.py:248 EARLY TERMINATION: 2 consecutive training cycles without "
         "progress (threshold: 2). Training stuck at iteration ~1.", "stop"),
        ("launcher.py:619 [default] Progress tracker detected no progress across restarts. No "
         "more restarts will be attempted.", "stop"),
        ("launcher.py:742 [default] Another launcher reported a no-restart decision "
         "(attribution_stop); terminating workers.", "stop"),
        ("launcher.py:700 [default] Attribution recommended stopping the job; terminating "
         "workers and signalling the rest of the job.", "stop"),
        ("launcher.py:1743 Agent .run() raised exception, e=NoRestartRequested('no_progress')",
         "stop"),
        ("launcher.py:1730 Agent .run() ended with terminal worker-group failure: Worker group "
         "failed for python3", "exhausted"),
        ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "exhausted"),
    ],
)  # fmt: skip
def test_each_wording_of_the_launchers_decision_is_read_as_its_verdict(
    line: str, verdict: str
) -> None:
    result = account_of([*SHAPE, exited(1), nvrx(1, line)])
    assert result.launcher is not None and result.launcher.verdict == verdict
    assert result.root_rank == 1  # the decision line never displaces the worker's failure


@pytest.mark.parametrize(
    "line",
    [
        "ft_rendezvous_barrier.py:2618 GPU health check failed for node n_101_0: Node n_101_0 "
        "has an unhealthy GPU.",
        "ft_rendezvous_barrier.py:2618 Storage path health check failed for node n_101_0: Node "
        "n_101_0 has invalid or unreadable paths.",
        "ft_rendezvous_barrier.py:2624 Unexpected error during NIC link health check for node "
        "n_101_0: [Errno 2] No such file or directory",
        "ft_rendezvous_barrier.py:2694 Node n_101_0 is excluded from the training due to an "
        "user request.",
        "launcher.py:1713 Agent .run() raised UnhealthyNodeException: Node n_101_0 has an "
        "unhealthy GPU.",
    ],
)
def test_a_node_leaving_on_a_health_check_is_a_departure_in_any_of_its_wordings(line: str) -> None:
    result = account_of([*SHAPE, nvrx(1, line)])
    assert result.launcher is not None
    [left] = result.launcher.departures
    assert left.node == "n_101_0" and left.why.launcher == 1
    assert result.decision == ERRORS_NOT_FOUND  # the launcher handled it; nothing else failed


def test_a_followers_echo_never_replaces_the_leaders_decision_and_a_stop_outranks_a_restart() -> (
    None
):
    leader = nvrx(1, "[default] Worker group FAILED. 2/3 attempts left; will restart worker group")
    follower = nvrx(0, "[default] Joining cluster restart (group_rank=0)")
    restarted = account_of([*SHAPE, follower, leader, follower]).launcher
    assert restarted is not None and restarted.reason == "2/3 attempts left"
    stop = nvrx(0, "[default] Another launcher reported a no-restart decision (no_progress); ...")
    stopped = account_of([*SHAPE, leader, stop]).launcher
    assert stopped is not None and (stopped.verdict, stopped.reason) == (
        "stop",
        "no-restart decision (no_progress)",
    )


def test_the_no_restart_verdict_stops_a_job_whose_cause_a_restart_would_cure() -> None:
    lines = [
        *SHAPE,
        nvrx(1, "1: RuntimeError: NCCL error: remote process exited or there was a network error"),
        nvrx(1, "EARLY TERMINATION: 3 consecutive training cycles without progress (threshold: 3)"),
    ]
    result = account_of(lines)
    assert (result.fault_class, result.decision) == ("NCCL_ERROR", STOP)
    assert result.explanation.startswith("Stop job: the launcher's no-restart verdict.")
    without = account_of(lines[:-1])
    assert without.decision == RESTART
    # Restarts used up are no verdict on the job: a new allocation may still cure the network.
    exhausted = account_of([*lines[:-1], "torch.distributed.elastic.multiprocessing.errors."
                            "ChildFailedError: "])  # fmt: skip
    assert exhausted.decision == RESTART and exhausted.launcher is not None
    assert "The launcher had no restart left (torch elastic's failure report" in (
        exhausted.explanation
    )


def test_a_worker_exit_is_placed_on_its_rank_only_when_the_log_says_the_workers_per_node() -> None:
    wide = [nvrx(0, "launcher.py:2735 Using nproc_per_node=4."), *start(0, 0), *start(1, 0)]
    assert account_of([*wide, exited(1)]).root_rank == 4  # group rank 1 times 4, local rank 0
    unknown = account_of([*start(0, 0), *start(1, 0), exited(1)])
    assert (unknown.fault_class, unknown.root_rank) == ("WORKLOAD_EXC", None)


# --- hostile variants ---------------------------------------------------------------------------


def test_interleaved_launchers_split_one_job_cycle_and_a_late_chunk_stays_in_its_own_cycle() -> (
    None
):
    lines = [
        *SHAPE,
        # Launcher 1's chunk: its cycle 0 ends well and it is at cycle 1's rendezvous first.
        event(1, 1, "failure_detected"),
        nvrx(1, "[default] Joining cluster restart (group_rank=1)"),
        event(1, 1, "worker_terminated"),
        event(1, 1, "rendezvous_started"),
        # Launcher 0's chunk, written seconds later: its worker's failure in cycle 0.
        nvrx(0, "per_cycle_logs.py:361 gRPC server ready (1 clients connected)"),
        exited(0),
        event(0, 1, "failure_detected"),
        nvrx(0, "[default] Worker group FAILED. 3/3 attempts left; will restart worker group"),
        event(0, 1, "worker_terminated"),
        *start(0, 1),
        *start(1, 1)[1:],
        nvrx(0, "[default] worker group successfully finished."),
    ]
    result = account_of(lines)
    first, second = result.cycles
    boundary = lines.index(event(1, 1, "rendezvous_started")) + 1
    assert (first.span.last_line, second.span.first_line) == (boundary - 1, boundary)
    # Launcher 0's lines after the boundary are its cycle 0: the failure is cycle 0's, rank 0's.
    assert (first.attribution.fault_class, first.attribution.root_rank) == ("WORKLOAD_EXC", 0)
    assert first.attribution.launcher is not None
    assert first.attribution.launcher.reason == "3/3 attempts left"
    assert second.attribution.decision == ERRORS_NOT_FOUND
    # Launcher 0's own start of cycle 1 begins nothing more: one boundary for the job.
    assert len(result.cycles) == 2


@pytest.mark.parametrize(
    "cut",
    [
        "profiling.py:93   - Cycle: 1 Eve",
        "profiling.py:93   - Cycle: 1 Event:",
        "profiling.py:93   - Cycle: 1 Event: rendezvous_sta",
        "profiling.py:93   - Cycle: ",
    ],
)
def test_a_cycle_line_cut_in_the_middle_begins_no_cycle_and_the_answer_says_so(cut: str) -> None:
    lines = [*SHAPE, exited(1), nvrx(1, cut), "tail of the log"]
    result = account_of(lines)
    assert len(result.cycles) == 1 and result.root_rank == 1
    assert "1 `Cycle:` line(s) began no cycle (line 9)" in result.detail
    assert logcycles.read_marker(cut) == ("unread", None)


def test_a_cycle_number_no_job_reaches_begins_nothing_and_the_next_real_cycle_still_begins() -> (
    None
):
    huge = "9" * 30
    lines = [*SHAPE, exited(1), event(1, 2000, "rendezvous_started"), event(1, 1, "x")]
    lines[9:9] = [
        event(1, int(huge), "rendezvous_started"),
        nvrx(0, f"profiling.py:93   - Cycle: {'7' * 5000} Event: rendezvous_started"),
    ]
    result = account_of(lines)
    assert [c.span.number for c in result.cycles] == [0, 1]
    # The jump to 2000, the 30 digits and the 5,000 digits (never turned into a number).
    assert "3 `Cycle:` line(s) began no cycle (lines 9, 10, 11)" in result.detail
    assert logcycles.read_marker(event(1, int(huge), "failure_detected")) == ("unread", None)


def test_hostile_launcher_lines_are_read_in_one_pass_and_bounded() -> None:
    """Lines built to make a backtracking pattern explode (each family's words repeated along a
    4 KiB line) are read like any other; thousands of departures keep a few, counted."""
    nasty = [
        nvrx(1, "Worker group FAILED. " * 200),
        nvrx(1, "health check failed for node " * 150),
        nvrx(1, "[workload:" * 400),
        "E1208 00:03:38.890000 " + "1 " * 2000,
        nvrx(1, "The node '" + "n" * 4000),
        nvrx(1, "EARLY TERMINATION: " + "9" * 4000),
        nvrx(1, "profiling.py:93   - Cycle:" + " " * 4000 + "x"),
        nvrx(1, "profiling.py:93 " + "Cycle: " * 580),
    ]
    departures = [
        nvrx(k % 7, f"Storage path health check failed for node n_{k}_0: gone") for k in range(5000)
    ]
    result = account_of([*SHAPE, *nasty, *departures])
    assert result.launcher is not None
    assert len(result.launcher.departures) == 4 and result.launcher.departures_more == 4996
    assert result.launcher.verdict is None  # no line above is a whole decision
    assert rank_mentions(result.explanation) == set()
    assert "1 `Cycle:` line(s) began no cycle" in result.detail  # the one cut, named


def srun_labelled(scenario: str) -> str:
    """A recorded launcher log as srun --label would show the launchers' consoles (no
    `--ft-nvrx-logfile`): each line behind its launcher's task id, torch's own lines behind the
    task of the launcher whose pid they carry."""
    text = (REAL / scenario / "logs" / "nvrx.log").read_text(encoding="utf-8")
    task_of_pid = {
        m.group(2): m.group(1)
        for m in re.finditer(r"infra:(\d+)\(\?\)\] \S+ The node '\w+?_(\d+)_0'", text)
    }
    out, task = [], "0"
    for line in text.splitlines():
        if (m := re.search(r"infra:(\d+)\(", line)) is not None:
            task = m.group(1)
        elif (m := re.match(r"[EW]\d{4} \S+ (\d+) ", line)) is not None:
            task = task_of_pid[m.group(1)]
        out.append(f"{task}: {line}")
    return "\n".join(out) + "\n"


@pytest.mark.parametrize(
    ("scenario", "answers"),
    [
        ("restart-after-exception", [(STOP, 1, "restart"), (ERRORS_NOT_FOUND, None, None)]),
        ("no-progress-exit-93", [(STOP, 1, "stop")]),
        ("storage-check-node-leaves", [(STOP, 0, "restart"), (ERRORS_NOT_FOUND, None, None)]),
    ],
)
def test_the_launchers_console_under_srun_reads_as_its_log_file(
    scenario: str, answers: list[tuple[str, int | None, str | None]]
) -> None:
    """srun's task ids on a launcher's lines are launchers, not ranks: the rank of a worker's
    exit is its node's group rank."""
    result = attribute_log(srun_labelled(scenario))
    got = [
        (
            c.attribution.decision,
            c.attribution.root_rank,
            c.attribution.launcher.verdict if c.attribution.launcher else None,
        )
        for c in result.cycles
    ]
    assert got == answers
    plain = analysed(scenario)
    assert [c.span for c in result.cycles] == [c.span for c in plain.cycles]


@pytest.mark.parametrize(
    "scenario", ["restart-after-exception", "no-progress-exit-93", "storage-check-node-leaves"]
)
def test_the_keyword_gate_changes_nothing_on_the_launchers_log(scenario: str) -> None:
    """Only lines holding a keyword are looked at; reading every line gives the same answer
    (the launcher's line families are all behind the gate's words)."""
    for text in (
        (REAL / scenario / "logs" / "nvrx.log").read_text(encoding="utf-8"),
        srun_labelled(scenario),
    ):
        gated = attribute_blocks(text_blocks(text))
        every = attribute_blocks(text_blocks(text), gate=False)
        # Every cycle's launcher account is read from the lines the gate lets through.
        assert all(c.attribution.launcher is not None for c in gated.cycles)
        assert gated.to_json() == every.to_json()
        assert gated.text() == every.text()


def test_an_event_named_by_a_known_names_first_word_is_no_cut_line() -> None:
    """`Event: rendezvous Node: ...` (an older launcher's name) begins its cycle; only a line
    that ends inside a known name is cut."""
    whole = "[ft_launcher] Cycle: 1 Event: rendezvous Node: n1 Rank: 0"
    assert logcycles.read_marker(whole) == ("begins", 1)
    assert logcycles.read_marker("profiling.py:93   - Cycle: 1 Event: rendezvous") == (
        "unread",
        None,
    )
