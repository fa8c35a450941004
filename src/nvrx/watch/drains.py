"""What a watch pass knows of drains, for every output: whether the chain's generations run
the in-job drain poller (docs/submit-chain.md), what sinfo said of the nodes the chain's
running tasks hold, and whether this watcher drains a suspect node (`watch.drain_suspects`,
with --act). Functions of a pass's result."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nvrx.display import counted
from nvrx.watch.detectors.common import age_seconds, ago

if TYPE_CHECKING:
    from nvrx.config import WatchSettings
    from nvrx.watch.fleet import FleetResult
    from nvrx.watch.watcher import PassResult


def drain_status(result: PassResult) -> dict[str, Any]:
    """What the pass knows of drains (`drains` in --json): whether the chain's generations run
    the in-job drain poller, whether sinfo answered, how many of the nodes the chain's running
    tasks hold are drained (None: not known), and whether this watcher may drain a suspect."""
    platform = result.snapshot.platform
    sinfo = "not asked" if platform is None else "ok" if platform.drained is not None else "failed"
    seen = platform is not None and platform.queue_ok
    nodes = len(platform.chain_nodes()) if platform is not None and seen else None
    drained = None
    if platform is not None and seen and platform.drained is not None:
        drained = len({d.name for _, _, d in platform.drained_in_use()})
    return {
        "poller": result.snapshot.chain.drain_poller,
        "sinfo": sinfo,
        "chain_nodes": nodes,
        "drained": drained,
        "drain_suspects": result.drain_suspects,
        "acting": result.acting,
    }


def drain_line(result: PassResult) -> tuple[str, str]:
    """The screen's `drains:` line and its style: the chain's drained nodes as sinfo says,
    the in-job drain poller, and watch.drain_suspects."""
    snap = result.snapshot
    platform, now = snap.platform, snap.observed_at
    style = ""
    if platform is None:
        seen = "not asked (--platform none)"
    elif not platform.queue_ok:
        seen, style = "UNKNOWN (squeue failed: which nodes the chain holds is unknown)", "yellow"
    elif platform.drained is None:
        seen, style = f"UNKNOWN (sinfo failed: {platform.drained_error})", "yellow"
    elif not (nodes := platform.chain_nodes()):
        seen = "no running task of the chain holds a node (sinfo answered)"
    elif held := platform.drained_in_use():
        style = "yellow"
        drained = len({d.name for _, _, d in held})
        seen = f"{drained} of the chain's {counted(len(nodes), 'node')} drained: "
        seen += ", ".join(
            f"{d.name} (generation {gen} task {task}"
            + (f", {ago(age_seconds(now, d.since))}" if d.since else "")
            + ")"
            for gen, task, d in held
        )
    else:
        seen = f"none of the chain's {counted(len(nodes), 'node')} drained (sinfo)"
    poller = f"in-job drain poller {snap.chain.drain_poller}"
    if not result.drain_suspects:
        suspects = "watch.drain_suspects off"
    elif result.acting:
        suspects = "watch.drain_suspects on (--act drains a suspect node)"
    else:
        suspects = "watch.drain_suspects on, observe-only (no --act)"
    return f"drains: {seen}; {poller}; {suspects}", style


def fleet_drain_status(fleet: FleetResult, settings: WatchSettings) -> dict[str, Any]:
    """What the fleet's pass knows of drains (the fleet's `drains` in --json): whether sinfo
    answered for every chain, the nodes the chains' running tasks hold and how many of them
    are drained (None: not known for some chain), how many chains run the in-job drain
    poller (and how many are unknown), and whether this watcher may drain a suspect."""
    seen = [c.result for c in fleet.chains if c.result is not None]
    platforms = [p for r in seen if (p := r.snapshot.platform) is not None]
    nodes: int | None = None
    drained: int | None = None
    if not platforms:
        sinfo = "not asked"
    elif any(p.drained is None or not p.queue_ok for p in platforms):
        sinfo = "failed"
    else:
        sinfo = "ok"
        nodes = len(set().union(*(p.chain_nodes() for p in platforms)))
        drained = len({d.name for p in platforms for _, _, d in p.drained_in_use()})
    pollers = [r.snapshot.chain.drain_poller for r in seen]
    return {
        "sinfo": sinfo,
        "chain_nodes": nodes,
        "drained": drained,
        "chains": len(fleet.chains),
        "pollers_on": pollers.count("on"),
        "pollers_unknown": pollers.count("unknown") + len(fleet.chains) - len(seen),
        "drain_suspects": settings.drain_suspects,
        "acting": any(r.acting for r in seen),
    }


def fleet_drain_line(fleet: FleetResult, settings: WatchSettings) -> str:
    """The fleet's `drains:` line, from `fleet_drain_status`: what sinfo said of the nodes the
    chains' running tasks hold (one sinfo for the fleet), how many chains run the in-job drain
    poller, and whether this watcher may drain a suspect node."""
    status = fleet_drain_status(fleet, settings)
    sinfo = {
        "not asked": "not asked (--platform none)",
        "failed": "UNKNOWN for some chains (squeue or sinfo failed)",
    }.get(status["sinfo"]) or (
        f"{status['drained']} of the {counted(status['chain_nodes'], 'node')} the chains hold "
        "drained (sinfo)"
    )
    chains, unknown = status["chains"], status["pollers_unknown"]
    poller = f"in-job drain poller on in {status['pollers_on']} of {counted(chains, 'chain')}"
    if unknown == chains:
        poller = "in-job drain poller unknown (no chain manifest says)"
    elif unknown:
        poller += f" ({unknown} unknown)"
    suspects = (
        "watch.drain_suspects off"
        if not status["drain_suspects"]
        else "watch.drain_suspects on (--act drains a suspect node)"
        if status["acting"]
        else "watch.drain_suspects on, observe-only (no --act)"
    )
    return f"drains: {sinfo}; {poller}; {suspects}"
