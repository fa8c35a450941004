"""Torch-free analysis of NCCL flight-recorder (FR) dumps: which ranks a hung job is missing.

It reproduces the missing-rank table of upstream NVRx's `CollectiveAnalyzer`
(`attribution/trace_analyzer/fr_attribution.py`), in these steps:

1. Load one dump per rank (`_dump_<rank>`: a pickle of plain data, read with a restricted
   unpickler, or the same document as JSON). Only `scheduled` entries (in-flight work) count.
2. Wavefront walk: step through all ranks' entry lists together; each step takes the process
   group that is next for the most ranks and consumes, round-robin, those ranks' consecutive
   entries of it. A group revisited after going idle opens a new window when ranks that already
   took part come back, or at least 2 new ranks arrive. Windows are numbered per group; their
   creation order is the *walk position*.
3. Per window: missing = members with no entry in the window (a member that wrote no dump at
   all included) plus members whose `last_enqueued_collective` is behind the highest one of the
   window's participants. Windows whose pending work is mostly send/recv compare send and recv
   counts per peer pair instead (directions chosen as upstream does, see `_unbalanced_peers`).
4. Windows of one group are merged: a rank present and not missing in any window is not missing.
5. Which groups are reported. Upstream prints only the *heads* of its group graph, which is why
   the real traces give one row although 5 (GPU_ERROR) or 12 (LOCK_GIL) groups miss ranks:
   nodes are the groups with missing ranks; an edge leads from a group to a later one (walk
   position) sharing a rank; a path holds each `desc,window` label at most once. Starts are
   taken largest first (identified + missing ranks; ties: walk order), skipping groups already
   on a path from an earlier start; a start stays a head unless each of its maximal paths is
   strictly contained in another path. On the real traces the expert-parallel all-to-all is the
   first start (largest, and first in walk order among the equally large) and every other group
   with missing ranks lies on a forward path from it, so it alone is reported. Send/recv groups
   take part in the graph but are never printed (table consumers expect collectives only), so a
   trace whose heads are all send/recv gives an empty table. Paths are enumerated, as upstream
   does; beyond `MAX_PATHS` every group with missing ranks is reported instead
   (`wavefront_exact` is False).

Deviations from upstream, none visible on the real traces: a member's progress is looked up under
its own local group index when its entries reveal it (upstream uses one participant's index for
all members); when nothing is missing the table is just the header (upstream prints a table of
completed groups instead); rows are sorted by group name (upstream: set order); an unreadable
dump is an error naming the file (upstream skips it).

One module: one algorithm, whose steps pass their intermediate records to each other, and the
restricted reader of the dumps it needs.
"""

from __future__ import annotations

import builtins
import codecs
import glob
import io
import json
import os
import pickle
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from nvrx.files import InputError, read_bounded
from nvrx.limits import MAX_DIGITS

DEFAULT_PATTERN = "_dump_*"
MAX_PATHS = 50_000  # path-enumeration budget for the wavefront selection (see docstring, 5.)

HEADER = (
    f"{'PGID':<6} | {'Process Group Desc':<25} | {'Op Type':<10} | {'Size':<8} "
    + " " * 28  # upstream's f-string line continuation leaves these spaces in
    + f"| {'Dtype':<8} | Missing Ranks"
)
_ROW_GAP = " " * 32  # the same continuation, one indentation level deeper, in the row format


class FrError(ValueError):
    """A dump could not be found, read or understood; one line naming the file."""

    exit_code = 2  # bad input


# --- loading ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """One process group as a dump's `pg_config` describes it: its global name and members."""

    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class GroupProgress:
    """A rank's `pg_status` counters for one of its groups (keyed by the rank-local index)."""

    last_enqueued: int
    last_completed: int


@dataclass(frozen=True, slots=True)
class FrEntry:
    """One recorded operation of one rank."""

    rank: int
    local_group: int  # `pg_id`: the rank-local index, key into that rank's pg_status
    group_name: str
    group_desc: str
    collective_seq: int
    p2p_seq: int
    op: str  # profiling_name, e.g. `nccl:all_to_all`, `nccl:send 0->1`
    state: str
    input_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]

    @property
    def is_send_recv(self) -> bool:
        return _is_send_recv(self.op)

    @property
    def seq(self) -> int:
        """Position in the counter that pg_status tracks for this kind of operation."""
        return self.p2p_seq if self.is_send_recv else self.collective_seq

    @property
    def group_key(self) -> tuple[str, str]:
        return (self.group_name, self.group_desc)


