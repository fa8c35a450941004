"""What a judge is asked and what it answers: ground truth, the 5 dimensions and the verdict.

Contract: docs/file-contracts.md, "The verdict". All dimension values are strings, as upstream
prints them; `N/A` on every dimension marks an invalid run (the fault was never reached), which
is judged without a call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from nvrx.campaign.errors import PoolError
from nvrx.campaign.pool import FaultType
from nvrx.display import counted

# Bumped whenever the prompt text or the answer schema changes: part of every cache key, so an
# old cached verdict is never returned for a new question.
PROMPT_VERSION = "nvrx-judge-2026.11-1"

DIMENSIONS: tuple[str, ...] = (
    "restart_correct",
    "rank_primary",
    "rank_any",
    "fault_described",
    "fr_rank_correct",
)

# Allowed values, worst first: a tied vote takes the worst (a coin flip must not pass CI).
ALLOWED: dict[str, tuple[str, ...]] = {
    "restart_correct": ("false", "N/A", "true"),
    "rank_primary": ("false", "partial", "true"),
    "rank_any": ("false", "true"),
    "fault_described": ("false", "partial", "true"),
    "fr_rank_correct": ("false", "no_dumps", "segment", "node", "rank"),
}

# What counts as a pass for `--min` thresholds, JUnit and the campaign's stop condition: the
# fully correct value only (a `partial`, `node` or `segment` is a gap still to close).
PASS_VALUE: dict[str, str] = {
    "restart_correct": "true",
    "rank_primary": "true",
    "rank_any": "true",
    "fault_described": "true",
    "fr_rank_correct": "rank",
}

INVALID_NOTES = (
    "run_invalid: training did not reach the fault injection point; scores not meaningful"
)

Status = Literal["scored", "unscored", "invalid"]


class ScoreError(ValueError):
    """Bad input to `nvrx score`; one line naming the bad value."""

    exit_code = 2  # bad input


def _to_label(value: Any) -> Any:
    # Small models answer `true` (a JSON boolean) or "True" for "true": same meaning.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = value.strip()
        return text if text == "N/A" else text.lower()
    return value


class Answer(BaseModel):
    """The six keys a judge answers, validated against the allowed values."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    restart_correct: Literal["true", "false", "N/A"]
    rank_primary: Literal["true", "false", "partial"]
    rank_any: Literal["true", "false"]
    fault_described: Literal["true", "false", "partial"]
    fr_rank_correct: Literal["rank", "node", "segment", "false", "no_dumps"]
    notes: str = Field(max_length=2000)

    @field_validator(
        "restart_correct", "rank_primary", "rank_any", "fault_described", mode="before"
    )
    @classmethod
    def _labels(cls, value: Any) -> Any:
        value = _to_label(value)
        return "N/A" if value in ("n/a", "na") else value

    @field_validator("fr_rank_correct", mode="before")
    @classmethod
    def _fr_label(cls, value: Any) -> Any:
        value = _to_label(value)
        return "segment" if value == "rack" else value  # upstream's legacy name

    def dimensions(self) -> dict[str, str]:
        return {d: getattr(self, d) for d in DIMENSIONS}


def answer_values(dimension: str) -> tuple[str, ...]:
    """The values a judge may answer for `dimension`, in the order `Answer` declares them (the
    order the schema and the prompt show; ALLOWED orders the same values worst first)."""
    return get_args(Answer.model_fields[dimension].annotation)


def answer_schema() -> dict[str, Any]:
    """The JSON schema sent as `response_format` (strict: every key, nothing else)."""
    props: dict[str, Any] = {
        d: {"type": "string", "enum": list(answer_values(d))} for d in DIMENSIONS
    }
    props["notes"] = {"type": "string"}
    return {
        "type": "object",
        "properties": props,
        "required": list(props),
        "additionalProperties": False,
    }


