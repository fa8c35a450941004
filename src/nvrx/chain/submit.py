"""`nvrx submit-chain`: the IO shell around the pure core (shape, script).

New chain: validate everything, render and materialise the script, write the manifest, then
submit K generations one by one, rewriting the manifest after each. The adapter's submit never
creates a duplicate (it looks a lost answer up by its token before retrying); a permanent
failure stops the loop with the manifest still true and says how to finish with `--extend`.
`--extend` and `--cancel` first reconcile the manifest with the queue (a generation whose sbatch
answer was lost is adopted by its chain comment), and every command holds the work dir's lock.

One module: new, extend and cancel are one transaction on one manifest under one lock, and share
its reconciliation with the queue.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shlex
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from nvrx import __version__
from nvrx.chain.manifest import (
    ChainManifest,
    GenerationRecord,
    Submitter,
    manifest_path,
    read_manifest,
    utcnow,
    write_manifest,
)
from nvrx.chain.script import (
    SCRIPT_NAME,
    check_fault_targets,
    drain_poller_state,
    effective_faults,
    fault_warning,
    model_layout,
    render_script,
    script_sha256,
)
from nvrx.chain.shape import ArrayShape, ChainError, check_work_dir
from nvrx.config import LoadedConfig, redact_argv
from nvrx.display import counted
from nvrx.files import InputError, read_bounded, write_atomic
from nvrx.slurm import Slurm, SlurmError, SubmitOptions, TestOnlyAnswer
from nvrx.slurm.options import check_name

Say = Callable[[str], None]

_GEN_RE = re.compile(r"^nvrx-chain=(\w+) gen=(\d+)(?: |$)")


def chain_comment(chain_id: str, index: int) -> str:
    """Each generation's comment; the generation script finds its chain by this prefix."""
    return f"nvrx-chain={chain_id} gen={index}"


@dataclass
class ChainReport:
    """What a submit-chain run did, for the terminal and for --json."""

    action: str  # "submitted", "dry-run", "validated", "extended", "cancelled"
    manifest: ChainManifest
    shape: ArrayShape
    planned: list[list[str]] = field(default_factory=list)
    submitted: list[GenerationRecord] = field(default_factory=list)
    live: list[str] | None = None  # generations queued or running, when the queue was asked
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    finish_command: list[str] | None = None
    script_text: str | None = None  # the rendered script, for a rehearsal's --write-script
    test_only: list[TestOnlyAnswer] = field(default_factory=list)  # --validate's answers
    cancelled: list[str] | None = None  # what --cancel found queued or running and cancelled
    script_copy: str | None = None  # where --write-script put the rendered script (absolute)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def written(self) -> bool:
        return self.action not in ("dry-run", "validated")

    @property
    def fault_warning(self) -> str | None:
        """What faults this chain injects into itself (never for a cancel: it runs nothing)."""
        return None if self.action == "cancelled" else fault_warning(self.manifest.settings)

    def to_json(self) -> dict[str, Any]:
        m = self.manifest
        return {
            "action": self.action,
            "ok": self.ok,
            "fault_warning": self.fault_warning,
            "error": self.error,
            "finish_command": shlex.join(self.finish_command) if self.finish_command else None,
            "chain_id": m.chain_id,
            "job_name": m.job_name,
            "work_dir": m.work_dir,
            "depth": m.depth,
            "manifest": str(manifest_path(Path(m.work_dir))) if self.written else None,
            "script": m.script,
            "script_written": self.written,
            "script_copy": self.script_copy,
            "script_sha256": m.script_sha256,
            "shape": m.shape,
            "created_at": m.created_at.isoformat() if self.written else None,
            "cancelled_at": m.cancelled_at.isoformat() if m.cancelled_at else None,
            "generations": [g.model_dump(mode="json") for g in m.generations],
            "submitted_now": [g.job_id for g in self.submitted],
            "live": self.live,
            "cancelled": self.cancelled,
            "drain_poller": m.shape.get("drain_poller"),
            "test_only": [
                {
                    "generation": index,
                    "start": a.start.isoformat() if a.start else None,
                    "nodes": a.nodes,
                    "partition": a.partition,
                    "processors": a.processors,
                    "answer": a.describe(),
                }
                for index, a in enumerate(self.test_only)
            ],
            "planned_sbatch": [shlex.join(a) for a in self.planned],
            "notes": self.notes,
        }


