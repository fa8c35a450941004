"""The watcher's cycle-file cache: the parse of every unchanged cycle file, kept between passes
in the watcher's own state directory, so a pass over 100,000 unchanged files reads one JSON file
and, for a directory that did not change, neither lists it nor builds a record per file.

One record per directory (and file-name glob). Its cycles are stored twice over: as columns
(job, attempt, cycle number, start, end), which is all a pass needs of an old generation
(goodput, failures within the fleet window, counter highs), and as one compressed JSON text
of the rest of each file (stat, log file, hostlists, ranks, rewrite count), decoded only when
something asks for that generation's records. Decoding 100,000 full entries on every pass was
most of a warm fleet pass; the columns alone cost a tenth of it.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import time
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from nvrx.files import write_atomic
from nvrx.watch.model import CycleColumns

CACHE_SCHEMA = "nvrx.watch.cycles-cache/3"
# An unchanged directory is listed again at least this often, whatever its mtime says.
LISTING_TTL_NS = 3600 * 1_000_000_000
# The fields of one cached file (`cycleformat.parse_record` returns them, `info_from_fields`
# reads them back); the first five are the record's columns, the rest its row.
CACHE_FIELDS = (
    "job_id",
    "attempt_index",
    "cycle_number",
    "start",  # microseconds since the epoch, UTC
    "end",  # the same, or null while open
    "log_file",
    "active_nodes",  # hostlist as written (compressed)
    "standby_nodes",
    "active_ranks",
    "write_count",  # the file's `generation` field
)
COLUMNS = ("job", "attempt", "cycle", "start", "end")
# A row: `[st_mtime_ns, st_size, st_ino, *CACHE_FIELDS[5:]]`.
_ROW_LEN = 3 + len(CACHE_FIELDS) - len(COLUMNS)
_CACHE_MAX_BYTES = 256 << 20  # ~150 bytes per file: far more than any chain ever writes

Stat = tuple[int, int, int]  # (st_mtime_ns, st_size, st_ino)


def record_key(directory: str, name_glob: str) -> str:
    """A record's key: the directory's absolute path and the glob its files were matched by."""
    return directory.rstrip(os.sep) + os.sep + name_glob


def file_name(job: str, attempt: int, cycle: int) -> str:
    """The name NVRx gives a cycle file (the reader refuses a file whose name and content
    disagree, so the name need not be stored)."""
    return f"cycle_info.{job}.{attempt}.{cycle}"


def _stamp(st: os.stat_result) -> Stat:
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _crc(text: str) -> int:
    return zlib.crc32(text.encode("ascii", "replace"))


def _all(values: Sequence[Any], *types: type) -> bool:
    return set(map(type, values)) <= set(types)


def _columns(record: dict[str, Any]) -> CycleColumns | None:
    """A record's columns, checked (types, lengths, order), or None."""
    jobs, attempts, numbers, starts, ends = (record.get(name) for name in COLUMNS)
    if not (
        type(jobs) is list
        and type(attempts) is list
        and type(numbers) is list
        and type(starts) is list
        and type(ends) is list
    ):
        return None
    n = len(starts)
    if (
        not len(jobs) == len(attempts) == len(numbers) == len(ends) == n
        or not _all(jobs, str)
        or not _all(attempts, int)
        or not _all(numbers, int)
        or not _all(starts, int)
        or not _all(ends, int, type(None))
        or starts != sorted(starts)
    ):
        return None
    return CycleColumns(jobs, attempts, numbers, starts, ends)


