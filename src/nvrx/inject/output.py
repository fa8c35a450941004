"""How a campaign reports: a live table at a terminal, upstream-style lines otherwise, and a
JSON summary for programs."""

from __future__ import annotations

import shlex
from collections import Counter
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from nvrx.campaign.pool import Experiment
from nvrx.campaign.session import Record, SessionState
from nvrx.inject.analysis import ExperimentAnalysis
from nvrx.score.model import DIMENSIONS, PASS_VALUE

_STATE_STYLE = {"COMPLETED": "green", "FAILED": "red", "CANCELLED": "yellow", "TIMEOUT": "yellow"}


def pool_table(experiments: list[Experiment], gpus_per_node: int) -> Table:
    table = Table(header_style="bold", box=None, pad_edge=False)
    for column in ("#", "FAULT_TYPE", "RANK", "ITER", "NODES", "RANKS", "EXPERIMENT_DIR"):
        table.add_column(column)
    for i, e in enumerate(experiments, start=1):
        table.add_row(
            str(i),
            e.fault.value,
            str(e.rank),
            str(e.iteration),
            str(e.nodes),
            str(e.nodes * gpus_per_node),
            e.dir_name,
        )
    return table


def _counts(state: SessionState) -> tuple[int, int, int]:
    done = len(state.by_status("ended"))
    running = len(state.by_status("submitted")) + len(state.by_status("submitting"))
    return done, running, len(state.records) - done - running


class LineReporter:
    """Upstream-style console lines (for logs, pipes and cron)."""

    def __init__(self, out: Console) -> None:
        self.out = out
        self.last_wait: tuple[int, int, int] | None = None

    def say(self, text: str) -> None:
        self.out.print(text, markup=False, highlight=False)

    def submitted(self, record: Record, done: int, total: int) -> None:
        e = record.experiment
        self.say(
            f"  submitted: {e.fault.value} rank={e.rank}  iter={e.iteration} "
            f"nodes={e.nodes} -> job={record.job_id}"
        )

    def ended(self, record: Record, done: int, total: int) -> None:
        e = record.experiment
        self.say(
            f">>> [{done}/{total}] ended: {e.fault.value} n={e.nodes} rank={e.rank} "
            f"iter={e.iteration} job={record.job_id} state={record.state} "
            f"exit={record.exit or '?'}"
        )

    def analysed(self, record: Record, result: ExperimentAnalysis, done: int, total: int) -> None:
        """Upstream's analysis lines, plus the reason when unscored."""
        e, v = record.experiment, result.verdict
        self.say(
            f">>> [{done}/{total}] Analyzing: {e.fault.value} n={e.nodes} rank={e.rank} "
            f"iter={e.iteration} job={record.job_id} state={record.state}"
        )
        valid = "true" if result.validity == "valid" else "false"
        self.say(f"    run_valid: {valid}" + ("" if valid == "true" else f" ({result.reason})"))
        self.say(f"    restart_decision: {result.decision or 'N/A'}")
        if v is None or v.status == "unscored":
            self.say(f"    unscored: {v.reason if v else 'no verdict'}")
            return
        self.say(
            f"    run_valid={valid} restart_correct={v.restart_correct} "
            f"rank_primary={v.rank_primary} rank_any={v.rank_any} "
            f"fault_described={v.fault_described} fr_rank={v.fr_rank_correct}"
        )

    def waiting(self, state: SessionState, blind: str | None) -> None:
        counts = _counts(state)
        if blind:
            self.say(f"{datetime.now():%H:%M:%S} >>> {blind}")
        if counts != self.last_wait:
            done, running, queued = counts
            self.say(
                f"{datetime.now():%H:%M:%S} >>> {done}/{len(state.records)} done, "
                f"{running} running, {queued} queued"
            )
            self.last_wait = counts

    def note(self, text: str) -> None:
        self.say(f"note: {text}")

    def close(self) -> None:
        pass


def _score(record: Record) -> Text:
    """Dimensions passed out of five, once the experiment is analysed."""
    v = record.verdict
    if v is None:
        return Text("-")
    if v.get("status") != "scored":
        return Text(str(v.get("status")), style="yellow")
    passed = sum(v.get(d) == PASS_VALUE[d] for d in DIMENSIONS)
    return Text(f"{passed}/{len(DIMENSIONS)}", style="green" if passed == len(DIMENSIONS) else "")


class LiveReporter(LineReporter):
    """A table that redraws in place: done / running / queued and every experiment's state."""

    def __init__(self, out: Console) -> None:
        super().__init__(out)
        self.state: SessionState | None = None
        self.blind: str | None = None
        self.live = Live(Text("starting..."), console=out, refresh_per_second=2, transient=False)
        self.live.start()

    def _render(self) -> Table:
        state = self.state
        table = Table(header_style="bold", box=None, pad_edge=False)
        if state is None:
            return table
        done, running, queued = _counts(state)
        table.title = f"{done} done, {running} running, {queued} queued" + (
            f"  [{self.blind}]" if self.blind else ""
        )
        for column in ("#", "experiment", "job", "status", "state", "exit", "score"):
            table.add_column(column)
        for r in state.records:
            style = _STATE_STYLE.get(r.state or "", "")
            table.add_row(
                str(r.index + 1),
                r.experiment.entry,
                r.job_id or "-",
                r.status,
                Text(r.state or "-", style=style),
                r.exit or "-",
                _score(r),
            )
        return table

    def submitted(self, record: Record, done: int, total: int) -> None:
        self.live.update(self._render())

    def ended(self, record: Record, done: int, total: int) -> None:
        self.live.update(self._render())

    def analysed(self, record: Record, result: ExperimentAnalysis, done: int, total: int) -> None:
        self.live.update(self._render())

    def waiting(self, state: SessionState, blind: str | None) -> None:
        self.state, self.blind = state, blind
        self.live.update(self._render())

    def note(self, text: str) -> None:
        self.live.console.print(Text(f"note: {text}", style="dim"))

    def close(self) -> None:
        self.live.stop()


def summary_json(
    state: SessionState, session_dir: str, error: str | None, interrupted: bool
) -> dict[str, Any]:
    return {
        "session": session_dir,
        "complete": all(r.status == "ended" for r in state.records),
        "interrupted": interrupted,
        "error": error,
        "experiments": len(state.records),
        "states": dict(Counter(r.state or r.status for r in state.records)),
        "results": [r.to_json() for r in state.records],
        "resume": None
        if all(r.status == "ended" for r in state.records)
        else f"nvrx inject-loop --resume {shlex.quote(session_dir)}",
    }


def print_summary(out: Console, summary: dict[str, Any]) -> None:
    states = ", ".join(f"{k} {v}" for k, v in sorted(summary["states"].items()))
    out.print(
        Text(f"session {summary['session']}: {summary['experiments']} experiment(s): {states}")
    )
    if summary["resume"]:
        out.print(Text(f"resume with: {summary['resume']}", style="bold"))
