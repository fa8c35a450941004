"""The `nvrx watch` detectors: pure functions of (Snapshot, WatchSettings) → findings.

Catalogue and defaults: docs/watch.md (Detectors). Every detector is a function
`(snap, cfg) -> list[Finding]` without IO and without a clock (the time is `snap.observed_at`), so
a pass can be replayed from a recorded snapshot. `DETECTORS` lists them in catalogue order (chain
detectors, anomaly detectors, observer findings); `run_detectors` runs the ones not in
`cfg.disable` and sorts the findings by (severity, detector, key).

Rules that hold throughout:

* The key is the dedup key for paging and cooldown: stable across passes and hosts, built only
  from ids the reference names (job, cycle, generation, chain name, host).
* A blind watcher must not look healthy, and must not claim anything it cannot see: when squeue
  failed (`platform.queue_ok` is False) every detector that needs the queue (the chain detectors,
  and the queue gates of the anomaly detectors) stays silent, and `watch_blind` reports the
  blindness instead. `degraded(snap)` tells the shell not to send a heartbeat.
* `snap.platform is None` means `--platform none`: the anomaly detectors then run on the cycle
  files alone and the chain detectors are silent.
* Time comparisons use seconds as floats; "within W before now" means `now - t <= W` (a time
  slightly in the future, i.e. clock skew between the login node and the writer, counts as recent).

One module for the catalogue's three families (chain, anomaly and observer detectors), which
share the queue gates and the finding helpers; it is to be split by family (DESIGN.md).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from datetime import datetime

from nvrx.config import WatchSettings
from nvrx.watch.model import (
    ChainRef,
    CycleInfo,
    Finding,
    Platform,
    Severity,
    Snapshot,
)

Detector = Callable[[Snapshot, WatchSettings], list[Finding]]

# Float thresholds (max_restarts × budget_fraction) are compared with this slack, so that
# 25 × 0.28 = 7.000000000000001 still counts cycle 7.
_EPS = 1e-9


# --- helpers -----------------------------------------------------------------------------------


def _age(now: datetime, then: datetime) -> float:
    """Seconds from `then` to `now` (negative when `then` is in the future)."""
    return (now - then).total_seconds()


def _iso(t: datetime | None) -> str | None:
    return t.isoformat() if t is not None else None


def _human(seconds: float) -> str:
    """`95 s`, `12.5 min`, `3.2 h`: short enough for a one-line summary."""
    if abs(seconds) < 120:
        return f"{seconds:.0f} s"
    if abs(seconds) < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _duration(cycle: CycleInfo) -> float:
    """Seconds a completed cycle ran."""
    assert cycle.end is not None
    return (cycle.end - cycle.start).total_seconds()


def _duration_until(cycle: CycleInfo, now: datetime) -> float:
    return (now - cycle.start).total_seconds()


def _chain_label(chain: ChainRef) -> str:
    """The chain's name for keys and messages (the name is what Slurm knows it by)."""
    return chain.name or chain.chain_id or "unnamed"


def _queue(snap: Snapshot) -> Platform | None:
    """The platform when the queue was read this pass; None with `--platform none` or when blind."""
    platform = snap.platform
    if platform is None or not platform.queue_ok:
        return None
    return platform


def _queue_gate(snap: Snapshot, job: str) -> bool:
    """The anomaly detectors' platform gate: does `job` still have a live task?

    True with `--platform none` (cycle files only, no gate). False when the queue could not be
    read: a blind watcher cannot tell a live run from a dead one, so it does not claim either.
    """
    platform = snap.platform
    if platform is None:
        return True
    if not platform.queue_ok:
        return False
    generation = platform.generation(job)
    return generation is not None and generation.live


def _cancel_chain_hint(chain: ChainRef) -> str:
    if chain.work_dir:
        return f"nvrx submit-chain --cancel --work-dir {chain.work_dir}"
    hint = f"scancel --state=PENDING --name={_chain_label(chain)}"
    if chain.user:
        hint += f" --user={chain.user}"
    return hint


def degraded(snap: Snapshot) -> bool:
    """The pass is blind (squeue or sacct failed, or the cycle-info files' location could not be
    read): exit 1, no heartbeat (a blind watcher must not look healthy)."""
    platform = snap.platform
    return snap.cycles_blind is not None or (
        platform is not None and not (platform.queue_ok and platform.accounting_ok)
    )


