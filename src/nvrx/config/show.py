"""`nvrx config show` and `nvrx config env`: the effective settings with the layer each came
from, and the environment names each setting reads."""

from __future__ import annotations

import json
from typing import Any

import nvrx
from nvrx.config.load import LoadedConfig
from nvrx.config.model import FIELDS
from nvrx.config.names import env_names_for
from nvrx.contract import write_document
from nvrx.terminal import stdout

# config show's value column grows up to this; a longer value pushes only its own source right
# (in a pipe) or folds onto the lines below (on a terminal too narrow for it).
VALUE_WIDTH = 36
# On a narrow terminal the value column gives way to the source, down to this.
MIN_VALUE_WIDTH = 16


def _display(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, str):
        return value if value else '""'
    return json.dumps(value)


def show(loaded: LoadedConfig, as_json: bool) -> None:
    """Every effective setting and the layer it came from; secrets show as `<hidden>`."""
    rows = loaded.rows()
    if as_json:
        doc = {
            "nvrx_version": nvrx.__version__,
            "config_file": str(loaded.config_file) if loaded.config_file else None,
            "env_file": str(loaded.env_file) if loaded.env_file else None,
            "settings": {
                key: {"value": value, "source": str(origin)} for key, value, origin in rows
            },
        }
        write_document(doc, 0)
        return
    from rich.text import Text

    out = stdout()
    width = out.width if out.is_terminal else None
    for label, path in (("config file: ", loaded.config_file), ("env file:    ", loaded.env_file)):
        for text in labelled(label, str(path or "(none)"), width):
            out.print(Text(text))
    shown = [(key, _display(value), str(origin)) for key, value, origin in rows]
    header, lines = setting_lines(shown, width)
    out.print(Text(header, style="bold"))
    for left, source in lines:
        # Values and paths are data, never rich markup (a value may well contain "[/x]").
        line = Text(left)
        line.append(source, style="dim" if source == "default" else "cyan")
        out.print(line, soft_wrap=True)


def labelled(label: str, text: str, width: int | None) -> list[str]:
    """`label` and `text` on one line, or on a terminal `width` wide, `text` folded below
    itself."""
    room = None if width is None else width - len(label)
    if room is None or room < MIN_VALUE_WIDTH or len(text) <= room:
        return [label + text]
    return [
        (label if i == 0 else " " * len(label)) + part for i, part in enumerate(_fold(text, room))
    ]


def setting_lines(
    shown: list[tuple[str, str, str]], width: int | None
) -> tuple[str, list[tuple[str, str]]]:
    """`config show`'s header and lines, each (key and value columns, source), from (key,
    value, source) rows: aligned lines, not a table (a table pads every row to its longest value
    and puts a blank row of spaces between sections), a blank line between sections, no
    trailing space anywhere.

    `width` None (a pipe): one line per setting, whatever its length, for grep and awk. A
    terminal's `width`: a row that does not fit folds its value (and its source, when even that
    is too long) onto the lines below, in their columns; the key is never cut."""
    key_width = max(len(key) for key, _, _ in shown)
    value_width = min(max(len(v) for _, v, _ in shown), VALUE_WIDTH)
    room = None if width is None else width - key_width - 4  # for value and source
    if room is not None and room < MIN_VALUE_WIDTH + 8:
        room = None  # too narrow to fold into columns: the terminal wraps
    if room is not None:
        longest_source = max(len(source) for _, _, source in shown)
        value_width = max(
            min(value_width, room - longest_source), min(value_width, MIN_VALUE_WIDTH)
        )
    header = f"{'setting':<{key_width}}  {'value':<{value_width}}  source"
    lines: list[tuple[str, str]] = []
    section = ""
    for key, value, source in shown:
        this = key.split(".", 1)[0]
        if section and this != section:
            lines.append(("", ""))
        section = this
        whole = f"{key:<{key_width}}  {value:<{value_width}}  "
        if room is None or len(whole) + len(source) <= key_width + 4 + room:
            lines.append((whole, source))
            continue
        values = _fold(value, value_width)
        sources = _fold(source, room - value_width)
        for i in range(max(len(values), len(sources))):
            part = values[i] if i < len(values) else ""
            left = f"{key if i == 0 else '':<{key_width}}  {part:<{value_width}}  "
            said = sources[i] if i < len(sources) else ""
            lines.append((left if said else left.rstrip(), said))
    return header, lines


def _fold(text: str, width: int) -> list[str]:
    """`text` in pieces of `width` characters (a path or a JSON list has no place to break)."""
    return [text[i : i + width] for i in range(0, len(text), width)] or [""]


def env_names(as_json: bool) -> None:
    """The environment variables each setting reads (canonical name, then upstream names)."""
    mapping = {key: env_names_for(key) for key in FIELDS}
    if as_json:
        write_document({"names": mapping}, 0)
        return
    from rich.table import Table

    table = Table(show_edge=False, box=None, pad_edge=False, header_style="bold")
    table.add_column("setting", no_wrap=True)
    table.add_column("environment (first wins)", overflow="fold")
    for key, names in mapping.items():
        table.add_row(key, ", ".join(names))
    stdout().print(table)
