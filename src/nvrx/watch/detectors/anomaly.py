"""Restart-anomaly detectors: what the cycle files say (the platform only gates them).

One module for the six, because they read one window of one generation's cycles the same way
(ordered by start, gated by the queue, durations against `observed_at`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from datetime import datetime

from nvrx.config import WatchSettings
from nvrx.display import counted
from nvrx.slurm.hostlist import compress
from nvrx.watch.detectors.common import (
    EPS,
    current_live,
    cycle_log_file,
    cycle_log_note,
    cycle_seconds,
    drain_state,
    human_seconds,
    iso_time,
    queue_gate,
    queue_read,
    seconds_running,
    seconds_since,
    utc_text,
)
from nvrx.watch.model import CycleInfo, DrainNode, Finding, Severity, Snapshot, to_us


def restart_storm(snap: Snapshot, cfg: WatchSettings) -> list[Finding]:
    """Many cycles of the current generation started in a short window.

    Fires when at least `storm_cycles` cycles of the current generation (the job of the latest
    cycle) started within `storm_window` before `observed_at` (`observed_at - start <=
    storm_window`; a start in the future counts as recent).

    Improvement over upstream (after Kubernetes' crash-loop backoff reset): a long healthy
    run resets the counter. A cycle is healthy when it ran at least `healthy_cycle_seconds`
    (completed: end - start; the latest cycle while open: observed_at - start). Cycles that
    started before the end of the most recent healthy cycle do not count (a start exactly at that
    end counts; an open healthy cycle has not ended, so every cycle up to and including it is
    discounted). The healthy cycle itself never counts. `healthy_cycle_seconds = 0` disables the
    reset. An open cycle that is not the latest is a dead writer: its duration is unknown and it is
    never healthy.
    """
    job = snap.current_job
    if job is None:
        return []
    last_start = snap.cycles.last_start_of(job)
    if last_start is None or seconds_since(snap.observed_at, last_start) > cfg.storm_window:
        return []  # nothing started within the window (and no record was built to see it)
    cycles = snap.cycles_of(job)
    latest = snap.latest
    reset_at: datetime | None = None
    reset_by: CycleInfo | None = None
    if cfg.healthy_cycle_seconds > 0:
        for cycle in cycles:
            if cycle.end is not None:
                healthy, ended = cycle_seconds(cycle) >= cfg.healthy_cycle_seconds, cycle.end
            elif cycle is latest:
                healthy = seconds_since(snap.observed_at, cycle.start) >= cfg.healthy_cycle_seconds
                ended = snap.observed_at
            else:
                continue
            if healthy and (reset_at is None or ended >= reset_at):
                reset_at, reset_by = ended, cycle
    counted = [
        c
        for c in cycles
        if seconds_since(snap.observed_at, c.start) <= cfg.storm_window
        and (reset_at is None or c.start >= reset_at)
    ]
    if len(counted) < cfg.storm_cycles:
        return []
    first, last = counted[0], counted[-1]
    # The last cycle that ended is the last restart's: its log says why.
    failed = next((c for c in reversed(counted) if c.end is not None), None)
    reset_note = (
        f"; counter reset at {utc_text(reset_at)} after healthy cycle {reset_by.key}"
        if reset_by is not None
        else ""
    )
    return [
        Finding(
            detector="restart_storm",
            severity=Severity.WARNING,
            key=f"nvrx-restart-storm-{job}",
            summary=(
                f"restart storm: {len(counted)} cycles of job {job} started in the last "
                f"{human_seconds(cfg.storm_window)}"
            ),
            detail=(
                f"cycles {first.key} … {last.key} started between {utc_text(first.start)} and "
                f"{utc_text(last.start)}; threshold {cfg.storm_cycles} cycles in "
                f"{human_seconds(cfg.storm_window)}{reset_note}{cycle_log_note(failed)}"
            ),
            runbook=(
                "The job keeps restarting: read the latest cycle logs and attribution for a "
                "recurring fault, check suspect_node findings, and stop the run if it cannot "
                "make progress."
            ),
            evidence={
                "job": job,
                "cycles": len(counted),
                "cycle_keys": [c.key for c in counted],
                "storm_cycles": cfg.storm_cycles,
                "storm_window": cfg.storm_window,
                "reset_at": iso_time(reset_at),
                "cycle_log_file": cycle_log_file(failed),
            },
        )
    ]


def _save_interval_note(durations: Sequence[float], save_interval: float | None) -> str | None:
    """The most common cause of a stall: cycles too short to ever reach the next checkpoint."""
    if save_interval is None or not durations:
        return None
    median = statistics.median(durations)
    if median >= save_interval:
        return None
    return (
        f"cycles are shorter than the checkpoint save interval (median cycle "
        f"{human_seconds(median)} < save interval {human_seconds(save_interval)}), so they can "
        f"never advance the checkpoint"
    )


def stalled_progress(snap: Snapshot, cfg: WatchSettings) -> list[Finding]:
    """Several cycles completed without the checkpoint advancing.

    Gate: with a platform, the current generation must have a live task (silent when blind).
    Without a checkpoint value: fires when the current generation has at least `stall_cycles`
    completed cycles (key `nvrx-no-checkpoint-<job>`). Otherwise: fires when at least
    `stall_cycles` completed cycles started at or after `since` = `checkpoint.first_seen`, else
    the checkpoint mtime (silent when neither is known).

    Improvement over upstream: when `checkpoint.save_interval_seconds` is known and the median
    duration of those cycles is shorter than it, the finding says the cycles can never advance
    the checkpoint.
    """
    job = snap.current_job
    if job is None or not queue_gate(snap, job):
        return []
    # (index, start, end) of the completed cycles, from the columns: records only for evidence.
    completed = [(i, s, e) for i, s, e in snap.cycles.times_of(job) if e is not None]
    ckpt = snap.checkpoint
    runbook = (
        "Check that the job saves checkpoints and that the iteration file is updated; compare "
        "the cycle length with the save interval (save more often, or fix what kills cycles)."
    )
    if ckpt.not_integer_since is not None:
        # Megatron writes `release` for a released checkpoint; junk stays junk. Neither is a
        # file caught mid-write once two passes saw it unchanged: progress cannot be watched.
        return [
            Finding(
                detector="stalled_progress",
                severity=Severity.WARNING,
                key=f"nvrx-checkpoint-not-an-iteration-{job}",
                summary=(
                    f"job {job}: the checkpoint iteration file holds no iteration, so progress "
                    "cannot be watched"
                ),
                detail=f"{ckpt.path}: {ckpt.error}",
                runbook=(
                    "Point --ft-checkpoint-iteration-file (and nvrx watch) at the file the "
                    "training job updates with the iteration of each saved checkpoint."
                ),
                evidence={"job": job, "checkpoint_path": ckpt.path, "error": ckpt.error},
            )
        ]
    if ckpt.value is None:
        if ckpt.error is not None or len(completed) < cfg.stall_cycles:
            # An unreadable file or one caught mid-write is not "no checkpoint": say nothing
            # rather than page (the observation keeps the last value it read).
            return []
        why = ckpt.error or (
            "it holds 'release' (no iteration yet)"
            if ckpt.released
            else "no file yet"
            if ckpt.path
            else "no checkpoint-iteration file known"
        )
        note = _save_interval_note(
            [(e - s) / 1e6 for _, s, e in completed], ckpt.save_interval_seconds
        )
        last_completed = snap.cycles[completed[-1][0]]
        return [
            Finding(
                detector="stalled_progress",
                severity=Severity.CRITICAL,
                key=f"nvrx-no-checkpoint-{job}",
                summary=(
                    f"job {job} completed {len(completed)} cycles without any checkpoint"
                    + (f": {note}" if note else "")
                ),
                detail=(
                    f"{len(completed)} completed cycles (threshold {cfg.stall_cycles}); "
                    f"checkpoint iteration file {ckpt.path or '-'}: {why}"
                    + (f"; {note}" if note else "")
                    + cycle_log_note(last_completed)
                ),
                runbook=runbook,
                evidence={
                    "job": job,
                    "completed_cycles": len(completed),
                    "stall_cycles": cfg.stall_cycles,
                    "checkpoint_path": ckpt.path,
                    "checkpoint_error": ckpt.error,
                    "save_interval_seconds": ckpt.save_interval_seconds,
                    "shorter_than_save_interval": note is not None,
                    "cycle_log_file": cycle_log_file(last_completed),
                },
            )
        ]
    since = ckpt.first_seen or ckpt.mtime
    if since is None:
        return []
    since_us = to_us(since)
    stuck_at = [(i, s, e) for i, s, e in completed if s >= since_us]
    if len(stuck_at) < cfg.stall_cycles:
        return []
    durations = [(e - s) / 1e6 for _, s, e in stuck_at]
    note = _save_interval_note(durations, ckpt.save_interval_seconds)
    median = statistics.median(durations)
    stuck = [snap.cycles[i] for i, _, _ in stuck_at]
    return [
        Finding(
            detector="stalled_progress",
            severity=Severity.CRITICAL,
            key=f"nvrx-stalled-progress-{job}-{ckpt.value}",
            summary=(
                f"job {job}: {len(stuck)} cycles completed without advancing the checkpoint "
                f"past iteration {ckpt.value}" + (f"; {note}" if note else "")
            ),
            detail=(
                f"checkpoint iteration {ckpt.value} unchanged since {utc_text(since)}; "
                f"{len(stuck)} completed cycles started since then (threshold "
                f"{cfg.stall_cycles}), median cycle {human_seconds(median)}"
                + (f"; {note}" if note else "")
                + cycle_log_note(stuck[-1])
            ),
            runbook=runbook,
            evidence={
                "job": job,
                "checkpoint_value": ckpt.value,
                "since": iso_time(since),
                "stalled_cycles": len(stuck),
                "cycle_keys": [c.key for c in stuck],
                "stall_cycles": cfg.stall_cycles,
                "median_cycle_seconds": median,
                "save_interval_seconds": ckpt.save_interval_seconds,
                "shorter_than_save_interval": note is not None,
                "cycle_log_file": cycle_log_file(stuck[-1]),
            },
        )
    ]


def last_progress(snap: Snapshot) -> datetime | None:
    """The open latest cycle's last sign of progress: the checkpoint's update when it came
    after the cycle started, else the start (None without an open cycle)."""
    latest = snap.latest
    if latest is None or latest.end is not None:
        return None
    mtime = snap.checkpoint.mtime
    return mtime if mtime is not None and mtime > latest.start else latest.start


def cycle_stalled(snap: Snapshot, cfg: WatchSettings) -> list[Finding]:
    """The latest cycle is open and neither it nor the checkpoint moved for a long time.

    Fires when the latest cycle is open AND (with a platform) its generation has a live task AND
    `observed_at - max(cycle start, checkpoint mtime) >= stall_seconds`. A start in the future
    gives a negative age and never fires.
    """
    latest = snap.latest
    if latest is None or latest.end is not None or not queue_gate(snap, latest.job_id):
        return []
    mtime = snap.checkpoint.mtime
    ref = last_progress(snap)
    assert ref is not None
    by_checkpoint = ref is mtime
    quiet = seconds_since(snap.observed_at, ref)
    if quiet < cfg.stall_seconds:
        return []
    basis = "checkpoint update" if by_checkpoint else "cycle start"
    open_for = seconds_since(snap.observed_at, latest.start)
    return [
        Finding(
            detector="cycle_stalled",
            severity=Severity.CRITICAL,
            key=f"nvrx-cycle-stalled-{latest.key}",
            summary=(
                f"cycle {latest.key} has run {human_seconds(open_for)} with no checkpoint in the "
                f"last {human_seconds(quiet)}: training may be hung"
            ),
            detail=(
                f"cycle started {utc_text(latest.start)}, checkpoint mtime "
                f"{utc_text(mtime) or 'unknown'}; {human_seconds(quiet)} since the last {basis} "
                f"(stall_seconds {human_seconds(cfg.stall_seconds)}){cycle_log_note(latest)}"
            ),
            runbook=(
                "Look at the cycle log and the processes on the active nodes (hang, NCCL wait, "
                "storage stall); an open cycle whose writer died stays open forever, so confirm "
                "the job really runs."
            ),
            evidence={
                "cycle": latest.key,
                "cycle_start": iso_time(latest.start),
                "checkpoint_mtime": iso_time(mtime),
                "seconds_quiet": quiet,
                "stall_seconds": cfg.stall_seconds,
                "cycle_log_file": cycle_log_file(latest),
            },
        )
    ]


def restart_budget_low(snap: Snapshot, cfg: WatchSettings) -> list[Finding]:
    """The launcher is close to `--max-restarts`.

    Only when `chain.max_restarts` is set: fires when the latest `cycle_number >= max_restarts ×
    budget_fraction` (inclusive, with a 1e-9 float slack).
    """
    budget = snap.chain.max_restarts
    latest = snap.latest
    if budget is None or latest is None or not current_live(snap):
        return []
    threshold = budget * cfg.budget_fraction
    if latest.cycle_number < threshold - EPS:
        return []
    left = max(budget - latest.cycle_number, 0)
    # The last restart's cause is in the log of the last cycle that ended.
    failed = next((c for c in reversed(snap.cycles_of(latest.job_id)) if c.end is not None), None)
    return [
        Finding(
            detector="restart_budget_low",
            severity=Severity.WARNING,
            key=f"nvrx-restart-budget-{latest.job_id}-{latest.cycle_number}",
            summary=(
                f"job {latest.job_id} is at cycle {latest.cycle_number} of max {budget} "
                f"restarts: {left} left"
            ),
            detail=(
                f"latest cycle {latest.key}; threshold max_restarts {budget} × budget_fraction "
                f"{cfg.budget_fraction} = {threshold:g}; when the budget is spent the launcher "
                f"exits and the generation ends{cycle_log_note(failed)}"
            ),
            runbook=(
                "Find out why the job keeps restarting (restart_storm, suspect_node, cycle logs) "
                "before the budget runs out; exclude bad nodes if one is to blame."
            ),
            evidence={
                "job": latest.job_id,
                "cycle_number": latest.cycle_number,
                "max_restarts": budget,
                "budget_fraction": cfg.budget_fraction,
                "threshold": threshold,
                "restarts_left": left,
                "cycle_log_file": cycle_log_file(failed),
            },
        )
    ]


def spares_exhausted(snap: Snapshot, cfg: WatchSettings) -> list[Finding]:
    """No spare is left: the next node failure cannot be absorbed in place.

    Fires when the latest cycle has no standby nodes AND (with a platform) the current
    generation has no PENDING tasks (a generation absent from the queue has none). Needs the
    queue when a platform is configured: silent when blind.
    """
    latest = snap.latest
    if latest is None or latest.standby_nodes or not current_live(snap):
        return []
    pending = None
    if snap.platform is not None:
        platform = queue_read(snap)
        if platform is None:
            return []
        generation = platform.generation(latest.job_id)
        pending = generation.pending if generation is not None else 0
        if pending > 0:
            return []
    where = "no hot spare in the allocation" + (
        " and no pending task" if pending is not None else ""
    )
    return [
        Finding(
            detector="spares_exhausted",
            severity=Severity.INFO,
            key=f"nvrx-spares-exhausted-{latest.job_id}",
            summary=f"job {latest.job_id} has no spares left: {where}",
            detail=(
                f"latest cycle {latest.key} runs on {counted(len(latest.active_nodes), 'node')} "
                "with empty standby_nodes"
                + (
                    f"; generation {latest.job_id} has 0 PENDING tasks"
                    if pending is not None
                    else ""
                )
            ),
            runbook=(
                "The next node failure will end the cycle without a replacement; add spares on "
                "the next generation or drain known-bad nodes."
            ),
            evidence={
                "job": latest.job_id,
                "cycle": latest.key,
                "standby_nodes": 0,
                "pending_tasks": pending,
            },
        )
    ]


def suspect_node(snap: Snapshot, cfg: WatchSettings) -> list[Finding]:
    """Nodes present in every one of the recent short cycles: a correlation, never an action.

    Takes the completed cycles of the current generation in order and the trailing run of those
    shorter than `short_cycle_seconds` (strict: a cycle of exactly that length is not short). When
    the run has at least `suspect_cycles` cycles, the nodes common to the last `suspect_cycles`
    of them (intersection of `active_nodes`) are named in one finding for the generation (upstream
    raised one per node: a 64-node job whose nodes never changed paged 64 times for one run of
    short cycles).
    """
    job = snap.current_job
    if job is None:
        return []
    latest = snap.latest
    if (
        latest is not None
        and latest.end is None
        and (seconds_running(latest, snap.observed_at) >= cfg.short_cycle_seconds)
    ):
        return []  # the current cycle has outlived the short ones: the suspicion is stale
    # The trailing run from the columns; records only for the cycles whose nodes are compared.
    run: list[int] = []
    for index, start, end in reversed(snap.cycles.times_of(job)):
        if end is None:
            continue  # not completed
        if (end - start) / 1e6 >= cfg.short_cycle_seconds:
            break
        run.append(index)
    run.reverse()
    if len(run) < cfg.suspect_cycles:
        return []
    window = [snap.cycles[i] for i in run[-cfg.suspect_cycles :]]
    common = set(window[0].active_nodes)
    for cycle in window[1:]:
        common &= set(cycle.active_nodes)
    if not common:
        return []
    nodes = tuple(sorted(common))
    named = compress(nodes)  # a tuple: remembered, and chains on the same nodes are many
    keys = [c.key for c in window]
    durations = [cycle_seconds(c) for c in window]
    what = f"node {named} was" if len(nodes) == 1 else f"{len(nodes)} nodes ({named}) were"
    drain_text, drained = drain_state(snap, nodes)
    # The action, only when asked for: one node, known not to be drained yet, and not every
    # node the job ran on (then the correlation says nothing about the node).
    action = None
    if (
        cfg.drain_suspects
        and len(nodes) == 1
        and drained == []
        and any(set(c.active_nodes) - common for c in window)
    ):
        action = DrainNode(
            nodes[0],
            f"nvrx watch suspect_node: in each of the last {len(window)} short cycles of job {job}",
        )
    return [
        Finding(
            detector="suspect_node",
            severity=Severity.WARNING,
            key=f"nvrx-suspect-node-{job}",
            summary=(
                f"{what} in each of the last {len(window)} short cycles of job {job} "
                f"(correlation only; {drain_text})"
            ),
            detail=(
                f"cycles {', '.join(keys)} each ran < {human_seconds(cfg.short_cycle_seconds)} "
                f"({', '.join(human_seconds(d) for d in durations)}); "
                f"{len(run)} short cycles in a row{cycle_log_note(window[-1])}"
            ),
            runbook=(
                "Correlation, not proof: check the nodes' health (dmesg, XID, GPU/NIC errors) "
                "and the attribution of those cycles before draining any. When every node of "
                "the job is named, the job never ran without them: the correlation says little."
            ),
            evidence={
                "job": job,
                "nodes": named,
                "common_nodes": len(nodes),
                "cycles": keys,
                "durations": durations,
                "short_cycle_seconds": cfg.short_cycle_seconds,
                "short_run": len(run),
                "drained": drained,
                "cycle_log_file": cycle_log_file(window[-1]),
            },
            action=action,
        )
    ]
