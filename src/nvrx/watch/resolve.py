"""Which chain a watch follows, and where its files are (docs/watch.md: Resolution).

From a job id: name, owner, batch script and working directory from `scontrol show job`
(falling back to sacct once the controller forgot the job); then the chain manifest in the
working directory or next to the script (an nvrx chain), else the script's own
`--ft-cycle-info-dir` / `--ft-checkpoint-iteration-file`. A work dir alone is enough too. Flags
override whatever was resolved. What a job id resolved to is remembered in the state dir, so a
cron watch keeps working after the controller purges that job.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from nvrx.chain.manifest import ChainManifest, manifest_path, read_manifest
from nvrx.chain.shape import ChainError, drain_poll_on
from nvrx.config import WatchSettings
from nvrx.files import InputError, decode_text, read_bounded, write_atomic
from nvrx.slurm import JobForgotten, Slurm, SlurmError, SlurmValueError
from nvrx.slurm.ids import check_job_id
from nvrx.watch.model import ChainRef
from nvrx.watch.script import flags_from_script

CHECKPOINT_NAME = "latest_checkpointed_iteration.txt"
_SCRIPT_CAP = 1024 * 1024


class WatchError(Exception):
    """The watch cannot start as asked; one line for the user."""

    exit_code = 2  # bad input


class WatchBlind(WatchError):
    """Slurm could not be asked while resolving: the pass is blind, not misconfigured."""

    exit_code = 3  # the watcher cannot see Slurm: never healthy


@dataclass(frozen=True)
class Target:
    """What a pass observes: the chain, the cycle-info globs and the checkpoint file.

    `checkpoint_file` may contain `{job}`, replaced by the current generation's id (the
    no-restart demo's progress file lives in each generation's control dir).
    """

    chain: ChainRef
    cycle_globs: tuple[str, ...]
    checkpoint_file: str | None
    state_key: str

    def checkpoint_path(self, job: str | None) -> str | None:
        if self.checkpoint_file is None:
            return None
        if "{job}" in self.checkpoint_file:
            return None if job is None else self.checkpoint_file.replace("{job}", job)
        return self.checkpoint_file


# What a watcher keeps in a chain's state directory: outputs may not replace these either.
STATE_FILES = ("state.json", "cycles-cache.json", "watch.log")


def refuse_input(
    output: Path, target: Target, state_dir: Path, what: str, cycles: tuple[str, ...] = ()
) -> None:
    """An output of a pass (`--html`, `--junit`, the Prometheus textfile) never replaces what
    the pass reads: a cycle file (any path the cycle globs match, whether or not it exists yet,
    and a hard link to one of `cycles`), the checkpoint file, the chain's manifest, or the
    watcher's own state. InputError (bad input, exit 2), naming the input."""
    from fnmatch import fnmatchcase

    from nvrx.files import refuse_overwriting

    absolute, real = os.path.abspath(output), os.path.realpath(output)
    for pattern in target.cycle_globs:
        if fnmatchcase(absolute, pattern) or fnmatchcase(real, os.path.realpath(pattern)):
            raise InputError(
                what, output, f"refusing to write over an input (cycle files {pattern})"
            )
    inputs = [state_dir / name for name in STATE_FILES]
    if target.chain.work_dir:
        inputs.append(manifest_path(Path(target.chain.work_dir)))
    if target.checkpoint_file and "{job}" not in target.checkpoint_file:
        inputs.append(Path(target.checkpoint_file))
    with contextlib.suppress(OSError):
        if os.stat(output).st_nlink > 1:  # a hard link to a cycle file is that file too
            inputs += [Path(c) for c in cycles]
    refuse_overwriting(output, inputs, what)


@dataclass(frozen=True)
class Overrides:
    """The flags that override resolution."""

    job_id: str | None = None
    work_dir: Path | None = None
    job_name: str | None = None
    user: str | None = None
    cycle_info_glob: str | None = None
    checkpoint_file: str | None = None
    platform: str = "slurm"
    max_restarts: int | None = None
    no_restart_exit_code: int = 93


