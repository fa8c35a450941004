"""The experiment pool: what is accepted, what is refused (naming the entry), in what order."""

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nvrx.campaign.errors import JournalError, PoolError, SessionError
from nvrx.campaign.pool import (
    DEFAULT_POOL,
    NAMED_POOLS,
    Experiment,
    FaultType,
    build_pool,
    parse_entry,
    split_pool,
)
from nvrx.campaign.poolfile import pool_entries
from nvrx.campaign.session import Journal, replay
from nvrx.inject.window import Window
from nvrx.inject.workloads import WorkloadError, find_workload, load_registry


def build(entries: list[str], **kw: object) -> list[Experiment]:
    args = {"gpus_per_node": 4, "min_nodes": 2, "workload": "llama4_scout", **kw}
    return list(build_pool(entries, **args).experiments)  # type: ignore[arg-type]


def test_the_default_pool_is_upstreams_34_in_order() -> None:
    entries = split_pool(DEFAULT_POOL)
    assert len(entries) == 34
    assert entries[:2] == ["GPU_SLEEP:1:5:2", "GPU_SLEEP:0:5:2"]
    assert entries[12] == "GPU_ERROR:1:5:2" and entries[18] == "SIGKILL:1:5:2"
    assert entries[-1] == "SIGNAL_EXC:1:5:2"
    experiments = build(entries)
    assert {e.iteration for e in experiments} == {5}
    assert sum(e.fault is FaultType.GPU_SLEEP for e in experiments) == 12


def test_fault_types_are_the_12_and_case_insensitive() -> None:
    assert len(FaultType) == 12
    assert parse_entry("gpu_sleep:1:5:2") == Experiment(FaultType.GPU_SLEEP, 1, 5, 2)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("GPU_NAP:1:5:2", "unknown fault type 'GPU_NAP'"),
        ("GPU_SLEEP:8:5:2", "rank 8 is outside [0, 8) (2 nodes × 4 GPUs per node)"),
        ("GPU_SLEEP:1:5:1", "1 node is below workload llama4_scout's minimum of 2"),
        ("GPU_SLEEP:1:-5:2", "iteration -5 is negative"),
        ("GPU_SLEEP:-1:5:2", "rank -1 is negative"),
        ("GPU_SLEEP:1:5:0", "nodes 0 must be at least 1"),
        ("GPU_SLEEP:1:5", "malformed pool entry 'GPU_SLEEP:1:5'"),
        ("GPU_SLEEP:one:5:2", "malformed pool entry"),
        ("GPU_SLEEP:1.5:5:2", "malformed pool entry"),
    ],
)
def test_bad_entries_name_the_entry_and_the_problem(entry: str, message: str) -> None:
    with pytest.raises(PoolError) as err:
        build([entry])
    assert message in str(err.value)


def test_duplicates_are_refused_or_kept_in_their_own_directories() -> None:
    with pytest.raises(PoolError, match="duplicate pool entries: SIGKILL:1:5:2"):
        build(["SIGKILL:1:5:2", "GPU_SLEEP:1:5:2", "SIGKILL:1:5:2"])
    kept = build(["SIGKILL:1:5:2", "SIGKILL:1:5:2"], allow_duplicates=True)
    assert [e.dir_name for e in kept] == ["n2_SIGKILL_r1_i5", "n2_SIGKILL_r1_i5_dup1"]


def test_pools_from_a_name_a_file_or_a_string(tmp_path: Path) -> None:
    assert pool_entries("quick") == split_pool(NAMED_POOLS["quick"])
    path = tmp_path / "mine.txt"
    path.write_text("# hangs first\nGPU_SLEEP:1:5:2   # comment\n\nSIGKILL:0:5:2,SEGFAULT:1:5:2\n")
    assert pool_entries(str(path)) == ["GPU_SLEEP:1:5:2", "SIGKILL:0:5:2", "SEGFAULT:1:5:2"]
    assert pool_entries("GPU_SLEEP:1:5:2 SIGKILL:0:5:2") == ["GPU_SLEEP:1:5:2", "SIGKILL:0:5:2"]
    with pytest.raises(PoolError, match="is not a pool name"):
        pool_entries(str(tmp_path / "missing.txt"))
    with pytest.raises(PoolError, match="the pool is empty"):
        build(pool_entries("# nothing\n"))


def test_an_inline_pool_longer_than_a_file_name_is_entries_not_a_crash() -> None:
    long = " ".join(f"SIGKILL:{i % 4}:{i}:2" for i in range(30))
    assert len(long) > 255
    assert pool_entries(long) == long.split()


def test_every_named_pool_fits_its_workload() -> None:
    registry = load_registry()
    for name in ("llama4_scout", "n3_super", "cpu_fault_demo"):
        w = find_workload(name, registry)
        assert w.pool is not None
        build_pool(
            pool_entries(w.pool),
            gpus_per_node=w.gpus_per_node or 4,
            min_nodes=w.min_nodes,
            workload=name,
        )
    with pytest.raises(WorkloadError, match="unknown workload 'nope' \\(known: cpu_fault_demo"):
        find_workload("nope", registry)


