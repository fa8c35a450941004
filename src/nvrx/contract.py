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

Every `--json` document is one JSON object on one line: `schema` (this contract's version)
first, then `ok` (whether `exit_code` is 0), and `exit_code` (the process's) last; an error
under `--json` is such an object too, with `error`, as well as the one line on stderr. One line
per document, whatever the command: a stream (`watch --interval --json`) and a single answer
read the same way (`jq`, `json.loads` of a line).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

SCHEMA = 1
OK, FOUND, BAD_INPUT, UNJUDGED, INTERRUPTED = 0, 1, 2, 3, 130


FRAME = ("schema", "ok", "exit_code")


def document(body: Mapping[str, Any], exit_code: int) -> dict[str, Any]:
    """`body` framed: `schema`, then `ok`, first and `exit_code` last. The frame is the
    contract's, never the body's: a body (or a document framed already) that carries one of
    those keys gets them set from `exit_code`, so no document can say `ok` of a failure."""
    inner = {key: value for key, value in body.items() if key not in FRAME}
    return {"schema": SCHEMA, "ok": exit_code == OK, **inner, "exit_code": exit_code}


def write_document(body: Mapping[str, Any], exit_code: int) -> None:
    """Print one framed document on stdout, on one line."""
    sys.stdout.write(json.dumps(document(body, exit_code)) + "\n")
    sys.stdout.flush()


def error_document(message: str, exit_code: int) -> None:
    """An error under `--json`: the same line as on stderr, as a document on stdout."""
    write_document({"error": message}, exit_code)


def wants_json(argv: list[str]) -> bool:
    """`--json` among a command's own options (not in what follows `--`, which goes to sbatch)."""
    own = argv[: argv.index("--")] if "--" in argv else argv
    return "--json" in own
