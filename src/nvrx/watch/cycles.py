"""Reading NVRx cycle-info files into `CycleInfo` records (the format: docs/file-contracts.md,
"Cycle-info files").

The watcher runs from cron on every login node, against directories that the training job keeps
rewriting on a shared filesystem. So this module:

* is strict about the format NVRx writes (protobuf JSON, every field printed) and says *why* a
  file was not used instead of guessing: a misread cycle file turns into a false page;
* never raises for what it finds on disk: a file caught mid-rewrite, a symlink, a huge file, a
  missing or looping directory each become a `SkippedFile` with a short reason (the caller logs);
* never follows symlinks to files and never reads more than `MAX_CYCLE_FILE_BYTES` of a file;
* keeps an optional on-disk `CycleCache`, so a pass over 10,000 unchanged files costs one
  `lstat` per file instead of a read and a JSON parse (upstream re-read and re-parsed every
  file on every pass).

Nothing here writes into job directories: the only file ever written is the cache, which lives
in the watcher's own state directory.

One module because the parser, the cache and the directory reader share the skip reasons and
the record fields the cache stores; they are to become three (DESIGN.md, "Modules").
"""

from __future__ import annotations

import errno
import fnmatch
import functools
import glob
import json
import operator
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nvrx.files import InputError, InputTooLarge, read_bounded, write_atomic
from nvrx.slurm.errors import SlurmParseError
from nvrx.slurm.hostlist import expand
from nvrx.watch.model import CycleInfo, SkippedFile

# Real cycle-info files are < 1 KB. Anything bigger than this is not one, and must not be read
# into memory (a stray 50 GB file in the directory must not take the login node down).
MAX_CYCLE_FILE_BYTES = 1 << 20

# What a plain directory in `patterns` means (the glob NVRx's own readers use).
DEFAULT_NAME_GLOB = "cycle_info.*"

# `cycle_info.<job_id>.<attempt_index>.<cycle_number>`; job id = digits, or `<array>_<task>`.
_NAME_RE = re.compile(r"^cycle_info\.([0-9]+(?:_[0-9]+)?)\.([0-9]+)\.([0-9]+)$")
_MAGIC_RE = re.compile(r"[*?\[]")
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
# writer's in-flight tmp files): a caller may log these at debug level instead of warning.
REASON_CURRENT = "current-cycle pointer (.current), not a cycle file"
REASON_TMP = "in-flight temporary file (.tmp)"
REASON_SYMLINK = "symlink (not followed)"
REASON_BAD_NAME = "name is not cycle_info.<job>.<attempt>.<cycle>"
ROUTINE_SKIP_REASONS = frozenset({REASON_CURRENT, REASON_TMP})
# Entries that are not cycle files at all: skipping them says nothing about the cycle files.
# A symlink named like a cycle file is not one of them: a directory of nothing but such links is
# a directory whose cycle files cannot be read (they are never followed).
NOT_CYCLE_FILE_REASONS = ROUTINE_SKIP_REASONS | {REASON_BAD_NAME}


class CycleParseError(ValueError):
    """A cycle-info text is not a complete, well-formed NVRx cycle-info record.

    The message is a short reason meant for a `SkippedFile`, without the path.
    """


@dataclass(slots=True)
class ReadStats:
    """What one `read_cycles` call did, for logs and for the bench.

    Invariant: `seen == parsed + cached + skipped`; the cycles returned number
    `parsed + cached - duplicates`. Pattern- and directory-level problems (a missing directory,
    a pattern that matched nothing) are reported as `SkippedFile`s but not counted here.
    """

    seen: int = 0  # directory entries whose name matched a pattern
    parsed: int = 0  # read and parsed during this pass
    cached: int = 0  # served from the cache: stat only, no read, no parse
    skipped: int = 0  # entries not turned into a CycleInfo (see the SkippedFile reasons)
    unreadable: int = 0  # of those, cycle files that could not be read or parsed
    duplicates: int = 0  # parsed or cached, then dropped: another file has the same key
    cache_written: bool = False
    cache_error: str | None = None  # the cache could not be loaded or saved (harmless)


