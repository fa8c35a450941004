"""The next code-change iteration of a campaign, as the upstream skill sweeps: (1) the full pool;
(2) the cells that failed; (3) the cells still failing, each also at FAULT_AT_ITER 2 and 10
(the iteration dimension); (4) the cells still failing, plus SEGFAULT and LOCK_GIL on 4 and 8 nodes;
then the failing cells again, until the stop rule holds. A session's iteration is its place
among the sessions beside it (they sort by time). Pure but for reading the session's journal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nvrx.campaign.pool import at_iterations
from nvrx.config import STOP_DIMENSIONS
from nvrx.display import counted
from nvrx.inject.report import older_sessions, rows_and_stop
from nvrx.inject.rows import failing_entries

SWEEP_ITERATIONS = (2, 10)
# Iteration 4's wider cells: crash and hang classes the default pool runs on 2 nodes only.
WIDER = tuple(f"{fault}:1:5:{nodes}" for fault in ("SEGFAULT", "LOCK_GIL") for nodes in (4, 8))


@dataclass(frozen=True)
class NextIteration:
    iteration: int  # the iteration proposed (the session's own + 1)
    why: str
    entries: tuple[str, ...]  # empty: nothing left to run (the stop rule holds)


def iteration_of(session_dir: Path) -> int:
    """The session's place (1-based) among the sessions beside it."""
    return len(older_sessions(session_dir.resolve())) + 1


def next_iteration(session_dir: Path, dimensions: Sequence[str] = STOP_DIMENSIONS) -> NextIteration:
    rows, (met, why_stop, _) = rows_and_stop(session_dir, dimensions=dimensions)
    nxt = iteration_of(session_dir) + 1
    if met:
        return NextIteration(nxt, f"nothing to run: the stop condition is met ({why_stop})", ())
    failing = failing_entries(rows, dimensions)
    if not failing:
        every = list(dict.fromkeys(r.record.experiment.entry for r in rows))
        why = "every cell passes: the same cells again (the stop rule needs two in a row)"
        return NextIteration(nxt, why, tuple(every))
    cells = f"the {counted(len(failing), 'failing cell')}"
    if nxt == 2:
        return NextIteration(nxt, cells, tuple(failing))
    if nxt == 3:
        at = " and ".join(map(str, SWEEP_ITERATIONS))
        entries = [e for f in failing for e in (f, *at_iterations([f], list(SWEEP_ITERATIONS)))]
        entries = list(dict.fromkeys(entries))
        return NextIteration(nxt, f"{cells} at FAULT_AT_ITER {at}", tuple(entries))
    if nxt == 4:
        entries = list(dict.fromkeys([*failing, *WIDER]))
        why = f"{cells}, and SEGFAULT and LOCK_GIL on 4 and 8 nodes"
        return NextIteration(nxt, why, tuple(entries))
    return NextIteration(nxt, cells, tuple(failing))