@dataclass(frozen=True, slots=True)
class RankDump:
    """One rank's dump: its groups, its progress per local group index, its in-flight work."""

    rank: int
    path: Path
    groups: Mapping[str, GroupConfig]
    progress: Mapping[int, GroupProgress]
    entries: tuple[FrEntry, ...]  # `scheduled` entries only, oldest first
    local_groups: Mapping[str, int]  # group name -> local index, from all entries of any state


def _is_send_recv(op: str) -> bool:
    return "nccl:send" in op or "nccl:recv" in op


class _PlainDataUnpickler(pickle.Unpickler):
    """Admits only what a dump holds: containers and scalars. Pickle builds dicts, lists, tuples,
    strings, numbers, bools and None without globals; sets need the two builtins below. Any
    other global (a class, `os.system`, ...) is refused before it is called."""

    _ALLOWED = frozenset({"set", "frozenset"})

    def find_class(self, module: str, name: str) -> Any:
        if module in ("builtins", "__builtin__") and name in self._ALLOWED:
            return getattr(builtins, name)
        raise pickle.UnpicklingError(
            f"refusing to load {module}.{name} (only plain containers and scalars are allowed)"
        )


def _decode(path: Path, raw: bytes) -> Any:
    # JSON is text starting with an object or array; no pickle starts with `{` or `[`
    text = raw.removeprefix(codecs.BOM_UTF8)
    if path.suffix.lower() == ".json" or text.lstrip()[:1] in (b"{", b"["):
        try:
            return json.loads(text.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # a 5,000-digit number
            raise FrError(f"{path}: not valid JSON: {_one_line(exc)[:200]}") from None
    try:
        value = _PlainDataUnpickler(io.BytesIO(raw)).load()
        _check_expanded(value, path)
        return value
    except FrError:
        raise
    except pickle.UnpicklingError as exc:
        raise FrError(f"{path}: not a flight-recorder dump: {_one_line(exc)}") from None
    except Exception as exc:  # a corrupt pickle fails in many ways (EOF, bad opcodes, ...)
        raise FrError(
            f"{path}: not a flight-recorder dump: {type(exc).__name__}: {_one_line(exc)}"
        ) from None


# What a dump may hold once every shared reference is counted where it is used: a pickle's
# memo lets 30 KB name one 1000×1000 list a thousand times (a billion values to walk).
MAX_EXPANDED_VALUES = 20_000_000


def _check_expanded(root: Any, path: Path) -> None:
    """FrError when `root`, its shared parts counted at every use, holds more than
    MAX_EXPANDED_VALUES values, or contains itself. Linear in the distinct objects."""
    size: dict[int, int] = {}  # id → expanded size, for containers done
    open_: set[int] = set()  # containers being walked (a cycle comes back to one)
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        value, done = stack.pop()
        if not isinstance(value, list | tuple | dict | set | frozenset):
            continue
        key = id(value)
        if done:
            children = value.items() if isinstance(value, dict) else value
            total = 1
            for child in children:
                for part in child if isinstance(value, dict) else (child,):
                    total += size.get(id(part), 1)
            if total > MAX_EXPANDED_VALUES:
                raise FrError(
                    f"{path}: not a flight-recorder dump: holds more than "
                    f"{MAX_EXPANDED_VALUES:,} values once its shared parts are counted"
                )
            size[key] = total  # (every object lives as long as `root`: no id is reused)
            open_.discard(key)
            continue
        if key in size:
            continue
        if key in open_:
            raise FrError(f"{path}: not a flight-recorder dump: it contains itself")
        open_.add(key)
        stack.append((value, True))
        items = value.items() if isinstance(value, dict) else value
        for child in items:
            for part in child if isinstance(value, dict) else (child,):
                stack.append((part, False))


def _show(value: Any) -> str:
    """A decoded value in a message, cut; even one holding an integer too long to print."""
    try:
        return f"{value!r:.40}"
    except (ValueError, RecursionError):
        return f"a {type(value).__name__}"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class _Fields:
    """Typed access to one decoded dump; every problem becomes an FrError naming the file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, problem: str) -> FrError:
        return FrError(f"{self.path}: {where}: {problem}")

    def mapping(self, value: Any, where: str) -> Mapping[Any, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(where, f"expected a mapping, got {type(value).__name__}")
        return value

    def sequence(self, value: Any, where: str) -> Sequence[Any]:
        if not isinstance(value, list | tuple):
            raise self.fail(where, f"expected a list, got {type(value).__name__}")
        return value

    def integer(self, value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(where, f"expected an integer, got {_show(value)}")
        if abs(value) >= 1 << 63:  # a pickle's integer may be any size; no counter is that big
            raise self.fail(where, f"integer out of range ({value.bit_length()} bits)")
        return value

    def text(self, value: Any, where: str) -> str:
        if not isinstance(value, str):
            raise self.fail(where, f"expected a string, got {_show(value)}")
        return value


def parse_rank_list(text: str) -> tuple[int, ...]:
    """`"[0, 4, 8]"` -> (0, 4, 8), read as a list of integers (never evaluated)."""
    inner = text.strip()
    if not (inner.startswith("[") and inner.endswith("]")):
        raise ValueError(f"not a list of ranks: {text!r:.60}")
    ranks = []
    for token in inner[1:-1].split(","):
        token = token.strip()
        if not token:
            continue
        if not re.fullmatch(r"-?\d{1,18}", token):
            raise ValueError(f"not a list of ranks: {text!r:.60}")
        ranks.append(int(token))
    return tuple(ranks)


def rank_of(path: Path) -> int:
    """The rank a dump belongs to, from the file name's last `_` field (`_dump_12`,
    `_dump_12.json` -> 12), as upstream reads it."""
    name = path.name
    if path.suffix and not path.suffix[1:].isdigit():
        name = path.stem
    last = name.rsplit("_", 1)[-1]
    if not last.isdigit() or len(last) > MAX_DIGITS:
        raise FrError(f"{path}: cannot tell the rank from the file name (expected _dump_<rank>)")
    return int(last)


def load_dump(path: Path) -> RankDump:
    """Read one dump (pickle or JSON, detected). Unknown keys are ignored."""
    rank = rank_of(path)
    try:
        raw, _ = read_bounded(path, "FR dump")
    except InputError as exc:
        raise FrError(str(exc)) from None
    if not raw.strip():
        raise FrError(f"{path}: empty file")
    fields = _Fields(path)
    doc = fields.mapping(_decode(path, raw), "top level")

    groups: dict[str, GroupConfig] = {}
    for name, cfg in fields.mapping(doc.get("pg_config", {}), "pg_config").items():
        where = f"pg_config[{_show(name)}]"
        cfg = fields.mapping(cfg, where)
        raw_ranks = cfg.get("ranks", "[]")
        try:
            if isinstance(raw_ranks, str):
                ranks = parse_rank_list(raw_ranks)
            else:  # a JSON encoder may have written a real list
                ranks = tuple(fields.integer(r, f"{where}.ranks") for r in raw_ranks)
        except (ValueError, TypeError) as exc:
            raise fields.fail(f"{where}.ranks", _one_line(exc)) from None
        desc = fields.text(cfg.get("desc", ""), f"{where}.desc")
        groups[str(name)] = GroupConfig(str(name), desc, ranks)

    progress: dict[int, GroupProgress] = {}
    for local, status in fields.mapping(doc.get("pg_status", {}), "pg_status").items():
        where = f"pg_status[{_show(local)}]"
        status = fields.mapping(status, where)
        try:
            local_index = int(local)
        except (ValueError, TypeError):
            raise fields.fail(where, "key is not a group index") from None
        progress[local_index] = GroupProgress(
            last_enqueued=fields.integer(
                status.get("last_enqueued_collective", -1), f"{where}.last_enqueued_collective"
            ),
            last_completed=fields.integer(
                status.get("last_completed_collective", -1), f"{where}.last_completed_collective"
            ),
        )

    entries: list[FrEntry] = []
    local_groups: dict[str, int] = {}
    for i, raw_entry in enumerate(fields.sequence(doc.get("entries", []), "entries")):
        entry = _read_entry(fields, rank, raw_entry, f"entries[{i}]")
        if entry is None:
            continue
        local_groups.setdefault(entry.group_name, entry.local_group)
        # only unfinished work says who is stuck; completed entries only inform local_groups
        if entry.state == "scheduled":
            entries.append(entry)
    return RankDump(rank, path, groups, progress, tuple(entries), local_groups)


def _read_entry(fields: _Fields, rank: int, raw: Any, where: str) -> FrEntry | None:
    entry = fields.mapping(raw, where)
    if "collective_seq_id" not in entry:  # not a c10d collective record; upstream skips these
        return None
    group = fields.sequence(entry.get("process_group"), f"{where}.process_group")
    if len(group) < 2:
        raise fields.fail(f"{where}.process_group", "expected (name, desc)")
    sizes = fields.sequence(entry.get("input_sizes", []), f"{where}.input_sizes")
    dtypes = fields.sequence(entry.get("input_dtypes", []), f"{where}.input_dtypes")
    return FrEntry(
        rank=rank,
        local_group=fields.integer(entry.get("pg_id"), f"{where}.pg_id"),
        group_name=str(group[0]),
        group_desc=str(group[1]),
        collective_seq=fields.integer(entry["collective_seq_id"], f"{where}.collective_seq_id"),
        p2p_seq=fields.integer(entry.get("p2p_seq_id", -1), f"{where}.p2p_seq_id"),
        op=fields.text(entry.get("profiling_name"), f"{where}.profiling_name"),
        state=fields.text(entry.get("state"), f"{where}.state"),
        input_sizes=tuple(
            tuple(
                fields.integer(d, f"{where}.input_sizes")
                for d in fields.sequence(s, f"{where}.input_sizes")
            )
            for s in sizes
        ),
        input_dtypes=tuple(str(d) for d in dtypes),
    )


def find_dump_files(path: Path, pattern: str = DEFAULT_PATTERN) -> list[Path]:
    """The dump files `path` names, as upstream's --fr-path: a directory (files in it matching
    `pattern`), one file, a glob, or a path prefix (`ckpt/_dump_` -> `ckpt/_dump_*`).
    Sorted by path string: upstream walks ranks in that order, and it decides ties."""
    if path.is_dir():
        candidates = glob.glob(os.path.join(glob.escape(str(path)), pattern))
    elif path.is_file():
        candidates = [str(path)]
    elif glob.has_magic(str(path)):
        candidates = glob.glob(str(path))
    else:
        candidates = glob.glob(glob.escape(str(path)) + "*")
        if not candidates:  # most likely a typo, not a dump directory that stayed empty
            raise FrError(f"{path}: no such file or directory, and no file starts with it")
    # glob (not pathlib) so that hidden files are left out as upstream leaves them out
    return [Path(p) for p in sorted(candidates) if os.path.isfile(p)]


def load_dumps(files: Sequence[Path]) -> list[RankDump]:
    """Read every file, in the given order; two files for one rank is an error."""
    dumps: list[RankDump] = []
    seen: dict[int, Path] = {}
    for path in files:
        dump = load_dump(path)
        if dump.rank in seen:
            raise FrError(
                f"{path}: rank {dump.rank} already has a dump ({seen[dump.rank].name}); "
                "narrow the file pattern"
            )
        seen[dump.rank] = path
        dumps.append(dump)
    return dumps


# --- analysis -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Window:
    """One group's entries consumed during one visit of the wavefront walk."""

    name: str
    desc: str
    index: int  # per group: 0, 1, ...
    position: int  # creation order over all windows: the walk order
    entries: tuple[FrEntry, ...]


