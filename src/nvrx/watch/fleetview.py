"""How a fleet pass reports: one summary table (a row per chain), one document (an object per
chain, each today's pass object), and the goodput of every chain and of the fleet."""

from __future__ import annotations

from typing import Any

from nvrx.config import WatchSettings
from nvrx.display import counted, printable
from nvrx.slurm.hostlist import compress
from nvrx.watch.detectors.common import age_seconds, ago
from nvrx.watch.drains import fleet_drain_line, fleet_drain_status
from nvrx.watch.fleet import ChainPass, FleetResult
from nvrx.watch.goodput import Goodput, fleet_goodput
from nvrx.watch.model import Snapshot
from nvrx.watch.output import (
    JSON_SCHEMA,
    SEVERITY_STYLE,
    STATE_STYLE,
    Line,
    goodput_line,
    goodput_lines,
    pass_json,
    percent,
)
from nvrx.watch.watcher import pass_exit_code, worst_state


def chain_state(chain: ChainPass) -> str:
    """One word for the summary: the pass's state (`PassResult.state`), blind without one."""
    return "blind" if chain.result is None else chain.result.state


def fleet_state(fleet: FleetResult) -> str:
    """The fleet's word: its worst chain's (or fleet finding's)."""
    return worst_state(
        [*map(chain_state, fleet.chains), *(f.severity.value for f in fleet.findings)]
    )


def fleet_json(fleet: FleetResult, settings: WatchSettings) -> dict[str, Any]:
    """One document: one object per chain (its work dir, today's pass object with its
    findings), the fleet findings, the Slurm commands the pass cost."""
    chains = []
    for c in fleet.chains:
        body: dict[str, Any] = (
            pass_json(c.result)
            if c.result is not None
            else {
                "exit_code": pass_exit_code(critical=False, blind=True, codes=fleet.exit_codes),
                "degraded": True,
                "findings": [],
            }
        )
        chains.append(
            {
                "label": c.label,
                "work_dir": c.work_dir,
                "state": chain_state(c),
                "error": c.error,
                "restarts_in_window": c.failed,
                **body,
            }
        )
    return {
        "schema": JSON_SCHEMA,
        "fleet": True,
        "observed_at": fleet.observed_at.isoformat(),
        "state": fleet_state(fleet),
        "exit_code": fleet.exit_code,
        "slurm_commands": fleet.slurm_commands,
        "chains": chains,
        "fleet_findings": [f.to_json() for f in fleet.findings],
        "drains": fleet_drain_status(fleet, settings),
        "goodput": _fleet_goodput(fleet).to_json(),
        "sink_errors": fleet.sink_errors,
        "notes": fleet.notes,
    }


def fleet_goodput_report(fleet: FleetResult) -> tuple[list[Line], dict[str, Any]]:
    """`--goodput --fleet`: every chain's breakdown, then the fleet's; and its document."""
    lines: list[Line] = []
    chains = []
    for c in fleet.chains:
        good = c.result.goodput if c.result else None
        lines += (
            goodput_lines(c.label, good)
            if c.result
            else [[(printable(f"goodput of {c.label}: BLIND ({c.error})"), "yellow")]]
        )
        chains.append({"label": c.label, "work_dir": c.work_dir, "state": chain_state(c),
                       "error": c.error, "goodput": good.to_json() if good else None})  # fmt: skip
    total = _fleet_goodput(fleet)
    lines += goodput_lines("the fleet", total)
    doc = {"fleet": True, "state": fleet_state(fleet), "chains": chains, "goodput": total.to_json()}
    return lines, doc


def _fleet_goodput(fleet: FleetResult) -> Goodput:
    return fleet_goodput([g for c in fleet.chains if c.result and (g := c.result.goodput)])


def _drained(snap: Snapshot) -> str:
    """The drained nodes the chain's running tasks hold, out of how many they hold (`0/4`,
    `n2(1/4)`; `-`: not asked or no node held; `?`: squeue or sinfo failed)."""
    platform = snap.platform
    if platform is None:
        return "-"
    if platform.drained is None or not platform.queue_ok:
        return "?"
    nodes = platform.chain_nodes()
    if not nodes:
        return "-"
    drained = sorted({d.name for _, _, d in platform.drained_in_use()})
    count = f"{len(drained)}/{len(nodes)}"
    return f"{compress(drained)}({count})" if drained else count


def fleet_lines(fleet: FleetResult, settings: WatchSettings) -> list[Line]:
    """The fleet's summary: one row per chain, then the fleet findings and each chain's."""
    now = fleet.observed_at
    window = f"{settings.fleet_window / 3600:g}h"
    header = (
        "chain", "state", "generation", "checkpoint", "age", f"restarts/{window}", "drained",
        "poller", "goodput", "findings",
    )  # fmt: skip
    rows: list[tuple[str, ...]] = []
    for c in fleet.chains:
        r = c.result
        if r is None:
            rows.append((c.label, "blind", *["?"] * (len(header) - 2)))
            continue
        snap = r.snapshot
        ckpt = snap.checkpoint
        rows.append(
            (
                c.label,
                chain_state(c),
                snap.current_job or "-",
                str(ckpt.value) if ckpt.value is not None else "-",
                ago(age_seconds(now, ckpt.mtime)) if ckpt.mtime else "-",
                str(c.failed),
                _drained(snap),
                {"unknown": "?"}.get(snap.chain.drain_poller, snap.chain.drain_poller),
                percent(r.goodput.fraction if r.goodput else None),
                str(len(r.findings)),
            )
        )
    total = _fleet_goodput(fleet)
    rows.append(("fleet", *[""] * (len(header) - 3), percent(total.fraction), ""))
    widths = [max(len(printable(row[i])) for row in (header, *rows)) for i in range(len(header))]
    lines: list[Line] = [
        [
            (f"nvrx watch: {counted(len(fleet.chains), 'chain')}  ", "bold"),
            (fleet_state(fleet).upper(), STATE_STYLE[fleet_state(fleet)]),
        ],
        [("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip(), "bold")],
    ]
    for row in rows:
        line: Line = []
        for i, (cell, w) in enumerate(zip(row, widths, strict=True)):
            last = i == len(row) - 1  # no trailing blanks for a pipe or a diff to trip on
            text = printable(cell) if last else printable(cell).ljust(w) + "  "
            line.append((text, STATE_STYLE.get(cell, "") if i == 1 else ""))
        if line and not line[-1][0]:  # an empty last cell (the fleet row's findings)
            line[-2] = (line[-2][0].rstrip(), line[-2][1])
        lines.append(line)
    if total.fraction is not None:
        lines.append(
            [(printable(goodput_line(total).replace("goodput:", "fleet goodput:", 1)), "")]
        )
    lines.append([(printable(fleet_drain_line(fleet, settings)), "")])
    for f in fleet.findings:
        lines.append(
            [("  ", ""), (f"{f.severity.value.upper():8}", SEVERITY_STYLE[f.severity]),
             (printable(f" {f.detector}: {f.summary}"), "")]
        )  # fmt: skip
    for c in fleet.chains:
        if c.error:
            lines.append([(printable(f"{c.label}: BLIND: {c.error}"), "yellow")])
        for f in c.result.findings if c.result else ():
            lines.append(
                [(printable(f"{c.label}: "), "dim"), (f"{f.severity.value.upper():8}",
                 SEVERITY_STYLE[f.severity]), (printable(f" {f.detector}: {f.summary}"), "")]
            )  # fmt: skip
        for action in c.result.actions if c.result else ():
            lines.append([(printable(f"{c.label}: {action}"), "bold")])
    return lines  # notes go to stderr (PassOutput.show), not into the answer
