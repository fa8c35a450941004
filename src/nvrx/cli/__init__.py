"""The `nvrx` command line: one module per subcommand, each declaring its options and calling
one function of its package (DESIGN.md, "Modules").

The root group lists the subcommands from the table below and imports a subcommand's module only
when it runs (or when its own help or completion is asked for): `nvrx --help` loads no package
and no settings model, and `nvrx watch` builds the options of `watch` alone.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, NamedTuple, NoReturn

import typer
from typer.exceptions import TyperException

import nvrx
from nvrx.cli.options import CommandGroup


class Subcommand(NamedTuple):
    module: str  # nvrx.cli.<module>, whose `app` holds the command (or the group)
    help: str  # the line `nvrx --help` shows, without importing the module


SUBCOMMANDS: dict[str, Subcommand] = {
    "config": Subcommand("config", "Inspect the effective configuration."),
    "submit-chain": Subcommand("chain", "Submit a singleton job-array chain of K generations."),
    "watch": Subcommand(
        "watch", "Watch a chain from outside the job and report restart anomalies."
    ),
    "inject-loop": Subcommand(
        "inject", "Run a prioritised pool of fault-injection experiments, BATCH_SIZE at a time."
    ),
    "analyze": Subcommand("analyze", "Run the built-in analysers on one experiment's artifacts."),
    "report": Subcommand(
        "report", "Print a campaign's report (rebuilt from its journal), or what changed."
    ),
    "score": Subcommand("score", "Judge attribution output against the injected ground truth."),
}


class LazyGroup(CommandGroup):
    """The root group: subcommands come from SUBCOMMANDS, each imported on first use."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(SUBCOMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        entry = SUBCOMMANDS.get(cmd_name)
        if entry is None:
            return None
        module = importlib.import_module(f"nvrx.cli.{entry.module}")
        command = typer.main.get_command(module.app)
        command.name = cmd_name
        _plain_metavars(command)
        return command

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, entry.help) for name, entry in SUBCOMMANDS.items()])


def _plain_metavars(command: Any) -> None:
    """Help that names what a value is, in capitals, never a Python type: `--work-dir DIR`,
    `--platform slurm|none`, `--interval N` (not `<path>`, `<str>`, `<int>`), an Arguments
    section that says `FILE`, not `path`, and usage lines that read `[JOB_ID|PATH]...`, not
    `[[JOB_ID | PATH...]]...`. An explicit metavar always wins."""
    for sub in getattr(command, "commands", {}).values():  # a group's commands
        _plain_metavars(sub)
    for param in command.params:
        if param.param_type_name == "argument":
            name = param.metavar or _path_metavar(param) or (param.name or "ARG").upper()
            param.metavar = name  # the Arguments section's name as well as the usage line's
            shown = (name if param.required else f"[{name}]") + ("..." if param.nargs != 1 else "")
            param.get_usage_pieces = lambda ctx=None, shown=shown: [shown]
            param.display_type_rich = lambda ctx=None, **_: None
        elif not (param.is_flag or param.count or param.metavar):
            param.metavar = _metavar_of(param)


def _path_metavar(param: Any) -> str | None:
    """FILE, DIR or PATH for a path value, else None: FILE or DIR when the declaration allows
    only that, or when an option's own name says it (`--state-dir`, `--prom-file`)."""
    desc = param.type_descriptor
    if not (desc.is_path or desc.is_file):
        return None
    info = desc.parameter_info
    longest: str = max(param.opts, key=len) if param.param_type_name == "option" else ""
    if not getattr(info, "dir_okay", True) or longest.endswith("-file"):
        return "FILE"
    if not getattr(info, "file_okay", True) or longest.endswith("-dir"):
        return "DIR"
    return "PATH"


def _metavar_of(option: Any) -> str:
    desc = option.type_descriptor
    if desc.is_choice and desc.choices:
        return "|".join(str(getattr(c, "value", c)) for c in desc.choices)
    path = _path_metavar(option)
    if path is not None:
        return path
    bare = desc.annotation
    if bare is int:
        return "N"
    if bare is float:
        return "NUMBER"
    longest: str = max(option.opts, key=len).lstrip("-")
    return longest.rsplit("-", 1)[-1].upper()  # --job-name → NAME, --webhook-url → URL