@dataclass(frozen=True, slots=True)
class GroupFinding:
    """A process group (one window, or its windows merged) and the ranks it is missing."""

    name: str
    desc: str
    window: int
    position: int  # walk position of the (first) window
    op: str
    size: str  # first input shape of the window's first entry, dims joined by `x`
    dtype: str
    send_recv: bool
    identified: frozenset[int]  # took part and are not missing
    missing: frozenset[int]

    @property
    def label(self) -> str:
        """`desc,window`: the table's second column, and what a wavefront path holds once."""
        return f"{self.desc},{self.window}"

    @property
    def ranks(self) -> frozenset[int]:
        return self.identified | self.missing


@dataclass(frozen=True)
class FrResult:
    """The outcome of one analysis. `no_dumps`: no file matched at all (nothing to analyse)."""

    dump_files: tuple[Path, ...]
    dump_ranks: tuple[int, ...]
    windows: tuple[Window, ...] = ()
    groups_with_missing: tuple[GroupFinding, ...] = ()  # after merging, send/recv included
    reported: tuple[GroupFinding, ...] = ()  # the wavefront rows: no send/recv, sorted by name
    wavefront_exact: bool = True  # False: path budget exceeded, every group is reported
    notes: tuple[str, ...] = ()

    @property
    def no_dumps(self) -> bool:
        return not self.dump_files

    @property
    def missing_ranks(self) -> tuple[int, ...]:
        return tuple(sorted({r for g in self.reported for r in g.missing}))


