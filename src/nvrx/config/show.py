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

# config show's value column grows up to this; a longer value pushes only its own source right.
VALUE_WIDTH = 36


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
    out.print(f"config file: {loaded.config_file or '(none)'}", markup=False, highlight=False)
    out.print(f"env file:    {loaded.env_file or '(none)'}", markup=False, highlight=False)
    # Aligned lines, not a table: a table pads every row to its longest value (109 columns for
    # one long path), and a blank row of spaces between sections. A value longer than
    # VALUE_WIDTH pushes its own source right; no other row moves.
    shown = [(key, _display(value), origin) for key, value, origin in rows]
    key_width = max(len(key) for key, _, _ in shown)
    value_width = min(max(len(v) for _, v, _ in shown), VALUE_WIDTH)
    out.print(Text(f"{'setting':<{key_width}}  {'value':<{value_width}}  source", style="bold"))
    section = ""
    for key, value, origin in shown:
        this = key.split(".", 1)[0]
        if section and this != section:
            out.print()
        section = this
        # Values and paths are data, never rich markup (a value may well contain "[/x]").
        line = Text(f"{key:<{key_width}}  {value:<{value_width}}  ")
        line.append(str(origin), style="dim" if origin.layer == "default" else "cyan")
        out.print(line, soft_wrap=True)


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
