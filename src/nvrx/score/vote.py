"""Several judges on one case: per-dimension majority, and how much they agreed.

A tie takes the worst tied value (model.ALLOWED is ordered worst first): a coin flip between
judges must not pass a CI threshold. When any judge could not score a case, the vote on it is
unscored with those judges' reasons. Invalid runs are invalid for every judge alike.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from nvrx.display import counted
from nvrx.score.model import ALLOWED, DIMENSIONS, Case, Usage, Verdict, invalid_verdict

JUDGE_NAME = "vote"


def majority(values: Sequence[str], dimension: str) -> str:
    counts = Counter(values)
    top = max(counts.values())
    tied = [v for v, n in counts.items() if n == top]
    order = ALLOWED[dimension]
    return min(tied, key=lambda v: order.index(v) if v in order else -1)


def vote(case: Case, verdicts: Sequence[Verdict]) -> Verdict:
    usage = sum((v.usage for v in verdicts), Usage())
    latency = max((v.latency_s for v in verdicts), default=0.0)
    voters = list(verdicts)
    if any(v.status == "invalid" for v in verdicts):
        return invalid_verdict(case, JUDGE_NAME).model_copy(
            update={"judges": voters, "usage": usage}
        )
    failed = [v for v in verdicts if v.status != "scored"]
    if failed:
        # A vote missing a voter is not the vote that was asked for: a broken judge must not
        # hide behind the ones that answered.
        reasons = "; ".join(f"{v.judge}: {v.reason}" for v in failed)
        return Verdict(
            case=case.id,
            status="unscored",
            judge=JUDGE_NAME,
            reason=(
                f"{len(failed)} of {counted(len(verdicts), 'judge')} could not score it ({reasons})"
            ),
            usage=usage,
            latency_s=latency,
            judges=voters,
        )
    dims: dict[str, str] = {}
    unanimous = 0
    for d in DIMENSIONS:
        values = [str(getattr(v, d)) for v in voters]
        dims[d] = majority(values, d)
        unanimous += len(set(values)) == 1
    notes = "; ".join(f"{v.judge}: {v.notes}" for v in voters if v.notes)
    return Verdict(
        case=case.id,
        status="scored",
        judge=JUDGE_NAME,
        notes=notes,
        agreement=unanimous / len(DIMENSIONS),
        usage=usage,
        latency_s=latency,
        cache_hit=all(v.cache_hit for v in voters),
        judges=voters,
        **dims,
    )
