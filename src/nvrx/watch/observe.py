"""One pass's observation: cycle-info files, the checkpoint file and Slurm, into a Snapshot.

Slurm costs at most one squeue (the chains' generations, by name and user), one sinfo (the
drained nodes) and one sacct (task-0 endings in the churn window) per pass, plus one targeted
sacct only when a generation lost its task 0 longer ago than that window, for one chain or a
fleet of them. A failed query is
recorded in the snapshot, never read as "nothing running" (docs/slurm-adapter.md).

One module: every read of a pass shares one budget of Slurm queries and one snapshot, the
no-restart evidence (flag file, exit 93) is read beside the accounting it corrects, and what a
reader's failure makes of the pass (blind, or a value kept) is decided beside the reader.
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

from nvrx.config import WatchSettings
from nvrx.files import InputError, InputTooLarge, lexically_under, read_bounded, within_root
from nvrx.slurm import DrainedNode, JobState, QueueRow, Slurm, SlurmError, SlurmValueError, expand
from nvrx.slurm.parse import AccountingRow
from nvrx.watch.cyclecache import CycleCache
from nvrx.watch.cycles import (
    NOT_CYCLE_FILE_REASONS,
    ROUTINE_SKIP_REASONS,
    CycleRead,
    read_cycles,
    save_cache,
)
from nvrx.watch.model import (
    Checkpoint,
    CycleInfo,
    Cycles,
    Generation,
    GenerationSpan,
    Platform,
    SkippedFile,
    Snapshot,
    TaskZeroEnding,
    to_us,
)
from nvrx.watch.resolve import Target, work_dir_globs
from nvrx.watch.state import WatchState

RowT = TypeVar("RowT", QueueRow, AccountingRow)
_CHECKPOINT_CAP = 4096
# Cycle starts further ahead of this host's clock than this are a skewed writer, not news.
FUTURE_TOLERANCE = 300.0


def read_checkpoint(
    path: str | None,
    state: WatchState,
    now: datetime,
    save_every: int | None = None,
    work_dir: str | None = None,
) -> Checkpoint:
    """The checkpoint iteration (one integer) and its mtime; the state remembers since when
    the value is unchanged. A missing file is no value, not an error. A file that cannot be read
    right now (being rewritten, unreadable) keeps the last value seen, with the error noted.
    A path inside the chain's `work_dir` is read on its behalf: a link out of it is refused
    (`files.within_root`; a checkpoint dir on scratch is named by `limits.allowed_roots`)."""
    if path is None:
        return Checkpoint(None)
    interval = state.save_interval_seconds(save_every)
    try:
        if work_dir and os.path.lexists(path) and lexically_under(path, work_dir):
            path = str(within_root(path, work_dir, "checkpoint file"))
        raw, st = read_bounded(path, "checkpoint file", limit=_CHECKPOINT_CAP, regular_only=True)
    except InputTooLarge:
        return _last_known(path, state, "not an integer (too large)", interval)
    except InputError as exc:
        if exc.errno == errno.ENOENT:
            if not state.saves:
                state.unsaved_until = now  # goodput: no save had been made by now
            return Checkpoint(path, save_interval_seconds=interval)
        reason = f"unreadable: {os.strerror(exc.errno)}" if exc.errno else exc.reason
        return _last_known(path, state, reason, interval)
    mtime = datetime.fromtimestamp(st.st_mtime, UTC)
    if raw.strip() == b"release":
        # Megatron's marker of a released checkpoint (one with no iteration): for progress the
        # same as no checkpoint yet, as upstream's reader takes it.
        state.see_checkpoint_text(None, now)
        if not state.saves:
            state.unsaved_until = now
        return Checkpoint(path, save_interval_seconds=interval, released=True)
    try:
        digits = raw.decode("ascii").strip()
        # What Megatron writes: ASCII digits (int() would take `1_000_000`, `+5` or ` 7 `).
        if not (digits.isdigit() and len(digits) <= 30):
            raise ValueError(digits)
        value = int(digits)
    except (UnicodeDecodeError, ValueError):
        # Said by its size, never quoted, and remembered by a digest: the file may be anything
        # (a link to a key file), and the state and every message would carry it.
        text = f"sha256:{hashlib.sha256(raw).hexdigest()[:16]}"
        since = state.see_checkpoint_text(text, now)
        if since is None:  # first seen: maybe caught mid-write; the next pass tells
            return _last_known(path, state, "not an integer (being written?)", interval)
        what = f"not an integer ({len(raw)} bytes, unchanged since {since:%Y-%m-%d %H:%M:%S} UTC)"
        return replace(_last_known(path, state, what, interval), not_integer_since=since)
    state.see_checkpoint_text(None, now)
    state.see_checkpoint(value, mtime, now)
    return Checkpoint(
        path,
        value=value,
        mtime=mtime,
        first_seen=state.checkpoint_first_seen,
        save_interval_seconds=state.save_interval_seconds(save_every),
    )


def _last_known(path: str, state: WatchState, error: str, interval: float | None) -> Checkpoint:
    return Checkpoint(
        path,
        value=state.checkpoint_value,
        first_seen=state.checkpoint_first_seen,
        save_interval_seconds=interval,
        error=error,
    )


def _ours(row_comment: str, job_id: str, target: Target) -> bool:
    """A row of the watched chain: by chain id when there is one (another chain may share the
    name), else every job of the name and user."""
    chain = target.chain
    if chain.chain_id is None:
        return True
    return row_comment.startswith(f"nvrx-chain={chain.chain_id} ") or (
        job_id in chain.manifest_job_ids
    )


def _generations(rows: list[QueueRow], target: Target) -> tuple[Generation, ...]:
    tasks: dict[str, dict[int, JobState]] = {}
    nodes: dict[str, dict[int, tuple[str, ...]]] = {}
    user = target.chain.user
    for row in rows:
        if (user and row.user != user) or not _ours(row.comment, row.array_job_id, target):
            continue
        index = row.task_id if row.task_id is not None else 0
        tasks.setdefault(row.array_job_id, {})[index] = row.state
        if row.state is JobState.RUNNING and row.nodes:
            nodes.setdefault(row.array_job_id, {})[index] = tuple(expand(row.nodes))
    return tuple(
        Generation(job, states, nodes.get(job, {})) for job, states in sorted(tasks.items())
    )


def _flagged(target: Target, job_id: str) -> bool:
    """The generation's no-restart flag file exists (written by whichever node's launcher exited
    with the verdict: task 0's own exit code may arrive as 143, or its trap's cancel of its own
    array may leave CANCELLED 0:0 in accounting)."""
    work = target.chain.work_dir
    return work is not None and (Path(work) / "nvrx" / job_id / "control" / "no_restart").exists()


def _no_restart(row: AccountingRow, target: Target) -> bool:
    """Task 0 ended on the no-restart verdict: its exit code, or the generation's flag file."""
    code = row.exit.code if row.exit is not None else None
    return code == target.chain.no_restart_exit_code or _flagged(target, row.array_job_id)


