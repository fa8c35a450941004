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
  file on every pass), and a directory that did not change is neither listed nor turned into
  records until something asks for them (`model.Cycles`).

Nothing here writes into job directories: the only file ever written is the cache, which lives
in the watcher's own state directory.

The format itself is parsed by `cycleformat` (pure) and the cache is `cyclecache`; this module
is the directory reader that uses both. One module: the walk, its skip rules, and putting the
unchanged directories' blocks and the files read this pass into one order are one algorithm
over one walk, and split they would share every intermediate.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import gc
import glob
import itertools
import operator
import os
import re
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from nvrx.files import InputError, InputTooLarge, read_bounded
from nvrx.watch.cyclecache import CycleCache, CycleCacheDamaged, Stat, file_name, record_key
from nvrx.watch.cycleformat import CycleParseError, info_from_fields, parse_record
from nvrx.watch.model import (
    BlockSummary,
    CycleBlock,
    CycleColumns,
    CycleInfo,
    Cycles,
    SkippedFile,
)

# Real cycle-info files are < 1 KB. Anything bigger than this is not one, and must not be read
# into memory (a stray 50 GB file in the directory must not take the login node down).
MAX_CYCLE_FILE_BYTES = 1 << 20

# What a plain directory in `patterns` means (the glob NVRx's own readers use).
DEFAULT_NAME_GLOB = "cycle_info.*"

# `cycle_info.<job_id>.<attempt_index>.<cycle_number>`; job id = digits, or `<array>_<task>`.
_NAME_RE = re.compile(r"^cycle_info\.([0-9]+(?:_[0-9]+)?)\.([0-9]+)\.([0-9]+)$")
_MAGIC_RE = re.compile(r"[*?\[]")

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


# What `read_cycles` returns: the cycles, the files not used and why, and the counters.
CycleRead = tuple[Cycles, list[SkippedFile], ReadStats]


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


def _not_regular(directory: bool) -> str:
    return "directory, not a file" if directory else "not a regular file"


def _too_large(size: int, cap: int) -> _Skip:
    return _Skip(f"too large ({size} bytes > {cap}); not read")


def _read_capped(path: str, cap: int) -> tuple[bytes, os.stat_result]:
    """At most `cap` bytes of a regular file, without following a symlink, plus the fstat of
    the inode actually read (what the cache must be keyed on: the file may have been replaced
    between listing and opening)."""
    try:
        return read_bounded(
            path,
            "cycle file",
            limit=cap,
            follow_symlinks=False,
            regular_only=True,
            setting=None,
            remember=False,
        )
    except InputTooLarge as exc:
        if exc.size is not None:
            raise _too_large(exc.size, cap) from None
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


def _one_star(dir_glob: str) -> tuple[str, str] | None:
    """(before, after) when the only wildcard of `dir_glob` is one whole `*` component, the
    shape of every chain's pattern (`<work>/nvrx/*/cycle_infos`); else None."""
    parts = dir_glob.split(os.sep)
    magic = [i for i, part in enumerate(parts) if _has_magic(part)]
    if len(magic) != 1 or parts[magic[0]] != "*" or magic[0] == 0:
        return None
    k = magic[0]
    return os.sep.join(parts[:k]) or os.sep, os.sep.join(parts[k + 1 :])


def _expand_one_star(before: str, after: str) -> list[tuple[str, os.stat_result]] | None:
    """The directories `<before>/*/<after>` names, each with its stat, as glob would match them
    (no hidden names, symlinked directories followed), with one stat each instead of glob's
    three; None when `before` cannot be listed (the caller says why)."""
    try:
        with os.scandir(before) as it:
            names = sorted(e.name for e in it if not e.name.startswith(".") and e.is_dir())
    except OSError:
        return None
    found = []
    base = os.path.abspath(before)
    for name in names:
        path = os.path.join(base, name, after) if after else os.path.join(base, name)
        try:
            st = os.stat(path)
        except OSError:
            continue  # glob would not have matched it either
        if stat.S_ISDIR(st.st_mode):
            found.append((path, st))
    return found


