"""The `nvrx` command line: typer wiring; the work happens in the subcommand packages.

One module for now, and too large: it still holds logic (inject-loop's mode selection, the watch
loop, the report tables) that belongs in the packages, and is to be split into one module per
subcommand (DESIGN.md, "Modules"). Subcommand packages are imported only inside the commands, so
`nvrx --help` loads none of them.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text
from typer.exceptions import TyperException

import nvrx
from nvrx.display import printable
from nvrx.files import InputError, set_input_limit

if TYPE_CHECKING:  # the settings (pydantic) are imported by the commands that load them
    from nvrx.config import LoadedConfig

# User text prints literally everywhere: no rich markup or emoji codes in help or messages (a
# pool entry `SIGKILL:-1:5:2` must not read as a thumbs-down emoji).
app = typer.Typer(
    rich_markup_mode=None,
    name="nvrx",
    help="Resilient large-scale training on Slurm.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
config_app = typer.Typer(
    help="Inspect the effective configuration.", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(config_app, name="config")
analyze_app = typer.Typer(
    help="Run the built-in analysers on one experiment's artifacts.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(analyze_app, name="analyze")

# Piped output is read by grep and scripts: never fold it at rich's default 80 columns.
stdout = Console(
    highlight=False,
    markup=False,
    emoji=False,
    soft_wrap=True,
    width=None if sys.stdout.isatty() else 240,
)
stderr = Console(stderr=True, highlight=False, markup=False, emoji=False, soft_wrap=True)

# Options every subcommand takes, so they can follow the subcommand like any other flag.
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="YAML config file (default: $NVRX_CONFIG, ./nvrx.yaml, ~/.config/nvrx/config.yaml).",
        dir_okay=False,
    ),
]
EnvFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--env-file",
        help="user.env-style KEY=VALUE site file (default: $NVRX_ENV_FILE).",
        dir_okay=False,
    ),
]
ForceOpt = Annotated[
    bool,
    typer.Option(
        "--force", help="Skip damaged journal lines (and say how many) instead of stopping."
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", metavar="SECTION.KEY=VALUE", help="Override one setting (repeatable)."),
]


def _note_duplicates(duplicates: Sequence[str]) -> None:
    for dup in sorted(set(duplicates)):
        stderr.print(f"note: duplicate entry {dup} kept in its own directory", markup=False)


def fail(message: str, code: int = 2) -> NoReturn:
    """One line on stderr, non-zero exit (whatever names and values the message quotes)."""
    stderr.print(f"nvrx: error: {printable(message)}", markup=False)
    raise typer.Exit(code)


def load(config: Path | None, env_file: Path | None, sets: list[str] | None) -> LoadedConfig:
    from nvrx.config import ConfigError, load_config, parse_assignments

    try:
        loaded = load_config(
            config_file=config, env_file=env_file, cli=parse_assignments(sets or [])
        )
    except ConfigError as exc:
        fail(str(exc))
    set_input_limit(loaded.config.limits.max_input_bytes)
    return loaded


def _version(value: bool) -> None:
    if value:
        stdout.print(f"nvrx {nvrx.__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", callback=_version, is_eager=True
        ),
    ] = False,
) -> None:
    """nvrx: singleton job-array chains, an out-of-job watcher, fault-injection campaigns and
    attribution scoring, on one config and one Slurm adapter."""


def _display(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, str):
        return value if value else '""'
    return json.dumps(value)


@config_app.command("show")
def config_show(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    config: ConfigOpt = None,
    env_file: EnvFileOpt = None,
    set_: SetOpt = None,
) -> None:
    """Print every effective setting and the layer it came from."""
    loaded = load(config, env_file, set_)
    rows = loaded.rows()
    if as_json:
        doc = {
            "nvrx_version": nvrx.__version__,
            "config_file": str(loaded.config_file) if loaded.config_file else None,
            "env_file": str(loaded.env_file) if loaded.env_file else None,
            "settings": {
                key: {"value": value, "source": str(origin)} for key, value, origin in rows
            },
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    stdout.print(f"config file: {loaded.config_file or '(none)'}", markup=False)
    stdout.print(f"env file:    {loaded.env_file or '(none)'}", markup=False)
    table = Table(show_edge=False, box=None, pad_edge=False, header_style="bold")
    table.add_column("setting", no_wrap=True)
    table.add_column("value", overflow="fold")
    table.add_column("source", overflow="fold")
    section = ""
    for key, value, origin in rows:
        this = key.split(".", 1)[0]
        if this != section:
            if section:
                table.add_row("", "", "")
            section = this
        # Values and paths are data, never rich markup (a value may well contain "[/x]").
        style = "dim" if origin.layer == "default" else "cyan"
        table.add_row(key, Text(_display(value)), Text(str(origin), style=style))
    stdout.print(table)


@config_app.command("env")
def config_env(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List the environment variables each setting reads (canonical name, then upstream names)."""
    from nvrx.config import FIELDS, env_names_for

    mapping = {key: env_names_for(key) for key in FIELDS}
    if as_json:
        sys.stdout.write(json.dumps(mapping, indent=2) + "\n")
        return
    table = Table(show_edge=False, box=None, pad_edge=False, header_style="bold")
    table.add_column("setting", no_wrap=True)
    table.add_column("environment (first wins)", overflow="fold")
    for key, names in mapping.items():
        table.add_row(key, ", ".join(names))
    stdout.print(table)