# ----------------------------------------------------------------------------- parsing


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
    # The shape is checked above; fromisoformat (C) does the arithmetic, and it reads what
    # `_info_from_fields` reads back from the cache. A fraction past 6 digits is cut to 6.
    try:
        return datetime.fromisoformat(text)
    except ValueError as exc:
        raise CycleParseError(f"{key}: invalid date/time {_show(text)}: {exc}") from None


@functools.lru_cache(maxsize=1024)
def _hosts(expr: str) -> tuple[str, ...]:
    """Expanded hostlist, memoised: thousands of cycle files share a handful of hostlists."""
    return tuple(expand(expr))


def _hostlist(value: Any, key: str) -> tuple[str, ...]:
    expr = _string(value, key)
    try:
        return _hosts(expr)
    except SlurmParseError as exc:
        raise CycleParseError(f"{key}: bad hostlist: {exc}") from None


def _json_object(text: str) -> dict[str, Any]:
    """The JSON object in `text`, telling "caught mid-write" apart from "not JSON at all"."""
    stripped = text.strip()
    if not stripped:
        raise CycleParseError("empty (being written?)")
    try:
        data = json.loads(stripped)
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


def _parse(text: str, path: str) -> tuple[CycleInfo, list[Any]]:
    """The record, plus the normalised fields the cache stores (`CACHE_FIELDS`; hostlists are
    kept compressed: expanded, one chain's cache would grow with nodes x cycles)."""
    data = _json_object(text)
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        names = ", ".join(repr(k) for k in missing)
        raise CycleParseError(f"missing key{'s' if len(missing) > 1 else ''} {names}")

    raw_job = data["job_id"]
    if isinstance(raw_job, int) and not isinstance(raw_job, bool) and raw_job >= 0:
        job_id = str(raw_job)
    else:
        job_id = _string(raw_job, "job_id").strip()
    if not job_id:
        raise CycleParseError("job_id: empty")
    attempt = _uint(data["attempt_index"], "attempt_index")
    cycle = _uint(data["cycle_number"], "cycle_number")
    start_text = _string(data["cycle_start_time"], "cycle_start_time")
    if not start_text:
        raise CycleParseError("cycle_start_time: empty")
    start = parse_utc(start_text, "cycle_start_time")
    end_text = _string(data["cycle_end_time"], "cycle_end_time")
    # "" = open: still running, or its writer died (SIGKILL, node loss) before closing it.
    end = parse_utc(end_text, "cycle_end_time") if end_text else None
    if end is not None and end < start:
        # Its duration would be negative: storms and stall windows cannot reason about it.
        raise CycleParseError(f"cycle_end_time {end_text} is before cycle_start_time {start_text}")
    log_file = _string(data["cycle_log_file"], "cycle_log_file")
    active_expr = _string(data["active_nodes"], "active_nodes")
    standby_expr = _string(data["standby_nodes"], "standby_nodes")
    active = _hostlist(active_expr, "active_nodes")
    standby = _hostlist(standby_expr, "standby_nodes")
    write_count = _uint(data["generation"], "generation")
    ranks = _string(data["active_ranks"], "active_ranks")

    info = CycleInfo(
        job_id=job_id,
        attempt_index=attempt,
        cycle_number=cycle,
        start=start,
        end=end,
        log_file=log_file,
        active_nodes=active,
        standby_nodes=standby,
        active_ranks=ranks,
        write_count=write_count,
        path=path,
    )
    fields = [
        job_id,
        attempt,
        cycle,
        start_text,  # as written: checked above, and what fromisoformat reads back
        end_text or None,
        log_file,
        active_expr,
        standby_expr,
        ranks,
        write_count,
    ]
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
    return _parse(text, path)[0]