def wavefront_windows(dumps: Sequence[RankDump]) -> list[Window]:
    """Split all ranks' in-flight entries into per-group windows (the upstream walk).

    Ranks are visited in the order of `dumps`; it decides ties between equally common groups
    and the order of entries inside a window."""
    queues = {d.rank: d.entries for d in dumps}
    next_index = dict.fromkeys(queues, 0)
    window_count: Counter[tuple[str, str]] = Counter()
    participants: dict[tuple[tuple[str, str], int], set[int]] = {}
    collected: dict[tuple[str, str, int], list[FrEntry]] = {}
    active_before: set[tuple[str, str]] = set()

    def heads() -> dict[int, tuple[str, str]]:
        return {
            rank: queue[next_index[rank]].group_key
            for rank, queue in queues.items()
            if next_index[rank] < len(queue)
        }

    current = heads()
    while current:
        group, _ = Counter(current.values()).most_common(1)[0]
        at_group = {rank for rank, key in current.items() if key == group}
        index = window_count[group]
        before = participants.get((group, index), set())
        coming_back = bool(before & at_group)
        new_batch = bool(before) and len(at_group - before) >= 2
        if group not in active_before and (coming_back or new_batch):
            window_count[group] += 1
            index = window_count[group]
        bucket = collected.setdefault((group[0], group[1], index), [])
        joined = participants.setdefault((group, index), set())
        progressed = True
        while progressed:  # round-robin: one entry per rank per pass, as upstream
            progressed = False
            for rank, queue in queues.items():
                i = next_index[rank]
                if i < len(queue) and queue[i].group_key == group:
                    bucket.append(queue[i])
                    next_index[rank] = i + 1
                    joined.add(rank)
                    progressed = True
        current = heads()
        active_before = set(current.values())
    return [
        Window(name, desc, index, position, tuple(entries))
        for position, ((name, desc, index), entries) in enumerate(collected.items())
    ]


