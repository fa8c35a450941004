"""How a watch pass reports: one screen for people, one JSON object per pass for programs, and
the goodput breakdown (a fleet's reports are `watch.fleetview`'s, built from these)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TextIO

from nvrx.contract import SCHEMA
from nvrx.display import counted, printable
from nvrx.junit import TestCase, junit_xml
from nvrx.slurm.hostlist import compress
from nvrx.watch.detectors.common import age_seconds, ago, cycle_log, cycle_log_file, iso_time
from nvrx.watch.drains import drain_line, drain_status
from nvrx.watch.goodput import CATEGORIES, NOT_READ, SOURCES, Goodput, span_text
from nvrx.watch.model import Finding, Severity
from nvrx.watch.watcher import PassResult

JSON_SCHEMA = SCHEMA  # the one output contract's (nvrx.contract)
# A screen line is a list of (text, style) segments: styled with rich on a terminal, written
# as plain text otherwise (cron, pipes), so a pass that is not watched never imports rich.
Segment = tuple[str, str]
Line = list[Segment]
SEVERITY_STYLE = {Severity.CRITICAL: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
# A pass's (or a chain's) state word (`PassResult.state`), as the screen styles it.
STATE_STYLE = {"critical": "bold red", "blind": "yellow", "warning": "yellow", "info": "cyan",
               "ok": "green"}  # fmt: skip


def pass_json(result: PassResult) -> dict[str, Any]:
    snap = result.snapshot
    now = snap.observed_at
    chain = snap.chain
    latest = snap.latest
    current = snap.current_job
    platform = snap.platform
    ckpt = snap.checkpoint
    return {
        "schema": JSON_SCHEMA,
        "observed_at": now.isoformat(),
        "host": snap.host,
        "exit_code": result.exit_code,
        "state": result.state,
        "degraded": result.degraded,
        "chain": {
            "name": chain.name,
            "user": chain.user,
            "chain_id": chain.chain_id,
            "work_dir": chain.work_dir,
            "resolved_from": chain.resolved_from,
            "expect_running": chain.expect_running,
            "max_restarts": chain.max_restarts,
            "no_restart_exit_code": chain.no_restart_exit_code,
        },
        "snapshot": {
            "platform": None
            if platform is None
            else {
                "queue_ok": platform.queue_ok,
                "queue_error": platform.queue_error,
                "accounting_ok": platform.accounting_ok,
                "accounting_error": platform.accounting_error,
                "sinfo_ok": platform.drained is not None,
                "sinfo_error": platform.drained_error,
                # The chain's running tasks on drained nodes (drained_node_in_use's subject).
                "drained_in_use": [
                    {
                        "generation": gen,
                        "task": task,
                        "node": d.name,
                        "state": d.state,
                        "since": iso_time(d.since),
                        "reason": d.reason,
                    }
                    for gen, task, d in platform.drained_in_use()
                ],
                "generations": [
                    {
                        "job_id": g.job_id,
                        "tasks": {str(k): v.value for k, v in sorted(g.task_states.items())},
                        "running": g.running,
                        "pending": g.pending,
                        "task0_live": g.task0_live,
                    }
                    for g in platform.generations
                ],
                "task0_endings": [
                    {
                        "job_id": e.job_id,
                        "state": e.state.value,
                        "end": iso_time(e.end),
                        "exit": str(e.exit) if e.exit else None,
                        "no_restart": e.no_restart,
                    }
                    for e in platform.endings
                ],
            },
            "cycles": len(snap.cycles),
            "current_job": current,
            "restarts": snap.cycles.count_of(current) - 1 if current else None,
            "latest_cycle": None
            if latest is None
            else {
                "key": latest.key,
                "cycle_number": latest.cycle_number,
                "start": iso_time(latest.start),
                "end": iso_time(latest.end),
                "age_seconds": age_seconds(now, latest.start),
                "active_nodes": compress(latest.active_nodes),
                "standby_nodes": compress(latest.standby_nodes),
                "cycle_log_file": cycle_log_file(latest),
            },
            "checkpoint": {
                "path": ckpt.path,
                "value": ckpt.value,
                "mtime": iso_time(ckpt.mtime),
                "age_seconds": age_seconds(now, ckpt.mtime),
                "first_seen": iso_time(ckpt.first_seen),
                "save_interval_seconds": ckpt.save_interval_seconds,
                "error": ckpt.error,
                "released": ckpt.released,
            },
            "skipped_files": len(snap.skipped),
        },
        "drains": drain_status(result),
        "findings": [f.to_json() for f in result.findings],
        "goodput": result.goodput.to_json() if result.goodput is not None else None,
        "actions": result.actions,
        "sink_errors": result.sink_errors,
        "notes": result.notes,
    }


def pass_junit(result: PassResult, detectors: Sequence[str]) -> str:
    """The pass as JUnit (`--junit FILE`): one testcase per detector that ran. A critical finding
    fails its detector's case (exit 1), a blind pass errors `watch_blind`'s (exit 3); warnings
    and notes pass, their lines in the case's output."""
    chain = result.snapshot.chain
    classname = chain.name or chain.work_dir or "cycle-files"
    by_detector: dict[str, list[Finding]] = {}
    for f in result.findings:
        by_detector.setdefault(f.detector, []).append(f)
    tests = []
    # A finding's detector always has its case, and a blind pass its error (even with
    # watch_blind disabled: that hides the finding, never the exit code).
    names = dict.fromkeys([*detectors, *by_detector, *(["watch_blind"] * result.degraded)])
    for name in names:
        found = by_detector.get(name, [])
        lines = "\n".join(f"{f.severity.value.upper()} {f.summary}" for f in found)
        critical = [f for f in found if f.severity is Severity.CRITICAL]
        if name == "watch_blind" and result.degraded:
            why = found[0].summary if found else "the pass could not see"
            tests.append(TestCase(classname, name, "error", why, lines, "blind"))
        elif critical:
            tests.append(
                TestCase(classname, name, "failure", critical[0].summary, lines, "critical")
            )
        else:
            tests.append(TestCase(classname, name, text=lines))
    properties = {"state": result.state, "observed_at": result.snapshot.observed_at.isoformat()}
    return junit_xml("nvrx-watch", properties, tests)


