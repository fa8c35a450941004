"""Per-cycle attribution: a job log of several restart cycles is attributed cycle by cycle, the
job's decision rests on the last cycle, a restartable cause that repeats stops the job, and the
judge reads every cycle (docs/log-attribution-policy.md, Restart cycles)."""

from __future__ import annotations

from nvrx.analyze import logcycles
from nvrx.analyze.logattr import ERRORS_NOT_FOUND, MAX_TASKS, attribute_log
from nvrx.analyze.logcycles import CycleSpan, CycleSplitter, marker
from nvrx.analyze.logscan import LISTED_RANKS
from nvrx.campaign.pool import FaultType
from nvrx.logtext import RESTART, STOP, rank_mentions
from nvrx.score.evidence import Attribution
from nvrx.score.model import Case, GroundTruth
from nvrx.score.rules import judge_rules


def event(cycle: int, name: str = "rendezvous_started") -> str:
    """ft_launcher's profiling event line, as NVRx prints it."""
    return f"  - Cycle: {cycle} Event: {name} Node: n1 Rank: 0 Time: 2026-01-01 00:00:00.000 UTC"


def oom_cycle(cycle: int, rank: int) -> list[str]:
    return [
        event(cycle),
        f"{rank}: iteration 10 loss 2.1",
        f"{rank}: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        f"srun: error: n1: task {rank}: Exited with exit code 1",
    ]


def nccl_cycle(cycle: int, *, saved: bool = False) -> list[str]:
    return [
        event(cycle),
        *(["0: successfully saved checkpoint at iteration 20"] if saved else []),
        "2: n3:1234:1300 [2] NCCL WARN NET/IB : Got completion with error 12, opcode 0, len 0, "
        "vendor err 129",
        "2: RuntimeError: NCCL error: remote process exited or there was a network error",
    ]


class Lines:
    """A LineReader that keeps what it was fed (the splitter's test double of a real reader)."""

    def __init__(self) -> None:
        self.lines: list[int] = []

    def feed(self, no: int, line: str) -> None:
        self.lines.append(no)

    @property
    def every_line(self) -> bool:
        return False


def split(lines: list[str]) -> list[tuple[CycleSpan, list[int]]]:
    splitter: CycleSplitter[Lines, list[int]] = CycleSplitter(Lines, lambda r, _: r.lines)
    for no, line in enumerate(lines, 1):
        splitter.feed(no, line)
    return splitter.finish(len(lines))


def test_cycle_markers_are_ft_launcher_events_and_new_run_dirs() -> None:
    assert marker(event(3)) == 3
    assert marker("[2025-01-01 10:00:00] profiling.py:141 - Cycle: 2 rendezvous") == 2
    assert marker("[sbatch_script]: New run dir added: /lustre/run_4") == -1
    assert marker("0: cycle 0: restarting (1/7)") is None  # the launcher's prose is no marker
    assert marker("Cycle: 1 started") is None


def test_a_cycle_runs_from_its_first_marker_to_the_next_cycles_and_the_spans_tile_the_log() -> None:
    lines = ["launcher up", event(0), "work", event(0, "failure_detected"), event(1), "work"]
    lines += [event(0, "late_event_from_another_node"), event(2), "done"]
    spans = [span for span, _ in split(lines)]
    assert spans == [CycleSpan(0, 1, 4), CycleSpan(1, 5, 7), CycleSpan(2, 8, 9)]


def test_new_run_dir_lines_count_cycles_when_the_log_has_no_events() -> None:
    lines = ["[sbatch_script]: New run dir added: /r/0", "a", "[sbatch_script]: New run dir added:"]
    assert [span for span, _ in split([*lines, "b"])] == [CycleSpan(0, 1, 2), CycleSpan(1, 3, 4)]