def group_members(dumps: Sequence[RankDump]) -> dict[str, GroupConfig]:
    """The full group map: each dump lists only its own groups, so take the union."""
    members: dict[str, set[int]] = {}
    descs: dict[str, str] = {}
    for dump in dumps:
        for name, cfg in dump.groups.items():
            members.setdefault(name, set()).update(cfg.ranks)
            descs.setdefault(name, cfg.desc)
    return {name: GroupConfig(name, descs[name], tuple(sorted(r))) for name, r in members.items()}


def analyze_window(
    window: Window, dumps: Mapping[int, RankDump], groups: Mapping[str, GroupConfig]
) -> GroupFinding:
    """Who is missing from one window (step 3 of the module docstring)."""
    members = groups[window.name].ranks if window.name in groups else ()
    max_completed = max_enqueued = -1
    for entry in window.entries:
        status = dumps[entry.rank].progress.get(entry.local_group)
        if status is not None:
            max_completed = max(max_completed, status.last_completed)
            max_enqueued = max(max_enqueued, status.last_enqueued)
    present = {e.rank for e in window.entries}
    # work beyond what anyone completed says what the group is stuck in
    pending = Counter(e.op for e in window.entries if e.seq > max_completed)
    op = pending.most_common(1)[0][0] if pending else "Unknown"
    send_recv = _is_send_recv(op)
    if send_recv:
        missing = _unbalanced_peers(pending, members) - present
    else:
        fallback_local = window.entries[-1].local_group  # upstream's index for every member
        behind = set()
        for member in members:
            dump = dumps.get(member)
            if dump is None:
                continue
            status = dump.progress.get(dump.local_groups.get(window.name, fallback_local))
            if status is not None and status.last_enqueued < max_enqueued:
                behind.add(member)  # its host stopped enqueuing work on this group
        missing = (set(members) - present) | behind
    first = window.entries[0]
    return GroupFinding(
        name=window.name,
        desc=window.desc,
        window=window.index,
        position=window.position,
        op=op,
        size="x".join(str(d) for d in first.input_sizes[0]) if first.input_sizes else "N/A",
        dtype=first.input_dtypes[0] if first.input_dtypes else "N/A",
        send_recv=send_recv,
        identified=frozenset(present - missing),
        missing=frozenset(missing),
    )


