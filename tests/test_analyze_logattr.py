"""The built-in log attribution, read as its specification.

Part 1 runs it on real logs of the CPU fault workload (`tests/data/cpu_logs/<FAULT>_r<rank>_n<nodes>
.log`, recorded on the local Slurm cluster and passed through `logtext.blind()`): for each, the
decision is the restart table's, the root rank is the injected one, and the offline rules judge
scores the attribution text correct. Part 2 pins each rule on small synthetic logs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from nvrx.analyze.logattr import ERRORS_NOT_FOUND, NO_LOGS, LogAttribution, attribute_log
from nvrx.campaign.pool import FaultType
from nvrx.logtext import RESTART, STOP, has_marker, rank_mentions
from nvrx.score.evidence import RESTART_TABLE, Attribution, judge_excerpt
from nvrx.score.model import Case, GroundTruth, Verdict
from nvrx.score.rules import judge_rules

LOGS = Path(__file__).parent / "data" / "cpu_logs"
_NAME = re.compile(r"(?P<fault>[A-Z_]+)_r(?P<rank>\d+)_n(?P<nodes>\d+)\.log")
_LABEL = re.compile(r"^ *(\d+): ", re.MULTILINE)


@dataclass(frozen=True)
class RealLog:
    name: str
    fault: FaultType
    rank: int
    nodes: int
    text: str

    @property
    def world(self) -> int:
        return 1 + max(int(n) for n in _LABEL.findall(self.text))

    @property
    def gpus_per_node(self) -> int:
        # 2 ranks per node for the 2-node runs; the 4-node runs used 4 (ranks up to 15).
        return self.world // self.nodes

    def truth(self) -> GroundTruth:
        return GroundTruth.build(
            self.fault.value, self.rank, 3, self.nodes, self.gpus_per_node, segment_size=32
        )


def real_logs() -> list[RealLog]:
    logs = []
    for path in sorted(LOGS.glob("*.log")):
        m = _NAME.fullmatch(path.name)
        assert m is not None, f"fixture {path.name} does not spell <FAULT>_r<rank>_n<nodes>.log"
        logs.append(
            RealLog(
                path.stem,
                FaultType(m.group("fault")),
                int(m.group("rank")),
                int(m.group("nodes")),
                path.read_text(encoding="utf-8"),
            )
        )
    return logs


REAL = real_logs()

# A GPU sleep, a GIL lock and a SIGSTOP all leave the injected rank silent but still connected
# until srun kills it at teardown: its own output stops, peers name it missing with no lost
# connection, srun reports `task N: Killed` after `First task exited`. Nothing in the log tells
# the three apart, so the analyser reports a GPU hang (restart and rank still right). On rank 0
# its frozen coordinator thread tells a whole-process freeze from a GPU hang, but a SIGSTOP and
# a GIL lock stay alike (reported as a GIL lock).
INDISTINGUISHABLE = {
    "LOCK_GIL_r1_n2": "a GIL-locked non-zero rank leaves the same log as a GPU hang",
    "SIGSTOP_r3_n2": "a SIGSTOPped non-zero rank leaves the same log as a GPU hang",
    "SIGSTOP_r0_n2": "a SIGSTOPped rank 0 leaves the same log as a GIL-locked one",
}


def params(xfail_indistinguishable: bool = False) -> list[pytest.ParameterSet]:
    out = []
    for log in REAL:
        marks = []
        if xfail_indistinguishable and log.name in INDISTINGUISHABLE:
            marks.append(pytest.mark.xfail(strict=True, reason=INDISTINGUISHABLE[log.name]))
        out.append(pytest.param(log, id=log.name, marks=marks))
    return out


def judged(log: RealLog) -> Verdict:
    result = attribute_log(log.text)
    case = Case(
        id=log.name,
        truth=log.truth(),
        log_excerpt=judge_excerpt(log.text),
        log_attribution=result.text(),
    )
    return judge_rules(case)


# --- part 1: the real logs --------------------------------------------------------------------


def test_every_fault_type_has_a_real_log_and_a_padded_label_run() -> None:
    assert {log.fault for log in REAL} == set(FaultType)
    assert any(log.world > 10 and log.rank >= 10 for log in REAL)
    assert any(log.rank == 0 for log in REAL)


@pytest.mark.parametrize("log", params())
def test_the_fixture_is_blinded(log: RealLog) -> None:
    assert not has_marker(log.text)
    # The exception line `nvidia_resiliency_ext.shared_utils.inject_fault.InjectedException` is
    # blinded; the workload's own source lines in a traceback (`raise InjectedException`) are
    # not, and no rule reads them (part 2 uses neutral names for the same shapes).
    assert "inject_fault" not in log.text
    assert f"_{log.fault.value}_r" not in log.text  # experiment dir names are blinded too


@pytest.mark.parametrize("log", params())
def test_the_decision_follows_the_restart_table(log: RealLog) -> None:
    assert attribute_log(log.text).decision == RESTART_TABLE[log.fault][0]


@pytest.mark.parametrize("log", params())
def test_the_root_rank_is_the_injected_rank_and_only_it_is_primary(log: RealLog) -> None:
    result = attribute_log(log.text)
    assert result.root_rank == log.rank
    assert [issue.ranks for issue in result.primary] == [(log.rank,)]
    assert rank_mentions(result.primary[0].description) == {log.rank}


@pytest.mark.parametrize("log", params())
def test_every_other_rank_is_collateral(log: RealLog) -> None:
    result = attribute_log(log.text)
    assert set(result.collateral_ranks) == set(range(log.world)) - {log.rank}
    parsed = Attribution.parse(result.text())
    assert parsed.secondary_ranks >= set(result.collateral_ranks)


@pytest.mark.parametrize("log", params())
def test_the_rules_judge_finds_restart_and_rank_correct(log: RealLog) -> None:
    verdict = judged(log)
    assert verdict.restart_correct == "true", verdict.notes
    assert verdict.rank_primary == "true", verdict.notes
    assert verdict.rank_any == "true", verdict.notes


@pytest.mark.parametrize("log", params(xfail_indistinguishable=True))
def test_the_fault_is_named(log: RealLog) -> None:
    assert attribute_log(log.text).fault_class == log.fault.value
    verdict = judged(log)
    assert verdict.fault_described == "true", verdict.notes


@pytest.mark.parametrize("log", [p for p in params() if p.id in INDISTINGUISHABLE])
def test_the_hang_class_is_right_even_when_the_hang_kind_is_not(log: RealLog) -> None:
    """What the indistinguishable cases still get: a hang, described with hang words, and the
    detail says the log cannot tell which."""
    result = attribute_log(log.text)
    assert result.fault_class in ("GPU_SLEEP", "LOCK_GIL")
    assert judged(log).fault_described in ("true", "partial")
    assert "look the same" in result.detail or "cannot tell them apart" in result.detail


@pytest.mark.parametrize("log", params())
def test_the_evidence_is_on_real_log_lines(log: RealLog) -> None:
    result = attribute_log(log.text)
    lines = log.text.splitlines()
    assert result.evidence
    for e in result.evidence:
        assert e.text in lines[e.line - 1]
    json.dumps(result.to_json())  # serialisable as analysis/log_attribution.json


# --- part 2: each rule on synthetic logs --------------------------------------------------------

WATCHDOG = (
    "[rank{p}]:[E1129 12:00:10.000000 ProcessGroupNCCL.cpp] [Rank {p}] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=16, OpType=ALLREDUCE, NumelIn=2097152, NumelOut=2097152, "
    "Timeout(ms)=8000) ran for 8013 milliseconds before timing out."
)
MISSING = (
    "[rank{p}]:[E1129 12:00:10.000000 ProcessGroupNCCL.cpp] [PG ID 2 PG GUID 5(DATA_PARALLEL_GROUP) "
    "Rank {p}] Ranks missing from collective ALLREDUCE SeqNum=16: [{m}]{note}"
)
LOST = "; connection to rank(s) [{m}] lost (remote process exited or there was a network error)"
TERMINATE = [
    "terminate called after throwing an instance of 'c10::DistBackendError'",
    "  what():  [PG ID 2 PG GUID 5(DATA_PARALLEL_GROUP) Rank {p}] Process group watchdog thread "
    "terminated with exception: [Rank {p}] Watchdog caught collective operation timeout",
]
TEARDOWN = [
    "srun: First task exited 23s ago",
    "srun: StepId=7.1 task {r}: running",
    "srun: launch/slurm: _step_signal: Terminating StepId=7.1",
    "0: slurmstepd-n1: error: *** STEP 7.1 ON n1 CANCELLED AT 2026-11-29T12:00:40 ***",
    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
]


def label(rank: int, world: int) -> str:
    return f"{rank:>{len(str(world - 1))}}: "


def start(world: int) -> list[str]:
    lines = [f"{label(0, world)}> initializing torch distributed ... world size {world}"]
    for it in (1, 2, 3):
        lines += [f"{label(r, world)} iteration {it:8d}/     120 | lm loss: 1.0E+01 |" for r in
                  range(world)]  # fmt: skip
    return lines


def peers_time_out(
    missing: int | None, world: int, note: str = "", *, name: bool = True
) -> list[str]:
    lines = []
    for p in range(world):
        if p == missing:
            continue
        lab = label(p, world)
        lines.append(lab + WATCHDOG.format(p=p))
        if name and missing is not None:
            lines.append(lab + MISSING.format(p=p, m=missing, note=note.format(m=missing)))
        lines += [lab + t.format(p=p) for t in TERMINATE]
    return lines


def log(*parts: list[str] | str) -> str:
    lines: list[str] = []
    for part in parts:
        lines.extend([part] if isinstance(part, str) else part)
    return "\n".join(lines) + "\n"


def traceback(
    rank: int, frames: list[tuple[str, str]], exc: str | None, world: int = 4
) -> list[str]:
    lab = label(rank, world)
    lines = [lab + "Traceback (most recent call last):"]
    for i, (func, source) in enumerate(frames):
        lines += [f'{lab}  File "/app/loop.py", line {10 + i}, in {func}', f"{lab}    {source}"]
    if exc is not None:
        lines.append(lab + exc)
    return lines


def crash(world: int, rank: int, status: str, note: str = LOST) -> str:
    """Rank `rank` ends with srun's `status` at once; its peers time out naming it."""
    others = ",".join(str(r) for r in range(world) if r != rank)
    return log(
        start(world),
        f"srun: error: n1: task {rank}: {status}",
        peers_time_out(rank, world, note),
        f"srun: error: n2: tasks {others}: Aborted",
    )