def _current_live(snap: Snapshot) -> bool:
    """The current generation still runs (always true without a platform: cycles only).
    Findings about a generation's spares or restart budget stand down once it has ended."""
    job = snap.current_job
    return job is not None and (snap.platform is None or _queue_gate(snap, job))


# --- chain detectors (need the platform) -------------------------------------------------------


def orphaned_generation(snap: Snapshot, cfg: WatchSettings) -> list[Finding]:
    """A generation whose task 0 is over but whose pending tasks still wait in the queue.

    Fires per live generation when: task 0 is not live in squeue, AND the generation still has
    PENDING tasks, AND accounting has a task-0 ending for it whose state is terminal (an empty or
    UNKNOWN answer is unknown, never "gone"), AND `observed_at - end >= grace` (an unknown end
    still fires; an end in the future does not). The one action: `scancel --state=PENDING <gen>`.
    """
    platform = _queue(snap)
    if platform is None:
        return []
    findings = []
    for generation in platform.generations:
        if generation.task0_live or generation.pending == 0:
            continue
        ending = platform.ending(generation.job_id)
        if ending is None or not ending.state.is_terminal:
            continue
        since_end = _age(snap.observed_at, ending.end) if ending.end is not None else None
        if since_end is not None and since_end < cfg.grace:
            continue
        gen = generation.job_id
        ended = f"ended {_human(since_end)} ago" if since_end is not None else "end time unknown"
        findings.append(
            Finding(
                detector="orphaned_generation",
                severity=Severity.WARNING,
                key=f"nvrx-orphan-{gen}",
                summary=(
                    f"generation {gen} is orphaned: task 0 is {ending.state.value}, "
                    f"{generation.pending} task(s) still pending"
                ),
                detail=(
                    f"task 0 of {gen} is not in the queue; accounting says {ending.state.value} "
                    f"(exit {ending.exit or 'unknown'}), {ended} (grace {_human(cfg.grace)}); "
                    f"{generation.pending} pending task(s) will hold the chain's name and may "
                    f"start training without a task 0"
                ),
                runbook=(
                    "Confirm task 0 is really gone (sacct -j <gen>_0), then cancel the pending "
                    "tasks: scancel --state=PENDING <gen> (or run watch with --act)."
                ),
                command=("scancel", "--state=PENDING", gen),
                evidence={
                    "generation": gen,
                    "task0_state": ending.state.value,
                    "task0_end": _iso(ending.end),
                    "seconds_since_end": since_end,
                    "pending": generation.pending,
                    "grace": cfg.grace,
                },
            )
        )
    return findings


def chain_exhausted(snap: Snapshot, cfg: WatchSettings) -> list[Finding]:
    """The chain should be running but no generation of it has a live task in the queue.

    Fires when `chain.expect_running` AND squeue answered AND no generation has a live task.
    """
    platform = _queue(snap)
    if platform is None or not snap.chain.expect_running:
        return []
    if any(g.live for g in platform.generations):
        return []
    name = _chain_label(snap.chain)
    last = snap.current_job
    # Say how it ended when accounting knows: the no-restart verdict is the usual, deliberate,
    # end of a chain (the operator must fix the cause, not just resubmit).
    ended = sorted(platform.endings, key=lambda e: (e.end is not None, e.end))
    verdict = next((e for e in reversed(ended) if e.no_restart), None)
    how = (
        f"; generation {verdict.job_id} ended on the no-restart verdict (exit "
        f"{snap.chain.no_restart_exit_code}), which cancelled the rest of the chain"
        if verdict is not None
        else ""
    )
    return [
        Finding(
            detector="chain_exhausted",
            severity=Severity.CRITICAL,
            key=f"nvrx-chain-exhausted-{name}",
            summary=f"chain {name} has no job left in the queue: training has stopped",
            detail=(
                f"the chain is expected to run (manifest not cancelled), but squeue lists no "
                f"live task named {name}; last generation with cycle files: {last or 'none'}"
                f"{how}"
            ),
            runbook=(
                "Check how the last generation ended (sacct, its launcher log, exit 93 = "
                "no-restart verdict); fix the cause, then extend or resubmit the chain "
                "(nvrx submit-chain --extend)."
            ),
            evidence={
                "chain": name,
                "live_generations": 0,
                "last_generation": last,
                "no_restart_generation": verdict.job_id if verdict is not None else None,
                "work_dir": snap.chain.work_dir,
            },
        )
    ]


