"""`nvrx analyze fr | log`: the built-in analysers on one experiment's artifacts."""

from __future__ import annotations

import sys
from pathlib import Path

from nvrx.analyze.logattr import LogAttribution
from nvrx.config import ConfigSource
from nvrx.contract import write_document
from nvrx.display import printable
from nvrx.terminal import note


def attribute_file(path: Path) -> LogAttribution:
    """The built-in attribution of a log file of any size, read as it streams (flat memory);
    InputError when it cannot be read."""
    from nvrx.analyze.logattr import attribute_blocks
    from nvrx.analyze.logscan import MAX_LINE
    from nvrx.files import read_line_blocks

    return attribute_blocks(read_line_blocks(path, "log", max_line=MAX_LINE))


def analyze_fr(path: Path, pattern: str, as_json: bool) -> int:
    """Missing ranks from the dumps under `path`: upstream's table, or JSON."""
    from nvrx.analyze import fr

    ConfigSource().load()  # the site's limits
    result = fr.analyze_path(path, pattern)
    for line in result.notes:
        note(line)
    if as_json:
        write_document(fr.to_json(result), 0)
    else:
        # The dumps' group descriptions are the job's text: escaped for the terminal.
        sys.stdout.write(
            "no_dumps\n" if result.no_dumps else printable(fr.table(result), lines=True)
        )
    return 0


def analyze_log(path: Path, as_json: bool) -> int:
    """The 5-field attribution of one log (blinded first)."""
    ConfigSource().load()  # the site's limits (a pipe or device ends at one)
    result = attribute_file(path)  # InputError: one line, from nvrx.cli.main
    if as_json:
        write_document(result.to_json(), 0)
    else:
        # The log's lines are quoted as evidence: escaped for the terminal (ESC, U+202E).
        text = result.text(labelled=True)
        sys.stdout.write(printable(text.rstrip("\n"), lines=True) + "\n")
    return 0
