"""Loading the config: every layer read, merged key by key, validated once; each effective value
remembers the layer it came from."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from nvrx.config.errors import ConfigError, cut, key_part, quoted
from nvrx.config.model import FIELDS, NvrxConfig, is_secret
from nvrx.config.names import ENV_NAMES, env_names_for
from nvrx.config.redact import HIDDEN, redact_urls
from nvrx.config.shellwords import parse_env_file
from nvrx.display import did_you_mean, printable
from nvrx.files import InputError, read_bounded, set_allowed_roots, set_input_limit
from nvrx.limits import CONFIG_FILE_LIMIT
from nvrx.terminal import note, warn


def read_config_text(path: Path, what: str) -> str:
    """A config or env file's text, read before the settings exist (a fixed cap)."""
    try:
        data, _ = read_bounded(path, what, limit=CONFIG_FILE_LIMIT, setting=None)
        return data.decode("utf-8")
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path} is not UTF-8 text (byte {exc.start})") from exc


Layer = Literal["default", "file", "env-file", "env", "cli"]


@dataclass(frozen=True, slots=True)
class Origin:
    """Where an effective value came from."""

    layer: Layer
    where: str = ""  # file path, variable name or flag

    def __str__(self) -> str:
        return self.layer if not self.where else f"{self.layer} {self.where}"


@dataclass(frozen=True)
class LoadedConfig:
    """The validated config plus, for each dotted key, the layer that set it."""

    config: NvrxConfig
    origins: Mapping[str, Origin]
    config_file: Path | None = None
    env_file: Path | None = None
    # The config file was found by the search (./nvrx.yaml, ~/.config/nvrx/config.yaml), not
    # named by --config or NVRX_CONFIG: a command that submits says so, and what it turns on
    # is not an explicit choice (a `cd` into an example folder picks up its demo).
    config_found: bool = False
    # Environment values under a shared name that did not validate, each said once (`ignored`).
    ignored: tuple[str, ...] = ()

    def value(self, key: str) -> Any:
        section, name = key.split(".", 1)
        return getattr(getattr(self.config, section), name)

    def rows(self) -> list[tuple[str, Any, Origin]]:
        """(key, JSON-ready value, origin) for every setting, in model order. A secret that is
        set shows as `<hidden>`, never its value."""
        dumped = self.config.model_dump(mode="json")
        rows: list[tuple[str, Any, Origin]] = []
        for key, info in FIELDS.items():
            section, name = key.split(".", 1)
            value = dumped[section][name]
            if is_secret(info) and value is not None:
                value = HIDDEN
            elif isinstance(value, str):
                value = redact_urls(value)
            rows.append((key, value, self.origins[key]))
        return rows


# --- layer readers -----------------------------------------------------------------------------

# dotted key → (value, origin), for the layers read so far.
Layered = dict[str, tuple[Any, Origin]]


def find_config_file(
    explicit: Path | None, environ: Mapping[str, str], cwd: Path, home: Path
) -> tuple[Path | None, bool]:
    """The YAML file to read, by the documented search order (None when there is none), and
    whether the search found it rather than --config or NVRX_CONFIG naming it."""
    if explicit is not None:
        if not explicit.is_file():
            raise ConfigError(f"config file not found: {explicit}")
        return explicit, False
    from_env = environ.get("NVRX_CONFIG", "").strip()
    if from_env:
        path = Path(os.path.expanduser(from_env))
        if not path.is_file():
            raise ConfigError(f"config file not found: {path} (from NVRX_CONFIG)")
        return path, False
    for candidate in (cwd / "nvrx.yaml", home / ".config" / "nvrx" / "config.yaml"):
        if candidate.is_file():
            return candidate, True
    return None, False


