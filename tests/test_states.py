"""JobState and ExitStatus: how every Slurm state string is read."""

import pytest

from nvrx.slurm import ExitStatus, JobState


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("RUNNING", JobState.RUNNING),
        ("PENDING", JobState.PENDING),
        ("CANCELLED by 0", JobState.CANCELLED),
        ("CANCELLED+", JobState.CANCELLED),
        ("completed", JobState.COMPLETED),
        ("OUT_OF_MEMORY", JobState.OUT_OF_MEMORY),
        (" TIMEOUT ", JobState.TIMEOUT),
        ("SOMETHING_NEW", JobState.UNKNOWN),
        ("", JobState.UNKNOWN),
    ],
)
def test_parse_reads_every_form_slurm_prints(text: str, state: JobState) -> None:
    assert JobState.parse(text) is state


def test_every_state_is_exactly_one_of_live_or_terminal_except_unknown() -> None:
    for state in JobState:
        if state is JobState.UNKNOWN:
            assert not state.is_live and not state.is_terminal
        else:
            assert state.is_live != state.is_terminal, state


@pytest.mark.parametrize(
    "name",
    [
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
    ],
)
def test_all_endings_the_reference_lists_are_terminal(name: str) -> None:
    assert JobState.parse(name).is_terminal


@pytest.mark.parametrize(
    "name",
    ["RUNNING", "PENDING", "REQUEUED", "RESIZING", "SUSPENDED", "COMPLETING", "CONFIGURING"],
)
def test_live_states_the_reference_lists_are_live(name: str) -> None:
    assert JobState.parse(name).is_live


def test_unknown_state_never_counts_as_done() -> None:
    assert not JobState.parse("FUTURE_STATE").is_terminal


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0:0", ExitStatus(0, 0)),
        ("3:0", ExitStatus(3, 0)),
        ("0:15", ExitStatus(0, 15)),
        ("93:0", ExitStatus(93, 0)),
        ("", None),
        ("garbage", None),
    ],
)
def test_exit_status_keeps_code_and_signal(text: str, expected: ExitStatus | None) -> None:
    assert ExitStatus.parse(text) == expected


def test_exit_status_prints_as_slurm_does() -> None:
    assert str(ExitStatus(0, 9)) == "0:9"
