"""sbatch options: every value is validated before it becomes an argv element."""

from pathlib import Path

import pytest

from nvrx.slurm import SlurmValueError, SubmitOptions


def test_a_chain_generation_renders_the_expected_flags() -> None:
    opts = SubmitOptions(
        job_name="nvrx_singleton",
        array="0-4%2",
        nodes=1,
        gpus_per_node=4,
        time="00:25:00",
        dependency="singleton",
        requeue=False,
        exclusive=True,
        mem="0",
        comment="nvrx-chain=abc gen=0",
        export=("ALL", "NVRX_ACTIVE_TASKS=2"),
        extra_args=("-A", "acct"),
    )
    assert opts.to_argv() == [
        "--job-name=nvrx_singleton",
        "--array=0-4%2",
        "--nodes=1",
        "--gpus-per-node=4",
        "--time=00:25:00",
        "--dependency=singleton",
        "--no-requeue",
        "--exclusive",
        "--mem=0",
        "--comment=nvrx-chain=abc gen=0",
        "--export=ALL,NVRX_ACTIVE_TASKS=2",
        "-A",
        "acct",
    ]


@pytest.mark.parametrize(
    ("opts", "match"),
    [
        (SubmitOptions(job_name="two words"), "job name 'two words'"),
        (SubmitOptions(job_name="a,b"), "job name 'a,b'"),
        (SubmitOptions(job_name="x;rm"), "job name"),
        (SubmitOptions(job_name=""), "job name"),
        (SubmitOptions(array="4-0"), "--array '4-0'"),
        (SubmitOptions(nodes=0), "--nodes 0"),
        (SubmitOptions(time="25 min"), "time limit '25 min'"),
        (SubmitOptions(partition="main partition"), "partition"),
        (SubmitOptions(dependency="afterok:abc"), "dependency"),
        (SubmitOptions(mem="lots"), "--mem 'lots'"),
        (SubmitOptions(output="relative/out"), "absolute"),
        (SubmitOptions(comment="two\nlines"), "control characters"),
        (SubmitOptions(export=("FAULT_TYPE=a,b",)), "comma or newline"),
        (SubmitOptions(export=("1BAD=x",)), "variable name"),
        (SubmitOptions(extra_args=("a\0b",)), "NUL"),
    ],
)
def test_unsafe_values_are_refused_naming_the_value(opts: SubmitOptions, match: str) -> None:
    with pytest.raises(SlurmValueError, match=match):
        opts.to_argv()


@pytest.mark.parametrize("limit", ["90", "00:25:00", "1-12:00:00", "2-0", "UNLIMITED", "10:00"])
def test_every_slurm_time_form_is_accepted(limit: str) -> None:
    assert SubmitOptions(time=limit).to_argv() == [f"--time={limit}"]


def test_paths_become_absolute_flags() -> None:
    opts = SubmitOptions(output="/shared/exp/%j.out", chdir=Path("/shared/exp"))
    assert opts.to_argv() == ["--output=/shared/exp/%j.out", "--chdir=/shared/exp"]


def test_requeue_is_left_to_the_site_unless_asked() -> None:
    assert SubmitOptions().to_argv() == []
    assert SubmitOptions(requeue=True).to_argv() == ["--requeue"]


@pytest.mark.parametrize(
    ("opts", "match"),
    [
        (SubmitOptions(extra_args=("--comment=x",)), "is set by nvrx"),
        (SubmitOptions(extra_args=("--parsable",)), "is set by nvrx"),
        (SubmitOptions(job_name="a", extra_args=("-J", "b")), "conflicts with job_name"),
        (SubmitOptions(job_name="a", extra_args=("--job-name=b",)), "conflicts with job_name"),
        (SubmitOptions(requeue=False, extra_args=("--requeue",)), "conflicts with requeue"),
        (SubmitOptions(partition="p", extra_args=("-pother",)), "conflicts with partition"),
    ],
)
def test_pass_through_arguments_cannot_override_typed_options(
    opts: SubmitOptions, match: str
) -> None:
    with pytest.raises(SlurmValueError, match=match):
        opts.to_argv()


def test_pass_through_arguments_for_unset_options_are_kept() -> None:
    opts = SubmitOptions(job_name="a", extra_args=("-A", "acct", "-p", "batch", "--begin=now+5"))
    assert opts.to_argv()[-5:] == ["-A", "acct", "-p", "batch", "--begin=now+5"]


def test_dependency_lists_cannot_mix_all_and_any() -> None:
    with pytest.raises(SlurmValueError, match="not both"):
        SubmitOptions(dependency="afterok:1,afterany:2?afterok:3").to_argv()