@dataclass(frozen=True, slots=True)
class GroundTruth:
    """The injected fault and the job's shape. Ranks are 0-based global indices."""

    fault: FaultType
    rank: int
    iteration: int
    nodes: int
    gpus_per_node: int
    segment_size: int
    run_valid: bool = True

    @classmethod
    def build(
        cls,
        fault: str,
        rank: int,
        iteration: int,
        nodes: int,
        gpus_per_node: int,
        segment_size: int,
        run_valid: bool = True,
    ) -> GroundTruth:
        try:
            fault_type = FaultType.parse(fault)
        except PoolError as exc:
            raise ScoreError(str(exc)) from None
        for name, value, low in (
            ("nodes", nodes, 1),
            ("gpus per node", gpus_per_node, 1),
            ("segment size", segment_size, 1),
            ("rank", rank, 0),
            ("iteration", iteration, 0),
        ):
            if value < low:
                raise ScoreError(f"{name} {value} is below {low}")
        truth = cls(fault_type, rank, iteration, nodes, gpus_per_node, segment_size, run_valid)
        if rank >= truth.total_ranks:
            raise ScoreError(
                f"rank {rank} is outside the job: {counted(nodes, 'node')} × "
                f"{counted(gpus_per_node, 'GPU')} = {truth.total_ranks} ranks"
            )
        return truth

    @property
    def total_ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def node(self) -> int:
        return self.rank // self.gpus_per_node

    @property
    def node_block(self) -> tuple[int, int]:
        start = self.node * self.gpus_per_node
        return start, min(start + self.gpus_per_node - 1, self.total_ranks - 1)

    @property
    def segment_block(self) -> tuple[int, int]:
        start = self.rank // self.segment_size * self.segment_size
        return start, min(start + self.segment_size - 1, self.total_ranks - 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "fault_type": self.fault.value,
            "rank": self.rank,
            "iter": self.iteration,
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "segment_size": self.segment_size,
            "run_valid": self.run_valid,
        }


@dataclass(frozen=True, slots=True)
class Case:
    """One experiment to judge: its ground truth and the (blinded) attribution artifacts.

    `problem` is set when the inputs are not there to judge (e.g. no attribution output):
    every judge then returns `unscored` with it as the reason, without a call.
    """

    id: str
    truth: GroundTruth
    log_excerpt: str = ""
    log_attribution: str = ""
    fr_output: str = "no_dumps"
    job_id: str | None = None
    job_state: str | None = None
    experiment_dir: str | None = None
    problem: str | None = None
    # Every file the case was built from, by its path in the experiment directory, with the
    # sha256 of the bytes read (None: looked for and absent); the campaign journals them with
    # its verdict (`judged`).
    inputs: tuple[tuple[str, str | None], ...] = ()
    # Judged files that changed after the campaign journalled its verdict: this score reads
    # them as they are now, the session's report shows the journalled verdict.
    changed: tuple[str, ...] = ()


class Usage(BaseModel):
    model_config = ConfigDict(frozen=True)

    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            requests=self.requests + other.requests,
        )


class Verdict(BaseModel):
    """One judge's (or the vote's) verdict on one case. Dimensions are None unless scored or
    invalid; an `unscored` verdict carries the reason and never a default score."""

    model_config = ConfigDict(frozen=True)

    case: str
    status: Status
    reason: str | None = None
    restart_correct: str | None = None
    rank_primary: str | None = None
    rank_any: str | None = None
    fault_described: str | None = None
    fr_rank_correct: str | None = None
    notes: str | None = None
    judge: str
    model: str | None = None
    prompt_version: str = PROMPT_VERSION
    fr_label_answered: str | None = None  # the judge's FR label before normalisation
    latency_s: float = 0.0
    usage: Usage = Field(default_factory=Usage)
    cache_hit: bool = False
    agreement: float | None = None  # vote only: share of dimensions all judges agreed on
    judges: list[Verdict] | None = None  # vote only: the voters' verdicts

    @model_validator(mode="after")
    def _scored_names_every_dimension(self) -> Verdict:
        # A "scored" verdict without its dimensions would read as failing every one of them.
        if self.status == "scored":
            missing = [d for d in DIMENSIONS if getattr(self, d) is None]
            if missing:
                raise ValueError(f"a scored verdict without {', '.join(missing)}")
        return self

    def dimensions(self) -> dict[str, str | None]:
        return {d: getattr(self, d) for d in DIMENSIONS}

    def passed(self, dimension: str) -> bool:
        return self.status == "scored" and getattr(self, dimension) == PASS_VALUE[dimension]


def passes_all(verdict: Verdict, dimensions: Sequence[str] = DIMENSIONS) -> bool:
    """Scored, and every one of `dimensions` passes."""
    return verdict.status == "scored" and all(verdict.passed(d) for d in dimensions)


def invalid_verdict(case: Case, judge: str, model: str | None = None) -> Verdict:
    return Verdict(
        case=case.id,
        status="invalid",
        judge=judge,
        model=model,
        notes=INVALID_NOTES,
        **dict.fromkeys(DIMENSIONS, "N/A"),
    )


def unscored_verdict(case: Case, judge: str, reason: str, **extra: Any) -> Verdict:
    return Verdict(case=case.id, status="unscored", judge=judge, reason=reason, **extra)