_SEND = re.compile(r"nccl:send\s+(\d{1,9})->(\d{1,9})(?!\d)")
_RECV = re.compile(r"nccl:recv\s+(\d{1,9})<-(\d{1,9})(?!\d)")


def _unbalanced_peers(ops: Mapping[str, int], members: Sequence[int]) -> set[int]:
    """Global ranks on the short side of a send/recv direction (peers are group-local indices).

    Which directions get compared follows upstream: those with a send, and for a receive
    `b<-a` the opposite direction `b->a`. A receive whose sender never posted is thus no
    evidence on its own; matching that keeps the set of groups, and so the wavefront
    selection, identical to upstream's."""
    sends: Counter[tuple[int, int]] = Counter()
    recvs: Counter[tuple[int, int]] = Counter()
    compared: set[tuple[int, int]] = set()
    for op, count in ops.items():
        if m := _SEND.search(op):
            src, dst = int(m[1]), int(m[2])
            sends[(src, dst)] += count
            compared.add((src, dst))
        elif m := _RECV.search(op):
            dst, src = int(m[1]), int(m[2])
            recvs[(src, dst)] += count
            compared.add((dst, src))
    global_ranks = sorted(members)
    short: set[int] = set()
    for src, dst in compared:
        if recvs[(src, dst)] > sends[(src, dst)] and src < len(global_ranks):
            short.add(global_ranks[src])  # a receiver waits for a send never posted
        if sends[(src, dst)] > recvs[(src, dst)] and dst < len(global_ranks):
            short.add(global_ranks[dst])  # a send waits for a receive never posted
    return short


def merge_windows(findings: Sequence[GroupFinding]) -> list[GroupFinding]:
    """One finding per group: a rank identified in any window is not missing in the group.
    Groups keep the order of their first window with missing ranks."""
    by_group: dict[str, list[GroupFinding]] = {}
    for finding in findings:
        if finding.missing:
            by_group.setdefault(finding.name, []).append(finding)
    merged = []
    for windows in by_group.values():
        if len(windows) == 1:
            merged.append(windows[0])
            continue
        identified = frozenset().union(*(w.identified for w in windows))
        missing = frozenset().union(*(w.missing for w in windows)) - identified
        if missing:
            merged.append(replace(windows[0], identified=identified, missing=missing))
    return merged