def _directories(
    pattern: str, dir_glob: str, skipped: list[SkippedFile]
) -> tuple[list[tuple[str, os.stat_result | None]], bool]:
    """Absolute directories matched by `dir_glob` (with their stat when the match took one),
    and whether a problem was reported (problems go to `skipped`, never raised)."""
    if not _has_magic(dir_glob):
        return [(os.path.abspath(dir_glob), None)], False
    star = _one_star(dir_glob)
    expanded = _expand_one_star(*star) if star is not None else None
    if expanded is not None:
        dirs: list[tuple[str, os.stat_result | None]] = list(expanded)
    else:
        matches = sorted(glob.glob(dir_glob))
        dirs = [(os.path.abspath(m), None) for m in matches if os.path.isdir(m)]
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
    known: dict[str, tuple[Stat, list[Any]]],
    max_bytes: int,
    stats: ReadStats,
) -> tuple[CycleInfo, os.stat_result, list[Any]]:
    """One directory entry → (record, stat of the inode read, cache fields), or _Skip. Order of
    checks: cheapest, most telling first."""
    name = entry.name
    if name.endswith((".tmp", ".current")):
        raise _Skip(REASON_TMP if name.endswith(".tmp") else REASON_CURRENT)
    m = _NAME_RE.match(name)
    if m is None:
        raise _Skip(REASON_BAD_NAME)
    if entry.is_symlink():  # named like a cycle file: one that cannot be used
        raise _Skip(REASON_SYMLINK)
    hit = known.get(name)
    if hit is None:
        # Opened at once: the listing's type rules out a directory or a FIFO without a stat,
        # the open refuses a symlink, and its fstat tells a file over the cap before a read.
        if not entry.is_file(follow_symlinks=False):
            raise _Skip(_not_regular(entry.is_dir(follow_symlinks=False)))
    else:
        # The cache knows the name: its stat says whether the file is still what was parsed.
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError as exc:
            raise _Skip(f"unreadable: {exc.strerror or exc}") from None
        if not stat.S_ISREG(st.st_mode):
            raise _Skip(_not_regular(stat.S_ISDIR(st.st_mode)))
        if st.st_size > max_bytes:
            raise _too_large(st.st_size, max_bytes)
        if hit[0] == (st.st_mtime_ns, st.st_size, st.st_ino):
            try:
                info = info_from_fields(hit[1], path)
            except (TypeError, ValueError, OverflowError):  # includes a junk hostlist: a miss
                pass
            else:
                if (info.job_id, str(info.attempt_index), str(info.cycle_number)) == m.groups():
                    stats.cached += 1
                    return info, st, hit[1]

    data, st = _read_capped(path, max_bytes)
    text = _decode(data)
    try:
        info, fields = parse_record(text, path)
    except CycleParseError as exc:
        raise _Skip(str(exc)) from None
    job, attempt, cycle = m.group(1), int(m.group(2)), int(m.group(3))
    if (info.job_id, info.attempt_index, info.cycle_number) != (job, attempt, cycle):
        raise _Skip(f"name says {job}.{attempt}.{cycle} but content says {info.key}")
    stats.parsed += 1
    return info, st, fields


def _block(
    cache: CycleCache, directory: str, name_glob: str, summary: BlockSummary, ident: str
) -> CycleBlock:
    """An unchanged directory's cycles: the summary now, columns and records when asked for."""
    prefix = directory.rstrip(os.sep) + os.sep

    def columns() -> CycleColumns:
        return cache.columns(directory, name_glob)

    rows: list[list[Any]] = []  # decoded on the first record asked for

    def record(cols: CycleColumns, i: int) -> CycleInfo:
        if not rows:
            rows.extend(cache.rows(directory, name_glob))
        job, attempt, number = cols.jobs[i], cols.attempts[i], cols.numbers[i]
        try:
            return info_from_fields(
                [job, attempt, number, cols.starts[i], cols.ends[i], *rows[i][3:]],
                prefix + file_name(job, attempt, number),
            )
        except (TypeError, ValueError, OverflowError, IndexError) as exc:
            raise CycleCacheDamaged(f"cycle cache: a bad row for {directory}: {exc}") from None

    def mtimes() -> list[int]:
        if not rows:
            rows.extend(cache.rows(directory, name_glob))
        return [int(row[0]) for row in rows]  # each row starts with its file's stamp

    return CycleBlock(
        summary, load_columns=columns, load_record=record, load_mtimes=mtimes, ident=ident
    )