def _ending(row: AccountingRow, target: Target) -> TaskZeroEnding:
    return TaskZeroEnding(
        job_id=row.array_job_id,
        state=row.state,
        end=row.end,
        exit=row.exit,
        no_restart=_no_restart(row, target),
    )


def _task_zero_endings(
    rows: list[AccountingRow], target: Target, known: set[str]
) -> list[TaskZeroEnding]:
    """Task-0 rows that ended: `<arr>_0` (or a plain job), never a pending `<arr>_[..]` range."""
    return [_ending(r, target) for r in _task_zero_rows(rows, target, known) if r.state.is_terminal]


def _task_zero_rows(
    rows: list[AccountingRow], target: Target, known: set[str]
) -> list[AccountingRow]:
    """The chain's task-0 rows (`<arr>_0` or a plain job; never a pending `<arr>_[..]` range);
    with a chain id, only those of generations it knows."""
    return [
        r
        for r in rows
        if not r.is_pending_range
        and r.task_id in (0, None)
        and (target.chain.chain_id is None or r.array_job_id in known)
    ]


def observe_platforms(
    targets: Sequence[Target], slurm: Slurm, settings: WatchSettings, now: datetime
) -> list[Platform]:
    """Every chain's generations and task-0 endings for one squeue and one sacct (task-0
    endings in the churn window), plus one sacct only when some generation lost its task 0
    longer ago than that window, and one sinfo (the drained nodes): whatever the number of
    chains. One Platform per target."""
    names = [t.chain.name for t in targets if t.chain.name is not None]
    assert len(names) == len(targets), "a Slurm chain has a job name (resolve checks it)"
    # Every user's jobs when any chain has no user; the rows are split by name and user below.
    owners = [t.chain.user for t in targets]
    users = None if not all(owners) else [u for u in owners if u]
    try:
        rows = slurm.queue(name=names, user=users)
    except (SlurmError, SlurmValueError) as exc:
        return [Platform(queue_ok=False, queue_error=str(exc)) for _ in targets]
    try:
        drained: tuple[DrainedNode, ...] | None = tuple(slurm.drained_nodes())
        drained_error = None
    except (SlurmError, SlurmValueError) as exc:
        drained, drained_error = None, str(exc)
    by_name = _by_name(rows)
    generations = [
        _generations(by_name.get(name, []), t) for name, t in zip(names, targets, strict=True)
    ]
    known = [
        set(t.chain.manifest_job_ids) | {g.job_id for g in gens}
        for t, gens in zip(targets, generations, strict=True)
    ]
    try:
        acct = slurm.accounting(
            name=names, user=users, since=now - timedelta(seconds=settings.churn_window)
        )
        acct_by_name = _by_name(acct)
        mine = [
            _of_user(acct_by_name.get(name, []), t) for name, t in zip(names, targets, strict=True)
        ]
        endings = [
            _task_zero_endings(rows_, t, k)
            for rows_, t, k in zip(mine, targets, known, strict=True)
        ]
        spans = [_spans(rows_, t, k) for rows_, t, k in zip(mine, targets, known, strict=True)]
        # A generation whose task 0 left the queue longer ago than the window: ask for it.
        missing = [
            [
                g.job_id
                for g in gens
                if not g.task0_live and g.job_id not in {e.job_id for e in ends}
            ]
            for gens, ends in zip(generations, endings, strict=True)
        ]
        if any(missing):
            late = slurm.accounting([j for ids in missing for j in ids])
            for i, ids in enumerate(missing):
                if ids:
                    wanted = set(ids)
                    theirs = [r for r in late if r.array_job_id in wanted]
                    endings[i] += _task_zero_endings(theirs, targets[i], known[i] | wanted)
                    spans[i] += _spans(theirs, targets[i], known[i] | wanted)
    except (SlurmError, SlurmValueError) as exc:
        return [
            Platform(
                queue_ok=True,
                accounting_ok=False,
                accounting_error=str(exc),
                generations=g,
                drained=drained,
                drained_error=drained_error,
            )
            for g in generations
        ]
    return [
        Platform(
            queue_ok=True,
            generations=g,
            endings=tuple(e),
            spans=tuple(s),
            accounting_window=settings.churn_window,
            drained=drained,
            drained_error=drained_error,
        )
        for g, e, s in zip(generations, endings, spans, strict=True)
    ]


