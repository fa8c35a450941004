"""`nvrx config show | env`."""

from __future__ import annotations

import typer

from nvrx.cli.options import CommandGroup, ConfigOpt, EnvFileOpt, JsonOpt, SetOpt, config_source

app = typer.Typer(
    cls=CommandGroup,
    help="Inspect the effective configuration.",
    no_args_is_help=True,
    rich_markup_mode=None,
    add_completion=False,  # completion: the root only
)


@app.command("show")
def config_show(
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
    env_file: EnvFileOpt = None,
    set_: SetOpt = None,
) -> None:
    """Print every effective setting and the layer it came from."""
    from nvrx.config.show import show

    show(config_source(config, env_file, set_).load(), as_json)


@app.command("env", short_help="List the environment variables each setting reads.")
def config_env(as_json: JsonOpt = False) -> None:
    """List the environment variables each setting reads (canonical name, then upstream names)."""
    from nvrx.config.show import env_names

    env_names(as_json)
