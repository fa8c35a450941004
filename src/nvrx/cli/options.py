"""Options every subcommand takes (so they can follow the subcommand like any other flag), and
the completions of pool and workload names."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from nvrx.config.load import ConfigSource

ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="YAML config file (default: $NVRX_CONFIG, ./nvrx.yaml, ~/.config/nvrx/config.yaml).",
        dir_okay=False,
    ),
]
EnvFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--env-file",
        help="user.env-style KEY=VALUE site file (default: $NVRX_ENV_FILE).",
        dir_okay=False,
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", metavar="SECTION.KEY=VALUE", help="Override one setting (repeatable)."),
]
ForceOpt = Annotated[
    bool,
    typer.Option(
        "--force", help="Skip damaged journal lines (and say how many) instead of stopping."
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
JunitOpt = Annotated[
    Path | None,
    typer.Option("--junit", metavar="FILE", dir_okay=False, help="Write JUnit XML to FILE."),
]


def config_source(
    config: Path | None, env_file: Path | None, set_: list[str] | None
) -> ConfigSource:
    """`--config`, `--env-file` and `--set` as the one value a package loads its settings from
    (imported when a command runs: `--help` loads no settings)."""
    from nvrx.config.load import ConfigSource

    return ConfigSource(config, env_file, tuple(set_ or ()))


def html_option(default_place: str) -> Any:
    """`--html [FILE]`, the same on every command that draws a page: FILE, or with no FILE the
    command's `default_place` (the command receives ""; `nvrx.cli.main` fills that in)."""
    return typer.Option(
        "--html",
        metavar="[FILE]",
        help=f"Write the self-contained HTML page to FILE (no FILE: {default_place}).",
    )


# What a completion may put on a command line: a name the shell takes literally. A file name
# such as `$(curl ...).pool` in a pools folder is never offered (the shell would run it).
_PLAIN = re.compile(r"[A-Za-z0-9._+:@%=,-]{1,255}")


def _plain(name: str) -> bool:
    return _PLAIN.fullmatch(name) is not None


def complete_pool(incomplete: str) -> list[str]:
    """Pool names: the built-in ones and the `pools/` files of the configured workload."""
    from nvrx.campaign.pool import NAMED_POOLS
    from nvrx.campaign.poolfile import pool_files

    names = list(NAMED_POOLS)
    try:
        from nvrx.config import load_config
        from nvrx.inject.workloads import find_workload, load_registry

        cfg = load_config().config.inject
        workload = find_workload(cfg.workload, load_registry(cfg.workloads_file))
        if workload.script_dir is not None:
            names += pool_files(workload.script_dir / "pools")
    except Exception:  # completion must never fail the shell: the built-in names still help
        pass
    return [n for n in names if n.startswith(incomplete) and _plain(n)]


def complete_workload(incomplete: str) -> list[str]:
    """Workload names of the shipped registry and the configured workloads file."""
    try:
        from nvrx.config import load_config
        from nvrx.inject.workloads import load_registry

        names = sorted(load_registry(load_config().config.inject.workloads_file))
    except Exception:  # a broken config completes nothing rather than printing a traceback
        return []
    return [n for n in names if n.startswith(incomplete) and _plain(n)]