class CycleCache:
    """Directory records, persisted as one JSON file:

        {"schema": CACHE_SCHEMA, "dirs": {record_key: {
            "listed": [dir_mtime_ns, dir_ino, listed_at_ns] | null,
            "job": [...], "attempt": [...], "cycle": [...], "start": [...], "end": [...],
            "open": [[row, mtime_ns, size, ino], ...],
            "rows": base64 of zlib of the JSON text of [[mtime_ns, size, ino, log_file,
                    active, standby, ranks, write_count], ...],
            "crc": crc32 of "rows"}}}

    Rows are in (start, attempt, cycle) order. Why a file's parse can be reused: cycle files
    are written once at cycle start and replaced once at cycle end (tmp file + atomic rename,
    so a rewrite always changes the inode), then never again; an unchanged (mtime, size, inode)
    triple is enough. Why a directory need not even be listed: one whose own mtime and inode
    did not change has had no file created, renamed in or removed ("listed"; trusted for at
    most LISTING_TTL, and after checking by `lstat` the files whose cycle is still open, the
    ones a writer may rewrite in place).

    Losing or corrupting the cache is harmless (the next pass reads everything again), so a bad
    cache file starts empty instead of failing the pass (`load_error` says why), and a bad
    record is a miss; "crc" catches a damaged rows text before it is trusted. In `read_only`
    mode (e.g. `--dry-run`) nothing is ever written. Only successfully parsed files are
    cached: a file skipped for a (maybe transient) reason is retried next pass. A file
    modified less than `racy_seconds` ago is read but not cached: on filesystems with coarse
    timestamps a same-size in-place rewrite within the same tick would otherwise be missed
    (git's "racy clean" problem); the same holds for a directory's listing.
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
        self._dirs: dict[str, Any] = {}
        self._sound: dict[str, tuple[dict[str, Any], CycleColumns]] = {}  # checked this pass
        self._dirty = False
        self._load()

    def __len__(self) -> int:
        """Files cached (in records whose columns are sound)."""
        return sum(
            len(cols.starts)
            for r in self._dirs.values()
            if type(r) is dict and (cols := _columns(r)) is not None
        )

    def __contains__(self, path: object) -> bool:
        if type(path) is not str:
            return False
        directory, name = os.path.split(path)
        for key, record in self._dirs.items():
            if os.path.dirname(key) != directory or type(record) is not dict:
                continue
            cols = _columns(record)
            if cols is not None and name in {
                file_name(*k) for k in zip(cols.jobs, cols.attempts, cols.numbers, strict=True)
            }:
                return True
        return False

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
        dirs = data.get("dirs")
        if not isinstance(dirs, dict):
            self.load_error = "cache corrupt; starting empty"
            return
        # Records are checked on use (a bad one is a miss), so loading stays one json.loads.
        self._dirs = dirs

    def _record(self, key: str) -> tuple[dict[str, Any], CycleColumns] | None:
        sound = self._sound.get(key)
        if sound is not None and sound[0] is self._dirs.get(key):
            return sound
        record = self._dirs.get(key)
        if type(record) is not dict:
            return None
        cols = _columns(record)
        rows = record.get("rows")
        if cols is None or type(rows) is not str or record.get("crc") != _crc(rows):
            return None
        self._sound[key] = (record, cols)
        return record, cols

    def unchanged(self, directory: str, dst: os.stat_result, name_glob: str) -> CycleColumns | None:
        """The columns of a directory that did not change since it was last listed, or None
        (then it must be listed and its files looked up with `known`)."""
        found = self._record(record_key(directory, name_glob))
        if found is None:
            return None
        record, cols = found
        listed = record.get("listed")
        if (
            type(listed) is not list
            or len(listed) != 3
            or listed[0] != dst.st_mtime_ns
            or listed[1] != dst.st_ino
            or not isinstance(listed[2], int)
            or time.time_ns() - listed[2] > LISTING_TTL_NS
        ):
            return None
        opened = record.get("open")
        if type(opened) is not list:
            return None
        prefix = directory.rstrip(os.sep) + os.sep
        open_rows = [i for i, end in enumerate(cols.ends) if end is None]
        try:
            if sorted(int(o[0]) for o in opened) != open_rows:
                return None
            for row, *stamp in opened:
                name = file_name(cols.jobs[row], cols.attempts[row], cols.numbers[row])
                try:
                    st = os.lstat(prefix + name)
                except OSError:
                    return None
                if _stamp(st) != tuple(stamp):
                    return None
        except (TypeError, ValueError, IndexError):
            return None
        return cols

    def rows(self, directory: str, name_glob: str) -> list[list[Any]]:
        """The rows of a directory whose columns `unchanged` or `known` just returned. Raises
        ValueError when they do not fit the columns (the crc makes that a bug, not damage)."""
        found = self._record(record_key(directory, name_glob))
        if found is None:
            raise ValueError(f"cycle cache: no sound record for {directory}")
        record, cols = found
        try:
            rows = json.loads(zlib.decompress(base64.b64decode(record["rows"], validate=True)))
        except (binascii.Error, zlib.error, ValueError, RecursionError) as exc:
            raise ValueError(f"cycle cache: the rows of {directory} do not decode: {exc}") from None
        if (
            type(rows) is not list
            or len(rows) != len(cols.starts)
            or not all(type(r) is list and len(r) == _ROW_LEN for r in rows)
        ):
            raise ValueError(f"cycle cache: the rows of {directory} do not fit its columns")
        return rows

    def known(self, directory: str, name_glob: str) -> dict[str, tuple[Stat, list[Any]]]:
        """name → (stat, fields) of the files the record holds, for a directory that changed
        (only its new or replaced files are read again). A bad record knows nothing."""
        found = self._record(record_key(directory, name_glob))
        if found is None:
            return {}
        _, cols = found
        try:
            rows = self.rows(directory, name_glob)
        except ValueError:
            return {}
        out: dict[str, tuple[Stat, list[Any]]] = {}
        for i, row in enumerate(rows):
            key = (cols.jobs[i], cols.attempts[i], cols.numbers[i])
            fields = [*key, cols.starts[i], cols.ends[i], *row[3:]]
            out[file_name(*key)] = ((row[0], row[1], row[2]), fields)
        return out

    def store(
        self,
        directory: str,
        dst: os.stat_result,
        name_glob: str,
        files: Sequence[tuple[os.stat_result, Sequence[Any]]],
        *,
        complete: bool,
    ) -> None:
        """Record a directory's parsed files as (stat of the inode read, fields), leaving out
        those changed within the racy window. `complete`: every entry the listing matched is
        among `files` (nothing skipped but `.current` pointers), so the next pass may trust an
        unchanged directory without listing it."""
        now = time.time_ns()
        kept = sorted(
            ((_stamp(st), list(f)) for st, f in files if now - st.st_mtime_ns >= self.racy_ns),
            key=lambda sf: (sf[1][3], sf[1][1], sf[1][2], sf[1][0]),
        )
        trusted = complete and len(kept) == len(files) and now - dst.st_mtime_ns >= self.racy_ns
        key = record_key(directory, name_glob)
        rows_json = json.dumps([[*s, *f[5:]] for s, f in kept], separators=(",", ":"))
        rows_text = base64.b64encode(zlib.compress(rows_json.encode("utf-8", "surrogatepass")))
        record: dict[str, Any] = {
            "job": [f[0] for _, f in kept],
            "attempt": [f[1] for _, f in kept],
            "cycle": [f[2] for _, f in kept],
            "start": [f[3] for _, f in kept],
            "end": [f[4] for _, f in kept],
            "open": [[i, *s] for i, (s, f) in enumerate(kept) if f[4] is None],
            "rows": rows_text.decode("ascii"),
            "crc": zlib.crc32(rows_text),
        }
        previous = self._dirs.get(key)
        listed = previous.get("listed") if type(previous) is dict else None
        if trusted and not (
            type(listed) is list
            and len(listed) == 3
            and listed[:2] == [dst.st_mtime_ns, dst.st_ino]
            and isinstance(listed[2], int)
        ):
            listed = [dst.st_mtime_ns, dst.st_ino, now]
        # An unchanged listing keeps its original time, so the TTL really expires.
        record["listed"] = listed if trusted else None
        if previous == record:
            return
        self._dirs[key] = record
        self._dirty = True

    def retain(self, keys: Iterable[str]) -> None:
        """Drop every record not in `keys` (directories gone, or no longer matched)."""
        keep = keys if isinstance(keys, set | frozenset) else set(keys)
        gone = [k for k in self._dirs if k not in keep]
        for key in gone:
            del self._dirs[key]
        if gone:
            self._dirty = True

    def save(self) -> bool:
        """Write the cache atomically (tmp + os.replace) if it changed. Returns True if written.

        Never writes in read-only mode. Raises OSError when the state directory is not writable;
        `read_cycles` turns that into `ReadStats.cache_error`.
        """
        if self.read_only or not self._dirty:
            return False
        text = json.dumps({"schema": CACHE_SCHEMA, "dirs": self._dirs}, separators=(",", ":"))
        # write_atomic's unique temporary name: login nodes sharing $HOME may save at once.
        write_atomic(Path(os.path.abspath(self.path)), text, mode=0o600)
        self._dirty = False
        return True