def test_past_max_cycles_the_rest_is_read_as_the_last_cycle_and_says_so() -> None:
    lines = [event(n) for n in range(logcycles.MAX_CYCLES + 5)]
    splitter: CycleSplitter[Lines, list[int]] = CycleSplitter(Lines, lambda r, _: r.lines)
    for no, line in enumerate(lines, 1):
        splitter.feed(no, line)
    parts = splitter.finish(len(lines))
    assert len(parts) == logcycles.MAX_CYCLES and splitter.capped
    assert parts[-1][0].last_line == len(lines)


def wide_cycle(cycle: int, tasks: int) -> list[str]:
    """A cycle of a `tasks`-task job: rank 0 segfaults, srun reports every other task's exit."""
    return [
        event(cycle),
        "0: Fatal Python error: Segmentation fault",
        "srun: error: n1: task 0: Segmentation fault (core dumped)",
        f"srun: error: n2: tasks 1-{tasks - 1}: Exited with exit code 1",
    ]


def test_srun_task_ranges_expand_to_max_tasks_per_log_not_per_cycle() -> None:
    wide = attribute_log("\n".join(wide_cycle(0, MAX_TASKS) + wide_cycle(1, 8)) + "\n")
    first, second = (c.attribution for c in wide.cycles)
    assert sum(len(i.ranks) for i in first.secondary) == MAX_TASKS - 1
    # Cycle 0 took every task id the log may expand to: cycle 1's ranges are not taken, though
    # its lines are still read (rank 0's own segfault line names the root).
    assert (second.fault_class, second.root_rank, second.secondary) == ("SEGFAULT", 0, ())
    narrow = attribute_log("\n".join(wide_cycle(0, 8) + wide_cycle(1, 8)) + "\n")
    assert [len(c.attribution.secondary[0].ranks) for c in narrow.cycles] == [7, 7]


def test_a_consequence_names_128_ranks_and_counts_the_rest() -> None:
    small = attribute_log("\n".join(wide_cycle(0, LISTED_RANKS + 1)) + "\n")
    assert f"ranks {', '.join(map(str, range(1, LISTED_RANKS + 1)))} ended" in small.explanation
    wide = attribute_log("\n".join(wide_cycle(0, LISTED_RANKS + 9)) + "\n")
    listed = ", ".join(map(str, range(1, LISTED_RANKS + 1)))
    assert f"ranks {listed} (and 8 more) ended after it" in wide.explanation
    [issue] = wide.secondary
    assert issue.description.startswith(f"ranks {listed} (and 8 more): task ended")
    assert len(issue.ranks) == LISTED_RANKS + 8  # --json's `ranks` keeps every one
    # The count is no rank: the judge reads the ranks named, no more.
    assert rank_mentions(issue.description) == set(range(1, LISTED_RANKS + 1))


def test_each_cycle_gets_its_own_root_cause_with_its_line_range() -> None:
    log = [*oom_cycle(0, 3), *nccl_cycle(1)]
    result = attribute_log("\n".join(log) + "\n")
    first, second = result.cycles
    assert (first.span, first.attribution.fault_class, first.attribution.root_rank) == (
        CycleSpan(0, 1, 4),
        "CUDA_OOM",
        3,
    )
    assert second.span == CycleSpan(1, 5, 7) and second.attribution.fault_class == "NCCL_ERROR"
    assert all(5 <= e.line <= 7 for e in second.attribution.evidence)
    # The job's answer is the last cycle's: a network error, which a restart recovers from.
    assert (result.decision, result.fault_class) == (RESTART, "NCCL_ERROR")
    assert "cycle 1 (lines 5-7), the last of 2" in result.explanation
    assert "cycle 0 (lines 1-4): CUDA_OOM on rank 3" in result.detail
    doc = result.to_json()
    assert [(c["cycle"], c["first_line"], c["last_line"]) for c in doc["cycles"]] == [
        (0, 1, 4),
        (1, 5, 7),
    ]


