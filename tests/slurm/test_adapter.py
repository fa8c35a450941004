"""The Slurm adapter against the real local cluster: what operators rely on it to report."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nvrx.config import SlurmSettings
from nvrx.slurm import (
    AccountingRow,
    JobState,
    QueueRow,
    Slurm,
    SlurmError,
    SlurmPolicyError,
    SlurmUnavailable,
    SlurmValueError,
    SubmitOptions,
)
from nvrx.slurm.poller import StatePoller
from nvrx.slurm.runner import CommandResult, run_process

from .conftest import local_slurm, wait_for


def states(rows: Sequence[QueueRow]) -> dict[int | None, JobState]:
    return {r.task_id: r.state for r in rows}


def test_a_job_goes_pending_running_completed(slurm: Slurm, job_name: str) -> None:
    sub = slurm.submit(
        SubmitOptions(job_name=job_name, extra_args=("--begin=now+4",)), wrap="sleep 2"
    )
    (row,) = slurm.queue([sub.job_id])
    assert (row.state, row.reason, row.name) == (JobState.PENDING, "BeginTime", job_name)
    assert row.array_job_id == sub.job_id and row.task_id is None

    wait_for(
        lambda: states(slurm.queue([sub.job_id])).get(None) is JobState.RUNNING, what="RUNNING"
    )
    poller = StatePoller(slurm, min_interval=0)
    status = wait_for(
        lambda: (s := poller.poll([sub.job_id]).jobs[sub.job_id]).final and s,
        what="final accounting record",
    )
    assert status.state is JobState.COMPLETED and status.source == "sacct"
    (task,) = status.tasks
    assert task.exit is not None and (task.exit.code, task.exit.signal) == (0, 0)
    now = datetime.now(UTC)
    assert task.start is not None and task.end is not None
    assert task.start.tzinfo is not None
    assert now - timedelta(minutes=2) < task.start <= task.end <= now + timedelta(seconds=5)
    assert timedelta(seconds=1) <= task.end - task.start <= timedelta(seconds=30)


def test_an_array_lists_one_row_per_task_with_its_array_id(slurm: Slurm, job_name: str) -> None:
    sub = slurm.submit(SubmitOptions(job_name=job_name, array="0-3%2"), wrap="sleep 3")
    rows = wait_for(
        lambda: (
            (r := slurm.queue([sub.job_id])) and any(x.state is JobState.RUNNING for x in r) and r
        ),
        what="array running",
    )
    assert {r.task_id for r in rows} == {0, 1, 2, 3}
    assert {r.array_job_id for r in rows} == {sub.job_id}
    assert sum(r.state is JobState.RUNNING for r in rows) <= 2
    pending = [r for r in rows if r.state is JobState.PENDING]
    assert pending and all(r.reason == "JobArrayTaskLimit" for r in pending)

    def all_done() -> list[AccountingRow] | None:
        acct = slurm.accounting([sub.job_id])
        done = [r for r in acct if r.state is JobState.COMPLETED and r.task_id is not None]
        return done if len(done) == 4 else None

    done = wait_for(all_done, timeout=180, what="4 completed tasks in sacct")
    assert sorted(r.task_id for r in done) == [0, 1, 2, 3]


def test_a_singleton_array_waits_for_its_namesake(slurm: Slurm, job_name: str) -> None:
    opts = SubmitOptions(job_name=job_name, array="0-1", dependency="singleton", requeue=False)
    first = slurm.submit(opts, wrap="sleep 4")
    second = slurm.submit(opts, wrap="sleep 1")
    wait_for(
        lambda: JobState.RUNNING in states(slurm.queue([first.job_id])).values(),
        what="first generation running",
    )
    # The reason is "None" until the scheduler's next pass has looked at the job.
    rows = wait_for(
        lambda: (r := slurm.queue([second.job_id])) and all(x.reason for x in r) and r,
        what="the scheduler to evaluate the second array",
    )
    assert all(r.state is JobState.PENDING and r.reason == "Dependency" for r in rows)
    assert JobState.RUNNING in states(slurm.queue([first.job_id])).values()

    poller = StatePoller(slurm, min_interval=0)
    final = wait_for(
        lambda: (p := poller.poll([first.job_id, second.job_id])).jobs[second.job_id].final and p,
        timeout=180,
        what="second generation final",
    )
    first_end = max(t.end for t in final.jobs[first.job_id].tasks if t.end)
    second_start = min(t.start for t in final.jobs[second.job_id].tasks if t.start)
    assert second_start >= first_end


@pytest.mark.parametrize(
    ("command", "state", "code", "signal"),
    [
        ("exit 3", JobState.FAILED, 3, 0),
        ("kill -9 $$", JobState.FAILED, 0, 9),
    ],
)
def test_sacct_reports_exit_code_and_signal(
    slurm: Slurm, job_name: str, command: str, state: JobState, code: int, signal: int
) -> None:
    sub = slurm.submit(SubmitOptions(job_name=job_name), wrap=command)
    poller = StatePoller(slurm, min_interval=0)
    status = wait_for(
        lambda: (s := poller.poll([sub.job_id]).jobs[sub.job_id]).final and s, what="final state"
    )
    assert status.state is state
    assert status.exit is not None
    assert (status.exit.code, status.exit.signal) == (code, signal)


def test_cancel_by_state_removes_only_the_pending_tasks(slurm: Slurm, job_name: str) -> None:
    sub = slurm.submit(SubmitOptions(job_name=job_name, array="0-5%2"), wrap="sleep 60")
    wait_for(
        lambda: list(states(slurm.queue([sub.job_id])).values()).count(JobState.RUNNING) == 2,
        what="two running tasks",
    )
    slurm.cancel([sub.job_id], state=JobState.PENDING)
    rows = wait_for(
        lambda: (
            (r := slurm.queue([sub.job_id])) and all(x.state is JobState.RUNNING for x in r) and r
        ),
        what="pending tasks gone",
    )
    assert len(rows) == 2

    slurm.cancel(name=job_name, user=Slurm.current_user())
    wait_for(lambda: not slurm.queue([sub.job_id]), what="all tasks gone")
    acct = wait_for(
        lambda: (
            (a := slurm.accounting([sub.job_id]))
            and all(r.state is JobState.CANCELLED for r in a)
            and a
        ),
        what="CANCELLED in sacct",
    )
    assert any(r.state_text.startswith("CANCELLED by") for r in acct)
    # Cancelling what already ended is not an error.
    slurm.cancel([sub.job_id])


def test_cancel_by_name_refuses_without_a_user(slurm: Slurm) -> None:
    from nvrx.slurm import SlurmValueError

    with pytest.raises(SlurmValueError, match="needs the user"):
        slurm.cancel(name="anything")
    with pytest.raises(SlurmValueError, match="job ids, or a job name"):
        slurm.cancel(user=Slurm.current_user())  # would cancel every job of the user
    assert slurm.calls == {}


def test_the_job_gets_the_callers_environment_untouched(
    slurm: Slurm, job_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nvrx scrubs SQUEUE_*/SLURM_TIME_FORMAT for its own queries only, never for the job.
    monkeypatch.setenv("SQUEUE_FORMAT", "%i")
    monkeypatch.delenv("SLURM_TIME_FORMAT", raising=False)
    out = tmp_path / "env.txt"
    sub = slurm.submit(
        SubmitOptions(job_name=job_name),
        wrap=f'echo "$SQUEUE_FORMAT|${{SLURM_TIME_FORMAT-unset}}|$EXTRA" > {out}',
        env={"EXTRA": "given"},
    )
    wait_for(out.exists, what="the job's output")
    assert wait_for(lambda: out.read_text().strip()) == "%i|unset|given"
    assert sub.comment is not None and sub.comment.startswith("nvrx-submit=")
    assert [r.array_job_id for r in slurm.find_by_comment(sub.comment)] == [sub.job_id]


def test_signal_reaches_the_job(slurm: Slurm, job_name: str, tmp_path: Path) -> None:
    marker = tmp_path / "got-usr1"
    script = tmp_path / "trap.sh"
    script.write_text(
        f"#!/bin/bash\ntrap 'touch {marker}; exit 0' USR1\nfor i in $(seq 600); do sleep 0.1; done\n"
    )
    sub = slurm.submit(SubmitOptions(job_name=job_name), script=script)
    wait_for(
        lambda: states(slurm.queue([sub.job_id])).get(None) is JobState.RUNNING, what="RUNNING"
    )
    time.sleep(0.5)
    slurm.cancel([sub.job_id], signal="USR1", full=True)
    wait_for(marker.exists, what="the trap's marker file")


def test_show_job_and_show_config(slurm: Slurm, job_name: str, tmp_path: Path) -> None:
    script = tmp_path / "gen.sbatch"
    script.write_text("#!/bin/bash\nsleep 30\n")
    sub = slurm.submit(
        SubmitOptions(job_name=job_name, array="0-4%2", comment="nvrx test"), script=script
    )
    records = slurm.show_job(sub.job_id)
    assert records
    info = records[0]
    assert info.command == str(script)
    assert info.user == Slurm.current_user()
    assert info.uid is not None
    assert info.array_job_id == sub.job_id
    assert info.array_task_throttle == 2
    assert info.name == job_name
    assert info.comment == sub.comment and info.comment.startswith("nvrx test nvrx-submit=")
    assert slurm.max_array_size() == int(slurm.show_config()["MaxArraySize"]) > 5


def test_a_bad_partition_is_a_policy_error_not_retried(slurm: Slurm, job_name: str) -> None:
    with pytest.raises(SlurmPolicyError) as err:
        slurm.submit(SubmitOptions(job_name=job_name, partition="nosuchpart"), wrap="true")
    assert "nosuchpart" in err.value.command
    assert "partition" in err.value.stderr.lower()
    assert slurm.calls["sbatch"] == 1


def test_sinfo_counts_the_nodes_a_running_job_takes_away(slurm: Slurm, job_name: str) -> None:
    # From a partition at rest: a node the previous test's job still holds (completing) would
    # be freed meanwhile and hide one of the two this job takes.
    before = wait_for(
        lambda: (p := slurm.partition_nodes()).idle == p.total and p, what="every node idle"
    )
    assert before.partition == "main" and before.total == 8
    sub = slurm.submit(
        SubmitOptions(job_name=job_name, nodes=2, exclusive=True, mem="0"), wrap="sleep 60"
    )
    wait_for(
        lambda: states(slurm.queue([sub.job_id])).get(None) is JobState.RUNNING, what="running"
    )
    during = slurm.partition_nodes("main")
    assert during.idle == before.idle - 2
    slurm.cancel([sub.job_id])
    with pytest.raises(SlurmError, match="no partition 'nosuchpart'"):
        slurm.partition_nodes("nosuchpart")


def test_empty_accounting_is_unknown_never_gone(slurm: Slurm) -> None:
    never = "987654321"
    assert slurm.accounting([never]) == []
    status = StatePoller(slurm, min_interval=0).poll([never]).jobs[never]
    assert status.state is JobState.UNKNOWN
    assert not status.final and not status.state.is_terminal


def test_one_or_two_commands_per_pass_whatever_the_number_of_jobs(
    slurm: Slurm, job_name: str
) -> None:
    short = [slurm.submit(SubmitOptions(job_name=job_name), wrap="true").job_id for _ in range(3)]
    long = [
        slurm.submit(SubmitOptions(job_name=job_name), wrap="sleep 60").job_id for _ in range(5)
    ]
    poller = StatePoller(slurm, min_interval=0)
    first = poller.poll(short + long)
    assert first.commands in (1, 2)
    wait_for(lambda: all(poller.poll(short).jobs[j].final for j in short), what="short jobs final")
    later = poller.poll(short + long)
    # The long jobs are live (one squeue); the short ones are final and never queried again.
    assert later.commands == 1
    assert all(later.jobs[j].state.is_live for j in long)
    assert poller.poll(short + long).commands == 1  # steady state: one squeue per pass
    slow = StatePoller(slurm, min_interval=3600)
    slow.poll(long)
    assert slow.poll(long).commands == 0  # inside the minimum interval: the cached answer


class LoseFirstSbatchAnswer:
    """Runs the real sbatch, then reports it as a socket timeout, as a flaky network would."""

    def __init__(self) -> None:
        self.lost = False

    def __call__(
        self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str]
    ) -> CommandResult:
        result = run_process(argv, timeout=timeout, env=env)
        if argv[0].endswith("sbatch") and not self.lost:
            self.lost = True
            return CommandResult(
                result.argv, 1, "", "sbatch: error: Socket timed out on send/recv operation", 0.0
            )
        return result


def test_a_lost_sbatch_answer_is_recovered_by_comment_not_resubmitted(job_name: str) -> None:
    slurm = Slurm(SlurmSettings(retry_deadline=60), runner=LoseFirstSbatchAnswer())
    comment = f"{job_name} gen=0"
    sub = slurm.submit(
        SubmitOptions(job_name=job_name, comment=comment, extra_args=("--begin=now+60",)),
        wrap="true",
    )
    rows = slurm.queue(name=job_name, user=Slurm.current_user())
    assert [r.array_job_id for r in rows] == [sub.job_id]
    assert rows[0].comment == sub.comment
    assert sub.comment is not None and sub.comment.startswith(comment + " nvrx-submit=")
    assert [r.array_job_id for r in slurm.find_by_comment(comment)] == [sub.job_id]
    assert slurm.calls["sbatch"] == 1


def test_a_lost_sbatch_answer_without_a_caller_comment_is_found_by_its_token(
    job_name: str,
) -> None:
    slurm = Slurm(SlurmSettings(retry_deadline=60), runner=LoseFirstSbatchAnswer())
    sub = slurm.submit(
        SubmitOptions(job_name=job_name, extra_args=("--begin=now+60",)), wrap="true"
    )
    rows = slurm.queue(name=job_name, user=Slurm.current_user())
    assert [r.array_job_id for r in rows] == [sub.job_id]
    assert slurm.calls["sbatch"] == 1


@pytest.fixture
def controller_restored() -> Iterator[None]:
    """Brings slurmctld back after the test (before job_name's cleanup, which needs it)."""
    yield None
    local_slurm("up")


def test_queries_survive_a_controller_restart_within_the_deadline(
    job_name: str, controller_restored: None
) -> None:
    # Each attempt gives up after 3 s; the controller is away for longer than that, so only the
    # adapter's own retries (not the Slurm client's internal ones) can bridge the outage.
    slurm = Slurm(SlurmSettings(command_timeout=3, retry_deadline=90, retry_max_backoff=2))
    sub = slurm.submit(SubmitOptions(job_name=job_name), wrap="sleep 120")
    local_slurm("down", "slurmctld")
    restarter = threading.Timer(8.0, local_slurm, args=("up",))
    restarter.start()
    try:
        rows = slurm.queue([sub.job_id])
    finally:
        restarter.join()
    assert [r.array_job_id for r in rows] == [sub.job_id]
    assert slurm.calls["squeue"] >= 2


def test_a_controller_down_past_the_deadline_is_unavailable_not_empty(
    job_name: str, controller_restored: None
) -> None:
    slurm = Slurm(SlurmSettings(command_timeout=5, retry_deadline=6, retry_max_backoff=1))
    sub = slurm.submit(SubmitOptions(job_name=job_name), wrap="sleep 120")
    local_slurm("down", "slurmctld")
    with pytest.raises(SlurmUnavailable, match="state is unknown"):
        slurm.queue([sub.job_id])
    status = StatePoller(slurm, min_interval=0).poll([sub.job_id])
    assert status.blind
    assert status.jobs[sub.job_id].state is JobState.UNKNOWN


def test_a_drained_node_is_listed_with_when_and_why_and_resumed(slurm: Slurm) -> None:
    node = "n8"
    reason = "nvrx test: drain, with a comma and | a bar"
    before = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    argv = slurm.drain_node(node, reason)
    try:
        assert argv[1:] == ["update", "nodename=n8", "state=drain", f"reason={reason}"]
        (drained,) = [d for d in slurm.drained_nodes() if d.name == node]
        assert drained.reason == reason and drained.state.startswith("drain")
        assert drained.since is not None and drained.since >= before
        slurm.drain_node(node, reason)  # again: no error, still one row
        assert [d.name for d in slurm.drained_nodes()].count(node) == 1
    finally:
        subprocess.run(
            ["scontrol", "update", f"nodename={node}", "state=resume"], check=True, timeout=30
        )
    assert node not in [d.name for d in slurm.drained_nodes()]
    with pytest.raises(SlurmValueError, match="invalid node name"):
        slurm.drain_node("n[1-8]", reason)


def test_the_node_list_is_every_node_once_and_all_drains_nothing(slurm: Slurm) -> None:
    # What a drain is checked against: sinfo's own node list (a node once, whatever the number
    # of its partitions). `ALL` is refused before scontrol runs: nothing is drained.
    assert slurm.node_names() == frozenset(f"n{i}" for i in range(1, 9))
    for word in ("ALL", "all", "Default", "n1,n2"):
        with pytest.raises(SlurmValueError, match="invalid node name"):
            slurm.drain_node(word, "nvrx test")
    assert slurm.drained_nodes() == []
