"""Which planned experiments the campaign window submits next: a pure function of the pool, the
free slots and the partition's idle nodes.

Pool order is the priority. `strict` (and `barrier`) submit the head of the pool and nothing
else. `node-aware` avoids head-of-line blocking: when the head needs more nodes than are idle,
entries that fit the idle nodes now, from the next `look_ahead` of the pool, may go first, in
pool order, up to the free slots. The head is passed over in one decision only; from then on it
is next whatever it waits for, and goes into Slurm's queue at the next free slot, where the
scheduler starts it the moment its nodes are free (no starvation: nothing overtakes it twice).
When nothing within the look-ahead fits either, the head goes into the queue at once, as in
strict order. Idle nodes that could not be read mean strict order: a blind window never guesses.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from dataclasses import dataclass


class WindowMode(enum.StrEnum):
    NODE_AWARE = "node-aware"
    STRICT = "strict"
    BARRIER = "barrier"  # upstream's batches: strict order, and wait for the whole batch


@dataclass(frozen=True)
class Window:
    """The campaign window: jobs of the session in Slurm at once, how the next one is chosen,
    and how far down the pool a node-aware choice looks (the config's defaults)."""

    size: int
    mode: WindowMode = WindowMode.NODE_AWARE
    look_ahead: int = 8


@dataclass(frozen=True, slots=True)
class Waiting:
    """A planned experiment: its pool index (its priority) and the nodes its job needs."""

    index: int
    nodes: int


@dataclass(frozen=True, slots=True)
class Submit:
    """One experiment to submit now; `ahead_of` names the blocked head it goes before."""

    index: int
    ahead_of: int | None = None


def choose(
    planned: Sequence[Waiting],
    free_slots: int,
    idle_nodes: int | None,
    *,
    mode: WindowMode,
    look_ahead: int,
    passed_over: Collection[int] = (),
) -> list[Submit]:
    """What to submit now, in order. `planned` is in pool order; `idle_nodes` is what the
    partition has free for this session (its own pending jobs already taken off), None when
    unknown; `passed_over` holds the heads already overtaken once (the journal's `ahead_of`)."""
    if free_slots <= 0 or not planned:
        return []
    if mode is not WindowMode.NODE_AWARE or idle_nodes is None:
        return [Submit(w.index) for w in planned[:free_slots]]
    out: list[Submit] = []
    queue = list(planned)  # what is still to decide, in pool order
    idle = idle_nodes
    while len(out) < free_slots and queue:
        head = queue[0]
        if head.nodes <= idle:
            out.append(Submit(head.index))
            idle -= head.nodes
            queue.pop(0)
            continue
        if head.index in passed_over:
            # Its turn: into Slurm's queue, whose scheduler starts it as soon as it fits.
            out.append(Submit(head.index))
            break
        slots = free_slots - len(out)
        ahead: list[int] = []
        for position in range(1, min(len(queue), look_ahead + 1)):
            if len(ahead) == slots:
                break
            if queue[position].nodes <= idle:
                ahead.append(position)
                idle -= queue[position].nodes
        if not ahead:
            out.append(Submit(head.index))  # nothing fits sooner: strict order
            break
        out += [Submit(queue[p].index, ahead_of=head.index) for p in ahead]
        break  # the head is passed over once; it is next at the next free slot
    return out