def chain_not_cancelled(snap: Snapshot, cfg: WatchSettings) -> list[Finding]:
    """A generation ended with the no-restart verdict, yet the chain continues.

    Fires per task-0 ending that is a no-restart (its `no_restart` flag, or exit code ==
    `chain.no_restart_exit_code`) while ANOTHER generation of the chain still has a live task
    (queued or running). Needs the queue. No action: the detail suggests cancelling the rest.
    """
    platform = _queue(snap)
    if platform is None:
        return []
    code = snap.chain.no_restart_exit_code
    submitted = dict(snap.chain.manifest_submitted)
    findings = []
    for ending in platform.endings:
        verdict = ending.no_restart or (ending.exit is not None and ending.exit.code == code)
        if not verdict:
            continue
        # Generations submitted after the verdict (the operator's --extend) are not a cancel
        # that failed to happen.
        end = ending.end
        extended = {j for j, at in submitted.items() if end is not None and at > end}
        others = [
            g
            for g in platform.generations
            if g.job_id != ending.job_id and g.live and g.job_id not in extended
        ]
        if not others:
            continue
        ids = [g.job_id for g in others]
        hint = _cancel_chain_hint(snap.chain)
        findings.append(
            Finding(
                detector="chain_not_cancelled",
                severity=Severity.CRITICAL,
                key=f"nvrx-no-restart-not-honoured-{ending.job_id}",
                summary=(
                    f"generation {ending.job_id} asked for no restart, but generation(s) "
                    f"{', '.join(ids)} are still queued or running"
                ),
                detail=(
                    f"task 0 of {ending.job_id} ended {ending.state.value} (exit "
                    f"{ending.exit or 'unknown'}, no-restart code {code}) at "
                    f"{_iso(ending.end) or 'unknown time'}; the chain's cancel did not happen. "
                    f"Cancel the rest of the chain: {hint}"
                ),
                runbook=(
                    "The run decided it must not restart (no progress / attribution stop): "
                    f"read the launcher log of {ending.job_id}, then cancel the chain ({hint})."
                ),
                evidence={
                    "generation": ending.job_id,
                    "exit": str(ending.exit) if ending.exit is not None else None,
                    "no_restart_exit_code": code,
                    "end": _iso(ending.end),
                    "live_generations": ids,
                    "suggested": hint,
                },
            )
        )
    return findings


def generation_churn(snap: Snapshot, cfg: WatchSettings) -> list[Finding]:
    """Too many generations ended recently: the chain burns through its queue.

    Fires when MORE than `max_generations_per_window` task-0 endings have an end with
    `observed_at - end <= churn_window` (an end exactly at the window's edge counts; an unknown
    end does not). Needs accounting, not the queue; silent when sacct failed (the blind finding
    says so).
    """
    platform = snap.platform
    if platform is None or not platform.accounting_ok:
        return []
    recent = [
        e
        for e in platform.endings
        if e.end is not None and _age(snap.observed_at, e.end) <= cfg.churn_window
    ]
    if len(recent) <= cfg.max_generations_per_window:
        return []
    name = _chain_label(snap.chain)
    recent.sort(key=lambda e: e.end or snap.observed_at)
    states: dict[str, int] = {}
    for e in recent:
        states[e.state.value] = states.get(e.state.value, 0) + 1
    mix = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
    return [
        Finding(
            detector="generation_churn",
            severity=Severity.WARNING,
            key=f"nvrx-generation-churn-{name}",
            summary=(
                f"{len(recent)} generations of {name} ended in the last "
                f"{_human(cfg.churn_window)} (more than {cfg.max_generations_per_window})"
            ),
            detail=(
                f"task-0 endings: {mix}; generations "
                f"{', '.join(e.job_id for e in recent)}; each generation should last a time "
                f"limit, so this many endings mean they die early"
            ),
            runbook=(
                "Look at the exit codes and launcher logs of the recent generations: early "
                "failures (bad node, hot-spare race), a too-short time limit, or a crash loop."
            ),
            evidence={
                "endings": len(recent),
                "window": cfg.churn_window,
                "max_generations_per_window": cfg.max_generations_per_window,
                "generations": [e.job_id for e in recent],
                "states": states,
            },
        )
    ]


