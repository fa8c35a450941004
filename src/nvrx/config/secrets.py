"""The secrets of a loaded config: what to mask in an argv, and every secret value this run
knows (settings, key files, URL passwords, credential-named environment variables)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from nvrx.config.model import FIELDS, NvrxConfig, is_secret
from nvrx.config.redact import HIDDEN, redact_urls, secret_env_values
from nvrx.files import InputError, read_key_file


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line fit for a manifest or journal: the value of every secret setting given
    as `KEY=VALUE` (after `--set`, or as `--set=KEY=VALUE`) is replaced by HIDDEN, and so is
    the password of every URL (`--base-url https://user:pw@host`)."""
    secret_keys = {key for key, info in FIELDS.items() if is_secret(info)}
    out: list[str] = []
    for arg in argv:
        flag, eq, assignment = arg.partition("=") if arg.startswith("--") else ("", "", arg)
        key, sep, _ = assignment.partition("=")
        if sep and key.strip() in secret_keys:
            arg = f"{flag}{eq}{key}={HIDDEN}"
        out.append(redact_urls(arg))
    return out


def known_secrets(config: NvrxConfig, environ: Mapping[str, str]) -> list[str]:
    """Every secret this run knows: the secret settings, the keys in the key files they name,
    the passwords of URL settings, and credential-named environment variables."""
    out = secret_env_values(environ)
    for key, info in FIELDS.items():
        section, name = key.split(".", 1)
        value = getattr(getattr(config, section), name)
        if is_secret(info) and value is not None:
            out.append(value.get_secret_value())
        elif name.endswith("key_file") and value is not None:  # API and routing key files
            with contextlib.suppress(InputError):
                out.append(read_key_file(value, "key file")[0])
        elif isinstance(value, str) and "://" in value:
            password = urlsplit(value).password
            if password:
                out.append(password)
    return out
