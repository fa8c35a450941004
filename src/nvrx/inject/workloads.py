"""The workloads registry: what to submit for an experiment, and the bounds a pool must fit.

Shipped as package data (upstream's `workloads.conf` as YAML) and extendable from the config
(`inject.workloads_file`, same shape; an entry of the same name replaces the shipped one).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nvrx.config import ConfigError, parse_yaml
from nvrx.files import InputError, read_bounded
from nvrx.inject.pool import PoolError


class Workload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    script: Path | None = None  # None: the site provides it (inject.sbatch_script)
    min_nodes: int = Field(1, ge=1)
    gpus_per_node: int | None = Field(None, ge=1)  # None: slurm.gpus_per_node
    pool: str | None = None  # a named pool or a pool file
    time: str | None = None
    env: dict[str, str] = Field(default_factory=dict)  # extra exports for the job


def _parse(text: str, source: str, base: Path | None) -> dict[str, Workload]:
    try:
        data: Any = parse_yaml(text, f"workloads file {source}")
    except ConfigError as exc:
        raise PoolError(str(exc)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PoolError(f"workloads file {source} must map names to workloads")
    out: dict[str, Workload] = {}
    for name, body in data.items():
        if body is not None and not isinstance(body, dict):
            raise PoolError(f"workload {name!r} in {source} must be a mapping of settings")
        fields = dict(body or {})
        script = fields.get("script")
        if isinstance(script, str) and base is not None and not Path(script).is_absolute():
            fields["script"] = str((base / script).resolve())
        try:
            out[str(name)] = Workload(name=str(name), **fields)
        except (ValidationError, TypeError) as exc:
            raise PoolError(f"workload {name!r} in {source}: {exc}".splitlines()[0]) from None
    return out


def load_registry(extra: Path | None = None) -> dict[str, Workload]:
    text = resources.files("nvrx.inject").joinpath("workloads.yaml").read_text("utf-8")
    registry = _parse(text, "the shipped registry", None)
    if extra is not None:
        try:
            extra_text = read_bounded(extra, "workloads file")[0].decode("utf-8")
        except InputError as exc:
            raise PoolError(str(exc)) from None
        except UnicodeDecodeError as exc:
            raise PoolError(
                f"workloads file {extra} is not UTF-8 text (byte {exc.start})"
            ) from None
        registry.update(_parse(extra_text, str(extra), extra.parent))
    return registry


def find_workload(name: str, registry: dict[str, Workload]) -> Workload:
    try:
        return registry[name]
    except KeyError:
        known = ", ".join(sorted(registry))
        raise PoolError(f"unknown workload {name!r} (known: {known})") from None