def hang(world: int, rank: int, note: str = "") -> str:
    """Rank `rank` goes silent but stays connected; srun kills it only at teardown."""
    others = ",".join(str(r) for r in range(world) if r != rank)
    return log(
        start(world),
        peers_time_out(rank, world, note),
        f"srun: error: n2: tasks {others}: Aborted",
        [t.format(r=rank) for t in TEARDOWN],
        f"srun: error: n1: task {rank}: Killed",
    )


def attributed(text: str) -> tuple[LogAttribution, Attribution]:
    result = attribute_log(text)
    return result, Attribution.parse(result.text())


# labels


def test_padded_labels_of_16_ranks_are_read() -> None:
    result, parsed = attributed(crash(16, 11, "Segmentation fault"))
    assert result.root_rank == 11
    assert result.fault_class == "SEGFAULT"
    assert parsed.primary_ranks == {11}
    assert set(result.collateral_ranks) == set(range(16)) - {11}


def test_srun_and_slurmstepd_lines_are_never_a_rank_even_behind_a_label() -> None:
    # `0: slurmstepd-n1: error: *** STEP ... CANCELLED` is srun's, not rank 0's output.
    result = attribute_log(hang(4, 2))
    assert result.root_rank == 2
    assert 0 in result.collateral_ranks