# User text prints literally everywhere: no rich markup or emoji codes in help or messages.
app = typer.Typer(
    cls=LazyGroup,
    rich_markup_mode=None,
    name="nvrx",
    help="Resilient large-scale training on Slurm.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"nvrx {nvrx.__version__}\n")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", callback=_version, is_eager=True
    ),
) -> None:
    """nvrx: singleton job-array chains, an out-of-job watcher, fault-injection campaigns and
    attribution scoring, on one config and one Slurm adapter."""


# Bad input raised wherever it was read: a config error, an input over its cap or unreadable. Looked
# An error of nvrx's carries its exit code (`exit_code`: 2 bad input, 1 a failure, 3 a watcher
# that cannot see Slurm; DESIGN.md, "Errors"): read off the error, so that `nvrx --help` imports
# none of the modules that define them.
def exit_code_of(exc: BaseException) -> int | None:
    """The exit code an nvrx error carries; None for anything else (a bug: its traceback)."""
    code = getattr(exc, "exit_code", None)
    ours = type(exc).__module__.split(".")[0] == "nvrx"
    return code if ours and isinstance(code, int) and not isinstance(code, bool) else None


# Options whose value may be left out (`--html [FILE]`): click has none, so `--html` with no FILE
# after it becomes `--html=` before parsing. The next word is FILE unless there is none, it is an
# option, or it names an existing directory (a SESSION or PATH argument: never a page).
OPTIONAL_VALUE = ("--html",)


def optional_values(argv: list[str]) -> list[str]:
    out: list[str] = []
    for i, word in enumerate(argv):
        if word == "--":  # what follows goes to sbatch
            return out + argv[i:]
        if word in OPTIONAL_VALUE:
            following = argv[i + 1] if i + 1 < len(argv) else None
            if following is None or following.startswith("-") or os.path.isdir(following):
                word += "="
        out.append(word)
    return out


# The files typer's --install-completion writes, for any shell. A symlinked ~/.bashrc (a dotfiles
# checkout) is common and fine; one that is a FIFO, a directory or a device would hang the write
# or break it half-way.
_COMPLETION_FILES = (
    ".bashrc", ".bash_completions/nvrx.sh", ".zshrc", ".zfunc/_nvrx",
    ".config/fish/completions/nvrx.fish",
)  # fmt: skip


def _check_completion_files() -> None:
    import stat

    from nvrx.terminal import CommandError

    home = os.path.expanduser("~")
    for name in _COMPLETION_FILES:
        path = os.path.join(home, name)
        try:
            mode = os.stat(path).st_mode
        except OSError:
            continue  # absent (created as a regular file), or a dangling link typer replaces
        if not stat.S_ISREG(mode):
            raise CommandError(
                f"--install-completion: {path} is not a regular file: refusing to write to it"
            )


def main() -> None:
    """The entry point. Not standalone: a usage error (a bad flag or value) is one `nvrx: error:`
    line and exit 2, like every other bad input, instead of a framed usage box. A command's
    CommandError, a config error and an unreadable input are one line too, wherever raised."""
    from nvrx.contract import error_document, wants_json
    from nvrx.terminal import error_line

    as_json = wants_json(sys.argv[1:])

    def fail(message: str, code: int) -> NoReturn:
        error_line(message)
        if as_json:  # a program reading stdout gets the error as a document too
            error_document(message, code)
        sys.exit(code)

    try:
        if "--install-completion" in sys.argv[1:2]:
            _check_completion_files()
        code = app(args=optional_values(sys.argv[1:]), standalone_mode=False)
    except TyperException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare group: its help, and success
            sys.stdout.write(exc.format_message().rstrip("\n") + "\n")
            sys.exit(0)
        ctx = getattr(exc, "ctx", None)
        where = f"{ctx.command_path}: " if ctx is not None else ""
        message = " ".join(exc.format_message().split())
        if message:  # empty for `nvrx` alone, which has printed the help already
            fail(f"{where}{message} (see --help)", exc.exit_code)
        sys.exit(exc.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        sys.stderr.write("nvrx: interrupted\n")
        sys.exit(130)
    except Exception as exc:
        code = exit_code_of(exc)
        if code is None:
            raise
        fail(str(exc), code)
    sys.exit(code if isinstance(code, int) else 0)
