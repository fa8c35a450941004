"""Fault types and the experiment pool (`FAULT_TYPE:RANK:ITER:NODES`), as pure functions.

The pool is ordered by priority (docs/inject-loop.md). Every entry is validated
against the workload (rank within `nodes × GPUs per node`, nodes at least the workload's
minimum) with an error naming the entry; duplicates are reported, and kept only when asked.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from nvrx.campaign.errors import PoolError
from nvrx.display import some_of
from nvrx.files import InputError, lexically_under, read_bounded, within_root


class FaultType(enum.StrEnum):
    """The 12 validated faults of NVRx's injector (Megatron's fault_injector)."""

    GPU_ERROR = "GPU_ERROR"
    GPU_SLEEP = "GPU_SLEEP"
    WORKLOAD_EXC = "WORKLOAD_EXC"
    ASYNC_EXC = "ASYNC_EXC"
    SIGNAL_EXC = "SIGNAL_EXC"
    OS_ABORT = "OS_ABORT"
    LOCK_GIL = "LOCK_GIL"
    SEGFAULT = "SEGFAULT"
    SIGINT = "SIGINT"
    SIGKILL = "SIGKILL"
    SIGTERM = "SIGTERM"
    SIGSTOP = "SIGSTOP"

    @classmethod
    def parse(cls, text: str) -> FaultType:
        """Case-insensitive, as Megatron matches them."""
        try:
            return cls(text.strip().upper())
        except ValueError:
            known = ", ".join(f.value for f in cls)
            raise PoolError(f"unknown fault type {text!r} (known: {known})") from None


@dataclass(frozen=True, slots=True)
class Experiment:
    """One pool entry: inject `fault` on global `rank` after iteration `iteration`, on a job of
    `nodes` nodes. `copy` numbers duplicates kept with --allow-duplicates (0 for the first)."""

    fault: FaultType
    rank: int
    iteration: int
    nodes: int
    copy: int = 0

    @property
    def entry(self) -> str:
        return f"{self.fault.value}:{self.rank}:{self.iteration}:{self.nodes}"

    @property
    def dir_name(self) -> str:
        """`n<N>_<FAULT>_r<R>_i<I>` as upstream; a kept duplicate gets its own directory."""
        base = f"n{self.nodes}_{self.fault.value}_r{self.rank}_i{self.iteration}"
        return base if self.copy == 0 else f"{base}_dup{self.copy}"


# ASCII digits only: `\d` would read an Arabic-Indic `١` as a rank.
_ENTRY_RE = re.compile(r"^([A-Za-z_]+):(-?[0-9]+):(-?[0-9]+):(-?[0-9]+)$")
# No job has a billion ranks, iterations to fault at, or nodes: more digits is a typo (and past
# 4,300 digits, more than Python turns into a number).
MAX_ENTRY_DIGITS = 9
# A campaign of more experiments than this is a runaway generated pool, not a plan.
MAX_POOL_ENTRIES = 10_000


def parse_entry(text: str) -> Experiment:
    """`GPU_SLEEP:1:5:2` → Experiment. Errors name the entry and what is wrong with it."""
    m = _ENTRY_RE.match(text.strip())
    if m is None:
        shown = repr(text) if len(text) <= 60 else repr(text[:57]) + "..."
        raise PoolError(f"malformed pool entry {shown}: expected FAULT_TYPE:RANK:ITER:NODES")
    fault = FaultType.parse(m.group(1))
    for name, digits in zip(("rank", "iteration", "nodes"), m.groups()[1:], strict=True):
        if len(digits.lstrip("-")) > MAX_ENTRY_DIGITS:
            raise PoolError(
                f"pool entry {text[:60]!r}: {name} has more than {MAX_ENTRY_DIGITS} digits"
            )
    rank, iteration, nodes = (int(m.group(i)) for i in (2, 3, 4))
    if rank < 0:
        raise PoolError(f"pool entry {text!r}: rank {rank} is negative")
    if iteration < 0:
        raise PoolError(f"pool entry {text!r}: iteration {iteration} is negative")
    if nodes < 1:
        raise PoolError(f"pool entry {text!r}: nodes {nodes} must be at least 1")
    return Experiment(fault, rank, iteration, nodes)


def split_pool(text: str) -> list[str]:
    """Entries of a pool written in a string or a file: separated by whitespace or commas,
    `#` starts a comment to the end of the line."""
    entries: list[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        entries += [e for e in re.split(r"[\s,]+", line) if e]
    return entries


def check_experiment(e: Experiment, *, gpus_per_node: int, min_nodes: int, workload: str) -> None:
    total = e.nodes * gpus_per_node
    if e.nodes < min_nodes:
        raise PoolError(
            f"pool entry {e.entry}: {e.nodes} node(s) is below workload {workload}'s minimum of "
            f"{min_nodes}"
        )
    if e.rank >= total:
        raise PoolError(
            f"pool entry {e.entry}: rank {e.rank} is outside [0, {total}) "
            f"({e.nodes} nodes × {gpus_per_node} GPUs per node)"
        )


@dataclass(frozen=True)
class Pool:
    """The resolved, validated pool in priority order, and the duplicates found."""

    experiments: tuple[Experiment, ...]
    duplicates: tuple[str, ...] = ()


def build_pool(
    entries: Iterable[str],
    *,
    gpus_per_node: int,
    min_nodes: int,
    workload: str,
    allow_duplicates: bool = False,
) -> Pool:
    """Validate every entry; duplicates are an error unless `allow_duplicates` (then each copy
    gets its own directory)."""
    experiments: list[Experiment] = []
    seen: dict[str, int] = {}
    duplicates: list[str] = []
    for n, text in enumerate(entries, start=1):
        if n > MAX_POOL_ENTRIES:
            raise PoolError(f"the pool has more than {MAX_POOL_ENTRIES} entries")
        e = parse_entry(text)
        check_experiment(e, gpus_per_node=gpus_per_node, min_nodes=min_nodes, workload=workload)
        copies = seen.get(e.entry, 0)
        if copies:
            duplicates.append(e.entry)
            e = Experiment(e.fault, e.rank, e.iteration, e.nodes, copy=copies)
        seen[e.entry] = copies + 1
        experiments.append(e)
    if duplicates and not allow_duplicates:
        listed = ", ".join(sorted(set(duplicates)))
        raise PoolError(
            f"duplicate pool entries: {listed} (remove them, or pass --allow-duplicates to run "
            "each copy in its own directory)"
        )
    if not experiments:
        raise PoolError("the pool is empty")
    return Pool(tuple(experiments), tuple(duplicates))


# The upstream default pool (34 entries, in priority order: GPU faults, crashes, Python-level
# faults, signals).
DEFAULT_POOL = (
    "GPU_SLEEP:1:5:2 GPU_SLEEP:0:5:2 GPU_SLEEP:4:5:2 GPU_SLEEP:7:5:2 "
    "GPU_SLEEP:1:5:4 GPU_SLEEP:0:5:4 GPU_SLEEP:8:5:4 GPU_SLEEP:15:5:4 "
    "GPU_SLEEP:1:5:8 GPU_SLEEP:0:5:8 GPU_SLEEP:16:5:8 GPU_SLEEP:31:5:8 "
    "GPU_ERROR:1:5:2 GPU_ERROR:0:5:2 GPU_ERROR:1:5:4 GPU_ERROR:0:5:4 "
    "GPU_ERROR:1:5:8 GPU_ERROR:0:5:8 "
    "SIGKILL:1:5:2 SIGKILL:0:5:2 SIGKILL:1:5:4 SIGKILL:1:5:8 "
    "SEGFAULT:1:5:2 SEGFAULT:0:5:2 SEGFAULT:1:5:4 "
    "OS_ABORT:1:5:2 LOCK_GIL:1:5:2 LOCK_GIL:0:5:2 "
    "WORKLOAD_EXC:1:5:2 ASYNC_EXC:1:5:2 SIGTERM:1:5:2 SIGINT:1:5:2 SIGSTOP:1:5:2 "
    "SIGNAL_EXC:1:5:2"
)

# Named pools. `n3_super` is upstream's pools/n3_super_8node.txt, entry for entry ("n3_super
# minimum supported size is 8 nodes"): the GPU hang sweep, both GPU errors, one kill.
NAMED_POOLS: dict[str, str] = {
    "default": DEFAULT_POOL,
    "n3_super": (
        "GPU_SLEEP:1:5:8 GPU_SLEEP:0:5:8 GPU_SLEEP:16:5:8 GPU_SLEEP:31:5:8 "
        "GPU_ERROR:1:5:8 GPU_ERROR:0:5:8 SIGKILL:1:5:8"
    ),
    # CPU rehearsal on the local cluster (2 ranks per node): a hang, a crash, a signal and an
    # exception among them, on 2- and 4-node jobs.
    "quick": (
        "GPU_SLEEP:1:3:2 SEGFAULT:1:3:2 SIGKILL:0:3:2 WORKLOAD_EXC:1:3:2 "
        "GPU_SLEEP:5:3:4 OS_ABORT:2:3:4 SIGTERM:1:3:2 ASYNC_EXC:3:3:4"
    ),
}


def pool_entries(source: str, pools_dir: Path | None = None) -> list[str]:
    """A pool given as a name (`default`, `n3_super`, `quick`, or a file of `pools_dir`: the
    `pools/` of upstream's scripts, `n3_super_8n_16n.pool`), a file (comments allowed) or the
    entries themselves (`GPU_SLEEP:1:5:2 SIGKILL:0:5:2`)."""
    text = source.strip()
    if text in NAMED_POOLS:
        return split_pool(NAMED_POOLS[text])
    path = Path(text).expanduser()
    if pools_dir is not None and "/" not in text and ":" not in text and text:
        named = pools_dir / text
        path = named if named.is_file() else path
    try:
        is_file = path.is_file()
    except OSError:  # an inline pool longer than a file name can be (ENAMETOOLONG)
        is_file = False
    if is_file:
        try:
            # A file of the pools folder (by name, or a registry's pool column) is read on the
            # folder's behalf: it may not lead out of it (files.within_root).
            if pools_dir is not None and lexically_under(path, pools_dir):
                path = within_root(path, pools_dir, "pool file")
            data, _ = read_bounded(path, "pool file")
            return _file_entries(data.decode("utf-8"), path)
        except InputError as exc:
            raise PoolError(str(exc)) from None
        except UnicodeDecodeError as exc:
            raise PoolError(f"pool file {path} is not UTF-8 text (byte {exc.start})") from None
    words = split_pool(text)
    if "/" in text or (len(words) == 1 and ":" not in words[0]):
        names = some_of([*NAMED_POOLS, *(pool_files(pools_dir))])
        shown = repr(source) if len(source) <= 80 else repr(source[:77]) + "..."
        raise PoolError(f"pool {shown} is not a pool name ({names}), a file or entries")
    return words


def _file_entries(text: str, path: Path) -> list[str]:
    """A pool file's entries, each checked where it stands: a bad one is named by line and
    position, never quoted (a file's content is not echoed: it may be anything)."""
    entries: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        for k, entry in enumerate(split_pool(line), start=1):
            try:
                parse_entry(entry)
            except PoolError:
                m = _ENTRY_RE.match(entry.strip())
                if m is None:
                    why = "is not FAULT_TYPE:RANK:ITER:NODES"
                elif m.group(1).upper() not in FaultType.__members__:
                    known = ", ".join(f.value for f in FaultType)
                    why = f"names no known fault type (known: {known})"
                else:
                    why = "has a number out of range"
                raise PoolError(f"pool file {path} line {number}: entry {k} {why}") from None
            entries.append(entry)
    return entries


def pool_files(pools_dir: Path | None) -> list[str]:
    if pools_dir is None or not pools_dir.is_dir():
        return []
    return sorted(p.name for p in pools_dir.iterdir() if p.is_file())


def at_iterations(entries: list[str], iterations: list[int]) -> list[str]:
    """Each entry at each of `iterations` (the iteration dimension of the sweep), in pool order,
    each once: `SIGKILL:1:5:2` at 2 and 10 is `SIGKILL:1:2:2 SIGKILL:1:10:2`."""
    out: dict[str, None] = {}
    for entry in entries:
        parts = entry.split(":")
        if len(parts) != 4:
            out[entry] = None  # build_pool names what is wrong with it
            continue
        for iteration in iterations:
            out[":".join((parts[0], parts[1], str(iteration), parts[3]))] = None
    return list(out)