# --- anomaly detectors (cycle files; the platform only gates) ----------------------------------


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
    cycles = snap.cycles_of(job)
    latest = snap.latest
    reset_at: datetime | None = None
    reset_by: CycleInfo | None = None
    if cfg.healthy_cycle_seconds > 0:
        for cycle in cycles:
            if cycle.end is not None:
                healthy, ended = _duration(cycle) >= cfg.healthy_cycle_seconds, cycle.end
            elif cycle is latest:
                healthy = _age(snap.observed_at, cycle.start) >= cfg.healthy_cycle_seconds
                ended = snap.observed_at
            else:
                continue
            if healthy and (reset_at is None or ended >= reset_at):
                reset_at, reset_by = ended, cycle
    counted = [
        c
        for c in cycles
        if _age(snap.observed_at, c.start) <= cfg.storm_window
        and (reset_at is None or c.start >= reset_at)
    ]
    if len(counted) < cfg.storm_cycles:
        return []
    first, last = counted[0], counted[-1]
    reset_note = (
        f"; counter reset at {_iso(reset_at)} after healthy cycle {reset_by.key}"
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
                f"{_human(cfg.storm_window)}"
            ),
            detail=(
                f"cycles {first.key} … {last.key} started between {_iso(first.start)} and "
                f"{_iso(last.start)}; threshold {cfg.storm_cycles} cycles in "
                f"{_human(cfg.storm_window)}{reset_note}"
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
                "reset_at": _iso(reset_at),
            },
        )
    ]


def _save_interval_note(cycles: Sequence[CycleInfo], save_interval: float | None) -> str | None:
    """The most common cause of a stall: cycles too short to ever reach the next checkpoint."""
    if save_interval is None or not cycles:
        return None
    median = statistics.median(_duration(c) for c in cycles)
    if median >= save_interval:
        return None
    return (
        f"cycles are shorter than the checkpoint save interval (median cycle "
        f"{_human(median)} < save interval {_human(save_interval)}), so they can never advance "
        f"the checkpoint"
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
    if job is None or not _queue_gate(snap, job):
        return []
    completed = [c for c in snap.cycles_of(job) if c.end is not None]
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
        why = ckpt.error or ("no file yet" if ckpt.path else "no checkpoint-iteration file known")
        note = _save_interval_note(completed, ckpt.save_interval_seconds)
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
                },
            )
        ]
    since = ckpt.first_seen or ckpt.mtime
    if since is None:
        return []
    stuck = [c for c in completed if c.start >= since]
    if len(stuck) < cfg.stall_cycles:
        return []
    note = _save_interval_note(stuck, ckpt.save_interval_seconds)
    median = statistics.median(_duration(c) for c in stuck)
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
                f"checkpoint iteration {ckpt.value} unchanged since {_iso(since)}; "
                f"{len(stuck)} completed cycles started since then (threshold "
                f"{cfg.stall_cycles}), median cycle {_human(median)}"
                + (f"; {note}" if note else "")
            ),
            runbook=runbook,
            evidence={
                "job": job,
                "checkpoint_value": ckpt.value,
                "since": _iso(since),
                "stalled_cycles": len(stuck),
                "cycle_keys": [c.key for c in stuck],
                "stall_cycles": cfg.stall_cycles,
                "median_cycle_seconds": median,
                "save_interval_seconds": ckpt.save_interval_seconds,
                "shorter_than_save_interval": note is not None,
            },
        )
    ]


