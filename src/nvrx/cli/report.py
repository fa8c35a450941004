"""`nvrx report SESSION | diff OLD NEW`."""

from __future__ import annotations

from typing import Annotated

import typer

from nvrx.cli.options import ForceOpt, JsonOpt, JunitOpt, html_option

app = typer.Typer(rich_markup_mode=None, add_completion=False)  # completion: the root only


@app.command(
    "report",
    epilog="`nvrx report diff OLD NEW` exits 1 when a cell regressed, else 0.",
)
def report_cmd(
    args: Annotated[
        list[str],
        typer.Argument(metavar="SESSION | diff OLD NEW", help="A session, or two to compare."),
    ],
    as_json: JsonOpt = False,
    html: Annotated[str | None, html_option("the session's report.html")] = None,
    junit: JunitOpt = None,
    force: ForceOpt = False,
) -> None:
    """Print a campaign's report (rebuilt from its journal), or what changed between two."""
    from nvrx.inject.report_command import report_command

    raise typer.Exit(report_command(args, as_json, force, html=html, junit=junit))
