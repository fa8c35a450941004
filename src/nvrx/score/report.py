"""Verdicts as CI reads them: pass rates, `--min` thresholds, exit codes, and the JSON, markdown
and JUnit forms. Pure functions of the verdicts.

Exit codes (documented in docs/score.md and `nvrx score --help`):
  0  every case scored (or invalid) and every threshold met
  1  a `--min` threshold is not met
  2  bad input (a one-line error names it)
  3  some case is unscored: the judge could not produce a verdict. This wins over 1, because rates
     over an incomplete set cannot be trusted either way.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from nvrx.display import printable
from nvrx.junit import TestCase, junit_xml
from nvrx.score.model import DIMENSIONS, PASS_VALUE, Case, ScoreError, Usage, Verdict

EXIT_OK, EXIT_BELOW, EXIT_USAGE, EXIT_UNSCORED = 0, 1, 2, 3

REPORT_COLUMNS = (
    "#", "FAULT_TYPE", "NODES", "RANK", "ITER", "JOB_ID", "STATE", "run_valid",
    "restart_correct", "rank_primary", "rank_any", "fault_described", "fr_rank_correct",
    "judge_notes",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Threshold:
    dimension: str
    rate: float

    @classmethod
    def parse(cls, text: str) -> list[Threshold]:
        """`DIM=RATE`, RATE as 0.8 or 80%; DIM `all` means every dimension."""
        name, sep, value = text.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise ScoreError(f"--min {text!r}: expected DIM=RATE, e.g. rank_any=0.9")
        if name != "all" and name not in DIMENSIONS:
            raise ScoreError(
                f"--min {text!r}: unknown dimension {name!r} (known: all, {', '.join(DIMENSIONS)})"
            )
        try:
            rate = float(value[:-1]) / 100 if value.endswith("%") else float(value)
        except ValueError:
            raise ScoreError(f"--min {text!r}: rate {value!r} is not a number") from None
        if not 0 <= rate <= 1:
            raise ScoreError(f"--min {text!r}: rate must lie in 0..1 (or 0%..100%)")
        return [cls(d, rate) for d in (DIMENSIONS if name == "all" else (name,))]


@dataclass(frozen=True)
class Summary:
    cases: int
    scored: int
    invalid: int
    unscored: int
    rates: dict[str, float | None]  # pass rate over scored cases; None when none scored
    failed_thresholds: list[tuple[str, float, float | None]]  # (dimension, wanted, got)
    usage: Usage
    cache_hits: int
    agreement: float | None = None  # votes: mean share of dimensions all judges agreed on

    @property
    def exit_code(self) -> int:
        if self.unscored:
            return EXIT_UNSCORED
        if self.failed_thresholds:
            return EXIT_BELOW
        return EXIT_OK


def percent(rate: float | None) -> str:
    """A pass rate as reports print it; `-` when nothing could be rated."""
    return "-" if rate is None else f"{rate:.0%}"


def summarise(verdicts: Sequence[Verdict], thresholds: Sequence[Threshold] = ()) -> Summary:
    scored = [v for v in verdicts if v.status == "scored"]
    rates: dict[str, float | None] = {
        d: (sum(v.passed(d) for v in scored) / len(scored) if scored else None) for d in DIMENSIONS
    }
    failed = []
    for t in thresholds:
        got = rates[t.dimension]
        if got is None or got < t.rate:
            failed.append((t.dimension, t.rate, got))
    return Summary(
        cases=len(verdicts),
        scored=len(scored),
        invalid=sum(v.status == "invalid" for v in verdicts),
        unscored=sum(v.status == "unscored" for v in verdicts),
        rates=rates,
        failed_thresholds=failed,
        usage=sum((v.usage for v in verdicts), Usage()),
        cache_hits=sum(v.cache_hit for v in verdicts),
        agreement=(sum(agreed) / len(agreed))
        if (agreed := [v.agreement for v in scored if v.agreement is not None])
        else None,
    )


def _cell(value: str | None, verdict: Verdict) -> str:
    if verdict.status == "unscored":
        return "unscored"
    return value or ""


def _md(text: str) -> str:
    return printable(re.sub(r"\s+", " ", text).replace("|", "\\|").strip())


def markdown(cases: Sequence[Case], verdicts: Sequence[Verdict]) -> str:
    """The upstream report table (docs/file-contracts.md, "The report"), one row per case."""
    lines = [
        "| " + " | ".join(REPORT_COLUMNS) + " |",
        "|" + "|".join("---" for _ in REPORT_COLUMNS) + "|",
    ]
    for i, (case, v) in enumerate(zip(cases, verdicts, strict=True), start=1):
        t = case.truth
        notes = v.notes or "" if v.status != "unscored" else f"unscored: {v.reason}"
        if case.changed:
            notes = f"(changed after judged: {', '.join(case.changed)}) {notes}"
        row = [
            str(i), t.fault.value, str(t.nodes), str(t.rank), str(t.iteration),
            case.job_id or "", case.job_state or "", "true" if t.run_valid else "false",
            *(_cell(getattr(v, d), v) for d in DIMENSIONS), _md(notes),
        ]  # fmt: skip
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def junit(cases: Sequence[Case], verdicts: Sequence[Verdict], judge: str) -> str:
    """One testcase per case × dimension: failure below pass, error when unscored, skipped when
    the run was invalid."""
    tests = []
    for case, v in zip(cases, verdicts, strict=True):
        for d in DIMENSIONS:
            test = TestCase(case.id, d, time=v.latency_s)
            if v.status == "unscored":
                test = replace(
                    test, outcome="error", message=f"unscored: {v.reason}", kind="unscored"
                )
            elif v.status == "invalid":
                test = replace(test, outcome="skipped", message="run invalid: fault not reached")
            elif not v.passed(d):
                message = f"{d}={getattr(v, d)}, pass is {PASS_VALUE[d]}"
                test = replace(
                    test, outcome="failure", message=message, text=v.notes or "", kind="below"
                )
            tests.append(test)
    return junit_xml("nvrx-score", {"judge": judge}, tests)


def as_json(
    cases: Sequence[Case], verdicts: Sequence[Verdict], summary: Summary, judge: str
) -> dict[str, Any]:
    return {
        "judge": judge,
        "exit_code": summary.exit_code,
        "summary": {
            "cases": summary.cases,
            "scored": summary.scored,
            "invalid": summary.invalid,
            "unscored": summary.unscored,
            "pass_rates": summary.rates,
            "failed_thresholds": [
                {"dimension": d, "min": want, "rate": got}
                for d, want, got in summary.failed_thresholds
            ],
            "usage": {
                **summary.usage.model_dump(),
                "total_tokens": summary.usage.total_tokens,
            },
            "cache_hits": summary.cache_hits,
            "agreement": summary.agreement,
        },
        "cases": [
            {
                "case": case.id,
                # Absolute in every document (nvrx.contract), wherever the command ran.
                "experiment_dir": os.path.abspath(case.experiment_dir)
                if case.experiment_dir
                else None,
                "job_id": case.job_id,
                "job_state": case.job_state,
                "truth": case.truth.to_json(),
                "verdict": v.model_dump(mode="json", exclude_none=True),
                "changed_after_judged": list(case.changed),
            }
            for case, v in zip(cases, verdicts, strict=True)
        ],
    }