# empty, clean, markers


@pytest.mark.parametrize("text", ["", "   \n\n", "\n"])
def test_an_empty_log_is_no_logs(text: str) -> None:
    result = attribute_log(text)
    assert result.decision == NO_LOGS
    assert Attribution.parse(result.text()).decision == "NO LOGS"


def test_a_log_of_marker_lines_only_is_no_logs_once_blinded() -> None:
    text = log(
        "1: [2026-11-29 12:00:00.000000] FAULT INJECTION: Rank 1 will inject fault SEGFAULT at x",
        "1: [2026-11-29 12:00:02,000] CRITICAL:nvidia_resiliency_ext.shared_utils.inject_fault: "
        "raising segmentation fault",
    )
    assert attribute_log(text).decision == NO_LOGS


def test_a_clean_run_is_errors_not_found() -> None:
    result = attribute_log(log(start(4), "0: [after training is done] datetime: 2026-11-29"))
    assert result.decision == ERRORS_NOT_FOUND
    assert result.root_rank is None and not result.primary
    fields = result.text().split("\n")
    assert fields == [ERRORS_NOT_FOUND] * 4 + ["False"]
    assert Attribution.parse(result.text()).decision == "CONTINUE"


def test_marker_lines_are_ignored_even_when_they_name_another_rank() -> None:
    markers = [
        "3: [2026-11-29 12:00:00.000000] FAULT INJECTION: Rank 3 will inject fault SIGTERM at x",
        "3: [2026-11-29 12:00:02,000] CRITICAL:nvidia_resiliency_ext.shared_utils.inject_fault: "
        "sending signal=<Signals.SIGTERM: 15> to pid=1",
    ]
    clean = log(start(4), markers, "0: [after training is done] datetime: 2026-11-29")
    assert attribute_log(clean).decision == ERRORS_NOT_FOUND
    result = attribute_log(markers[0] + "\n" + crash(4, 1, "Segmentation fault"))
    assert (result.root_rank, result.fault_class) == (1, "SEGFAULT")
    assert "FAULT INJECTION" not in result.text()


