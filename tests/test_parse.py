"""Parsers of Slurm output, on output recorded from the local Slurm 22.05 cluster."""

import time
from datetime import UTC, datetime

import pytest

from nvrx.slurm import JobState, SlurmParseError
from nvrx.slurm.parse import (
    SQUEUE_FORMAT,
    parse_sacct,
    parse_sbatch_parsable,
    parse_scontrol_records,
    parse_show_config,
    parse_slurm_time,
    parse_squeue,
)
from nvrx.slurm.states import ExitStatus

# squeue -h -r -t all -o '%F|%K|%A|%T|%r|%u|%D|%N|%P|%j|%k'
SQUEUE = """\
1|N/A|1|COMPLETED|None|root|1|n1|main|wrap|(null)
2|4|2|COMPLETED|None|root|1|n2|main|wrap|(null)
2|2|9|COMPLETED|None|root|1|n2|main|wrap|(null)
2|0|7|RUNNING|None|root|1|n1|main|wrap|(null)
3|N/A|3|FAILED|NonZeroExitCode|root|1|n1|main|wrap|(null)
12|N/A|12|PENDING|BeginTime|root|1||main|wrap|(null)
20|3|24|PENDING|JobArrayTaskLimit|alice|2||main|nvrx_singleton|chain=ab12 gen=0|extra
"""

# SLURM_TIME_FORMAT=%s sacct -X -n -P -o JobID,JobIDRaw,State,ExitCode,Start,End,NodeList,User,JobName
SACCT = """\
1|1|COMPLETED|0:0|1795944250|1795944252|n1|root|wrap
3|3|FAILED|3:0|1795944250|1795944250|n1|root|wrap
4|4|FAILED|0:9|1795944250|1795944250|n2|root|wrap
6|6|RUNNING|0:0|1795944250|Unknown|n2|root|wrap
2_0|7|COMPLETED|0:0|1795944250|1795944253|n1|root|wrap
30|30|CANCELLED by 0|0:0|None|1795944300|None assigned|root|wrap
31_[2-4%2]|31|PENDING|0:0|Unknown|Unknown|None assigned|root|nvrx_singleton
"""


def test_squeue_format_is_the_one_the_parser_reads() -> None:
    assert SQUEUE_FORMAT == "%F|%K|%A|%T|%r|%u|%D|%N|%P|%j|%k"


def test_squeue_rows() -> None:
    rows = parse_squeue(SQUEUE)
    assert len(rows) == 7
    plain, task4, _, task0, failed, pending, other = rows
    assert (plain.array_job_id, plain.task_id, plain.job_id) == ("1", None, "1")
    assert plain.reason == "" and plain.comment == ""
    # %F groups tasks under the array id; %A is each task's own id.
    assert (task4.array_job_id, task4.task_id, task4.job_id) == ("2", 4, "2")
    assert (task0.array_job_id, task0.task_id, task0.job_id, task0.state) == (
        "2",
        0,
        "7",
        JobState.RUNNING,
    )
    assert failed.state is JobState.FAILED and failed.reason == "NonZeroExitCode"
    assert pending.nodes == "" and pending.reason == "BeginTime"
    assert other.user == "alice" and other.node_count == 2 and other.name == "nvrx_singleton"
    assert other.comment == "chain=ab12 gen=0|extra"  # the last field keeps its '|'


def test_squeue_pending_range_without_r_takes_the_first_index() -> None:
    (row,) = parse_squeue("40|5-9%2|40|PENDING|JobArrayTaskLimit|root|1||main|x|(null)\n")
    assert row.task_id == 5


def test_squeue_garbage_is_an_error_not_an_empty_list() -> None:
    with pytest.raises(SlurmParseError, match="squeue row"):
        parse_squeue("slurm_load_jobs error: something\n")


def test_sacct_rows() -> None:
    rows = parse_sacct(SACCT)
    by_id = {r.job_id: r for r in rows}
    assert by_id["3"].state is JobState.FAILED and by_id["3"].exit == ExitStatus(3, 0)
    assert by_id["4"].exit == ExitStatus(0, 9)
    assert by_id["1"].start == datetime(2026, 11, 29, 9, 24, 10, tzinfo=UTC)
    assert by_id["1"].end is not None and by_id["1"].end.tzinfo is UTC
    assert by_id["6"].end is None and by_id["6"].state.is_live
    task = by_id["2_0"]
    assert (task.array_job_id, task.task_id, task.raw_job_id) == ("2", 0, "7")
    cancelled = by_id["30"]
    assert cancelled.state is JobState.CANCELLED and cancelled.state_text == "CANCELLED by 0"
    assert cancelled.start is None and cancelled.nodes == ""
    pending = by_id["31_[2-4%2]"]
    assert pending.is_pending_range and pending.task_id is None
    assert pending.ref.task_ids == (2, 3, 4)


