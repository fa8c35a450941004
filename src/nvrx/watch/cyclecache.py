"""The watcher's cycle-file cache: the parse of every unchanged cycle file, kept between passes
in the watcher's own state directory, so a pass over 100,000 unchanged files reads one JSON file
and, for a directory that did not change, neither lists it nor builds a record per file.

One record per directory (and file-name glob), in three layers: a summary (count, order keys,
each job's first start, each attempt's highest cycle, the range of ends), which is all a pass
needs of an old generation; the columns (job, attempt, cycle number, start, end), decoded when
goodput has no remembered share for the directory or the fleet window reaches into it; and the
rest of each file (stat, log file, hostlists, ranks, rewrite count), decoded only when
something asks for that generation's records. The two last are compressed JSON texts. Decoding
100,000 full entries on every pass was most of a warm fleet pass.

One module: the record format, its checks and the decisions to trust a directory without listing
it are one contract, and they change together.
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

from nvrx.files import InputError, InputTooLarge, read_bounded, write_atomic
from nvrx.watch.model import BlockSummary, CycleColumns, Key

CACHE_SCHEMA = "nvrx.watch.cycles-cache/4"
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


def _crc(cols: str, rows: str) -> int:
    return zlib.crc32(f"{cols}\n{rows}".encode("ascii", "replace"))


def _pack(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":"))
    # Level 1: a first pass packs every directory of a chain (100,000 files: half the time of
    # the default level, for a cache file a fifth larger).
    packed = zlib.compress(text.encode("utf-8", "surrogatepass"), 1)
    return base64.b64encode(packed).decode("ascii")


class CycleCacheDamaged(ValueError):
    """A record the crc accepted that does not decode or fit: the file was tampered with (the
    crc rules out a torn write). The watcher sets the cache aside and reads the files again."""


# The most one record may decompress to (about 300,000 cycle files of one directory): a record
# that says more is damage, whatever its crc (a zlib bomb must not reach memory).
_UNPACKED_MAX = 64 << 20


def _unpack(text: str, what: str) -> Any:
    try:
        inflate = zlib.decompressobj()
        raw = inflate.decompress(base64.b64decode(text, validate=True), _UNPACKED_MAX)
        if inflate.unconsumed_tail:
            raise ValueError(f"more than {_UNPACKED_MAX} bytes once decompressed")
        if not inflate.eof:
            raise ValueError("the compressed data is cut short")
        return json.loads(raw)
    except (binascii.Error, zlib.error, ValueError, RecursionError) as exc:
        raise CycleCacheDamaged(f"cycle cache: {what} do not decode: {exc}") from None


def _all(values: Sequence[Any], *types: type) -> bool:
    return set(map(type, values)) <= set(types)


def _columns(raw: Any) -> CycleColumns | None:
    """Decoded columns, checked (types, lengths, order), or None."""
    if type(raw) is not list or len(raw) != len(COLUMNS):
        return None
    jobs, attempts, numbers, starts, ends = raw
    if not all(type(c) is list for c in raw):
        return None
    n = len(starts)
    if (
        not len(jobs) == len(attempts) == len(numbers) == len(ends) == n
        or n == 0
        or not _all(jobs, str)
        or not _all(attempts, int)
        or not _all(numbers, int)
        or not _all(starts, int)
        or not _all(ends, int, type(None))
        or starts != sorted(starts)
    ):
        return None
    return CycleColumns(jobs, attempts, numbers, starts, ends)


def _key(raw: Any) -> Key | None:
    if (
        type(raw) is list
        and len(raw) == 4
        and type(raw[0]) is int
        and type(raw[1]) is int
        and type(raw[2]) is int
        and type(raw[3]) is str
    ):
        return (raw[0], raw[1], raw[2], raw[3])
    return None


def _end(raw: Any) -> bool:
    return raw is None or type(raw) is int


def _summary(raw: Any) -> BlockSummary | None:
    """A stored summary, checked, or None (a miss)."""
    if type(raw) is not dict:
        return None
    count, first, last = raw.get("count"), _key(raw.get("first")), _key(raw.get("last"))
    jobs, highs, opened, ends = raw.get("jobs"), raw.get("highs"), raw.get("open"), raw.get("ends")
    if (
        type(count) is not int
        or count < 1
        or first is None
        or last is None
        or type(jobs) is not dict
        or not all(type(v) is int for v in jobs.values())
        or type(highs) is not list
        or not all(
            type(h) is list
            and len(h) == 3
            and type(h[0]) is str
            and type(h[1]) is int
            and type(h[2]) is int
            for h in highs
        )
        or type(opened) is not int
        or not (type(ends) is list and len(ends) == 2 and _end(ends[0]) and _end(ends[1]))
    ):
        return None
    return BlockSummary(
        count, first, last, jobs, {(h[0], h[1]): h[2] for h in highs}, opened, ends[0], ends[1]
    )


def _summary_json(summary: BlockSummary) -> dict[str, Any]:
    return {
        "count": summary.count,
        "first": list(summary.first),
        "last": list(summary.last),
        "jobs": summary.job_starts,
        "highs": [[job, attempt, n] for (job, attempt), n in summary.highs.items()],
        "open": summary.open,
        "ends": [summary.min_end, summary.max_end],
    }


class CycleCache:
    """Directory records, persisted as one JSON file:

        {"schema": CACHE_SCHEMA, "dirs": {record_key: {
            "listed": [dir_mtime_ns, dir_ino, listed_at_ns] | null,
            "summary": {"count": n, "first": key, "last": key, "jobs": {job: first start},
                        "highs": [[job, attempt, highest cycle], ...], "open": open cycles,
                        "ends": [earliest end, latest end]},
            "open": [[file name, mtime_ns, size, ino], ...],
            "cols": packed [jobs, attempts, cycle numbers, starts, ends],
            "rows": packed [[mtime_ns, size, ino, log_file, active, standby, ranks,
                             write_count], ...],
            "crc": crc32 of cols and rows}}}

    A key is [start, attempt, cycle, job]; times are microseconds since the epoch; "packed" is
    base64 of zlib of compact JSON. Rows are in (start, attempt, cycle) order.

    Why a file's parse can be reused: cycle files
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
        load: bool = True,
    ) -> None:
        self.path = os.fspath(path)
        self.read_only = read_only
        self.racy_ns = int(racy_seconds * 1_000_000_000)
        self.load_error: str | None = None
        self._dirs: dict[str, Any] = {}
        self._sound: dict[str, tuple[dict[str, Any], BlockSummary]] = {}  # checked this pass
        self._dirty = False
        if load:  # (not: a pass that found this file damaged starts empty)
            self._load()

    def __len__(self) -> int:
        """Files cached (in records whose summary is sound)."""
        return sum(found[1].count for key in self._dirs if (found := self._record(key)))

    def __contains__(self, path: object) -> bool:
        if type(path) is not str:
            return False
        directory, name = os.path.split(path)
        return any(
            name in self.known(os.path.dirname(key), os.path.basename(key))
            for key in self._dirs
            if os.path.dirname(key) == directory
        )

    def _load(self) -> None:
        if not os.path.lexists(self.path):
            return
        try:
            # nvrx's own regular file: never through a link, never blocking on a FIFO.
            raw, _ = read_bounded(
                self.path, "cycle cache", limit=_CACHE_MAX_BYTES, follow_symlinks=False,
                regular_only=True, setting=None, remember=False,
            )  # fmt: skip
        except InputTooLarge:
            self.load_error = "cache too large; starting empty"
            return
        except InputError as exc:
            self.load_error = f"cache unreadable ({exc.reason}); starting empty"
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

    def _record(self, key: str) -> tuple[dict[str, Any], BlockSummary] | None:
        record = self._dirs.get(key)
        sound = self._sound.get(key)
        if sound is not None and sound[0] is record:
            return sound
        if type(record) is not dict:
            return None
        summary = _summary(record.get("summary"))
        cols, rows = record.get("cols"), record.get("rows")
        if (
            summary is None
            or type(cols) is not str
            or type(rows) is not str
            or record.get("crc") != _crc(cols, rows)
        ):
            return None
        self._sound[key] = (record, summary)
        return record, summary

    def unchanged(
        self, directory: str, dst: os.stat_result, name_glob: str
    ) -> tuple[BlockSummary, str] | None:
        """The summary and content name of a directory that did not change since it was last
        listed, or None (then it must be listed and its files looked up with `known`)."""
        key = record_key(directory, name_glob)
        found = self._record(key)
        if found is None:
            return None
        record, summary = found
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
        if type(opened) is not list or len(opened) != summary.open:
            return None
        prefix = directory.rstrip(os.sep) + os.sep
        try:
            for name, *stamp in opened:
                if type(name) is not str or os.sep in name:
                    return None
                try:
                    st = os.lstat(prefix + name)
                except OSError:
                    return None
                if _stamp(st) != tuple(stamp):
                    return None
        except (TypeError, ValueError):
            return None
        return summary, f"{key}@{record['crc']:08x}"

    def columns(self, directory: str, name_glob: str) -> CycleColumns:
        """The columns of a directory whose record `unchanged` just accepted. Raises ValueError
        when they do not fit its summary (the crc makes that a bug, not damage)."""
        record, summary = self._sound_record(directory, name_glob)
        cols = _columns(_unpack(record["cols"], f"the columns of {directory}"))
        if cols is None or BlockSummary.of(cols) != summary:
            raise CycleCacheDamaged(
                f"cycle cache: the columns of {directory} do not fit its summary"
            )
        return cols

    def rows(self, directory: str, name_glob: str) -> list[list[Any]]:
        """The rows of a directory whose record `unchanged` just accepted, in column order.
        Raises ValueError when they do not fit (as `columns`)."""
        record, summary = self._sound_record(directory, name_glob)
        rows = _unpack(record["rows"], f"the rows of {directory}")
        if (
            type(rows) is not list
            or len(rows) != summary.count
            or not all(type(r) is list and len(r) == _ROW_LEN for r in rows)
        ):
            raise CycleCacheDamaged(f"cycle cache: the rows of {directory} do not fit its columns")
        return rows

    def _sound_record(self, directory: str, name_glob: str) -> tuple[dict[str, Any], BlockSummary]:
        found = self._record(record_key(directory, name_glob))
        if found is None:
            raise ValueError(f"cycle cache: no sound record for {directory}")
        return found

    def known(self, directory: str, name_glob: str) -> dict[str, tuple[Stat, list[Any]]]:
        """name → (stat, fields) of the files the record holds, for a directory that changed
        (only its new or replaced files are read again). A bad record knows nothing."""
        try:
            cols = self.columns(directory, name_glob)
            rows = self.rows(directory, name_glob)
        except ValueError:
            return {}
        if len(rows) != len(cols.starts):
            return {}
        out: dict[str, tuple[Stat, list[Any]]] = {}
        for job, attempt, number, start, end, row in zip(
            cols.jobs, cols.attempts, cols.numbers, cols.starts, cols.ends, rows, strict=True
        ):
            out[file_name(job, attempt, number)] = (
                (row[0], row[1], row[2]),
                [job, attempt, number, start, end, *row[3:]],
            )
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
        if not kept:
            if self._dirs.pop(key, None) is not None:
                self._dirty = True
            return
        transposed = [list(c) for c in zip(*(f[: len(COLUMNS)] for _, f in kept), strict=True)]
        cols_text = _pack(transposed)
        rows_text = _pack([[*st, *f[len(COLUMNS) :]] for st, f in kept])
        record: dict[str, Any] = {
            "summary": _summary_json(BlockSummary.of(CycleColumns(*transposed))),
            "open": [[file_name(*f[:3]), *st] for st, f in kept if f[4] is None],
            "cols": cols_text,
            "rows": rows_text,
            "crc": _crc(cols_text, rows_text),
        }
        # Listed just now: trusted (when complete and settled) until LISTING_TTL from now.
        record["listed"] = [dst.st_mtime_ns, dst.st_ino, now] if trusted else None
        previous = self._dirs.get(key)
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
