"""Parsers for Slurm command output: pure functions of text, tested on recorded output.

The format strings live next to their parsers so the two cannot drift apart. One module
because every command's parser shares the one record splitter and time reader: split by command
they would all import one another's pieces.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from nvrx.slurm.errors import SlurmParseError
from nvrx.slurm.ids import JobRef, parse_job_ref, parse_task_indices
from nvrx.slurm.states import ExitStatus, JobState

DELIMITER = "|"

# squeue: %F is the array's job id (never %A, which splits one array into phantom generations);
# %K the task index (with -r one row per task). The comment goes last so a '|' inside it survives.
SQUEUE_FIELDS: tuple[tuple[str, str], ...] = (
    ("array_job_id", "%F"),
    ("task", "%K"),
    ("job_id", "%A"),
    ("state", "%T"),
    ("reason", "%r"),
    ("user", "%u"),
    ("node_count", "%D"),
    ("nodes", "%N"),
    ("partition", "%P"),
    ("name", "%j"),
    ("comment", "%k"),
)
SQUEUE_FORMAT = DELIMITER.join(code for _, code in SQUEUE_FIELDS)

SACCT_FIELDS: tuple[str, ...] = (
    "JobID",
    "JobIDRaw",
    "State",
    "ExitCode",
    "Start",
    "End",
    "NodeList",
    "User",
    "JobName",
)
SACCT_FORMAT = ",".join(SACCT_FIELDS)

_NULLS = frozenset({"", "(null)", "n/a", "none", "unknown", "none assigned"})


def _text(value: str) -> str:
    value = value.strip()
    return "" if value.lower() in {"(null)", "none assigned"} else value


def parse_slurm_time(value: str) -> datetime | None:
    """A Slurm timestamp as a timezone-aware UTC datetime; `Unknown`/`None`/empty → None.

    Accepts epoch seconds and Slurm's standard local time (`2026-11-29T09:10:11`, no zone: it is
    the local time of the host that runs the command, so it is converted with this host's zone).
    """
    text = value.strip()
    if text.lower() in _NULLS:
        return None
    if text.isdigit():
        if int(text) == 0:
            return None
        return datetime.fromtimestamp(int(text), tz=UTC)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise SlurmParseError(f"bad Slurm time {value!r}") from exc
    return parsed.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One row of `squeue -r`: a job, or one task of an array."""

    array_job_id: str
    task_id: int | None
    job_id: str
    state: JobState
    reason: str
    user: str
    node_count: int | None
    nodes: str
    partition: str
    name: str
    comment: str

    @property
    def is_array_task(self) -> bool:
        return self.task_id is not None


def _records(text: str, names: Sequence[str], command: str) -> Iterator[dict[str, str]]:
    """Split delimited rows into dicts; the last field keeps any delimiter inside it."""
    n = len(names)
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(DELIMITER, n - 1)
        if len(parts) != n:
            raise SlurmParseError(f"{command} row has {len(parts)} fields, expected {n}: {line!r}")
        yield dict(zip(names, parts, strict=True))


def parse_squeue(text: str) -> list[QueueRow]:
    """Parse `squeue -h -r -o SQUEUE_FORMAT` output."""
    rows: list[QueueRow] = []
    for f in _records(text, [name for name, _ in SQUEUE_FIELDS], "squeue"):
        task_text = f["task"].strip()
        task_id: int | None = None
        if task_text and task_text.upper() != "N/A":
            # Without -r a pending range prints as `5-9%2`; take its first index.
            task_id = parse_task_indices(task_text).indices[0]
        count = f["node_count"].strip()
        rows.append(
            QueueRow(
                array_job_id=f["array_job_id"].strip(),
                task_id=task_id,
                job_id=f["job_id"].strip(),
                state=JobState.parse(f["state"]),
                reason="" if f["reason"].strip() == "None" else _text(f["reason"]),
                user=f["user"].strip(),
                node_count=int(count) if count.isdigit() else None,
                nodes=_text(f["nodes"]),
                partition=f["partition"].strip(),
                name=f["name"].strip(),
                comment=_text(f["comment"]),
            )
        )
    return rows


