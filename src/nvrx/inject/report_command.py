"""`nvrx report`: a campaign's report rebuilt from its journal, or what changed between two."""

from __future__ import annotations

from pathlib import Path

from nvrx.config import ConfigSource
from nvrx.contract import write_document
from nvrx.terminal import CommandError, Output, stdout, write_outputs

# Experiments named on a failure pattern's line; the rest are counted (the report files name all).
PATTERN_IDS = 20


def report_command(
    args: list[str],
    as_json: bool,
    force: bool,
    *,
    html: str | None = None,
    junit: Path | None = None,
) -> int:
    """`SESSION` or `diff OLD NEW`. Returns 1 when a cell regressed (diff), else 0. `html` is
    the page's path ("": the session's `report.html`), `junit` the JUnit file's; both are
    rebuilt from the journal before the report prints."""
    from rich.text import Text

    from nvrx.display import printable
    from nvrx.inject import report
    from nvrx.inject import rows as report_rows
    from nvrx.inject.command import open_session
    from nvrx.score.load import input_paths
    from nvrx.score.report import junit as score_junit
    from nvrx.score.report import percent, summarise

    def open_rows(path: str) -> list[report_rows.Row]:
        open_session(Path(path), force)
        return report.session_rows(Path(path).resolve(), force=force)

    if args[0] == "diff":
        if html is not None or junit is not None:
            raise CommandError("--html and --junit are a session's: report SESSION --html")
        if len(args) != 3:
            raise CommandError("report diff takes two sessions: OLD NEW")
        changes, only_old, only_new = report_rows.diff(open_rows(args[1]), open_rows(args[2]))
        regressed = [c for c in changes if not c.improved]
        if as_json:
            doc = {
                "old": str(Path(args[1]).resolve()),
                "new": str(Path(args[2]).resolve()),
                "improved": [vars(c) for c in changes if c.improved],
                "regressed": [vars(c) for c in regressed],
                "only_in_old": only_old,
                "only_in_new": only_new,
            }
            write_document(doc, 1 if regressed else 0)
        else:
            for c in changes:
                word = "improved" if c.improved else "regressed"
                style = "green" if c.improved else "bold red"
                line = f"{word:9} {c.entry} {c.dimension}: {c.before} -> {c.after}"
                stdout().print(Text(printable(line), style=style))
            for entry in only_old:
                stdout().print(Text(f"only in old: {entry}", style="dim"))
            for entry in only_new:
                stdout().print(Text(f"only in new: {entry}", style="dim"))
            stdout().print(f"{len(changes) - len(regressed)} improved, {len(regressed)} regressed")
        return 1 if regressed else 0
    if len(args) != 1:
        raise CommandError("report takes one session (or: report diff OLD NEW)")
    session_dir = Path(args[0]).resolve()
    open_session(session_dir, force)  # a clear error for what is not a session
    dimensions = ConfigSource().load().config.inject.stop_dimensions
    rows, previous, stop = report.with_previous(session_dir, force, dimensions)
    cases, verdicts = [r.case for r in rows], [r.verdict for r in rows]
    inputs = input_paths([session_dir], cases, [])
    outputs: list[Output] = []
    if html is not None:
        page = Path(html) if html else session_dir / report.REPORT_HTML
        outputs.append(
            (
                page,
                "--html",
                lambda: report.html_page(session_dir, rows, previous, stop, dimensions),
            )
        )
    if junit is not None:
        outputs.append((junit, "--junit", lambda: score_junit(cases, verdicts, "session")))
    write_outputs(outputs, inputs)
    if as_json:
        write_document(report_rows.report_json(session_dir, rows, stop), 0)
        return 0
    from rich.table import Table

    from nvrx.score.model import DIMENSIONS
    from nvrx.score.output import (
        CHANGED_REPORT,
        EVERY_CASE_REPORT,
        SHORT_NAMES,
        render,
    )

    render(
        stdout(),
        cases,
        verdicts,
        summarise(verdicts),
        "session",
        CHANGED_REPORT,
        EVERY_CASE_REPORT,
    )
    table = Table(title="fault type × nodes × rank position", header_style="bold", box=None)
    for column in ("fault", "nodes", "rank", "n", "scored", *SHORT_NAMES.values()):
        table.add_column(column)
    for (fault, nodes, pos), cell in report_rows.matrix(rows).items():
        rates = (percent(cell.rate(d)) for d in DIMENSIONS)
        table.add_row(fault, str(nodes), pos, str(cell.experiments), str(cell.scored), *rates)
    stdout().print(table)
    for pattern, matching in report_rows.matched_patterns(rows):
        ids = ", ".join(r.record.dir.name for r in matching[:PATTERN_IDS])
        more = f", and {len(matching) - PATTERN_IDS} more" if len(matching) > PATTERN_IDS else ""
        stdout().print(
            Text(f"pattern {pattern.name}: {pattern.meaning} ({len(matching)}): {ids}{more}")
        )
    stdout().print(Text(report_rows.stop_sentence(stop), style="bold"))
    return 0