def _chain_flags(**flags: Any) -> list[str]:
    """Flag values that were given, as `--set` style assignments for the cli layer."""
    return [f"chain.{key}={value}" for key, value in flags.items() if value is not None]


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
    launcher: Annotated[str | None, typer.Option(help="Launcher command (ft_launcher).")] = None,
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
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    config: ConfigOpt = None,
    env_file: EnvFileOpt = None,
    set_: SetOpt = None,
) -> None:
    """Submit a singleton job-array chain of K generations.

    Array task 0 trains and hosts the rendezvous; the other tasks are hot and cold spares.
    """
    from nvrx.chain.output import print_report
    from nvrx.chain.shape import ChainError
    from nvrx.chain.submit import cancel, extend, submit_new
    from nvrx.slurm import Slurm, SlurmError, SlurmValueError

    def error(message: str, code: int) -> NoReturn:
        if as_json:
            sys.stdout.write(json.dumps({"ok": False, "error": message}) + "\n")
        fail(message, code)

    if sum((dry_run or validate, extend_, cancel_)) > 1:
        error("choose one of --dry-run/--validate, --extend and --cancel", 2)
    shape_flags = dict(
        train_tasks=train_tasks,
        hot_spares=hot_spares,
        cold_spares=cold_spares,
        nodes_per_task=nodes_per_task,
        time_limit=time_limit,
        job_name=job_name,
        launcher=launcher,
    )
    if extend_ or cancel_:
        given = [f"--{k.replace('_', '-')}" for k, v in shape_flags.items() if v is not None]
        given += (
            ["--share-name"] * share_name + ["--set"] * bool(set_) + ["-- ARGS"] * bool(ctx.args)
        )
        if cancel_ and depth is not None:
            given.append("-K")
        if given:
            error(
                f"{'--extend' if extend_ else '--cancel'} does not take {', '.join(given)}: the "
                "chain keeps the settings it was submitted with (only --work-dir"
                f"{', -K' if extend_ else ''} and --json apply)",
                2,
            )
    flags = _chain_flags(**shape_flags, depth=depth, work_dir=work_dir)
    loaded = load(config, env_file, [*(set_ or []), *flags])
    slurm = Slurm(loaded.config.slurm)
    progress = None if as_json else (lambda msg: stdout.print(msg, markup=False))
    if loaded.config.chain.dry_run and not (extend_ or cancel_ or validate):
        dry_run = True  # upstream's NVRX_DRY_RUN=1
    try:
        if cancel_:
            report = cancel(loaded.config.chain.work_dir, slurm)
        elif extend_:
            report = extend(loaded.config.chain.work_dir, slurm, depth=depth, progress=progress)
        else:
            report = submit_new(
                loaded,
                slurm,
                extra_args=ctx.args,
                dry_run=dry_run,
                validate=validate,
                share_name=share_name,
                argv=sys.argv,
                progress=progress,
            )
    except (ChainError, SlurmValueError) as exc:
        error(str(exc), 2)
    except SlurmError as exc:
        error(str(exc), 1)
    except OSError as exc:
        error(f"{exc.filename or 'file'}: {exc.strerror}", 2)
    if as_json:
        sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n")
    else:
        print_report(report, stdout, stderr)
    if not report.ok:
        raise typer.Exit(1)