def _spans(rows: list[AccountingRow], target: Target, known: set[str]) -> list[GenerationSpan]:
    """When each generation's task 0 started and ended, whatever its state, and whether it
    ended on the no-restart verdict (goodput: its last cycle did not train to the end)."""
    return [
        GenerationSpan(
            r.array_job_id,
            r.start,
            r.end,
            r.state,
            r.exit,
            no_restart=r.state.is_terminal and _no_restart(r, target),
        )
        for r in _task_zero_rows(rows, target, known)
    ]


def _by_name(rows: Sequence[RowT]) -> dict[str, list[RowT]]:
    out: dict[str, list[RowT]] = {}
    for row in rows:
        out.setdefault(row.name, []).append(row)
    return out


def _of_user(rows: list[AccountingRow], target: Target) -> list[AccountingRow]:
    user = target.chain.user
    return [r for r in rows if not user or r.user == user]


def observe(
    target: Target,
    slurm: Slurm | None,
    settings: WatchSettings,
    state: WatchState,
    cache: CycleCache | None,
    *,
    host: str,
    now: datetime | None = None,
    platform: Platform | None = None,
    read: CycleRead | None = None,
) -> Snapshot:
    """The chain's snapshot; `platform` when a fleet pass already asked Slurm for it, `read`
    when it already read the cycle files with `cache` (unsaved: saved here)."""
    now = now or datetime.now(UTC)
    if read is None:
        cycles, skipped, stats = read_cycles(list(target.cycle_globs), cache)
    else:
        cycles, skipped, stats = read
        if cache is not None:
            save_cache(cache, stats)
    limit = to_us(now) + int(FUTURE_TOLERANCE * 1e6)
    future: list[CycleInfo] = []
    if any(b.summary.last[0] > limit for b in cycles.blocks):  # a block's last starts last
        # A writer whose clock runs ahead must not own "the latest cycle" (nor start storms).
        future = [c for c in cycles if to_us(c.start) > limit]
        cycles = Cycles.of(c for c in cycles if to_us(c.start) <= limit)
        skipped += [
            SkippedFile(c.path, "start time in the future (the writer's clock ahead?)")
            for c in future
        ]
    latest = cycles[-1] if cycles else None
    current = latest.job_id if latest is not None else None
    checkpoint = read_checkpoint(
        target.checkpoint_path(current),
        state,
        now,
        target.chain.save_interval_iterations,
        target.chain.work_dir,
    )
    drops = state.see_counters(None if checkpoint.error else checkpoint.value, cycles)
    if platform is None and slurm is not None:
        platform = observe_platforms([target], slurm, settings, now)[0]
    # Without accounting, the flag file alone tells how the chain's last generation ended.
    verdicts = frozenset(
        [latest.job_id]
        if platform is None and latest is not None and latest.end is not None
        and _flagged(target, latest.job_id)
        else []
    )  # fmt: skip
    return Snapshot(
        observed_at=now,
        host=host,
        chain=target.chain,
        cycles=cycles,
        checkpoint=checkpoint,
        platform=platform,
        # The .current pointer of every generation is skipped on every pass: not news.
        skipped=tuple(s for s in skipped if s.reason not in ROUTINE_SKIP_REASONS),
        notes=(f"cycle cache: {stats.cache_error}",) if stats.cache_error else (),
        cycles_blind=_blind_location(target, skipped)
        or _blind_reader(cycles, skipped, stats.unreadable + len(future)),
        counter_drops=tuple(drops),
        no_restart_flags=verdicts,
    )