def test_the_quick_pool_has_a_hang_a_crash_a_signal_and_an_exception_on_2_and_4_nodes() -> None:
    quick = build(pool_entries("quick"), gpus_per_node=2)
    faults = {e.fault for e in quick}
    assert {
        FaultType.GPU_SLEEP,
        FaultType.SEGFAULT,
        FaultType.SIGKILL,
        FaultType.WORKLOAD_EXC,
    } <= faults
    assert {e.nodes for e in quick} == {2, 4}


@given(st.text(max_size=60))
def test_the_parser_never_crashes_on_anything(text: str) -> None:
    try:
        entries = split_pool(text)
        for entry in entries:
            parse_entry(entry)
    except PoolError:
        pass


@given(
    st.sampled_from([f.value for f in FaultType]),
    st.integers(-3, 40),
    st.integers(-3, 20),
    st.integers(-1, 9),
)
def test_a_well_formed_entry_is_accepted_exactly_when_it_fits(
    fault: str, rank: int, iteration: int, nodes: int
) -> None:
    entry = f"{fault}:{rank}:{iteration}:{nodes}"
    fits = rank >= 0 and iteration >= 0 and nodes >= 2 and rank < nodes * 4
    try:
        build([entry])
    except PoolError:
        assert not fits
    else:
        assert fits