def read_env_file(path: Path, environ: Mapping[str, str]) -> list[tuple[str, str, Origin]]:
    """Settings from a user.env file: at most one (the highest-precedence name) per key.

    A name that is no setting is an error naming the file and line, unless another line
    expands it (a helper variable such as `BASE=/lustre/me` used as `$BASE/exp`).
    """
    parsed = parse_env_file(read_config_text(path, "env file"), environ, str(path))
    latest: dict[str, tuple[str, int]] = {}
    for name, value, lineno in parsed.assignments:
        if name not in ENV_NAMES and name not in parsed.referenced:
            hint = did_you_mean(name, ENV_NAMES)
            raise ConfigError(f"unknown key {name!r} in {path} line {lineno}{hint}")
        latest[name] = (value, lineno)
    return _by_precedence(latest, lambda name, line: Origin("env-file", f"{path}:{line} {name}"))


def read_environment(environ: Mapping[str, str]) -> list[tuple[str, str, Origin]]:
    """Settings from the environment, at most one (the highest-precedence name) per key."""
    present = {name: (environ[name], 0) for name in ENV_NAMES if name in environ}
    return _by_precedence(present, lambda name, _line: Origin("env", name))


def _by_precedence(
    present: Mapping[str, tuple[str, int]], origin: Callable[[str, int], Origin]
) -> list[tuple[str, str, Origin]]:
    """For each key, the value of its highest-precedence name among `present`."""
    out: list[tuple[str, str, Origin]] = []
    for key in FIELDS:
        for name in env_names_for(key):
            if name in present:
                value, line = present[name]
                out.append((key, value, origin(name, line)))
                break
    return out


# --- loading -----------------------------------------------------------------------------------


def load_config(
    *,
    config_file: Path | None = None,
    env_file: Path | None = None,
    cli: Mapping[str, tuple[Any, str]] | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    home: Path | None = None,
    strict_sections: Collection[str] | None = None,
    read_sections: Collection[str] | None = None,
) -> LoadedConfig:
    """Build the effective config from every layer; `cli` maps key → (value, flag).

    A shared environment name's value that does not validate (`_shared_name`) is an error in
    `strict_sections` (None: every section); in a section outside `read_sections` (None: every
    section) it is dropped without a word, since the command never reads it; elsewhere it is
    dropped and said (`ignored`)."""
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    home = Path(os.path.expanduser("~")) if home is None else home

    layered: Layered = {}
    yaml_path, found = find_config_file(config_file, environ, cwd, home)
    if yaml_path is not None:
        from nvrx.config.yamlfile import yaml_settings  # yaml only when there is a file

        text = read_config_text(yaml_path, "config file")
        for key, value in yaml_settings(text, yaml_path).items():
            layered[key] = (value, Origin("file", str(yaml_path)))

    if env_file is None and environ.get("NVRX_ENV_FILE", "").strip():
        env_file = Path(os.path.expanduser(environ["NVRX_ENV_FILE"].strip()))
    if env_file is not None:
        if not env_file.is_file():
            raise ConfigError(f"env file not found: {env_file}")
        for key, value, origin in read_env_file(env_file, environ):
            layered[key] = (value, origin)

    below: dict[str, tuple[Any, Origin] | None] = {}  # what the environment layer replaced
    for key, value, origin in read_environment(environ):
        below[key] = layered.get(key)
        layered[key] = (value, origin)

    for key, (value, flag) in (cli or {}).items():
        if key not in FIELDS:
            raise ConfigError(f"unknown key {key!r} (from {flag}){did_you_mean(key, FIELDS)}")
        layered[key] = (value, Origin("cli", flag))

    ignored: list[str] = []
    while True:
        try:
            config = NvrxConfig.model_validate(_nested(layered))
            break
        except ValidationError as exc:
            key = ".".join(str(part) for part in exc.errors()[0]["loc"][:2])
            source = layered[key][1] if key in layered else None
            section = key.split(".", 1)[0]
            strict = strict_sections is None or section in strict_sections
            if source is None or strict or not _shared_name(source):
                raise ConfigError(_describe_validation_error(exc, layered)) from None
            # A generic name (TIME, ACCOUNT, ...) in the shell may belong to another program
            # (GNU time reads TIME): its bad value is ignored, said, never fatal; not even said
            # to a command that never reads the setting.
            if read_sections is None or section in read_sections:
                shown = HIDDEN if is_secret(FIELDS[key]) else quoted(layered[key][0])
                ignored.append(
                    f"ignoring {source.where}={shown} from the environment: not a valid {key}"
                )
            previous = below.pop(key, None)
            if previous is None:
                del layered[key]
            else:
                layered[key] = previous

    origins = {key: layered[key][1] if key in layered else Origin("default") for key in FIELDS}
    return LoadedConfig(config, origins, yaml_path, env_file, found, tuple(ignored))


