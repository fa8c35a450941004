"""A campaign's report rows and everything built from them: the rows of a session's state,
the aggregate matrix, the failure patterns that match, the stop condition, the diff between two
sessions, the markdown and JSON reports. Pure functions of a session's state (`inject.report`
reads sessions and writes the files; `inject.html` renders the page from these rows).

One module because every report is built from the same rows and the same stop condition: each
file says the same thing, and none can drift from the others.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import ValidationError

from nvrx.campaign.errors import FORCE_HINT, JournalError
from nvrx.config import STOP_DIMENSIONS
from nvrx.display import counted
from nvrx.score import report as score_report
from nvrx.score.model import DIMENSIONS, PASS_VALUE, Case, GroundTruth, Verdict, passes_all

if TYPE_CHECKING:
    from nvrx.campaign.session import Record, SessionState

TITLE = "# Fault Injection Experiment Report"

# What a pattern of verdicts usually means (the upstream skill's table), and which rows show it.
CRASH_TYPES = frozenset({"SEGFAULT", "OS_ABORT", "SIGKILL", "GPU_ERROR"})


@dataclass(frozen=True)
class Pattern:
    name: str
    meaning: str

    def matches(self, row: Row) -> bool:
        v, fault = row.verdict, row.record.experiment.fault.value
        if v.status != "scored":
            return False
        if self.name == "collateral":
            return v.rank_primary == "false" and v.rank_any == "true"
        if self.name == "rank0_silent":
            return v.rank_any == "false" and row.record.experiment.rank == 0
        if self.name == "crash_unnamed":
            return v.fault_described == "partial" and fault in CRASH_TYPES
        if self.name == "gpu_error_restart":
            return v.restart_correct == "false" and fault == "GPU_ERROR"
        return v.fr_rank_correct == self.name.removeprefix("fr_")


def matched_patterns(report_rows: Sequence[Row]) -> list[tuple[Pattern, list[Row]]]:
    """Each failure pattern some rows show, with those rows (pattern order, row order)."""
    matched = [(p, [r for r in report_rows if p.matches(r)]) for p in PATTERNS]
    return [(p, rows) for p, rows in matched if rows]


PATTERNS = (
    Pattern("collateral", "rank detected but treated as collateral (secondary issues)"),
    Pattern("rank0_silent", "a rank-0 hang silences the watchdog: the log has no rank-0 signal"),
    Pattern("crash_unnamed", "crash keywords present but the fault type is not named"),
    Pattern("gpu_error_restart", "hardware GPU error conflated with a recoverable hang"),
    Pattern(
        "fr_no_dumps",
        "NCCL watchdog did not fire before the job ended: tune TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
    ),
    Pattern("fr_node", "FR isolated the rank's node (GPUs-per-node block), not the rank"),
    Pattern("fr_segment", "FR isolated the rank's segment (FR_SEGMENT_SIZE block), not the rank"),
)


@dataclass(frozen=True)
class Row:
    record: Record
    case: Case
    verdict: Verdict


def _pending(case: Case, why: str) -> Verdict:
    return Verdict(case=case.id, status="unscored", judge="none", reason=why)


def rows(state: SessionState, *, force: bool = False) -> list[Row]:
    """One row per planned experiment, in pool order; one that has not ended, or whose verdict
    is not there yet (or cannot be read), is an `unscored` row saying so, never a missing row."""
    gpus = state.gpus_per_node()
    segment = int(
        ((state.info.get("settings") or {}).get("score.segment_size") or {}).get("value") or 32
    )
    out = []
    for r in state.records:
        e = r.experiment
        analysis = r.analysis or {}
        valid = analysis.get("validity") in (None, "valid")
        truth = GroundTruth(e.fault, e.rank, e.iteration, e.nodes, gpus, segment, valid)
        case = Case(
            id=r.case_id,
            truth=truth,
            job_id=r.job_id,
            job_state=r.state,
            experiment_dir=str(r.dir),
        )
        if r.status != "ended":
            verdict = _pending(case, f"the job has not ended (status {r.status})")
        elif r.verdict is None:
            verdict = _pending(case, "not analysed yet (resume or --reanalyze the session)")
        else:
            try:
                verdict = Verdict.model_validate(r.verdict)
            except ValidationError as exc:
                # A damaged record, like any other journal line: it stops the command, naming
                # the line (--force makes it an unscored row that says so).
                why = exc.errors()[0]
                where = ".".join(map(str, why["loc"])) or "verdict"
                problem = f"its verdict is damaged ({where}: {why['msg']})"
                if not force:
                    raise JournalError(
                        f"{state.journal_path} line {r.analysed_line}: event 'analysed' "
                        f"{problem}{FORCE_HINT}"
                    ) from None
                verdict = _pending(case, f"the journalled verdict cannot be read: {problem}")
        out.append(Row(r, case, verdict))
    return out


def rank_position(rank: int, total: int) -> str:
    """Where the injected rank sits: 0 and 1 (the rendezvous host and its neighbour), the last
    rank, or somewhere in the middle."""
    if rank == 0:
        return "0"
    if rank == total - 1:
        return "last"
    if rank == 1:
        return "1"
    return "mid"


@dataclass
class Cell:
    experiments: int = 0
    scored: int = 0
    passed: dict[str, int] | None = None

    def rate(self, dimension: str) -> float | None:
        if not self.scored or self.passed is None:
            return None
        return self.passed[dimension] / self.scored


def matrix(report_rows: Sequence[Row]) -> dict[tuple[str, int, str], Cell]:
    """fault type × nodes × rank position → experiments, scored, passes per dimension."""
    cells: dict[tuple[str, int, str], Cell] = defaultdict(Cell)
    for row in report_rows:
        e, t = row.record.experiment, row.case.truth
        cell = cells[(e.fault.value, e.nodes, rank_position(e.rank, t.total_ranks))]
        cell.experiments += 1
        if cell.passed is None:
            cell.passed = dict.fromkeys(DIMENSIONS, 0)
        if row.verdict.status == "scored":
            cell.scored += 1
            for d in DIMENSIONS:
                cell.passed[d] += row.verdict.passed(d)
    return dict(sorted(cells.items()))


class Stop(NamedTuple):
    """The campaign's stop condition for one session: whether it is `met`, `why` (or why not)
    and the `rule` it was judged by, in words."""

    met: bool
    why: str
    rule: str


def stop_rule(dimensions: Sequence[str] = STOP_DIMENSIONS) -> str:
    """The stop condition in words: which dimensions every experiment must pass, and where."""
    names = list(dimensions)
    listed = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    return f"every experiment passes {listed} in two consecutive sessions"


def stop_sentence(stop: Stop) -> str:
    """The one sentence every report (terminal, markdown, page) says the stop condition with:
    the rule, met or not, and why."""
    return f"stop condition ({stop.rule}): {'met' if stop.met else 'not met'}: {stop.why}"


def stop_condition(
    current: Sequence[Row],
    previous: Sequence[Row] | None,
    dimensions: Sequence[str] = STOP_DIMENSIONS,
) -> Stop:
    """Every experiment passes every counted dimension (`inject.stop_dimensions`: the four text
    dimensions by default) in two consecutive sessions. "Pass" is explicit: the fully correct
    value; runs not ended, invalid or unscored do not pass. The previous session must have run
    at least the same experiments. The FR rank dimension, when not counted, is reported beside
    the answer (how many experiments have it at `rank`)."""
    met, why = _stop(current, previous, dimensions)
    uncounted = [d for d in DIMENSIONS if d not in dimensions]
    for d in uncounted:
        passing = sum(r.verdict.passed(d) for r in current)
        why += f"; {d} (not counted): {passing} of {len(current)} at {PASS_VALUE[d]}"
    return Stop(met, why, stop_rule(dimensions))


# What a session that passes still needs, said after why it does not stop the campaign yet.
_NEXT = "the next session meets it if it passes too"


def _stop(
    current: Sequence[Row], previous: Sequence[Row] | None, dimensions: Sequence[str]
) -> tuple[bool, str]:
    if not current:
        return False, "the session has no experiment"
    failing_now = [r for r in current if not passes_all(r.verdict, dimensions)]
    if failing_now:
        verb = "does" if len(failing_now) == 1 else "do"
        return False, f"{len(failing_now)} of {counted(len(current), 'experiment')} {verb} not pass"
    if previous is None:
        return (
            False,
            f"this session passes, but there is no session before it to compare with; {_NEXT}",
        )
    before = {r.record.experiment.entry for r in previous}
    if not {r.record.experiment.entry for r in current} <= before:
        return (
            False,
            f"this session passes, but the session before it ran other experiments; {_NEXT}",
        )
    if any(not passes_all(r.verdict, dimensions) for r in previous):
        return False, f"this session passes, but the session before it did not; {_NEXT}"
    return True, "this session and the one before it pass"


def unreadable_previous(exc: Exception, dimensions: Sequence[str]) -> Stop:
    """The stop condition when the session before this one cannot be read."""
    return Stop(False, f"the session before this one cannot be read: {exc}", stop_rule(dimensions))


def markdown(session_dir: Path, report_rows: Sequence[Row], stop: Stop) -> str:
    cases, verdicts = [r.case for r in report_rows], [r.verdict for r in report_rows]
    lines = [TITLE, "", f"Session: `{session_dir}`", ""]
    lines.append(score_report.markdown(cases, verdicts))
    summary = score_report.summarise(verdicts)
    lines += [
        "## Pass rates",
        "",
        f"{counted(summary.cases, 'experiment')}: {summary.scored} scored, "
        f"{summary.invalid} invalid, {summary.unscored} unscored.",
        "",
        "| " + " | ".join(DIMENSIONS) + " |",
        "|" + "---|" * len(DIMENSIONS),
        "| " + " | ".join(score_report.percent(summary.rates[d]) for d in DIMENSIONS) + " |",
        "",
        "## Matrix (fault type × nodes × rank position)",
        "",
        "| FAULT_TYPE | NODES | RANK_POS | experiments | scored | " + " | ".join(DIMENSIONS) + " |",
        "|" + "---|" * (5 + len(DIMENSIONS)),
    ]
    for (fault, nodes, pos), cell in matrix(report_rows).items():
        rates = " | ".join(score_report.percent(cell.rate(d)) for d in DIMENSIONS)
        lines.append(
            f"| {fault} | {nodes} | {pos} | {cell.experiments} | {cell.scored} | {rates} |"
        )
    lines += ["", "## Failure patterns in this session", ""]
    matched = matched_patterns(report_rows)
    if matched:
        lines += ["| pattern | interpretation | experiments |", "|---|---|---|"]
        lines += [
            f"| {p.name} | {p.meaning} | {', '.join(r.record.dir.name for r in rows)} |"
            for p, rows in matched
        ]
    else:
        lines.append("None.")
    sentence = stop_sentence(stop)
    lines += ["", f"**{sentence[:1].upper()}{sentence[1:]}**.", ""]
    return "\n".join(lines)


def report_json(session_dir: Path, report_rows: Sequence[Row], stop: Stop) -> dict[str, Any]:
    cases, verdicts = [r.case for r in report_rows], [r.verdict for r in report_rows]
    doc = score_report.as_json(cases, verdicts, score_report.summarise(verdicts), "session")
    doc["session"] = str(session_dir)
    doc["matrix"] = [
        {
            "fault_type": fault,
            "nodes": nodes,
            "rank_position": pos,
            "experiments": cell.experiments,
            "scored": cell.scored,
            "pass_rates": {d: cell.rate(d) for d in DIMENSIONS},
        }
        for (fault, nodes, pos), cell in matrix(report_rows).items()
    ]
    doc["failure_patterns"] = [
        {"pattern": p.name, "meaning": p.meaning, "experiments": [r.case.id for r in rows]}
        for p, rows in matched_patterns(report_rows)
    ]
    doc["stop_condition"] = {"met": stop.met, "why": stop.why, "rule": stop.rule}
    return doc


@dataclass(frozen=True)
class Change:
    entry: str
    dimension: str
    before: str
    after: str
    improved: bool


def _value(v: Verdict, d: str) -> str:
    return str(getattr(v, d)) if v.status != "unscored" else "unscored"


def diff(old: Sequence[Row], new: Sequence[Row]) -> tuple[list[Change], list[str], list[str]]:
    """Cells (experiment entry × dimension) that improved or regressed from OLD to NEW; plus
    the entries only in OLD and only in NEW."""
    before = {r.record.experiment.entry: r.verdict for r in old}
    after = {r.record.experiment.entry: r.verdict for r in new}
    changes = []
    for entry in [e for e in after if e in before]:
        for d in DIMENSIONS:
            b, a = before[entry], after[entry]
            if _value(b, d) == _value(a, d):
                continue
            if b.passed(d) == a.passed(d):
                continue  # e.g. partial -> false: still failing, not a change that matters
            changes.append(Change(entry, d, _value(b, d), _value(a, d), a.passed(d)))
    return (
        changes,
        [e for e in before if e not in after],
        [e for e in after if e not in before],
    )


def failing_entries(
    report_rows: Sequence[Row], dimensions: Sequence[str] = STOP_DIMENSIONS
) -> list[str]:
    """The pool of a re-run: every experiment that did not pass every counted dimension (those
    the stop condition counts), in order, each once."""
    failing = (r for r in report_rows if not passes_all(r.verdict, dimensions))
    return list(dict.fromkeys(r.record.experiment.entry for r in failing))
