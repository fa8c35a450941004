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

from nvrx.campaign.errors import PoolError
from nvrx.display import counted


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
ENTRY_RE = re.compile(r"^([A-Za-z_]+):(-?[0-9]+):(-?[0-9]+):(-?[0-9]+)$")
# No job has a billion ranks, iterations to fault at, or nodes: more digits is a typo (and past
# 4,300 digits, more than Python turns into a number).
MAX_ENTRY_DIGITS = 9
# A campaign of more experiments than this is a runaway generated pool, not a plan.
MAX_POOL_ENTRIES = 10_000


def parse_entry(text: str) -> Experiment:
    """`GPU_SLEEP:1:5:2` → Experiment. Errors name the entry and what is wrong with it."""
    m = ENTRY_RE.match(text.strip())
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
            f"pool entry {e.entry}: {counted(e.nodes, 'node')} is below workload {workload}'s "
            f"minimum of {min_nodes}"
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
