"""Text that came from outside (file names, server and analyser messages, values in errors)
made safe to print or log: one line, no terminal control sequences, encodable.

A cycle-file name with a newline would forge a line in `watch.log`; one with `ESC[` would
recolour or rewrite the operator's terminal, one with U+202E reverse what follows; one that is
not UTF-8 (a lone surrogate after `os.fsdecode`) would make the log handler fail. Each such
character is written as an escape.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# C0 and C1 controls, DEL, the Unicode line and paragraph separators, lone surrogates, and the
# bidirectional overrides and isolates (U+202E makes `evil.txt` read as `txt.live`: the Trojan
# Source trick), which reorder what the terminal shows.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, as os.fsdecode carries it
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}.get(code, f"\\x{code:02x}")
    return f"\\u{code:04x}"


def printable(text: str, *, lines: bool = False) -> str:
    """`text` with every control character, line separator and lone surrogate escaped. With
    `lines`, newlines and tabs are kept (a log excerpt in a page), everything else escaped."""
    if lines:
        return _UNSAFE.sub(lambda m: m.group() if m.group() in "\n\t" else _escape(m), text)
    return _UNSAFE.sub(_escape, text)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`. Did you mean 'x'?` for the closest of `choices` to a mistyped `word`, else ''. The
    word is cut and only a known choice is quoted back, so a mistyped secret never is."""
    import difflib

    close = difflib.get_close_matches(word[:80], list(choices), n=1, cutoff=0.6)
    return f". Did you mean {close[0]!r}?" if close else ""


def some_of(names: Iterable[str], limit: int = 12) -> str:
    """`a, b, c` for a message, at most `limit` of them and how many more: a folder of 5,000
    pool files must not make a one-line error 90 KB long."""
    listed = list(names)
    shown = ", ".join(printable(n[:80]) for n in listed[:limit])
    return f"{shown}, and {len(listed) - limit} more" if len(listed) > limit else shown


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`1 cycle`, `2 cycles`, `0 cycles`: a count with its noun in the right number (`plural`
    for a noun that is not made plural by an `s`)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
