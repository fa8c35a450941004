"""Observer findings: what the watcher itself could not see, or saw go backwards."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from nvrx.config import WatchSettings
from nvrx.slurm.errors import SlurmValueError
from nvrx.slurm.options import check_node_name
from nvrx.watch.detectors.common import chain_label, human_seconds, seconds_since, unseen_job
from nvrx.watch.model import ACTION_REFUSED, DrainNode, Finding, Severity, Snapshot


def watch_blind(snap: Snapshot, cfg: WatchSettings) -> list[Finding]:
    """The watcher could not see the chain: the cycle-info location, squeue or sacct could not
    be read this pass, or Slurm knows no job of the chain whose cycle files are current (a
    warning each).

    A blind pass is degraded (exit 3, or 1 with `watch.exit_codes: upstream`; no heartbeat);
    the chain detectors stay silent rather than guess, so this finding is what says the chain
    state is unknown.
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
    unseen = unseen_job(snap)
    if unseen is not None:
        latest = snap.latest
        assert latest is not None
        who = f"name {snap.chain.name!r}" + (f", user {snap.chain.user}" if snap.chain.user else "")
        window = human_seconds(snap.platform.accounting_window or 0.0) if snap.platform else "?"
        blind.append(
            (
                f"Slurm knows no job {unseen} of {who}",
                f"squeue and sacct (the last {window}) list none, yet cycle {latest.key} "
                f"{'opened' if latest.end is None else 'ended'} "
                f"{human_seconds(seconds_since(snap.observed_at, latest.end or latest.start))} ago",
                "unseen-",
                "every detector that needs the queue sees no job",
                "Check the job name and user the watcher is given (--job-name, --user, the "
                "batch script) against squeue/sacct for the job in the cycle files",
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
    if platform is not None and platform.queue_ok and platform.drained is None:
        blind.append(
            (
                "sinfo failed",
                platform.drained_error or "unknown error",
                "sinfo-",
                "drained_node_in_use is not evaluated and no suspect node's drain state is known",
                "Check slurmctld reachability from this host (sinfo -N -t drain)",
            )
        )
    return [
        Finding(
            detector="watch_blind",
            severity=Severity.WARNING,
            key=f"nvrx-watch-blind-{suffix}{snap.host}",
            summary=f"{what}: {error}; chain state unknown",
            detail=f"on {snap.host}: {unseen} this pass",
            runbook=f"{runbook}; the pass is blind (exit 3; 1 with --exit-codes upstream) and "
            "sends no heartbeat until it can see again.",
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
    chain = chain_label(snap.chain)
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


def drain_refusal(node: str, known: Collection[str] | None) -> str | None:
    """Why a drain of `node` must not run (None: it may). The name comes from cycle files,
    which anyone who can write the work dir can write: it must be one node's name, never a
    word or a list scontrol reads as many nodes (`ALL`, `n[1-8]`, `n1,n2`), and, when Slurm's
    node list was read (`known`), one of its nodes."""
    try:
        check_node_name(node)
    except SlurmValueError as exc:
        return str(exc)
    if known is not None and node not in known:
        return f"node {node!r} is not a node Slurm lists (sinfo -N -a)"
    return None


def refuse_actions(findings: Sequence[Finding], known: Collection[str] | None) -> list[Finding]:
    """`findings` with every drain that `drain_refusal` refuses taken off its finding, and an
    `action_refused` warning for each: the pass goes on, and says what it would not do."""
    out: list[Finding] = []
    for f in findings:
        action = f.action
        if not isinstance(action, DrainNode) or (why := drain_refusal(action.node, known)) is None:
            out.append(f)
            continue
        out.append(replace(f, action=None))
        out.append(
            Finding(
                detector=ACTION_REFUSED,
                severity=Severity.WARNING,
                key=f"nvrx-action-refused-{f.key}",
                summary=f"drain refused ({f.detector}): {why}",
                # Never the command itself: a line an operator could paste is what is refused.
                detail=f"{f.key} offered to drain {action.node!r}; nothing ran",
                runbook=(
                    "Nothing was drained. A cycle file named a node that is not one of Slurm's: "
                    "check who writes the chain's cycle-info files, and drain by hand only a "
                    "node `sinfo -N` lists."
                ),
                evidence={"finding": f.key, "node": action.node, "why": why},
            )
        )
    return sorted(out, key=Finding.sort_key)
