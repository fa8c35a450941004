"""A batch script's NVRx flags, read without running anything: the last `--ft-cycle-info-dir`
and `--ft-checkpoint-iteration-file` of the script, with what a shell would make of them as far
as that can be known from text alone.

Followed: simple assignments (`X=...`, `export X=...`, with quotes and `${X:-...}` forms);
`source FILE` and `. FILE` of a readable file (at most `MAX_DEPTH` deep, `MAX_TOTAL` bytes in
all, through the caller's bounded reader); `$0` and `${BASH_SOURCE[0]}`; and the command
substitutions of the path idioms, evaluated here as string operations on paths:
`$(dirname X)`, `$(basename X [SUFFIX])`, `$(realpath X)`, `$(readlink -f X)`, `$(pwd)` and
`$(cd X && pwd)` (nested as in `$(cd "$(dirname "$0")" && pwd)`). Relative paths are taken
from the job's working directory, as the shell would. The job id variables become `*`, so the
glob covers every generation.

Anything else (another command, a backquote, a file that cannot be read, an unset variable)
is not guessed: a value that depends on it is unknown, and the flag counts as not found.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from nvrx.config.errors import ConfigError
from nvrx.config.shellwords import SHELL_ASSIGNMENT_RE, expand_shell_value, expand_shell_word

MAX_DEPTH = 16  # nested `source`s
MAX_TOTAL = 1 << 20  # bytes of script and sourced files read in all

_FLAG_RES = {
    "cycles": re.compile(r"^--ft[-_]cycle[-_]info[-_]dir(?:=(.*))?$"),
    "checkpoint": re.compile(r"^--ft[-_]checkpoint[-_]iteration[-_]file(?:=(.*))?$"),
}
_SOURCE = re.compile(r"^(?:source|\.)\s+(.+)$")
_BASH_SOURCE = re.compile(r"\$\{BASH_SOURCE(?:\[0\])?\}|\$BASH_SOURCE\b")
_SUB = "__nvrx_sub_"  # the variables that hold evaluated command substitutions

# path -> text, or None when it cannot be read (missing, too large, not text)
Reader = Callable[[str], str | None]


class _Unknown(Exception):
    """A value that cannot be known without running something."""


@dataclass
class _Script:
    read: Reader
    cwd: str  # the job's working directory: where relative paths start
    top: str  # $0
    assigned: dict[str, str] = field(default_factory=dict)
    found: dict[str, str] = field(default_factory=dict)
    unresolved: set[str] = field(default_factory=set)
    budget: int = MAX_TOTAL

    def lookup(self, var: str) -> str | None:
        if var in self.assigned:
            return self.assigned[var]
        if var in ("HOME", "USER"):
            return os.environ.get(var)
        self.unresolved.add(var)
        return None

    def lines(self, text: str, source: str, depth: int) -> None:
        self.budget -= len(text)
        if self.budget < 0:
            raise _Unknown  # past the cap: what follows cannot be read, so nothing is known
        for raw in text.replace("\\\n", " ").splitlines():  # continuation lines joined
            self.line(_BASH_SOURCE.sub("${__nvrx_source}", raw.strip()), source, depth)

    def line(self, line: str, source: str, depth: int) -> None:
        self.assigned["__nvrx_source"] = source
        m = SHELL_ASSIGNMENT_RE.match(line)
        if m is not None:
            # A value that cannot be known leaves the name unset (never a guess).
            self.assigned.pop(m.group(1), None)
            with contextlib.suppress(_Unknown, ConfigError):
                self.assigned[m.group(1)] = self.value(m.group(2))
            return
        if (s := _SOURCE.match(line)) is not None:
            self.source(s.group(1), depth)
            return
        if "--ft" not in line:
            return
        known = True
        try:
            # Before splitting: a `$(...)` holds quotes and spaces of its own.
            line = self.substitute(line)
        except _Unknown:
            known = False  # another command on the line: its flags' values are not known
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            return
        for i, word in enumerate(words):
            for what, flag_re in _FLAG_RES.items():
                fm = flag_re.match(word)
                if fm is None:
                    continue
                value = fm.group(1) if fm.group(1) is not None else _at(words, i + 1)
                if value is None:
                    continue
                try:
                    if not known:
                        raise _Unknown
                    self.found[what] = self.word(value)
                except (_Unknown, ConfigError):
                    self.found.pop(what, None)  # "$RUN/ci" with RUN unknown is not "/ci"

    def source(self, rest: str, depth: int) -> None:
        try:
            words = shlex.split(self.substitute(rest), comments=True)
            path = self.word(words[0]) if words else ""
        except (_Unknown, ConfigError, ValueError):
            return  # an unknown file: its assignments stay unknown (unset)
        if not path or depth >= MAX_DEPTH:
            return
        path = posixpath.normpath(self.absolute(path))
        text = self.read(path)
        if text is not None:
            self.lines(text, path, depth + 1)

    def value(self, text: str) -> str:
        """An assignment's right-hand side, expanded."""
        return self._expanded(expand_shell_value, text)

    def word(self, word: str) -> str:
        """A word whose quotes shlex removed, expanded."""
        return self._expanded(expand_shell_word, word)

    def _expanded(
        self, expand: Callable[[str, Callable[[str], str | None], str], str], text: str
    ) -> str:
        self.unresolved.clear()
        out = expand(self.substitute(text), self.lookup, "script")
        if self.unresolved:
            raise _Unknown
        return out

    def substitute(self, text: str) -> str:
        """`text` with `$0` and each `$(...)` replaced by a variable holding its value."""
        text = re.sub(r"\$0\b|\$\{0\}", "${__nvrx_top}", text)
        self.assigned["__nvrx_top"] = self.top
        out: list[str] = []
        i = 0
        while (start := text.find("$(", i)) >= 0:
            if text.startswith("$((", start):
                raise _Unknown  # arithmetic
            end = _closing(text, start + 2)
            out.append(text[i:start])
            name = f"{_SUB}{len(self.assigned)}"
            self.assigned[name] = self.command(text[start + 2 : end])
            out.append("${" + name + "}")
            i = end + 1
        if "`" in text[i:] or any("`" in part for part in out):
            raise _Unknown
        return "".join(out) + text[i:]

    def command(self, text: str) -> str:
        """The output of one of the path idioms; _Unknown for anything else."""
        parts = [p.strip() for p in text.split("&&")]
        if len(parts) == 2 and re.fullmatch(r"pwd(?:\s+-[PL])?", parts[1]):
            cd = self.argv(parts[0])
            if len(cd) == 2 and cd[0] == "cd":
                return posixpath.normpath(self.absolute(cd[1]))
            raise _Unknown
        if len(parts) != 1:
            raise _Unknown
        argv = self.argv(parts[0])
        match argv:
            case ["dirname", path]:
                return posixpath.dirname(path.rstrip("/")) or ("/" if path.startswith("/") else ".")
            case ["basename", path]:
                return posixpath.basename(path.rstrip("/"))
            case ["basename", path, suffix]:
                name = posixpath.basename(path.rstrip("/"))
                return name[: -len(suffix)] if suffix and name.endswith(suffix) else name
            case ["realpath", path] | ["readlink", "-f", path]:
                return os.path.realpath(self.absolute(path))
            case ["pwd"] | ["pwd", "-P" | "-L"]:
                return self.cwd
        raise _Unknown

    def argv(self, text: str) -> list[str]:
        try:
            words = shlex.split(self.substitute(text))
        except ValueError:
            raise _Unknown from None
        return [self.word(w) for w in words]

    def absolute(self, path: str) -> str:
        return path if path.startswith("/") else posixpath.join(self.cwd, path)


