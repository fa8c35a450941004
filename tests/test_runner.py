"""Running Slurm commands: error classification and the retry loop.

The loop's timing is driven by a scripted runner and a fake clock so the deadline arithmetic is
exact; what a real stopped controller does is tested in tests/slurm/.
"""

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from nvrx.retry import RetryPolicy
from nvrx.slurm import ErrorKind, JobForgotten, SlurmError, SlurmPolicyError, SlurmUnavailable
from nvrx.slurm.errors import classify
from nvrx.slurm.runner import CommandExecutor, CommandResult, slurm_environment


@pytest.mark.parametrize(
    ("stderr", "kind"),
    [
        ("squeue: error: Socket timed out on send/recv operation", ErrorKind.TRANSIENT),
        (
            "slurm_load_jobs error: Unable to contact slurm controller (connect failure)",
            ErrorKind.TRANSIENT,
        ),
        (
            "sbatch: error: Batch job submission failed: Resource temporarily unavailable",
            ErrorKind.TRANSIENT,
        ),
        ("Zero Bytes were transmitted or received", ErrorKind.TRANSIENT),
        ("slurm_load_jobs error: Invalid job id specified", ErrorKind.FORGOTTEN),
        ("sbatch: error: AssocMaxSubmitJobLimit", ErrorKind.POLICY),
        (
            "sbatch: error: Batch job submission failed: Invalid partition name specified",
            ErrorKind.POLICY,
        ),
        ("sacct: error: Slurm accounting storage is disabled", ErrorKind.ACCOUNTING_DISABLED),
        ("squeue: error: Invalid user: nobody2", ErrorKind.PERMANENT),
    ],
)
def test_classify(stderr: str, kind: ErrorKind) -> None:
    assert classify(stderr) is kind


class Script:
    """Answers each call with the next scripted (rc, stderr) and advances a fake clock."""

    def __init__(
        self, answers: list[tuple[int | None, str]], seconds_per_call: float = 0.0
    ) -> None:
        self.answers = answers
        self.now = 0.0
        self.seconds_per_call = seconds_per_call
        self.argvs: list[Sequence[str]] = []

    def __call__(
        self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str]
    ) -> CommandResult:
        self.argvs.append(argv)
        self.now += self.seconds_per_call
        rc, err = self.answers.pop(0)
        return CommandResult(tuple(argv), rc, "out" if rc == 0 else "", err, 0.0)

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def clock(self) -> float:
        return self.now


def executor(script: Script, deadline: float = 10.0) -> CommandExecutor:
    return CommandExecutor(
        retry=RetryPolicy(deadline=deadline, initial_backoff=1.0, max_backoff=4.0),
        runner=script,
        sleep=script.sleep,
        clock=script.clock,
        env={},
    )


def test_transient_errors_are_retried_until_success() -> None:
    script = Script([(1, "Socket timed out on send/recv operation"), (None, ""), (0, "")])
    result = executor(script).run(["squeue"])
    assert result.stdout == "out"
    assert len(script.argvs) == 3


def test_transient_errors_past_the_deadline_raise_unavailable_with_argv_and_stderr() -> None:
    script = Script([(1, "Unable to contact slurm controller (connect failure)")] * 50)
    with pytest.raises(SlurmUnavailable) as err:
        executor(script, deadline=10.0).run(["squeue", "-h"])
    assert err.value.argv == ("squeue", "-h")
    assert "connect failure" in err.value.stderr
    assert "state is unknown" in str(err.value)
    # The backoff is cut short so that the last attempt runs at the deadline, not before it.
    assert script.now == pytest.approx(10.0)
    assert 3 <= len(script.argvs) <= 10


def test_backoff_grows_and_is_capped() -> None:
    script = Script([(1, "Socket timed out")] * 100)
    with pytest.raises(SlurmUnavailable):
        executor(script, deadline=60.0).run(["squeue"])
    # 1, 2, 4, 4, 4 ... (each jittered to half..full): far fewer than 60 one-second retries
    assert 14 <= len(script.argvs) <= 30


@pytest.mark.parametrize(
    ("stderr", "exc"),
    [
        ("Invalid partition name specified", SlurmPolicyError),
        ("slurm_load_jobs error: Invalid job id specified", JobForgotten),
        ("some other failure", SlurmError),
    ],
)
def test_non_transient_errors_raise_at_once_with_their_type(
    stderr: str, exc: type[SlurmError]
) -> None:
    script = Script([(1, stderr)])
    with pytest.raises(exc) as err:
        executor(script).run(["sbatch"])
    assert err.value.returncode == 1
    assert len(script.argvs) == 1


def test_a_long_outage_never_overflows_the_backoff() -> None:
    policy = RetryPolicy(deadline=1e6, initial_backoff=1.0, max_backoff=30.0)
    assert policy.backoff(5000, lambda low, high: high) == 30.0


def test_a_command_that_cannot_start_is_a_slurm_error_not_a_traceback() -> None:
    ex = CommandExecutor(env={})
    with pytest.raises(SlurmError, match="cannot run squeue"):
        ex.run(["squeue", "--name=a\0b"])  # a NUL byte can never reach exec


def test_a_missing_command_is_a_clear_error_that_names_no_timeout(tmp_path: Path) -> None:
    ex = CommandExecutor(env={})
    with pytest.raises(SlurmError, match="nvrx-no-such-command not found") as caught:
        ex.run(["nvrx-no-such-command"])
    # It never ran: no exit code and no timeout to report (slurm.bin_dir naming an empty dir).
    squeue = str(tmp_path / "squeue")
    with pytest.raises(SlurmError) as caught:
        ex.run([squeue, "-h"])
    assert (
        str(caught.value) == f"{squeue} not found (is Slurm installed and on PATH?) [{squeue} -h]"
    )


def test_output_changing_variables_are_scrubbed_but_sbatch_ones_kept() -> None:
    env = slurm_environment(
        {
            "SQUEUE_STATES": "RUNNING",
            "SACCT_FORMAT": "x",
            "SCANCEL_INTERACTIVE": "1",
            "SLURM_TIME_FORMAT": "relative",
            "SBATCH_ACCOUNT": "a",
            "PATH": "/bin",
        }
    )
    assert env == {"SBATCH_ACCOUNT": "a", "PATH": "/bin", "SLURM_TIME_FORMAT": "%s"}


def test_scontrol_job_not_found_means_forgotten() -> None:
    assert classify("Job 83_3 not found") is ErrorKind.FORGOTTEN
    assert classify("slurm_load_jobs error: Invalid job id specified") is ErrorKind.FORGOTTEN
