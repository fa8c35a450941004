"""The live view of a campaign on a terminal (`inject-loop` when stdout is one): what is done,
running and queued, the pass rate so far, an ETA from the pace of the finished experiments, the
jobs in Slurm with their time since submission, and one screen whatever the pool's size."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console

from nvrx.campaign.session import Session
from nvrx.inject.output import RECENT_ENDED, LineReporter, progress_view
from nvrx.inject.window import Window

from .test_inject_report import session_with, verdict


def shown(session: Session, now: datetime, started: datetime) -> str:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(
        progress_view(session.state(), now, started)
    )
    return " ".join(out.getvalue().split())  # the title may wrap: compare words


def test_the_view_counts_rates_and_estimates_from_the_finished_experiments(tmp_path: Path) -> None:
    session = session_with(
        tmp_path,
        "20260101_000000",
        [("SEGFAULT:1:5:2", verdict()), ("GPU_SLEEP:0:5:2", verdict(rank_primary="false"))],
    )
    # A third experiment is in Slurm, a fourth still queued.
    from nvrx.campaign.pool import Experiment, FaultType
    from nvrx.inject.driver import CampaignSpec, record_session

    more = Session.create(tmp_path / "more", now=datetime(2026, 1, 2))
    spec = CampaignSpec(workload="w", script="s", gpus_per_node=4, time_limit="00:10:00")
    entries = [Experiment(FaultType("SIGKILL"), r, 5, 2) for r in range(4)]
    record_session(more, spec, entries, pool_source="t", settings={}, argv=[], window=Window(2))
    for i in range(2):
        more.journal.append("submitted", index=i, job_id=str(10 + i), comment="c")
        more.journal.append("ended", index=i, job_id=str(10 + i), state="FAILED")
        more.journal.append("analysed", index=i, validity="valid", reason="r", verdict=verdict())
    more.journal.append("submitted", index=2, job_id="12", comment="c")
    submitted = more.state().records[2].submitted_at
    assert submitted is not None
    now = submitted + timedelta(seconds=95)
    text = shown(more, now, started=now - timedelta(minutes=10))
    assert "2 done, 1 running, 1 queued" in text
    assert "pass rate so far 100% of 2 scored" in text
    assert "ETA 10:00" in text  # 10 minutes for 2 done: 10 more for the other 2
    assert "1:35" in text  # the running job, 95 s after its submission
    half = shown(session, now, started=now - timedelta(minutes=1))
    assert "pass rate so far 50% of 2 scored" in half  # one of two fails a stop dimension


def test_a_large_pool_still_fits_one_screen(tmp_path: Path) -> None:
    outcomes: list[tuple[str, dict[str, object] | None]] = [
        (f"SIGKILL:{r}:5:8", verdict()) for r in range(30)
    ]
    session = session_with(tmp_path, "20260101_000000", outcomes)
    now = datetime(2026, 1, 1, 1, tzinfo=UTC)
    text = shown(session, now, started=now - timedelta(hours=1))
    assert text.count("SIGKILL:") == RECENT_ENDED  # the last that ended; the report has all
    assert f"{30 - RECENT_ENDED} more" in text


def test_a_campaigns_notes_go_to_stderr_prefixed_never_among_its_progress_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    progress = io.StringIO()
    reporter = LineReporter(Console(file=progress, width=200, color_system=None))
    reporter.note("idle nodes unknown (sinfo timed out); submitting in pool order")
    assert progress.getvalue() == ""
    assert capsys.readouterr().err == (
        "nvrx: note: idle nodes unknown (sinfo timed out); submitting in pool order\n"
    )
