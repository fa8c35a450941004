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

The families are modules of their own: `chain` (the queue's view of the generations),
`anomaly` (the cycle files), `observer` (what the watcher could not see, or saw go backwards),
sharing `common` (the queue gates and the finding helpers).
"""

from __future__ import annotations

from nvrx.config import WatchSettings
from nvrx.watch.detectors.anomaly import (
    cycle_stalled,
    restart_budget_low,
    restart_storm,
    spares_exhausted,
    stalled_progress,
    suspect_node,
)
from nvrx.watch.detectors.chain import (
    chain_exhausted,
    chain_not_cancelled,
    drained_node_in_use,
    generation_churn,
    orphaned_generation,
)
from nvrx.watch.detectors.common import Detector, degraded
from nvrx.watch.detectors.observer import counter_regressed, watch_blind
from nvrx.watch.model import ACTION_REFUSED, Finding, Snapshot

# --- registry ----------------------------------------------------------------------------------

DETECTORS: dict[str, Detector] = {
    # chain detectors (they need the platform)
    "orphaned_generation": orphaned_generation,
    "chain_exhausted": chain_exhausted,
    "chain_not_cancelled": chain_not_cancelled,
    "generation_churn": generation_churn,
    "drained_node_in_use": drained_node_in_use,
    # anomaly detectors (of the cycles)
    "restart_storm": restart_storm,
    "stalled_progress": stalled_progress,
    "cycle_stalled": cycle_stalled,
    "restart_budget_low": restart_budget_low,
    "spares_exhausted": spares_exhausted,
    "suspect_node": suspect_node,
    "counter_regressed": counter_regressed,
    # observer findings (of the watcher itself)
    "watch_blind": watch_blind,
}


# What a pass's findings may name, in the order the textfile counts them: every detector, and
# the refusal of an action one of them offered (`observer.refuse_actions`).
COUNTED = (*DETECTORS, ACTION_REFUSED)


def catalogue() -> list[tuple[str, str, str]]:
    """(name, scope, first sentence) of every name a finding's `detector` may hold: the
    chain's detectors, the fleet's, and the refusal of an action (`--list-detectors`)."""
    from nvrx.watch.detectors.fleet import FLEET_DETECTORS

    rows: list[tuple[str, str, str]] = []
    for scope, registry in (("chain", DETECTORS), ("fleet", FLEET_DETECTORS)):
        for name, fn in registry.items():
            # The docstring's first sentence, whole (it may wrap over several source lines).
            paragraph = " ".join((fn.__doc__ or "").strip().split("\n\n")[0].split())
            head, dot, _ = paragraph.partition(". ")
            rows.append((name, scope, f"{head}{'.' if dot else ''}"))
    # Not a detector of the snapshot: the finding a pass makes of an action it would not take.
    rows.append((ACTION_REFUSED, "action", "An action a finding offered names no single node "
                 "Slurm lists: refused, and said."))  # fmt: skip
    return rows


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


__all__ = [
    "DETECTORS",
    "Detector",
    "catalogue",
    "chain_exhausted",
    "chain_not_cancelled",
    "counter_regressed",
    "cycle_stalled",
    "degraded",
    "drained_node_in_use",
    "generation_churn",
    "orphaned_generation",
    "restart_budget_low",
    "restart_storm",
    "run_detectors",
    "spares_exhausted",
    "stalled_progress",
    "suspect_node",
    "watch_blind",
]
