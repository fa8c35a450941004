"""Typed Slurm failures, and the classification of a failed command by its stderr.

A failed command is never turned into an empty answer: callers get one of these exceptions and
decide (unknown is a state, never a guess).
"""

from __future__ import annotations

import enum
import re
import shlex
from collections.abc import Sequence


class ErrorKind(enum.Enum):
    """What a failed Slurm command means for the caller."""

    TRANSIENT = "transient"  # controller busy or unreachable: retry with backoff
    POLICY = "policy"  # limits, bad account/partition: stop and report, never hammer
    FORGOTTEN = "forgotten"  # the controller no longer knows the job id: ask sacct
    ACCOUNTING_DISABLED = "accounting-disabled"  # no sacct on this cluster: degrade explicitly
    PERMANENT = "permanent"  # anything else: a bug, bad arguments, permissions


# Substrings, matched case-insensitively against stderr (and stdout). Order matters: a more
# specific class is checked first ("slurm_load_jobs error: Invalid job id specified" is
# FORGOTTEN, not TRANSIENT).
_FORGOTTEN = ("invalid job id specified",)
_ACCOUNTING_DISABLED = (
    "slurm accounting storage is disabled",
    "accounting storage is disabled",
)
_POLICY = (
    "assocmaxsubmitjoblimit",
    "qosmaxsubmitjobperuserlimit",
    "job violates accounting/qos policy",
    "invalid account or account/partition combination",
    "invalid partition name specified",
    "invalid qos specification",
    "user's group not permitted to use this partition",
    "access/permission denied",
    "requested node configuration is not available",
    "requested time limit is invalid",
    "maxarraysize",
    "invalid job array specification",
    "batch job submission failed: invalid account",
)
_TRANSIENT = (
    "socket timed out",
    "unable to contact slurm controller",
    "slurm_load_jobs error",
    "resource temporarily unavailable",
    "zero bytes were transmitted or received",
    "slurm temporarily unable to accept job",
    "slurmctld is busy",
    "controller is busy",
    "transaction timed out",
    "connection refused",
    "unable to connect to database",
    "slurmdbd: connection refused",
    "problem talking to the database",
    "connection to slurmdbd",
)


_JOB_NOT_FOUND = re.compile(r"\bjob \S+ not found")  # scontrol show job 123_4


def classify(text: str) -> ErrorKind:
    """Classify a failed command's stderr (plus stdout) into an ErrorKind."""
    low = text.lower()
    if _JOB_NOT_FOUND.search(low):
        return ErrorKind.FORGOTTEN
    for kind, needles in (
        (ErrorKind.FORGOTTEN, _FORGOTTEN),
        (ErrorKind.ACCOUNTING_DISABLED, _ACCOUNTING_DISABLED),
        (ErrorKind.POLICY, _POLICY),
        (ErrorKind.TRANSIENT, _TRANSIENT),
    ):
        if any(n in low for n in needles):
            return kind
    return ErrorKind.PERMANENT


class SlurmError(Exception):
    """A Slurm command failed. Carries the argv, exit code and stderr."""

    exit_code = 1  # a failure: Slurm did not answer or refused

    kind: ErrorKind = ErrorKind.PERMANENT

    def __init__(
        self,
        message: str,
        *,
        argv: Sequence[str] = (),
        returncode: int | None = None,
        stderr: str = "",
        ran: bool = True,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr = stderr
        self.ran = ran  # False: not found, not executable, refused by exec (no exit code)

    @property
    def command(self) -> str:
        """The command as an operator would type it (for messages; never executed)."""
        return shlex.join(self.argv)

    def __str__(self) -> str:
        detail = self.stderr.strip().splitlines()
        last = detail[-1] if detail else ""
        if not self.ran:
            return f"{self.message} [{self.command}]"
        rc = "timeout" if self.returncode is None else f"rc={self.returncode}"
        text = f"{self.message} [{self.command}: {rc}]"
        return f"{text}: {last}" if last and last not in self.message else text


class SlurmUnavailable(SlurmError):
    """Transient failures did not clear before the retry deadline. State is unknown."""

    kind = ErrorKind.TRANSIENT


class SlurmPolicyError(SlurmError):
    """Slurm refused on policy (limits, account, partition); retrying will not help."""

    kind = ErrorKind.POLICY


class JobForgotten(SlurmError):
    """The controller does not know this job id (any more); accounting may still know it."""

    kind = ErrorKind.FORGOTTEN


class AccountingDisabled(SlurmError):
    """The cluster has no accounting storage: sacct cannot answer."""

    kind = ErrorKind.ACCOUNTING_DISABLED


class SlurmParseError(ValueError):
    """Text that should be Slurm output (or a Slurm expression) could not be parsed."""


class SlurmValueError(ValueError):
    """A value that would end up in a Slurm flag is unsafe or malformed."""

    exit_code = 2  # bad input


def error_for(kind: ErrorKind) -> type[SlurmError]:
    """The exception class that reports a failure of this kind."""
    for cls in (SlurmUnavailable, SlurmPolicyError, JobForgotten, AccountingDisabled):
        if cls.kind is kind:
            return cls
    return SlurmError