def _at(words: list[str], i: int) -> str | None:
    return words[i] if i < len(words) else None


def _closing(text: str, i: int) -> int:
    """The index of the `)` that closes the `$(` before `i` (quotes and nested `$(` skipped)."""
    depth, quote = 1, ""
    while i < len(text):
        c = text[i]
        if quote:
            if c == quote:
                quote = ""
            elif c == "\\" and quote == '"':
                i += 1
        elif c in "'\"":
            quote = c
        elif c == "\\":
            i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise _Unknown  # unbalanced


def flags_from_script(
    text: str,
    *,
    script: str = "",
    cwd: str = "",
    read: Reader | None = None,
) -> dict[str, str]:
    """The last `--ft-cycle-info-dir` (key `cycles`) and `--ft-checkpoint-iteration-file`
    (`checkpoint`) of a batch script (its `text`, at path `script`, run in `cwd`); `read`
    returns a sourced file's text (None: it cannot be read; default: nothing is sourced)."""
    state = _Script(
        read or (lambda _: None),
        cwd or posixpath.dirname(script) or ".",
        script,
        {"SLURM_ARRAY_JOB_ID": "*", "SLURM_JOB_ID": "*"},
    )
    with contextlib.suppress(_Unknown):
        state.lines(text, script, 0)
    return state.found