def test_experiment_names_in_paths_are_blinded_before_reading() -> None:
    note = LOST + " (dumps in /x/n2_SEGFAULT_r1_i3/checkpoints)"
    result = attribute_log(crash(4, 1, "Segmentation fault", note=note))
    assert "/x/<experiment>/checkpoints" in result.detail  # the quoted peer line, blinded
    assert "n2_SEGFAULT_r1_i3" not in result.text()


# root vs collateral


def test_collateral_watchdog_aborts_are_not_the_root_cause() -> None:
    # The peers' aborts (srun `Aborted`, `terminate called ... DistBackendError`) come first in
    # the log; the root's own srun line comes last.
    text = log(
        start(4),
        peers_time_out(2, 4, LOST),
        "srun: error: n1: tasks 0-1: Aborted",
        "srun: error: n2: tasks 2-3: Aborted",
    )
    result = attribute_log(text)
    assert (result.root_rank, result.fault_class) == (2, "OS_ABORT")
    assert result.collateral_ranks == (0, 1, 3)


def test_without_named_ranks_the_root_is_the_earliest_non_collateral_failure() -> None:
    text = log(
        start(4),
        peers_time_out(None, 4, name=False)[:3],  # rank 0 times out: collateral
        "srun: error: n1: task 0: Aborted",
        "srun: error: n2: task 3: Segmentation fault",
    )
    result = attribute_log(text)
    assert (result.root_rank, result.fault_class) == (3, "SEGFAULT")


def test_a_rank_with_a_cuda_error_and_its_own_watchdog_abort_is_the_root() -> None:
    text = log(
        start(4),
        "1: /pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:93: operator(): Assertion "
        "`index out of bounds` failed.",
        traceback(1, [("step", "check()"), ("check", "raise RuntimeError(msg)")],
                  "RuntimeError: CUDA error: device-side assert triggered"),
        "1: [rank1]:[E1129 ProcessGroupNCCL.cpp] Process group watchdog thread terminated with "
        "exception: CUDA error: device-side assert triggered",
        "1: terminate called after throwing an instance of 'c10::DistBackendError'",
        "srun: error: n1: task 1: Aborted",
        peers_time_out(1, 4, LOST),
    )  # fmt: skip
    result = attribute_log(text)
    assert (result.root_rank, result.fault_class, result.decision) == (1, "GPU_ERROR", STOP)
    assert 1 not in result.collateral_ranks


def test_peers_losing_rank_0_name_rank_0() -> None:
    result = attribute_log(
        crash(4, 0, "Terminated", note="; the collective coordinator (rank 0) is unreachable")
    )
    assert (result.root_rank, result.fault_class) == (0, "SIGTERM")
    generic = log(
        start(4),
        "2: RuntimeError: TCPStore: connection reset by peer while talking to the master",
        "3: RuntimeError: TCPStore: connection reset by peer while talking to the master",
    )
    result = attribute_log(generic)
    assert (result.root_rank, result.fault_class, result.decision) == (0, "CRASH", STOP)