# sinfo, one row per partition and node state: %P ends in '*' for the default partition.
SINFO_FIELDS: tuple[tuple[str, str], ...] = (
    ("partition", "%P"),
    ("availability", "%a"),
    ("node_count", "%D"),
    ("state", "%T"),
)
SINFO_FORMAT = DELIMITER.join(code for _, code in SINFO_FIELDS)
# A node a job can start on now: idle, or idle and powered down (a job powers it up). Any other
# suffix (`*` not responding, `#` powering up, `-` planned by backfill for another job, `$`
# maintenance, `@` reboot pending, `!`/`%` powering down) or state is not free.
_FREE_NODE_STATES = frozenset({"idle", "idle~"})


@dataclass(frozen=True, slots=True)
class PartitionNodes:
    """A partition's nodes as one `sinfo` saw them: how many in all, how many free now."""

    partition: str
    total: int
    idle: int


def parse_sinfo(text: str, partition: str | None) -> PartitionNodes | None:
    """`sinfo -h -o SINFO_FORMAT` → the nodes of `partition` (None: the default one), or None
    when the output has no such partition. A partition that is not up has no free node."""
    total = idle = 0
    found: str | None = None
    for f in _records(text, [name for name, _ in SINFO_FIELDS], "sinfo"):
        name = f["partition"].strip()
        default = name.endswith("*")
        name = name.rstrip("*")
        if (partition is None and not default) or (partition is not None and name != partition):
            continue
        count = f["node_count"].strip()
        if not count.isdigit():
            raise SlurmParseError(f"sinfo node count {count!r} is not a number")
        found = name
        total += int(count)
        if f["availability"].strip() == "up" and f["state"].strip() in _FREE_NODE_STATES:
            idle += int(count)
    return None if found is None else PartitionNodes(found, total, idle)


# `sinfo -h -N -t STATES -o ...`: one row per node (and partition) in those states; the reason
# last, since it is free text and may hold the delimiter.
DRAINED_FIELDS: tuple[tuple[str, str], ...] = (
    ("name", "%N"),
    ("state", "%T"),
    ("since", "%H"),
    ("reason", "%E"),
)
DRAINED_FORMAT = DELIMITER.join(code for _, code in DRAINED_FIELDS)


@dataclass(frozen=True, slots=True)
class DrainedNode:
    """A node Slurm has drained or is draining: no new job starts there."""

    name: str
    state: str  # sinfo's long state: `draining`, `drained`, `drained*`, ...
    since: datetime | None  # when the reason was set (an admin's drain, a health check's)
    reason: str


def parse_drained_nodes(text: str) -> list[DrainedNode]:
    """`sinfo -h -N -t STATES -o DRAINED_FORMAT` → each node once (sinfo lists a node once per
    partition), in name order."""
    nodes: dict[str, DrainedNode] = {}
    for f in _records(text, [name for name, _ in DRAINED_FIELDS], "sinfo"):
        name = f["name"].strip()
        if not name:
            raise SlurmParseError("sinfo row without a node name")
        nodes.setdefault(
            name,
            DrainedNode(name, f["state"].strip(), parse_slurm_time(f["since"]), _text(f["reason"])),
        )
    return [nodes[n] for n in sorted(nodes)]


def parse_node_names(text: str) -> frozenset[str]:
    """`sinfo -h -N -a -o %N` → every node Slurm knows (a node once per partition; a line is
    one name, so one with a space or a comma is not sinfo's answer)."""
    names = set()
    for line in text.splitlines():
        name = line.strip()
        if not name:
            continue
        if any(c.isspace() or c == "," for c in name):
            raise SlurmParseError(f"sinfo node row is not one name: {line!r}")
        names.add(name)
    return frozenset(names)


@dataclass(frozen=True, slots=True)
class AccountingRow:
    """One allocation row of `sacct -X -n -P` (a job, an array task, or a pending task range)."""

    job_id: str
    ref: JobRef
    raw_job_id: str
    state: JobState
    state_text: str  # as printed, e.g. "CANCELLED by 0"
    exit: ExitStatus | None
    start: datetime | None
    end: datetime | None
    nodes: str
    user: str
    name: str

    @property
    def array_job_id(self) -> str:
        return str(self.ref.job_id)

    @property
    def task_id(self) -> int | None:
        return self.ref.task_id

    @property
    def is_pending_range(self) -> bool:
        """`123_[5-9]`: tasks that never started; not a row for any single task."""
        return self.ref.grouped


