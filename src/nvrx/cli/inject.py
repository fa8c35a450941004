"""`nvrx inject-loop`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nvrx.cli.options import (
    ConfigOpt,
    EnvFileOpt,
    ForceOpt,
    SetOpt,
    complete_pool,
    complete_workload,
    config_source,
)

app = typer.Typer(rich_markup_mode=None, add_completion=False)  # completion: the root only


@app.command(
    "inject-loop",
    context_settings={"allow_extra_args": True},
    epilog="Arguments after -- go to every sbatch unchanged.",
)
def inject_loop_cmd(
    ctx: typer.Context,
    pool: Annotated[
        str | None,
        typer.Option(
            help="Pool: a name (default, n3_super, quick), a file or entries.",
            autocompletion=complete_pool,
        ),
    ] = None,
    workload: Annotated[
        str | None,
        typer.Option(
            metavar="NAME", help="Workloads registry entry.", autocompletion=complete_workload
        ),
    ] = None,
    sbatch_script: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="The workload's sbatch script (overrides the registry)."),
    ] = None,
    batch_size: Annotated[
        int | None, typer.Option(help="Jobs of the session in Slurm at once.")
    ] = None,
    window: Annotated[
        str | None,
        typer.Option(
            metavar="node-aware|strict|barrier",
            help="Which experiment goes next: node-aware (a later one that fits the idle nodes "
            "when the next cannot start), strict (pool order) or barrier (upstream's batches).",
            autocompletion=lambda: ["node-aware", "strict", "barrier"],
        ),
    ] = None,
    base_dir: Annotated[
        Path | None, typer.Option(help="Sessions go to <this>/fault_injection/<timestamp>/.")
    ] = None,
    time_limit: Annotated[str | None, typer.Option(help="Per-job time limit.")] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            metavar="SESSION", help="Finish this session (never resubmits what it knows)."
        ),
    ] = None,
    reanalyze: Annotated[
        Path | None,
        typer.Option(
            metavar="SESSION",
            help="Analyse and score this session's ended experiments again; report.",
        ),
    ] = None,
    rerun_failing: Annotated[
        Path | None,
        typer.Option(
            metavar="SESSION",
            help="A new session of the experiments that failed a dimension in this one.",
        ),
    ] = None,
    next_: Annotated[
        Path | None,
        typer.Option(
            "--next",
            metavar="SESSION",
            help="Print the pool of the sweep's next iteration after this session; run nothing.",
        ),
    ] = None,
    iters: Annotated[
        str | None,
        typer.Option(metavar="N,...", help="Run each pool entry at these iterations, e.g. 2,10."),
    ] = None,
    no_progress: Annotated[
        bool,
        typer.Option("--no-progress", help="Plain lines even on a terminal (no live view)."),
    ] = False,
    no_analysis: Annotated[
        bool, typer.Option("--no-analysis", help="Run the jobs only: no analysis, no scores.")
    ] = False,
    allow_duplicates: Annotated[
        bool, typer.Option("--allow-duplicates", help="Run duplicate entries, each in its dir.")
    ] = False,
    cancel_on_interrupt: Annotated[
        bool, typer.Option("--cancel-on-interrupt", help="Ctrl-C also cancels in-flight jobs.")
    ] = False,
    list_pool: Annotated[
        bool, typer.Option("--list-pool", help="Print the resolved pool and exit.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print every experiment's sbatch; write nothing.")
    ] = False,
    force: ForceOpt = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    config: ConfigOpt = None,
    env_file: EnvFileOpt = None,
    set_: SetOpt = None,
) -> None:
    """Run a prioritised pool of fault-injection experiments, BATCH_SIZE at a time.

    Every submission and every ending is journalled, so an interrupted campaign resumes.
    """
    from nvrx.inject.command import InjectRequest, inject_loop

    request = InjectRequest(
        pool=pool,
        workload=workload,
        sbatch_script=sbatch_script,
        batch_size=batch_size,
        window_mode=window,
        base_dir=base_dir,
        time_limit=time_limit,
        resume=resume,
        reanalyze=reanalyze,
        rerun_failing=rerun_failing,
        next_=next_,
        iters=iters,
        no_analysis=no_analysis,
        no_progress=no_progress,
        allow_duplicates=allow_duplicates,
        cancel_on_interrupt=cancel_on_interrupt,
        list_pool=list_pool,
        dry_run=dry_run,
        force=force,
        as_json=as_json,
        extra_args=tuple(ctx.args),
    )
    flags = {
        "inject.pool": (pool, "--pool"),
        "inject.workload": (workload, "--workload"),
        "inject.sbatch_script": (sbatch_script, "--sbatch-script"),
        "inject.batch_size": (batch_size, "--batch-size"),
        "inject.window": (window, "--window"),
        "inject.base_experiments_dir": (base_dir, "--base-dir"),
        "inject.time_limit": (time_limit, "--time-limit"),
        "inject.iters": (iters, "--iters"),
    }
    raise typer.Exit(inject_loop(request, flags, config_source(config, env_file, set_)))
