"""`nvrx score`: cases from directories or from upstream's flags, the judges, the verdicts,
their reports and the thresholds' exit code."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from nvrx.config import ConfigSource
from nvrx.contract import write_document
from nvrx.terminal import Output, note, stderr, stdout, warn, write_outputs


def _score_with_progress(judges: list[Any], cases: list[Any], *, live: bool) -> list[Any]:
    """The verdicts; on a terminal, with a progress bar (verdicts so far, elapsed, remaining)
    that goes away when they are all in, for anything more than one case."""
    from nvrx.score.run import score

    if not (live and sys.stdout.isatty() and len(cases) > 1):
        return score(judges, cases)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress(
        "judging",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=stderr(),
        transient=True,
    ) as bar:
        task = bar.add_task("judging", total=len(cases))
        return score(judges, cases, lambda: bar.advance(task))


def score_command(
    *,
    targets: list[Path] | None,
    judge: list[str] | None,
    model: str | None,
    base_url: str | None,
    fault_type: str | None,
    rank: int | None,
    iteration: int | None,
    nodes: int | None,
    run_valid: str,
    log_path: Path | None,
    log_output: str,
    fr_output: str,
    gpus_per_node: int | None,
    segment_size: int | None,
    minimum: list[str] | None,
    as_json: bool,
    junit_path: Path | None,
    markdown_path: Path | None,
    html: str | None,
    no_cache: bool,
    no_progress: bool,
    concurrency: int | None,
    source: ConfigSource,
) -> int:
    """Score; returns 0 scored and every --min met, 1 a --min not met, 3 some case unscored."""
    from nvrx.score import report
    from nvrx.score.load import (
        Shape,
        cases_from_path,
        flags_case,
        input_paths,
        is_session,
        parse_bool,
    )
    from nvrx.score.model import ScoreError
    from nvrx.score.output import render
    from nvrx.score.run import JudgeSpec, build_judges, default_judges, judge_label

    flags = {
        "score.model": (model, "--model"),
        "score.base_url": (base_url, "--base-url"),
        "score.segment_size": (segment_size, "--segment-size"),
        "score.concurrency": (concurrency, "--concurrency"),
        "score.cache": (False if no_cache else None, "--no-cache"),
        "slurm.gpus_per_node": (gpus_per_node, "--gpus-per-node"),
    }
    loaded = source.load(flags)
    cfg = loaded.config
    shape = Shape(cfg.slurm.gpus_per_node, cfg.score.segment_size)
    truth_flags = {
        "--fault-type": fault_type,
        "--rank": rank,
        "--iter": iteration,
        "--nodes": nodes,
    }
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
        warn=warn,
    )

    verdicts = _score_with_progress(judges, cases, live=not (as_json or no_progress))
    label = judge_label(judges)
    for j in judges:
        for line in j.notes if j is not None else []:
            note(line)
    summary = report.summarise(verdicts, thresholds)
    given_files = [p for p in (log_path,) if p is not None] + [
        Path(v[1:]) for v in (log_output, fr_output) if v.startswith("@")
    ]
    inputs = input_paths(list(targets or []), cases, given_files)
    outputs: list[Output] = [
        (path, flag, render)
        for path, flag, render in (
            (junit_path, "--junit", lambda: report.junit(cases, verdicts, label)),
            (markdown_path, "--markdown", lambda: report.markdown(cases, verdicts)),
        )
        if path is not None
    ]
    if html is not None:
        from nvrx.score.html import page

        # No FILE: in the one session scored, else here (an experiment dir is an input).
        place = targets[0] if targets and len(targets) == 1 and is_session(targets[0]) else Path()
        outputs.append(
            (Path(html) if html else place / "score.html", "--html",
             lambda: page(cases, verdicts, summary, label))
        )  # fmt: skip
    write_outputs(outputs, inputs)
    if as_json:
        doc = report.as_json(cases, verdicts, summary, label)
        write_document(doc, doc.pop("exit_code"))
    else:
        render(stdout(), cases, verdicts, summary, label)
    return summary.exit_code
