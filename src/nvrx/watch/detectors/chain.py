"""Chain detectors: what the queue says about the generations (they need the platform)."""

from __future__ import annotations

from nvrx.config import WatchSettings
from nvrx.display import counted
from nvrx.slurm.parse import DrainedNode
from nvrx.watch.detectors.common import (
    cancel_chain_hint,
    chain_label,
    human_seconds,
    iso_time,
    queue_read,
    seconds_since,
    utc_text,
)
from nvrx.watch.model import CancelPending, Finding, Severity, Snapshot


def orphaned_generation(snap: Snapshot, cfg: WatchSettings) -> list[Finding]:
    """A generation whose task 0 is over but whose pending tasks still wait in the queue.

    Fires per live generation when: task 0 is not live in squeue, AND the generation still has
    PENDING tasks, AND accounting has a task-0 ending for it whose state is terminal (an empty or
    UNKNOWN answer is unknown, never "gone"), AND `observed_at - end >= grace` (an unknown end
    still fires; an end in the future does not). The one action: `scancel --state=PENDING <gen>`.
    """
    platform = queue_read(snap)
    if platform is None:
        return []
    findings = []
    for generation in platform.generations:
        if generation.task0_live or generation.pending == 0:
            continue
        ending = platform.ending(generation.job_id)
        if ending is None or not ending.state.is_terminal:
            continue
        since_end = seconds_since(snap.observed_at, ending.end) if ending.end is not None else None
        if since_end is not None and since_end < cfg.grace:
            continue
        gen = generation.job_id
        ended = (
            f"ended {human_seconds(since_end)} ago" if since_end is not None else "end time unknown"
        )
        findings.append(
            Finding(
                detector="orphaned_generation",
                severity=Severity.WARNING,
                key=f"nvrx-orphan-{gen}",
                summary=(
                    f"generation {gen} is orphaned: task 0 is {ending.state.value}, "
                    f"{counted(generation.pending, 'task')} still pending"
                ),
                detail=(
                    f"task 0 of {gen} is not in the queue; accounting says {ending.state.value} "
                    f"(exit {ending.exit or 'unknown'}), {ended} "
                    f"(grace {human_seconds(cfg.grace)}); "
                    f"{counted(generation.pending, 'pending task')} will hold the chain's name "
                    "and may start training without a task 0"
                ),
                runbook=(
                    "Confirm task 0 is really gone (sacct -j <gen>_0), then cancel the pending "
                    "tasks: scancel --state=PENDING <gen> (or run watch with --act)."
                ),
                action=CancelPending(gen),
                evidence={
                    "generation": gen,
                    "task0_state": ending.state.value,
                    "task0_end": iso_time(ending.end),
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
    Critical, unless the latest task-0 ending was clean (exit 0, no verdict): then info when the
    checkpoint reached the training's last iteration, critical when it is known to fall short
    (the chain ran out of generations), else a warning (it cannot tell which).
    """
    platform = queue_read(snap)
    if platform is None or not snap.chain.expect_running:
        return []
    if any(g.live for g in platform.generations):
        return []
    name = chain_label(snap.chain)
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
    severity, summary = (
        Severity.CRITICAL,
        f"chain {name} has no job left in the queue: training has stopped",
    )
    final = ended[-1] if ended else None
    if verdict is None and final is not None and final.clean:
        # The last generation's launcher exited 0: training finished, or the chain used its
        # generations up. Only the checkpoint against the training's end tells which.
        goal, reached = snap.chain.train_iterations, snap.checkpoint.value
        clean = (
            f"its last generation {final.job_id} ended cleanly ({final.state.value} {final.exit})"
        )
        if goal is not None and reached is not None and reached >= goal:
            severity = Severity.INFO
            summary = f"chain {name} finished training: checkpoint at iteration {reached} of {goal}"
        elif goal is not None and reached is not None:
            summary = (
                f"chain {name} ran out of generations at iteration {reached} of {goal}: {clean}"
            )
        else:
            severity = Severity.WARNING
            summary = (
                f"chain {name} has no job left in the queue: {clean}, so training finished or "
                "the chain ran out of generations"
            )
    return [
        Finding(
            detector="chain_exhausted",
            severity=severity,
            key=f"nvrx-chain-exhausted-{name}",
            summary=summary,
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
    platform = queue_read(snap)
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
        hint = cancel_chain_hint(snap.chain)
        alive = f"generation {ids[0]} is" if len(ids) == 1 else f"generations {', '.join(ids)} are"
        findings.append(
            Finding(
                detector="chain_not_cancelled",
                severity=Severity.CRITICAL,
                key=f"nvrx-no-restart-not-honoured-{ending.job_id}",
                summary=(
                    f"generation {ending.job_id} asked for no restart, but {alive} still "
                    "queued or running"
                ),
                detail=(
                    f"task 0 of {ending.job_id} ended {ending.state.value} (exit "
                    f"{ending.exit or 'unknown'}, no-restart code {code}) at "
                    f"{utc_text(ending.end) or 'unknown time'}; the chain's cancel did not happen. "
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
                    "end": iso_time(ending.end),
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
        if e.end is not None and seconds_since(snap.observed_at, e.end) <= cfg.churn_window
    ]
    if len(recent) <= cfg.max_generations_per_window:
        return []
    name = chain_label(snap.chain)
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
                f"{human_seconds(cfg.churn_window)} (more than {cfg.max_generations_per_window})"
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


def drained_node_in_use(snap: Snapshot, cfg: WatchSettings) -> list[Finding]:
    """A running task of a live generation holds a node Slurm has drained (or is draining).

    One warning per generation, naming each such node with its task, how long it has been
    drained and why. Slurm's drain lets running jobs run on: the chain's drain poller takes the
    task out at its next rendezvous (docs/submit-chain.md); until then it trains on a node an
    admin or a health check has given up on. Silent when the queue or sinfo could not be read.
    """
    platform = queue_read(snap)
    if platform is None:
        return []
    by_generation: dict[str, list[tuple[int, DrainedNode]]] = {}
    for generation, task, node in platform.drained_in_use():
        by_generation.setdefault(generation, []).append((task, node))
    findings = []
    for gen, held in by_generation.items():

        def since(d: DrainedNode) -> str:
            if d.since is None:
                return "since an unknown time"
            return f"for {human_seconds(seconds_since(snap.observed_at, d.since))}"

        parts = [
            f"{d.name} (task {task}, {d.state} {since(d)}"
            + (f": {d.reason!r}" if d.reason else "")
            + ")"
            for task, d in held
        ]
        findings.append(
            Finding(
                detector="drained_node_in_use",
                severity=Severity.WARNING,
                key=f"nvrx-drained-node-{gen}",
                summary=(
                    f"generation {gen} runs on {counted(len(held), 'drained node')}: "
                    f"{', '.join(parts)}"
                ),
                detail=(
                    "Slurm starts no new job on a drained node but lets this one run on. With "
                    "the drain poller on (chain.drain_poll), the task leaves at the next "
                    f"rendezvous; its marker is nvrx/{gen}/drain/task_<K>.drained in the work dir"
                ),
                runbook=(
                    "Check why the node was drained (scontrol show node <node>). If it must "
                    "leave now, not at the next restart, cancel that task "
                    f"(scancel {gen}_<task>): a spare takes its place."
                ),
                evidence={
                    "generation": gen,
                    "nodes": [
                        {
                            "node": d.name,
                            "task": task,
                            "state": d.state,
                            "since": iso_time(d.since),
                            "seconds_drained": (
                                seconds_since(snap.observed_at, d.since)
                                if d.since is not None
                                else None
                            ),
                            "reason": d.reason,
                        }
                        for task, d in held
                    ],
                },
            )
        )
    return findings
