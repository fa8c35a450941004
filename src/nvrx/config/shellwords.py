"""The `user.env` shell subset: assignments, quotes and `$VAR`/`${VAR...}` expansions, with
nothing executed. Read by the env-file layer and by `watch JOB_ID`'s reading of a job script."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NoReturn

from nvrx.config.errors import ConfigError, key_part

_ASSIGN_RE = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
# Limits of the shell subset (docs/reliability.md): no real site file comes near them.
MAX_ENV_NESTING = 32
MAX_ENV_VALUE = 64 << 10
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class EnvFile:
    """A parsed user.env file: its assignments in order, and every name an expansion read."""

    assignments: list[tuple[str, str, int]]  # (name, value, line number)
    referenced: frozenset[str]

    def as_dict(self) -> dict[str, str]:
        return {name: value for name, value, _ in self.assignments}


class _Expander:
    """Expands one line's value like a POSIX shell would, for the forms a site file uses.

    Supported: '...' (literal), "..." (with `\\ \\$ \\" \\``), bare words, `$VAR`, `${VAR}`,
    `${VAR-default}` and `${VAR:-default}` (the default itself expanded). Anything else that a
    shell would evaluate (command substitution, `${VAR:=x}`, `${#VAR}`, `$'...'`, `$1`) is an
    error rather than a silent literal.
    """

    def __init__(self, lookup: Callable[[str], str | None], where: str) -> None:
        self.lookup = lookup
        self.where = where
        self.depth = 0  # ${VAR:-${VAR:-...}} nesting
        self.expanded = 0  # characters that variables contributed to this value

    def variable(self, out: list[str], value: str | None) -> None:
        """Append a variable's value; a value that would outgrow MAX_ENV_VALUE is an error
        (`A=$A$A` on line after line doubles it each time)."""
        self.expanded += len(value or "")
        if self.expanded > MAX_ENV_VALUE:
            self.fail(f"the value expands to more than {MAX_ENV_VALUE} characters")
        out.append(value or "")

    def fail(self, message: str) -> NoReturn:
        raise ConfigError(f"{self.where}: {message}")

    def value(self, text: str) -> str:
        out: list[str] = []
        i = 0
        while i < len(text):
            ch = text[i]
            if ch == "'":
                end = text.find("'", i + 1)
                if end < 0:
                    self.fail("unterminated single quote")
                out.append(text[i + 1 : end])
                i = end + 1
            elif ch == '"':
                i = self.expand(text, i + 1, out, mode="quoted")
            elif ch.isspace():
                tail = text[i:].strip()
                if tail and not tail.startswith("#"):
                    self.fail("unquoted space in value (quote it)")
                break
            else:
                i = self.expand(text, i, out, mode="bare")
        return "".join(out)

    def expand(self, text: str, i: int, out: list[str], mode: str) -> int:
        """Expand from text[i] to the end of the quoted, bare or default word; return where
        scanning goes on (after a closing double quote)."""
        while i < len(text):
            ch = text[i]
            if mode == "quoted" and ch == '"':
                return i + 1
            if mode == "bare" and (ch.isspace() or ch in "'\""):
                return i
            if ch == "\\":
                nxt = text[i + 1 : i + 2]
                if mode == "bare" or nxt in ('"', "\\", "$", "`"):
                    out.append(nxt)
                else:
                    out.append(ch + nxt)
                i += 2
            elif ch == "`":
                self.fail("command substitution is not supported (nvrx runs no commands)")
            elif ch == "$":
                i = self.dollar(text, i, out)
            else:
                out.append(ch)
                i += 1
        if mode == "quoted":
            self.fail("unterminated double quote")
        return i

    def dollar(self, text: str, i: int, out: list[str]) -> int:
        nxt = text[i + 1 : i + 2]
        if nxt == "(":
            self.fail("command substitution is not supported (nvrx runs no commands)")
        if nxt == "{":
            close = self.closing_brace(text, i + 1)
            body = text[i + 2 : close]
            m = _NAME_RE.match(body)
            if m is None:
                self.fail(f"unsupported expansion ${{{body}}}")
            value = self.lookup(m.group())
            op = body[m.end() :]
            if op == "":
                self.variable(out, value)
            elif op.startswith((":-", "-")):
                default = op[2:] if op.startswith(":-") else op[1:]
                unset = value is None if op.startswith("-") else not value
                if unset:
                    self.depth += 1
                    if self.depth > MAX_ENV_NESTING:
                        self.fail(f"expansions nested more than {MAX_ENV_NESTING} deep")
                    self.expand(default, 0, out, mode="default")
                    self.depth -= 1
                else:
                    self.variable(out, value)
            else:
                self.fail(f"unsupported expansion ${{{body}}} (only ${{VAR-x}} and ${{VAR:-x}})")
            return close + 1
        m = _NAME_RE.match(text, i + 1)
        if m is not None:
            self.variable(out, self.lookup(m.group()))
            return m.end()
        if nxt and (nxt.isdigit() or nxt in "'?$!#@*-"):
            self.fail(f"unsupported expansion ${nxt}")
        out.append("$")
        return i + 1

    def closing_brace(self, text: str, open_at: int) -> int:
        depth = 0
        i = open_at + 1
        while i < len(text):
            if text.startswith("${", i):
                depth += 1
                i += 2
                continue
            if text[i] == "}":
                if depth == 0:
                    return i
                depth -= 1
            i += 1
        self.fail("unterminated ${")


def expand_shell_value(text: str, lookup: Callable[[str], str | None], where: str) -> str:
    """The value of a shell assignment's right-hand side (quotes and expansions; no commands).
    Raises ConfigError for what a shell would execute or nvrx does not support."""
    return _Expander(lookup, where).value(text)


def expand_shell_word(word: str, lookup: Callable[[str], str | None], where: str) -> str:
    """Expand `$VAR`/`${VAR...}` in a word whose quotes were already removed."""
    out: list[str] = []
    _Expander(lookup, where).expand(word, 0, out, mode="default")
    return "".join(out)


SHELL_ASSIGNMENT_RE = _ASSIGN_RE


def parse_env_file(text: str, environ: Mapping[str, str], source: str = "<env file>") -> EnvFile:
    """Parse a `user.env`-style file (see _Expander for the shell subset). Values expand from
    earlier assignments in the file, then the environment; nothing is executed."""
    assigned: dict[str, str] = {}
    referenced: set[str] = set()
    out: list[tuple[str, str, int]] = []

    def lookup(name: str) -> str | None:
        referenced.add(name)
        return assigned[name] if name in assigned else environ.get(name)

    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source} line {lineno}"
        m = _ASSIGN_RE.match(line)
        if m is None:
            raise ConfigError(f"{where}: expected KEY=VALUE, got {key_part(line)}")
        name = m.group(1)
        value = _Expander(lookup, where).value(m.group(2))
        assigned[name] = value
        out.append((name, value, lineno))
    return EnvFile(out, frozenset(referenced))
