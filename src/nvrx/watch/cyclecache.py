"""The watcher's cycle-file cache: the parse of every unchanged cycle file, kept between passes
in the watcher's own state directory, so a pass over 10,000 unchanged files costs one `lstat`
per file (or none, for a directory that did not change) instead of a read and a JSON parse."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from nvrx.files import write_atomic
from nvrx.watch.cycleformat import info_from_fields
from nvrx.watch.model import CycleInfo

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
            return info_from_fields(entry[3:], path)
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
                info = info_from_fields(cached[3:], path)
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
