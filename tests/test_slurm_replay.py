"""Adapter decisions on replayed Slurm answers: what the poller concludes from what the
commands said, and when submit may retry. Every answer below is text the local 22.05 cluster
printed (see deploy/local-slurm/OBSERVED.md); the same behaviours run live in tests/slurm/.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping, Sequence

import pytest

from nvrx.config import SlurmSettings
from nvrx.retry import RetryPolicy
from nvrx.slurm import JobState, Slurm, SlurmError, SlurmUnavailable, SubmitOptions
from nvrx.slurm.poller import StatePoller
from nvrx.slurm.runner import CommandExecutor, CommandResult

CONNECT = "squeue: error: Unable to contact slurm controller (connect failure)"
TIMEOUT = "sbatch: error: Socket timed out on send/recv operation"


class Replay:
    """Answers each command (by name) with its next scripted (rc, stdout, stderr)."""

    def __init__(self, answers: Mapping[str, list[tuple[int | None, str, str]]]) -> None:
        self.answers = {k: list(v) for k, v in answers.items()}
        self.argvs: list[list[str]] = []
        self.now = 0.0

    def __call__(
        self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str]
    ) -> CommandResult:
        self.argvs.append(list(argv))
        rc, out, err = self.answers[os.path.basename(argv[0])].pop(0)
        return CommandResult(tuple(argv), rc, out, err, 0.0)

    def commands(self) -> list[str]:
        return [os.path.basename(a[0]) for a in self.argvs]


def slurm_for(replay: Replay, deadline: float = 60.0) -> Slurm:
    executor = CommandExecutor(
        retry=RetryPolicy(deadline=deadline, initial_backoff=1, max_backoff=2),
        runner=replay,
        env={},
        sleep=lambda s: setattr(replay, "now", replay.now + s),
        clock=lambda: replay.now,
    )
    return Slurm(SlurmSettings(poll_interval=0), executor=executor)


class TestPoller:
    def test_an_array_whose_pending_range_was_cancelled_is_over(self) -> None:
        replay = Replay(
            {
                "squeue": [(1, "", "slurm_load_jobs error: Invalid job id specified")],
                "sacct": [
                    (
                        0,
                        "31_0|32|CANCELLED by 0|0:15|1795944250|1795944260|n1|root|x\n"
                        "31_[1-4%2]|31|CANCELLED by 0|0:0|Unknown|1795944260|None assigned|root|x\n",
                        "",
                    )
                ],
            }
        )
        status = StatePoller(slurm_for(replay)).poll(["31"]).jobs["31"]
        assert status.state is JobState.CANCELLED
        assert status.final

    def test_a_pending_range_that_is_still_pending_keeps_the_array_live(self) -> None:
        replay = Replay(
            {
                "squeue": [(0, "", "")],
                "sacct": [
                    (
                        0,
                        "31_0|32|COMPLETED|0:0|1795944250|1795944260|n1|root|x\n"
                        "31_[1-4%2]|31|PENDING|0:0|Unknown|Unknown|None assigned|root|x\n",
                        "",
                    )
                ],
            }
        )
        status = StatePoller(slurm_for(replay)).poll(["31"]).jobs["31"]
        assert status.state is JobState.PENDING and not status.final

    def test_terminal_rows_in_the_queue_alone_do_not_make_a_job_over(self) -> None:
        # The controller already purged tasks 0-3; only task 4 (the array record) is left, and
        # accounting cannot be reached: the array's ending is unknown, not COMPLETED.
        replay = Replay(
            {
                "squeue": [(0, "2|4|2|COMPLETED|None|root|1|n2|main|wrap|(null)\n", "")],
                "sacct": [
                    (1, "", "sacct: error: Problem talking to the database: Connection refused")
                ]
                * 50,
            }
        )
        result = StatePoller(slurm_for(replay, deadline=5)).poll(["2"])
        status = result.jobs["2"]
        assert status.state is JobState.UNKNOWN and not status.state.is_terminal
        assert [t.state for t in status.tasks] == [JobState.COMPLETED]
        assert result.accounting_error is not None and not result.blind

    def test_an_array_is_not_over_while_accounting_lacks_tasks_the_queue_showed(self) -> None:
        queue_rows = "".join(
            f"40|{t}|{41 + t}|COMPLETED|None|root|1|n{t + 1}|main|x|(null)\n" for t in range(3)
        )
        task = "40_{0}|{1}|COMPLETED|0:0|1795944250|1795944260|n1|root|x\n"
        replay = Replay(
            {
                "squeue": [(0, queue_rows, ""), (0, "", "")],
                "sacct": [
                    (0, task.format(0, 41), ""),  # slurmdbd has recorded task 0 only
                    (0, "".join(task.format(t, 41 + t) for t in range(3)), ""),
                ],
            }
        )
        poller = StatePoller(slurm_for(replay))
        first = poller.poll(["40"]).jobs["40"]
        assert first.state is JobState.COMPLETED and not first.final
        second = poller.poll(["40"]).jobs["40"]
        assert second.final and len(second.tasks) == 3

    def test_a_failed_queue_makes_the_pass_blind_and_every_job_unknown(self) -> None:
        replay = Replay({"squeue": [(1, "", CONNECT)] * 50})
        result = StatePoller(slurm_for(replay, deadline=5)).poll(["7", "8"])
        assert result.blind
        assert {s.state for s in result.jobs.values()} == {JobState.UNKNOWN}
        assert "sacct" not in replay.commands()

    def test_an_ended_job_is_final_once_and_then_never_queried(self) -> None:
        replay = Replay(
            {
                "squeue": [(0, "5|N/A|5|COMPLETED|None|root|1|n1|main|wrap|(null)\n", "")],
                "sacct": [(0, "5|5|COMPLETED|0:0|1795944250|1795944252|n1|root|wrap\n", "")],
            }
        )
        poller = StatePoller(slurm_for(replay))
        first = poller.poll(["5"])
        assert first.jobs["5"].final and first.commands == 2
        again = poller.poll(["5"])
        assert again.jobs["5"].final and again.commands == 0

    def test_within_the_minimum_interval_no_command_runs_and_new_jobs_are_unknown(self) -> None:
        replay = Replay({"squeue": [(0, "5|N/A|5|RUNNING|None|root|1|n1|main|wrap|(null)\n", "")]})
        clock = [0.0]
        poller = StatePoller(slurm_for(replay), min_interval=30, clock=lambda: clock[0])
        assert poller.poll(["5"]).jobs["5"].state is JobState.RUNNING
        clock[0] = 10.0
        cached = poller.poll(["5", "6"])
        assert cached.commands == 0
        assert cached.jobs["5"].state is JobState.RUNNING
        assert cached.jobs["6"].state is JobState.UNKNOWN
        assert replay.commands() == ["squeue"]


def queue_row(job_id: str, comment: str) -> str:
    return f"{job_id}|N/A|{job_id}|PENDING|BeginTime|root|1||main|x|{comment}\n"


class TestSubmitRetries:
    def test_a_connect_failure_is_retried_without_asking_the_queue(self) -> None:
        replay = Replay({"sbatch": [(1, "", CONNECT), (0, "41\n", "")]})
        sub = slurm_for(replay).submit(SubmitOptions(), wrap="true")
        assert sub.job_id == "41"
        assert replay.commands() == ["sbatch", "sbatch"]

    def test_a_lost_answer_is_looked_up_before_any_retry(self) -> None:
        replay = Replay({"sbatch": [(1, "", TIMEOUT)], "squeue": []})
        slurm = slurm_for(replay)

        def answer_with_the_job(
            argv: Sequence[str], *, timeout: float, env: Mapping[str, str]
        ) -> CommandResult:
            if argv[0].endswith("squeue"):
                comment = next(a for a in replay.argvs[0] if a.startswith("--comment=")).split(
                    "=", 1
                )[1]
                replay.argvs.append(list(argv))
                return CommandResult(tuple(argv), 0, queue_row("42", comment), "", 0.0)
            return replay(argv, timeout=timeout, env=env)

        slurm.executor.runner = answer_with_the_job
        sub = slurm.submit(SubmitOptions(comment="chain=ab gen=0"), wrap="true")
        assert sub.job_id == "42"
        assert sub.comment is not None and sub.comment.startswith("chain=ab gen=0 nvrx-submit=")
        assert replay.commands() == ["sbatch", "squeue"]

    def test_a_lost_answer_with_no_job_in_the_queue_is_retried(self) -> None:
        replay = Replay(
            {
                "sbatch": [(1, "", TIMEOUT), (0, "43\n", "")],
                "squeue": [(0, queue_row("9", "someone else's"), ""), (0, "", "")],
            }
        )
        assert slurm_for(replay).submit(SubmitOptions(), wrap="true").job_id == "43"
        # after the retry, the token is looked up once more for a late duplicate
        assert replay.commands() == ["sbatch", "squeue", "sbatch", "squeue"]

    def test_a_first_attempt_processed_late_is_cancelled_as_a_duplicate(self) -> None:
        replay = Replay({"sbatch": [(1, "", TIMEOUT), (0, "45\n", "")], "scancel": [(0, "", "")]})
        slurm = slurm_for(replay)
        answers = iter([[], ["44", "45"]])  # nothing at first; then both attempts are there

        def runner(argv: Sequence[str], *, timeout: float, env: Mapping[str, str]) -> CommandResult:
            if not argv[0].endswith("squeue"):
                return replay(argv, timeout=timeout, env=env)
            replay.argvs.append(list(argv))
            first = replay.argvs[0]
            comment = next(a for a in first if a.startswith("--comment=")).split("=", 1)[1]
            rows = "".join(queue_row(j, comment) for j in next(answers))
            return CommandResult(tuple(argv), 0, rows, "", 0.0)

        slurm.executor.runner = runner
        assert slurm.submit(SubmitOptions(), wrap="true").job_id == "45"
        assert replay.argvs[-1] == ["scancel", "44"]

    def test_while_the_queue_is_unreadable_sbatch_is_not_retried(self) -> None:
        replay = Replay({"sbatch": [(1, "", TIMEOUT)], "squeue": [(1, "", CONNECT)] * 100})
        with pytest.raises(SlurmUnavailable, match="whether the job was created is unknown"):
            slurm_for(replay, deadline=10).submit(SubmitOptions(), wrap="true")
        assert replay.commands().count("sbatch") == 1
        assert replay.now == pytest.approx(10.0)

    def test_every_submission_carries_a_unique_token(self) -> None:
        replay = Replay({"sbatch": [(0, "1\n", ""), (0, "2\n", "")]})
        slurm = slurm_for(replay)
        a = slurm.submit(SubmitOptions(comment="same"), wrap="true")
        b = slurm.submit(SubmitOptions(comment="same"), wrap="true")
        assert a.comment != b.comment
        assert f"--comment={a.comment}" in replay.argvs[0]

    def test_sbatch_rc0_without_an_id_is_an_error_unless_the_job_is_found(self) -> None:
        replay = Replay({"sbatch": [(0, "Submitted batch job 5\n", "")], "squeue": [(0, "", "")]})
        with pytest.raises(SlurmError, match="printed no job id"):
            slurm_for(replay).submit(SubmitOptions(), wrap="true")
        assert replay.commands() == ["sbatch", "squeue"]


def test_when_the_deadline_ends_on_a_lost_answer_the_error_says_the_outcome_is_unknown() -> None:
    replay = Replay({"sbatch": [(1, "", TIMEOUT)] * 100, "squeue": [(0, "", "")] * 100})
    with pytest.raises(SlurmUnavailable, match="whether the job was created is unknown") as err:
        slurm_for(replay, deadline=10).submit(SubmitOptions(comment="gen=1"), wrap="true")
    assert "look for comment 'gen=1 nvrx-submit=" in str(err.value)
    # Between two sbatch attempts the queue was always asked first.
    commands = replay.commands()
    assert all(b == "squeue" for a, b in itertools.pairwise(commands) if a == "sbatch")
