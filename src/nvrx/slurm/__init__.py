"""The Slurm adapter: the only place in nvrx that runs Slurm commands or parses their output.

Each name is imported from its module on first use: `nvrx.slurm.parse` alone does not load the
adapter that runs commands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nvrx import lazy_names

if TYPE_CHECKING:
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
    from nvrx.slurm.parse import (
        AccountingRow,
        DrainedNode,
        PartitionNodes,
        QueueRow,
        Submission,
        TestOnlyAnswer,
    )
    from nvrx.slurm.states import ExitStatus, JobState

# Where each name lives: imported on first use, so that importing one module of the package
# loads that module only (a pure module never drags in the ones that run commands or read
# files through this package).
_WHERE = {
    "AccountingDisabled": "nvrx.slurm.errors",
    "AccountingRow": "nvrx.slurm.parse",
    "DrainedNode": "nvrx.slurm.parse",
    "ErrorKind": "nvrx.slurm.errors",
    "ExitStatus": "nvrx.slurm.states",
    "JobForgotten": "nvrx.slurm.errors",
    "JobInfo": "nvrx.slurm.client",
    "JobRef": "nvrx.slurm.ids",
    "JobState": "nvrx.slurm.states",
    "PartitionNodes": "nvrx.slurm.parse",
    "QueueRow": "nvrx.slurm.parse",
    "Slurm": "nvrx.slurm.client",
    "SlurmError": "nvrx.slurm.errors",
    "SlurmParseError": "nvrx.slurm.errors",
    "SlurmPolicyError": "nvrx.slurm.errors",
    "SlurmUnavailable": "nvrx.slurm.errors",
    "SlurmValueError": "nvrx.slurm.errors",
    "Submission": "nvrx.slurm.parse",
    "TestOnlyAnswer": "nvrx.slurm.parse",
    "SubmitOptions": "nvrx.slurm.options",
    "TaskIndices": "nvrx.slurm.ids",
    "compress": "nvrx.slurm.hostlist",
    "expand": "nvrx.slurm.hostlist",
    "parse_job_ref": "nvrx.slurm.ids",
    "parse_task_indices": "nvrx.slurm.ids",
}

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
    "TestOnlyAnswer",
    "compress",
    "expand",
    "parse_job_ref",
    "parse_task_indices",
]

__getattr__ = lazy_names(__name__, _WHERE)
