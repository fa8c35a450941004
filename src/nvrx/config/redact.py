"""Masking secrets in text nvrx writes or prints: URL passwords, credential query parameters,
and the values of known secrets. Pure functions of text, so every layer can use them."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

HIDDEN = "<hidden>"


# `scheme://user:password@`: bounded, so a long line without `@` costs one pass. Then the
# query parameters that carry credentials by convention.
_URL_PASSWORD = re.compile(r"(://[^\s/@:]{0,256}:)[^\s/@]{1,1024}@")
_URL_TOKEN = re.compile(
    r"([?&](?:api[_-]?key|apikey|key|token|access_token|auth|secret|password|sig|signature)=)"
    r"[^&#\s]{1,2048}",
    re.IGNORECASE,
)


def redact_urls(text: str) -> str:
    """`text` with the password of every URL in it, and credential query parameters
    (`?token=...`), replaced by HIDDEN."""
    if "://" not in text and "=" not in text:
        return text
    text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{HIDDEN}@", text)
    return _URL_TOKEN.sub(lambda m: f"{m.group(1)}{HIDDEN}", text)


# Characters that print as nothing: a server that echoes a key split by them (or in another
# case) still shows the key to whoever reads the output.
_INVISIBLE = "\u00ad\u180e\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff"
_GAP = f"[{_INVISIBLE}]*"


def _disguised(secret: str) -> re.Pattern[str]:
    """The secret in any case, with invisible characters anywhere between its characters."""
    return re.compile(_GAP.join(re.escape(c) for c in secret), re.IGNORECASE)


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret in it, and every URL password, replaced by HIDDEN: servers,
    models and analysers may echo what they were given, and not always as given: in another
    case, or split by invisible characters (zero-width spaces, soft hyphens), which are masked
    too. Values under 4 characters are left: masking them would blank ordinary words, and they
    protect nothing. Longer secrets are masked first, so one that contains another is masked
    whole."""
    wanted = [s for s in sorted(set(secrets), key=len, reverse=True) if len(s) >= 4]
    if wanted:
        invisible = any(c in text for c in _INVISIBLE)
        lowered = text.lower()  # a cheap test first: the pattern only where it can match
        for secret in wanted:
            text = text.replace(secret, HIDDEN)
            if invisible or secret.lower() in lowered:
                text = _disguised(secret).sub(HIDDEN, text)
    return redact_urls(text)


# Environment variables whose values are credentials by their name's convention: masked in
# whatever nvrx writes, though no setting reads them (an analyser or server may echo them).
_SECRET_ENV_SUFFIXES = ("API_KEY", "_TOKEN", "_SECRET", "PASSWORD")


def secret_env_values(environ: Mapping[str, str]) -> list[str]:
    """The values of credential-named environment variables (`*API_KEY`, `*_TOKEN`, ...)."""
    return [
        value
        for name, value in environ.items()
        if name.upper().endswith(_SECRET_ENV_SUFFIXES) and value.strip()
    ]
