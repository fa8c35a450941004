"""Job ids and array task ids as Slurm prints them, as pure functions.

Forms: `123` (a job), `123_4` (one array task), `123_[5-9%2]` (sacct's row for still-pending
tasks), and the index specs of `--array` / squeue `%K` (`0-4%2`, `1,3,5-7`, `0-15:4`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nvrx.slurm.errors import SlurmParseError, SlurmValueError

_JOB_REF_RE = re.compile(r"^(\d+)(?:_(\d+|\[[^\]]*\]))?(?:\+\d+)?$")
_SPEC_ITEM_RE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")
# Slurm's own cap is MaxArraySize (at most 4000001); refuse specs that would expand beyond it.
_MAX_INDICES = 4_000_001


@dataclass(frozen=True, slots=True)
class TaskIndices:
    """The indices of an array spec and its `%` throttle (None when unthrottled)."""

    indices: tuple[int, ...]
    throttle: int | None = None


def parse_task_indices(spec: str) -> TaskIndices:
    """Parse an array index spec: `4`, `0-4%2`, `1,3,5-7`, `0-15:4`.

    Raises SlurmParseError naming the spec when it is malformed.
    """
    text = spec.strip()
    body, sep, throttle_s = text.partition("%")
    throttle: int | None = None
    if sep:
        if not throttle_s.isdigit() or int(throttle_s) < 1:
            raise SlurmParseError(f"bad array throttle in {spec!r}")
        throttle = int(throttle_s)
    if not body:
        raise SlurmParseError(f"empty array index spec {spec!r}")
    indices: list[int] = []
    for item in body.split(","):
        m = _SPEC_ITEM_RE.match(item.strip())
        if m is None:
            raise SlurmParseError(f"bad array index {item!r} in {spec!r}")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        step = int(m.group(3)) if m.group(3) is not None else 1
        if hi < lo or step < 1:
            raise SlurmParseError(f"bad array range {item!r} in {spec!r}")
        if len(indices) + (hi - lo) // step + 1 > _MAX_INDICES:
            raise SlurmParseError(f"array spec {spec!r} is too large")
        indices.extend(range(lo, hi + 1, step))
    return TaskIndices(tuple(sorted(set(indices))), throttle)


@dataclass(frozen=True, slots=True)
class JobRef:
    """A job reference: a plain job, one array task, or a group of (pending) array tasks."""

    job_id: int
    task_ids: tuple[int, ...] | None = None
    throttle: int | None = None
    grouped: bool = False  # `123_[5-9]`: a sacct/squeue row standing for several pending tasks

    @property
    def is_array_task(self) -> bool:
        return self.task_ids is not None and not self.grouped

    @property
    def task_id(self) -> int | None:
        """The single task index, or None for a plain job or a grouped row."""
        if self.task_ids is None or self.grouped:
            return None
        return self.task_ids[0]


def parse_job_ref(text: str) -> JobRef:
    """Parse `123`, `123_4` or `123_[5-9%2]` (a trailing `+N` het-job offset is ignored).

    >>> parse_job_ref("123_[5-9%2]")
    JobRef(job_id=123, task_ids=(5, 6, 7, 8, 9), throttle=2, grouped=True)
    """
    m = _JOB_REF_RE.match(text.strip())
    if m is None:
        raise SlurmParseError(f"bad job id {text!r}")
    job_id = int(m.group(1))
    tail = m.group(2)
    if tail is None:
        return JobRef(job_id)
    if tail.startswith("["):
        spec = parse_task_indices(tail[1:-1])
        return JobRef(job_id, spec.indices, spec.throttle, grouped=True)
    return JobRef(job_id, (int(tail),))


_SAFE_JOB_ID_RE = re.compile(r"^\d+(_\d+)?$")


def check_job_id(value: str | int) -> str:
    """Validate a job id that goes onto a command line: `123` or `123_4`. Returns it as text."""
    text = str(value).strip()
    if not _SAFE_JOB_ID_RE.match(text):
        raise SlurmValueError(f"invalid job id {value!r}: expected digits, optionally _TASK")
    return text


def format_array_spec(first: int, last: int, throttle: int | None = None) -> str:
    """`--array` value for a contiguous range: (0, 4, 2) → `0-4%2`."""
    if first < 0 or last < first:
        raise SlurmValueError(f"invalid array range {first}-{last}")
    if throttle is not None and throttle < 1:
        raise SlurmValueError(f"invalid array throttle {throttle}")
    body = str(first) if first == last else f"{first}-{last}"
    return body if throttle is None else f"{body}%{throttle}"
