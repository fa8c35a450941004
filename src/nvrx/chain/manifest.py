"""The chain manifest (`<work_dir>/chain.json`): what was submitted, kept true at every step.

It is rewritten atomically (temporary file, fsync, rename) after every successful submit, so a
crash or a failed sbatch never leaves it claiming generations that do not exist or missing ones
that do. `watch`, `--extend` and `--cancel` work from it instead of rediscovering by job name.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from nvrx.chain.shape import ChainError
from nvrx.config import SlurmName
from nvrx.files import InputError, read_bounded, write_atomic

MANIFEST_NAME = "chain.json"
SCHEMA_VERSION = 1


def utcnow() -> datetime:
    return datetime.now(UTC)


class GenerationRecord(BaseModel):
    """One submitted generation (one array job)."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(ge=0)
    # Checked, not trusted: a manifest is a file anyone with the work dir can edit, and these
    # end up in scancel argv and in state paths.
    job_id: str = Field(pattern=r"^[0-9]+$")
    comment: str
    submitted_at: AwareDatetime  # compared with Slurm's (aware) end times
    # Found in the queue by its comment, not recorded at its submit: submitted_at is when it
    # was adopted, not when Slurm got it.
    adopted: bool = False


class Submitter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user: str
    host: str
    nvrx_version: str
    argv: list[str]
    cwd: str


class ChainManifest(BaseModel):
    """Everything needed to watch, extend or cancel a chain without asking Slurm by name."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    chain_id: str = Field(pattern=r"^[0-9a-f]{10}$")  # secrets.token_hex(5)
    job_name: SlurmName
    work_dir: str
    script: str
    script_sha256: str
    depth: int = Field(ge=1)
    shape: dict[str, Any]
    submit_options: dict[str, Any]
    settings: dict[str, Any]
    submitter: Submitter
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    generations: list[GenerationRecord] = Field(default_factory=list)
    cancelled_at: datetime | None = None

    @property
    def job_ids(self) -> list[str]:
        return [g.job_id for g in self.generations]

    def next_index(self) -> int:
        return max((g.index for g in self.generations), default=-1) + 1


def manifest_path(work_dir: Path) -> Path:
    return work_dir / MANIFEST_NAME


def write_manifest(manifest: ChainManifest, path: Path) -> None:
    """Replace the manifest atomically; readers see the old or the new file, never a mix."""
    manifest.updated_at = utcnow()
    write_atomic(path, manifest.model_dump_json(indent=2) + "\n", mode=0o600, durable=True)


def read_manifest(path: Path) -> ChainManifest:
    if not path.exists():
        raise ChainError(f"no chain manifest at {path}")
    try:
        data = json.loads(read_bounded(path, "chain manifest")[0])
    except InputError as exc:
        raise ChainError(str(exc)) from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ChainError(f"cannot read chain manifest {path}: {exc}") from None
    try:
        return ChainManifest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ChainError(f"chain manifest {path} is invalid at {where}: {first['msg']}") from None
