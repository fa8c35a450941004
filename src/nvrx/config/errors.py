"""The configuration's error and the helpers its one-line messages share."""

from __future__ import annotations

import re

from nvrx.config.redact import redact_urls
from nvrx.display import printable


class ConfigError(Exception):
    """A configuration problem, reported to the user as one line."""

    exit_code = 2  # bad input


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def quoted(text: str, limit: int = 80) -> str:
    """A value for a one-line message: quoted, URL passwords hidden, control characters
    escaped, and cut."""
    return f"'{cut(printable(redact_urls(text)), limit - 2)}'"


_KEY_LIKE = re.compile(r"[A-Za-z0-9_.]*")


def key_part(text: str) -> str:
    """A malformed `KEY=VALUE` for a one-line message: what reads as a key, quoted, and never
    the rest, which may be a secret typed after the wrong separator (`JUDGE_API_KEY sk-...`,
    `score.api_key:sk-...`)."""
    text = text.strip()
    head = _KEY_LIKE.match(text).group(0)[:80]  # type: ignore[union-attr]
    return f"{quoted(head + '...')} (the rest is not shown)" if text[len(head) :] else quoted(text)
