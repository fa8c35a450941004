"""How the poller folds an array's task states into one state (pure part)."""

import pytest

from nvrx.slurm import JobState
from nvrx.slurm.poller import aggregate_state

S = JobState


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ([], S.UNKNOWN),
        ([S.COMPLETED], S.COMPLETED),
        ([S.PENDING, S.RUNNING, S.COMPLETED], S.RUNNING),
        ([S.PENDING, S.COMPLETED], S.PENDING),
        ([S.COMPLETED, S.FAILED, S.CANCELLED], S.FAILED),
        ([S.COMPLETED, S.COMPLETED], S.COMPLETED),
        ([S.COMPLETED, S.UNKNOWN], S.UNKNOWN),
        ([S.UNKNOWN, S.PENDING], S.PENDING),
    ],
)
def test_aggregate_state(states: list[JobState], expected: JobState) -> None:
    assert aggregate_state(states) is expected


def test_an_array_with_one_unknown_task_is_never_reported_over() -> None:
    assert not aggregate_state([S.COMPLETED, S.COMPLETED, S.UNKNOWN]).is_terminal