def test_the_session_state_is_a_fold_of_the_journal(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    journal.append("session", spec={})
    for i, (fault, rank) in enumerate([("GPU_SLEEP", 1), ("SIGKILL", 0), ("SEGFAULT", 1)]):
        journal.append("planned", index=i, fault=fault, rank=rank, iter=5, nodes=2, copy=0)
    journal.append("submitting", index=0, job_name="fi-s-0", comment="c0")
    journal.append("submitted", index=0, job_id="10", comment="c0 nvrx-submit=x")
    journal.append("submitting", index=1, job_name="fi-s-1", comment="c1")
    journal.append("ended", index=0, job_id="10", state="FAILED", exit="0:9", start=None, end=None)
    with open(journal.path, "a") as handle:
        handle.write('{"event": "submitted", "index": 2, "jo')  # a crash mid-write
    state = replay(journal.read(), tmp_path)
    assert [r.status for r in state.records] == ["ended", "submitting", "planned"]
    assert (state.records[0].state, state.records[0].exit) == ("FAILED", "0:9")
    assert state.records[1].comment == "c1"
    assert state.records[2].dir == tmp_path / "n2_SEGFAULT_r1_i5"


def test_a_write_cut_by_a_crash_is_kept_aside_and_cannot_spoil_the_next_line(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    journal.append("session", spec={})
    journal.append("planned", index=0, fault="SEGFAULT", rank=1, iter=5, nodes=2, copy=0)
    with open(journal.path, "a") as handle:
        handle.write('{"event": "submitted", "index": 0, "jo')  # a crash mid-write
    assert replay(journal.read(), tmp_path).torn_tail
    journal.append("submitting", index=0, job_name="fi-s-0", comment="c0")  # the resumed driver
    read = journal.read()
    assert not read.torn_tail and [ev["event"] for _, ev in read.events] == [
        "session",
        "planned",
        "submitting",
    ]
    assert (
        tmp_path / "journal.jsonl.torn"
    ).read_text() == '{"event": "submitted", "index": 0, "jo\n'
    # A whole record that only lost its newline is kept in place.
    with open(journal.path, "a") as handle:
        handle.write('{"event": "interrupted"}')
    journal.append("interrupted")
    assert replay(journal.read(), tmp_path).interruptions == 2


def test_a_damaged_line_in_the_middle_is_an_error_unless_forced(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    journal.append("session", spec={})
    with open(journal.path, "a") as handle:
        handle.write("\x00\xff not json\n")
    journal.append("planned", index=0, fault="SEGFAULT", rank=1, iter=5, nodes=2, copy=0)
    with pytest.raises(JournalError, match=r"journal.jsonl line 2: not JSON"):
        journal.read()
    state = replay(journal.read(force=True), tmp_path, force=True)
    assert state.skipped_lines == (2,) and len(state.records) == 1


@pytest.mark.parametrize("body", ["bar", "[1, 2]", "7"])
def test_a_workload_that_is_not_a_mapping_is_a_one_line_error(tmp_path: Path, body: str) -> None:
    extra = tmp_path / "workloads.yaml"
    extra.write_text(f"foo: {body}\n")
    with pytest.raises(
        WorkloadError, match=f"workload 'foo' in {extra} must be a mapping of settings"
    ):
        load_registry(extra)


@pytest.mark.parametrize("spec", [None, "not a spec", {"workload": "w", "no_such_field": 1}])
def test_a_journal_without_a_usable_campaign_spec_is_a_pool_error(spec: object) -> None:
    from nvrx.inject.driver import CampaignSpec

    with pytest.raises(SessionError, match="the session's journal has"):
        CampaignSpec.from_json(spec)


class _Notes:
    """A Reporter that keeps the notes (the other callbacks are not reached here)."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected reporter call {name}")


def test_an_open_intent_is_called_never_submitted_only_once_it_had_time_to_show(
    tmp_path: Path,
) -> None:
    from datetime import timedelta

    from nvrx.campaign.session import Session, utcnow
    from nvrx.inject.driver import Campaign
    from tests.test_slurm_replay import Replay, slurm_for

    session = Session.create(tmp_path)
    session.journal.append("session", spec={})
    session.journal.append("planned", index=0, fault="SIGKILL", rank=0, iter=5, nodes=2, copy=0)
    session.journal.append("submitting", index=0, job_name="fi-s-0", comment="nvrx-fi=s/0")
    # The queue and accounting know no such job, twice.
    replay = Replay({"squeue": [(0, "", "")] * 2, "sacct": [(0, "", "")] * 2})
    reporter = _Notes()
    campaign = Campaign(session, slurm_for(replay), reporter, window=Window(2))

    campaign._reconcile(session.state())  # sbatch's answer may just have been lost: wait
    assert [r.status for r in session.state().records] == ["submitting"]
    assert "no job yet; deciding after" in reporter.notes[-1]

    state = session.state()
    state.records[0].intent_at = utcnow() - timedelta(minutes=5)
    campaign._reconcile(state)  # long enough: it never became a job
    assert [r.status for r in session.state().records] == ["planned"]


def test_a_campaign_whose_journal_has_no_spec_ends_with_an_error_not_a_traceback(
    tmp_path: Path,
) -> None:
    from nvrx.campaign.session import Session
    from nvrx.inject.driver import Campaign
    from tests.test_slurm_replay import Replay, slurm_for

    session = Session.create(tmp_path)
    session.journal.append("session", spec="damaged")
    campaign = Campaign(session, slurm_for(Replay({})), _Notes(), window=Window(2))
    outcome = campaign.run()
    assert outcome.error is not None and "no campaign spec" in outcome.error
    assert session.state().gpus_per_node(default=4) == 4


def test_the_n3_super_pool_is_upstreams_8_node_file_entry_for_entry() -> None:
    assert pool_entries("n3_super") == [
        "GPU_SLEEP:1:5:8", "GPU_SLEEP:0:5:8", "GPU_SLEEP:16:5:8", "GPU_SLEEP:31:5:8",
        "GPU_ERROR:1:5:8", "GPU_ERROR:0:5:8", "SIGKILL:1:5:8",
    ]  # fmt: skip


# An upstream-format registry, as a site keeps it beside upstream's scripts.
WORKLOADS_CONF = """\
# workloads.conf: NAME  SCRIPT  BASE_EXPERIMENTS_DIR  DESCRIPTION  POOL_FILE  TIME
#
llama4_scout  l4_gb200_reduced.sh   /lustre/exp/llama4   Llama4-Scout_(reduced_layers)_on_GB200  -  -
n3_super      n3_super_gb200_fi.sh  -                    Nemotron3-Super_on_GB200  n3_super_8node.txt  00:45:00
llama4_scout  other.sh  /elsewhere  Second_line  -  -
"""


def test_upstreams_workloads_conf_is_a_registry(tmp_path: Path) -> None:
    scripts = tmp_path / "scripts"
    (scripts / "pools").mkdir(parents=True)
    conf = scripts / "workloads.conf"
    conf.write_text(WORKLOADS_CONF)
    registry = load_registry(conf)
    scout = find_workload("llama4_scout", registry)
    assert scout.script == scripts / "l4_gb200_reduced.sh"  # relative to the file
    assert scout.script_dir == scripts  # NVRX_ATTR_SCRIPT_DIR
    assert scout.base_experiments_dir == Path("/lustre/exp/llama4")
    assert scout.description == "Llama4-Scout (reduced layers) on GB200"
    assert scout.pool is None and scout.time is None  # `-`: the defaults
    n3 = find_workload("n3_super", registry)
    assert n3.pool == str(scripts / "pools" / "n3_super_8node.txt")
    assert n3.time == "00:45:00" and n3.base_experiments_dir is None
    assert find_workload("cpu_fault_demo", registry).min_nodes == 2  # the shipped ones stay


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("lonely", "got 1 column"),
        ("a b c d e f g", "got 7 column"),
        ("x s.sh - d - soon", "invalid time limit .soon."),
    ],
)
def test_a_bad_workloads_conf_line_is_named(tmp_path: Path, line: str, says: str) -> None:
    conf = tmp_path / "workloads.conf"
    conf.write_text(line + "\n")
    with pytest.raises(WorkloadError, match=f"workloads.conf line 1.*{says}|{says}"):
        load_registry(conf)
