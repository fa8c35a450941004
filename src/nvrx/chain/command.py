"""`nvrx submit-chain`: which of submit, dry run, validate, extend and cancel runs, with what."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from nvrx.config import ConfigSource
from nvrx.contract import write_document
from nvrx.terminal import CommandError, stderr, stdout, write_outputs


def submit_chain(
    *,
    shape_flags: Mapping[str, tuple[object, str]],
    depth: int | None,
    work_dir: Path | None,
    dry_run: bool,
    validate: bool,
    extend: bool,
    cancel: bool,
    share_name: bool,
    allow_faults: bool,
    write_script: Path | None,
    as_json: bool,
    extra_args: Sequence[str],
    source: ConfigSource,
) -> int:
    """Submit, extend or cancel a chain; print its summary. `shape_flags` maps each shape
    setting to (flag value or None, flag). Returns the exit code."""
    from nvrx.chain.output import print_report
    from nvrx.chain.submit import cancel as cancel_chain
    from nvrx.chain.submit import extend as extend_chain
    from nvrx.chain.submit import submit_new
    from nvrx.slurm import Slurm

    def error(message: str, code: int) -> NoReturn:
        raise CommandError(message, code)  # under --json, nvrx.cli.main prints it as a document

    if sum((dry_run or validate, extend, cancel)) > 1:
        error("choose one of --dry-run/--validate, --extend and --cancel", 2)
    if write_script is not None and not (dry_run or validate):
        error(
            "--write-script writes the script a --dry-run or --validate would submit; a "
            "submission writes it into the work dir (nvrx_singleton_array.sbatch)",
            2,
        )
    if extend or cancel:
        given = [flag for value, flag in shape_flags.values() if value is not None]
        given += ["--share-name"] * share_name + ["--set"] * bool(source.sets)
        given += ["--allow-faults"] * allow_faults
        given += ["-- ARGS"] * bool(extra_args)
        if cancel and depth is not None:
            given.append("-K")
        if given:
            error(
                f"{'--extend' if extend else '--cancel'} does not take {', '.join(given)}: the "
                "chain keeps the settings it was submitted with (only --work-dir"
                f"{', -K' if extend else ''} and --json apply)",
                2,
            )
    flags = {
        **shape_flags,
        "chain.depth": (depth, "-K"),
        "chain.work_dir": (work_dir, "--work-dir"),
    }
    # A chain is built from chain.* and slurm.*; it never reads inject.* (GNU time's TIME=%e).
    loaded = source.load(flags, submits_from=("chain", "slurm"), reads=("chain", "slurm", "limits"))
    slurm = Slurm(loaded.config.slurm)
    progress = None if as_json else (lambda msg: stdout().print(msg, markup=False))

    def announce(warning: str) -> None:
        # First, and on stderr: neither --json nor a pipe hides it, and it comes before any job.
        stderr().print(warning, markup=False, style="bold red", highlight=False)

    if loaded.config.chain.dry_run and not (extend or cancel or validate):
        dry_run = True  # upstream's NVRX_DRY_RUN=1
    try:
        if cancel:
            report = cancel_chain(loaded.config.chain.work_dir, slurm)
        elif extend:
            report = extend_chain(
                loaded.config.chain.work_dir,
                slurm,
                depth=depth,
                progress=progress,
                announce=announce,
            )
        else:
            report = submit_new(
                loaded,
                slurm,
                extra_args=list(extra_args),
                dry_run=dry_run,
                validate=validate,
                share_name=share_name,
                allow_faults=allow_faults,
                argv=sys.argv,
                progress=progress,
                announce=announce,
            )
    except OSError as exc:
        error(f"{exc.filename or 'file'}: {exc.strerror}", 2)
    if write_script is not None and report.script_text is not None:
        text = report.script_text
        inputs = [p for p in (loaded.config_file, loaded.env_file) if p is not None]
        write_outputs([(write_script, "--write-script", lambda: text)], inputs)
        report.script_copy = str(write_script.absolute())
    code = 0 if report.ok else 1
    if as_json:
        write_document(report.to_json(), code)
    else:
        print_report(report, stdout(), stderr())
    return code
