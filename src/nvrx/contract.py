"""The one output contract of every command (docs/output-contract.md): what each exit code
means, and the frame of every `--json` document.

Exit codes mean the same in every subcommand:

    0    done, and nothing wrong found ("nothing to watch" included: not bad input)
    1    done, and something is wrong: a critical finding, a threshold not met, a regression,
         a failure the command reports (a generation not submitted, a file not written)
    2    bad input: an option, a setting, a file that cannot be used (one line names it)
    3    could not judge, or could not see: an experiment left unscored, a blind watch pass
    130  interrupted

When both 1 and 3 apply, 3 wins: an answer over what was not all seen is not complete.

Every `--json` document is one JSON object with `schema` (this contract's version) first and
`exit_code` (the process's); an error under `--json` is such an object too, with
`ok: false` and `error`, as well as the one line on stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

SCHEMA = 1
OK, FOUND, BAD_INPUT, UNJUDGED, INTERRUPTED = 0, 1, 2, 3, 130


def document(body: Mapping[str, Any], exit_code: int) -> dict[str, Any]:
    """`body` framed: `schema` first, `exit_code` last (a body's own values win elsewhere)."""
    return {"schema": SCHEMA, **body, "exit_code": exit_code}


def write_document(body: Mapping[str, Any], exit_code: int, *, indent: int | None = 2) -> None:
    """Print one framed document on stdout."""
    sys.stdout.write(json.dumps(document(body, exit_code), indent=indent) + "\n")
    sys.stdout.flush()


def error_document(message: str, exit_code: int) -> None:
    """An error under `--json`: the same line as on stderr, as a document on stdout."""
    write_document({"ok": False, "error": message}, exit_code, indent=None)


def wants_json(argv: list[str]) -> bool:
    """`--json` among a command's own options (not in what follows `--`, which goes to sbatch)."""
    own = argv[: argv.index("--")] if "--" in argv else argv
    return "--json" in own