def test_a_named_rank_that_timed_out_itself_is_not_preferred_over_one_that_failed() -> None:
    # Peers name ranks 1 and 2; rank 2 was itself waiting (watchdog timeout) and its abort is
    # logged first; rank 1's own segfault is the root.
    text = log(
        start(4),
        "2: " + WATCHDOG.format(p=2),
        "srun: error: n2: task 2: Aborted",
        "srun: error: n1: task 1: Segmentation fault",
        "0: " + MISSING.format(p=0, m="1, 2", note=""),
        "3: " + MISSING.format(p=3, m="1, 2", note=""),
    )
    result = attribute_log(text)
    assert (result.root_rank, result.fault_class) == (1, "SEGFAULT")
    assert 2 in result.collateral_ranks


def test_timeouts_naming_nobody_are_a_hang_of_unknown_root() -> None:
    result, parsed = attributed(log(start(4), peers_time_out(None, 4, name=False)))
    assert (result.fault_class, result.root_rank, result.decision) == ("HANG", None, RESTART)
    assert parsed.primary_ranks == {0, 1, 2, 3}


# classes by srun's status


@pytest.mark.parametrize(
    ("status", "fault", "decision"),
    [
        ("Segmentation fault", "SEGFAULT", STOP),
        ("Aborted", "OS_ABORT", STOP),
        ("Killed", "SIGKILL", STOP),
        ("Terminated", "SIGTERM", RESTART),
        ("Interrupt", "SIGINT", RESTART),
        ("Stopped", "SIGSTOP", RESTART),
        ("Exited with exit code 3", "CRASH", STOP),
        ("Bus error", "BUS_ERROR", STOP),
    ],
)
def test_srun_status_of_the_root_names_the_fault(status: str, fault: str, decision: str) -> None:
    result, parsed = attributed(crash(4, 1, status))
    assert (result.root_rank, result.fault_class, result.decision) == (1, fault, decision)
    assert parsed.primary_ranks == {1}


def test_killed_before_teardown_is_sigkill_and_after_it_is_a_hang() -> None:
    assert attribute_log(crash(4, 3, "Killed")).fault_class == "SIGKILL"
    result = attribute_log(hang(4, 3))
    assert (result.fault_class, result.decision) == ("GPU_SLEEP", RESTART)
    assert "cannot tell them apart" in result.detail


def test_a_frozen_rank_0_is_a_gil_lock_and_a_gil_message_names_it() -> None:
    frozen = hang(4, 0, "; the collective coordinator (rank 0) does not answer")
    assert attribute_log(frozen).fault_class == "LOCK_GIL"
    assert attribute_log(hang(4, 0)).fault_class == "GPU_SLEEP"  # coordinator still answers
    gil = hang(4, 2).replace(
        "srun: First task exited",
        "2: [rank2]:[W ProcessGroupNCCL.cpp] Could not acquire GIL within 300 ms on exit, "
        "possible GIL induced hang\nsrun: First task exited",
    )
    result, parsed = attributed(gil)
    assert (result.root_rank, result.fault_class) == (2, "LOCK_GIL")
    assert "gil" in (parsed.primary or "").lower()


# classes by the traceback (the injected exception's own line is blinded away)


def exception_log(frames: list[tuple[str, str]], exc: str | None, rank: int = 2) -> str:
    return log(
        start(4),
        traceback(rank, frames, exc),
        f"srun: error: n2: task {rank}: Exited with exit code 1",
        peers_time_out(rank, 4, LOST),
    )


def test_a_raise_reached_by_calls_is_a_workload_exception() -> None:
    frames = [("main", "train()"), ("train", "check_step(state)"), ("check_step", "raise Boom")]
    result = attribute_log(exception_log(frames, None))
    assert (result.fault_class, result.decision) == ("WORKLOAD_EXC", STOP)


def test_a_raise_in_a_frame_its_caller_does_not_call_is_a_signal_exception() -> None:
    frames = [("main", "train()"), ("train", "time.sleep(0.5)"), ("on_usr1", "raise Boom")]
    result = attribute_log(exception_log(frames, None))
    assert (result.fault_class, result.decision) == ("SIGNAL_EXC", RESTART)


