"""Which experiment the campaign window submits next (inject.window.choose), where idle nodes
come from (sinfo), and how the choice is recorded: the journal's `ahead_of`, the tracking file in
pool order, the window's settings across --resume."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvrx.campaign.errors import JournalError
from nvrx.campaign.session import Session
from nvrx.config import load_config
from nvrx.config.model import InjectSettings
from nvrx.inject.driver import Campaign, CampaignSpec
from nvrx.inject.plan import campaign_window
from nvrx.inject.window import Submit, Waiting, Window, WindowMode, choose
from nvrx.slurm import SlurmParseError
from nvrx.slurm.parse import parse_sinfo
from tests.test_slurm_replay import Replay, slurm_for

NODE_AWARE, STRICT = WindowMode.NODE_AWARE, WindowMode.STRICT


def pool(*nodes: int) -> list[Waiting]:
    return [Waiting(i, n) for i, n in enumerate(nodes)]


def aware(planned: list[Waiting], free: int, idle: int | None, **kw: object) -> list[Submit]:
    return choose(planned, free, idle, mode=NODE_AWARE, look_ahead=8, **kw)  # type: ignore[arg-type]


# --- the choice ---------------------------------------------------------------------------


def test_the_head_goes_first_whenever_it_fits() -> None:
    assert aware(pool(2, 2, 8), 2, 8) == [Submit(0), Submit(1)]
    assert aware(pool(8, 2), 1, 8) == [Submit(0)]


def test_a_later_entry_that_fits_goes_ahead_of_a_head_that_does_not() -> None:
    # A 2-node job runs: 6 of 8 nodes idle, the head needs 8.
    assert aware(pool(8, 8, 2, 2), 1, 6) == [Submit(2, ahead_of=0)]
    # Two free slots: both later entries that fit, in pool order, each within the idle nodes.
    assert aware(pool(8, 4, 2, 4), 2, 6) == [Submit(1, ahead_of=0), Submit(2, ahead_of=0)]
    assert aware(pool(8, 4, 4, 2), 2, 6) == [Submit(1, ahead_of=0), Submit(3, ahead_of=0)]


def test_a_head_passed_over_once_goes_next_even_before_it_fits() -> None:
    # Into Slurm's queue: the scheduler starts it the moment its nodes are free, and nothing
    # of this session overtakes it again.
    assert aware(pool(8, 2, 2), 1, 6, passed_over={0}) == [Submit(0)]
    assert aware(pool(8, 2, 2), 2, 6, passed_over={0}) == [Submit(0)]


def test_when_nothing_within_the_look_ahead_fits_the_head_queues_as_in_strict_order() -> None:
    assert aware(pool(8, 8, 8), 2, 6) == [Submit(0)]
    far = pool(8, *[8] * 8, 2)  # the only job that fits is 9 entries down
    assert aware(far, 1, 6) == [Submit(0)]
    assert choose(far, 1, 6, mode=NODE_AWARE, look_ahead=9) == [Submit(9, ahead_of=0)]


def test_strict_and_barrier_windows_and_unknown_idle_nodes_keep_pool_order() -> None:
    for mode in (WindowMode.STRICT, WindowMode.BARRIER):
        assert choose(pool(8, 2), 2, 6, mode=mode, look_ahead=8) == [Submit(0), Submit(1)]
    assert aware(pool(8, 2), 1, None) == [Submit(0)]  # sinfo failed: never a guess


def test_no_free_slot_or_no_planned_entry_submits_nothing() -> None:
    assert aware(pool(2), 0, 8) == []
    assert aware([], 3, 8) == []


def test_a_blocked_head_is_never_starved_by_a_stream_of_small_jobs() -> None:
    # Another user's job holds 2 of 8 nodes throughout, and each of ours still runs at the next
    # decision: 2-node jobs could keep the 8-node one waiting forever. It is passed over once.
    planned, passed, order = pool(2, 8, 2, 2, 2, 2), set[int](), []
    holding = 0
    while planned:
        (pick,) = aware(planned, 1, 6 - holding, passed_over=passed)
        order.append(pick)
        if pick.ahead_of is not None:
            passed.add(pick.ahead_of)
        holding = next(w.nodes for w in planned if w.index == pick.index)
        planned = [w for w in planned if w.index != pick.index]
    assert order[:3] == [Submit(0), Submit(2, ahead_of=1), Submit(1)]
    assert [p.index for p in order[3:]] == [3, 4, 5]


# --- idle nodes from sinfo ------------------------------------------------------------------

SINFO = """\
batch*|up|3|idle
batch*|up|2|idle~
batch*|up|1|idle*
batch*|up|1|planned
batch*|up|4|allocated
batch*|up|1|drained
gpu|up|6|idle
"""


def test_sinfo_counts_the_nodes_a_job_can_start_on_now() -> None:
    nodes = parse_sinfo(SINFO, None)  # the default partition (the one sinfo marks `*`)
    assert nodes is not None and (nodes.partition, nodes.total, nodes.idle) == ("batch", 12, 5)
    gpu = parse_sinfo(SINFO, "gpu")
    assert gpu is not None and (gpu.total, gpu.idle) == (6, 6)
    assert parse_sinfo(SINFO, "nosuch") is None


def test_a_partition_that_is_not_up_has_no_free_node() -> None:
    nodes = parse_sinfo("main*|down|8|idle\n", "main")
    assert nodes is not None and nodes.idle == 0


def test_a_damaged_sinfo_row_is_an_error_not_a_guess() -> None:
    with pytest.raises(SlurmParseError, match="node count"):
        parse_sinfo("main*|up|many|idle\n", None)
    with pytest.raises(SlurmParseError, match="fields"):
        parse_sinfo("main*|up\n", None)


# --- recorded: the journal, the tracking file, the settings ------------------------------------


def planned_session(tmp_path: Path, n: int) -> Session:
    session = Session.create(tmp_path)
    session.journal.append("session", spec={}, batch_size=2, window="node-aware", look_ahead=8)
    for i in range(n):
        session.journal.append(
            "planned", index=i, fault="SIGKILL", rank=0, iter=5, nodes=2 if i else 8, copy=0
        )
    return session


def submit(session: Session, index: int, job: str, ahead_of: int | None = None) -> None:
    extra = {"ahead_of": ahead_of} if ahead_of is not None else {}
    session.journal.append(
        "submitting", index=index, job_name=f"fi-s-{index}", comment=f"c{index}", **extra
    )
    session.journal.append("submitted", index=index, job_id=job, comment=f"c{index}")


def tsv_jobs(session: Session) -> list[str]:
    return [line.split("\t")[0] for line in session.tsv.read_text().splitlines()[1:]]


def test_the_journal_remembers_which_experiment_was_passed_over(tmp_path: Path) -> None:
    session = planned_session(tmp_path, 3)
    submit(session, 1, "101", ahead_of=0)
    state = session.state()
    assert state.passed_over == {0} and state.by_index[1].ahead_of == 0
    session.journal.append("submitting", index=2, job_name="x", comment="y", ahead_of=7)
    with pytest.raises(JournalError, match="line 7.*ahead_of"):
        session.state()


def test_the_tracking_file_keeps_pool_order_when_a_job_goes_ahead(tmp_path: Path) -> None:
    session = planned_session(tmp_path, 3)
    submit(session, 1, "101", ahead_of=0)
    session.track(session.state())
    assert tsv_jobs(session) == []  # held: experiment 0 is not submitted yet
    submit(session, 0, "100")
    session.track(session.state())
    submit(session, 2, "102")
    session.track(session.state())
    assert tsv_jobs(session) == ["100", "101", "102"]


def test_a_driver_that_stops_first_still_writes_every_job_that_ran(tmp_path: Path) -> None:
    session = planned_session(tmp_path, 3)
    submit(session, 1, "101", ahead_of=0)
    session.track(session.state(), flush=True)
    assert tsv_jobs(session) == ["101"]
    # --resume: a new driver reads the file, never repeats a row, and goes on.
    resumed = Session.open(session.dir)
    submit(resumed, 0, "100")
    submit(resumed, 2, "102")
    resumed.track(resumed.state())
    assert tsv_jobs(resumed) == ["101", "100", "102"]


def test_rows_a_killed_driver_had_not_written_are_written_by_the_next(tmp_path: Path) -> None:
    session = planned_session(tmp_path, 2)
    submit(session, 0, "100")  # journalled, then SIGKILL before the tracking row
    resumed = Session.open(session.dir)
    resumed.track(resumed.state())
    assert tsv_jobs(resumed) == ["100"]


def window_of(recorded: dict[str, object] | None, **cli: object) -> Window:
    loaded = load_config(cli={f"inject.{k}": (v, f"--{k}") for k, v in cli.items()}, environ={})
    return campaign_window(loaded, recorded)


def test_the_window_resumes_as_recorded_unless_this_command_line_says_otherwise() -> None:
    recorded = {"batch_size": 3, "window": "strict", "look_ahead": 4}
    assert window_of(None) == Window(2, NODE_AWARE, 8)
    assert window_of(recorded) == Window(3, STRICT, 4)
    assert window_of(recorded, window="barrier", batch_size=5) == Window(5, WindowMode.BARRIER, 4)
    # Recorded before the window had modes: that session ran in pool order, and goes on so.
    assert window_of({"batch_size": 3}) == Window(3, STRICT, 8)
    assert window_of({"batch_size": 3}, window="node-aware").mode is NODE_AWARE


def test_the_windows_defaults_are_the_configs() -> None:
    fields = InjectSettings.model_fields
    assert Window(2).mode.value == fields["window"].default
    assert Window(2).look_ahead == fields["look_ahead"].default


def test_an_unknown_window_is_refused_naming_it() -> None:
    from nvrx.config import ConfigError

    with pytest.raises(ConfigError, match="sideways"):
        load_config(cli={"inject.window": ("sideways", "--window")}, environ={})


# --- the driver's side: idle nodes less its own pending jobs, and a blind sinfo ---------------


class Notes:
    def __init__(self) -> None:
        self.notes: list[str] = []

    def submitted(self, *a: object) -> None: ...
    def ended(self, *a: object) -> None: ...
    def analysed(self, *a: object) -> None: ...
    def waiting(self, *a: object) -> None: ...

    def note(self, text: str) -> None:
        self.notes.append(text)


def driver(
    tmp_path: Path, sinfo: list[tuple[int | None, str, str]], *nodes: int
) -> tuple[Campaign, CampaignSpec, Session, Notes]:

    session = Session.create(tmp_path)
    session.journal.append("session", spec={})
    for i, n in enumerate(nodes):
        session.journal.append("planned", index=i, fault="SIGKILL", rank=0, iter=5, nodes=n, copy=0)
    notes = Notes()
    campaign = Campaign(session, slurm_for(Replay({"sinfo": sinfo})), notes, window=Window(2))
    spec = CampaignSpec("w", "/bin/true", 4, "00:10:00", partition="main")
    return campaign, spec, session, notes


def test_the_driver_counts_its_own_pending_jobs_out_of_the_idle_nodes(tmp_path: Path) -> None:
    campaign, spec, session, notes = driver(
        tmp_path, [(0, "main*|up|6|idle\nmain*|up|2|allocated\n", "")], 2, 8, 2
    )
    submit(session, 0, "100")  # submitted, not yet seen running: it will take 2 of the 6
    state = session.state()
    picks = campaign._choose(spec, state, 1)
    assert picks == [Submit(2, ahead_of=1)]
    assert notes.notes == [
        "SIGKILL:0:5:2 goes ahead of SIGKILL:0:5:8, which needs 8 nodes (4 idle)"
    ]


def test_a_sinfo_that_fails_means_pool_order_said_once(tmp_path: Path) -> None:
    down = (1, "", "slurm_load_partitions: Unable to contact slurm controller (connect failure)")
    campaign, spec, session, notes = driver(tmp_path, [down] * 200, 8, 2)
    state = session.state()
    for _ in range(2):
        assert campaign._choose(spec, state, 1) == [Submit(0)]
    assert len(notes.notes) == 1 and "idle nodes unknown" in notes.notes[0]
    assert "submitting in pool order" in notes.notes[0]
