"""The `nvrx watch` detectors, one rule at a time (docs/watch.md).

Every detector is checked exactly at its boundary (fires) and one step below it (silent), plus its
gates. Times are seconds before NOW, the snapshot's observed_at.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nvrx.config import WatchSettings
from nvrx.slurm import DrainedNode, ExitStatus, JobState
from nvrx.watch import detectors
from nvrx.watch.detectors import DETECTORS, degraded, run_detectors
from nvrx.watch.model import (
    CancelPending,
    ChainRef,
    Checkpoint,
    CounterDrop,
    CycleInfo,
    Cycles,
    Finding,
    Generation,
    Platform,
    Severity,
    Snapshot,
    TaskZeroEnding,
)
from nvrx.watch.state import WatchState

NOW = datetime(2025, 2, 5, 14, 0, tzinfo=UTC)
JOB = "100"
HOST = "login1"

R, P = JobState.RUNNING, JobState.PENDING


# --- factories ---------------------------------------------------------------------------------


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def cycle(
    n: int,
    started: float,
    ran: float | None = 60.0,
    *,
    job: str = JOB,
    attempt: int = 0,
    nodes: tuple[str, ...] = ("n1", "n2"),
    standby: tuple[str, ...] = ("n9",),
) -> CycleInfo:
    """Cycle `n` of `job`, started `started` s before NOW, ran `ran` s (None: still open)."""
    start = ago(started)
    return CycleInfo(
        job_id=job,
        attempt_index=attempt,
        cycle_number=n,
        start=start,
        end=None if ran is None else start + timedelta(seconds=ran),
        log_file="",
        active_nodes=nodes,
        standby_nodes=standby,
        active_ranks="0-1",
        write_count=0 if ran is None else 1,
        path=f"/w/cycle_info.{job}.{attempt}.{n}",
    )


def series(starts: list[float], ran: float = 30.0, *, job: str = JOB) -> list[CycleInfo]:
    """Completed cycles 0, 1, … of `job` started at the given ages (oldest first)."""
    return [cycle(i, s, ran, job=job) for i, s in enumerate(starts)]


def gen(job_id: str, **tasks: JobState) -> Generation:
    """A live generation: gen("200", t0=R, t1=P) → tasks 0 RUNNING, 1 PENDING."""
    return Generation(job_id, {int(k[1:]): v for k, v in tasks.items()})


def ending(
    job_id: str,
    state: JobState = JobState.COMPLETED,
    ended: float | None = 3600.0,
    *,
    code: int = 0,
    no_restart: bool = False,
) -> TaskZeroEnding:
    return TaskZeroEnding(
        job_id=job_id,
        state=state,
        end=None if ended is None else ago(ended),
        exit=ExitStatus(code, 0),
        no_restart=no_restart,
    )


def queue(*generations: Generation, endings: tuple[TaskZeroEnding, ...] = ()) -> Platform:
    return Platform(queue_ok=True, generations=generations, endings=endings)


BLIND = Platform(queue_ok=False, queue_error="slurm_load_jobs error: Socket timed out")
LIVE = queue(gen(JOB, t0=R))  # the current generation is training


def snap(
    cycles: list[CycleInfo] | None = None,
    *,
    platform: Platform | None = None,
    checkpoint: Checkpoint | None = None,
    chain: ChainRef | None = None,
    at: datetime = NOW,
) -> Snapshot:
    return Snapshot(
        observed_at=at,
        host=HOST,
        chain=chain or ChainRef(name="train", user="alice", work_dir=None),
        cycles=Cycles.of(cycles or ()),
        checkpoint=checkpoint
        or Checkpoint(path="/w/checkpoints/latest_checkpointed_iteration.txt"),
        platform=platform,
    )


def cfg(**overrides: Any) -> WatchSettings:
    return WatchSettings.model_validate(overrides)


DEFAULT = cfg()


def keys(findings: list[Finding]) -> list[str]:
    return [f.key for f in findings]


# --- restart_storm -----------------------------------------------------------------------------


def test_storm_fires_when_storm_cycles_cycles_started_in_the_window() -> None:
    found = detectors.restart_storm(snap(series([1500, 1200, 900, 600, 300])), DEFAULT)
    assert keys(found) == ["nvrx-restart-storm-100"]
    assert found[0].severity is Severity.WARNING
    assert found[0].evidence["cycles"] == 5


def test_storm_is_silent_one_cycle_below_the_threshold() -> None:
    assert detectors.restart_storm(snap(series([1200, 900, 600, 300])), DEFAULT) == []


def test_storm_window_edge_is_inclusive() -> None:
    at_edge = series([1800, 1200, 900, 600, 300])
    assert keys(detectors.restart_storm(snap(at_edge), DEFAULT)) == ["nvrx-restart-storm-100"]


def test_storm_ignores_a_cycle_one_second_outside_the_window() -> None:
    outside = series([1801, 1200, 900, 600, 300])
    assert detectors.restart_storm(snap(outside), DEFAULT) == []


def test_storm_counts_only_the_current_generation() -> None:
    old = series([1700, 1600], job="99")
    new = [cycle(i, s, 30) for i, s in enumerate([1200, 900, 600, 300])]
    assert detectors.restart_storm(snap(old + new), DEFAULT) == []


def test_storm_counts_a_start_slightly_in_the_future_as_recent() -> None:
    skewed = series([1200, 900, 600, 300, -5])  # the writer's clock runs 5 s ahead
    assert keys(detectors.restart_storm(snap(skewed), DEFAULT)) == ["nvrx-restart-storm-100"]


def test_storm_counter_resets_after_a_cycle_that_ran_healthy_cycle_seconds() -> None:
    before = [cycle(0, 1790, 30), cycle(1, 1750, 30), cycle(2, 1700, 600)]  # 2 ran exactly 600 s
    after = [cycle(3 + i, s, 30) for i, s in enumerate([1000, 800, 600, 400])]
    assert detectors.restart_storm(snap(before + after), DEFAULT) == []
    # counting everything in the window (no reset) it would be a storm of 7
    assert detectors.restart_storm(snap(before + after), cfg(healthy_cycle_seconds=0)) != []


def test_storm_after_the_reset_needs_storm_cycles_new_cycles() -> None:
    before = [cycle(0, 1790, 30), cycle(1, 1750, 600)]
    after = [cycle(2 + i, s, 30) for i, s in enumerate([1100, 900, 700, 500, 300])]
    found = detectors.restart_storm(snap(before + after), DEFAULT)
    assert found[0].evidence["cycles"] == 5
    assert found[0].evidence["reset_at"] == ago(1150).isoformat()


def test_storm_cycle_starting_exactly_at_the_healthy_end_counts() -> None:
    before = [cycle(0, 1750, 600)]  # ends at 1150 s ago
    after = [cycle(1 + i, s, 30) for i, s in enumerate([1150, 900, 700, 500, 300])]
    assert keys(detectors.restart_storm(snap(before + after), DEFAULT)) == [
        "nvrx-restart-storm-100"
    ]


def test_storm_is_not_reset_by_a_cycle_one_second_short_of_healthy() -> None:
    cycles = [cycle(0, 1790, 30), cycle(1, 1750, 599)]
    cycles += [cycle(2 + i, s, 30) for i, s in enumerate([1100, 900, 700])]
    assert keys(detectors.restart_storm(snap(cycles), DEFAULT)) == ["nvrx-restart-storm-100"]


def test_storm_ends_when_the_latest_open_cycle_has_run_healthy_cycle_seconds() -> None:
    crashes = series([1500, 1400, 1300, 1200, 1100])
    running = cycle(5, 600, None)
    assert detectors.restart_storm(snap([*crashes, running]), DEFAULT) == []
    young = cycle(5, 599, None)
    assert detectors.restart_storm(snap([*crashes, young]), DEFAULT) != []


def test_storm_never_counts_a_dead_open_cycle_as_healthy() -> None:
    dead = cycle(0, 1790, None, attempt=0)  # writer killed: open forever, not the latest
    later = [cycle(i, s, 30, attempt=1) for i, s in enumerate([1100, 900, 700, 500])]
    assert keys(detectors.restart_storm(snap([dead, *later]), DEFAULT)) == [
        "nvrx-restart-storm-100"
    ]


def test_storm_is_silent_without_cycles() -> None:
    assert detectors.restart_storm(snap([]), DEFAULT) == []


# --- stalled_progress --------------------------------------------------------------------------


def ckpt(
    value: int | None = 1200,
    *,
    mtime: float | None = 5000.0,
    first_seen: float | None = None,
    save_interval: float | None = None,
) -> Checkpoint:
    return Checkpoint(
        path="/w/checkpoints/latest_checkpointed_iteration.txt",
        value=value,
        mtime=None if mtime is None else ago(mtime),
        first_seen=None if first_seen is None else ago(first_seen),
        save_interval_seconds=save_interval,
    )


def test_no_checkpoint_fires_after_stall_cycles_completed_cycles() -> None:
    found = detectors.stalled_progress(
        snap(series([3000, 2000, 1000]), checkpoint=ckpt(None, mtime=None)), DEFAULT
    )
    assert keys(found) == ["nvrx-no-checkpoint-100"]
    assert found[0].severity is Severity.CRITICAL


def test_no_checkpoint_ignores_the_open_cycle() -> None:
    cycles = [*series([3000, 2000]), cycle(2, 1000, None)]
    assert (
        detectors.stalled_progress(snap(cycles, checkpoint=ckpt(None, mtime=None)), DEFAULT) == []
    )


def test_stalled_progress_fires_at_stall_cycles_cycles_since_the_value_was_first_seen() -> None:
    cycles = series([4000, 3000, 2000, 1000], ran=300)
    found = detectors.stalled_progress(
        snap(cycles, checkpoint=ckpt(mtime=9000, first_seen=3000)), DEFAULT
    )
    assert keys(found) == [
        "nvrx-stalled-progress-100-1200"
    ]  # cycles at 3000 (== since), 2000, 1000
    assert found[0].evidence["stalled_cycles"] == 3


def test_stalled_progress_ignores_a_cycle_one_second_before_since() -> None:
    cycles = series([4000, 3001, 2000, 1000], ran=300)
    found = detectors.stalled_progress(
        snap(cycles, checkpoint=ckpt(mtime=9000, first_seen=3000)), DEFAULT
    )
    assert found == []


def test_stalled_progress_uses_the_checkpoint_mtime_when_first_seen_is_unknown() -> None:
    cycles = series([4000, 3000, 2000, 1000], ran=300)
    assert detectors.stalled_progress(snap(cycles, checkpoint=ckpt(mtime=3000)), DEFAULT) != []
    assert detectors.stalled_progress(snap(cycles, checkpoint=ckpt(mtime=2999)), DEFAULT) == []


def test_stalled_progress_is_silent_with_a_value_but_no_time_to_count_from() -> None:
    cycles = series([4000, 3000, 2000, 1000], ran=300)
    assert detectors.stalled_progress(snap(cycles, checkpoint=ckpt(mtime=None)), DEFAULT) == []


def test_stalled_progress_key_changes_with_the_checkpoint_value() -> None:
    cycles = series([3000, 2000, 1000], ran=300)
    found = detectors.stalled_progress(snap(cycles, checkpoint=ckpt(1300, mtime=3000)), DEFAULT)
    assert keys(found) == ["nvrx-stalled-progress-100-1300"]


def test_stalled_progress_requires_a_live_task_when_the_platform_is_known() -> None:
    s = snap(series([3000, 2000, 1000]), checkpoint=ckpt(None, mtime=None))
    assert detectors.stalled_progress(replace(s, platform=None), DEFAULT) != []
    assert detectors.stalled_progress(replace(s, platform=LIVE), DEFAULT) != []
    gone = queue(gen("101", t0=P))  # only the next generation is queued
    assert detectors.stalled_progress(replace(s, platform=gone), DEFAULT) == []


def test_stalled_progress_is_silent_when_the_queue_could_not_be_read() -> None:
    s = snap(series([3000, 2000, 1000]), checkpoint=ckpt(None, mtime=None), platform=BLIND)
    assert detectors.stalled_progress(s, DEFAULT) == []


def test_stalled_progress_says_when_cycles_are_shorter_than_the_save_interval() -> None:
    cycles = series([3000, 2000, 1000], ran=300)
    found = detectors.stalled_progress(
        snap(cycles, checkpoint=ckpt(mtime=3000, save_interval=900)), DEFAULT
    )
    assert "shorter than the checkpoint save interval" in found[0].summary
    assert "can never advance" in found[0].detail
    assert found[0].evidence["shorter_than_save_interval"] is True


def test_stalled_progress_does_not_blame_the_save_interval_when_cycles_are_long_enough() -> None:
    cycles = series([3000, 2000, 1000], ran=900)
    for interval in (900.0, None):
        found = detectors.stalled_progress(
            snap(cycles, checkpoint=ckpt(mtime=3000, save_interval=interval)), DEFAULT
        )
        assert "save interval" not in found[0].summary
        assert found[0].evidence["shorter_than_save_interval"] is False


def test_stalled_progress_uses_the_median_cycle_against_the_save_interval() -> None:
    cycles = [cycle(0, 3000, 100), cycle(1, 2000, 800), cycle(2, 1000, 950)]  # median 800
    found = detectors.stalled_progress(
        snap(cycles, checkpoint=ckpt(mtime=3000, save_interval=900)), DEFAULT
    )
    assert found[0].evidence["shorter_than_save_interval"] is True


# --- cycle_stalled -----------------------------------------------------------------------------


def test_cycle_stalled_fires_when_the_open_cycle_reaches_stall_seconds() -> None:
    found = detectors.cycle_stalled(snap([cycle(0, 8000), cycle(4, 3600, None)]), DEFAULT)
    assert keys(found) == ["nvrx-cycle-stalled-100.0.4"]
    assert found[0].severity is Severity.CRITICAL


def test_cycle_stalled_is_silent_one_second_below_stall_seconds() -> None:
    assert detectors.cycle_stalled(snap([cycle(4, 3599, None)]), DEFAULT) == []


def test_cycle_stalled_counts_from_a_checkpoint_written_during_the_cycle() -> None:
    cycles = [cycle(4, 7200, None)]
    assert detectors.cycle_stalled(snap(cycles, checkpoint=ckpt(mtime=3599)), DEFAULT) == []
    assert detectors.cycle_stalled(snap(cycles, checkpoint=ckpt(mtime=3600)), DEFAULT) != []


def test_cycle_stalled_counts_from_the_cycle_start_when_the_checkpoint_is_older() -> None:
    cycles = [cycle(4, 3600, None)]
    assert detectors.cycle_stalled(snap(cycles, checkpoint=ckpt(mtime=9000)), DEFAULT) != []


def test_cycle_stalled_is_silent_for_a_closed_latest_cycle() -> None:
    assert detectors.cycle_stalled(snap([cycle(4, 9000, 60)]), DEFAULT) == []


def test_cycle_stalled_never_fires_for_a_start_in_the_future() -> None:
    assert detectors.cycle_stalled(snap([cycle(4, -7200, None)]), cfg(stall_seconds=1)) == []


def test_cycle_stalled_requires_a_live_task_when_the_platform_is_known() -> None:
    s = snap([cycle(4, 3600, None)])
    assert detectors.cycle_stalled(replace(s, platform=LIVE), DEFAULT) != []
    assert detectors.cycle_stalled(replace(s, platform=queue()), DEFAULT) == []  # writer died
    assert detectors.cycle_stalled(replace(s, platform=BLIND), DEFAULT) == []


# --- restart_budget_low ------------------------------------------------------------------------

BUDGET = ChainRef(name="train", user="alice", work_dir=None, max_restarts=10)


def test_budget_low_fires_when_the_cycle_number_reaches_the_fraction_of_max_restarts() -> None:
    found = detectors.restart_budget_low(snap([cycle(8, 60)], chain=BUDGET), DEFAULT)
    assert keys(found) == ["nvrx-restart-budget-100-8"]
    assert found[0].evidence["restarts_left"] == 2


def test_budget_low_is_silent_one_cycle_below() -> None:
    assert detectors.restart_budget_low(snap([cycle(7, 60)], chain=BUDGET), DEFAULT) == []


def test_budget_low_is_silent_without_max_restarts() -> None:
    assert detectors.restart_budget_low(snap([cycle(99, 60)]), DEFAULT) == []


def test_budget_low_threshold_survives_float_rounding() -> None:
    assert 25 * 0.28 == 7.000000000000001  # binary floating point
    chain = replace(BUDGET, max_restarts=25)
    found = detectors.restart_budget_low(
        snap([cycle(7, 60)], chain=chain), cfg(budget_fraction=0.28)
    )
    assert keys(found) == ["nvrx-restart-budget-100-7"]


def test_budget_low_key_follows_the_cycle() -> None:
    found = detectors.restart_budget_low(snap([cycle(9, 60, None)], chain=BUDGET), DEFAULT)
    assert keys(found) == ["nvrx-restart-budget-100-9"]


# --- spares_exhausted --------------------------------------------------------------------------


def test_spares_exhausted_fires_without_standby_nodes_on_cycle_files_alone() -> None:
    found = detectors.spares_exhausted(snap([cycle(0, 60, None, standby=())]), DEFAULT)
    assert keys(found) == ["nvrx-spares-exhausted-100"]
    assert found[0].severity is Severity.INFO


def test_spares_exhausted_is_silent_with_a_standby_node() -> None:
    assert detectors.spares_exhausted(snap([cycle(0, 60, None, standby=("n9",))]), DEFAULT) == []


def test_spares_exhausted_counts_pending_tasks_as_spares() -> None:
    s = snap([cycle(0, 60, None, standby=())])
    assert (
        detectors.spares_exhausted(replace(s, platform=queue(gen(JOB, t0=R, t1=P))), DEFAULT) == []
    )
    assert (
        detectors.spares_exhausted(replace(s, platform=queue(gen(JOB, t0=R, t1=R))), DEFAULT) != []
    )


def test_spares_exhausted_is_silent_when_the_queue_could_not_be_read() -> None:
    s = snap([cycle(0, 60, None, standby=())], platform=BLIND)
    assert detectors.spares_exhausted(s, DEFAULT) == []


# --- drained_node_in_use ----------------------------------------------------------------------


def drained(name: str, ago_s: float | None = 600.0, reason: str = "xid 79") -> DrainedNode:
    return DrainedNode(name, "draining", None if ago_s is None else ago(ago_s), reason)


def drained_platform(*nodes: DrainedNode) -> Platform:
    """Generation JOB: task 0 on n1, task 1 on n3 and n4, task 2 pending; n3 drained."""
    generation = Generation(JOB, {0: R, 1: R, 2: P}, {0: ("n1",), 1: ("n3", "n4")})
    return Platform(queue_ok=True, generations=(generation,), drained=nodes or (drained("n3"),))


def test_a_running_task_on_a_drained_node_is_a_warning_with_how_long_and_why() -> None:
    (f,) = detectors.drained_node_in_use(snap(platform=drained_platform()), DEFAULT)
    assert (f.severity, f.key) == (Severity.WARNING, "nvrx-drained-node-100")
    assert f.summary == (
        "generation 100 runs on 1 drained node: n3 (task 1, draining for 10.0 min: 'xid 79')"
    )
    assert f.evidence["nodes"][0]["seconds_drained"] == 600.0
    assert f.command == ()  # it says so; the drain poller, not the watcher, moves the task


def test_drained_nodes_no_running_task_holds_are_not_a_finding() -> None:
    elsewhere = drained_platform(drained("n7"), drained("n8", None))
    assert detectors.drained_node_in_use(snap(platform=elsewhere), DEFAULT) == []
    two = drained_platform(drained("n3"), drained("n4", None, ""))
    (f,) = detectors.drained_node_in_use(snap(platform=two), DEFAULT)
    assert "n4 (task 1, draining since an unknown time)" in f.summary


def test_a_failed_sinfo_is_a_blind_pass_not_a_clean_one() -> None:
    platform = replace(drained_platform(), drained=None, drained_error="sinfo: timed out")
    s = snap(platform=platform)
    assert detectors.drained_node_in_use(s, DEFAULT) == []
    (blind,) = detectors.watch_blind(s, DEFAULT)
    assert blind.summary.startswith("sinfo failed: sinfo: timed out; chain state unknown")
    assert degraded(s)


# --- suspect_node ------------------------------------------------------------------------------


def short_on(node_sets: list[tuple[str, ...]]) -> list[CycleInfo]:
    return [cycle(i, 3000 - 1000 * i, 60, nodes=n) for i, n in enumerate(node_sets)]


SUSPECT_N2 = short_on([("n1", "n2"), ("n2", "n3"), ("n2", "n4")])
DRAINING = cfg(drain_suspects=True)


@pytest.mark.parametrize(
    ("platform", "said", "evidence"),
    [
        (LIVE, "not drained", []),
        (replace(LIVE, drained=(drained("n2"),)), "drained", ["n2"]),
        (replace(LIVE, drained=None), "drain state unknown", None),
    ],
)
def test_suspect_node_says_whether_its_node_is_drained_yet(
    platform: Platform, said: str, evidence: list[str] | None
) -> None:
    (f,) = detectors.suspect_node(snap(SUSPECT_N2, platform=platform), DEFAULT)
    assert f.summary.endswith(f"(correlation only; {said})")
    assert f.evidence["drained"] == evidence


def test_drain_suspects_offers_to_drain_one_node_not_drained_yet() -> None:
    (f,) = detectors.suspect_node(snap(SUSPECT_N2, platform=LIVE), DRAINING)
    assert f.command == (
        "scontrol", "update", "nodename=n2", "state=drain",
        "reason=nvrx watch suspect_node: in each of the last 3 short cycles of job 100",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("cycles", "platform", "settings"),
    [
        (SUSPECT_N2, LIVE, DEFAULT),  # not asked for: detect is not act
        (SUSPECT_N2, replace(LIVE, drained=(drained("n2"),)), DRAINING),  # drained already
        (SUSPECT_N2, replace(LIVE, drained=None), DRAINING),  # its state unknown
        (short_on([("n1", "n2", "n3")] * 3), LIVE, DRAINING),  # several nodes named
        (short_on([("n2",)] * 3), LIVE, DRAINING),  # every node the job ran on
    ],
)
def test_drain_suspects_never_drains_on_a_guess(
    cycles: list[CycleInfo], platform: Platform, settings: WatchSettings
) -> None:
    (f,) = detectors.suspect_node(snap(cycles, platform=platform), settings)
    assert f.command == ()


@pytest.mark.parametrize(
    ("node", "known", "why"),
    [
        ("ALL", None, "a Slurm keyword that names more than one node"),
        ("all", None, "a Slurm keyword"),
        ("DEFAULT", None, "a Slurm keyword"),
        ("n[1-8]", None, "invalid node name"),
        ("n1,n2", None, "invalid node name"),
        ("n1 n2", None, "invalid node name"),
        ("n99", frozenset({"n1", "n2"}), "'n99' is not a node Slurm lists"),
    ],
)
def test_a_drain_is_refused_unless_it_names_one_node_slurm_lists(
    node: str, known: frozenset[str] | None, why: str
) -> None:
    # Cycle files are anyone's who can write the work dir: `ALL` there must never reach
    # `scontrol update nodename=ALL`, which drains every node of the cluster.
    from nvrx.watch.detectors.observer import refuse_actions

    named = [replace(c, active_nodes=tuple(node if n == "n2" else n for n in c.active_nodes))
             for c in SUSPECT_N2]  # fmt: skip
    (f,) = detectors.suspect_node(snap(named, platform=LIVE), DRAINING)
    assert f.command  # the detector offers it: the name is vetted where the action is taken
    suspect, refused = sorted(refuse_actions([f], known), key=lambda g: g.detector != f.detector)
    assert suspect == replace(f, action=None)
    assert refused.detector == "action_refused" and refused.severity is Severity.WARNING
    assert why in refused.summary and refused.evidence["node"] == node
    assert refused.key == f"nvrx-action-refused-{f.key}"


def test_a_drain_of_one_node_slurm_lists_is_kept() -> None:
    from nvrx.watch.detectors.observer import refuse_actions

    (f,) = detectors.suspect_node(snap(SUSPECT_N2, platform=LIVE), DRAINING)
    assert refuse_actions([f], frozenset({"n1", "n2"})) == [f]
    assert refuse_actions([f], None) == [f]  # not asked (observe-only): the name alone holds


def test_suspect_node_names_the_node_common_to_the_trailing_short_cycles() -> None:
    cycles = [
        cycle(0, 3000, 60, nodes=("n1", "n2")),
        cycle(1, 2000, 60, nodes=("n2", "n3")),
        cycle(2, 1000, 60, nodes=("n2", "n4")),
    ]
    found = detectors.suspect_node(snap(cycles), DEFAULT)
    assert keys(found) == ["nvrx-suspect-node-100"]
    assert found[0].evidence["nodes"] == "n2"
    assert found[0].summary.startswith("node n2 was in each of the last 3 short cycles")
    assert found[0].severity is Severity.WARNING
    assert found[0].command == ()  # correlation only, never an action


def test_suspect_node_names_every_common_node_in_one_finding_per_generation() -> None:
    cycles = [cycle(i, s, 60, nodes=("n2", "n1", "n3")) for i, s in enumerate([3000, 2000, 1000])]
    found = detectors.suspect_node(snap(cycles), DEFAULT)
    assert keys(found) == ["nvrx-suspect-node-100"]  # one page, not one per node
    assert found[0].evidence["nodes"] == "n[1-3]"
    assert found[0].evidence["common_nodes"] == 3
    assert "3 nodes (n[1-3]) were in each" in found[0].summary


def test_suspect_node_is_silent_when_the_short_cycles_share_no_node() -> None:
    cycles = [
        cycle(0, 3000, 60, nodes=("n1", "n2")),
        cycle(1, 2000, 60, nodes=("n3", "n2")),
        cycle(2, 1000, 60, nodes=("n3", "n4")),
    ]
    assert detectors.suspect_node(snap(cycles), DEFAULT) == []


def test_suspect_node_needs_suspect_cycles_short_cycles_in_a_row() -> None:
    assert detectors.suspect_node(snap(series([2000, 1000], ran=60)), DEFAULT) == []


def test_suspect_node_a_cycle_of_exactly_short_cycle_seconds_is_not_short() -> None:
    cycles = [cycle(0, 4000, 60), cycle(1, 3000, 600), cycle(2, 2000, 60), cycle(3, 1000, 60)]
    assert detectors.suspect_node(snap(cycles), DEFAULT) == []
    cycles[1] = cycle(1, 3000, 599)
    assert detectors.suspect_node(snap(cycles), DEFAULT) != []


def test_suspect_node_intersects_only_the_last_suspect_cycles_of_the_run() -> None:
    cycles = [
        cycle(0, 4000, 60, nodes=("n1",)),  # n7 replaced n1 after this one
        cycle(1, 3000, 60, nodes=("n7",)),
        cycle(2, 2000, 60, nodes=("n7",)),
        cycle(3, 1000, 60, nodes=("n7",)),
    ]
    found = detectors.suspect_node(snap(cycles), DEFAULT)
    assert keys(found) == ["nvrx-suspect-node-100"]
    assert found[0].evidence["nodes"] == "n7"
    assert found[0].evidence["short_run"] == 4


def test_suspect_node_looks_at_completed_cycles_only() -> None:
    cycles = [*series([3000, 2000], ran=60), cycle(2, 100, None)]
    assert detectors.suspect_node(snap(cycles), DEFAULT) == []
    cycles = [*series([3000, 2000, 1000], ran=60), cycle(3, 100, None, nodes=("n8",))]
    assert detectors.suspect_node(snap(cycles), DEFAULT) != []


def test_suspect_node_counts_only_the_current_generation() -> None:
    cycles = [*series([3000, 2000], ran=60, job="99"), cycle(0, 1000, 60)]
    assert detectors.suspect_node(snap(cycles), DEFAULT) == []


# --- orphaned_generation -----------------------------------------------------------------------


def orphan_platform(
    *, task0: JobState | None = None, ended: float | None = 120.0, state: JobState = JobState.FAILED
) -> Platform:
    tasks = {"t1": P, "t2": P} | ({"t0": task0} if task0 is not None else {})
    return queue(gen("200", **tasks), endings=(ending("200", state, ended),))


def test_orphan_fires_once_grace_has_passed_since_task0_ended() -> None:
    found = detectors.orphaned_generation(snap(platform=orphan_platform(ended=120)), DEFAULT)
    assert keys(found) == ["nvrx-orphan-200"]
    assert found[0].action == CancelPending("200")  # what --act cancels: that generation
    assert found[0].command == ("scancel", "--state=PENDING", "200")
    assert found[0].severity is Severity.WARNING
    assert found[0].evidence["pending"] == 2


def test_orphan_is_silent_one_second_before_grace() -> None:
    assert detectors.orphaned_generation(snap(platform=orphan_platform(ended=119)), DEFAULT) == []


def test_orphan_fires_when_the_end_time_is_unknown() -> None:
    found = detectors.orphaned_generation(snap(platform=orphan_platform(ended=None)), DEFAULT)
    assert keys(found) == ["nvrx-orphan-200"]


def test_orphan_is_silent_for_an_end_in_the_future() -> None:
    assert detectors.orphaned_generation(snap(platform=orphan_platform(ended=-600)), DEFAULT) == []


def test_orphan_is_silent_while_task0_is_live() -> None:
    platform = orphan_platform(task0=JobState.COMPLETING)
    assert detectors.orphaned_generation(snap(platform=platform), DEFAULT) == []


def test_orphan_needs_pending_tasks() -> None:
    platform = queue(gen("200", t1=R), endings=(ending("200", JobState.FAILED, 600),))
    assert detectors.orphaned_generation(snap(platform=platform), DEFAULT) == []


@pytest.mark.parametrize("state", [JobState.UNKNOWN, JobState.RUNNING, JobState.PENDING])
def test_orphan_needs_a_terminal_task0_state_from_accounting(state: JobState) -> None:
    platform = orphan_platform(state=state)
    assert detectors.orphaned_generation(snap(platform=platform), DEFAULT) == []


def test_orphan_treats_accounting_silence_as_unknown_not_gone() -> None:
    platform = queue(gen("200", t1=P))  # no ending for 200
    assert detectors.orphaned_generation(snap(platform=platform), DEFAULT) == []


def test_orphan_checks_every_live_generation() -> None:
    platform = queue(
        gen("200", t1=P),
        gen("201", t0=R, t1=P),
        gen("202", t3=P),
        endings=(ending("200"), ending("202", JobState.CANCELLED)),
    )
    found = detectors.orphaned_generation(snap(platform=platform), DEFAULT)
    assert keys(found) == ["nvrx-orphan-200", "nvrx-orphan-202"]


def test_orphan_needs_the_queue() -> None:
    assert detectors.orphaned_generation(snap(platform=None), DEFAULT) == []
    blind = replace(orphan_platform(), queue_ok=False, queue_error="timeout")
    assert detectors.orphaned_generation(snap(platform=blind), DEFAULT) == []


# --- chain_exhausted ---------------------------------------------------------------------------

EXPECTED = ChainRef(name="train", user="alice", work_dir="/w", expect_running=True)


def test_chain_exhausted_fires_when_an_expected_chain_has_nothing_in_the_queue() -> None:
    found = detectors.chain_exhausted(snap(platform=queue(), chain=EXPECTED), DEFAULT)
    assert keys(found) == ["nvrx-chain-exhausted-train"]
    assert found[0].severity is Severity.CRITICAL


def test_chain_exhausted_says_when_the_no_restart_verdict_ended_the_chain() -> None:
    platform = queue(endings=(ending("200", code=0, no_restart=True),))
    (found,) = detectors.chain_exhausted(snap(platform=platform, chain=EXPECTED), DEFAULT)
    assert "generation 200 ended on the no-restart verdict" in found.detail
    assert found.evidence["no_restart_generation"] == "200"
    (plain,) = detectors.chain_exhausted(snap(platform=queue(), chain=EXPECTED), DEFAULT)
    assert "no-restart verdict" not in plain.detail


def test_a_chain_whose_last_generation_ended_cleanly_is_not_critical() -> None:
    done = queue(
        endings=(
            ending("199", ended=7200),
            ending("200", JobState.COMPLETED),
        )
    )
    at = Checkpoint(path="/w/c", value=5000)
    finished = replace(EXPECTED, train_iterations=5000)
    (found,) = detectors.chain_exhausted(
        snap(platform=done, chain=finished, checkpoint=at), DEFAULT
    )
    assert found.severity is Severity.INFO
    assert found.summary == "chain train finished training: checkpoint at iteration 5000 of 5000"
    # Short of the training's end: the chain ran out of generations, and training stopped.
    (short,) = detectors.chain_exhausted(
        snap(platform=done, chain=replace(finished, train_iterations=9000), checkpoint=at),
        DEFAULT,
    )
    assert short.severity is Severity.CRITICAL and "ran out of generations" in short.summary
    # The end unknown (a custom training command): it cannot tell, so a warning.
    (unsure,) = detectors.chain_exhausted(snap(platform=done, chain=EXPECTED), DEFAULT)
    assert unsure.severity is Severity.WARNING and "ended cleanly" in unsure.summary
    # The last ending failed: critical as before, whatever the checkpoint.
    failed = queue(endings=(ending("200", JobState.FAILED, code=1),))
    (bad,) = detectors.chain_exhausted(
        snap(platform=failed, chain=finished, checkpoint=at), DEFAULT
    )
    assert bad.severity is Severity.CRITICAL


def test_chain_exhausted_is_silent_while_one_task_is_queued() -> None:
    platform = queue(gen("300", t5=P))
    assert detectors.chain_exhausted(snap(platform=platform, chain=EXPECTED), DEFAULT) == []


def test_chain_exhausted_is_silent_when_the_chain_is_not_expected_to_run() -> None:
    chain = replace(EXPECTED, expect_running=False)
    assert detectors.chain_exhausted(snap(platform=queue(), chain=chain), DEFAULT) == []


def test_chain_exhausted_is_never_claimed_by_a_blind_watcher() -> None:
    s = snap(platform=BLIND, chain=EXPECTED)
    assert detectors.chain_exhausted(s, DEFAULT) == []
    assert keys(run_detectors(s, DEFAULT)) == [f"nvrx-watch-blind-{HOST}"]
    assert degraded(s)


def test_chain_exhausted_needs_the_platform() -> None:
    assert detectors.chain_exhausted(snap(platform=None, chain=EXPECTED), DEFAULT) == []


# --- chain_not_cancelled -----------------------------------------------------------------------


def test_no_restart_not_honoured_fires_when_another_generation_is_still_queued() -> None:
    platform = queue(gen("201", t0=P), endings=(ending("200", code=93, no_restart=True),))
    found = detectors.chain_not_cancelled(snap(platform=platform, chain=EXPECTED), DEFAULT)
    assert keys(found) == ["nvrx-no-restart-not-honoured-200"]
    assert found[0].severity is Severity.CRITICAL
    assert "nvrx submit-chain --cancel --work-dir /w" in found[0].detail
    assert found[0].command == ()  # detect ≠ act: only a suggestion


def test_no_restart_not_honoured_suggests_scancel_by_name_without_a_work_dir() -> None:
    platform = queue(gen("201", t0=R), endings=(ending("200", no_restart=True),))
    found = detectors.chain_not_cancelled(snap(platform=platform), DEFAULT)
    assert "scancel --state=PENDING --name=train --user=alice" in found[0].detail


def test_no_restart_is_read_from_the_chains_exit_code_too() -> None:
    platform = queue(gen("201", t0=P), endings=(ending("200", JobState.FAILED, code=42),))
    chain = replace(EXPECTED, no_restart_exit_code=42)
    assert detectors.chain_not_cancelled(snap(platform=platform, chain=chain), DEFAULT) != []
    assert detectors.chain_not_cancelled(snap(platform=platform, chain=EXPECTED), DEFAULT) == []


def test_no_restart_not_honoured_is_silent_when_nothing_else_is_live() -> None:
    platform = queue(gen("200", t1=P), endings=(ending("200", no_restart=True),))
    assert detectors.chain_not_cancelled(snap(platform=platform), DEFAULT) == []


def test_generations_added_by_extend_after_the_verdict_are_not_a_cancel_that_failed() -> None:
    # 200 ended with no-restart an hour ago; 201 was queued with it, 202 came with --extend.
    platform = queue(gen("201", t0=P), gen("202", t0=P), endings=(ending("200", no_restart=True),))
    chain = replace(
        EXPECTED,
        manifest_job_ids=("200", "201", "202"),
        manifest_submitted=(("200", ago(7200)), ("201", ago(7200)), ("202", ago(60))),
    )
    (found,) = detectors.chain_not_cancelled(snap(platform=platform, chain=chain), DEFAULT)
    assert "but generation 201 is still" in found.summary
    extended_only = queue(gen("202", t0=P), endings=(ending("200", no_restart=True),))
    assert detectors.chain_not_cancelled(snap(platform=extended_only, chain=chain), DEFAULT) == []


def test_no_restart_not_honoured_needs_the_queue() -> None:
    blind = replace(BLIND, endings=(ending("200", no_restart=True),))
    assert detectors.chain_not_cancelled(snap(platform=blind), DEFAULT) == []


# --- generation_churn --------------------------------------------------------------------------


def churn(*ended: float | None) -> Platform:
    return queue(endings=tuple(ending(str(200 + i), ended=e) for i, e in enumerate(ended)))


def test_churn_fires_above_max_generations_per_window() -> None:
    found = detectors.generation_churn(snap(platform=churn(100, 200, 300, 400)), DEFAULT)
    assert keys(found) == ["nvrx-generation-churn-train"]
    assert found[0].evidence["endings"] == 4


def test_churn_is_silent_at_exactly_max_generations_per_window() -> None:
    assert detectors.generation_churn(snap(platform=churn(100, 200, 300)), DEFAULT) == []


def test_churn_window_edge_is_inclusive() -> None:
    assert detectors.generation_churn(snap(platform=churn(100, 200, 300, 21600)), DEFAULT) != []
    assert detectors.generation_churn(snap(platform=churn(100, 200, 300, 21601)), DEFAULT) == []


def test_churn_does_not_count_an_unknown_end() -> None:
    assert detectors.generation_churn(snap(platform=churn(100, 200, 300, None)), DEFAULT) == []


def test_churn_is_silent_when_accounting_failed_or_there_is_no_platform() -> None:
    failed = replace(churn(100, 200, 300, 400), accounting_ok=False, accounting_error="x")
    assert detectors.generation_churn(snap(platform=failed), DEFAULT) == []
    assert detectors.generation_churn(snap(platform=None), DEFAULT) == []


# --- observer findings and degraded ------------------------------------------------------------


def test_a_failed_squeue_is_reported_as_a_blind_watcher() -> None:
    found = detectors.watch_blind(snap(platform=BLIND), DEFAULT)
    assert keys(found) == ["nvrx-watch-blind-login1"]
    assert found[0].summary == (
        "squeue failed: slurm_load_jobs error: Socket timed out; chain state unknown"
    )
    assert found[0].severity is Severity.WARNING


def test_a_failed_sacct_is_reported_separately() -> None:
    platform = queue(gen(JOB, t0=R))
    platform = replace(platform, accounting_ok=False, accounting_error="slurmdbd down")
    found = detectors.watch_blind(snap(platform=platform), DEFAULT)
    assert keys(found) == ["nvrx-watch-blind-accounting-login1"]
    assert "sacct failed: slurmdbd down" in found[0].summary


def test_degraded_means_squeue_or_sacct_failed() -> None:
    assert degraded(snap(platform=BLIND))
    assert degraded(snap(platform=replace(LIVE, accounting_ok=False)))
    assert not degraded(snap(platform=LIVE))
    assert not degraded(snap(platform=None))  # --platform none is not blind


def test_a_blind_pass_claims_nothing_about_the_chain_but_does_not_look_healthy() -> None:
    blind = replace(
        BLIND,
        generations=(gen("200", t1=P),),
        endings=(ending("200"), ending("199", no_restart=True)),
    )
    s = snap([cycle(0, 3600, None, standby=())], platform=blind, chain=EXPECTED)
    found = run_detectors(s, DEFAULT)
    assert keys(found) == [f"nvrx-watch-blind-{HOST}"]
    assert degraded(s)


def test_slurm_knowing_no_job_of_current_cycle_files_is_a_blind_pass() -> None:
    # A mistyped --job-name: squeue and sacct answer, for the wrong name, and list nothing,
    # while the cycle files show a cycle opened 3 h ago, inside the 6 h sacct was asked about.
    empty = replace(queue(), accounting_window=21600.0)
    s = snap([cycle(0, 3 * 3600, None)], platform=empty)
    (found,) = run_detectors(s, DEFAULT)
    assert found.key == f"nvrx-watch-blind-unseen-{HOST}" and found.severity is Severity.WARNING
    assert found.summary.startswith("Slurm knows no job 100 of name 'train', user alice:")
    assert "cycle 100.0.0 opened 3.0 h ago" in found.summary
    assert degraded(s)
    # Slurm knows the job (running, or ended within the window): seen, not blind.
    assert not degraded(replace(s, platform=replace(empty, generations=(gen(JOB, t0=R),))))
    assert not degraded(replace(s, platform=replace(empty, endings=(ending(JOB),))))
    # A cycle older than the window sacct covered: Slurm need not remember its job.
    assert not degraded(snap([cycle(0, 30000, 60)], platform=empty))
    # An nvrx chain is asked for by its ids: another chain's files in its work dir are not it.
    nvrx_chain = replace(EXPECTED, chain_id="abc", manifest_job_ids=("300",))
    assert not degraded(snap([cycle(0, 3 * 3600, None)], platform=empty, chain=nvrx_chain))
    mine = replace(nvrx_chain, manifest_job_ids=(JOB,))
    assert degraded(snap([cycle(0, 3 * 3600, None)], platform=empty, chain=mine))


# --- counter_regressed ---------------------------------------------------------------------------


def test_counters_that_went_back_are_reported_until_they_are_high_again() -> None:
    state = WatchState()
    five = [cycle(n, 600 - 60 * n) for n in range(6)]
    assert state.see_counters(250, five) == []
    # The checkpoint rolled back and cycle files 4 and 5 vanished.
    drops = state.see_counters(5, five[:4])
    assert drops == [
        CounterDrop("checkpoint", "iteration", 250, 5),
        CounterDrop("cycle", f"{JOB}.0", 5, 3),
    ]
    found = run_detectors(replace(snap(five[:4]), counter_drops=tuple(drops)), DEFAULT)
    regressed = [f for f in found if f.detector == "counter_regressed"]
    assert [f.summary for f in regressed] == [
        "checkpoint iteration went back from 250 to 5",
        f"cycle number of {JOB}.0 went back from 5 to 3",
    ]
    assert all(f.severity is Severity.WARNING for f in regressed)
    # Still below the highs: still reported; at them again: silent.
    assert len(state.see_counters(40, five[:5])) == 2
    assert state.see_counters(250, five) == []


def test_a_new_generation_or_attempt_is_not_a_counter_going_back() -> None:
    state = WatchState()
    assert state.see_counters(100, [cycle(n, 900 - 60 * n) for n in range(4)]) == []
    later = [cycle(0, 60, job="101"), cycle(0, 30, attempt=1)]
    assert state.see_counters(120, later) == []  # job 100's attempt 0 is gone: forgotten


# --- registry and run_detectors ----------------------------------------------------------------


def test_the_registry_lists_the_catalogue_in_order() -> None:
    assert list(DETECTORS) == [
        "orphaned_generation",
        "chain_exhausted",
        "chain_not_cancelled",
        "generation_churn",
        "drained_node_in_use",
        "restart_storm",
        "stalled_progress",
        "cycle_stalled",
        "restart_budget_low",
        "spares_exhausted",
        "suspect_node",
        "counter_regressed",
        "watch_blind",
    ]


def busy_snapshot(at: datetime = NOW) -> Snapshot:
    """A snapshot on which several detectors of every severity fire."""
    cycles = [cycle(i, s, 30, standby=()) for i, s in enumerate([1500, 1200, 900, 600, 300])]
    platform = queue(
        gen(JOB, t0=R),
        gen("200", t1=P),
        endings=(ending("200", JobState.FAILED, 600), ending("199", no_restart=True)),
    )
    chain = replace(EXPECTED, max_restarts=5)
    return snap(cycles, platform=platform, chain=chain, checkpoint=ckpt(None, mtime=None), at=at)


def test_run_detectors_sorts_by_severity_then_detector_then_key() -> None:
    found = run_detectors(busy_snapshot(), DEFAULT)
    order = [(f.severity.value, f.detector) for f in found]
    assert order == [
        ("critical", "chain_not_cancelled"),
        ("critical", "stalled_progress"),
        ("warning", "orphaned_generation"),
        ("warning", "restart_budget_low"),
        ("warning", "restart_storm"),
        ("warning", "suspect_node"),
        ("info", "spares_exhausted"),
    ]
    assert found == sorted(found, key=Finding.sort_key)


def test_run_detectors_skips_disabled_detectors() -> None:
    found = run_detectors(busy_snapshot(), cfg(disable=["suspect_node", "restart_storm"]))
    assert {f.detector for f in found}.isdisjoint({"suspect_node", "restart_storm"})
    assert any(f.detector == "orphaned_generation" for f in found)


def test_keys_are_stable_across_passes() -> None:
    first = keys(run_detectors(busy_snapshot(), DEFAULT))
    again = keys(run_detectors(busy_snapshot(), DEFAULT))
    later = keys(run_detectors(busy_snapshot(at=NOW + timedelta(seconds=30)), DEFAULT))
    assert first == again == later


def test_every_finding_explains_itself() -> None:
    found = run_detectors(busy_snapshot(), DEFAULT)
    found += run_detectors(snap(platform=replace(BLIND, accounting_ok=False)), DEFAULT)
    found += run_detectors(snap([cycle(4, 3600, None)]), DEFAULT)
    found += run_detectors(snap(platform=queue(), chain=EXPECTED), DEFAULT)
    found += run_detectors(snap(platform=churn(1, 2, 3, 4)), DEFAULT)
    drop = CounterDrop("checkpoint", "iteration", 250, 5)
    found += run_detectors(replace(snap(), counter_drops=(drop,)), DEFAULT)
    found += run_detectors(snap(platform=drained_platform()), DEFAULT)
    assert {f.detector for f in found} == set(DETECTORS)
    for f in found:
        assert f.summary and "\n" not in f.summary, f
        assert f.detail and f.runbook and f.evidence, f
        assert f.detector in DETECTORS
    assert [f.command for f in found if f.command] == [("scancel", "--state=PENDING", "200")]


def test_detectors_are_pure() -> None:
    s = busy_snapshot()
    for name, detector in DETECTORS.items():
        assert detector(s, DEFAULT) == detector(s, DEFAULT), name


# --- from NVRx cycle-info files ----------------------------------------------------------------


def nvrx_cycle_file(cycle_number: int, start: str, end: str, active: str) -> str:
    """A cycle-info file exactly as ft_launcher writes it (protobuf JSON, indent 2)."""
    return f"""{{
  "job_id": "{JOB}",
  "attempt_index": 0,
  "cycle_number": {cycle_number},
  "cycle_start_time": "{start}",
  "cycle_end_time": "{end}",
  "cycle_log_file": "/w/logs/train_cycle{cycle_number}.log",
  "active_nodes": "{active}",
  "standby_nodes": "",
  "generation": "{1 if end else 0}",
  "active_ranks": "0-3"
}}
"""


def test_detectors_read_cycles_parsed_from_nvrx_files() -> None:
    from nvrx.watch.cycleformat import parse_cycle_info

    texts = [
        nvrx_cycle_file(
            0, "2025-02-05T13:10:00.000000Z", "2025-02-05T13:12:00.500000Z", "node[001-004]"
        ),
        nvrx_cycle_file(
            1, "2025-02-05T13:20:00.000000Z", "2025-02-05T13:21:30.000000Z", "node[001-003,007]"
        ),
        nvrx_cycle_file(
            2, "2025-02-05T13:30:00.123456Z", "2025-02-05T13:31:00.000000Z", "node[002-004,007]"
        ),
        nvrx_cycle_file(3, "2025-02-05T13:40:00.000000Z", "", "node[002-004,007]"),
    ]
    cycles = [parse_cycle_info(t, f"/w/cycle_info.{JOB}.0.{i}") for i, t in enumerate(texts)]
    assert cycles[3].is_open and cycles[2].start == datetime(2025, 2, 5, 13, 30, 0, 123456, UTC)
    at = datetime(2025, 2, 5, 13, 45, tzinfo=UTC)  # 5 min into the open cycle 3
    found = run_detectors(snap(cycles, at=at), DEFAULT)
    assert keys(found) == [
        "nvrx-no-checkpoint-100",  # 3 completed cycles, no checkpoint value
        "nvrx-suspect-node-100",  # node[002-003]: in all three short completed cycles
        "nvrx-spares-exhausted-100",  # empty standby_nodes, --platform none
    ]


def test_suspect_node_stands_down_once_the_open_cycle_outlived_the_short_ones() -> None:
    short = series([3000, 2400, 1800], ran=60)
    found = detectors.suspect_node(snap([*short, cycle(3, 1200, None)]), DEFAULT)
    assert found == []  # the open cycle has run 1200 s >= short_cycle_seconds
    assert detectors.suspect_node(snap([*short, cycle(3, 300, None)]), DEFAULT) != []


def test_an_unreadable_checkpoint_is_not_reported_as_no_checkpoint() -> None:
    cycles = series([3000, 2400, 1800, 1200], ran=60)
    ckpt = Checkpoint(path="/w/ckpt", error="not an integer")
    assert detectors.stalled_progress(snap(cycles, checkpoint=ckpt), DEFAULT) == []


def test_spares_and_budget_findings_stand_down_when_the_generation_ended() -> None:
    cycles = [cycle(0, 900, 60, standby=()), cycle(1, 600, 60, standby=())]
    chain = ChainRef(name="train", user="alice", work_dir=None, max_restarts=1)
    ended = queue()  # nothing of the chain in the queue any more
    assert detectors.spares_exhausted(snap(cycles, platform=ended), DEFAULT) == []
    assert detectors.restart_budget_low(snap(cycles, platform=ended, chain=chain), DEFAULT) == []
    assert detectors.restart_budget_low(snap(cycles, platform=LIVE, chain=chain), DEFAULT) != []


def test_unreadable_cycle_files_make_the_pass_blind() -> None:
    s = replace(snap(), cycles_blind="/w/nvrx: directory not found")
    assert degraded(s)
    assert keys(run_detectors(s, DEFAULT)) == [f"nvrx-watch-blind-cycles-{HOST}"]
