"""Goodput: where a chain's wall time went. Every second is in exactly one category; what the
sources cannot tell is unknown, never productive."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nvrx.slurm.states import ExitStatus, JobState
from nvrx.watch.goodput import CATEGORIES, Shares, goodput
from nvrx.watch.model import CycleInfo, Cycles, GenerationSpan, SaveSeen
from nvrx.watch.state import WatchState, load_state, save_state

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def t(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def cycle(job: str, n: int, start: float, end: float | None) -> CycleInfo:
    return CycleInfo(
        job, 0, n, t(start), None if end is None else t(end), "", ("n1",), (), "0-1", 1,
        f"cycle_info.{job}.0.{n}",
    )  # fmt: skip


def test_a_failure_costs_the_work_since_the_last_save_and_the_restart() -> None:
    # Task 0 starts at 0; the first cycle at 10 fails at 110, 30 s after the last save (a pass
    # at 120 still saw that save); the launcher restarts at 130; training runs on at 330.
    g = goodput(
        [cycle("100", 0, 10, 110), cycle("100", 1, 130, None)],
        [GenerationSpan("100", t(0), None, JobState.RUNNING)],
        [SaveSeen(40, t(80), t(120))],
        t(330),
    )
    assert g.seconds == {
        "productive": 70 + 200, "progress_lost": 30, "stalled": 0, "restart_overhead": 20, "queue_wait": 0,
        "startup": 10, "checkpoint_save": 0, "unknown": 0,
    }  # fmt: skip
    assert g.wall == 330 and g.fraction == 270 / 330


def test_a_failure_without_a_save_proven_before_it_is_unknown_not_productive() -> None:
    # The pass that saw the save came before the failure: a later save may have been missed.
    g = goodput(
        [cycle("100", 0, 10, 110), cycle("100", 1, 130, None)],
        [GenerationSpan("100", t(0), None, JobState.RUNNING)],
        [SaveSeen(40, t(80), t(90))],
        t(330),
    )
    assert g.seconds["unknown"] == 100 and g.seconds["progress_lost"] == 0
    assert g.seconds["productive"] == 200
    assert g.notes[0] == (
        "1 ended cycle without a save proven before its end: its time is unknown"
    )  # said in the singular for one cycle (the timeline page shows the note too)


def test_generations_add_their_teardown_queue_wait_and_startup() -> None:
    g = goodput(
        [cycle("100", 0, 10, 150), cycle("200", 0, 270, 400)],
        [
            GenerationSpan("100", t(0), t(200), JobState.FAILED),
            GenerationSpan("200", t(260), t(410), JobState.COMPLETED),
        ],
        [SaveSeen(40, t(100), t(300))],
        t(1000),
    )
    assert g.end == t(410)  # the chain is over: wall time stops at its end
    assert g.seconds == {
        "productive": 90 + 130, "progress_lost": 50, "stalled": 0, "restart_overhead": 50,
            "queue_wait": 60,
        "startup": 10 + 10, "checkpoint_save": 0, "unknown": 10,  # the clean shutdown
    }  # fmt: skip
    assert g.wall == 410


def test_every_second_is_in_one_category_whatever_is_missing() -> None:
    cases: list[tuple[list[CycleInfo], list[GenerationSpan], list[SaveSeen]]] = [
        ([cycle("1", 0, 5, 50)], [], []),  # no accounting at all
        ([], [GenerationSpan("1", t(0), None, JobState.RUNNING)], []),  # no cycle file yet
        ([cycle("1", 0, 5, None)], [GenerationSpan("1", t(0), None, None)], []),
    ]
    for cycles, spans, saves in cases:
        g = goodput(cycles, spans, saves, t(100))
        assert set(g.seconds) == set(CATEGORIES)
        assert abs(g.wall - (g.end - g.start).total_seconds()) < 1e-6  # type: ignore[operator]
    pending = goodput([], [GenerationSpan("1", None, None, JobState.PENDING)], [], t(100))
    assert pending.start is None and pending.fraction is None and pending.wall == 0


# --- what passes remember for it ---------------------------------------------------------------


def test_passes_remember_each_save_and_until_when_it_was_the_last(tmp_path: Path) -> None:
    state = WatchState()
    state.see_checkpoint(40, t(80), t(90))
    state.see_checkpoint(40, t(80), t(120))  # still that save: no save in between
    state.see_checkpoint(60, t(200), t(210))
    assert state.saves == [SaveSeen(40, t(80), t(120)), SaveSeen(60, t(200), t(210))]
    state.see_spans([GenerationSpan("100", t(0), None, JobState.RUNNING)])
    spans = state.see_spans([GenerationSpan("100", t(0), t(300), JobState.FAILED)])
    assert spans == [GenerationSpan("100", t(0), t(300), JobState.FAILED)]
    save_state(state, tmp_path / "state.json")
    again = load_state(tmp_path / "state.json")
    assert again.saves == state.saves and again.spans == state.spans


def test_a_watch_pass_reports_the_goodput_it_can_prove(tmp_path: Path) -> None:
    from .test_watch_watcher import checkpoint_file, cycle_file, watch

    work = tmp_path / "w"
    now = datetime.now(UTC)
    checkpoint_file(work, "40\n", now - timedelta(minutes=20))
    cycle_file(work, "800", 0, now - timedelta(minutes=30), now - timedelta(minutes=10))
    cycle_file(work, "800", 1, now - timedelta(minutes=9), None)
    _, doc, _ = watch(work, tmp_path / "state")
    good = doc["goodput"]
    # This pass (after the failure) saw the save of 20 minutes ago: 10 minutes were lost.
    assert abs(good["seconds"]["progress_lost"] - 600) < 2
    assert abs(good["seconds"]["restart_overhead"] - 60) < 2
    assert abs(good["seconds"]["productive"] - (600 + 540)) < 5
    assert good["sources"]["progress_lost"].startswith("cycle files, and the checkpoint file")
    assert 0.6 < good["fraction"] < 0.7


def test_goodput_reports_a_chain_and_a_fleet_and_changes_nothing(tmp_path: Path) -> None:
    from .test_watch_watcher import healthy_run, nvrx_watch, stalled_run

    stalled_run(tmp_path / "team" / "stalled")
    healthy_run(tmp_path / "team" / "healthy")
    state = ("--platform", "none", "--state-dir", str(tmp_path / "state"))
    one = nvrx_watch("--goodput", "--work-dir", str(tmp_path / "team" / "healthy"), *state)
    assert one.returncode == 0, one.stderr
    assert "goodput of " in one.stdout and "100.0% of 20.0m" in one.stdout
    assert [line.split()[0] for line in one.stdout.splitlines()[2:10]] == list(CATEGORIES)
    doc = json.loads(
        nvrx_watch("--goodput", "--fleet", str(tmp_path / "team"), "--json", *state).stdout
    )
    assert len(doc["chains"]) == 2
    total = doc["goodput"]
    assert total["wall_seconds"] == pytest.approx(
        sum(c["goodput"]["wall_seconds"] for c in doc["chains"]), abs=0.01
    )
    assert not (tmp_path / "state" / "stalled").exists()
    assert not [p for p in (tmp_path / "state").rglob("*") if p.is_file()]  # no log line either
    # Under --platform none no sacct was read: no category names it as its source.
    assert "sacct" not in json.dumps(total["sources"])
    assert total["sources"]["queue_wait"].startswith("not read")
    assert "sacct" not in one.stdout
    refused = nvrx_watch("--goodput", "--act", "--work-dir", str(tmp_path), *state)
    assert refused.returncode == 2 and "--goodput only reads" in refused.stderr


def test_a_failure_before_any_save_loses_its_whole_cycle_when_a_pass_saw_no_file() -> None:
    cycles = [cycle("100", 0, 10, 110), cycle("100", 1, 130, None)]
    spans = [GenerationSpan("100", t(0), None, JobState.RUNNING)]
    seen = goodput(cycles, spans, [], t(330), unsaved_until=t(125))
    assert seen.seconds["progress_lost"] == 100 and seen.seconds["unknown"] == 0
    before = goodput(cycles, spans, [], t(330), unsaved_until=t(100))  # a pass before the end
    assert before.seconds["unknown"] == 100


def test_a_generation_that_cancelled_itself_after_exit_0_ended_cleanly() -> None:
    from nvrx.slurm.states import ExitStatus

    cycles = [cycle("100", 0, 10, 100)]
    clean = GenerationSpan("100", t(0), t(105), JobState.CANCELLED, ExitStatus(0, 0))
    killed = GenerationSpan("100", t(0), t(105), JobState.CANCELLED, ExitStatus(0, 15))
    assert goodput(cycles, [clean], [], t(200)).seconds["productive"] == 90
    failed = goodput(cycles, [killed], [], t(200)).seconds
    assert failed["unknown"] == 90 and failed["restart_overhead"] == 5  # torn down after it


# --- what a warm pass remembers: each unchanged generation's share -----------------------------


def unchanged_generations(tmp_path: Path) -> tuple[Callable[[], Cycles], Cycles]:
    """Three generations of four one-minute cycles a minute apart, each in its own directory,
    old enough for the cycle cache to trust; (a warm read, a read without any cache)."""
    from nvrx.watch.cyclecache import CycleCache
    from nvrx.watch.cycles import read_cycles

    from .test_watch_cycles import backdate, write

    root = tmp_path / "w"
    for g, job in enumerate(["101", "102", "103"]):
        directory = root / job / "cycle_infos"
        for i in range(4):
            begin = T0 + timedelta(minutes=10 * g + 2 * i)
            backdate(write(directory, job=job, cycle=i, generation="1",
                       start=begin.strftime("%Y-%m-%dT%H:%M:%SZ"),
                       end=(begin + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")))  # fmt: skip
        backdate(directory)
    pattern = [str(root / "*" / "cycle_infos" / "cycle_info.*")]
    cache = tmp_path / "cache.json"
    read_cycles(pattern, CycleCache(cache))
    return (lambda: read_cycles(pattern, CycleCache(cache))[0]), read_cycles(pattern, None)[0]


SPANS = [
    GenerationSpan(job, t(600 * g - 30), t(600 * g + 480), JobState.FAILED)
    for g, job in enumerate(["101", "102", "103"])
]


def test_a_closed_unchanged_generation_is_summed_once_then_remembered(tmp_path: Path) -> None:
    warm, uncached = unchanged_generations(tmp_path)
    saves = [SaveSeen(10, t(90), t(1800))]
    shares: Shares = {}
    first = goodput(warm(), SPANS, saves, t(1800), None, shares)
    assert len(shares) == 3  # one per closed block of an unchanged directory
    assert first == goodput(list(uncached), SPANS, saves, t(1800))  # the same figures
    again = warm()  # the next pass
    for block in again.blocks:
        block._load_columns = None  # a remembered share must not decode the columns
    assert goodput(again, SPANS, saves, t(1800), None, shares) == first


def test_a_remembered_share_is_not_reused_once_what_it_depends_on_changed(tmp_path: Path) -> None:
    read, uncached = unchanged_generations(tmp_path)
    warm = read()
    spans = list(SPANS)
    shares: Shares = {}
    before = goodput(warm, spans, [], t(1800), None, shares)
    assert before.seconds["progress_lost"] == 0  # no save proven: the failures are unknown
    # A later pass proves a save at 100 s held until the end: the first generation's failed
    # cycles lost only what they did after it.
    saves = [SaveSeen(10, t(100), t(1800))]
    after = goodput(warm, spans, saves, t(1800), None, shares)
    assert after == goodput(list(uncached), spans, saves, t(1800))
    assert after.seconds["progress_lost"] > 0 and after != before
    # So does an ending that accounting changed, and the next generation appearing.
    spans[0] = GenerationSpan("101", t(-30), t(480), JobState.COMPLETED, ExitStatus(0, 0))
    assert goodput(warm, spans, saves, t(1800), None, shares) == goodput(
        list(uncached), spans, saves, t(1800)
    )


def test_remembered_shares_survive_the_state_file_and_junk_is_dropped(tmp_path: Path) -> None:
    state = WatchState(goodput_shares={"/w/101/cycle_infos/cycle_info.*@0000abcd": [
        ["other", [["101", [True, False, 5]]], [[1, 2]], 7], [1, 2, 3, 4, 5]]})  # fmt: skip
    save_state(state, tmp_path / "state.json")
    assert load_state(tmp_path / "state.json").goodput_shares == state.goodput_shares
    raw = json.loads((tmp_path / "state.json").read_text())
    raw["goodput_shares"] = {"a": [[], [1, 2, "3", 4, 5]], "b": "junk", "c": [[], [1, 2, 3, 4, 5]]}
    (tmp_path / "state.json").write_text(json.dumps(raw))
    assert list(load_state(tmp_path / "state.json").goodput_shares) == ["c"]
    state.keep_shares(set())
    assert state.goodput_shares == {}


def test_an_open_cycle_a_detector_calls_hung_is_not_productive(tmp_path: Path) -> None:
    from .test_watch_watcher import cycle_file, watch

    # A cycle open for 3 h, no checkpoint update since it started: cycle_stalled says hung.
    work = tmp_path / "w"
    now = datetime.now(UTC)
    cycle_file(work, "810", 0, now - timedelta(hours=3), None)
    code, doc, _ = watch(work, tmp_path / "state")
    assert "cycle_stalled" in [f["detector"] for f in doc["findings"]] and code == 1
    good = doc["goodput"]
    assert good["fraction"] < 0.01
    assert abs(good["seconds"]["stalled"] - 3 * 3600) < 5
    # One step below the threshold: nothing is hung, the open cycle is training.
    _, calm, _ = watch(work, tmp_path / "state2", "--set", "watch.stall_seconds=20000")
    assert calm["goodput"]["seconds"]["stalled"] == 0 and calm["goodput"]["fraction"] > 0.99


def test_the_hung_time_starts_at_the_last_sign_of_progress() -> None:
    cycles = [cycle("100", 0, 0, None)]
    spans = [GenerationSpan("100", t(0), None, JobState.RUNNING)]
    g = goodput(cycles, spans, [], t(1000), stalled_since=t(400))
    assert (g.seconds["productive"], g.seconds["stalled"]) == (400, 600)
    assert goodput(cycles, spans, [], t(1000)).seconds["stalled"] == 0


# --- the no-restart verdict: the launcher gave up on a cycle that never advanced ---------------


def test_a_generation_that_ended_on_the_no_restart_verdict_trained_nothing_after_its_save() -> None:
    # The no-restart demo: the checkpoint was written at 5, the one cycle ran from 10 to 60
    # without advancing it, every launcher exited 93 and task 0's trap cancelled its own array,
    # so accounting shows CANCELLED 0:0, as a clean end does. A pass at 70 still saw the save.
    cycles = [cycle("75", 0, 10, 60)]
    saves = [SaveSeen(1, t(5), t(70))]
    verdict = GenerationSpan(
        "75", t(0), t(62), JobState.CANCELLED, ExitStatus(0, 0), no_restart=True
    )
    g = goodput(cycles, [verdict], saves, t(80))
    assert g.seconds["productive"] == 0 and g.fraction == 0
    assert g.seconds["progress_lost"] == 50  # the whole cycle: redone from the save at 5
    assert g.seconds["restart_overhead"] == 2  # its end to task 0's
    # The same ending without the verdict is a clean end: training finished.
    clean = GenerationSpan("75", t(0), t(62), JobState.CANCELLED, ExitStatus(0, 0))
    assert goodput(cycles, [clean], saves, t(80)).seconds["productive"] == 50


def test_the_verdict_is_read_from_the_flag_file_and_remembered(tmp_path: Path) -> None:
    from nvrx.config import WatchSettings
    from nvrx.watch.model import ChainRef
    from nvrx.watch.observe import observe_platforms
    from nvrx.watch.resolve import Target
    from tests.test_slurm_replay import Replay, slurm_for

    chain = ChainRef("demo", "alice", str(tmp_path), chain_id="c1", manifest_job_ids=("75",))
    flag = tmp_path / "nvrx" / "75" / "control" / "no_restart"
    flag.parent.mkdir(parents=True)
    flag.touch()
    replay = Replay({
        "squeue": [(0, "", "")],
        "sinfo": [(0, "", "")],
        "sacct": [(0, "75_0|75|CANCELLED by 0|0:0|1795944250|1795944260|n1|alice|demo\n", "")],
    })  # fmt: skip
    now = datetime.now(UTC)
    (platform,) = observe_platforms([Target(chain, (), None, "k")], slurm_for(replay),
                                    WatchSettings(), now)  # fmt: skip
    (span,) = platform.spans
    assert span.no_restart and not span.clean
    assert platform.endings[0].no_restart and not platform.endings[0].clean
    # Remembered in the state file, and kept once seen (a flag file cleaned up later, or a
    # state written before the verdict was remembered, does not make it a clean end).
    state = WatchState()
    state.see_spans([span])
    save_state(state, tmp_path / "state.json")
    again = load_state(tmp_path / "state.json")
    assert again.spans["75"].no_restart
    again.see_spans([replace(span, no_restart=False)])
    assert again.spans["75"].no_restart
    raw = json.loads((tmp_path / "state.json").read_text())
    raw["spans"] = [item[:5] for item in raw["spans"]]  # an older watcher's state
    (tmp_path / "state.json").write_text(json.dumps(raw))
    assert not load_state(tmp_path / "state.json").spans["75"].no_restart


def test_without_accounting_the_flag_file_says_the_last_cycle_was_not_productive(
    tmp_path: Path,
) -> None:
    from .test_watch_watcher import checkpoint_file, cycle_file, watch

    # The demo's chain seen with --platform none: checkpoint written before the one cycle,
    # which ran 4 minutes and ended on the verdict (the flag file).
    work = tmp_path / "w"
    now = datetime.now(UTC)
    checkpoint_file(work, "1\n", now - timedelta(minutes=6))
    cycle_file(work, "75", 0, now - timedelta(minutes=5), now - timedelta(minutes=1))
    _, unsaid, _ = watch(work, tmp_path / "state0")
    assert unsaid["goodput"]["seconds"]["unknown"] > 200  # how it ended: unknown, not productive
    (work / "nvrx" / "75" / "control").mkdir()
    (work / "nvrx" / "75" / "control" / "no_restart").touch()
    _, doc, _ = watch(work, tmp_path / "state")
    good = doc["goodput"]
    assert good["seconds"]["productive"] == 0 and good["fraction"] == 0
    assert abs(good["seconds"]["progress_lost"] - 240) < 2
