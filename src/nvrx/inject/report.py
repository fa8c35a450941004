"""A campaign's report files, rebuilt from its journal at any time (rows are never lost on
resume): upstream's markdown table, JSON, JUnit and the page, with the stop condition against the
previous session. Reads sessions and writes the files; what they say is `inject.rows` (pure) and
the page is rendered by `inject.html` (pure).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from nvrx.campaign.errors import CampaignError
from nvrx.campaign.session import Session
from nvrx.config import STOP_DIMENSIONS
from nvrx.files import InputError, read_tail, within_root, write_atomic
from nvrx.inject.html import Evidence, evidence_of, page, with_evidence
from nvrx.inject.rows import (
    Row,
    Stop,
    diff,
    markdown,
    report_json,
    rows,
    stop_condition,
    unreadable_previous,
)
from nvrx.score import report as score_report
from nvrx.score.inputs import (
    ANALYSIS_DIR,
    FR_ANALYSIS,
    LOG_ATTRIBUTION,
    STRIPPED_LOG,
    changed_since_judged,
)

REPORT_MD = "experiments_report.md"
REPORT_JSON = "report.json"
REPORT_JUNIT = "report.junit.xml"
REPORT_HTML = "report.html"
_READ_CAP = 1 << 20  # read of one evidence file, from its end: the page shows its tail


def _read(path: Path, session_dir: Path) -> str:
    """The file's tail (a log of any size ends where it failed); "" when there is none. A file
    that cannot be shown (it leads out of the session, it cannot be read) says why instead: the
    page never copies another file in, and never hides that something is missing."""
    if not path.is_file():
        return ""
    try:
        return read_tail(
            within_root(path, session_dir, "analysis file"), "analysis file", _READ_CAP
        )
    except InputError as exc:
        return f"(not shown: {exc})"


def evidence(row: Row, session_dir: Path, *, shown: bool = True) -> Evidence:
    """The experiment's analysis files as the page shows them; a missing file is an empty part.
    Not `shown` (past the page's budget): their paths alone, nothing read."""
    analysis = Path(row.record.dir) / ANALYSIS_DIR
    paths = (analysis / STRIPPED_LOG, analysis / LOG_ATTRIBUTION, analysis / FR_ANALYSIS)
    files = tuple(os.path.relpath(p, session_dir) for p in paths if p.is_file())
    if not shown:
        return Evidence(files=files, shown=False)
    log, attribution, fr_table = (_read(path, session_dir) for path in paths)
    return evidence_of(log, attribution, fr_table, files)


def older_sessions(session_dir: Path) -> list[Path]:
    """The sibling sessions older than this one, oldest first (session names sort by time)."""
    return sorted(
        p
        for p in session_dir.parent.iterdir()
        if p.is_dir() and p.name < session_dir.name and (p / "journal.jsonl").is_file()
    )


def previous_session(session_dir: Path) -> Path | None:
    """The newest sibling session older than this one."""
    older = older_sessions(session_dir)
    return older[-1] if older else None


def session_rows(session_dir: Path, *, force: bool = False) -> list[Row]:
    """The journal's rows, each case saying which judged files changed since (read now)."""
    return [
        replace(r, case=replace(r.case, changed=changed_since_judged(r.record)))
        for r in rows(Session.open(session_dir).state(force=force), force=force)
    ]


def rows_and_stop(
    session_dir: Path, *, force: bool = False, dimensions: Sequence[str] = STOP_DIMENSIONS
) -> tuple[list[Row], Stop]:
    """The session's rows and its stop condition against the previous session (an unreadable
    previous session is said, not fatal). `force` skips the session's damaged journal lines."""
    current, _, stop = with_previous(session_dir, force, dimensions)
    return current, stop


def with_previous(
    session_dir: Path, force: bool, dimensions: Sequence[str]
) -> tuple[list[Row], list[Row] | None, Stop]:
    """The session's rows, the previous session's (None when there is none or it cannot be
    read) and the stop condition; the previous session is read once."""
    session_dir = session_dir.resolve()
    current = session_rows(session_dir, force=force)
    older = previous_session(session_dir)
    if older is None:
        return current, None, stop_condition(current, None, dimensions)
    try:
        previous = session_rows(older)
    except CampaignError as exc:
        return current, None, unreadable_previous(exc, dimensions)
    return current, previous, stop_condition(current, previous, dimensions)


def html_page(
    session_dir: Path,
    current: Sequence[Row],
    previous: Sequence[Row] | None,
    stop: Stop,
    dimensions: Sequence[str],
) -> str:
    """The session's self-contained HTML page (nvrx.inject.html)."""
    trend = diff(previous, current) if previous is not None else None
    shown = set(with_evidence(current, dimensions))
    evidences = [evidence(r, session_dir, shown=i in shown) for i, r in enumerate(current)]
    return page(session_dir, current, stop, evidences, trend, dimensions)


def write_html(
    session_dir: Path, *, force: bool = False, dimensions: Sequence[str] = STOP_DIMENSIONS
) -> Path:
    """Rebuild `report.html` alone from the journal; its path."""
    session_dir = session_dir.resolve()
    current, previous, stop = with_previous(session_dir, force, dimensions)
    path = session_dir / REPORT_HTML
    write_atomic(path, html_page(session_dir, current, previous, stop, dimensions))
    return path


def write_reports(
    session_dir: Path, *, force: bool = False, dimensions: Sequence[str] = STOP_DIMENSIONS
) -> tuple[list[Path], list[Row], Stop]:
    """Rebuild the session's report files from its journal (and the previous session's, for
    the stop condition); returns the paths, the rows and the stop condition. The journal is
    read in full before anything is written: a damaged line stops it with nothing written."""
    session_dir = session_dir.resolve()
    current, previous, stop = with_previous(session_dir, force, dimensions)
    verdicts = [r.verdict for r in current]
    paths = [
        session_dir / REPORT_MD,
        session_dir / REPORT_JSON,
        session_dir / REPORT_JUNIT,
        session_dir / REPORT_HTML,
    ]
    write_atomic(paths[0], markdown(session_dir, current, stop))
    write_atomic(paths[1], json.dumps(report_json(session_dir, current, stop), indent=2) + "\n")
    write_atomic(paths[2], score_report.junit([r.case for r in current], verdicts, "session"))
    write_atomic(paths[3], html_page(session_dir, current, previous, stop, dimensions))
    return paths, current, stop
