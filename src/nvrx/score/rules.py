"""The deterministic offline judge: the five dimensions computed from the restart table, the
attribution text and the FR table, with no model and no network (docs/score.md).

Decision rules, written down because CI depends on them:
- `restart_correct`: the attribution's decision (STOP before RESTART, by substring) equals the
  restart table's; any other decision (none, ERRORS NOT FOUND) is `false`. NO LOGS and LLM
  FAILURE are the analyser's own failure: the case is unscored before any judge sees it.
- `rank_primary`: `true` when the primary issues name the injected rank and no other rank;
  `partial` when they name it among other ranks; `false` otherwise (named only as secondary, or
  not at all).
- `rank_any`: the injected rank is named anywhere in the attribution text.
- `fault_described`: the primary issues (else the whole text) name the fault (`true`), only its
  class — hang, crash, signal, exception — (`partial`), or neither (`false`).
- `fr_rank_correct`: `evidence.fr_scope` of the FR missing ranks.
- An answer of several restart cycles is judged on the first cycle that failed
  (`Attribution.judged`): the injected fault's.
"""

from __future__ import annotations

import time

from nvrx.logtext import STOP
from nvrx.score.evidence import RESTART_TABLE, Attribution, fault_description, fr_ranks, fr_scope
from nvrx.score.model import Case, Verdict, invalid_verdict, unscored_verdict

JUDGE_NAME = "rules"


def judge_rules(case: Case) -> Verdict:
    started = time.perf_counter()
    if case.problem is not None:
        return unscored_verdict(case, JUDGE_NAME, case.problem)
    truth = case.truth
    if not truth.run_valid:
        return invalid_verdict(case, JUDGE_NAME)
    answer = Attribution.parse(case.log_attribution)
    attribution = answer.judged()  # a log of several cycles: the cycle the fault ended
    expected, _ = RESTART_TABLE[truth.fault]
    expected_action = "STOP" if expected == STOP else "RESTART"
    restart_correct = "true" if attribution.decision == expected_action else "false"

    if truth.rank in attribution.primary_ranks:
        rank_primary = "true" if attribution.primary_ranks == {truth.rank} else "partial"
    else:
        rank_primary = "false"
    rank_any = "true" if truth.rank in attribution.ranks else "false"
    described, words = fault_description(truth.fault, attribution.primary or attribution.text)
    scope = fr_scope(fr_ranks(case.fr_output), truth)

    gaps = []
    if restart_correct == "false":
        gaps.append(f"decision {attribution.decision}, expected {expected_action}")
    if rank_primary != "true":
        where = (
            "among other primary ranks"
            if rank_primary == "partial"
            else "only in secondary issues"
            if truth.rank in attribution.secondary_ranks
            else "not in the primary issues"
        )
        gaps.append(f"rank {truth.rank} {where}")
    if described != "true":
        gaps.append(
            f"{truth.fault.value} described only as {', '.join(words)}"
            if words
            else f"{truth.fault.value} not described"
        )
    if scope != "rank":
        gaps.append(f"FR scope {scope}")
    notes = (
        "; ".join(gaps) + "."
        if gaps
        else f"Correct attribution of {truth.fault.value} on rank {truth.rank}."
    )
    if answer.cycles:
        notes += f" Judged on cycle {answer.cycles.index(attribution) + 1} of {len(answer.cycles)}."
    return Verdict(
        case=case.id,
        status="scored",
        judge=JUDGE_NAME,
        restart_correct=restart_correct,
        rank_primary=rank_primary,
        rank_any=rank_any,
        fault_described=described,
        fr_rank_correct=scope,
        notes=notes[0].upper() + notes[1:],
        latency_s=time.perf_counter() - started,
    )