def resolve(
    over: Overrides, slurm: Slurm | None, settings: WatchSettings, *, dry_run: bool = False
) -> Target:
    """Resolve the watched chain; raises WatchError with a one-line reason (WatchBlind when
    Slurm could not be asked). `dry_run` writes nothing (not even the resolution memo)."""
    if over.platform == "none" and over.work_dir is None and over.cycle_info_glob is None:
        raise WatchError("--platform none needs --work-dir or --cycle-info-glob")
    if over.job_id is None and over.work_dir is None and over.cycle_info_glob is None:
        raise WatchError(
            "name the chain to watch: a JOB_ID, --work-dir DIR or --cycle-info-glob GLOB; "
            "or several chains: --fleet PATH... or --mine"
        )

    target: Target | None = None
    name = user = job_id = None
    if over.job_id is not None and slurm is not None and over.platform == "slurm":
        try:
            job_id = check_job_id(over.job_id)
        except SlurmValueError as exc:
            raise WatchError(str(exc)) from None
    if over.work_dir is not None:
        # Not there: a typo (bad input); there but unreadable or empty: blind (observe).
        if (missing := not_a_directory(over.work_dir)) is not None:
            raise WatchError(f"--work-dir {over.work_dir}: {missing}")
        target = _from_work_dir(Path(os.path.realpath(over.work_dir)))
        if job_id is not None and slurm is not None and not (target.chain.name or over.job_name):
            name, user, _, _ = _from_slurm(job_id, slurm)  # no manifest names it: the job does
    elif job_id is not None and slurm is not None:
        remembered = _recall(settings, job_id)
        try:
            name, user, script, work = _from_slurm(job_id, slurm)
        except WatchBlind:
            if remembered is None:
                raise
            target = remembered  # Slurm is down: watch what this job id resolved to before
        else:
            target = _from_job(script, work, name, user)
            if target is None and remembered is not None and remembered.chain.name == name:
                target = remembered  # the controller purged the job; accounting knew its name
            if target is None:
                raise WatchError(
                    f"job {job_id} ({name}) has no chain manifest and no readable batch script "
                    "with NVRx flags; give --work-dir or --cycle-info-glob"
                )
            if not dry_run:
                _remember(settings, job_id, target)
    if target is None:
        target = Target(ChainRef(None, None, None, resolved_from="flags"), (), None, "")

    chain = target.chain
    if chain.resolved_from != "manifest":
        chain = replace(chain, no_restart_exit_code=over.no_restart_exit_code)
    chain = replace(
        chain,
        name=over.job_name or chain.name or name,
        # Never every user's jobs by default: an --act must not touch someone else's queue.
        user=over.user or settings.user or chain.user or user or Slurm.current_user(),
        max_restarts=over.max_restarts
        if over.max_restarts is not None
        else settings.max_restarts
        if settings.max_restarts is not None
        else chain.max_restarts,
    )
    if not chain.expect_running and chain.resolved_from != "manifest":
        chain = replace(chain, expect_running=_expected(settings, chain.name))
    globs = (over.cycle_info_glob,) if over.cycle_info_glob else target.cycle_globs
    checkpoint = over.checkpoint_file or target.checkpoint_file
    if over.platform == "slurm" and chain.name is None:
        raise WatchError(
            "the chain's job name is unknown: give a JOB_ID, --job-name or a work dir with a "
            "chain manifest"
        )
    return Target(chain, globs, checkpoint, _state_key(chain, globs))


def not_a_directory(path: Path) -> str | None:
    """Why `path` (a --work-dir or a --fleet PATH) names no directory, or None when it does."""
    if os.path.isdir(path):
        return None
    return "not a directory" if os.path.lexists(path) else "no such directory"


def work_dir_globs(work_dir: Path) -> tuple[str, ...]:
    """Where an nvrx work dir keeps its cycle-info files: one directory per generation."""
    return (str(work_dir / "nvrx" / "*" / "cycle_infos" / "cycle_info.*"),)