def _info_from_fields(fields: Sequence[Any], path: str) -> CycleInfo:
    """Rebuild a record from a cache entry's fields (see CycleCache). Raises TypeError or
    ValueError on junk, which the cache treats as a miss. Kept lean: it runs once per file on
    every warm pass."""
    job, attempt, cycle, start_s, end_s, log_file, active, standby, ranks, count = fields
    if not (
        type(job) is str
        and type(attempt) is int
        and type(cycle) is int
        and type(start_s) is str
        and (end_s is None or type(end_s) is str)
        and type(log_file) is str
        and type(active) is str
        and type(standby) is str
        and type(ranks) is str
        and type(count) is int
    ):
        raise TypeError("cache entry has wrong field types")
    start = datetime.fromisoformat(start_s)
    end = datetime.fromisoformat(end_s) if end_s is not None else None
    if start.tzinfo is None or (end is not None and end.tzinfo is None):
        raise ValueError("naive time in cache entry")
    return CycleInfo(
        job, attempt, cycle, start, end, log_file, _hosts(active), _hosts(standby), ranks, count,
        path,
    )  # fmt: skip


# ----------------------------------------------------------------------------- cache


CACHE_SCHEMA = "nvrx.watch.cycles-cache/2"
# An unchanged directory is listed again at least this often, whatever its mtime says.
LISTING_TTL_NS = 3600 * 1_000_000_000
# One cache entry: `[st_mtime_ns, st_size, st_ino, *CACHE_FIELDS]`, a flat JSON list (a dict
# per entry would double the cache's parse time, which is most of a warm pass).
CACHE_FIELDS = (
    "job_id",
    "attempt_index",
    "cycle_number",
    "start",  # as written (a checked ISO-8601 UTC time)
    "end",  # as written, or null while open
    "log_file",
    "active_nodes",  # hostlist as written (compressed)
    "standby_nodes",
    "active_ranks",
    "write_count",  # the file's `generation` field
)
_ENTRY_LEN = 3 + len(CACHE_FIELDS)
_CACHE_MAX_BYTES = 256 << 20  # ~350 bytes per entry: far more than any chain ever writes


