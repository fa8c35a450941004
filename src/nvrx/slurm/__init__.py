"""The Slurm adapter: the only place in nvrx that runs Slurm commands or parses their output."""

from nvrx.slurm.client import JobInfo, Slurm
from nvrx.slurm.errors import (
    AccountingDisabled,
    ErrorKind,
    JobForgotten,
    SlurmError,
    SlurmParseError,
    SlurmPolicyError,
    SlurmUnavailable,
    SlurmValueError,
)
from nvrx.slurm.hostlist import compress, expand
from nvrx.slurm.ids import JobRef, TaskIndices, parse_job_ref, parse_task_indices
from nvrx.slurm.options import SubmitOptions
from nvrx.slurm.parse import AccountingRow, DrainedNode, PartitionNodes, QueueRow, Submission
from nvrx.slurm.states import ExitStatus, JobState

__all__ = [
    "AccountingDisabled",
    "AccountingRow",
    "DrainedNode",
    "ErrorKind",
    "ExitStatus",
    "JobForgotten",
    "JobInfo",
    "JobRef",
    "JobState",
    "PartitionNodes",
    "QueueRow",
    "Slurm",
    "SlurmError",
    "SlurmParseError",
    "SlurmPolicyError",
    "SlurmUnavailable",
    "SlurmValueError",
    "Submission",
    "SubmitOptions",
    "TaskIndices",
    "compress",
    "expand",
    "parse_job_ref",
    "parse_task_indices",
]