def test_an_exception_at_a_line_that_raises_nothing_is_asynchronous() -> None:
    frames = [("main", "train()"), ("train", "wait(0.5)"), ("wait", "time.sleep(0.05)")]
    result = attribute_log(exception_log(frames, None))
    assert (result.fault_class, result.decision) == ("ASYNC_EXC", STOP)
    # with a visible exception line it is an ordinary uncaught exception
    visible = attribute_log(exception_log(frames, "ValueError: bad value"))
    assert visible.fault_class == "WORKLOAD_EXC"


def test_keyboard_interrupt_is_sigint_whatever_srun_says() -> None:
    frames = [("main", "train()"), ("train", "time.sleep(0.5)")]
    result = attribute_log(exception_log(frames, "KeyboardInterrupt"))
    assert (result.fault_class, result.decision) == ("SIGINT", RESTART)


def test_code_quoted_from_a_traceback_never_adds_a_rank_to_the_primary_issue() -> None:
    frames = [("main", "train()"), ("train", "peer = ranks[3]")]
    result, parsed = attributed(exception_log(frames, None))
    assert parsed.primary_ranks == {2}
    assert result.root_rank == 2


def test_a_quoted_decision_string_cannot_flip_the_decision() -> None:
    frames = [("main", "train()"), ("train", "time.sleep(0.5)"), ("on_usr1", "raise Boom")]
    text = exception_log(frames, "RuntimeError: STOP - DONT RESTART IMMEDIATE")
    result, parsed = attributed(text)
    assert result.decision == RESTART and parsed.decision == "RESTART"


# the text format


def test_the_text_is_logsages_five_fields() -> None:
    result = attribute_log(crash(4, 1, "Segmentation fault"))
    fields = result.text().split("\n")
    assert len(fields) == 5
    assert fields[0] == STOP
    assert fields[2].startswith("Attribution: Primary issues: [rank 1: Segmentation fault")
    assert fields[4] == "False"
    parsed = Attribution.parse(result.text())
    assert (parsed.decision, parsed.primary_ranks, parsed.secondary_ranks) == (
        "STOP",
        frozenset({1}),
        frozenset({0, 1, 2, 3}),  # the collateral issue says whom they waited for
    )
    doc = result.to_json()
    assert doc["root_rank"] == 1 and doc["fault_class"] == "SEGFAULT"
    assert doc["primary"][0]["ranks"] == [1]


def test_a_saved_checkpoint_is_reported() -> None:
    text = crash(4, 1, "Terminated").replace(
        "srun: error: n1", "0: successfully saved checkpoint from iteration 3\nsrun: error: n1", 1
    )
    result = attribute_log(text)
    assert result.checkpoint_saved
    assert result.text().split("\n")[4] == "True"


def test_the_attribution_is_deterministic() -> None:
    text = hang(8, 5)
    assert attribute_log(text) == attribute_log(text)
    assert attribute_log(text).text() == attribute_log(text).text()


def test_analyze_log_labels_the_checkpoint_field_that_the_files_keep_bare(tmp_path: Path) -> None:
    from .cli_runner import clean_environ
    from .cli_runner import nvrx as nvrx_in_process

    log = Path(__file__).parent / "data" / "cpu_logs" / "SEGFAULT_r1_n2.log"
    proc = nvrx_in_process("analyze", "log", str(log), env=clean_environ({"HOME": str(tmp_path)}))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "Checkpoint saved: False"
    assert not {"True", "False"} & set(lines)  # no line a reader cannot place
    # logsage's format, as log_attribution.txt keeps it, is unchanged: the field bare.
    assert attribute_log(log.read_text()).text().splitlines()[-1] == "False"


def test_the_readmes_analyze_log_quote_is_what_it_prints(tmp_path: Path) -> None:
    from .cli_runner import clean_environ
    from .cli_runner import nvrx as nvrx_in_process

    repo = Path(__file__).resolve().parents[1]
    readme = (repo / "README.md").read_text()
    command = "$ nvrx analyze log "
    quote = readme.split(command, 1)[1].split("\n```", 1)[0]
    path, printed = quote.split("\n", 1)
    proc = nvrx_in_process(
        "analyze", "log", path, env=clean_environ({"HOME": str(tmp_path)}), cwd=repo
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == printed + "\n"