def parse_sacct(text: str) -> list[AccountingRow]:
    """Parse `sacct -X -n -P -o SACCT_FORMAT` output."""
    rows: list[AccountingRow] = []
    for f in _records(text, SACCT_FIELDS, "sacct"):
        job_id = f["JobID"].strip()
        rows.append(
            AccountingRow(
                job_id=job_id,
                ref=parse_job_ref(job_id),
                raw_job_id=f["JobIDRaw"].strip(),
                state=JobState.parse(f["State"]),
                state_text=f["State"].strip(),
                exit=ExitStatus.parse(f["ExitCode"]),
                start=parse_slurm_time(f["Start"]),
                end=parse_slurm_time(f["End"]),
                nodes=_text(f["NodeList"]),
                user=f["User"].strip(),
                name=f["JobName"].strip(),
            )
        )
    return rows


# `Key=Value` pairs of `scontrol show -o`: a key starts after whitespace, so `=` inside a value
# (TRES=cpu=4,mem=1G) stays in the value and a value may contain spaces.
_SCONTROL_KEY_RE = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_/:.]*)=")
# Free-text fields: after one of them, a `word=` that is not a key scontrol prints belongs to the
# value (`Comment=chain=ab12 gen=0` is one comment). Elsewhere any `Key=` starts a field, so a
# key added by a later Slurm version still parses.
_FREE_TEXT_KEYS = frozenset(
    {
        "Comment",
        "AdminComment",
        "SystemComment",
        "Command",
        "WorkDir",
        "StdErr",
        "StdIn",
        "StdOut",
        "JobName",
        "Reason",
        "Features",
        "Container",
        "MailUser",
    }
)
_SCONTROL_JOB_KEYS = frozenset(
    [
        "JobId",
        "ArrayJobId",
        "ArrayTaskId",
        "ArrayTaskThrottle",
        "HetJobId",
        "HetJobIdSet",
        "HetJobOffset",
        "JobName",
        "UserId",
        "GroupId",
        "MCS_label",
        "Priority",
        "Nice",
        "Account",
        "QOS",
        "JobState",
        "Reason",
        "Dependency",
        "Requeue",
        "Restarts",
        "BatchFlag",
        "Reboot",
        "ExitCode",
        "DerivedExitCode",
        "RunTime",
        "TimeLimit",
        "TimeMin",
        "SubmitTime",
        "EligibleTime",
        "AccrueTime",
        "StartTime",
        "EndTime",
        "Deadline",
        "PreemptEligibleTime",
        "PreemptTime",
        "SuspendTime",
        "SecsPreSuspend",
        "LastSchedEval",
        "Scheduler",
        "Partition",
        "AllocNode:Sid",
        "ReqNodeList",
        "ExcNodeList",
        "NodeList",
        "BatchHost",
        "NumNodes",
        "NumCPUs",
        "NumTasks",
        "CPUs/Task",
        "ReqB:S:C:T",
        "TRES",
        "Socks/Node",
        "NtasksPerN:B:S:C",
        "CoreSpec",
        "MinCPUsNode",
        "MinMemoryNode",
        "MinMemoryCPU",
        "MinTmpDiskNode",
        "Features",
        "DelayBoot",
        "OverSubscribe",
        "Contiguous",
        "Licenses",
        "Network",
        "Command",
        "WorkDir",
        "Comment",
        "AdminComment",
        "SystemComment",
        "StdErr",
        "StdIn",
        "StdOut",
        "Power",
        "TresPerNode",
        "TresPerJob",
        "TresPerSocket",
        "TresPerTask",
        "TresBind",
        "TresFreq",
        "CpusPerTres",
        "MemPerTres",
        "MemPerNode",
        "MemPerCPU",
        "Reservation",
        "MailUser",
        "MailType",
        "NtasksPerTRES",
        "Container",
        "ContainerID",
        "Wckey",
        "WCKey",
        "Prolog",
        "Epilog",
        "SpreadJob",
        "Exclusive",
        "CPU_IDs",
        "Mem",
        "GRES",
    ]
)


