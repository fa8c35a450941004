"""The state a driver follows event by event is the state a fresh read of the journal gives."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nvrx.campaign.session import Session, SessionState

STATUSES = ("planned", "submitting", "submitted", "ended")


def _event(kind: str, index: int, n: int) -> dict[str, Any]:
    fields: dict[str, dict[str, Any]] = {
        "submitting": {
            "job_name": f"fi-s-{index}",
            "comment": f"c{index}",
            **({"ahead_of": (index + 1) % 4} if n % 3 == 0 else {}),
        },
        "submitted": {"job_id": str(100 + n), "comment": f"c{index}"},
        "not_submitted": {},
        "ended": {"job_id": str(100 + n), "state": "FAILED", "exit": "1:0"},
        "cancelled": {"reason": "cap"},
        "analysed": {"validity": "valid", "verdict": {"status": "scored", "n": n}},
    }
    return fields[kind]  # fmt: skip


def _view(state: SessionState) -> object:
    return (
        [
            (
                r.index,
                r.status,
                r.job_id,
                r.state,
                r.exit,
                r.cancelled,
                r.ahead_of,
                r.analysis,
                r.verdict,
                r.analysed_line,
                r.intent_at,
            )
            for r in state.records
        ],
        {s: [r.index for r in state.by_status(s)] for s in STATUSES},
        {s: state.count(s) for s in STATUSES},
        [r.index for r in state.first("planned", 2)],
        state.analysed_count,
        state.ended_order,
        sorted(state.passed_over),
        state.interruptions,
        state.lines,
    )


EVENTS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "submitting",
                "submitted",
                "not_submitted",
                "ended",
                "cancelled",
                "analysed",
                "interrupted",
            ]
        ),
        st.integers(0, 3),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(EVENTS)
def test_the_followed_state_is_always_what_a_fresh_read_gives(
    events: list[tuple[str, int]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        session = Session.create(Path(tmp))
        session.record("session", spec={})
        for i in range(4):
            session.record("planned", index=i, fault="SIGKILL", rank=i, iter=5, nodes=2, copy=0)
        followed = session.follow()
        for n, (kind, index) in enumerate(events):
            if kind == "interrupted":
                session.record("interrupted", cancelled=[])
            else:
                session.record(kind, index=index, **_event(kind, index, n))
            assert _view(followed) == _view(session.state())


def test_a_pass_asks_the_state_for_the_head_of_the_pool_not_the_whole_pool(tmp_path: Path) -> None:
    session = Session.create(tmp_path)
    session.record("session", spec={})
    with session.journal.path.open("a") as journal:  # 10,000 appends without 10,000 fsyncs
        for i in range(10_000):
            journal.write(
                f'{{"event": "planned", "index": {i}, "fault": "SIGKILL", "rank": 0, '
                f'"iter": {5 + i}, "nodes": 2}}\n'
            )
    state = session.follow()
    session.record("submitting", index=0, job_name="j", comment="c")
    session.record("not_submitted", index=0)
    session.record("submitting", index=5, job_name="j", comment="c")
    assert [r.index for r in state.first("planned", 6)] == [0, 1, 2, 3, 4, 6]
    assert state.count("planned") == 9_999 and state.count("submitting") == 1
    assert state.lines == 10_004  # the next error about a line names the right one