class CycleCache:
    """path → (st_mtime_ns, st_size, st_ino, parsed fields), persisted as one JSON file:
    `{"schema": CACHE_SCHEMA, "entries": {path: [mtime_ns, size, ino, *CACHE_FIELDS]}}`.

    Why: cycle files are written once at cycle start and replaced once at cycle end (tmp file +
    atomic rename, so a rewrite always changes the inode), then never again. Re-reading and
    re-parsing thousands of them every five minutes on a shared filesystem is pure waste; an
    unchanged (mtime, size, inode) triple is enough to reuse the previous parse.

    Losing or corrupting the cache is harmless (the next pass reads everything again), so a bad
    cache file starts empty instead of failing the pass (`load_error` says why), and a bad entry
    is a miss. In `read_only` mode (e.g. `--dry-run`) nothing is ever written. Only successfully
    parsed files are cached: a file skipped for a (maybe transient) reason is retried next pass.

    A file modified less than `racy_seconds` ago is read but not cached: on filesystems with
    coarse timestamps a same-size in-place rewrite within the same tick would otherwise be
    missed (git's "racy clean" problem).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        read_only: bool = False,
        racy_seconds: float = 2.0,
    ) -> None:
        self.path = os.fspath(path)
        self.read_only = read_only
        self.racy_ns = int(racy_seconds * 1_000_000_000)
        self.load_error: str | None = None
        self._entries: dict[str, list[Any]] = {}
        # directory → [mtime_ns, inode, name glob, [paths]]: a directory whose own mtime did not
        # change has had no file created, renamed in or removed, and NVRx only ever rewrites a
        # cycle file by renaming a new one over it; so its files need no stat at all.
        self._dirs: dict[str, list[Any]] = {}
        self._dirty = False
        self._load()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, path: object) -> bool:
        return path in self._entries

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as handle:
                raw = handle.read(_CACHE_MAX_BYTES + 1)
        except FileNotFoundError:
            return
        except OSError as exc:
            self.load_error = f"cache unreadable: {exc.strerror or exc}"
            return
        if len(raw) > _CACHE_MAX_BYTES:
            self.load_error = "cache too large; starting empty"
            return
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            self.load_error = "cache corrupt; starting empty"
            return
        if not isinstance(data, dict) or data.get("schema") != CACHE_SCHEMA:
            self.load_error = "cache has another schema; starting empty"
            return
        entries = data.get("entries")
        if not isinstance(entries, dict):
            self.load_error = "cache corrupt; starting empty"
            return
        # Entries are validated on use (a bad one is a miss), so loading stays one json.loads.
        self._entries = entries
        dirs = data.get("dirs")
        self._dirs = dirs if isinstance(dirs, dict) else {}

    def get(self, path: str, st: os.stat_result) -> CycleInfo | None:
        """The cached record if the file's (mtime_ns, size, inode) are unchanged, else None."""
        entry = self._entries.get(path)
        if entry is None:
            return None
        try:
            if (
                type(entry) is not list
                or len(entry) != _ENTRY_LEN
                or entry[0] != st.st_mtime_ns
                or entry[1] != st.st_size
                or entry[2] != st.st_ino
            ):
                return None
            return _info_from_fields(entry[3:], path)
        except (TypeError, ValueError):  # includes SlurmParseError from a junk hostlist
            self.forget(path)
            return None

    def listing(
        self, directory: str, dst: os.stat_result, name_glob: str
    ) -> list[tuple[CycleInfo, int]] | None:
        """The records of an unchanged directory without listing it, or None.

        Trusted only while the directory's own mtime and inode are unchanged, for at most
        LISTING_TTL after it was last listed, and after checking the files whose cycle is still
        open (at most one per generation): those are the ones a writer may still rewrite, and a
        rewrite in place (not by rename) would not change the directory.
        """
        entry = self._dirs.get(directory)
        if (
            type(entry) is not list
            or len(entry) != 5
            or entry[0] != dst.st_mtime_ns
            or entry[1] != dst.st_ino
            or entry[2] != name_glob
            or type(entry[3]) is not list
            or not isinstance(entry[4], int)
            or time.time_ns() - entry[4] > LISTING_TTL_NS
        ):
            return None
        out = []
        # Anything odd in a cache entry (a path that is not a string, a stamp that is not a
        # number) is a miss: the directory is listed and read again.
        try:
            for path in entry[3]:
                cached = self._entries.get(path) if type(path) is str else None
                if type(cached) is not list or len(cached) != _ENTRY_LEN:
                    return None
                info = _info_from_fields(cached[3:], path)
                if info.end is None:
                    try:
                        st = os.lstat(path)
                    except OSError:
                        return None
                    if (st.st_mtime_ns, st.st_size, st.st_ino) != tuple(cached[:3]):
                        return None
                out.append((info, int(cached[0])))
        except (TypeError, ValueError):
            return None
        return out

    def remember_listing(
        self, directory: str, dst: os.stat_result, name_glob: str, paths: list[str]
    ) -> None:
        """Record a directory all of whose files are cached; not while it may still be changing
        within one timestamp tick (judged by this host's clock: a writer's clock running ahead
        is bounded by LISTING_TTL, after which the directory is listed again anyway)."""
        if time.time_ns() - dst.st_mtime_ns < self.racy_ns or any(
            p not in self._entries for p in paths
        ):
            self._dirs.pop(directory, None)
            return
        previous = self._dirs.get(directory)
        if (
            type(previous) is list
            and len(previous) == 5
            and previous[:4] == [dst.st_mtime_ns, dst.st_ino, name_glob, paths]
        ):
            return  # unchanged: keep the original listing time, so the TTL really expires
        self._dirs[directory] = [dst.st_mtime_ns, dst.st_ino, name_glob, paths, time.time_ns()]
        self._dirty = True

    def put(self, path: str, st: os.stat_result, fields: Sequence[Any]) -> None:
        """Remember a parse, keyed by the stat of the very inode that was read."""
        if time.time_ns() - st.st_mtime_ns < self.racy_ns:
            self.forget(path)
            return
        self._entries[path] = [st.st_mtime_ns, st.st_size, st.st_ino, *fields]
        self._dirty = True

    def forget(self, path: str) -> None:
        if self._entries.pop(path, None) is not None:
            self._dirty = True

    def retain(self, paths: Iterable[str]) -> None:
        """Drop every entry not in `paths` (files that disappeared, or are no longer matched)."""
        keep = paths if isinstance(paths, set | frozenset) else set(paths)
        gone = [p for p in self._entries if p not in keep]
        for path in gone:
            del self._entries[path]
        stale = [
            d
            for d, e in self._dirs.items()
            if not isinstance(e, list)
            or len(e) != 5
            or not isinstance(e[3], list)
            or any(p not in keep for p in e[3])
        ]
        for directory in stale:
            del self._dirs[directory]
        if gone or stale:
            self._dirty = True

    def save(self) -> bool:
        """Write the cache atomically (tmp + os.replace) if it changed. Returns True if written.

        Never writes in read-only mode. Raises OSError when the state directory is not writable;
        `read_cycles` turns that into `ReadStats.cache_error`.
        """
        if self.read_only or not self._dirty:
            return False
        text = json.dumps(
            {"schema": CACHE_SCHEMA, "entries": self._entries, "dirs": self._dirs},
            separators=(",", ":"),
        )
        # write_atomic's unique temporary name: login nodes sharing $HOME may save at once.
        write_atomic(Path(os.path.abspath(self.path)), text, mode=0o600)
        self._dirty = False
        return True