def _expected(settings: WatchSettings, name: str | None) -> bool:
    """Upstream's expect-chain marker: a file holding the job name of a chain that should be
    alive (nvrx chains use their manifest instead)."""
    try:
        text = decode_text(read_bounded(settings.expect_file, "expect file", limit=1 << 20)[0])
    except InputError:
        return False
    return name is not None and name in text.split()


def _from_work_dir(work_dir: Path) -> Target:
    path = manifest_path(work_dir)
    if path.exists():
        try:
            return from_manifest(read_manifest(path))
        except ChainError as exc:
            raise WatchError(str(exc)) from None
    chain = ChainRef(None, None, str(work_dir), resolved_from="work dir")
    return Target(
        chain,
        work_dir_globs(work_dir),
        str(work_dir / "checkpoints" / CHECKPOINT_NAME),
        "",
    )


def from_manifest(m: ChainManifest) -> Target:
    """An nvrx chain: everything is in its manifest."""

    def setting(key: str) -> object:
        entry = m.settings.get(key)
        return entry.get("value") if isinstance(entry, dict) else None

    demo = bool(setting("chain.no_restart_demo"))
    samples, batch = (
        setting("chain.train_samples"),
        (m.shape.get("model") or {}).get("global_batch_size"),
    )
    train_iterations = None
    megatron = setting("chain.train_command") == []  # its own loop, with no batch ramp-up
    if megatron and isinstance(samples, int) and isinstance(batch, int) and batch > 0:
        train_iterations = samples // batch
    max_restarts = setting("chain.max_restarts")
    poller = _drain_poller(m.shape, setting("chain.drain_poll"))
    code = setting("chain.no_restart_exit_code")
    save_every = setting("chain.save_interval")
    work = Path(m.work_dir)
    chain = ChainRef(
        name=m.job_name,
        user=m.submitter.user,
        work_dir=m.work_dir,
        chain_id=m.chain_id,
        manifest_job_ids=tuple(m.job_ids),
        # An adopted generation's time is not its submit time: it gets no exemption.
        manifest_submitted=tuple(
            (g.job_id, g.submitted_at) for g in m.generations if not g.adopted
        ),
        expect_running=m.cancelled_at is None,
        max_restarts=max_restarts if isinstance(max_restarts, int) else None,
        no_restart_exit_code=code if isinstance(code, int) else 93,
        # The demo's static progress file never advances: there is no save interval to learn.
        save_interval_iterations=save_every if isinstance(save_every, int) and not demo else None,
        train_iterations=train_iterations,
        resolved_from="manifest",
        drain_poller=poller,
    )
    checkpoint = (
        str(work / "nvrx" / "{job}" / "control" / "static_iter.txt")
        if demo
        else str(work / "checkpoints" / CHECKPOINT_NAME)
    )
    return Target(chain, work_dir_globs(work), checkpoint, "")


def _drain_poller(shape: dict[str, Any], setting: object) -> str:
    """The drain poller as the manifest's shape says, else as its `chain.drain_poll` and spares
    decided it; "unknown" for a manifest from before the poller."""
    said = shape.get("drain_poller")  # "on (auto: 2 spare tasks ...)": its first word
    word = said.split(" ", 1)[0] if isinstance(said, str) else None
    if word in ("on", "off"):
        return word
    spares = [shape.get("hot_spares"), shape.get("cold_spares")]
    counts = [n for n in spares if isinstance(n, int)]
    if setting not in ("auto", "on", "off") or len(counts) != len(spares):
        return "unknown"
    return "on" if drain_poll_on(str(setting), sum(counts)) else "off"


