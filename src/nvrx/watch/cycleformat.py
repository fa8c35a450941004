"""The NVRx cycle-info format, parsed: one file's text into a `CycleInfo` (the format:
docs/file-contracts.md, "Cycle-info files"). Pure functions of text.

Strict about what NVRx writes (protobuf JSON, every field printed): a misread cycle file turns
into a false page, so a text that is not a complete record is a `CycleParseError` with a short
reason, never a guess.
"""

from __future__ import annotations

import dataclasses
import json
import operator
import re
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from nvrx.slurm.errors import SlurmParseError
from nvrx.slurm.hostlist import expand
from nvrx.watch.model import CycleInfo, from_us, to_us

# ISO-8601 UTC as NVRx writes it (`%Y-%m-%dT%H:%M:%S.%fZ`); fraction optional, `+00:00` accepted.
_TIME_RE = re.compile(
    r"^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})"
    r"(?:\.([0-9]{1,9}))?(Z|\+00:00)\Z"
)
_UINT_RE = re.compile(r"^[0-9]{1,20}$")

# Every field of NVRxCycleInfo, in proto order. Protobuf JSON with all fields printed means a
# real file has every one of them; a missing one means "not NVRx" or "not finished writing".
REQUIRED_KEYS = (
    "job_id",
    "attempt_index",
    "cycle_number",
    "cycle_start_time",
    "cycle_end_time",
    "cycle_log_file",
    "active_nodes",
    "standby_nodes",
    "generation",
    "active_ranks",
)

# Skip reasons that every healthy chain produces on every pass (the `.current` pointer and the


class CycleParseError(ValueError):
    """A cycle-info text is not a complete, well-formed NVRx cycle-info record.

    The message is a short reason meant for a `SkippedFile`, without the path.
    """


def _uint(value: Any, key: str) -> int:
    """A non-negative integer: a JSON number, or a numeric string (protobuf renders 64-bit
    integers as strings, and some writers quote 32-bit ones too)."""
    if type(value) is int and value >= 0:  # what NVRx writes: the one check on the hot path
        return value
    if isinstance(value, bool):
        raise CycleParseError(f"{key}: expected a number, got a boolean")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and _UINT_RE.match(value.strip()):
        number = int(value.strip())
    else:
        raise CycleParseError(f"{key}: expected a non-negative integer, got {_show(value)}")
    if number < 0:
        raise CycleParseError(f"{key}: negative ({number})")
    return number