def shape_summary(shape: ArrayShape) -> dict[str, Any]:
    return {
        **asdict(shape),
        "active": shape.active,
        "total": shape.total,
        "array": shape.array_spec,
        "nnodes": shape.nnodes,
        "world_size": shape.world_size,
    }


def shape_of(loaded: LoadedConfig) -> ArrayShape:
    chain = loaded.config.chain
    shape = ArrayShape(
        train_tasks=chain.train_tasks,
        hot_spares=chain.hot_spares,
        cold_spares=chain.cold_spares,
        nodes_per_task=chain.nodes_per_task,
        gpus_per_node=loaded.config.slurm.gpus_per_node,
    )
    shape.check_segment(chain.segment)
    return shape


def _shape_from(manifest: ChainManifest) -> ArrayShape:
    names = ("train_tasks", "hot_spares", "cold_spares", "nodes_per_task", "gpus_per_node")
    missing = [name for name in names if name not in manifest.shape]
    if missing:
        raise ChainError(f"chain manifest has no {', '.join(missing)} in its shape")
    values = {name: manifest.shape[name] for name in names}
    if not all(type(v) is int for v in values.values()):
        raise ChainError(f"chain manifest has a shape that is not whole numbers: {values}")
    return ArrayShape(**values)


def generation_options(
    loaded: LoadedConfig, shape: ArrayShape, job_name: str, work_dir: Path, extra: Sequence[str]
) -> SubmitOptions:
    """The sbatch options every generation shares (its comment is added per generation)."""
    slurm = loaded.config.slurm
    # Slurm expands %-patterns in --output: a literal % in the work dir must be doubled.
    logs = str(work_dir / "logs" / "slurm").replace("%", "%%")
    return SubmitOptions(
        job_name=job_name,
        array=shape.array_spec,
        nodes=shape.nodes_per_task,
        ntasks_per_node=1,
        gpus_per_node=shape.gpus_per_node,
        time=loaded.config.chain.time_limit,
        partition=slurm.partition,
        account=slurm.account,
        dependency="singleton",
        requeue=False,
        exclusive=True,
        mem="0",
        output=f"{logs}/%x_%A_%a.out",
        # Generations must not depend on where or how --extend is run later (cron, another dir,
        # a site's SBATCH_EXPORT=NONE).
        chdir=str(work_dir),
        export=("ALL",),
        extra_args=tuple(extra),
    )


def _absolute_commands(loaded: LoadedConfig) -> LoadedConfig:
    """Command words that are relative paths become absolute (the jobs run in the work dir);
    bare names (`ft_launcher`) stay for the nodes' PATH."""
    chain = loaded.config.chain

    def fix(words: list[str]) -> list[str]:
        return [os.path.abspath(w) if "/" in w and not w.startswith("/") else w for w in words]

    fixed = chain.model_copy(
        update={
            "launcher": fix(chain.launcher),
            "train_command": fix(chain.train_command[:1]) + chain.train_command[1:],
            "megatron_path": os.path.abspath(chain.megatron_path),
        }
    )
    return replace(loaded, config=loaded.config.model_copy(update={"chain": fixed}))


def _check_programs(loaded: LoadedConfig, work_dir: Path, *, rehearsing: bool) -> list[str]:
    """Bare metal: what the nodes will run must exist (on the shared filesystem) already.
    Returns notes for the operator. A rehearsal only notes a missing program: a dry run on a
    login node without Megatron's files still shows the plan and the script."""
    notes = _programs_missing(loaded, work_dir)
    if notes and not rehearsing:
        raise ChainError(notes[0])
    return [f"note: {n} (a submission refuses this)" for n in notes] + _launcher_notes(loaded)


