"""`nvrx analyze fr | log`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nvrx.cli.options import CommandGroup, JsonOpt

app = typer.Typer(
    cls=CommandGroup,
    help="Run the built-in analysers on one experiment's artifacts.",
    no_args_is_help=True,
    rich_markup_mode=None,
    add_completion=False,  # completion: the root only
)


@app.command("fr")
def analyze_fr_cmd(
    path: Annotated[
        Path, typer.Argument(help="A dump directory, one dump file, or a path prefix.")
    ],
    pattern: Annotated[
        str, typer.Option("--pattern", "-p", help="Dump file pattern (inject.fr_pattern).")
    ] = "_dump_*",
    as_json: JsonOpt = False,
) -> None:
    """Missing ranks from NCCL flight-recorder dumps, torch-free (upstream's table or JSON).

    Prints `no_dumps` when no file matches.
    """
    from nvrx.analyze.command import analyze_fr

    raise typer.Exit(analyze_fr(path, pattern, as_json))


@app.command("log")
def analyze_log_cmd(
    path: Annotated[
        Path,
        typer.Argument(
            help="A job log, of any format and size ([rankN]:, N: or no rank prefix).",
            dir_okay=False,
        ),
    ],
    as_json: JsonOpt = False,
) -> None:
    """The built-in log attribution (logsage's 5-field text): root rank, fault class, decision.

    The log is blinded first: injection markers never reach the rules.
    """
    from nvrx.analyze.command import analyze_log

    raise typer.Exit(analyze_log(path, as_json))