@app.command("watch")
def watch_cmd(
    job_id: Annotated[
        str | None, typer.Argument(help="A job of the chain (any generation or task).")
    ] = None,
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
        str | None, typer.Option(help="slurm, or none for cycle files only.")
    ] = None,
    max_restarts: Annotated[
        int | None, typer.Option(help="Launcher --max-restarts (for restart_budget_low).")
    ] = None,
    state_dir: Annotated[Path | None, typer.Option(help="State, cache and log directory.")] = None,
    act: Annotated[
        bool, typer.Option("--act", help="Take the one action (cancel an orphan's pending tasks).")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="No action, alert, heartbeat or state write.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per pass.")] = False,
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
        str | None, typer.Option(help="Detectors to switch off, comma-separated.")
    ] = None,
    list_detectors: Annotated[
        bool, typer.Option("--list-detectors", help="List the detectors and exit.")
    ] = False,
    config: ConfigOpt = None,
    env_file: EnvFileOpt = None,
    set_: SetOpt = None,
) -> None:
    """Watch a chain from outside the job and report restart anomalies.

    Reconciles the chain with Slurm and reads its cycle-info files.
    Exit 0 clean, 1 degraded (cannot see Slurm), 2 critical.
    """
    import socket
    import time

    from nvrx.slurm import Slurm
    from nvrx.watch.detectors import DETECTORS
    from nvrx.watch.output import JSON_SCHEMA, pass_json, print_pass
    from nvrx.watch.resolve import Overrides, WatchBlind, WatchError, resolve
    from nvrx.watch.run import Watcher

    if list_detectors:
        for name, fn in DETECTORS.items():
            doc = (fn.__doc__ or "").strip().splitlines()
            stdout.print(f"{name:22} {doc[0] if doc else ''}", markup=False)
        return
    given = {
        "watch.platform": platform,
        "watch.user": user,
        "watch.max_restarts": max_restarts,
        "watch.state_dir": state_dir,
        "watch.interval": interval,
        "watch.webhook_url": webhook_url,
        "watch.pd_routing_key": pd_routing_key,
        "watch.pd_routing_key_file": pd_routing_key_file,
        "watch.heartbeat_url": heartbeat_url,
        "watch.prom_file": prom_file,
        "watch.disable": disable,
    }
    sets = [*(set_ or []), *(f"{k}={v}" for k, v in given.items() if v is not None)]
    loaded = load(config, env_file, sets)
    settings = loaded.config.watch
    unknown = set(settings.disable) - set(DETECTORS)
    if unknown:
        fail(f"unknown detector(s) in disable: {', '.join(sorted(unknown))}")
    slurm = Slurm(loaded.config.slurm) if settings.platform == "slurm" else None
    over = Overrides(
        job_id=job_id,
        work_dir=work_dir,
        job_name=job_name,
        user=user,
        cycle_info_glob=cycle_info_glob,
        checkpoint_file=checkpoint_iteration_file,
        platform=settings.platform,
        max_restarts=max_restarts,
        # For a chain without a manifest (whose own code wins): the site's launcher setting.
        no_restart_exit_code=loaded.config.chain.no_restart_exit_code,
    )

    def blind(message: str) -> int:
        """A pass that saw nothing: one line (and a JSON object with --json), exit 1."""
        stderr.print(f"nvrx: watch: {printable(message)}", markup=False)
        if as_json:
            doc = {"schema": JSON_SCHEMA, "exit_code": 1, "degraded": True, "error": message}
            sys.stdout.write(json.dumps(doc) + "\n")
            sys.stdout.flush()
        return 1

    code = 0
    watcher: Watcher | None = None
    try:
        while True:
            if watcher is None:
                try:
                    target = resolve(over, slurm, settings, dry_run=dry_run)
                except WatchBlind as exc:
                    # Slurm does not answer: blind (exit 1), not misconfigured; a loop retries.
                    code = blind(str(exc))
                except WatchError as exc:
                    fail(str(exc))
                else:
                    watcher = Watcher(
                        target,
                        settings,
                        slurm,
                        host=socket.gethostname(),
                        act=act,
                        dry_run=dry_run,
                    )
            if watcher is not None:
                try:
                    result = watcher.run_pass()
                except OSError as exc:
                    # A pass that breaks (state dir unusable, ...) is a blind pass, and a cron
                    # or --interval loop must keep going.
                    code = blind(f"pass failed: {exc}")
                else:
                    code = result.exit_code
                    if as_json:
                        sys.stdout.write(json.dumps(pass_json(result)) + "\n")
                        sys.stdout.flush()
                    else:
                        print_pass(result, stdout)
            if settings.interval is None:
                break
            time.sleep(settings.interval)
    except KeyboardInterrupt:
        pass
    raise typer.Exit(code)


