"""`nvrx score`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nvrx.cli.options import ConfigOpt, EnvFileOpt, JunitOpt, SetOpt, config_source, html_option

app = typer.Typer(rich_markup_mode=None, add_completion=False)  # completion: the root only


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
        typer.Argument(
            metavar="DIR", help="Session or experiment directories (else the upstream flags)."
        ),
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
        str,
        typer.Option(
            "--run-valid",
            metavar="true|false",
            help="Did the run reach the fault? (default: true)",
        ),
    ] = "",
    log_path: Annotated[
        Path | None, typer.Option("--log-path", help="The job log.", dir_okay=False)
    ] = None,
    log_output: Annotated[
        str,
        typer.Option(
            "--log-output", metavar="TEXT|@FILE", help="Log-analysis output (text, or @FILE)."
        ),
    ] = "",
    fr_output: Annotated[
        str,
        typer.Option(
            "--fr-output",
            metavar="TEXT|@FILE",
            help="FR analysis output (text, or @FILE; default: no_dumps).",
        ),
    ] = "",
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
    junit_path: JunitOpt = None,
    html: Annotated[
        str | None, html_option("score.html in the one session scored, else here")
    ] = None,
    markdown_path: Annotated[
        Path | None,
        typer.Option(
            "--markdown",
            metavar="FILE",
            help="Write the markdown report table to FILE.",
            dir_okay=False,
        ),
    ] = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Ask the judge even if the answer is cached.")
    ] = False,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="No progress bar, even on a terminal.")
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
    from nvrx.score.command import ScoreRequest, score_command

    request = ScoreRequest(
        targets=tuple(targets or ()),
        judge=tuple(judge or ()),
        fault_type=fault_type,
        rank=rank,
        iteration=iteration,
        nodes=nodes,
        run_valid=run_valid,
        log_path=log_path,
        log_output=log_output,
        fr_output=fr_output,
        minimum=tuple(minimum or ()),
        as_json=as_json,
        junit_path=junit_path,
        markdown_path=markdown_path,
        html=html,
        no_progress=no_progress,
    )
    flags = {
        "score.model": (model, "--model"),
        "score.base_url": (base_url, "--base-url"),
        "score.segment_size": (segment_size, "--segment-size"),
        "score.concurrency": (concurrency, "--concurrency"),
        "score.cache": (False if no_cache else None, "--no-cache"),
        "slurm.gpus_per_node": (gpus_per_node, "--gpus-per-node"),
    }
    raise typer.Exit(score_command(request, flags, config_source(config, env_file, set_)))