_FLOOR = datetime.min.replace(tzinfo=UTC)


def _newer(a: tuple[CycleInfo, int], b: tuple[CycleInfo, int]) -> bool:
    """Of two files claiming one key, is `a` the one to keep? A closed cycle beats an open one,
    a later end beats an earlier one, then the later mtime; the path breaks ties."""
    (ia, ma), (ib, mb) = a, b
    return (ia.end or _FLOOR, ma, ia.path) > (ib.end or _FLOOR, mb, ib.path)


# (start, attempt_index, cycle_number) as specified; job id and path only make ties stable.
_ORDER = operator.attrgetter("start", "attempt_index", "cycle_number", "job_id", "path")


def _in_order(item: tuple[CycleInfo, int]) -> tuple[Any, ...]:
    """A (record, mtime) pair's place in the order."""
    return _ORDER(item[0])


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
    save: bool = True,
) -> CycleRead:
    """Every cycle-info file matched by `patterns`, deduplicated and sorted; never raises for
    what is (or is not) on disk.

    A pattern is a glob (`/w/nvrx/*/cycle_infos/cycle_info.*`) or a plain directory (meaning
    `<dir>/cycle_info.*`). Wildcards in the directory part go through `glob` (one whole `*`
    component, a chain's shape, through one scandir); each directory is then listed once with
    `os.scandir`, so a pass costs one `lstat` per file plus, for files the cache does not know,
    one read; a directory the cache knows unchanged is not listed at all, and its records are
    only built when asked for (`Cycles`).

    Results: cycles deduplicated by `job.attempt.cycle` (the loser is reported as skipped) and
    sorted by (start, attempt_index, cycle_number); skipped files and pattern problems, each
    with a reason; and counters. With a cache, records of directories not seen this pass are
    dropped and the cache is saved (unless read-only, or `save` is False: then the caller
    saves it with `save_cache`); a failed save is only reported in the stats.
    """
    with _no_cycle_collection():
        return _read_cycles(patterns, cache, max_bytes, save)


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """The cyclic garbage collector kept off the records: they hold no reference cycle
    (strings, numbers, datetimes, tuples), so it would find nothing in them, yet it walks them
    again and again as they grow (15 % of a 100,000-file first pass), once more when it is back
    on, and again at the process's exit (7 % of the whole command). So it is off while they are
    built, and what exists when the read ends is frozen (`gc.freeze`: out of the collector's
    sight; reference counting still frees it). The next read unfreezes first: a long-running
    `watch --interval` hands the previous pass's objects back to the collector."""
    gc.unfreeze()
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_on:
            gc.enable()


