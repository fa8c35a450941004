"""`nvrx submit-chain`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nvrx.cli.options import ConfigOpt, EnvFileOpt, SetOpt, config_source

app = typer.Typer(rich_markup_mode=None, add_completion=False)  # completion: the root only


@app.command(
    "submit-chain",
    context_settings={"allow_extra_args": True},
    epilog="Arguments after -- go to sbatch unchanged, e.g.: nvrx submit-chain -- -A acct",
)
def submit_chain_cmd(
    ctx: typer.Context,
    train_tasks: Annotated[int | None, typer.Option(help="Array tasks that train.")] = None,
    hot_spares: Annotated[int | None, typer.Option(help="Running spares (standby).")] = None,
    cold_spares: Annotated[int | None, typer.Option(help="Pending spares.")] = None,
    nodes_per_task: Annotated[int | None, typer.Option(help="Nodes per array task.")] = None,
    depth: Annotated[
        int | None, typer.Option("--depth", "-K", help="Generations to enqueue.")
    ] = None,
    time_limit: Annotated[str | None, typer.Option(help="Time limit per generation.")] = None,
    job_name: Annotated[str | None, typer.Option(help="Job name (the singleton key).")] = None,
    work_dir: Annotated[Path | None, typer.Option(help="Shared run directory.")] = None,
    launcher: Annotated[
        str | None, typer.Option(metavar="COMMAND", help="Launcher command (ft_launcher).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print each sbatch command; write nothing.")
    ] = False,
    validate: Annotated[
        bool, typer.Option("--validate", help="Dry run plus sbatch --test-only per generation.")
    ] = False,
    extend_: Annotated[
        bool, typer.Option("--extend", help="Top the work dir's chain up to K generations.")
    ] = False,
    cancel_: Annotated[
        bool, typer.Option("--cancel", help="Cancel exactly the work dir's chain.")
    ] = False,
    share_name: Annotated[
        bool, typer.Option("--share-name", help="Allow a job name that live jobs already use.")
    ] = False,
    allow_faults: Annotated[
        bool,
        typer.Option(
            "--allow-faults",
            help="Submit a chain that injects faults even when they come from a config file "
            "found in the search (./nvrx.yaml), not named.",
        ),
    ] = False,
    write_script: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="With --dry-run or --validate: write the generation script there to read.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    config: ConfigOpt = None,
    env_file: EnvFileOpt = None,
    set_: SetOpt = None,
) -> None:
    """Submit a singleton job-array chain of K generations.

    Array task 0 trains and hosts the rendezvous; the other tasks are hot and cold spares.
    With spares, an in-job drain poller takes a task off a node Slurm drains
    (chain.drain_poll: auto, on or off; the summary says which).
    """
    from nvrx.chain.command import submit_chain

    raise typer.Exit(
        submit_chain(
            shape_flags={
                "chain.train_tasks": (train_tasks, "--train-tasks"),
                "chain.hot_spares": (hot_spares, "--hot-spares"),
                "chain.cold_spares": (cold_spares, "--cold-spares"),
                "chain.nodes_per_task": (nodes_per_task, "--nodes-per-task"),
                "chain.time_limit": (time_limit, "--time-limit"),
                "chain.job_name": (job_name, "--job-name"),
                "chain.launcher": (launcher, "--launcher"),
            },
            depth=depth,
            work_dir=work_dir,
            dry_run=dry_run,
            validate=validate,
            extend=extend_,
            cancel=cancel_,
            share_name=share_name,
            allow_faults=allow_faults,
            write_script=write_script,
            as_json=as_json,
            extra_args=ctx.args,
            source=config_source(config, env_file, set_),
        )
    )