def _shared_name(origin: Origin) -> bool:
    """An upstream variable without nvrx's prefix, read from the process environment."""
    return origin.layer == "env" and not origin.where.startswith("NVRX_")


def _nested(layered: Layered) -> dict[str, dict[str, Any]]:
    nested: dict[str, dict[str, Any]] = {}
    for key, (value, _origin) in layered.items():
        section, name = key.split(".", 1)
        nested.setdefault(section, {})[name] = value
    return nested


def _describe_validation_error(exc: ValidationError, layered: Layered) -> str:
    err = exc.errors()[0]
    loc = [str(part) for part in err["loc"]]
    key = ".".join(loc[:2])
    if key in FIELDS and is_secret(FIELDS[key]):
        shown, source = HIDDEN, str(layered[key][1]) if key in layered else "default"
    elif key in layered:
        value, origin = layered[key]
        shown = quoted(value if isinstance(value, str) else json.dumps(value, default=str))
        source = str(origin)
    else:
        shown, source = "(default)", "default"
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    return f"bad value for {key}: {shown} (from {source}): {cut(printable(msg), 200)}"


def parse_assignments(items: Sequence[str], flag: str = "--set") -> dict[str, tuple[str, str]]:
    """`section.key=value` strings from the command line → the `cli` mapping of load_config."""
    out: dict[str, tuple[str, str]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{flag} expects SECTION.KEY=VALUE, got {key_part(item)}")
        if key not in FIELDS:
            # Not the value: a mistyped secret key (`score.apikey=...`) must not print the secret.
            hint = did_you_mean(key, FIELDS)
            raise ConfigError(f"unknown key {key[:80]!r} (from {flag}){hint}")
        out[key] = (value, f"{flag} {key}")
    return out


@dataclass(frozen=True)
class ConfigSource:
    """Where a command's settings come from besides the defaults and the environment: the
    three options every subcommand takes (`--config`, `--env-file`, `--set`), handed to its
    package as one value."""

    config_file: Path | None = None
    env_file: Path | None = None
    sets: tuple[str, ...] = ()

    def load(
        self,
        flags: Mapping[str, tuple[Any, str]] | None = None,
        *,
        submits_from: Collection[str] = (),
        reads: Collection[str] | None = None,
    ) -> LoadedConfig:
        """The config of one command: every layer, then its `--set` assignments, then its own
        flags, which win (`flags` maps key → (value, flag); a value of None is a flag not
        given). Values keep their type (a flag's int is an int), and `config show` names the
        flag that set them. Sets the command's input cap.

        A command is never broken by an environment variable of a shared name (TIME, ACCOUNT,
        PARTITION, ... without nvrx's prefix, which other programs read too: GNU time's
        TIME=%e) in a setting it does not build jobs from: a value of one that does not
        validate is ignored, with a warning when the command `reads` its section (None: it
        may read any). In the sections a command `submits_from` it is refused, as any bad
        value: there it would decide what runs."""
        cli: dict[str, tuple[Any, str]] = dict(parse_assignments(list(self.sets)))
        for key, (value, flag) in (flags or {}).items():
            if value is not None:
                cli[key] = (value, flag)
        loaded = load_config(
            config_file=self.config_file,
            env_file=self.env_file,
            cli=cli,
            strict_sections=submits_from,
            read_sections=reads,
        )
        if submits_from and loaded.config_found and loaded.config_file is not None:
            # Before anything else: what this file sets decides what gets submitted.
            note(
                f"reading settings from {loaded.config_file.resolve()}, found by the search "
                "(not named by --config or NVRX_CONFIG)"
            )
        set_input_limit(loaded.config.limits.max_input_bytes)
        set_allowed_roots(tuple(loaded.config.limits.allowed_roots))
        for line in loaded.ignored:
            warn(line)
        return loaded