def test_sacct_empty_output_is_an_empty_list() -> None:
    assert parse_sacct("") == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1795944250", datetime(2026, 11, 29, 9, 24, 10, tzinfo=UTC)),
        ("Unknown", None),
        ("None", None),
        ("", None),
        ("0", None),
    ],
)
def test_slurm_times(text: str, expected: datetime | None) -> None:
    assert parse_slurm_time(text) == expected


def test_standard_local_time_is_converted_with_this_hosts_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        assert parse_slurm_time("2026-07-01T12:00:00") == datetime(2026, 7, 1, 10, 0, tzinfo=UTC)
        assert parse_slurm_time("2026-12-01T12:00:00") == datetime(2026, 12, 1, 11, 0, tzinfo=UTC)
    finally:
        monkeypatch.undo()
        time.tzset()


def test_bad_time_is_an_error() -> None:
    with pytest.raises(SlurmParseError, match="bad Slurm time"):
        parse_slurm_time("yesterday")


SCONTROL = (
    "JobId=10 ArrayJobId=2 ArrayTaskId=3 ArrayTaskThrottle=2 JobName=wrap UserId=root(0) "
    "GroupId=root(0) MCS_label=N/A Priority=4294901758 Nice=0 Account=nvrx QOS=normal "
    "JobState=COMPLETED Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 "
    "ExitCode=0:0 RunTime=00:00:03 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=1795944249 "
    "Partition=main AllocNode:Sid=localhost:2596 ReqNodeList=(null) NodeList=n2 BatchHost=n2 "
    "NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=1,node=1,billing=1 "
    "Socks/Node=* NtasksPerN:B:S:C=0:0:*:* Features=(null) Comment=chain=ab12 gen=0 Mode=x y "
    "Command=/shared/run/nvrx_singleton_array.sbatch WorkDir=/tmp StdErr=/tmp/slurm-2_3.out "
    "StdIn=/dev/null StdOut=/tmp/slurm-2_3.out Power= \n"
)


def test_scontrol_record() -> None:
    (record,) = parse_scontrol_records(SCONTROL)
    assert record["JobId"] == "10" and record["ArrayJobId"] == "2"
    assert record["ArrayTaskThrottle"] == "2"
    assert record["UserId"] == "root(0)"
    assert record["TRES"] == "cpu=1,node=1,billing=1"
    assert record["AllocNode:Sid"] == "localhost:2596"
    # A comment may itself contain `word=` pairs: they stay in the comment.
    assert record["Comment"] == "chain=ab12 gen=0 Mode=x y"
    assert "gen" not in record and "Mode" not in record
    assert record["Command"] == "/shared/run/nvrx_singleton_array.sbatch"
    assert record["Power"] == ""


def test_scontrol_garbage_is_an_error() -> None:
    with pytest.raises(SlurmParseError):
        parse_scontrol_records("no fields here\n")


def test_show_config() -> None:
    text = (
        "Configuration data as of 2026-11-29T09:25:18\n"
        "AccountingStorageEnforce = none\n"
        "MaxArraySize            = 1001\n"
        "MinJobAge               = 300 sec\n"
        "\n"
        "Slurmctld(primary) at vm is UP\n"
    )
    config = parse_show_config(text)
    assert config["MaxArraySize"] == "1001"
    assert config["MinJobAge"] == "300 sec"
    assert "Configuration" not in config


@pytest.mark.parametrize(
    ("stdout", "job_id", "cluster"),
    [
        ("16\n", "16", None),
        ("17;gpu-cluster\n", "17", "gpu-cluster"),
        ("sbatch: warning: x\n18\n", "18", None),
    ],
)
def test_sbatch_parsable(stdout: str, job_id: str, cluster: str | None) -> None:
    sub = parse_sbatch_parsable(stdout)
    assert (sub.job_id, sub.cluster) == (job_id, cluster)


@pytest.mark.parametrize("stdout", ["", "Submitted batch job 5\n"])
def test_sbatch_without_an_id_is_an_error(stdout: str) -> None:
    with pytest.raises(SlurmParseError, match="no job id"):
        parse_sbatch_parsable(stdout)


def test_a_test_only_answer_says_when_and_where_without_a_job_id() -> None:
    from nvrx.slurm.parse import parse_test_only

    answer = parse_test_only(
        "sbatch: Job 94 to start at 1796676862 using 4 processors on nodes n1 in partition main\n"
    )
    assert answer.start == datetime(2026, 12, 7, 20, 54, 22, tzinfo=UTC)
    assert (answer.nodes, answer.partition, answer.processors) == ("n1", "main", 4)
    # The id of a job that does not exist is never shown: it would be looked up.
    assert answer.describe() == (
        "would start at 2026-12-07 20:54:22 UTC on n1 (partition main, 4 processors)"
    )
    assert "94" not in answer.describe()
    other = parse_test_only("sbatch: some newer wording\n")
    assert other.start is None and other.describe() == "some newer wording"
    assert parse_test_only("").describe() == "feasible"