def _string(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise CycleParseError(f"{key}: expected a string, got {_show(value)}")
    return value


def _show(value: Any) -> str:
    """A value for an error message: short, whatever junk it is."""
    text = "null" if value is None else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def parse_utc(text: str, key: str = "time") -> datetime:
    """`2025-02-05T14:30:00.123456Z` (or without the fraction, or with `+00:00`) → aware UTC.

    Stricter than `datetime.fromisoformat` on purpose: a zone-less or non-UTC time is not what
    NVRx writes, and silently reading it as local time would shift every detector window.
    """
    if _TIME_RE.match(text) is None:
        raise CycleParseError(f"{key}: not an ISO-8601 UTC time: {_show(text)}")
    # The shape is checked above; fromisoformat (C) does the arithmetic. A fraction past 6
    # digits is cut to 6.
    try:
        return datetime.fromisoformat(text)
    except ValueError as exc:
        raise CycleParseError(f"{key}: invalid date/time {_show(text)}: {exc}") from None


# Expanded hostlists, memoised: thousands of cycle files share a handful of hostlists. The memo
# holds at most _MEMO_NAMES names in all (it starts again past that), whatever the files say.
_MEMO_NAMES = 1 << 20
_memo: dict[str, tuple[str, ...]] = {}
_memo_names = 0


def _hosts(expr: str) -> tuple[str, ...]:
    global _memo_names
    found = _memo.get(expr)
    if found is not None:
        return found
    # Interned: cycles on overlapping node sets share one string per node, not one per cycle.
    hosts = tuple(map(sys.intern, expand(expr)))
    if _memo_names + len(hosts) > _MEMO_NAMES:
        _memo.clear()
        _memo_names = 0
    _memo[expr] = hosts
    _memo_names += len(hosts)
    return hosts


def _hostlist(value: Any, key: str) -> tuple[str, ...]:
    expr = _string(value, key)
    try:
        return _hosts(expr)
    except SlurmParseError as exc:
        raise CycleParseError(f"{key}: bad hostlist: {exc}") from None


_RAW_DECODE = json.JSONDecoder().raw_decode


def _json_object(text: str) -> dict[str, Any]:
    """The JSON object in `text`, telling "caught mid-write" apart from "not JSON at all"."""
    stripped = text.strip()
    if not stripped:
        raise CycleParseError("empty (being written?)")
    try:
        # json.loads without its two whitespace scans (the text is stripped already): what it
        # accepts and refuses is the same, and a first pass does this once per file.
        data, end = _RAW_DECODE(stripped)
        if end != len(stripped):  # as json.loads says it: where the extra data starts
            extra = len(stripped) - len(stripped[end:].lstrip(" \t\n\r"))
            raise json.JSONDecodeError("Extra data", stripped, extra)
    except json.JSONDecodeError as exc:
        # "Unterminated string" is only raised at end of input; any other error at the very
        # end of the text means the text is a prefix of something longer.
        if exc.msg.startswith("Unterminated string") or exc.pos >= len(stripped):
            raise CycleParseError("incomplete JSON (truncated or being rewritten?)") from None
        raise CycleParseError(
            f"invalid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})"
        ) from None
    except (ValueError, RecursionError) as exc:  # absurd integers, absurd nesting
        raise CycleParseError(f"invalid JSON: {type(exc).__name__}") from None
    if not isinstance(data, dict):
        raise CycleParseError(f"not a JSON object (a {type(data).__name__})")
    return data


_FIELDS_OF = operator.itemgetter(*REQUIRED_KEYS)


def _digits(value: Any) -> bool:
    """A string of ASCII digits, as protobuf writes a 64-bit integer (at most 20 of them)."""
    return type(value) is str and 0 < len(value) <= 20 and value.isascii() and value.isdigit()


def parse_record(text: str, path: str) -> tuple[CycleInfo, list[Any]]:
    """The record, plus the normalised fields the cache stores (`CACHE_FIELDS`; hostlists are
    kept compressed: expanded, one chain's cache would grow with nodes x cycles).

    Runs once per file a first pass reads (100,000 of them for a long chain): what NVRx writes
    is checked in one expression, and anything else goes through the checks that name what is
    wrong; both accept and refuse exactly the same records."""
    data = _json_object(text)
    try:
        (raw_job, raw_attempt, raw_cycle, start_text, end_text, log_file, active_expr,
         standby_expr, raw_count, ranks) = _FIELDS_OF(data)  # fmt: skip
    except KeyError:
        missing = [k for k in REQUIRED_KEYS if k not in data]
        names = ", ".join(repr(k) for k in missing)
        raise CycleParseError(f"missing key{'s' if len(missing) > 1 else ''} {names}") from None
    if (
        type(raw_job) is str
        and type(raw_attempt) is int
        and raw_attempt >= 0
        and type(raw_cycle) is int
        and raw_cycle >= 0
        and type(start_text) is str
        and type(end_text) is str
        and type(log_file) is str
        and type(active_expr) is str
        and type(standby_expr) is str
        and type(ranks) is str
        and ((type(raw_count) is int and raw_count >= 0) or _digits(raw_count))
    ):  # NVRx's own shape: every check below would pass
        job_id, attempt, cycle = raw_job.strip(), raw_attempt, raw_cycle
        write_count = int(raw_count)
    else:
        if isinstance(raw_job, int) and not isinstance(raw_job, bool) and raw_job >= 0:
            job_id = str(raw_job)
        else:
            job_id = _string(raw_job, "job_id").strip()
        attempt = _uint(raw_attempt, "attempt_index")
        cycle = _uint(raw_cycle, "cycle_number")
        _string(start_text, "cycle_start_time")
        _string(end_text, "cycle_end_time")
        _string(log_file, "cycle_log_file")
        _string(active_expr, "active_nodes")
        _string(standby_expr, "standby_nodes")
        write_count = _uint(raw_count, "generation")
        _string(ranks, "active_ranks")
    if not job_id:
        raise CycleParseError("job_id: empty")
    if not start_text:
        raise CycleParseError("cycle_start_time: empty")
    start = parse_utc(start_text, "cycle_start_time")
    # "" = open: still running, or its writer died (SIGKILL, node loss) before closing it.
    end = parse_utc(end_text, "cycle_end_time") if end_text else None
    if end is not None and end < start:
        # Its duration would be negative: storms and stall windows cannot reason about it.
        raise CycleParseError(f"cycle_end_time {end_text} is before cycle_start_time {start_text}")
    active = _hostlist(active_expr, "active_nodes")
    standby = _hostlist(standby_expr, "standby_nodes")
    start_us = to_us(start)  # exact: what `info_from_fields` turns back into the same datetime
    end_us = None if end is None else to_us(end)
    info = _record(
        job_id, attempt, cycle, start, end, log_file, active, standby, ranks, write_count, path
    )
    fields = [job_id, attempt, cycle, start_us, end_us, log_file, active_expr, standby_expr,
              ranks, write_count]  # fmt: skip
    return info, fields


def parse_cycle_info(text: str, path: str) -> CycleInfo:
    """Parse one cycle-info file's text (pure; `path` is only recorded in the result).

    Every NVRxCycleInfo key must be present (a missing one is named in the error); unknown extra
    keys are ignored so a newer NVRx with more fields still reads. `generation` (the rewrite
    counter, `CycleInfo.write_count`) may be a string or a number; an empty `cycle_end_time`
    means open. A start time in the future is *not* an error: clock skew between the writer and
    this host is a detector's concern, not a parse failure.

    Raises CycleParseError with a short reason.
    """
    return parse_record(text, path)[0]


_NEW = object.__new__
# The slots of a record, set directly: a frozen dataclass's __init__ goes through
# object.__setattr__ once per field, which is most of the cost of rebuilding a record from the
# cache, and `info_from_fields` runs once per cycle of every generation a pass asks for.
(
    _SET_JOB, _SET_ATTEMPT, _SET_CYCLE, _SET_START, _SET_END, _SET_LOG, _SET_ACTIVE,
    _SET_STANDBY, _SET_RANKS, _SET_COUNT, _SET_PATH,
) = (getattr(CycleInfo, f.name).__set__ for f in dataclasses.fields(CycleInfo))  # fmt: skip
_EPOCH = from_us(0)


def _record(
    job: str,
    attempt: int,
    cycle: int,
    start: datetime,
    end: datetime | None,
    log_file: str,
    active: tuple[str, ...],
    standby: tuple[str, ...],
    ranks: str,
    count: int,
    path: str,
) -> CycleInfo:
    """A record with its slots set directly (its fields in CycleInfo's order)."""
    info = _NEW(CycleInfo)
    _SET_JOB(info, job)
    _SET_ATTEMPT(info, attempt)
    _SET_CYCLE(info, cycle)
    _SET_START(info, start)
    _SET_END(info, end)
    _SET_LOG(info, log_file)
    _SET_ACTIVE(info, active)
    _SET_STANDBY(info, standby)
    _SET_RANKS(info, ranks)
    _SET_COUNT(info, count)
    _SET_PATH(info, path)
    return info


def info_from_fields(fields: Sequence[Any], path: str) -> CycleInfo:
    """Rebuild a record from a cache entry's fields (`cyclecache.CACHE_FIELDS`); the same
    record `CycleInfo(...)` makes. Raises TypeError or ValueError on junk, which the cache
    treats as a miss."""
    job, attempt, cycle, start_us, end_us, log_file, active, standby, ranks, count = fields
    if not (
        type(job) is str
        and type(attempt) is int
        and type(cycle) is int
        and type(start_us) is int
        and (end_us is None or type(end_us) is int)
        and type(log_file) is str
        and type(active) is str
        and type(standby) is str
        and type(ranks) is str
        and type(count) is int
    ):
        raise TypeError("cache entry has wrong field types")
    return _record(
        job,
        attempt,
        cycle,
        _EPOCH + timedelta(0, 0, start_us),
        None if end_us is None else _EPOCH + timedelta(0, 0, end_us),
        log_file,
        _hosts(active),
        _hosts(standby),
        ranks,
        count,
        path,
    )