# ----------------------------------------------------------------------------- reading


class _Skip(Exception):
    """Internal: this file is not used, for `reason`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _dir_reason(exc: OSError) -> str:
    """A directory-level OSError as a short reason."""
    code = exc.errno
    if code == errno.ENOENT:
        return "directory not found"
    if code == errno.ENOTDIR:
        return "not a directory"
    if code == errno.ELOOP:
        return "symlink loop"
    if code in (errno.EACCES, errno.EPERM):
        return "directory not readable: permission denied"
    return f"directory not readable: {exc.strerror or exc}"


def _too_large(size: int, cap: int) -> _Skip:
    return _Skip(f"too large ({size} bytes > {cap}); not read")


def _read_capped(path: str, cap: int) -> tuple[bytes, os.stat_result]:
    """At most `cap` bytes of a regular file, without following a symlink, plus the fstat of
    the inode actually read (what the cache must be keyed on: the file may have been replaced
    between listing and opening)."""
    try:
        return read_bounded(
            path, "cycle file", limit=cap, follow_symlinks=False, regular_only=True, setting=None
        )
    except InputTooLarge:
        raise _Skip(f"too large (grew past {cap} bytes while being read)") from None
    except InputError as exc:
        if exc.errno == errno.ELOOP:
            raise _Skip(REASON_SYMLINK) from None
        if exc.errno == errno.ENOENT:
            raise _Skip("disappeared while listing (replaced or deleted)") from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise _Skip("unreadable: permission denied") from None
        if exc.errno is None:
            raise _Skip(exc.reason) from None  # not a regular file
        raise _Skip(f"unreadable: {os.strerror(exc.errno)}") from None


def _decode(data: bytes) -> str:
    if b"\x00" in data:
        raise _Skip("binary content (NUL bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _Skip("binary content (not UTF-8)") from None


def _name_matcher(name_glob: str) -> Callable[[str], bool]:
    """A fast test for the file-name part of a pattern (`cycle_info.*` is a prefix test)."""
    stem = name_glob[:-1]
    if name_glob.endswith("*") and not _has_magic(stem):
        return lambda name: name.startswith(stem)
    regex = re.compile(fnmatch.translate(name_glob))
    return lambda name: regex.match(name) is not None


def _has_magic(text: str) -> bool:
    return _MAGIC_RE.search(text) is not None


def _split_pattern(pattern: str) -> tuple[str, str]:
    """(directory glob, file-name glob). A plain directory means `<dir>/cycle_info.*`; so does a
    plain path that does not exist yet unless its name looks like a cycle file."""
    pattern = os.path.expanduser(pattern)
    if pattern.endswith(os.sep) and len(pattern) > 1:
        return pattern.rstrip(os.sep), DEFAULT_NAME_GLOB
    if not _has_magic(pattern):
        if os.path.isdir(pattern):
            return pattern, DEFAULT_NAME_GLOB
        head, tail = os.path.split(pattern)
        if not tail.startswith("cycle_info."):
            return pattern, DEFAULT_NAME_GLOB
        return head or os.curdir, tail
    head, tail = os.path.split(pattern)
    return head or os.curdir, tail


def _literal_prefix(dir_glob: str) -> str:
    """The leading path components of a glob that contain no wildcard."""
    parts = dir_glob.split(os.sep)
    literal: list[str] = []
    for part in parts:
        if _has_magic(part):
            break
        literal.append(part)
    return os.sep.join(literal) or (os.sep if dir_glob.startswith(os.sep) else os.curdir)


def _directories(pattern: str, dir_glob: str, skipped: list[SkippedFile]) -> tuple[list[str], bool]:
    """Absolute directories matched by `dir_glob`, and whether a problem was reported (problems
    go to `skipped`, never raised)."""
    if not _has_magic(dir_glob):
        return [os.path.abspath(dir_glob)], False
    matches = sorted(glob.glob(dir_glob))
    dirs = [os.path.abspath(m) for m in matches if os.path.isdir(m)]
    if not dirs:
        # glob swallows errors; say why the fixed part of the path did not lead anywhere.
        prefix = _literal_prefix(dir_glob)
        try:
            os.listdir(prefix)
        except OSError as exc:
            skipped.append(SkippedFile(os.path.abspath(prefix), _dir_reason(exc)))
        else:
            skipped.append(SkippedFile(pattern, "no directory matches"))
        return dirs, True
    return dirs, False


def _read_one(
    path: str,
    entry: os.DirEntry[str],
    cache: CycleCache | None,
    max_bytes: int,
    stats: ReadStats,
) -> tuple[CycleInfo, int]:
    """One directory entry → a record, or _Skip. Order of checks: cheapest, most telling first."""
    name = entry.name
    if name.endswith((".tmp", ".current")):
        raise _Skip(REASON_TMP if name.endswith(".tmp") else REASON_CURRENT)
    m = _NAME_RE.match(name)
    if m is None:
        raise _Skip(REASON_BAD_NAME)
    if entry.is_symlink():  # named like a cycle file: one that cannot be used
        raise _Skip(REASON_SYMLINK)
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError as exc:
        raise _Skip(f"unreadable: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise _Skip("directory, not a file" if stat.S_ISDIR(st.st_mode) else "not a regular file")
    if st.st_size > max_bytes:
        raise _too_large(st.st_size, max_bytes)

    if cache is not None:
        hit = cache.get(path, st)
        if hit is not None:
            stats.cached += 1
            return hit, st.st_mtime_ns

    data, st = _read_capped(path, max_bytes)
    text = _decode(data)
    try:
        info, fields = _parse(text, path)
    except CycleParseError as exc:
        raise _Skip(str(exc)) from None
    job, attempt, cycle = m.group(1), int(m.group(2)), int(m.group(3))
    if (info.job_id, info.attempt_index, info.cycle_number) != (job, attempt, cycle):
        raise _Skip(f"name says {job}.{attempt}.{cycle} but content says {info.key}")
    stats.parsed += 1
    if cache is not None:
        cache.put(path, st, fields)
    return info, st.st_mtime_ns


_FLOOR = datetime.min.replace(tzinfo=UTC)


def _newer(a: tuple[CycleInfo, int], b: tuple[CycleInfo, int]) -> bool:
    """Of two files claiming one key, is `a` the one to keep? A closed cycle beats an open one,
    a later end beats an earlier one, then the later mtime; the path breaks ties."""
    (ia, ma), (ib, mb) = a, b
    return (ia.end or _FLOOR, ma, ia.path) > (ib.end or _FLOOR, mb, ib.path)


# (start, attempt_index, cycle_number) as specified; job id and path only make ties stable.
_ORDER = operator.attrgetter("start", "attempt_index", "cycle_number", "job_id", "path")
_BY_PATH = operator.attrgetter("path")


def _keep(
    found: dict[tuple[str, int, int], tuple[CycleInfo, int]],
    item: tuple[CycleInfo, int],
    skipped: list[SkippedFile],
    stats: ReadStats,
) -> None:
    """Add a record; of two files claiming one key keep the newer and report the other."""
    info = item[0]
    key = (info.job_id, info.attempt_index, info.cycle_number)
    other = found.setdefault(key, item)
    if other is item:
        return
    stats.duplicates += 1
    keep, drop = (item, other) if _newer(item, other) else (other, item)
    found[key] = keep
    skipped.append(SkippedFile(drop[0].path, f"duplicate of {info.key} (kept {keep[0].path})"))


def read_cycles(
    patterns: Sequence[str],
    cache: CycleCache | None,
    *,
    max_bytes: int = MAX_CYCLE_FILE_BYTES,
) -> tuple[list[CycleInfo], list[SkippedFile], ReadStats]:
    """Every cycle-info file matched by `patterns`, deduplicated and sorted; never raises for
    what is (or is not) on disk.

    A pattern is a glob (`/w/nvrx/*/cycle_infos/cycle_info.*`) or a plain directory (meaning
    `<dir>/cycle_info.*`). Wildcards in the directory part go through `glob`; each directory is
    then listed once with `os.scandir`, so a pass costs one `lstat` per file plus, for files the
    cache does not know, one read.

    Results: cycles deduplicated by `job.attempt.cycle` (the loser is reported as skipped) and
    sorted by (start, attempt_index, cycle_number); skipped files and pattern problems, each
    with a reason; and counters. With a cache, entries of files not seen this pass are dropped
    and the cache is saved (unless read-only); a failed save is only reported in the stats.
    """
    stats = ReadStats()
    skipped: list[SkippedFile] = []
    found: dict[tuple[str, int, int], tuple[CycleInfo, int]] = {}
    visited_paths: set[str] = set()
    visited_dirs: set[tuple[int, int, str]] = set()

    for pattern in patterns:
        dir_glob, name_glob = _split_pattern(pattern)
        wanted = _name_matcher(name_glob)
        matched = 0
        directories, reported = _directories(pattern, dir_glob, skipped)
        for directory in directories:
            try:
                dst = os.stat(directory)
            except OSError as exc:
                skipped.append(SkippedFile(directory, _dir_reason(exc)))
                reported = True
                continue
            if not stat.S_ISDIR(dst.st_mode):
                skipped.append(SkippedFile(directory, "not a directory"))
                reported = True
                continue
            ident = (dst.st_dev, dst.st_ino, name_glob)
            if ident in visited_dirs:  # the same directory twice (overlapping patterns, links)
                reported = True  # already reported on, if there was anything to say
                continue
            visited_dirs.add(ident)
            known = cache.listing(directory, dst, name_glob) if cache is not None else None
            if known is not None:
                matched += len(known)
                stats.cached += len(known)
                for item in known:
                    visited_paths.add(item[0].path)
                    _keep(found, item, skipped, stats)
                continue
            try:
                with os.scandir(directory) as it:
                    entries = [e for e in it if wanted(e.name)]
            except OSError as exc:
                skipped.append(SkippedFile(directory, _dir_reason(exc)))
                reported = True
                continue
            matched += len(entries)
            first_skip = len(skipped)
            prefix = directory if directory.endswith(os.sep) else directory + os.sep
            read: list[str] = []
            for entry in entries:
                path = prefix + entry.name
                if path in visited_paths:
                    continue
                visited_paths.add(path)
                try:
                    item = _read_one(path, entry, cache, max_bytes, stats)
                except _Skip as skip:
                    stats.skipped += 1
                    if skip.reason not in NOT_CYCLE_FILE_REASONS:
                        stats.unreadable += 1
                    skipped.append(SkippedFile(path, skip.reason))
                    continue
                _keep(found, item, skipped, stats)
                read.append(path)
            if cache is not None and all(s.reason == REASON_CURRENT for s in skipped[first_skip:]):
                cache.remember_listing(directory, dst, name_glob, read)
            # scandir order is arbitrary; keep the report stable from pass to pass.
            skipped[first_skip:] = sorted(skipped[first_skip:], key=_BY_PATH)
        if matched == 0 and not reported:
            skipped.append(SkippedFile(pattern, "no files match"))

    stats.seen = len(visited_paths)
    if cache is not None:
        cache.retain(visited_paths)
        if cache.load_error:
            stats.cache_error = cache.load_error
        try:
            stats.cache_written = cache.save()
        except OSError as exc:
            stats.cache_error = f"cache not saved: {exc.strerror or exc}"

    cycles = sorted((info for info, _ in found.values()), key=_ORDER)
    return cycles, skipped, stats
