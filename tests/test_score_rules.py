"""The offline rules judge and the evidence it reads: what CI gets when no model is configured.

Table-driven: every fault type, and every value of every dimension."""

from __future__ import annotations

import pytest

from nvrx.campaign.pool import FaultType
from nvrx.logtext import rank_mentions, strip_markers
from nvrx.score.evidence import (
    RESTART_TABLE,
    Attribution,
    fr_ranks,
    judge_excerpt,
    normalise_fr_label,
)
from nvrx.score.model import DIMENSIONS, Case, GroundTruth, ScoreError
from nvrx.score.rules import judge_rules

RESTART = "RESTART IMMEDIATE"
STOP = "STOP - DONT RESTART IMMEDIATE"


def attribution(decision: str, primary: str, secondary: str = "") -> str:
    # logsage's 5-field text: decision, explanation, attribution, detail, checkpoint saved.
    return (
        f"{decision}\n\nAttribution: Primary issues: [{primary}], "
        f"Secondary issues: [{secondary}]\n\nFalse"
    )


def fr_table(*ranks: int) -> str:
    header = "PGID   | Process Group Desc        | Op Type    | Size | Dtype    | Missing Ranks\n"
    if not ranks:
        return header
    row = f"74     | EXPERT_MODEL_PARALLEL_GROUP,0 | nccl:all_to_all | 4027x5120 | BFloat16 | {','.join(map(str, ranks))}\n"
    return header + row


def judged(
    fault: str,
    text: str,
    fr: str = "",
    *,
    rank: int = 5,
    nodes: int = 2,
    gpus: int = 4,
    segment: int = 32,
) -> dict[str, str | None]:
    truth = GroundTruth.build(fault, rank, 10, nodes, gpus, segment)
    v = judge_rules(Case(id="c", truth=truth, log_attribution=text, fr_output=fr or fr_table(rank)))
    assert v.status == "scored"
    return v.dimensions()


# A correct attribution of each fault, in the words a good analyser would use.
CORRECT = {
    "GPU_SLEEP": (RESTART, "rank 5 GPU hang: no progress in allreduce"),
    "LOCK_GIL": (RESTART, "rank 5 stuck holding the GIL (Python hang)"),
    "SIGTERM": (RESTART, "rank 5 received SIGTERM"),
    "SIGINT": (RESTART, "rank 5 got SIGINT (KeyboardInterrupt)"),
    "SIGSTOP": (RESTART, "rank 5 was stopped by SIGSTOP"),
    "SIGNAL_EXC": (RESTART, "rank 5 raised a signal exception from its signal handler"),
    "GPU_ERROR": (STOP, "rank 5 hit a CUDA error: illegal memory access"),
    "SIGKILL": (STOP, "rank 5 was Killed (signal 9)"),
    "SEGFAULT": (STOP, "rank 5 Segmentation fault (SIGSEGV)"),
    "OS_ABORT": (STOP, "rank 5 aborted (SIGABRT, core dumped)"),
    "WORKLOAD_EXC": (STOP, "rank 5 uncaught exception: RuntimeError in train step"),
    "ASYNC_EXC": (STOP, "rank 5 asynchronous exception in a background thread"),
}


def test_the_table_covers_every_fault_type() -> None:
    assert set(CORRECT) == {f.value for f in FaultType} == {f.value for f in RESTART_TABLE}


@pytest.mark.parametrize("fault", sorted(CORRECT))
def test_a_correct_attribution_passes_every_dimension(fault: str) -> None:
    decision, primary = CORRECT[fault]
    dims = judged(fault, attribution(decision, primary, "ranks 0, 1 timed out waiting"))
    assert dims == {
        "restart_correct": "true",
        "rank_primary": "true",
        "rank_any": "true",
        "fault_described": "true",
        "fr_rank_correct": "rank",
    }


@pytest.mark.parametrize("fault", sorted(CORRECT))
def test_the_opposite_restart_decision_is_wrong(fault: str) -> None:
    decision, primary = CORRECT[fault]
    other = STOP if decision == RESTART else RESTART
    assert judged(fault, attribution(other, primary))["restart_correct"] == "false"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (attribution(STOP, "rank 5 segfault"), "true"),
        (attribution(RESTART, "rank 5 segfault"), "false"),  # upstream's crash-type failure
        ("ERRORS NOT FOUND", "false"),
        ("NO LOGS", "false"),
        ("LLM FAILURE", "false"),
        ("", "false"),
        # logsage's --emit-stdout repr: one line, escaped newlines, then the state.
        (
            "LogSageAnalysisResult(items=[RawAnalysisResultItem(raw_text='STOP - DONT RESTART "
            "IMMEDIATE\\n\\nAttribution: Primary issues: [rank 5 segfault]')])\n"
            "AttributionState.STOP",
            "true",
        ),
    ],
)
def test_restart_correct(text: str, expected: str) -> None:
    assert judged("SEGFAULT", text)["restart_correct"] == expected


