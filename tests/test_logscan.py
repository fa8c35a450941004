"""Reading a log of any size: the keyword gate looks only at lines that can matter and changes
no answer; a log streamed in blocks reads as the whole text does; memory does not grow with the
lines."""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nvrx.analyze.logattr import KEYWORDS, attribute_blocks, attribute_log
from nvrx.analyze.logscan import MAX_LINE, PATTERNS, gate_words, text_blocks

from .real_logs import load_corpus

DATA = Path(__file__).resolve().parent / "data"
LOGS = {p.stem: p.read_text(encoding="utf-8") for p in sorted(DATA.glob("cpu_logs/*.log"))}
LOGS.update({case.name: case.text for case in load_corpus()})
LINES = sorted({line for text in LOGS.values() for line in text.splitlines()})

GENERATED = settings(
    max_examples=int(os.environ.get("NVRX_HOSTILE_EXAMPLES", "60")),
    deadline=None,
    database=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("name", sorted(LOGS))
def test_the_keyword_gate_changes_no_answer(name: str) -> None:
    text = LOGS[name]
    assert attribute_blocks(text_blocks(text), gate=True) == attribute_blocks(
        text_blocks(text), gate=False
    )


def test_every_line_a_failure_pattern_matches_holds_a_keyword() -> None:
    missed = [
        (fault, line)
        for line in LINES
        for fault, pattern in PATTERNS
        if pattern.search(line[:MAX_LINE]) and not any(k in line.lower() for k in KEYWORDS)
    ]
    assert not missed


def _mangle(line: str, rnd: random.Random) -> str:
    """A corpus line as another job might print it: other case, another rank label, a timestamp
    or logger prefix, cut, or carriage returns of a progress bar."""
    how = rnd.randrange(6)
    if how == 0:
        return line.upper()
    if how == 1:
        return (
            re.sub(r"^\s*\d+: ", "", line) if rnd.random() < 0.5 else f"{rnd.randrange(64)}: {line}"
        )
    if how == 2:
        return f"[rank{rnd.randrange(8)}]: 2026-01-01 00:00:00,123 - ERROR - {line}"
    if how == 3:
        return line[: rnd.randrange(len(line) + 1)]
    if how == 4:
        return f"{line}\r step {rnd.randrange(100)}\r"
    return line


@GENERATED
@given(st.lists(st.integers(0, len(LINES) - 1), min_size=1, max_size=60), st.randoms())
def test_the_gate_changes_no_answer_on_generated_logs(picks: list[int], rnd: random.Random) -> None:
    text = "\n".join(_mangle(LINES[i], rnd) for i in picks) + "\n"
    assert attribute_blocks(text_blocks(text), gate=True) == attribute_blocks(
        text_blocks(text), gate=False
    )


@pytest.mark.parametrize("size", [1, 7, 100, 4096])
def test_a_log_read_in_blocks_reads_as_the_whole_text(size: int) -> None:
    for name in ("GPU_ERROR_r1_n2", "SEGFAULT_r11_n4", *sorted(LOGS)[:20]):
        if name in LOGS:
            text = LOGS[name]
            assert attribute_blocks(text_blocks(text, size)) == attribute_log(text), name


def test_text_blocks_are_whole_lines_that_join_to_the_text() -> None:
    text = "a\nbb\n\nccc\nno newline at the end"
    blocks = list(text_blocks(text, 3))
    assert "".join(blocks) == text
    assert all(b.endswith("\n") for b in blocks[:-1])


def test_a_gate_keeps_no_word_that_holds_a_shorter_one() -> None:
    assert gate_words(["sigkill", "sig", "kill"], ["oom_kill"]) == ("sig", "kill")


def test_evidence_line_numbers_are_the_files_even_past_dropped_marker_lines() -> None:
    text = (
        "0: iteration 1\n"
        "1: [MEGATRON_FAULT] injecting SEGFAULT\n"
        "1: iteration 1\n"
        "srun: error: node2: task 1: Segmentation fault\n"
    )
    result = attribute_log(text)
    assert result.fault_class == "SEGFAULT"
    assert [e.line for e in result.evidence] == [4]


def test_a_non_ascii_letter_that_lower_casing_widens_turns_the_gate_off_not_wrong() -> None:
    # 'İ'.lower() is two characters: offsets into the lower-cased block would be wrong.
    text = "0: İİİİ iteration 5\n" * 3 + "1: RuntimeError: CUDA error: an illegal memory access\n"
    assert attribute_log(text).fault_class == "GPU_ERROR"
    assert attribute_log(text).root_rank == 1


@pytest.mark.parametrize(
    ("line", "fault"),
    [
        ("srun: error: Node failure on jean-zay-iam37", "NODE_LOST"),
        ("slurmstepd: error: *** STEP 7.0 ON n1 CANCELLED AT 2023-03-06T03:17:51 DUE TO NODE "
         "FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***", "NODE_LOST"),
        ("slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT "
         "***", "SIGTERM"),
        ("host:301:301 [0] enqueue.cc:1085 NCCL WARN Cuda failure 'out of memory'", "CUDA_OOM"),
        ("host:301:301 [0] NCCL WARN Cuda failure 2 'out of memory'", "CUDA_OOM"),
    ],
)  # fmt: skip
def test_what_slurm_and_nccl_print_names_its_failure(line: str, fault: str) -> None:
    result = attribute_log(f"iteration 5 / 100\n{line}\n")
    assert result.fault_class == fault


def test_the_agents_fan_out_of_sigterm_is_a_consequence_not_the_failure() -> None:
    # torch elastic stops the survivors before it names the worker that failed.
    log = (
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 101 closing "
        "signal SIGTERM\n"
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 102 closing "
        "signal SIGTERM\n"
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 "
        "(pid: 103) of binary: /usr/bin/python\n"
    )
    result = attribute_log(log)
    assert result.category == "resource", result.text()
    assert result.decision.startswith("STOP")
    # An outside SIGTERM still says so in its own words, and is the failure.
    outside = (
        "WARNING:torch.distributed.elastic.agent.server.api:Received 15 death signal, shutting "
        "down workers\n" + log.split("\n")[0] + "\n"
    )
    assert attribute_log(outside).category == "infrastructure"


def test_a_nested_label_on_a_line_the_gate_skips_changes_no_answer() -> None:
    # Found by the generated-logs test: srun's `task 0: Killed`, then a worker's progress line
    # inside task 52's line, a shape only the full read used to see (task 0 a launcher or not).
    text = (
        "60: srun: error: c002: task 0: Killed\n"
        "[rank5]: 2026-01-01 00:00:00,123 - ERROR - \n"
        "52:  2:  [2026-11-29 13:14:58] iteration        1/     120 | lm loss: 1.066257E+01 |\n"
    )
    gated = attribute_blocks(text_blocks(text), gate=True)
    assert gated == attribute_blocks(text_blocks(text), gate=False)
    assert gated.root_rank == 0
