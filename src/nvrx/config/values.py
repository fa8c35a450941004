"""Value types of the settings: how text from a file, an env file or the environment becomes a
typed value (empty means unset, `a,b` is a list, a command is split into words, Slurm names and
times are checked when the config loads rather than first at submit time)."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field, SecretStr

from nvrx.slurm.errors import SlurmValueError
from nvrx.slurm.options import check_name, check_time_limit


def _empty_to_none(value: Any) -> Any:
    """`""` from a file or the environment means "not set" for optional values."""
    if isinstance(value, str) and value.strip() == "":
        return None
    return value


def _comma_list(value: Any) -> Any:
    """A list may be written as `a,b,c` in env files and the environment."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


def _json_mapping(value: Any) -> Any:
    """A mapping may be written as a JSON object in env files and the environment."""
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return {}
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"expected a JSON object: {exc.msg}") from exc
    return value


def _expand_path(value: Any) -> Any:
    if isinstance(value, str) and value.startswith("~"):
        return os.path.expanduser(value)
    if isinstance(value, Path) and str(value).startswith("~"):
        return value.expanduser()
    return value


OptionalStr = Annotated[str | None, BeforeValidator(_empty_to_none)]
OptionalInt = Annotated[int | None, BeforeValidator(_empty_to_none)]
OptionalPath = Annotated[
    Path | None, BeforeValidator(_empty_to_none), BeforeValidator(_expand_path)
]
ExpandedPath = Annotated[Path, BeforeValidator(_expand_path)]
StrList = Annotated[list[str], BeforeValidator(_comma_list)]
StrMap = Annotated[dict[str, str], BeforeValidator(_json_mapping)]


def command_words(value: Any) -> Any:
    """A command may be written as one shell-like string in env files and the environment."""
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot split into words: {exc}") from None
    return value


CommandWords = Annotated[list[str], BeforeValidator(command_words)]
# A year: longer durations are typos, and would overflow subprocess and datetime arithmetic.
MAX_SECONDS = 366 * 86400.0
PositiveSeconds = Annotated[float, Field(gt=0, le=MAX_SECONDS)]
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS)]


def _slurm_time(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return check_time_limit(value)
        except SlurmValueError as exc:
            raise ValueError(str(exc)) from None
    return value


SlurmTime = Annotated[str, BeforeValidator(_slurm_time)]


def _slurm_name(value: Any) -> Any:
    if isinstance(value, str) and value.strip():
        try:
            return check_name(value.strip(), "name")
        except SlurmValueError as exc:
            raise ValueError(str(exc)) from None
    return value


# A job, account or partition name: checked when the config loads, not first at submit time.
SlurmName = Annotated[str, BeforeValidator(_slurm_name)]
OptionalSlurmName = Annotated[
    str | None, BeforeValidator(_empty_to_none), BeforeValidator(_slurm_name)
]
Secret = Annotated[SecretStr | None, BeforeValidator(_empty_to_none)]


def _http_url(value: Any) -> Any:
    if isinstance(value, str) and value.strip():
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("expected an http:// or https:// URL")
        try:
            _ = parts.port
        except ValueError as exc:
            raise ValueError(f"bad URL: {exc}") from None
        return value.strip()
    return value


# A URL a sink calls: checked when the config loads, not first when a finding is sent.
OptionalUrl = Annotated[str | None, BeforeValidator(_empty_to_none), BeforeValidator(_http_url)]