@pytest.mark.parametrize(
    ("primary", "secondary", "rank_primary", "rank_any"),
    [
        ("rank 5 segfault", "", "true", "true"),
        ("ranks 4, 5 and 6 failed", "", "partial", "true"),
        ("ranks 4-7 lost", "", "partial", "true"),
        ("rank 6 segfault", "rank 5 timed out", "false", "true"),  # collateral, not root cause
        ("rank 6 segfault", "", "false", "false"),
        ("rank 15 segfault", "", "false", "false"),  # 15 contains 5 but is not rank 5
        ("segfault at iteration 5 on node 5", "", "false", "false"),  # numbers are not ranks
        ("global_rank=5 segfault", "", "true", "true"),
    ],
)
def test_rank_primary_and_rank_any(
    primary: str, secondary: str, rank_primary: str, rank_any: str
) -> None:
    dims = judged("SEGFAULT", attribution(STOP, primary, secondary))
    assert (dims["rank_primary"], dims["rank_any"]) == (rank_primary, rank_any)


@pytest.mark.parametrize(
    ("fault", "primary", "expected"),
    [
        ("SEGFAULT", "rank 5 Segmentation fault", "true"),
        ("SEGFAULT", "rank 5 crashed", "partial"),  # crash class, fault not named
        ("SEGFAULT", "rank 5 misbehaved", "false"),
        ("GPU_SLEEP", "rank 5 NCCL watchdog timeout", "partial"),  # hang symptom only
        ("LOCK_GIL", "rank 5 hung", "partial"),
        ("GPU_ERROR", "rank 5 stuck in allreduce", "false"),  # a crash called a hang
        ("GPU_ERROR", "rank 5: GPU hardware failure", "true"),  # the policy's own words
        ("GPU_ERROR", "rank 5: GPU has fallen off the bus", "true"),
        ("WORKLOAD_EXC", "rank 5 error in train step", "partial"),
        ("SIGTERM", "rank 5 terminated by signal 15", "true"),
        ("OS_ABORT", "rank 5 hang", "false"),
    ],
)
def test_fault_described(fault: str, primary: str, expected: str) -> None:
    assert judged(fault, attribution(STOP, primary))["fault_described"] == expected


@pytest.mark.parametrize(
    ("ranks", "expected"),
    [
        ((5,), "rank"),
        ((4, 5), "node"),  # node 1 = ranks 4..7
        ((6,), "node"),  # a bystander on the same node
        ((2, 5), "segment"),  # segment of 8 = ranks 0..7
        ((5, 9), "false"),
        ((), "no_dumps"),
    ],
)
def test_fr_rank_correct(ranks: tuple[int, ...], expected: str) -> None:
    dims = judged(
        "SEGFAULT", attribution(STOP, "rank 5 segfault"), fr_table(*ranks), nodes=4, segment=8
    )
    assert dims["fr_rank_correct"] == expected


def test_every_dimension_value_is_reachable_by_the_table_above() -> None:
    # Guard for this file: a new allowed value needs a row above.
    from nvrx.score.model import ALLOWED

    assert set(ALLOWED) == set(DIMENSIONS)
    assert ALLOWED["fr_rank_correct"] == ("false", "no_dumps", "segment", "node", "rank")


def test_an_invalid_run_is_all_na_and_a_missing_input_is_unscored() -> None:
    truth = GroundTruth.build("SEGFAULT", 1, 5, 1, 4, 32, run_valid=False)
    v = judge_rules(Case(id="x", truth=truth))
    assert v.status == "invalid"
    assert set(v.dimensions().values()) == {"N/A"}
    assert v.notes and v.notes.startswith("run_invalid:")
    truth = GroundTruth.build("SEGFAULT", 1, 5, 1, 4, 32)
    v = judge_rules(Case(id="x", truth=truth, problem="no log attribution"))
    assert v.status == "unscored" and v.reason == "no log attribution"
    assert v.restart_correct is None


def test_notes_name_the_gaps() -> None:
    truth = GroundTruth.build("SEGFAULT", 5, 10, 2, 4, 32)
    text = attribution(RESTART, "rank 6 crashed", "rank 5 timed out")
    v = judge_rules(Case(id="c", truth=truth, log_attribution=text, fr_output=fr_table(6)))
    assert v.notes == (
        "Decision RESTART, expected STOP; rank 5 only in secondary issues; "
        "SEGFAULT described only as crashed; FR scope node."
    )


# --- evidence ----------------------------------------------------------------------------------


def test_ground_truth_rejects_what_cannot_be() -> None:
    with pytest.raises(ScoreError, match="rank 8 is outside the job: 2 node"):
        GroundTruth.build("SEGFAULT", 8, 5, 2, 4, 32)
    with pytest.raises(ScoreError, match="unknown fault type 'SEGV'"):
        GroundTruth.build("SEGV", 1, 5, 2, 4, 32)
    with pytest.raises(ScoreError, match="nodes 0 is below 1"):
        GroundTruth.build("SEGFAULT", 1, 5, 0, 4, 32)