def _launcher_notes(loaded: LoadedConfig) -> list[str]:
    chain = loaded.config.chain
    launcher = chain.launcher[0]
    if chain.container_image or "/" in launcher or shutil.which(launcher) is not None:
        return []
    return [f"note: launcher {launcher!r} is not on this host's PATH; the nodes need it"]


def _programs_missing(loaded: LoadedConfig, work_dir: Path) -> list[str]:
    """What a submission refuses: each program the nodes would miss (none: nothing)."""
    chain = loaded.config.chain
    notes: list[str] = []
    if chain.container_image:
        if not _mounted(work_dir, chain.container_mounts):
            notes.append(
                f"work dir {work_dir} is not mounted at the same path in the container "
                f"(chain.container_mounts={chain.container_mounts!r}): the no-restart flag, "
                "cycle-info files and checkpoints would be written where no one reads them"
            )
        return notes  # the programs live in the image; nothing to check from the login node
    if chain.train_command:
        first = chain.train_command[0]
        if "/" in first and not Path(first).is_file():
            notes.append(f"training script {first} not found (chain.train_command)")
    else:
        script = Path(chain.megatron_path) / "pretrain_gpt.py"
        if not script.is_file():
            notes.append(
                f"bare metal run but {script} not found: set chain.megatron_path, a container "
                "image, or chain.train_command"
            )
    launcher = chain.launcher[0]
    if "/" in launcher and not (Path(launcher).is_file() and os.access(launcher, os.X_OK)):
        notes.append(f"launcher {launcher} is not an executable file (chain.launcher)")
    return notes


def _mounted(work_dir: Path, mounts: str) -> bool:
    for spec in filter(None, (m.strip() for m in mounts.split(","))):
        parts = spec.split(":")
        src, dst = parts[0], parts[1] if len(parts) > 1 else parts[0]
        src_path = Path(os.path.realpath(src))
        if src == dst and (work_dir == src_path or src_path in work_dir.parents):
            return True
    return False


def _job_name(loaded: LoadedConfig, chain_id: str) -> str:
    name = loaded.config.chain.job_name
    if loaded.origins["chain.job_name"].layer == "default":
        # Two chains sharing a name serialise and could cancel each other's queue: unless the
        # operator chose a name, each chain gets its own.
        name = f"{name}-{chain_id}"
    return check_name(name)


