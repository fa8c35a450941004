"""`nvrx watch`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nvrx.cli.options import ConfigOpt, EnvFileOpt, JunitOpt, SetOpt, config_source, html_option

app = typer.Typer(rich_markup_mode=None, add_completion=False)  # completion: the root only


@app.command("watch")
def watch_cmd(
    targets: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="JOB_ID|PATH",
            help="A job of the chain (any generation or task); with --fleet, chain work dirs "
            "or directories to search for them.",
            show_default=False,
        ),
    ] = None,
    fleet: Annotated[
        bool, typer.Option("--fleet", help="Watch every chain under the PATHs in one pass.")
    ] = False,
    mine: Annotated[
        bool, typer.Option("--mine", help="Watch every chain of yours that Slurm knows.")
    ] = False,
    work_dir: Annotated[Path | None, typer.Option(help="The chain's work dir.")] = None,
    job_name: Annotated[str | None, typer.Option(help="Watch jobs of this name.")] = None,
    user: Annotated[str | None, typer.Option(help="Owner of the jobs (default: resolved).")] = None,
    cycle_info_glob: Annotated[
        str | None, typer.Option(help="Glob of cycle-info files (overrides resolution).")
    ] = None,
    checkpoint_iteration_file: Annotated[
        str | None, typer.Option(help="The checkpoint-iteration file (overrides resolution).")
    ] = None,
    platform: Annotated[
        str | None,
        typer.Option(metavar="slurm|none", help="slurm, or none for cycle files only."),
    ] = None,
    max_restarts: Annotated[
        int | None, typer.Option(help="Launcher --max-restarts (for restart_budget_low).")
    ] = None,
    state_dir: Annotated[Path | None, typer.Option(help="State, cache and log directory.")] = None,
    act: Annotated[
        bool,
        typer.Option(
            "--act",
            help="Take the actions findings offer: cancel an orphaned generation's pending "
            "tasks; with watch.drain_suspects, drain the one node a suspect_node finding names "
            "(the chain's in-job drain poller then moves its task off it).",
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="No action, alert, heartbeat or state write.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per pass.")] = False,
    goodput: Annotated[
        bool,
        typer.Option(
            "--goodput", help="Where the chain's wall time went, by category (reads only)."
        ),
    ] = False,
    html: Annotated[
        str | None, html_option("timeline.html in the chain's state dir; after every pass")
    ] = None,
    junit: JunitOpt = None,
    interval: Annotated[int | None, typer.Option(help="Loop: a pass every N seconds.")] = None,
    webhook_url: Annotated[str | None, typer.Option(help="POST findings as JSON here.")] = None,
    pd_routing_key: Annotated[
        str | None,
        typer.Option(help="PagerDuty Events v2 routing key (visible in ps: prefer the file)."),
    ] = None,
    pd_routing_key_file: Annotated[
        Path | None, typer.Option(help="File holding the PagerDuty routing key.")
    ] = None,
    heartbeat_url: Annotated[
        str | None, typer.Option(help="GET after every pass that is not degraded.")
    ] = None,
    prom_file: Annotated[Path | None, typer.Option(help="Prometheus textfile to write.")] = None,
    disable: Annotated[
        str | None,
        typer.Option(metavar="NAME,...", help="Detectors to switch off, comma-separated."),
    ] = None,
    list_detectors: Annotated[
        bool, typer.Option("--list-detectors", help="List the detectors and exit.")
    ] = False,
    exit_codes: Annotated[
        str | None,
        typer.Option(
            metavar="nvrx|upstream",
            help="A pass's exit codes: nvrx (1 critical, 3 blind) or upstream's watcher's "
            "(1 blind, 2 critical); bad input is 2 in both (watch.exit_codes).",
        ),
    ] = None,
    config: ConfigOpt = None,
    env_file: EnvFileOpt = None,
    set_: SetOpt = None,
) -> None:
    """Watch a chain from outside the job and report restart anomalies.

    Reconciles the chain with Slurm and reads its cycle-info files.
    Exit 0 clean, 1 a critical finding, 2 bad input, 3 blind (cannot see Slurm or the files);
    with --exit-codes upstream, upstream's watcher's: 1 blind, 2 critical (or bad input).
    """
    from nvrx.watch.command import WatchRequest, watch

    request = WatchRequest(
        targets=tuple(targets or ()),
        fleet=fleet,
        mine=mine,
        work_dir=work_dir,
        job_name=job_name,
        user=user,
        cycle_info_glob=cycle_info_glob,
        checkpoint_iteration_file=checkpoint_iteration_file,
        max_restarts=max_restarts,
        act=act,
        dry_run=dry_run,
        as_json=as_json,
        list_detectors=list_detectors,
        html=html,
        junit=junit,
        goodput=goodput,
    )
    flags = {
        "watch.platform": (platform, "--platform"),
        "watch.user": (user, "--user"),
        "watch.max_restarts": (max_restarts, "--max-restarts"),
        "watch.state_dir": (state_dir, "--state-dir"),
        "watch.interval": (interval, "--interval"),
        "watch.webhook_url": (webhook_url, "--webhook-url"),
        "watch.pd_routing_key": (pd_routing_key, "--pd-routing-key"),
        "watch.pd_routing_key_file": (pd_routing_key_file, "--pd-routing-key-file"),
        "watch.heartbeat_url": (heartbeat_url, "--heartbeat-url"),
        "watch.prom_file": (prom_file, "--prom-file"),
        "watch.disable": (disable, "--disable"),
        "watch.exit_codes": (exit_codes, "--exit-codes"),
    }
    raise typer.Exit(watch(request, flags=flags, source=config_source(config, env_file, set_)))