def select_wavefront(groups: Sequence[GroupFinding]) -> tuple[list[GroupFinding], bool]:
    """The heads of the forward paths through groups sharing ranks (docstring, 5.).

    Returns the heads (in `groups` order) and whether the selection is exact; beyond
    MAX_PATHS paths every group is returned, flagged as not exact."""
    if not groups:
        return [], True
    neighbours = {
        g.name: [h for h in groups if h.position > g.position and h.ranks & g.ranks] for g in groups
    }
    paths: list[frozenset[str]] = []
    path_start: list[str] = []
    absorbed: set[str] = set()
    try:
        for start in sorted(groups, key=lambda g: -len(g.ranks)):  # stable: walk order
            if start.name in absorbed:
                continue
            for path in set(_maximal_paths(start, neighbours, MAX_PATHS - len(paths))):
                paths.append(path)
                path_start.append(start.name)
                absorbed |= path
    except _TooManyPaths:
        return list(groups), False
    containing: dict[str, set[int]] = {}
    for i, path in enumerate(paths):
        for name in path:
            containing.setdefault(name, set()).add(i)
    heads = set()
    for i, path in enumerate(paths):
        supersets = set.intersection(*(containing[name] for name in path))
        if not any(len(paths[j]) > len(path) for j in supersets):
            heads.add(path_start[i])
    return [g for g in groups if g.name in heads], True


class _TooManyPaths(Exception):
    pass


def _maximal_paths(
    start: GroupFinding, neighbours: Mapping[str, list[GroupFinding]], budget: int
) -> Iterator[frozenset[str]]:
    """Every forward path from `start` that holds each label once and cannot be extended."""
    emitted = 0
    stack: list[tuple[GroupFinding, tuple[str, ...], frozenset[str]]] = [
        (start, (start.name,), frozenset({start.label}))
    ]
    while stack:
        tail, names, labels = stack.pop()
        extensions = [n for n in neighbours[tail.name] if n.label not in labels]
        if not extensions:
            emitted += 1
            if emitted > budget:
                raise _TooManyPaths
            yield frozenset(names)
            continue
        for nxt in extensions:
            stack.append((nxt, (*names, nxt.name), labels | {nxt.label}))


def analyze(dumps: Sequence[RankDump], files: Sequence[Path] = ()) -> FrResult:
    """The whole analysis of loaded dumps (in upstream's walk order: sorted file paths)."""
    by_rank = {d.rank: d for d in dumps}
    groups = group_members(dumps)
    windows = wavefront_windows(dumps)
    merged = merge_windows([analyze_window(w, by_rank, groups) for w in windows])
    heads, exact = select_wavefront(merged)
    reported = sorted((g for g in heads if not g.send_recv), key=lambda g: _name_key(g.name))
    notes = () if exact else (f"more than {MAX_PATHS} wavefront paths: all groups reported",)
    return FrResult(
        dump_files=tuple(files) or tuple(d.path for d in dumps),
        dump_ranks=tuple(sorted(by_rank)),
        windows=tuple(windows),
        groups_with_missing=tuple(merged),
        reported=tuple(reported),
        wavefront_exact=exact,
        notes=notes,
    )


def _name_key(name: str) -> tuple[int, int, str]:
    return (0, int(name), "") if name.isdigit() and len(name) <= MAX_DIGITS else (1, 0, name)


def analyze_path(path: Path, pattern: str = DEFAULT_PATTERN) -> FrResult:
    """Find, load and analyse the dumps `path` names (see `find_dump_files`). No matching file
    gives a result with `no_dumps` set; an unreadable file raises FrError."""
    files = find_dump_files(Path(path), pattern)
    if not files:
        return FrResult(dump_files=(), dump_ranks=())
    return analyze(load_dumps(files), files)


# --- output -------------------------------------------------------------------------------------


def table(result: FrResult) -> str:
    """Upstream's `--emit-stdout` table; just the header when no rank is missing."""
    lines = [HEADER]
    for g in result.reported:
        ranks = ",".join(str(r) for r in sorted(g.missing))
        lines.append(
            f"{g.name:<6} | {g.label:<25} | {g.op:<10} | {g.size:<8} "
            f"{_ROW_GAP}| {g.dtype:<8} | {ranks}"
        )
    return "\n".join(lines) + "\n"


def to_json(result: FrResult) -> dict[str, Any]:
    """The table as data: `{groups: [{name, desc, window, op, size, dtype, missing}], ranks}`."""
    return {
        "groups": [
            {
                "name": g.name,
                "desc": g.desc,
                "window": g.window,
                "op": g.op,
                "size": g.size,
                "dtype": g.dtype,
                "missing": sorted(g.missing),
            }
            for g in result.reported
        ],
        "ranks": list(result.missing_ranks),
    }