def cycle_stalled(snap: Snapshot, cfg: WatchSettings) -> list[Finding]:
    """The latest cycle is open and neither it nor the checkpoint moved for a long time.

    Fires when the latest cycle is open AND (with a platform) its generation has a live task AND
    `observed_at - max(cycle start, checkpoint mtime) >= stall_seconds`. A start in the future
    gives a negative age and never fires.
    """
    latest = snap.latest
    if latest is None or latest.end is not None or not _queue_gate(snap, latest.job_id):
        return []
    mtime = snap.checkpoint.mtime
    by_checkpoint = mtime is not None and mtime > latest.start
    ref = mtime if mtime is not None and by_checkpoint else latest.start
    quiet = _age(snap.observed_at, ref)
    if quiet < cfg.stall_seconds:
        return []
    basis = "checkpoint update" if by_checkpoint else "cycle start"
    open_for = _age(snap.observed_at, latest.start)
    return [
        Finding(
            detector="cycle_stalled",
            severity=Severity.CRITICAL,
            key=f"nvrx-cycle-stalled-{latest.key}",
            summary=(
                f"cycle {latest.key} has run {_human(open_for)} with no checkpoint in the "
                f"last {_human(quiet)}: training may be hung"
            ),
            detail=(
                f"cycle started {_iso(latest.start)}, checkpoint mtime "
                f"{_iso(mtime) or 'unknown'}; {_human(quiet)} since the last {basis} "
                f"(stall_seconds {_human(cfg.stall_seconds)})"
            ),
            runbook=(
                "Look at the cycle log and the processes on the active nodes (hang, NCCL wait, "
                "storage stall); an open cycle whose writer died stays open forever, so confirm "
                "the job really runs."
            ),
            evidence={
                "cycle": latest.key,
                "cycle_start": _iso(latest.start),
                "checkpoint_mtime": _iso(mtime),
                "seconds_quiet": quiet,
                "stall_seconds": cfg.stall_seconds,
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
    if budget is None or latest is None or not _current_live(snap):
        return []
    threshold = budget * cfg.budget_fraction
    if latest.cycle_number < threshold - _EPS:
        return []
    left = max(budget - latest.cycle_number, 0)
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
                f"exits and the generation ends"
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
    if latest is None or latest.standby_nodes or not _current_live(snap):
        return []
    pending = None
    if snap.platform is not None:
        platform = _queue(snap)
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
                f"latest cycle {latest.key} runs on {len(latest.active_nodes)} node(s) with empty "
                f"standby_nodes"
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
    of them (intersection of `active_nodes`) each get one finding.
    """
    job = snap.current_job
    if job is None:
        return []
    latest = snap.latest
    if (
        latest is not None
        and latest.end is None
        and (_duration_until(latest, snap.observed_at) >= cfg.short_cycle_seconds)
    ):
        return []  # the current cycle has outlived the short ones: the suspicion is stale
    completed = [c for c in snap.cycles_of(job) if c.end is not None]
    run: list[CycleInfo] = []
    for cycle in reversed(completed):
        if _duration(cycle) >= cfg.short_cycle_seconds:
            break
        run.append(cycle)
    run.reverse()
    if len(run) < cfg.suspect_cycles:
        return []
    window = run[-cfg.suspect_cycles :]
    common = set(window[0].active_nodes)
    for cycle in window[1:]:
        common &= set(cycle.active_nodes)
    keys = [c.key for c in window]
    durations = [_duration(c) for c in window]
    findings = []
    for node in sorted(common):
        findings.append(
            Finding(
                detector="suspect_node",
                severity=Severity.WARNING,
                key=f"nvrx-suspect-node-{job}-{node}",
                summary=(
                    f"node {node} was in each of the last {len(window)} short cycles of job {job} "
                    f"(correlation only)"
                ),
                detail=(
                    f"cycles {', '.join(keys)} each ran < {_human(cfg.short_cycle_seconds)} "
                    f"({', '.join(_human(d) for d in durations)}); {len(common)} node(s) common "
                    f"to all of them; {len(run)} short cycles in a row"
                ),
                runbook=(
                    "Correlation, not proof: check the node's health (dmesg, XID, GPU/NIC errors) "
                    "and the attribution of those cycles before draining it."
                ),
                evidence={
                    "job": job,
                    "node": node,
                    "cycles": keys,
                    "durations": durations,
                    "short_cycle_seconds": cfg.short_cycle_seconds,
                    "common_nodes": len(common),
                    "short_run": len(run),
                },
            )
        )
    return findings


# --- observer findings -------------------------------------------------------------------------


def watch_blind(snap: Snapshot, cfg: WatchSettings) -> list[Finding]:
    """The watcher could not see the chain: the cycle-info location, squeue or sacct could not
    be read this pass (a warning each).

    A blind pass is degraded (exit 1, no heartbeat); the chain detectors stay silent rather than
    guess, so this finding is what says the chain state is unknown.
    """
    # (what failed, its error, key suffix, what cannot be judged, runbook)
    blind: list[tuple[str, str, str, str, str]] = []
    if snap.cycles_blind is not None:
        blind.append(
            (
                "cycle-info files unreadable",
                snap.cycles_blind,
                "cycles-",
                "restarts, stalls and storms cannot be seen",
                "Check that the work dir is mounted on this login node and readable by this user, "
                "and that --work-dir / --cycle-info-glob name it",
            )
        )
    platform = snap.platform
    if platform is not None and not platform.queue_ok:
        blind.append(
            (
                "squeue failed",
                platform.queue_error or "unknown error",
                "",
                "chain_exhausted, orphaned_generation, chain_not_cancelled and the live-task gates "
                "are not evaluated",
                "Check slurmctld reachability from this host (squeue, scontrol ping)",
            )
        )
    if platform is not None and not platform.accounting_ok:
        blind.append(
            (
                "sacct failed",
                platform.accounting_error or "unknown error",
                "accounting-",
                "generation_churn is not evaluated and orphan / no-restart checks see no endings",
                "Check slurmdbd (sacct -X -n -S now-1hour)",
            )
        )
    return [
        Finding(
            detector="watch_blind",
            severity=Severity.WARNING,
            key=f"nvrx-watch-blind-{suffix}{snap.host}",
            summary=f"{what}: {error}; chain state unknown",
            detail=f"on {snap.host}: {unseen} this pass",
            runbook=f"{runbook}; the pass exits 1 and sends no heartbeat until it can see again.",
            evidence={"host": snap.host, "error": error},
        )
        for what, error, suffix, unseen, runbook in blind
    ]


def counter_regressed(snap: Snapshot, cfg: WatchSettings) -> list[Finding]:
    """A counter that only grows went down: the checkpoint iteration, or a generation's cycle
    number, is below the highest this watcher saw (a warning while it stays below).

    Rolled-back checkpoints and removed or rewritten cycle files change what every other
    detector concludes (stall windows, storm counts), so they are said, not absorbed.
    """
    chain = _chain_label(snap.chain)
    out = []
    for drop in snap.counter_drops:
        if drop.counter == "checkpoint":
            what = f"checkpoint iteration went back from {drop.before} to {drop.after}"
            runbook = (
                "Check whether the latest checkpoint was removed or a run restarted from an "
                "older one, and that no other run writes this checkpoint-iteration file"
            )
            key = f"nvrx-counter-regressed-checkpoint-{chain}"
        else:
            what = f"cycle number of {drop.scope} went back from {drop.before} to {drop.after}"
            runbook = (
                "Check whether cycle-info files were deleted or rewritten, and that no other "
                "job writes into this generation's cycle-info directory"
            )
            key = f"nvrx-counter-regressed-cycle-{drop.scope}"
        out.append(
            Finding(
                detector="counter_regressed",
                severity=Severity.WARNING,
                key=key,
                summary=what,
                detail="it stays reported until the counter is back at its highest value",
                runbook=runbook,
                evidence={
                    "counter": drop.counter,
                    "scope": drop.scope,
                    "before": drop.before,
                    "after": drop.after,
                },
            )
        )
    return out


# --- registry ----------------------------------------------------------------------------------

DETECTORS: dict[str, Detector] = {
    # chain detectors (they need the platform)
    "orphaned_generation": orphaned_generation,
    "chain_exhausted": chain_exhausted,
    "chain_not_cancelled": chain_not_cancelled,
    "generation_churn": generation_churn,
    # §5.2 anomaly detectors
    "restart_storm": restart_storm,
    "stalled_progress": stalled_progress,
    "cycle_stalled": cycle_stalled,
    "restart_budget_low": restart_budget_low,
    "spares_exhausted": spares_exhausted,
    "suspect_node": suspect_node,
    "counter_regressed": counter_regressed,
    # §5.3 observer findings
    "watch_blind": watch_blind,
}


def run_detectors(snap: Snapshot, cfg: WatchSettings) -> list[Finding]:
    """Every detector not named in `cfg.disable`, findings sorted by (severity, detector, key).

    Unknown names in `cfg.disable` are ignored here (validate them where the config is read).
    Disabling `watch_blind` hides the finding but not the degraded state (`degraded`).
    """
    disabled = set(cfg.disable)
    findings: list[Finding] = []
    for name, detector in DETECTORS.items():
        if name not in disabled:
            findings.extend(detector(snap, cfg))
    return sorted(findings, key=Finding.sort_key)