def pass_lines(result: PassResult) -> list[Line]:
    """The screen of one pass. Every segment's text is already printable: data (paths, errors)
    is never rich markup, nor a control sequence for the terminal."""
    lines: list[Line] = []
    snap = result.snapshot
    now = snap.observed_at
    chain = snap.chain
    state = result.state
    status = (state.upper(), STATE_STYLE[state])
    title: Line = [("nvrx watch: ", ""), (printable(chain.name or "(cycle files only)"), "bold")]
    if chain.chain_id:
        title.append((printable(f" (chain {chain.chain_id})"), ""))
    if chain.user and snap.platform is not None:  # whose jobs were asked for (none: no one's)
        title.append((printable(f", user {chain.user}"), ""))
    title += [("  ", ""), status]
    lines.append(title)

    def say(text: str, style: str = "") -> None:
        lines.append([(printable(text), style)])

    if chain.work_dir:
        say(f"work dir: {chain.work_dir}", "dim")

    platform = snap.platform
    if platform is None:
        say("generations: not asked (--platform none)")
    elif not platform.queue_ok:
        say(f"generations: UNKNOWN (squeue failed: {platform.queue_error})", "yellow")
    else:
        parts = []
        for g in platform.generations:
            task0 = g.task_states.get(0)
            parts.append(
                f"{g.job_id}: task0 {task0.value if task0 else 'gone'}, "
                f"{g.running} running, {g.pending} pending"
            )
        say("generations: " + ("; ".join(parts) or "none queued or running"))
    say(*drain_line(result))
    if platform is not None and platform.queue_ok and platform.endings:
        recent = sorted(platform.endings, key=lambda e: e.end or now)[-3:]
        say(
            "task 0 endings: "
            + "; ".join(
                f"{e.job_id} {e.state.value} {e.exit or '?'}"
                + (" (no-restart verdict)" if e.no_restart else "")
                + (f", {ago(age_seconds(now, e.end))}" if e.end else "")
                for e in recent
            )
        )

    latest = snap.latest
    if latest is None:
        say("cycle: no cycle-info files yet")
    else:
        restarts = snap.cycles.count_of(latest.job_id) - 1
        end = "open" if latest.end is None else f"ended {ago((now - latest.end).total_seconds())}"
        standby = compress(latest.standby_nodes) or "none"
        say(
            f"cycle: {latest.key} (cycle {latest.cycle_number}, {counted(restarts, 'restart')} in "
            f"this generation), started {ago((now - latest.start).total_seconds())}, {end}; "
            f"active {compress(latest.active_nodes)}, standby {standby}"
        )
        if latest.log_file:  # the launcher's per-cycle log: where to read why it ended
            say(f"cycle log: {cycle_log(latest)}", "dim")
    ckpt = snap.checkpoint
    if ckpt.value is not None:
        written = ago(age_seconds(now, ckpt.mtime)) if ckpt.mtime else "earlier"
        say(
            f"checkpoint: iteration {ckpt.value}, written {written}"
            + (f" (now {ckpt.error})" if ckpt.error else "")
        )
    elif ckpt.error:
        say(f"checkpoint: {ckpt.path}: {ckpt.error}", "yellow")
    elif ckpt.released:
        say(f"checkpoint: none yet ({ckpt.path} holds 'release': no iteration)")
    else:
        say(f"checkpoint: none yet ({ckpt.path or 'no checkpoint file known'})")
    if snap.cycles_blind:
        say(f"cycle files: UNREADABLE ({snap.cycles_blind})", "yellow")
    if result.goodput is not None and result.goodput.fraction is not None:
        say(goodput_line(result.goodput))

    if not result.findings:
        say("findings: none", "green")
    for f in result.findings:
        row: Line = [("  ", ""), (f"{f.severity.value.upper():8}", SEVERITY_STYLE[f.severity])]
        row.append((printable(f" {f.detector}: {f.summary}"), ""))
        if f.first_seen is not None and (now - f.first_seen).total_seconds() >= 60:
            row.append((f" (since {ago(age_seconds(now, f.first_seen))})", "dim"))
        lines.append(row)
        for extra in (f.detail, f"runbook: {f.runbook}" if f.runbook else ""):
            if extra:
                say(f"           {extra}", "dim")
    for action in result.actions:
        say(action, "bold")
    return lines  # the pass's notes go to stderr (PassOutput.show), not into the answer


