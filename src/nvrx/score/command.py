"""`nvrx score`: cases from directories or from upstream's flags, the judges, the verdicts,
their reports and the thresholds' exit code."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvrx.config import ConfigSource
from nvrx.contract import write_document
from nvrx.score.model import ScoreError
from nvrx.terminal import Output, error_line, note, stderr, stdout, warn, write_outputs


def _score_with_progress(judges: list[Any], cases: list[Any], *, live: bool) -> list[Any]:
    """The verdicts; on a terminal, with a progress bar (verdicts so far, elapsed, remaining)
    that goes away when they are all in, for anything more than one case."""
    from nvrx.score.judges import score

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


@dataclass(frozen=True)
class ScoreRequest:
    """What the command line asked `score` for, beyond the settings its flags set (the flags
    map, built with the options in `cli.score`)."""

    targets: tuple[Path, ...] = ()  # session or experiment directories
    judge: tuple[str, ...] = ()  # judge specs; none: the configured ones
    fault_type: str | None = None  # the ground truth, when no directory is given
    rank: int | None = None
    iteration: int | None = None
    nodes: int | None = None
    run_valid: str = ""  # "": not given (true)
    log_path: Path | None = None
    log_output: str = ""
    fr_output: str = ""  # "": not given (no_dumps)
    minimum: tuple[str, ...] = ()
    as_json: bool = False
    junit_path: Path | None = None
    markdown_path: Path | None = None
    html: str | None = None
    no_progress: bool = False

    def check(self) -> None:
        """One line naming what does not go together: directories, or the ground truth."""
        truth = {
            "--fault-type": self.fault_type,
            "--rank": self.rank,
            "--iter": self.iteration,
            "--nodes": self.nodes,
        }
        if self.targets:
            # A directory holds its own ground truth, log and analyses: these would be dropped.
            given = [flag for flag, v in truth.items() if v is not None] + [
                flag
                for flag, v in (
                    ("--run-valid", self.run_valid),
                    ("--log-path", self.log_path),
                    ("--log-output", self.log_output),
                    ("--fr-output", self.fr_output),
                )
                if v
            ]
            if given:
                raise ScoreError(
                    "give directories or the ground-truth flags, not both: "
                    f"{', '.join(given)} with {self.targets[0]}"
                )
            return
        missing = [flag for flag, v in truth.items() if v is None]
        if missing:
            raise ScoreError(
                "nothing to score: give session/experiment directories, or "
                f"{', '.join(truth)} (missing: {', '.join(missing)})"
            )


def score_command(
    request: ScoreRequest, flags: Mapping[str, tuple[Any, str]], source: ConfigSource
) -> int:
    """Score; returns 0 scored and every --min met, 1 a --min not met, 3 some case unscored."""
    from nvrx.score import report
    from nvrx.score.judges import JudgeSpec, build_judges, default_judges, judge_label
    from nvrx.score.load import (
        Shape,
        cases_from_path,
        flags_case,
        input_paths,
        is_session,
        parse_bool,
    )
    from nvrx.score.output import render

    loaded = source.load(flags)
    cfg = loaded.config
    shape = Shape(cfg.slurm.gpus_per_node, cfg.score.segment_size)
    thresholds = [t for text in request.minimum for t in report.Threshold.parse(text)]
    specs = [JudgeSpec.parse(j) for j in request.judge] if request.judge else default_judges(cfg)
    request.check()  # after the values: a bad value is named before what is missing
    if request.targets:
        cases = [case for target in request.targets for case in cases_from_path(target, shape)]
    else:
        assert request.fault_type is not None and request.rank is not None
        assert request.iteration is not None and request.nodes is not None
        cases = [
            flags_case(
                fault_type=request.fault_type,
                rank=request.rank,
                iteration=request.iteration,
                nodes=request.nodes,
                run_valid=parse_bool(request.run_valid or "true", "--run-valid"),
                shape=shape,
                log_path=request.log_path,
                log_output=request.log_output,
                fr_output=request.fr_output or "no_dumps",
            )
        ]
    judges = build_judges(
        specs,
        cfg,
        warn=warn,
    )

    live = not (request.as_json or request.no_progress)
    verdicts = _score_with_progress(judges, cases, live=live)
    label = judge_label(judges)
    for j in judges:
        for line in j.notes if j is not None else []:
            note(line)
    summary = report.summarise(verdicts, thresholds)
    given_files = [p for p in (request.log_path,) if p is not None] + [
        Path(v[1:]) for v in (request.log_output, request.fr_output) if v.startswith("@")
    ]
    inputs = input_paths(list(request.targets), cases, given_files)
    outputs: list[Output] = [
        (path, flag, render)
        for path, flag, render in (
            (request.junit_path, "--junit", lambda: report.junit(cases, verdicts, label)),
            (request.markdown_path, "--markdown", lambda: report.markdown(cases, verdicts)),
        )
        if path is not None
    ]
    if request.html is not None:
        from nvrx.score.html import page

        # No FILE: in the one session scored, else here (an experiment dir is an input).
        one = request.targets[0] if len(request.targets) == 1 else None
        place = one if one is not None and is_session(one) else Path()
        outputs.append(
            (Path(request.html) if request.html else place / "score.html", "--html",
             lambda: page(cases, verdicts, summary, label))
        )  # fmt: skip
    write_outputs(outputs, inputs)
    # A judge that could not be reached is said once, after the answer, not once per case.
    unreachable = [(j.name, j.unreachable) for j in judges if j is not None and j.unreachable]
    if request.as_json:
        doc = report.as_json(cases, verdicts, summary, label)
        write_document(doc, doc.pop("exit_code"))
    else:
        told = [u.reason for _, u in unreachable]
        render(stdout(), cases, verdicts, summary, label, unreachable=told)
    for name, u in unreachable:
        left = f"{u.cases} experiment{'' if u.cases == 1 else 's'} left unscored"
        error_line(f"judge {name} unreachable: {u.reason}; {left}")
    return summary.exit_code
