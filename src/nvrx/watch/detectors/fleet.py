"""Fleet detectors: what no single-chain watcher can see, as pure functions of every chain's
snapshot of one pass and the settings.

`fleet_suspect_node`: a node in a cycle that ended in a failure, in two or more chains within
`fleet_window`. A cycle ended in a failure when the launcher started another one in the same
generation (an in-job restart), or when it was the generation's last and task 0 did not end
cleanly (`model.ended_cleanly`: not on the no-restart verdict either).
Blind chains (no queue) still count their restarts (those are in the cycle files), never the
endings they could not see.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from nvrx.config import WatchSettings
from nvrx.watch.detectors.common import drain_state
from nvrx.watch.model import CycleInfo, Finding, Severity, Snapshot, to_us

# (every chain's snapshot, each one's failed cycles in the window (`failed_cycles`, read once
# per pass), the settings) -> findings
FleetDetector = Callable[
    [Sequence[Snapshot], Sequence[Sequence[CycleInfo]], WatchSettings], list[Finding]
]


def failed_cycles(snap: Snapshot, window: float) -> list[CycleInfo]:
    """The chain's cycles that ended in a failure within `window` seconds before the pass (read
    from the columns: only the blocks with an end in the window build their records)."""
    platform = snap.platform
    lost: dict[str, bool] = {}
    out: list[CycleInfo] = []
    for cycle, last in snap.cycles.ended_since(to_us(snap.observed_at) - int(window * 1e6)):
        job = cycle.job_id
        if job not in lost:
            ending = platform.ending(job) if platform is not None else None
            lost[job] = ending is not None and not ending.clean
        if not last or lost[job]:  # restarted, or its generation did not end cleanly
            out.append(cycle)
    return out


def fleet_suspect_node(
    snaps: Sequence[Snapshot], failed: Sequence[Sequence[CycleInfo]], cfg: WatchSettings
) -> list[Finding]:
    """A node in failed cycles of two or more chains within the window: one finding per node,
    fleet-wide, with each chain's cycles (correlation, never an action)."""
    seen: dict[str, dict[str, list[str]]] = {}  # node → chain → cycle keys
    for snap, cycles in zip(snaps, failed, strict=True):
        for cycle in cycles:
            for node in cycle.active_nodes:
                seen.setdefault(node, {}).setdefault(snap.chain.label, []).append(cycle.key)
    findings = []
    for node in sorted(seen):
        chains = seen[node]
        if len(chains) < 2:
            continue
        names = sorted(chains)
        # Any chain's snapshot says what sinfo said this pass (one sinfo for the fleet).
        drain_text, drained = drain_state(snaps[0], [node])
        findings.append(
            Finding(
                detector="fleet_suspect_node",
                severity=Severity.WARNING,
                key=f"nvrx-fleet-suspect-node-{node}",
                summary=(
                    f"node {node} was in failed cycles of {len(names)} chains within "
                    f"{cfg.fleet_window / 3600:g} h (correlation only; {drain_text}): "
                    f"{', '.join(names)}"
                ),
                detail="; ".join(f"{c}: {', '.join(chains[c])}" for c in names),
                runbook=(
                    "Several chains failed on this node: check its health (dmesg, XID, GPU/NIC "
                    "errors) and the attribution of those cycles before draining it."
                ),
                evidence={
                    "node": node,
                    "chains": {c: chains[c] for c in names},
                    "drained": bool(drained) if drained is not None else None,
                },
            )
        )
    return findings


FLEET_DETECTORS: dict[str, FleetDetector] = {"fleet_suspect_node": fleet_suspect_node}


def run_fleet_detectors(
    snaps: Sequence[Snapshot], failed: Sequence[Sequence[CycleInfo]], cfg: WatchSettings
) -> list[Finding]:
    disabled = set(cfg.disable)
    findings = [
        f
        for name, d in FLEET_DETECTORS.items()
        if name not in disabled
        for f in d(snaps, failed, cfg)
    ]
    return sorted(findings, key=Finding.sort_key)
