"""nvrx's one YAML reader: config files and workloads files. Only this module imports yaml, so
a command without a config file does not pay for it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic.fields import FieldInfo

from nvrx.config.errors import ConfigError
from nvrx.config.model import FIELDS, SECTIONS
from nvrx.config.values import command_words
from nvrx.display import did_you_mean


class _YamlLoader(yaml.SafeLoader):
    """SafeLoader without YAML 1.1 number guessing: `time_limit: 1:30:00` stays the text
    1:30:00 (not the base-60 integer 5400) and `account: 012` stays 012. Numbers arrive as
    text; pydantic reads them as numbers where a setting is numeric.

    Without aliases, too: nested aliases make a few hundred bytes stand for billions of nodes
    (every later step, down to the error message, would walk them all), and a settings file
    has nothing to share."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not supported in nvrx config files", mark
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        # A key twice (a section, or a setting in one) is a mistake, not "the last one wins":
        # one of the two values would be dropped without a word.
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str | int):
                continue  # not hashable as written: SafeLoader's own error says so
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"{key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_YamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if not tag.endswith((":int", ":float"))]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _is_path_field(info: FieldInfo) -> bool:
    ann = info.annotation
    return ann is Path or (hasattr(ann, "__args__") and Path in getattr(ann, "__args__", ()))


def _is_command_field(info: FieldInfo) -> bool:
    extra = info.json_schema_extra
    return isinstance(extra, dict) and extra.get("command") is True


def _resolve_command(value: Any, base: Path) -> Any:
    """In a file, command words written `./x` or `../x` are relative to that file; a bare name
    (`ft_launcher`) is left for PATH."""

    def one(word: Any) -> Any:
        if isinstance(word, str) and word.startswith(("./", "../")):
            return str((base / word).resolve())
        return word

    if isinstance(value, str):
        value = command_words(value)  # split first, so a resolved path may contain spaces
    return [one(w) for w in value] if isinstance(value, list) else value


def parse_yaml(text: str, what: str) -> Any:
    """nvrx's one YAML reader (config and workloads files): numbers stay text, no aliases.
    ConfigError names `what` and the line."""
    try:
        return yaml.load(text, Loader=_YamlLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None)
        why = f": {problem}" if problem else ""
        raise ConfigError(f"{what}{where} is not valid YAML{why}") from None
    except RecursionError:
        raise ConfigError(f"{what} is nested too deeply") from None


def yaml_settings(text: str, path: Path) -> dict[str, Any]:
    """A YAML config file's text (read by `config.load`) flattened to dotted keys; unknown
    keys are an error naming the file."""
    data = parse_yaml(text, f"config file {path}")
    if data is None:
        return {}
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise ConfigError(f"config file {path} must be a mapping of sections, not {kind}")
    flat: dict[str, Any] = {}
    for section, body in data.items():
        if section not in SECTIONS:
            known = ", ".join(SECTIONS)
            hint = did_you_mean(str(section), SECTIONS)
            raise ConfigError(f"unknown key {section!r} in {path} (sections: {known}){hint}")
        if body is None:
            continue
        if not isinstance(body, dict):
            raise ConfigError(f"section {section!r} in {path} must be a mapping")
        for name, value in body.items():
            key = f"{section}.{name}"
            if key not in FIELDS:
                raise ConfigError(f"unknown key {key!r} in {path}{did_you_mean(key, FIELDS)}")
            # A relative path in a file is relative to that file, so cron and login shells agree.
            if isinstance(value, str) and _is_path_field(FIELDS[key]) and value:
                expanded = os.path.expanduser(value)
                if not os.path.isabs(expanded):
                    value = str((path.parent / expanded).resolve())
            elif _is_command_field(FIELDS[key]):
                value = _resolve_command(value, path.parent)
            flat[key] = value
    return flat