def parse_scontrol_record(line: str) -> dict[str, str]:
    """Parse one `scontrol show job -o` line into a dict of its fields."""
    line = line.strip()
    candidates = list(_SCONTROL_KEY_RE.finditer(line))
    if not candidates or candidates[0].start() != 0:
        raise SlurmParseError(f"not a scontrol record: {line[:80]!r}")
    keys = [candidates[0]]
    for m in candidates[1:]:
        if keys[-1].group(1) not in _FREE_TEXT_KEYS or m.group(1) in _SCONTROL_JOB_KEYS:
            keys.append(m)
    record: dict[str, str] = {}
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        record[m.group(1)] = line[m.end() : end].strip()
    return record


def parse_scontrol_records(text: str) -> list[dict[str, str]]:
    """One record per non-empty line (an array prints one line per task)."""
    return [parse_scontrol_record(line) for line in text.splitlines() if line.strip()]


_CONFIG_LINE_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)\s*=\s?(.*)$")


def parse_show_config(text: str) -> dict[str, str]:
    """Parse `scontrol show config` (`Key = Value` lines; headers and blank lines skipped)."""
    config: dict[str, str] = {}
    for line in text.splitlines():
        m = _CONFIG_LINE_RE.match(line.strip())
        if m:
            config[m.group(1)] = m.group(2).strip()
    return config


_PARSABLE_RE = re.compile(r"^(\d+)(?:;(\S+))?$")


@dataclass(frozen=True, slots=True)
class Submission:
    """A submitted job: its id, the cluster on a federation, and the comment it carries."""

    job_id: str
    cluster: str | None = None
    comment: str | None = None


def parse_sbatch_parsable(stdout: str) -> Submission:
    """`123` or `123;cluster` (the last non-empty line; sbatch may print warnings before it)."""
    lines = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
    if not lines:
        raise SlurmParseError("sbatch printed no job id")
    m = _PARSABLE_RE.match(lines[-1])
    if m is None:
        raise SlurmParseError(f"sbatch printed no job id: {lines[-1]!r}")
    return Submission(m.group(1), m.group(2))


# sbatch --test-only's answer: "Job 94 to start at 1796655681 using 4 processors on nodes n1 in
# partition main" (the time in epoch seconds: the adapter sets SLURM_TIME_FORMAT=%s).
_TEST_ONLY_RE = re.compile(
    r"Job \d+ to start at (\S+)(?: using (\d+) processors)?(?: on nodes (\S+))?"
    r"(?: in partition (\S+))?"
)


@dataclass(frozen=True, slots=True)
class TestOnlyAnswer:
    """When and where Slurm would start a job (`sbatch --test-only`). Its job id is left out:
    no such job exists, and an id that looks real would be looked up."""

    __test__ = False  # not a pytest class, whatever its name

    start: datetime | None
    processors: int | None = None
    nodes: str | None = None
    partition: str | None = None
    text: str = ""  # sbatch's line as printed, for an answer of another form

    def describe(self) -> str:
        """`would start at 2026-12-07 20:54:22 UTC on n1 (partition main, 4 processors)`."""
        if self.start is None:
            return self.text or "feasible"
        where = f" on {self.nodes}" if self.nodes else ""
        extra = [f"partition {self.partition}"] if self.partition else []
        if self.processors is not None:
            extra.append(f"{self.processors} processors")
        tail = f" ({', '.join(extra)})" if extra else ""
        return f"would start at {self.start:%Y-%m-%d %H:%M:%S} UTC{where}{tail}"


def parse_test_only(text: str) -> TestOnlyAnswer:
    """sbatch --test-only's stdout+stderr: its last non-empty line, parsed when it has the
    usual form (any other line is kept as text)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    last = lines[-1].removeprefix("sbatch: ") if lines else ""
    m = _TEST_ONLY_RE.match(last)
    try:
        start = parse_slurm_time(m.group(1)) if m else None
    except SlurmParseError:
        start = None
    if m is None or start is None:
        return TestOnlyAnswer(None, text=_text(last))
    processors = int(m.group(2)) if m.group(2) else None
    return TestOnlyAnswer(start.astimezone(UTC), processors, m.group(3), m.group(4), _text(last))
