"""sbatch options as typed fields, validated before they become argv.

Every value that ends up in a flag is checked here, so no caller can build an sbatch line that
Slurm would misread (a comma in `--export`, a newline in `--comment`, a space in a job name).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

from nvrx.slurm.errors import SlurmParseError, SlurmValueError
from nvrx.slurm.ids import check_job_id, parse_task_indices

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")
_TIME_RE = re.compile(
    r"^(?:\d+|\d+:\d{2}|\d+:\d{2}:\d{2}|\d+-\d+|\d+-\d+:\d{2}|\d+-\d+:\d{2}:\d{2}"
    r"|UNLIMITED|INFINITE)$",
    re.IGNORECASE,
)
_MEM_RE = re.compile(r"^\d+[KMGT]?$", re.IGNORECASE)
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DEPENDENCY_ITEM_RE = re.compile(
    r"^(?:singleton|(?:after|afterany|afterok|afternotok|aftercorr|afterburstbuffer)"
    r"(?::\d+(?:_\d+)?(?:\+\d+)?)+)$"
)
_SIGNAL_RE = re.compile(r"^(?:SIG)?[A-Z0-9]{1,8}$|^\d{1,2}$")


def check_name(value: str, what: str = "job name") -> str:
    """A job, partition, account or QOS name: letters, digits and `._+-` only."""
    if not _NAME_RE.match(value):
        raise SlurmValueError(
            f"invalid {what} {value!r}: use letters, digits and . _ + - "
            "(no spaces, commas or shell characters)"
        )
    return value


_USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._@$-]{0,63}$")


# Words scontrol reads as more than one node: `nodename=ALL` updates every node of the cluster.
_NODE_KEYWORDS = frozenset({"all", "default"})


def check_node_name(value: str) -> str:
    """One node's name, as an action that touches a node must give it: a name (no hostlist
    range, no comma list) and never a word scontrol reads as many nodes (`ALL`)."""
    check_name(value, "node name")
    if value.lower() in _NODE_KEYWORDS:
        raise SlurmValueError(
            f"invalid node name {value!r}: a Slurm keyword that names more than one node"
        )
    return value


def check_user(value: str) -> str:
    """A login name as Slurm takes it in --user (letters, digits, `._@$-`)."""
    if not _USER_RE.match(value):
        raise SlurmValueError(f"invalid user {value!r}")
    return value


def check_query_name(value: str) -> str:
    """A job name to look up: Slurm allows spaces and most characters in names (`sbatch -J
    'my run'`); only commas (a list separator in --name) and control characters cannot be
    asked for."""
    if not value or "," in value or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise SlurmValueError(
            f"cannot query job name {value!r}: empty, a comma or a control character"
        )
    return value


def check_time_limit(value: str) -> str:
    if not _TIME_RE.match(value.strip()):
        raise SlurmValueError(
            f"invalid time limit {value!r}: expected MINUTES, HH:MM:SS or D-HH:MM:SS"
        )
    if not any(ch.isdigit() and ch != "0" for ch in value) and value.strip()[0].isdigit():
        # sbatch reads a zero limit as "no limit": say UNLIMITED if that is what is meant.
        raise SlurmValueError(f"invalid time limit {value!r}: zero (write UNLIMITED for none)")
    return value.strip()


def check_text(value: str, what: str, *, allow_comma: bool = True) -> str:
    """Free text that travels in one flag: no newlines or control characters."""
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise SlurmValueError(f"invalid {what} {value!r}: control characters are not allowed")
    if not allow_comma and "," in value:
        raise SlurmValueError(f"invalid {what} {value!r}: commas are not allowed")
    return value


def check_path(value: str | Path, what: str) -> str:
    text = check_text(str(value), what)
    if not text.startswith("/"):
        raise SlurmValueError(f"invalid {what} {text!r}: must be an absolute path")
    return text


def check_signal(value: str | int) -> str:
    text = str(value).strip().upper()
    if not _SIGNAL_RE.match(text):
        raise SlurmValueError(f"invalid signal {value!r}: use a name like TERM or a number")
    return text


def check_dependency(value: str) -> str:
    """`singleton`, `afterok:123:124`, or several joined by `,` (all) or `?` (any)."""
    if "," in value and "?" in value:
        raise SlurmValueError(f"invalid dependency {value!r}: use ',' (all) or '?' (any), not both")
    for item in re.split(r"[,?]", value):
        if not _DEPENDENCY_ITEM_RE.match(item):
            raise SlurmValueError(f"invalid dependency {value!r}")
    return value


def check_export(items: Sequence[str]) -> str:
    """`--export` items: ALL, NONE, NAME, or NAME=VALUE with no comma or newline in VALUE."""
    out: list[str] = []
    for item in items:
        name, sep, value = item.partition("=")
        if item in ("ALL", "NONE") and not sep:
            out.append(item)
            continue
        if not _ENV_NAME_RE.match(name):
            raise SlurmValueError(f"invalid --export variable name {name!r}")
        if sep:
            if "," in value or "\n" in value or "\r" in value:
                raise SlurmValueError(
                    f"invalid --export value for {name}: {value!r} contains a comma or newline, "
                    "which would corrupt --export"
                )
            check_text(value, f"--export value for {name}")
        out.append(item)
    return ",".join(out)


@dataclass(frozen=True)
class SubmitOptions:
    """The sbatch flags nvrx sets, as typed fields; `extra_args` pass through verbatim as argv."""

    job_name: str | None = None
    array: str | None = None
    nodes: int | None = None
    ntasks_per_node: int | None = None
    gpus_per_node: int | None = None
    cpus_per_task: int | None = None
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    dependency: str | None = None
    requeue: bool | None = None  # None: the site default; False: --no-requeue
    exclusive: bool = False
    mem: str | None = None
    output: str | None = None
    error: str | None = None
    chdir: str | Path | None = None
    comment: str | None = None
    export: tuple[str, ...] | None = None
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    def to_argv(self) -> list[str]:
        """The flags, validated. Raises SlurmValueError naming the bad value."""
        argv: list[str] = []
        if self.job_name is not None:
            argv.append(f"--job-name={check_name(self.job_name)}")
        if self.array is not None:
            try:
                parse_task_indices(self.array)
            except SlurmParseError as exc:
                raise SlurmValueError(f"invalid --array {self.array!r}: {exc}") from None
            argv.append(f"--array={self.array}")
        for flag, number in (
            ("--nodes", self.nodes),
            ("--ntasks-per-node", self.ntasks_per_node),
            ("--gpus-per-node", self.gpus_per_node),
            ("--cpus-per-task", self.cpus_per_task),
        ):
            if number is not None:
                if isinstance(number, bool) or not isinstance(number, int) or number < 1:
                    raise SlurmValueError(f"invalid {flag} {number!r}: must be a positive integer")
                argv.append(f"{flag}={number}")
        named: tuple[tuple[str, str | None, str], ...] = (
            ("--partition", self.partition, "partition"),
            ("--account", self.account, "account"),
            ("--qos", self.qos, "QOS"),
        )
        if self.time is not None:
            argv.append(f"--time={check_time_limit(self.time)}")
        for flag, name, what in named:
            if name is not None:
                argv.append(f"{flag}={check_name(name, what)}")
        if self.dependency is not None:
            argv.append(f"--dependency={check_dependency(self.dependency)}")
        if self.requeue is True:
            argv.append("--requeue")
        elif self.requeue is False:
            argv.append("--no-requeue")
        if self.exclusive:
            argv.append("--exclusive")
        if self.mem is not None:
            if not _MEM_RE.match(self.mem):
                raise SlurmValueError(f"invalid --mem {self.mem!r}: expected e.g. 0, 4000, 16G")
            argv.append(f"--mem={self.mem}")
        for flag, path in (
            ("--output", self.output),
            ("--error", self.error),
            ("--chdir", self.chdir),
        ):
            if path is not None:
                argv.append(f"{flag}={check_path(path, flag + ' path')}")
        if self.comment is not None:
            argv.append(f"--comment={check_text(self.comment, 'comment')}")
        if self.export is not None:
            argv.append(f"--export={check_export(self.export)}")
        for arg in self.extra_args:
            if "\0" in arg:
                raise SlurmValueError(f"invalid sbatch argument {arg!r}: NUL byte")
            self._check_not_owned(arg)
            argv.append(arg)
        return argv

    def _check_not_owned(self, arg: str) -> None:
        """sbatch keeps the last of a repeated option, so a pass-through argument could
        silently override a typed field; --parsable, --wrap and --comment belong to the adapter."""
        if not arg.startswith("-"):
            return
        for field_name, spellings in _FLAG_SPELLINGS:
            owned = field_name is None or getattr(self, field_name) != _DEFAULTS[field_name]
            if owned and any(_sets(arg, flag) for flag in spellings):
                what = "is set by nvrx" if field_name is None else f"conflicts with {field_name}"
                raise SlurmValueError(f"sbatch argument {arg!r} {what}")


def _sets(arg: str, flag: str) -> bool:
    if flag.startswith("--"):
        return arg == flag or arg.startswith(flag + "=")
    return arg == flag or (arg.startswith(flag) and not arg.startswith("--"))


_FLAG_SPELLINGS: tuple[tuple[str | None, tuple[str, ...]], ...] = (
    (None, ("--parsable", "--wrap", "--comment")),
    ("job_name", ("--job-name", "-J")),
    ("array", ("--array", "-a")),
    ("nodes", ("--nodes", "-N")),
    ("ntasks_per_node", ("--ntasks-per-node",)),
    ("gpus_per_node", ("--gpus-per-node",)),
    ("cpus_per_task", ("--cpus-per-task", "-c")),
    ("time", ("--time", "-t")),
    ("partition", ("--partition", "-p")),
    ("account", ("--account", "-A")),
    ("qos", ("--qos", "-q")),
    ("dependency", ("--dependency", "-d")),
    ("requeue", ("--requeue", "--no-requeue")),
    ("exclusive", ("--exclusive",)),
    ("mem", ("--mem",)),
    ("output", ("--output", "-o")),
    ("error", ("--error", "-e")),
    ("chdir", ("--chdir", "-D")),
    ("export", ("--export",)),
)


_DEFAULTS = {f.name: f.default for f in fields(SubmitOptions)}


def check_job_ids(job_ids: Sequence[str | int]) -> list[str]:
    """Validate ids for a command line (`123`, `123_4`), keeping order, dropping repeats."""
    seen: dict[str, None] = {}
    for job_id in job_ids:
        seen.setdefault(check_job_id(job_id), None)
    return list(seen)
