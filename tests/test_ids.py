"""Job ids and array task specs as Slurm prints them."""

import pytest

from nvrx.slurm import JobRef, SlurmParseError, SlurmValueError, parse_job_ref, parse_task_indices
from nvrx.slurm.ids import check_job_id, format_array_spec


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("123", JobRef(123)),
        ("123_4", JobRef(123, (4,))),
        ("123_[5-9%2]", JobRef(123, (5, 6, 7, 8, 9), 2, grouped=True)),
        ("123_[1,3]", JobRef(123, (1, 3), None, grouped=True)),
        ("77+1", JobRef(77)),
    ],
)
def test_parse_job_ref(text: str, ref: JobRef) -> None:
    assert parse_job_ref(text) == ref


def test_a_single_task_has_a_task_id_and_a_pending_range_has_none() -> None:
    assert parse_job_ref("123_4").task_id == 4
    assert parse_job_ref("123_[5-9]").task_id is None
    assert parse_job_ref("123").task_id is None


@pytest.mark.parametrize("bad", ["", "abc", "12_", "12_x", "12_[5-"])
def test_bad_job_ids_are_rejected(bad: str) -> None:
    with pytest.raises(SlurmParseError):
        parse_job_ref(bad)


@pytest.mark.parametrize(
    ("spec", "indices", "throttle"),
    [
        ("4", (4,), None),
        ("0-4%2", (0, 1, 2, 3, 4), 2),
        ("1,3,5-7", (1, 3, 5, 6, 7), None),
        ("0-15:4", (0, 4, 8, 12), None),
    ],
)
def test_parse_task_indices(spec: str, indices: tuple[int, ...], throttle: int | None) -> None:
    parsed = parse_task_indices(spec)
    assert parsed.indices == indices
    assert parsed.throttle == throttle


@pytest.mark.parametrize("bad", ["", "4-2", "1-3%0", "a", "1-3%x", "0-10000000000"])
def test_bad_array_specs_name_the_spec(bad: str) -> None:
    with pytest.raises(SlurmParseError, match="array|too large"):
        parse_task_indices(bad)


def test_format_array_spec_matches_the_chain_arithmetic() -> None:
    assert format_array_spec(0, 4, 2) == "0-4%2"
    assert format_array_spec(0, 0) == "0"


@pytest.mark.parametrize("bad", ["1;rm -rf /", "12 13", "-1", "12_[1-2]", ""])
def test_ids_for_command_lines_are_digits_only(bad: str) -> None:
    with pytest.raises(SlurmValueError, match="invalid job id"):
        check_job_id(bad)