@contextmanager
def work_dir_lock(work_dir: Path) -> Iterator[None]:
    """One submit-chain at a time per work dir: two runs must not both create, extend or cancel
    the chain and each write a manifest that misses the other's jobs."""
    work_dir.mkdir(parents=True, exist_ok=True)
    with open(work_dir / ".chain.lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ChainError(
                f"another nvrx submit-chain is working on {work_dir}; try again when it is done"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def submit_new(
    loaded: LoadedConfig,
    slurm: Slurm,
    *,
    extra_args: Sequence[str] = (),
    dry_run: bool = False,
    validate: bool = False,
    share_name: bool = False,
    allow_faults: bool = False,
    argv: Sequence[str] = (),
    progress: Say | None = None,
    announce: Say | None = None,
) -> ChainReport:
    """Build a new chain in the configured work dir (dry-run and validate write nothing).
    `announce` gets the fault warning before anything is asked of Slurm or submitted."""
    loaded = _absolute_commands(loaded)
    chain = loaded.config.chain
    rehearsing = dry_run or validate
    settings = settings_record(loaded)  # the manifest's, so the warning says what it keeps
    warning = fault_warning(settings)
    if warning is not None and announce is not None:
        announce(warning)
    shape = shape_of(loaded)
    check_fault_targets(chain, shape)
    if warning is not None and not rehearsing and not allow_faults:
        _check_faults_chosen(loaded)
    work_dir = check_work_dir(chain.work_dir)
    notes = _check_programs(loaded, work_dir, rehearsing=rehearsing)
    try:
        # A rehearsal's checks of Slurm are advisory (a note when they fail): one attempt each,
        # so a dry run with the controller down prints its plan in seconds, not minutes.
        shape.check_max_array_size(slurm.max_array_size(retry=not rehearsing))
    except SlurmError as exc:
        if not rehearsing:
            raise
        notes.append(f"note: MaxArraySize not checked ({exc})")

    chain_id = secrets.token_hex(5)
    job_name = _job_name(loaded, chain_id)
    script_path = work_dir / SCRIPT_NAME
    text = render_script(
        chain,
        shape,
        chain_id=chain_id,
        work_dir=str(work_dir),
        job_name=job_name,
        nvrx_version=__version__,
    )
    options = generation_options(loaded, shape, job_name, work_dir, extra_args)
    options.to_argv()  # every sbatch value is checked before anything is written
    manifest = _new_manifest(
        loaded, settings, chain_id, job_name, work_dir, script_path, text, shape, options, argv
    )

    if rehearsing:
        report = ChainReport("validated" if validate else "dry-run", manifest, shape, notes=notes)
        report.script_text = text
        _check_name_free(slurm, job_name, share_name, notes, strict=False)
        for index in range(chain.depth):
            opts = replace(options, comment=chain_comment(chain_id, index))
            report.planned.append(slurm.sbatch_argv(opts, script=script_path))
        if validate:
            with tempfile.TemporaryDirectory(prefix="nvrx-chain-") as tmp:
                probe = Path(tmp) / SCRIPT_NAME  # sbatch --test-only reads the script
                probe.write_text(text, encoding="utf-8")
                for index in range(chain.depth):
                    opts = replace(options, comment=chain_comment(chain_id, index))
                    report.test_only.append(slurm.test_submit(opts, script=probe))
                    if progress is not None:  # one Slurm call each: say so as they come
                        progress(
                            f"Checked generation {index} ({index + 1} of {chain.depth}) with "
                            "sbatch --test-only"
                        )
        return report

    _check_name_free(slurm, job_name, share_name, notes, strict=True)
    with work_dir_lock(work_dir):
        path = manifest_path(work_dir)
        if path.exists():
            _retire_ended_chain(read_manifest(path), slurm, notes)
        (work_dir / "logs" / "slurm").mkdir(parents=True, exist_ok=True)
        _write_script(script_path, text)
        write_manifest(manifest, path)
        report = ChainReport("submitted", manifest, shape, notes=notes)
        _submit_generations(slurm, manifest, chain.depth, report, progress)
    return report


# The settings that turn a fault on (the rest only say how it behaves).
FAULT_SWITCHES = ("chain.no_restart_demo", "chain.fault_inject", "chain.inject_gpu_failure")


def _check_faults_chosen(loaded: LoadedConfig) -> None:
    """A real submission injects faults only when the user chose them: every switch that is on
    comes from a layer they named (--config, NVRX_CONFIG, an env file, the environment, --set, a
    flag), or --allow-faults says so. A config file found by the search is no such choice: `cd
    examples/rehearsal` would otherwise submit its demo."""
    found = [
        key
        for key in FAULT_SWITCHES
        if loaded.value(key) and loaded.origins[key].layer == "file" and loaded.config_found
    ]
    if found:
        raise ChainError(
            f"{found[0]} turns fault injection on from {loaded.config_file}, a config file found "
            "in the search, not named: name it with --config, or pass --allow-faults to submit "
            "a chain that faults itself"
        )


def settings_record(loaded: LoadedConfig) -> dict[str, dict[str, Any]]:
    """Every effective setting with its source, as the manifest keeps them."""
    return {key: {"value": v, "source": str(o)} for key, v, o in loaded.rows()}


def _check_name_free(
    slurm: Slurm, job_name: str, share_name: bool, notes: list[str], *, strict: bool
) -> None:
    try:
        live = slurm.queue(name=job_name, user=slurm.current_user(), retry=strict)
    except SlurmError as exc:
        if strict:
            raise
        notes.append(f"note: could not check for live jobs named {job_name} ({exc})")
        return
    if live and not share_name:
        ids = ", ".join(sorted({r.array_job_id for r in live}))
        raise ChainError(
            f"jobs named {job_name!r} are already queued or running ({ids}): two chains with "
            "one name run one after the other; choose another chain.job_name or pass --share-name"
        )


def _retire_ended_chain(old: ChainManifest, slurm: Slurm, notes: list[str]) -> None:
    """A work dir holds one chain at a time. One with live generations blocks a new chain; an
    ended one keeps its record under its own name, never overwritten."""
    reconcile(old, slurm, notes)
    live = _live_generations(old, slurm)
    if live:
        raise ChainError(
            f"work dir {old.work_dir} holds chain {old.chain_id} with "
            f"{counted(len(live), 'generation')} still queued or running: use --extend or --cancel "
            "on it, or choose another work dir"
        )
    work_dir = Path(old.work_dir)
    kept = work_dir / f"chain.{old.chain_id}.json"
    os.replace(manifest_path(work_dir), kept)
    notes.append(f"previous chain {old.chain_id} had ended; its manifest is kept as {kept}")


def _write_script(path: Path, text: str) -> None:
    write_atomic(path, text, mode=0o755)


def _new_manifest(
    loaded: LoadedConfig,
    settings: dict[str, dict[str, Any]],
    chain_id: str,
    job_name: str,
    work_dir: Path,
    script_path: Path,
    text: str,
    shape: ArrayShape,
    options: SubmitOptions,
    argv: Sequence[str],
) -> ChainManifest:
    chain = loaded.config.chain
    submit_options = asdict(options)
    submit_options.pop("comment")
    return ChainManifest(
        chain_id=chain_id,
        job_name=job_name,
        work_dir=str(work_dir),
        script=str(script_path),
        script_sha256=script_sha256(text),
        depth=chain.depth,
        shape={
            **shape_summary(shape),
            "drain_poller": drain_poller_state(chain, shape),
            "effective_faults": asdict(effective_faults(chain)),
            "model": asdict(model_layout(chain, shape)),
        },
        submit_options=submit_options,
        settings=settings,
        submitter=Submitter(
            user=Slurm.current_user(),
            host=socket.gethostname(),
            nvrx_version=__version__,
            argv=redact_argv(argv or sys.argv),
            cwd=os.getcwd(),
        ),
    )


def _options_for(manifest: ChainManifest, index: int) -> SubmitOptions:
    values = dict(manifest.submit_options)
    for key in ("export", "extra_args"):
        if values.get(key) is not None:
            values[key] = tuple(values[key])
    try:
        return SubmitOptions(**values, comment=chain_comment(manifest.chain_id, index))
    except TypeError as exc:  # a key SubmitOptions does not have
        raise ChainError(f"chain manifest has unusable submit_options: {exc}") from None


def _submit_generations(
    slurm: Slurm,
    manifest: ChainManifest,
    count: int,
    report: ChainReport,
    progress: Say | None = None,
) -> None:
    path = manifest_path(Path(manifest.work_dir))
    for _ in range(count):
        index = manifest.next_index()
        try:
            sub = slurm.submit(_options_for(manifest, index), script=Path(manifest.script))
        except SlurmError as exc:
            try:  # a job the failed call did create is adopted now if the queue can tell
                reconcile(manifest, slurm, report.notes)
                write_manifest(manifest, path)
            except (SlurmError, OSError):
                pass
            report.error = f"generation {index} was not submitted: {exc}"
            report.finish_command = [
                "nvrx",
                "submit-chain",
                "--extend",
                "--work-dir",
                manifest.work_dir,
            ]
            return
        record = GenerationRecord(
            index=index,
            job_id=sub.job_id,
            comment=sub.comment or chain_comment(manifest.chain_id, index),
            submitted_at=utcnow(),
        )
        manifest.generations.append(record)
        try:
            write_manifest(manifest, path)
        except OSError as exc:
            report.error = (
                f"generation {index} is job {sub.job_id}, but the manifest could not be "
                f"written ({exc.strerror}); --extend adopts it once the manifest is writable"
            )
            return
        report.submitted.append(record)
        if progress is not None:
            progress(f"Submitted generation {index}: job {sub.job_id}")


def reconcile(manifest: ChainManifest, slurm: Slurm, notes: list[str]) -> None:
    """Adopt generations of this chain that the queue knows and the manifest does not (an
    sbatch answer lost for good, or nvrx stopped between sbatch and the manifest write)."""
    known = set(manifest.job_ids)
    rows = slurm.queue(user=manifest.submitter.user, include_finished=True)
    for row in rows:
        m = _GEN_RE.match(row.comment)
        if m is None or m.group(1) != manifest.chain_id or row.array_job_id in known:
            continue
        known.add(row.array_job_id)
        manifest.generations.append(
            GenerationRecord(
                index=int(m.group(2)),
                job_id=row.array_job_id,
                comment=row.comment,
                submitted_at=utcnow(),
                adopted=True,
            )
        )
        notes.append(f"adopted generation {m.group(2)} (job {row.array_job_id}) found in the queue")
    manifest.generations.sort(key=lambda g: (g.index, int(g.job_id)))


def _live_generations(manifest: ChainManifest, slurm: Slurm) -> list[str]:
    if not manifest.job_ids:
        return []
    rows = slurm.queue(manifest.job_ids)
    return sorted({r.array_job_id for r in rows if r.state.is_live}, key=int)


def _load_for_update(work_dir: Path) -> ChainManifest:
    work_dir = Path(os.path.realpath(work_dir))
    manifest = read_manifest(manifest_path(work_dir))
    if Path(manifest.work_dir) != work_dir:
        # A copied work dir would submit the original's script and share its chain id, so
        # either chain's no-restart trap could cancel the other's generations.
        raise ChainError(
            f"the manifest in {work_dir} belongs to chain {manifest.chain_id} in "
            f"{manifest.work_dir} (a copy?); run --extend/--cancel on the original"
        )
    return manifest


def extend(
    work_dir: Path,
    slurm: Slurm,
    *,
    depth: int | None = None,
    progress: Say | None = None,
    announce: Say | None = None,
) -> ChainReport:
    """Top the chain up to `depth` (default: the manifest's) queued or running generations.
    `announce` gets the chain's fault warning before anything is submitted."""
    with work_dir_lock(Path(os.path.realpath(work_dir))):
        manifest = _load_for_update(work_dir)
        warning = fault_warning(manifest.settings)
        if warning is not None and announce is not None:
            announce(warning)
        script = Path(manifest.script)
        try:
            current = script_sha256(read_bounded(script, "generation script")[0].decode("utf-8"))
        except InputError as exc:
            raise ChainError(str(exc)) from None
        except UnicodeDecodeError:
            raise ChainError(f"generation script {script} is not UTF-8 text") from None
        if current != manifest.script_sha256:
            raise ChainError(
                f"generation script {script} changed since the chain was submitted "
                "(sha256 differs from the manifest); refusing to submit it"
            )
        if depth is not None:
            if depth < 1:
                raise ChainError(f"chain depth must be at least 1, got {depth}")
            manifest.depth = depth
        report = ChainReport("extended", manifest, _shape_from(manifest))
        reconcile(manifest, slurm, report.notes)
        report.live = _live_generations(manifest, slurm)
        need = manifest.depth - len(report.live)
        report.notes.append(
            f"{len(report.live)} of {counted(manifest.depth, 'generation')} queued or running; "
            f"submitting {max(need, 0)}"
        )
        if need > 0:
            manifest.cancelled_at = None
            _submit_generations(slurm, manifest, need, report, progress)
        write_manifest(manifest, manifest_path(Path(manifest.work_dir)))
    return report


def cancel(work_dir: Path, slurm: Slurm) -> ChainReport:
    """Cancel exactly this chain's generations (never by name: another chain may share it)."""
    with work_dir_lock(Path(os.path.realpath(work_dir))):
        manifest = _load_for_update(work_dir)
        report = ChainReport("cancelled", manifest, _shape_from(manifest))
        reconcile(manifest, slurm, report.notes)
        # What was queued or running is what this cancel ends; asking the queue again at once
        # would still show them, on their way out.
        report.cancelled = _live_generations(manifest, slurm)
        if manifest.job_ids:
            argv = slurm.cancel(manifest.job_ids)
            report.notes.append("ran: " + shlex.join(argv))
        manifest.cancelled_at = utcnow()
        write_manifest(manifest, manifest_path(Path(manifest.work_dir)))
    return report