def test_blocks_follow_gpus_per_node_and_the_segment_size() -> None:
    t = GroundTruth.build("SEGFAULT", 13, 5, 4, 8, 16)  # not upstream's hard-coded 4 GPUs
    assert (t.total_ranks, t.node, t.node_block, t.segment_block) == (32, 1, (8, 15), (0, 15))
    t = GroundTruth.build("SEGFAULT", 13, 5, 1, 14, 8)
    assert t.segment_block == (8, 13)  # clipped at the last rank


def test_fr_ranks_parse_like_upstream_consumers() -> None:
    text = (
        fr_table(12)
        + "75 | DATA_PARALLEL,0 | nccl:all_reduce | 8 | Float | 3, 4\n"
        + "not | a | row\n"
        + "hanging ranks: [99]\n"
    )
    assert fr_ranks(text) == {12, 3, 4}
    assert fr_ranks("no_dumps") == frozenset()


@pytest.mark.parametrize(
    ("label", "ranks", "expected"),
    [
        ("rank", (5,), "rank"),
        ("rank", (4, 5), "node"),  # upstream passes `rank` through unchecked
        ("rank", (5, 20), "false"),
        ("node", (2, 5), "segment"),
        ("rack", (2, 5), "segment"),  # the legacy label
        ("segment", (5, 40), "false"),
        ("false", (5,), "rank"),  # upstream passes `false` through unchecked too
        ("node", (5,), "rank"),
        ("no_dumps", (5,), "rank"),
        ("rank", (), "no_dumps"),
    ],
)
def test_the_fr_dimension_is_decided_by_the_table_whatever_the_judge_said(
    label: str, ranks: tuple[int, ...], expected: str
) -> None:
    truth = GroundTruth.build("SEGFAULT", 5, 10, 8, 4, 8)
    assert normalise_fr_label(label, fr_table(*ranks), truth) == expected


def test_the_judge_excerpt_is_blinded_and_bounded() -> None:
    log = "\n".join(
        [
            "[2026-11-29 10:00:00.000000] FAULT INJECTION: Rank 3 will inject fault SEGFAULT at 10:00:15",
            "[MEGATRON_FAULT] global_rank=3/8: injecting SEGFAULT at iteration 5",
            "nvidia_resiliency_ext.shared_utils.inject_fault CRITICAL injecting",
            '3:   File "/opt/nvrx/nvidia_resiliency_ext/shared_utils/inject_fault.py", line 210, in _signal_exc_handler',
            "3:     raise InjectedException(msg)",
            "[workload:3] heartbeat",
            "[workload:3] Cycle: 2 started",
        ]
        + [f"3: line {i}" for i in range(500)]
    )
    excerpt = judge_excerpt(log)
    lines = excerpt.splitlines()
    assert len(lines) == 400 and lines[-1] == "3: line 499"
    assert "FAULT INJECTION" not in judge_excerpt(log, lines=10_000)
    assert "MEGATRON_FAULT" not in judge_excerpt(log, lines=10_000)
    assert "inject_fault" not in judge_excerpt(log, lines=10_000)
    assert "3:     raise <exception>(msg)" in judge_excerpt(log, lines=10_000)
    assert "heartbeat" not in judge_excerpt(log, lines=10_000)
    assert "Cycle: 2" in judge_excerpt(log, lines=10_000)
    assert strip_markers(log).count("\n") == log.count("\n") - 4


def test_attribution_parsing_balances_brackets() -> None:
    a = Attribution.parse(
        attribution(STOP, "rank 3 failed in op [all_reduce] (ranks [3])", "rank 1")
    )
    assert a.decision == "STOP"
    assert a.primary == "rank 3 failed in op [all_reduce] (ranks [3])"
    assert a.primary_ranks == {3} and a.secondary_ranks == {1}


def test_rank_mentions() -> None:
    assert rank_mentions("Rank 3, ranks 4 and 5, ranks [6, 7], rank=8, ranks 10-12") == {
        3, 4, 5, 6, 7, 8, 10, 11, 12,
    }  # fmt: skip
    assert rank_mentions("iteration 5, exit code 139, 8 GPUs") == frozenset()


def test_progress_counts_cases_whatever_the_number_of_judges() -> None:
    # Three rules judges voting on four cases: the bar moves four times, once per case, when
    # its last verdict is in (it used to count twelve).
    from nvrx.score.judges import score

    truth = GroundTruth.build("SIGKILL", 5, 10, 2, 4, 32)
    text = attribution(*CORRECT["SIGKILL"])
    cases = [
        Case(id=f"c{i}", truth=truth, log_attribution=text, fr_output=fr_table(5)) for i in range(4)
    ]
    ticks: list[None] = []
    verdicts = score([None, None, None], cases, lambda: ticks.append(None))
    assert len(verdicts) == 4 and len(ticks) == 4