@app.command(
    "inject-loop",
    context_settings={"allow_extra_args": True},
    epilog="Arguments after -- go to every sbatch unchanged.",
)
def inject_loop_cmd(
    ctx: typer.Context,
    pool: Annotated[
        str | None, typer.Option(help="Pool: a name (default, n3_super, quick), a file or entries.")
    ] = None,
    workload: Annotated[str | None, typer.Option(help="Workloads registry entry.")] = None,
    sbatch_script: Annotated[
        Path | None, typer.Option(help="The workload's sbatch script (overrides the registry).")
    ] = None,
    batch_size: Annotated[
        int | None, typer.Option(help="Jobs of the session in Slurm at once.")
    ] = None,
    barrier: Annotated[
        bool, typer.Option("--barrier", help="Upstream's batches: wait for a whole batch.")
    ] = False,
    base_dir: Annotated[
        Path | None, typer.Option(help="Sessions go to <this>/fault_injection/<timestamp>/.")
    ] = None,
    time_limit: Annotated[str | None, typer.Option(help="Per-job time limit.")] = None,
    resume: Annotated[
        Path | None, typer.Option(help="Finish this session (never resubmits what it knows).")
    ] = None,
    reanalyze: Annotated[
        Path | None,
        typer.Option(help="Analyse and score this session's ended experiments again; report."),
    ] = None,
    rerun_failing: Annotated[
        Path | None,
        typer.Option(help="A new session of the experiments that failed a dimension in this one."),
    ] = None,
    next_: Annotated[
        Path | None,
        typer.Option(
            "--next",
            help="Print the pool of the sweep's next iteration after this session; run nothing.",
        ),
    ] = None,
    iters: Annotated[
        str | None, typer.Option(help="Run each pool entry at these iterations, e.g. 2,10.")
    ] = None,
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
    from nvrx.campaign.pool import PoolError
    from nvrx.campaign.session import Session, SessionState
    from nvrx.inject.analysis import Analyst, Analyzers, Judge
    from nvrx.inject.output import (
        LineReporter,
        LiveReporter,
        pool_table,
        print_summary,
        summary_json,
    )
    from nvrx.inject.plan import (
        make_plan,
        plan_pool,
        planned_commands,
        rerun_plan,
        start_session,
    )
    from nvrx.inject.report import failing_entries
    from nvrx.inject.report import rows as report_rows
    from nvrx.inject.run import Campaign
    from nvrx.score.model import ScoreError
    from nvrx.score.run import campaign_judge
    from nvrx.slurm import Slurm, SlurmError, SlurmValueError

    def warn(message: str) -> None:
        stderr.print(f"nvrx: warning: {printable(message)}", markup=False)

    if next_ is not None:
        if resume or reanalyze or rerun_failing or pool or iters or dry_run or list_pool:
            fail("--next reads one session and prints a pool: no other session or pool option")
        raise typer.Exit(_next_iteration(next_, config, env_file, set_))
    reanalyze = reanalyze.resolve() if reanalyze is not None else None
    rerun_failing = rerun_failing.resolve() if rerun_failing is not None else None
    resume = resume.resolve() if resume is not None else None
    if reanalyze is not None and (
        rerun_failing or resume or ctx.args or dry_run or list_pool or no_analysis
        or pool or workload or sbatch_script or batch_size or base_dir or time_limit
    ):  # fmt: skip
        fail("--reanalyze works on a session alone: no other session, pool, job or sbatch option")
    if force and reanalyze is None:
        fail("--force applies to --reanalyze only (a campaign never runs on a damaged journal)")
    if rerun_failing is not None and (resume or pool or workload or sbatch_script):
        fail(
            "--rerun-failing re-runs that session's campaign: no --resume, --pool, --workload "
            "or --sbatch-script"
        )
    entries: list[str] = []
    old: SessionState | None = None  # the journal of the session --rerun-failing re-runs
    if rerun_failing is not None:
        try:
            old = Session.open(rerun_failing).state()
        except PoolError as exc:
            fail(str(exc))

    given = {
        "inject.pool": pool,
        "inject.workload": workload,
        "inject.sbatch_script": sbatch_script,
        "inject.batch_size": batch_size,
        "inject.base_experiments_dir": base_dir,
        "inject.time_limit": time_limit,
        "inject.iters": iters,
    }
    loaded = load(
        config, env_file, [*(set_ or []), *(f"{k}={v}" for k, v in given.items() if v is not None)]
    )
    cfg = loaded.config.inject
    slurm = Slurm(loaded.config.slurm)
    if old is not None:
        try:
            entries = failing_entries(report_rows(old), cfg.stop_dimensions)
        except PoolError as exc:
            fail(str(exc))
        if not entries:
            counted = ", ".join(cfg.stop_dimensions)
            stdout.print(f"every experiment of {rerun_failing} passes {counted}: nothing to re-run")
            return
        stderr.print(
            f"note: re-running {len(entries)} failing experiment(s) of {rerun_failing} "
            "with its recorded workload, script and shape",
            markup=False,
        )

    def analysis(gpus_per_node: int) -> tuple[Analyzers, Judge] | None:
        """The analysers and the judge, built (and their settings checked) before any session
        is created or resumed."""
        if no_analysis:
            return None
        return Analyzers.from_config(loaded.config, gpus_per_node), campaign_judge(
            loaded.config, warn
        )

    try:
        if reanalyze is not None:
            session, state = _open_session(reanalyze, force)
            tools = analysis(state.gpus_per_node())
            assert tools is not None  # --reanalyze refuses --no-analysis
            analyst = Analyst(session, *tools, cfg.analysis_workers)
            raise typer.Exit(
                _reanalyze(session, state, analyst, as_json, force, cfg.stop_dimensions)
            )
        if resume is not None:
            if ctx.args or pool or workload or sbatch_script or list_pool or dry_run:
                fail(
                    "--resume finishes a session as it was planned: it takes no pool, "
                    "workload, script or sbatch arguments"
                )
            session = Session.open(resume)
            state = session.state()
            size = batch_size or int(state.info.get("batch_size", cfg.batch_size))
            tools = analysis(state.gpus_per_node())
        else:
            if rerun_failing is not None and old is not None:
                plan = rerun_plan(rerun_failing, old, entries)
                home = rerun_failing.parent.parent  # beside OLD: the stop condition compares them
                size = batch_size or int(old.info.get("batch_size", cfg.batch_size))
            elif list_pool:  # the pool alone: listing it needs no sbatch script yet
                listed = plan_pool(loaded, allow_duplicates=allow_duplicates)
                _note_duplicates(listed.pool.duplicates)
                stdout.print(pool_table(list(listed.pool.experiments), listed.gpus_per_node))
                return
            else:
                plan = make_plan(loaded, allow_duplicates=allow_duplicates, extra_args=ctx.args)
                home = Path(cfg.base_experiments_dir)
                size = cfg.batch_size
            _note_duplicates(plan.pool.duplicates)
            if list_pool:  # with --rerun-failing: the pool the re-run would run
                stdout.print(pool_table(list(plan.pool.experiments), plan.spec.gpus_per_node))
                return
            lines = planned_commands(plan, slurm, home)
            if dry_run:
                for argv in lines:
                    stdout.print(f"[dry-run] {shlex.join(argv)}", markup=False)
                return
            tools = analysis(plan.spec.gpus_per_node)
            session = start_session(plan, loaded, sys.argv, home, size)
    except (PoolError, SlurmValueError, ScoreError) as exc:
        fail(str(exc))
    except SlurmError as exc:
        fail(str(exc), 1)

    reporter = (
        LiveReporter(stdout)
        if sys.stdout.isatty() and not as_json
        else (LineReporter(stderr if as_json else stdout))
    )
    if not as_json:
        stdout.print(f"session: {session.dir}", markup=False)
    campaign = Campaign(
        session,
        slurm,
        reporter,
        batch_size=size,
        barrier=barrier,
        poll_interval=loaded.config.slurm.poll_interval,
        cap_seconds=cfg.experiment_timeout,
        cancel_on_interrupt=cancel_on_interrupt,
        analyst=Analyst(session, *tools, cfg.analysis_workers) if tools is not None else None,
    )
    try:
        outcome = campaign.run()
    finally:
        reporter.close()
    summary = summary_json(outcome.state, str(session.dir), outcome.error, outcome.interrupted)
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        print_summary(stdout, summary)
    if campaign.analyst is not None:
        campaign.analyst.close()
        _finish_report(session.dir, as_json, dimensions=cfg.stop_dimensions)
    if outcome.error:
        stderr.print(f"nvrx: error: {printable(outcome.error)}", markup=False)
        raise typer.Exit(1)
    if outcome.interrupted:
        raise typer.Exit(130)


@analyze_app.command("fr")
def analyze_fr_cmd(
    path: Annotated[
        Path, typer.Argument(help="A dump directory, one dump file, or a path prefix.")
    ],
    pattern: Annotated[
        str, typer.Option("--pattern", "-p", help="Dump file pattern (inject.fr_pattern).")
    ] = "_dump_*",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Missing ranks from NCCL flight-recorder dumps, torch-free (upstream's table or JSON).

    Prints `no_dumps` when no file matches.
    """
    from nvrx.inject import fr

    load(None, None, None)  # the site's limits
    try:
        result = fr.analyze_path(path, pattern)
    except fr.FrError as exc:
        fail(str(exc))
    for note in result.notes:
        stderr.print(f"note: {printable(note)}", markup=False)
    if as_json:
        sys.stdout.write(json.dumps(fr.to_json(result), indent=2) + "\n")
    else:
        sys.stdout.write("no_dumps\n" if result.no_dumps else fr.table(result))


@analyze_app.command("log")
def analyze_log_cmd(
    path: Annotated[
        Path,
        typer.Argument(
            help="A job log, of any format and size ([rankN]:, N: or no rank prefix).",
            dir_okay=False,
        ),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """The built-in log attribution (logsage's 5-field text): root rank, fault class, decision.

    The log is blinded first: injection markers never reach the rules.
    """
    from nvrx.files import InputError
    from nvrx.inject.analysis import attribute_file

    load(None, None, None)  # the site's limits (a log that is not a regular file ends at one)
    try:
        result = attribute_file(path)
    except InputError as exc:
        fail(str(exc))
    if as_json:
        sys.stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
    else:
        sys.stdout.write(result.text().rstrip("\n") + "\n")


@app.command(
    "report",
    epilog="`nvrx report diff OLD NEW` exits 1 when a cell regressed, else 0.",
)
def report_cmd(
    args: Annotated[
        list[str],
        typer.Argument(metavar="SESSION | diff OLD NEW", help="A session, or two to compare."),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    force: ForceOpt = False,
) -> None:
    """Print a campaign's report (rebuilt from its journal), or what changed between two."""
    from nvrx.campaign.pool import PoolError
    from nvrx.inject import report
    from nvrx.score.report import percent, summarise

    def open_rows(path: str) -> list[report.Row]:
        try:
            _open_session(Path(path), force)
            return report.session_rows(Path(path).resolve(), force=force)
        except PoolError as exc:
            fail(str(exc))

    if args[0] == "diff":
        if len(args) != 3:
            fail("report diff takes two sessions: OLD NEW")
        changes, only_old, only_new = report.diff(open_rows(args[1]), open_rows(args[2]))
        regressed = [c for c in changes if not c.improved]
        if as_json:
            doc = {
                "improved": [vars(c) for c in changes if c.improved],
                "regressed": [vars(c) for c in regressed],
                "only_in_old": only_old,
                "only_in_new": only_new,
            }
            sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        else:
            for c in changes:
                word = "improved" if c.improved else "regressed"
                style = "green" if c.improved else "bold red"
                stdout.print(
                    Text(f"{word:9} {c.entry} {c.dimension}: {c.before} -> {c.after}", style=style)
                )
            for entry in only_old:
                stdout.print(Text(f"only in old: {entry}", style="dim"))
            for entry in only_new:
                stdout.print(Text(f"only in new: {entry}", style="dim"))
            stdout.print(
                f"{len(changes) - len(regressed)} improved, {len(regressed)} regressed",
                markup=False,
            )
        raise typer.Exit(1 if regressed else 0)
    if len(args) != 1:
        fail("report takes one session (or: report diff OLD NEW)")
    session_dir = Path(args[0]).resolve()
    try:
        _open_session(session_dir, force)  # a clear error for what is not a session
        dimensions = load(None, None, None).config.inject.stop_dimensions
        rows, stop = report.rows_and_stop(session_dir, force=force, dimensions=dimensions)
    except PoolError as exc:
        fail(str(exc))
    if as_json:
        sys.stdout.write(json.dumps(report.report_json(session_dir, rows, stop), indent=2) + "\n")
        return
    from nvrx.score.model import DIMENSIONS
    from nvrx.score.output import SHORT_NAMES, render

    cases, verdicts = [r.case for r in rows], [r.verdict for r in rows]
    render(stdout, cases, verdicts, summarise(verdicts), "session")
    table = Table(title="fault type × nodes × rank position", header_style="bold", box=None)
    for column in ("fault", "nodes", "rank", "n", "scored", *SHORT_NAMES.values()):
        table.add_column(column)
    for (fault, nodes, pos), cell in report.matrix(rows).items():
        rates = (percent(cell.rate(d)) for d in DIMENSIONS)
        table.add_row(fault, str(nodes), pos, str(cell.experiments), str(cell.scored), *rates)
    stdout.print(table)
    for pattern, matching in report.matched_patterns(rows):
        ids = ", ".join(r.record.dir.name for r in matching)
        stdout.print(Text(f"pattern {pattern.name}: {pattern.meaning}: {ids}"))
    met, why = stop
    stdout.print(Text(f"stop condition: {'met' if met else 'not met'} ({why})", style="bold"))


def _open_session(directory: Path, force: bool) -> tuple[Any, Any]:
    """A session and its state, saying on stderr what a forced read skipped."""
    from nvrx.campaign.session import Session

    session = Session.open(directory)
    state = session.state(force=force)
    for note in state.notes(session.journal.path):
        stderr.print(f"nvrx: warning: {printable(note)}", markup=False)
    return session, state


def _next_iteration(
    session_dir: Path, config: Path | None, env_file: Path | None, sets: list[str] | None
) -> int:
    """`--next SESSION`: the next iteration's pool on stdout (for `--pool "$(...)"`), why on
    stderr."""
    from nvrx.campaign.pool import PoolError
    from nvrx.inject.sweep import next_iteration

    dimensions = load(config, env_file, sets).config.inject.stop_dimensions
    try:
        _open_session(session_dir.resolve(), False)
        step = next_iteration(session_dir.resolve(), dimensions)
    except PoolError as exc:
        fail(str(exc))
    stderr.print(f"iteration {step.iteration}: {step.why}", markup=False)
    if step.entries:
        sys.stdout.write(" ".join(step.entries) + "\n")
    return 0


def _reanalyze(
    session: Any, state: Any, analyst: Any, as_json: bool, force: bool, dimensions: Sequence[str]
) -> int:
    """Analyse and score every ended experiment of `session` again; journal each result as it
    comes; rebuild the report. Exit 3 when any is unscored (as `nvrx score`), 130 on Ctrl-C
    (what finished is kept, the rest is not started)."""
    import time

    from nvrx.inject.output import LineReporter

    reporter = LineReporter(stderr if as_json else stdout)
    ended = state.by_status("ended")
    for record in ended:
        analyst.submit(record)
    done = unscored = 0
    code = 0
    try:
        while analyst.busy:
            for record, result in analyst.collect():
                done += 1
                unscored += result.verdict is None or result.verdict.status == "unscored"
                reporter.analysed(record, result, done, len(ended))
            time.sleep(0.1)
    except KeyboardInterrupt:
        for record, result in analyst.collect():
            done += 1
            reporter.analysed(record, result, done, len(ended))
        analyst.close(cancel=True)
        stderr.print(f"nvrx: interrupted after {done} of {len(ended)} analyses", markup=False)
        code = 130
    else:
        analyst.close()
    rows, stop = _finish_report(session.dir, as_json, force, dimensions)
    if as_json:
        from nvrx.inject import report

        sys.stdout.write(json.dumps(report.report_json(session.dir, rows, stop), indent=2) + "\n")
    if code == 0 and unscored:
        stderr.print(f"nvrx: {unscored} experiment(s) unscored after re-analysis", markup=False)
        code = 3
    return code


def _finish_report(
    session_dir: Path, quiet: bool, force: bool = False, dimensions: Sequence[str] | None = None
) -> tuple[list[Any], tuple[bool, str]]:
    """Rebuild the session's report from its journal, say where it is; its rows and stop
    condition."""
    from nvrx.campaign.pool import PoolError
    from nvrx.inject.report import write_reports

    try:
        paths, rows, (met, why) = write_reports(
            session_dir, force=force, **({"dimensions": dimensions} if dimensions else {})
        )
    except PoolError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write the report in {session_dir}: {exc.strerror}", 1)
    out = stderr if quiet else stdout
    scored = sum(r.verdict.status == "scored" for r in rows)
    out.print(f"report: {paths[0]} ({len(rows)} experiment(s), {scored} scored)", markup=False)
    out.print(f"stop condition: {'met' if met else 'not met'} ({why})", markup=False)
    return rows, (met, why)


@app.command(
    "score",
    epilog=(
        "Exit codes: 0 scored and every --min met; 1 a --min not met; 2 bad input; "
        "3 some case unscored (the judge could not give a verdict)."
    ),
)
def score_cmd(
    targets: Annotated[
        list[Path] | None,
        typer.Argument(help="Session or experiment directories (else the upstream flags)."),
    ] = None,
    judge: Annotated[
        list[str] | None,
        typer.Option(
            "--judge",
            metavar="rules|llm|llm:MODEL",
            help="Judge (repeat for a per-dimension vote). Default: llm when score.base_url "
            "is set, else rules.",
        ),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", help="LLM judge model.")] = None,
    base_url: Annotated[
        str | None, typer.Option("--base-url", help="OpenAI-compatible endpoint.")
    ] = None,
    fault_type: Annotated[str | None, typer.Option("--fault-type", help="Injected fault.")] = None,
    rank: Annotated[int | None, typer.Option("--rank", help="Injected global rank.")] = None,
    iteration: Annotated[int | None, typer.Option("--iter", help="Injection iteration.")] = None,
    nodes: Annotated[int | None, typer.Option("--nodes", help="Nodes of the job.")] = None,
    run_valid: Annotated[
        str, typer.Option("--run-valid", help="true/false: did the run reach the fault?")
    ] = "true",
    log_path: Annotated[
        Path | None, typer.Option("--log-path", help="The job log.", dir_okay=False)
    ] = None,
    log_output: Annotated[
        str, typer.Option("--log-output", help="Log-analysis output (text, or @FILE).")
    ] = "",
    fr_output: Annotated[
        str, typer.Option("--fr-output", help="FR analysis output (text, or @FILE).")
    ] = "no_dumps",
    gpus_per_node: Annotated[
        int | None, typer.Option("--gpus-per-node", help="Default: slurm.gpus_per_node.")
    ] = None,
    segment_size: Annotated[
        int | None,
        typer.Option("--segment-size", "--rack-size", help="FR segment size (score.segment_size)."),
    ] = None,
    minimum: Annotated[
        list[str] | None,
        typer.Option("--min", metavar="DIM=RATE", help="Fail (exit 1) below this pass rate."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    junit_path: Annotated[
        Path | None, typer.Option("--junit", help="Write JUnit XML here.", dir_okay=False)
    ] = None,
    markdown_path: Annotated[
        Path | None,
        typer.Option("--markdown", help="Write the markdown report table here.", dir_okay=False),
    ] = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Ask the judge even if the answer is cached.")
    ] = False,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", help="Judge requests in flight.")
    ] = None,
    config: ConfigOpt = None,
    env_file: EnvFileOpt = None,
    set_: SetOpt = None,
) -> None:
    """Judge attribution output against the injected ground truth.

    Offline with the deterministic rules judge, or with an LLM over an OpenAI-compatible API.
    """
    from nvrx.campaign.pool import PoolError
    from nvrx.files import refuse_overwriting
    from nvrx.score import report
    from nvrx.score.load import Shape, cases_from_path, flags_case, input_paths, parse_bool
    from nvrx.score.model import ScoreError
    from nvrx.score.output import render
    from nvrx.score.run import JudgeSpec, build_judges, default_judges, judge_label, score

    given = {
        "score.model": model,
        "score.base_url": base_url,
        "score.segment_size": segment_size,
        "score.concurrency": concurrency,
        "score.cache": "false" if no_cache else None,
        "slurm.gpus_per_node": gpus_per_node,
    }
    loaded = load(
        config, env_file, [*(set_ or []), *(f"{k}={v}" for k, v in given.items() if v is not None)]
    )
    cfg = loaded.config
    shape = Shape(cfg.slurm.gpus_per_node, cfg.score.segment_size)
    truth_flags = {
        "--fault-type": fault_type,
        "--rank": rank,
        "--iter": iteration,
        "--nodes": nodes,
    }
    try:
        thresholds = [t for text in minimum or [] for t in report.Threshold.parse(text)]
        specs = [JudgeSpec.parse(j) for j in judge] if judge else default_judges(cfg)
        if targets:
            if any(v is not None for v in truth_flags.values()) or log_path or log_output:
                raise ScoreError("give directories or the ground-truth flags, not both")
            cases = [case for target in targets for case in cases_from_path(target, shape)]
        else:
            missing = [flag for flag, v in truth_flags.items() if v is None]
            if missing:
                raise ScoreError(
                    "nothing to score: give session/experiment directories, or "
                    f"{', '.join(truth_flags)} (missing: {', '.join(missing)})"
                )
            assert fault_type is not None and rank is not None
            assert iteration is not None and nodes is not None
            cases = [
                flags_case(
                    fault_type=fault_type,
                    rank=rank,
                    iteration=iteration,
                    nodes=nodes,
                    run_valid=parse_bool(run_valid, "--run-valid"),
                    shape=shape,
                    log_path=log_path,
                    log_output=log_output,
                    fr_output=fr_output,
                )
            ]
        judges = build_judges(
            specs,
            cfg,
            warn=lambda m: stderr.print(f"nvrx: warning: {printable(m)}", markup=False),
        )
    except (ScoreError, PoolError) as exc:  # PoolError: a session's journal that is damaged
        fail(str(exc))

    verdicts = score(judges, cases)
    label = judge_label(judges)
    for j in judges:
        for note in j.notes if j is not None else []:
            stderr.print(f"note: {printable(note)}", markup=False)
    summary = report.summarise(verdicts, thresholds)
    given_files = [p for p in (log_path,) if p is not None] + [
        Path(v[1:]) for v in (log_output, fr_output) if v.startswith("@")
    ]
    inputs = input_paths(list(targets or []), cases, given_files)
    for output, flag in ((junit_path, "--junit"), (markdown_path, "--markdown")):
        if output is not None:
            refuse_overwriting(output, inputs, flag)
    try:
        if junit_path is not None:
            junit_path.write_text(report.junit(cases, verdicts, label), encoding="utf-8")
        if markdown_path is not None:
            markdown_path.write_text(report.markdown(cases, verdicts), encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {exc.filename}: {exc.strerror}")
    if as_json:
        doc = report.as_json(cases, verdicts, summary, label)
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        render(stdout, cases, verdicts, summary, label)
    raise typer.Exit(summary.exit_code)


def main() -> None:
    # Not standalone: a usage error (a bad flag or value) is one `nvrx: error:` line and exit 2,
    # like every other bad input, instead of a framed usage box.
    try:
        code = app(standalone_mode=False)
    except TyperException as exc:
        ctx = getattr(exc, "ctx", None)
        where = f"{ctx.command_path}: " if ctx is not None else ""
        message = " ".join(exc.format_message().split())
        if message:  # empty for `nvrx` alone, which has printed the help already
            stderr.print(f"nvrx: error: {printable(where + message)} (see --help)", markup=False)
        sys.exit(exc.exit_code)
    except InputError as exc:  # an input over its cap or unreadable, wherever it was read
        stderr.print(f"nvrx: error: {printable(str(exc))}", markup=False)
        sys.exit(2)
    except (KeyboardInterrupt, typer.Abort):
        stderr.print("nvrx: interrupted", markup=False)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