def _from_slurm(job_id: str, slurm: Slurm) -> tuple[str, str, str | None, str | None]:
    """(name, user, batch script, working dir) of a job; sacct when the controller forgot it.
    A task of an array that never started has no record of its own: its array's record serves
    (every task shares name, owner and script)."""
    records = []
    for candidate in dict.fromkeys([job_id, job_id.split("_", 1)[0]]):
        try:
            records = slurm.show_job(candidate)
        except JobForgotten:
            continue
        except SlurmError as exc:
            raise WatchBlind(f"cannot resolve job {job_id}: {exc}") from None
        break
    if records:
        info = records[0]
        return info.name, info.user, info.command or None, info.work_dir or None
    try:
        rows = slurm.accounting([job_id])
    except SlurmError as exc:
        raise WatchBlind(f"cannot resolve job {job_id}: {exc}") from None
    if not rows:
        raise WatchError(f"job {job_id} is unknown to the controller and to accounting")
    return rows[0].name, rows[0].user, None, None


def _from_job(script: str | None, work: str | None, name: str, user: str) -> Target | None:
    """An nvrx manifest in the job's working dir or next to its script, else the script's
    last NVRx flags (watch/script.py)."""
    for where in (work, os.path.dirname(script) if script else None):
        if not where:
            continue
        manifest = Path(where) / "chain.json"
        if manifest.exists():
            try:
                target = from_manifest(read_manifest(manifest))
            except ChainError:
                continue
            if target.chain.name == name:
                return target
    if script is None:
        return None

    def read(path: str) -> str | None:
        try:
            return decode_text(read_bounded(path, "batch script", limit=_SCRIPT_CAP)[0])
        except InputError:
            return None

    text = read(script)
    if text is None:
        return None
    found = flags_from_script(text, script=script, cwd=work or "", read=read)
    cycles = found.get("cycles")
    if cycles is None:
        return None
    base = Path(work) if work else Path(script).parent
    cycles_dir = base / cycles  # an absolute path stays as it is
    checkpoint = found.get("checkpoint")
    if checkpoint is not None:
        checkpoint = str(base / checkpoint)
        if "*" in checkpoint:
            checkpoint = None  # a per-job path cannot be watched across generations
    chain = ChainRef(name, user, work, resolved_from="batch script")
    return Target(chain, (str(cycles_dir / "cycle_info.*"),), checkpoint, "")


def _state_key(chain: ChainRef, globs: tuple[str, ...]) -> str:
    """One state file per watched chain, so several watches per user never share one."""
    if chain.chain_id:
        return f"chain-{chain.chain_id}"
    basis = "\0".join([chain.name or "", chain.user or "", *globs])
    digest = hashlib.sha256(basis.encode()).hexdigest()[:12]
    label = re.sub(r"[^A-Za-z0-9._-]", "_", chain.name or "cycles")[:60]
    return f"{label}-{digest}"


def _memo_path(settings: WatchSettings, job_id: str) -> Path:
    return Path(settings.state_dir) / "resolved" / f"{job_id}.json"


def _remember(settings: WatchSettings, job_id: str, target: Target) -> None:
    """Best effort: a later pass (after the controller purged the job) starts from here."""
    path = _memo_path(settings, job_id)
    chain = asdict(target.chain)
    chain["manifest_submitted"] = [[j, t.isoformat()] for j, t in target.chain.manifest_submitted]
    data = {
        "chain": chain,
        "cycle_globs": list(target.cycle_globs),
        "checkpoint_file": target.checkpoint_file,
    }
    with contextlib.suppress(OSError):
        write_atomic(path, json.dumps(data))


def _recall(settings: WatchSettings, job_id: str) -> Target | None:
    try:
        data: Any = json.loads(read_bounded(_memo_path(settings, job_id), "memo", limit=1 << 20)[0])
        chain = data["chain"]
        chain["manifest_job_ids"] = tuple(chain.get("manifest_job_ids") or ())
        chain["manifest_submitted"] = tuple(
            (str(j), datetime.fromisoformat(t)) for j, t in chain.get("manifest_submitted") or ()
        )
        ref = ChainRef(**chain)
        target = Target(ref, tuple(data["cycle_globs"]), data["checkpoint_file"], "")
    except (InputError, ValueError, KeyError, TypeError, RecursionError):
        return None
    if ref.resolved_from == "manifest" and ref.work_dir is not None:
        with contextlib.suppress(WatchError):
            return _from_work_dir(Path(ref.work_dir))  # the manifest may have changed
    return target
