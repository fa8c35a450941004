"""How a campaign reports: a live table at a terminal, upstream-style lines otherwise, and a
JSON summary for programs."""

from __future__ import annotations

import shlex
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from nvrx.campaign.pool import Experiment
from nvrx.campaign.session import Record, SessionState
from nvrx.config import STOP_DIMENSIONS
from nvrx.display import counted, printable
from nvrx.inject.analyst import ExperimentAnalysis
from nvrx.score.model import DIMENSIONS, PASS_VALUE
from nvrx.terminal import note

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


def pool_json(experiments: list[Experiment], gpus_per_node: int) -> dict[str, Any]:
    """The pool listing for `--json`: the table's columns, one object per experiment."""
    return {
        "experiments": [
            {"index": i, "fault_type": e.fault.value, "rank": e.rank, "iteration": e.iteration,
             "nodes": e.nodes, "ranks": e.nodes * gpus_per_node, "name": e.dir_name}
            for i, e in enumerate(experiments, start=1)
        ]
    }  # fmt: skip


def _counts(state: SessionState) -> tuple[int, int, int]:
    done = state.count("ended")
    running = state.count("submitted") + state.count("submitting")
    return done, running, len(state.records) - done - running


class LineReporter:
    """Upstream-style console lines (for logs, pipes and cron)."""

    def __init__(self, out: Console) -> None:
        self.out = out
        self.last_wait: tuple[int, int, int] | None = None

    def say(self, text: str) -> None:
        # Job ids, states, exits and reasons come from Slurm and the journal: printable.
        self.out.print(printable(text), markup=False, highlight=False)

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
        # What the user should know about the campaign, not its progress: stderr, prefixed,
        # whichever console the progress lines go to (docs/output-contract.md, "Text output").
        note(text)

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


# The live view shows every running job, the last experiments that ended and a count of the
# rest: one screen whatever the pool's size.
RECENT_ENDED = 8


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def progress_view(
    state: SessionState, now: datetime, started: datetime, blind: str | None = None
) -> Table:
    """The live view of a campaign (pure): done / running / queued, the pass rate of the scored
    experiments so far (every stop dimension), an ETA from the pace of the finished ones, the
    jobs in Slurm with their state and time since submission, the last ones that ended."""
    done, running, queued = _counts(state)
    scored = [r.verdict for r in state.records if r.verdict and r.verdict.get("status") == "scored"]
    passing = sum(all(v.get(d) == PASS_VALUE[d] for d in STOP_DIMENSIONS) for v in scored)
    parts = [f"{done} done, {running} running, {queued} queued"]
    parts.append(
        f"pass rate so far {round(100 * passing / len(scored))}% of {len(scored)} scored"
        if scored
        else "nothing scored yet"
    )
    elapsed = (now - started).total_seconds()
    if done and done < len(state.records):
        parts.append(f"ETA {_clock(elapsed / done * (len(state.records) - done))}")
    parts.append(f"elapsed {_clock(elapsed)}")
    table = Table(header_style="bold", box=None, pad_edge=False)
    table.title = " · ".join(parts) + (f"  [{printable(blind)}]" if blind else "")
    for column in ("#", "experiment", "job", "status", "state", "time", "exit", "score"):
        table.add_column(column)
    live = state.by_status("submitting") + state.by_status("submitted")
    ended = [state.by_index[i] for i in state.ended_order[-RECENT_ENDED:]]
    for r in live + ended:
        since = (now - r.submitted_at).total_seconds() if r.submitted_at else None
        table.add_row(
            str(r.index + 1),
            r.experiment.entry,
            printable(r.job_id or "-"),
            r.status,
            Text(
                printable(r.state or ("in Slurm" if r.status == "submitted" else "-")),
                style=_STATE_STYLE.get(r.state or "", ""),
            ),
            _clock(since) if since is not None and r.status != "ended" else "-",
            printable(r.exit or "-"),
            _score(r),
        )
    hidden = len(state.records) - len(live) - len(ended)
    if hidden:
        table.caption = f"{hidden} more (queued, or ended earlier): the report lists every one"
    return table


class LiveReporter(LineReporter):
    """The live view (`progress_view`), redrawn in place twice a second on a terminal."""

    def __init__(self, out: Console) -> None:
        super().__init__(out)
        self.state: SessionState | None = None
        self.blind: str | None = None
        self.started = datetime.now(UTC)
        self.live = Live(Text("starting..."), console=out, refresh_per_second=2, transient=False)
        self.live.start()

    def _render(self) -> Table:
        if self.state is None:
            return Table(box=None)
        return progress_view(self.state, datetime.now(UTC), self.started, self.blind)

    def submitted(self, record: Record, done: int, total: int) -> None:
        self.live.update(self._render())

    def ended(self, record: Record, done: int, total: int) -> None:
        self.live.update(self._render())

    def analysed(self, record: Record, result: ExperimentAnalysis, done: int, total: int) -> None:
        self.live.update(self._render())

    def waiting(self, state: SessionState, blind: str | None) -> None:
        self.state, self.blind = state, blind
        self.live.update(self._render())

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
    line = (
        f"session {summary['session']}: {counted(summary['experiments'], 'experiment')}: {states}"
    )
    out.print(Text(printable(line)))
    if summary["resume"]:
        out.print(Text(printable(f"resume with: {summary['resume']}"), style="bold"))