def test_a_log_of_one_cycle_lists_that_cycle_and_keeps_its_five_fields() -> None:
    result = attribute_log("\n".join(oom_cycle(0, 2)[1:]) + "\n")
    assert [c.span for c in result.cycles] == [CycleSpan(0, 1, 3)]
    assert not result.text().startswith("Cycle ")
    assert result.text().splitlines()[0] == STOP


def test_a_restart_that_trains_on_ends_the_job_with_no_error_found() -> None:
    log = [*oom_cycle(0, 1), event(1), "0: iteration 11 loss 2.0", "0: iteration 12 loss 1.9"]
    result = attribute_log("\n".join(log) + "\n")
    assert result.decision == ERRORS_NOT_FOUND
    assert result.cycles[0].attribution.fault_class == "CUDA_OOM"


def test_a_restartable_cause_three_cycles_in_a_row_stops_the_job() -> None:
    repeated = attribute_log("\n".join(nccl_cycle(0) + nccl_cycle(1) + nccl_cycle(2)) + "\n")
    assert repeated.decision == STOP and repeated.fault_class == "NCCL_ERROR"
    assert repeated.explanation.startswith("Stop job due to repeated issue")
    twice = attribute_log("\n".join(nccl_cycle(0) + nccl_cycle(1)) + "\n")
    assert twice.decision == RESTART


def test_a_checkpoint_saved_between_repeats_keeps_the_restart() -> None:
    log = nccl_cycle(0) + nccl_cycle(1, saved=True) + nccl_cycle(2)
    assert attribute_log("\n".join(log) + "\n").decision == RESTART


def test_the_text_has_a_block_per_cycle_and_parses_back_to_each_cycle() -> None:
    result = attribute_log("\n".join([*oom_cycle(0, 3), *nccl_cycle(1)]) + "\n")
    text = result.text()
    assert text.startswith("Cycle 0 (lines 1-4):\n")
    parsed = Attribution.parse(text)
    assert [c.decision for c in parsed.cycles] == ["STOP", "RESTART"]
    assert parsed.decision == "RESTART"  # the job's: the last cycle's
    assert parsed.judged().primary_ranks == {3}  # the first cycle that failed


def test_logsage_per_cycle_answers_are_read_item_by_item() -> None:
    repr_ = (
        "LogSageAnalysisResult(items=[RawAnalysisResultItem(raw_text='STOP - DONT RESTART "
        "IMMEDIATE\\n\\nAttribution: Primary issues: [rank 5 segfault], Secondary issues: []\\n"
        "\\nFalse'), RawAnalysisResultItem(raw_text='RESTART IMMEDIATE\\n\\nAttribution: "
        "Primary issues: [rank 2 hang], Secondary issues: []\\n\\nFalse')])"
    )
    parsed = Attribution.parse(repr_)
    assert len(parsed.cycles) == 2 and parsed.decision == "RESTART"
    assert parsed.judged().decision == "STOP" and parsed.judged().primary_ranks == {5}


def truth(fault: FaultType, rank: int) -> GroundTruth:
    return GroundTruth(
        fault=fault, rank=rank, iteration=10, nodes=2, gpus_per_node=4, segment_size=4
    )


def test_the_judge_scores_the_cycle_the_injected_fault_ended_not_the_restart_after_it() -> None:
    log = [
        event(0),
        "3: Traceback (most recent call last):",
        '3:   File "train.py", line 40, in train_step',
        "3:     loss = model(batch)",
        "3: ValueError: shapes (4, 8) and (16,) not aligned",
        "srun: error: n1: task 3: Exited with exit code 1",
        event(1),
        "0: iteration 11",
    ]
    answer = attribute_log("\n".join(log) + "\n").text()
    assert Attribution.parse(answer).decision == "CONTINUE"  # the job trains on
    case = Case(id="e1", truth=truth(FaultType.WORKLOAD_EXC, 3), log_attribution=answer)
    verdict = judge_rules(case)
    assert (verdict.restart_correct, verdict.rank_primary) == ("true", "true"), verdict.notes
    assert "Judged on cycle 1 of 2" in (verdict.notes or "")
