"""What every command shares on the terminal: its one-line error, its notes and warnings, and
the two consoles, created on first use (rich is imported only by a command that prints with it).

A command of a package raises `CommandError` for what the user must fix (or for what failed, with
exit 1); `nvrx.cli.main` prints it as `nvrx: error: ...` and exits with its code. User text
prints literally: no rich markup or emoji codes (a pool entry `SIGKILL:-1:5:2` must not read as
a thumbs-down emoji), and every value from outside goes through `printable`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from nvrx.display import printable

if TYPE_CHECKING:
    from rich.console import Console


class CommandError(Exception):
    """One line for the user and the exit code: 2 bad input (the default), 1 a failure.

    Every error of nvrx carries its exit code (`exit_code`, DESIGN.md's table); `nvrx.cli.main`
    is the one place that turns an error into its line and its code."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = self.exit_code = code


@cache
def stdout() -> Console:
    """The console of results. Piped output is read by grep and scripts: never fold it at
    rich's default 80 columns."""
    from rich.console import Console

    return Console(
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=True,
        width=None if sys.stdout.isatty() else 240,
    )


@cache
def stderr() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, markup=False, emoji=False, soft_wrap=True)


def note(message: str, prefix: str = "nvrx: note: ") -> None:
    """One line on stderr: what the user should know, not an error."""
    sys.stderr.write(f"{prefix}{printable(message)}\n")


def warn(message: str) -> None:
    note(message, "nvrx: warning: ")


def error_line(message: str) -> None:
    note(message, "nvrx: error: ")


# A file the user asked for: where it goes, the flag that asked for it, and how to draw it.
Output = tuple[Path, str, Callable[[], str]]


def write_outputs(
    outputs: Sequence[Output], inputs: Sequence[Path] = (), *, announce: bool = True
) -> None:
    """The files the user asked for (`--html`, `--junit`, `--markdown`): every refusal first
    (none over one of the command's `inputs`: bad input, exit 2), then each replaced
    atomically and, with `announce`, named on stderr; a write that fails is exit 1 naming it
    (docs/output-contract.md, "Files")."""
    from nvrx.files import refuse_overwriting, write_output

    for path, what, _ in outputs:
        refuse_overwriting(path, list(inputs), what)
    for path, what, render in outputs:
        try:
            write_output(path, render(), what)
        except OSError as exc:
            raise CommandError(f"cannot write {what} {path}: {exc.strerror}", 1) from None
        if announce:
            note(f"wrote {path.resolve()}")