def _read_cycles(
    patterns: Sequence[str], cache: CycleCache | None, max_bytes: int, save: bool
) -> CycleRead:
    stats = ReadStats()
    skipped: list[SkippedFile] = []
    blocks: list[CycleBlock] = []
    visited_paths: set[str] = set()
    visited_dirs: set[tuple[int, int, str]] = set()
    records: set[str] = set()

    for pattern in patterns:
        dir_glob, name_glob = _split_pattern(pattern)
        wanted = _name_matcher(name_glob)
        matched = 0
        directories, reported = _directories(pattern, dir_glob, skipped)
        for directory, known_st in directories:
            try:
                dst = known_st or os.stat(directory)
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
            records.add(record_key(directory, name_glob))
            if cache is not None and (same := cache.unchanged(directory, dst, name_glob)):
                summary, content = same
                matched += summary.count
                stats.cached += summary.count
                stats.seen += summary.count
                blocks.append(_block(cache, directory, name_glob, summary, content))
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
            known = cache.known(directory, name_glob) if cache is not None else {}
            parsed: list[tuple[os.stat_result, list[Any]]] = []
            # This directory's cycles, deduplicated here; across directories, `_assemble`.
            here: dict[tuple[str, int, int], tuple[CycleInfo, int]] = {}
            complete = True
            for entry in entries:
                path = prefix + entry.name
                if path in visited_paths:
                    complete = False  # matched by another glob too: that record holds it
                    continue
                visited_paths.add(path)
                try:
                    info, st, fields = _read_one(path, entry, known, max_bytes, stats)
                except _Skip as skip:
                    stats.skipped += 1
                    if skip.reason not in NOT_CYCLE_FILE_REASONS:
                        stats.unreadable += 1
                    skipped.append(SkippedFile(path, skip.reason))
                    if skip.reason != REASON_CURRENT:
                        complete = False
                    continue
                _keep(here, (info, st.st_mtime_ns), skipped, stats)
                if entry.name == file_name(info.job_id, info.attempt_index, info.cycle_number):
                    parsed.append((st, fields))
                else:
                    complete = False  # e.g. a zero-padded number: not a name the cache rebuilds
            if cache is not None:
                cache.store(directory, dst, name_glob, parsed, complete=complete)
            if here:
                # One block per directory (a generation, in a chain): sorted here, a hundred
                # at a time, and put in order with the others by `_assemble`.
                kept = sorted(here.values(), key=_in_order)
                blocks.append(CycleBlock.of([i for i, _ in kept], [m for _, m in kept]))
            # scandir order is arbitrary; keep the report stable from pass to pass.
            skipped[first_skip:] = sorted(skipped[first_skip:], key=_BY_PATH)
        if matched == 0 and not reported:
            skipped.append(SkippedFile(pattern, "no files match"))

    stats.seen += len(visited_paths)
    if cache is not None:
        cache.retain(records)
        if cache.load_error:
            stats.cache_error = cache.load_error
        if save:
            save_cache(cache, stats)

    return _assemble(blocks, skipped, stats), skipped, stats


def save_cache(cache: CycleCache, stats: ReadStats) -> None:
    """Save the cache a read used, if it changed; a failure is only reported in `stats`."""
    try:
        stats.cache_written = cache.save()
    except OSError as exc:
        stats.cache_error = f"cache not saved: {exc.strerror or exc}"


def _assemble(blocks: list[CycleBlock], skipped: list[SkippedFile], stats: ReadStats) -> Cycles:
    """One ordered `Cycles` of the directories' blocks (unchanged ones from the cache, and those
    read this pass, each sorted and deduplicated within itself).

    The common case (every generation in its own directory, one after the other) is blocks
    that neither overlap in time nor share a job: then they are simply put in order. Anything
    else (two directories with files of one job, interleaved starts) builds every record and
    goes through the same deduplication and sort as files read one by one."""
    if not blocks:
        return Cycles()
    parts = sorted(blocks, key=lambda b: b.summary.first)
    jobs = [b.summary.job_starts.keys() for b in parts]
    disjoint = sum(len(j) for j in jobs) == len(set().union(*jobs)) and all(
        a.summary.last < b.summary.first for a, b in itertools.pairwise(parts)
    )
    if disjoint:
        return Cycles(parts)
    found: dict[tuple[str, int, int], tuple[CycleInfo, int]] = {}
    for block in blocks:
        # Each cached record with the mtime its file had: of two files claiming one key, the
        # newer is kept as when both are read this pass.
        for info, mtime in zip(block.records(), block.mtimes(), strict=True):
            _keep(found, (info, mtime), skipped, stats)
    return Cycles.of(sorted((info for info, _ in found.values()), key=_ORDER))
