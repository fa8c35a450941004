"""The array shape of one generation and the pre-flight checks: pure functions of the settings.

active = train + hot spares (the `%` throttle), total = active + cold spares,
`--array=0-(total-1)%active`, `ft_launcher --nnodes MIN:MAX` with MIN = train × nodes per task
and MAX = active × nodes per task, world size = MIN × GPUs per node (reference:
docs/submit-chain.md). Hot spares never enlarge the world.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nvrx.slurm.ids import format_array_spec


class ChainError(Exception):
    """A chain cannot be built or submitted as asked; one line for the user."""

    exit_code = 2  # bad input


def drain_poll_on(setting: str, spares: int) -> bool:
    """Whether a generation runs the drain poller (`chain.drain_poll`): `auto` is on when the
    chain has spares (`spares`, hot and cold) to take a drained task's place, and off when a
    drained task could only end the generation."""
    if setting == "auto":
        return spares > 0
    return setting == "on"


@dataclass(frozen=True, slots=True)
class ArrayShape:
    """The job-array shape of one generation."""

    train_tasks: int
    hot_spares: int
    cold_spares: int
    nodes_per_task: int
    gpus_per_node: int

    def __post_init__(self) -> None:
        if self.train_tasks < 1:
            raise ChainError(f"train tasks must be at least 1, got {self.train_tasks}")
        for name in ("hot_spares", "cold_spares"):
            if getattr(self, name) < 0:
                raise ChainError(
                    f"{name.replace('_', ' ')} must be >= 0, got {getattr(self, name)}"
                )
        if self.nodes_per_task < 1:
            raise ChainError(f"nodes per task must be at least 1, got {self.nodes_per_task}")
        if self.gpus_per_node < 1:
            raise ChainError(f"GPUs per node must be at least 1, got {self.gpus_per_node}")

    @property
    def active(self) -> int:
        """Tasks running at once: the array's `%` throttle."""
        return self.train_tasks + self.hot_spares

    @property
    def total(self) -> int:
        return self.active + self.cold_spares

    @property
    def array_spec(self) -> str:
        return format_array_spec(0, self.total - 1, self.active)

    @property
    def min_nodes(self) -> int:
        return self.train_tasks * self.nodes_per_task

    @property
    def max_nodes(self) -> int:
        return self.active * self.nodes_per_task

    @property
    def nnodes(self) -> str:
        """`ft_launcher --nnodes` value."""
        return f"{self.min_nodes}:{self.max_nodes}"

    @property
    def world_size(self) -> int:
        return self.min_nodes * self.gpus_per_node

    def check_max_array_size(self, max_array_size: int) -> None:
        # Slurm's MaxArraySize bounds the index: the largest index must be below it.
        if self.total > max_array_size:
            raise ChainError(
                f"{self.total} array tasks exceed the cluster's MaxArraySize {max_array_size}: "
                "lower the cold spares, or submit a deeper chain instead of a deeper pool"
            )

    def check_segment(self, segment: int | None) -> None:
        if segment is not None and self.min_nodes % segment != 0:
            raise ChainError(
                f"segment {segment} does not divide the {self.min_nodes} training nodes; "
                "set chain.segment to a divisor, or empty on systems without a GPU ClusterUUID"
            )


@dataclass(frozen=True, slots=True)
class Parallelism:
    """A model profile's parallel layout and default batch sizes (nvrx's own profiles)."""

    tensor_parallel: int
    pipeline_parallel: int
    micro_batch_size: int
    global_batch_per_gpu: int  # default global batch = this × world size

    def data_parallel(self, world_size: int) -> int:
        model_parallel = self.tensor_parallel * self.pipeline_parallel
        if world_size % model_parallel != 0:
            raise ChainError(
                f"world size {world_size} is not a multiple of tensor × pipeline parallel "
                f"{model_parallel}"
            )
        return world_size // model_parallel


PROFILES: dict[str, Parallelism] = {
    "small": Parallelism(
        tensor_parallel=1, pipeline_parallel=1, micro_batch_size=1, global_batch_per_gpu=1
    ),
    "8b": Parallelism(
        tensor_parallel=1, pipeline_parallel=1, micro_batch_size=1, global_batch_per_gpu=2
    ),
}


def batch_sizes(
    layout: Parallelism, world_size: int, micro: int | None, global_: int | None
) -> tuple[int, int]:
    """(micro, global) batch sizes; the global batch must be divisible by micro × data parallel."""
    micro = micro or layout.micro_batch_size
    global_ = global_ or layout.global_batch_per_gpu * world_size
    dp = layout.data_parallel(world_size)
    if global_ % (micro * dp) != 0:
        raise ChainError(
            f"global batch size {global_} is not divisible by micro batch {micro} × data "
            f"parallel {dp} (world size {world_size})"
        )
    return micro, global_


def node_local_roots() -> list[Path]:
    """Directories that exist on one node only: the rendezvous host is published through the
    work dir, so a work dir there is invisible to the other nodes. ($TMPDIR is not among them:
    sites point it at shared storage as often as not.)"""
    roots = {Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")}
    return sorted({Path(os.path.realpath(r)) for r in roots})


def check_work_dir(work_dir: Path) -> Path:
    """The work dir, absolute with links resolved; refused when it is node-local."""
    resolved = Path(os.path.realpath(work_dir.expanduser()))
    for root in node_local_roots():
        if resolved == root or root in resolved.parents:
            raise ChainError(
                f"work dir {work_dir} looks node-local (it resolves under {root}); "
                "use a directory on a filesystem every node shares"
            )
    # Found now, not after the script is rendered (and, with --dry-run, not at all).
    existing = next(p for p in (resolved, *resolved.parents) if p.exists())
    if not existing.is_dir():
        raise ChainError(f"cannot use work dir {work_dir}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ChainError(f"cannot use work dir {work_dir}: {existing} is not writable")
    return resolved