def pass_renderable(result: PassResult, footer: str = "") -> Any:
    """The pass's screen as one rich renderable (the live view of `watch --interval` on a
    terminal), with `footer` (when the next pass runs) below it."""
    return lines_renderable(pass_lines(result), footer)


def fit_screen(lines: list[Line], rows: int, width: int) -> list[Line]:
    """The lines that fit a terminal of `rows` x `width` (a line longer than the width takes
    several rows), the footer's row kept free; what does not fit is named, never dropped
    without a word: the screen's most important lines come first (the state, then findings by
    severity), so the cut is at the bottom."""
    width = max(width, 1)

    def height(line: Line) -> int:
        return max(1, -(-sum(len(text) for text, _ in line) // width))

    def notice(hidden: int) -> Line:
        return [(
            f"... {counted(hidden, 'more line')} {'does' if hidden == 1 else 'do'} not fit this "
            f"terminal ({rows} rows): enlarge it, or see every finding with --json or a pass "
            "without --interval", "bold",
        )]  # fmt: skip

    budget = max(rows - 1, 2)  # the footer's row
    if sum(height(line) for line in lines) <= budget:
        return lines
    kept: list[Line] = []
    used = height(notice(len(lines)))  # the notice's rows
    for line in lines:
        if used + height(line) > budget:
            break
        kept.append(line)
        used += height(line)
    return [*kept, notice(len(lines) - len(kept))]


def lines_renderable(lines: list[Line], footer: str = "") -> Any:
    from rich.console import Group
    from rich.text import Text

    rows = []
    for line in lines:
        row = Text()
        for text, style in line:
            row.append(text, style=style or None)
        rows.append(row)
    if footer:
        rows.append(Text(footer, style="dim"))
    return Group(*rows)


def print_pass(result: PassResult, out: TextIO, *, color: bool) -> None:
    """Write one pass's screen to `out`, styled when `color` (a terminal)."""
    print_lines(pass_lines(result), out, color=color)


def print_lines(lines: list[Line], out: TextIO, *, color: bool) -> None:
    if not color:
        out.write("".join("".join(text for text, _ in line) + "\n" for line in lines))
        out.flush()
        return
    from rich.console import Console

    console = Console(file=out, highlight=False, markup=False, emoji=False, soft_wrap=True)
    console.print(lines_renderable(lines))


def goodput_line(good: Goodput) -> str:
    """`goodput: 81.8% of 5.5m (productive 4.5m, lost 30s, ...)`, every category named; one
    this pass had no source for says so, never `0s` (`--platform none`: no queue wait read)."""
    short = {"progress_lost": "lost", "restart_overhead": "restarts", "queue_wait": "queue",
             "checkpoint_save": "saving"}  # fmt: skip
    parts = ", ".join(
        f"{short.get(k, k)} "
        + ("not read" if good.sources.get(k) == NOT_READ else span_text(good.seconds.get(k, 0.0)))
        for k in CATEGORIES
    )
    return f"goodput: {percent(good.fraction)} of {span_text(good.wall)} ({parts})"


def goodput_lines(label: str, good: Goodput | None) -> list[Line]:
    """`--goodput`: one chain's (or the fleet's) wall time by category, each with its source."""
    if good is None or good.fraction is None:
        return [[(printable(f"goodput of {label}: nothing ran yet"), "")]]
    span = f"{good.start:%Y-%m-%d %H:%M:%S} to {good.end:%Y-%m-%d %H:%M:%S} UTC"
    lines: list[Line] = [
        [(printable(f"goodput of {label}: "), "bold"), (percent(good.fraction), "bold"),
         (printable(f" of {span_text(good.wall)} ({span})"), "")],
        [(f"  {'category':<17} {'time':>8} {'share':>7}  source", "bold")],
    ]  # fmt: skip
    for k in CATEGORIES:
        value = good.seconds.get(k, 0.0)
        share = percent(value / good.wall)
        source = good.sources.get(k, SOURCES[k])
        lines.append([(printable(f"  {k:<17} {span_text(value):>8} {share:>7}  {source}"), "")])
    lines += [[(printable(f"  note: {n}"), "dim")] for n in good.notes]
    return lines


def percent(fraction: float | None) -> str:
    return "-" if fraction is None else f"{100 * fraction:.1f}%"