def _blind_reader(cycles: Cycles, skipped: list[SkippedFile], unusable: int) -> str | None:
    """Cycle files exist but not one could be used (a format this reader does not know, every
    file truncated or unreadable, every start in the future): the watcher sees nothing, and
    must not call that healthy."""
    if cycles or not unusable:
        return None
    first = next(s for s in skipped if s.reason not in NOT_CYCLE_FILE_REASONS)
    if unusable == 1:
        return f"the only cycle-info file could not be used ({first.path}: {first.reason})"
    return (
        f"none of the {unusable} cycle-info files could be used "
        f"(first: {first.path}: {first.reason})"
    )


def _blind_location(target: Target, skipped: list[SkippedFile]) -> str | None:
    """Why the cycle files' location cannot be read, if it cannot. A generation directory that
    does not exist yet (a chain still pending) is not blindness; a work dir that is missing or
    unreadable (not mounted on this login node, no permission) is, and so is one with neither a
    chain manifest nor an `nvrx/` directory (a --work-dir that does not exist at all is bad
    input, refused before the pass: `resolve`)."""
    work = target.chain.work_dir
    if work is not None and not os.access(work, os.R_OK | os.X_OK):
        return f"{work}: " + ("not found" if not os.path.exists(work) else "not readable")
    if (
        work is not None
        and target.chain.resolved_from == "work dir"
        and target.cycle_globs == work_dir_globs(Path(work))
        and not os.path.isdir(os.path.join(work, "nvrx"))
    ):
        # No manifest to say a chain is pending here, and no generation ever wrote here: the
        # wrong directory (a parent of the work dir?), or files this watcher cannot find.
        return f"{work}: no chain manifest and no nvrx/ directory (not a chain's work dir?)"
    for skip in skipped:
        reason = skip.reason
        if reason.startswith(("directory not readable", "symlink loop", "not a directory")):
            return f"{skip.path}: {reason}"
        if reason == "directory not found" and not os.path.isdir(os.path.dirname(skip.path)):
            return f"{skip.path}: {reason} (nor its parent)"
    return None
