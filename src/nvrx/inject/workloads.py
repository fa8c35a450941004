"""The workloads registry: what to submit for an experiment, and the bounds a pool must fit.

Shipped as package data (upstream's `workloads.conf` as YAML) and extendable from the config
(`inject.workloads_file`; an entry of the same name replaces the shipped one): a YAML file of
the same shape, or upstream's own `workloads.conf` (a name ending in `.conf`), read as upstream's
driver reads it: whitespace-separated `NAME SCRIPT BASE_EXPERIMENTS_DIR DESCRIPTION POOL_FILE
TIME`, `#` lines ignored, `-` for "not set", `_` in the description shown as a space, SCRIPT
relative to the file's directory and POOL_FILE to its `pools/` directory. That directory is
the workload's script directory, given to the job as NVRX_ATTR_SCRIPT_DIR (where upstream's
workload scripts look for their `user.env`).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nvrx.campaign.errors import CampaignError
from nvrx.config import ConfigError, SlurmTime
from nvrx.config.yamlfile import parse_yaml
from nvrx.display import counted, did_you_mean, some_of
from nvrx.files import InputError, read_bounded


class WorkloadError(CampaignError):
    """A workloads registry, file or entry that cannot be used."""


class Workload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    script: Path | None = None  # None: the site provides it (inject.sbatch_script)
    min_nodes: int = Field(1, ge=1)
    gpus_per_node: int | None = Field(None, ge=1)  # None: slurm.gpus_per_node
    pool: str | None = None  # a named pool or a pool file
    time: SlurmTime | None = None
    env: dict[str, str] = Field(default_factory=dict)  # extra exports for the job
    # NVRX_ATTR_SCRIPT_DIR (None: the script's directory); upstream's scripts/ for a .conf
    script_dir: Path | None = None
    # The session root when inject.base_experiments_dir is not set (upstream's third column)
    base_experiments_dir: Path | None = None


UPSTREAM_COLUMNS = ("name", "script", "base_experiments_dir", "description", "pool", "time")


MAX_COLUMN = 4096  # a path as long as Linux allows


def _plain_word(word: str) -> bool:
    return len(word) <= MAX_COLUMN and word.isprintable()


def parse_workloads_conf(text: str, source: str, base: Path) -> dict[str, Workload]:
    """Upstream's `workloads.conf` (the module docstring); a line with fewer than two columns,
    more than six, or a bad value stops the command naming the file and line."""
    out: dict[str, Workload] = {}
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        words = line.split()
        if not 2 <= len(words) <= len(UPSTREAM_COLUMNS):
            raise WorkloadError(
                f"workloads file {source} line {no}: expected NAME SCRIPT [BASE_EXPERIMENTS_DIR "
                f"DESCRIPTION POOL_FILE TIME], got {counted(len(words), 'column')}"
            )
        odd = [c for c, w in zip(UPSTREAM_COLUMNS, words, strict=False) if not _plain_word(w)]
        if odd:  # a NUL would break the path later, a 5 MB name every message that names it
            raise WorkloadError(
                f"workloads file {source} line {no}: the {odd[0]} column holds a control "
                f"character or is over {MAX_COLUMN} characters"
            )
        row = {k: v for k, v in zip(UPSTREAM_COLUMNS, words, strict=False) if v != "-"}
        name = row.pop("name")
        if name in out:
            continue  # upstream takes a name's first line
        fields: dict[str, Any] = {"script": str(base / row["script"]), "script_dir": str(base)}
        if "description" in row:
            fields["description"] = row["description"].replace("_", " ")
        if "pool" in row:
            # A file of the `pools/` folder, by name: a path would let the registry point nvrx
            # at any file it can read (its reads never leave the folder: files.within_root).
            if "/" in row["pool"] or row["pool"] in (".", ".."):
                raise WorkloadError(
                    f"workloads file {source} line {no}: POOL_FILE must be a file name in "
                    f"{base / 'pools'}, not a path"
                )
            fields["pool"] = str(base / "pools" / row["pool"])
        for key in ("base_experiments_dir", "time"):
            if key in row:
                fields[key] = row[key]
        try:
            out[name] = Workload(name=name, **fields)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(map(str, first["loc"]))
            reason = first["msg"].removeprefix("Value error, ")
            raise WorkloadError(f"workloads file {source} line {no}: {where}: {reason}") from None
    return out


def _parse(text: str, source: str, base: Path | None) -> dict[str, Workload]:
    try:
        data: Any = parse_yaml(text, f"workloads file {source}")
    except ConfigError as exc:
        raise WorkloadError(str(exc)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise WorkloadError(f"workloads file {source} must map names to workloads")
    out: dict[str, Workload] = {}
    for name, body in data.items():
        if body is not None and not isinstance(body, dict):
            raise WorkloadError(f"workload {name!r} in {source} must be a mapping of settings")
        fields = dict(body or {})
        script = fields.get("script")
        if isinstance(script, str) and base is not None and not Path(script).is_absolute():
            fields["script"] = str((base / script).resolve())
        try:
            out[str(name)] = Workload(name=str(name), **fields)
        except (ValidationError, TypeError) as exc:
            raise WorkloadError(f"workload {name!r} in {source}: {exc}".splitlines()[0]) from None
    return out


def load_registry(extra: Path | None = None) -> dict[str, Workload]:
    text = resources.files("nvrx.inject").joinpath("workloads.yaml").read_text("utf-8")
    registry = _parse(text, "the shipped registry", None)
    if extra is not None:
        try:
            extra_text = read_bounded(extra, "workloads file")[0].decode("utf-8")
        except InputError as exc:
            raise WorkloadError(str(exc)) from None
        except UnicodeDecodeError as exc:
            raise WorkloadError(
                f"workloads file {extra} is not UTF-8 text (byte {exc.start})"
            ) from None
        if extra.name.endswith(".conf"):
            registry.update(parse_workloads_conf(extra_text, str(extra), extra.parent.resolve()))
        else:
            registry.update(_parse(extra_text, str(extra), extra.parent))
    return registry


def find_workload(name: str, registry: dict[str, Workload]) -> Workload:
    try:
        return registry[name]
    except KeyError:
        known = some_of(sorted(registry))
        hint = did_you_mean(name, registry)
        raise WorkloadError(f"unknown workload {name[:80]!r} (known: {known}){hint}") from None
