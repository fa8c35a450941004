"""Options every subcommand takes (so they can follow the subcommand like any other flag), the
group every command group is (the root and `config`, `analyze`), and the completions of pool
and workload names."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException

if TYPE_CHECKING:
    from nvrx.config.load import ConfigSource


class CommandGroup(TyperGroup):
    """A group of nvrx's subcommands: its listing shows each one's whole first line of help
    (never cut with "..."), and an unknown name is one line of bad input, `no such command
    'X'`, with the closest name when one is close."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except TyperException as exc:  # a usage error; an unknown option is left as it is
            if not (args and exc.message.startswith("No such command")):
                raise
        raise no_such_command(ctx, args[0], self.list_commands(ctx))

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, summary_line(command.short_help or command.help or "")))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def summary_line(help_text: str) -> str:
    """The first paragraph of a command's help, as one line (the listing wraps it)."""
    return " ".join(help_text.strip().split("\n\n", 1)[0].split())


def no_such_command(ctx: Any, word: str, names: list[str]) -> Exception:
    """`no such command 'X'` (in the group, for a subgroup's), and the closest name or the help
    to read: the line `nvrx.cli.main` prints, exit 2."""
    from nvrx.display import did_you_mean, printable
    from nvrx.terminal import CommandError

    path: list[str] = []
    at = ctx
    while at is not None and at.parent is not None:  # the root's name is the program's: nvrx
        path.insert(0, at.info_name or "")
        at = at.parent
    group = " ".join(["nvrx", *path])
    where = f" in {group}" if path else ""
    hint = did_you_mean(word, names) or f" (see {group} --help)"
    return CommandError(f"no such command {printable(word[:80])!r}{where}{hint}")


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
