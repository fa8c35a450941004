"""`nvrx watch --fleet PATH...`: every chain of a team in one pass. Each chain gets today's
pass; a chain that cannot be read is blind, never healthy, and hides no other; the exit code is
the worst chain's; a node failing in two chains is one fleet finding; one textfile, one
document, one Slurm query for all."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from nvrx.config import WatchSettings
from nvrx.slurm import DrainedNode
from nvrx.watch.fleet import FleetError, build_fleet, discover

from .test_watch_watcher import cycle_file, healthy_run, nvrx_watch, stalled_run


def fleet(tmp_path: Path, *paths: Path, extra: tuple[str, ...] = ()) -> tuple[int, dict[str, Any]]:
    proc = nvrx_watch(
        "--fleet", *map(str, paths), "--platform", "none", "--state-dir", str(tmp_path / "state"),
        "--json", *extra,
    )  # fmt: skip
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


def restarting_run(work: Path, node_set: str = "n[1-2]") -> None:
    """Two cycles of one generation that each ended (restarted) within the hour, on n1 and n2."""
    now = datetime.now(UTC)
    for i in range(2):
        start = now - timedelta(minutes=40 - 15 * i)
        cycle_file(work, "700", i, start, start + timedelta(minutes=10))
    cycle_file(work, "700", 2, now - timedelta(minutes=5), None)


# --- which chains ---------------------------------------------------------------------------


def test_discovery_finds_chains_below_a_path_to_the_depth_it_is_given(tmp_path: Path) -> None:
    team = tmp_path / "team"
    for where in ("a", "group/b", "group/deeper/still/c", ".hidden/d"):
        healthy_run(team / where)
    (team / "group" / "loop").symlink_to(team)  # never followed
    (team / "notes").mkdir()
    assert discover([team], 3) == [team / "a", team / "group" / "b"]
    assert discover([team], 4)[-1] == team / "group" / "deeper" / "still" / "c"
    assert discover([team / "a"], 0) == [team / "a"]  # a PATH that is a chain itself
    assert discover([team, team / "a"], 1) == [team / "a"]  # each chain once
    with pytest.raises(FleetError, match="nope: no such directory"):
        discover([team / "nope"], 3)
    (team / "a-file").write_text("")
    with pytest.raises(FleetError, match="a-file: not a directory"):
        discover([team / "a-file"], 3)


def test_a_chain_dir_holds_no_chains_and_its_own_dirs_are_not_searched(tmp_path: Path) -> None:
    healthy_run(tmp_path / "outer")
    healthy_run(tmp_path / "outer" / "checkpoints" / "inner")
    assert discover([tmp_path], 3) == [tmp_path / "outer"]


# --- one pass over all ----------------------------------------------------------------------


def test_one_pass_reports_every_chain_and_exits_with_the_worst(tmp_path: Path) -> None:
    stalled_run(tmp_path / "team" / "stalled")
    healthy_run(tmp_path / "team" / "healthy")
    code, doc = fleet(tmp_path, tmp_path / "team")
    assert code == 1  # the stalled chain is critical
    assert doc["fleet"] is True and doc["exit_code"] == 1
    chains = {Path(c["work_dir"]).name: c for c in doc["chains"]}
    assert set(chains) == {"stalled", "healthy"}
    assert chains["healthy"]["state"] == "ok" and chains["healthy"]["findings"] == []
    assert chains["stalled"]["state"] == "critical"
    assert "stalled_progress" in {f["detector"] for f in chains["stalled"]["findings"]}
    # The chain's own pass object, as `watch --work-dir` prints it.
    assert chains["stalled"]["snapshot"]["checkpoint"]["value"] == 40


def test_a_chain_that_cannot_be_read_is_blind_and_hides_no_other(tmp_path: Path) -> None:
    healthy_run(tmp_path / "team" / "healthy")
    broken = tmp_path / "team" / "broken"
    broken.mkdir(parents=True)
    (broken / "chain.json").write_text("{not json")
    code, doc = fleet(tmp_path, tmp_path / "team")
    assert code == 3
    chains = {Path(c["work_dir"]).name: c for c in doc["chains"]}
    assert chains["broken"]["state"] == "blind" and chains["broken"]["degraded"] is True
    assert "chain.json" in chains["broken"]["error"]
    assert chains["healthy"]["state"] == "ok"


def test_the_summary_table_has_a_row_per_chain(tmp_path: Path) -> None:
    stalled_run(tmp_path / "team" / "stalled")
    healthy_run(tmp_path / "team" / "healthy")
    proc = nvrx_watch(
        "--fleet", str(tmp_path / "team"), "--platform", "none",
        "--state-dir", str(tmp_path / "state"),
    )  # fmt: skip
    assert proc.returncode == 1  # the stalled chain is critical
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("nvrx watch: 2 chains")
    assert lines[0].endswith("  CRITICAL")  # the worst chain's state, not an exit code
    assert lines[1].split()[:4] == ["chain", "state", "generation", "checkpoint"]
    rows = {line.split()[0].rsplit("/", 1)[-1]: line.split() for line in lines[2:4]}
    assert rows["healthy"][1:4] == ["ok", "901", "400"]
    assert rows["stalled"][1:4] == ["critical", "900", "40"]
    assert any("stalled: CRITICAL" in line and "stalled_progress" in line for line in lines)


def test_each_fleet_row_says_its_drained_nodes_and_poller_and_the_fleet_its_drains() -> None:
    from nvrx.watch.fleet import ChainPass, FleetResult
    from nvrx.watch.fleetview import fleet_json, fleet_lines
    from nvrx.watch.model import ChainRef
    from nvrx.watch.watcher import PassResult
    from tests.test_watch_detectors import NOW, drained, drained_platform, snap

    def chain(name: str, poller: str, *nodes: DrainedNode) -> ChainPass:
        ref = ChainRef(name, "alice", None, drain_poller=poller)
        result = PassResult(snap(platform=drained_platform(*nodes), chain=ref), [], False)
        return ChainPass(name, None, result)

    fleet = FleetResult(NOW, [chain("a", "on"), chain("b", "unknown", drained("n7"))])
    lines = ["".join(t for t, _ in line) for line in fleet_lines(fleet, WatchSettings())]
    header = lines[1].split()
    rows = {line.split()[0]: dict(zip(header, line.split(), strict=False)) for line in lines[2:4]}
    assert (rows["a"]["drained"], rows["a"]["poller"]) == ("n3(1/3)", "on")
    assert (rows["b"]["drained"], rows["b"]["poller"]) == ("0/3", "?")
    assert (
        "drains: 1 of the 3 nodes the chains hold drained (sinfo); in-job drain poller on in "
        "1 of 2 chains (1 unknown); watch.drain_suspects off"
    ) in lines
    assert fleet_json(fleet, WatchSettings())["drains"] == {
        "sinfo": "ok", "chain_nodes": 3, "drained": 1, "chains": 2, "pollers_on": 1,
        "pollers_unknown": 1, "drain_suspects": False, "acting": False,
    }  # fmt: skip


def test_a_node_failing_in_two_chains_is_one_fleet_finding(tmp_path: Path) -> None:
    restarting_run(tmp_path / "team" / "a")
    restarting_run(tmp_path / "team" / "b")
    healthy_run(tmp_path / "team" / "c")  # on the same nodes, but it never failed
    _, doc = fleet(tmp_path, tmp_path / "team")
    found = {f["evidence"]["node"]: f for f in doc["fleet_findings"]}
    assert set(found) == {"n1", "n2"}
    evidence = found["n1"]["evidence"]["chains"]
    assert sorted(Path(c).name for c in evidence) == ["a", "b"]
    assert all(keys == ["700.0.0", "700.0.1"] for keys in evidence.values())
    assert found["n1"]["detector"] == "fleet_suspect_node"


def test_a_fleet_pass_reads_each_chains_failed_cycles_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fleet detector and the summary's restart count share one reading per chain.
    import nvrx.watch.fleet as fleet_module
    from nvrx.watch.detectors.fleet import failed_cycles as real

    calls: list[str] = []

    def counted(snap: Any, window: float) -> Any:
        calls.append(snap.chain.label)
        return real(snap, window)

    monkeypatch.setattr(fleet_module, "failed_cycles", counted)
    restarting_run(tmp_path / "team" / "a")
    restarting_run(tmp_path / "team" / "b")
    _, doc = fleet(tmp_path, tmp_path / "team")
    assert sorted(Path(c).name for c in calls) == ["a", "b"]
    assert [c["restarts_in_window"] for c in doc["chains"]] == [2, 2]
    assert {f["evidence"]["node"] for f in doc["fleet_findings"]} == {"n1", "n2"}


def test_one_failing_chain_is_no_fleet_finding(tmp_path: Path) -> None:
    restarting_run(tmp_path / "team" / "a")
    healthy_run(tmp_path / "team" / "c")
    _, doc = fleet(tmp_path, tmp_path / "team")
    assert doc["fleet_findings"] == []


def test_one_textfile_labels_every_chain_and_names_each_metric_once(tmp_path: Path) -> None:
    stalled_run(tmp_path / "team" / "stalled")
    healthy_run(tmp_path / "team" / "healthy")
    prom = tmp_path / "fleet.prom"
    fleet(tmp_path, tmp_path / "team", extra=("--prom-file", str(prom)))
    text = prom.read_text()
    assert text.count("# HELP nvrx_watch_checkpoint_iteration ") == 1
    values = [line for line in text.splitlines() if line.startswith("nvrx_watch_checkpoint_iter")]
    assert len(values) == 2 and {v.rsplit(" ", 1)[1] for v in values} == {"40", "400"}
    assert all('chain="' in v for v in values)
    # Each chain's own state dir still holds its state (cooldowns, first-seen times).
    assert len(os.listdir(tmp_path / "state")) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fleet"], "--fleet needs at least one PATH"),
        (["--fleet", ".", "--work-dir", "."], "--work-dir is for one chain: not with --fleet"),
        (
            ["--mine", "--html", "--junit", "j.xml"],
            "--html, --junit are for one chain: not with --mine",
        ),
        (["1", "2"], "one JOB_ID, not 2"),
        (["--mine", "12"], "--mine takes no JOB_ID ('12')"),
        (["--fleet", "/nonexistent-nvrx"], "--fleet /nonexistent-nvrx: no such directory"),
    ],
)
def test_a_fleet_asked_wrongly_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    proc = nvrx_watch(*args, "--platform", "none", "--state-dir", str(tmp_path / "s"))
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_an_empty_fleet_is_nothing_to_watch_and_a_missing_path_bad_input(tmp_path: Path) -> None:
    # Nothing found is an answer (a cron job of --mine or --fleet must not fail on a day with
    # no chain); a PATH that is not there is bad input (the mount missing, a typo).
    (tmp_path / "team").mkdir()
    proc = nvrx_watch("--fleet", str(tmp_path / "team"), "--platform", "none")
    assert proc.returncode == 0 and "no chain found" in proc.stderr
    proc = nvrx_watch("--fleet", str(tmp_path / "team"), "--platform", "none", "--json")
    doc = json.loads(proc.stdout)
    assert (doc["schema"], doc["chains"], doc["exit_code"]) == (1, [], 0)
    missing = nvrx_watch("--fleet", str(tmp_path / "gone"), "--platform", "none")
    assert missing.returncode == 2 and "gone: no such directory" in missing.stderr


def test_a_fleet_of_slurm_chains_costs_one_squeue_one_sinfo_and_one_sacct(tmp_path: Path) -> None:
    from nvrx.watch.fleet import Fleet, Member
    from nvrx.watch.model import ChainRef
    from nvrx.watch.resolve import Target
    from nvrx.watch.watcher import Watcher
    from tests.test_slurm_replay import Replay, slurm_for

    replay = Replay({"squeue": [(0, "", "")], "sinfo": [(0, "", "")], "sacct": [(0, "", "")]})
    slurm = slurm_for(replay)
    settings = WatchSettings(state_dir=tmp_path / "state")
    members = []
    for i in range(5):
        work = tmp_path / f"run{i}"
        healthy_run(work)
        glob = str(work / "nvrx" / "*" / "cycle_infos" / "cycle_info.*")
        target = Target(ChainRef(f"run{i}", "alice", str(work)), (glob,), None, f"run{i}")
        members.append(Member(f"run{i}", str(work), Watcher(target, settings, slurm, host="h")))
    result = Fleet(members, settings, slurm).run_pass()
    assert replay.commands() == ["squeue", "sinfo", "sacct"] and result.slurm_commands == 3
    assert "--name=run0,run1,run2,run3,run4" in replay.argvs[0]
    assert [c.label for c in result.chains] == [f"run{i}" for i in range(5)]


def test_a_fleet_pass_reads_every_chains_cycle_files_while_slurm_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """squeue and sacct take seconds on a busy cluster: the files are read meanwhile, and the
    pass uses that read (and saves its cache) instead of reading again."""
    import threading

    from nvrx.watch import cycles, fleet
    from nvrx.watch.fleet import Fleet, Member
    from nvrx.watch.model import ChainRef
    from nvrx.watch.resolve import Target
    from nvrx.watch.watcher import Watcher
    from tests.test_slurm_replay import Replay, slurm_for

    all_read = threading.Event()
    reads: list[str] = []
    real_read = cycles.read_cycles

    def counted(*args: Any, **kwargs: Any) -> Any:
        out = real_read(*args, **kwargs)
        reads.append(args[0][0])
        if len(reads) == 3:
            all_read.set()
        return out

    from nvrx.watch.observe import observe_platforms as real_ask

    overlapped: list[bool] = []

    def slow_slurm(*args: Any, **kwargs: Any) -> Any:
        overlapped.append(all_read.wait(timeout=10))  # Slurm "answers" once the files are read
        return real_ask(*args, **kwargs)

    monkeypatch.setattr("nvrx.watch.watcher.read_cycles", counted)
    monkeypatch.setattr("nvrx.watch.observe.read_cycles", counted)
    monkeypatch.setattr(fleet, "observe_platforms", slow_slurm)
    slurm = slurm_for(
        Replay({"squeue": [(0, "", "")], "sinfo": [(0, "", "")], "sacct": [(0, "", "")]})
    )
    settings = WatchSettings(state_dir=tmp_path / "state")
    members = []
    for i in range(3):
        work = tmp_path / f"run{i}"
        healthy_run(work)
        for path in work.rglob("*"):  # old enough for the cycle cache to keep
            os.utime(path, (time.time() - 3600,) * 2)
        glob = str(work / "nvrx" / "*" / "cycle_infos" / "cycle_info.*")
        target = Target(ChainRef(f"run{i}", "alice", str(work)), (glob,), None, f"run{i}")
        members.append(Member(f"run{i}", str(work), Watcher(target, settings, slurm, host="h")))
    result = Fleet(members, settings, slurm).run_pass()
    assert overlapped == [True]
    assert len(reads) == 3  # once per chain: the pass used what was read ahead
    assert all(c.result is not None and len(c.result.snapshot.cycles) for c in result.chains)
    assert all((tmp_path / "state" / f"run{i}" / "cycles-cache.json").exists() for i in range(3))


def test_a_work_dir_without_a_manifest_is_blind_under_slurm_not_skipped(tmp_path: Path) -> None:
    from tests.test_slurm_replay import Replay, slurm_for

    healthy_run(tmp_path / "run")
    on_slurm = WatchSettings(state_dir=tmp_path / "state")
    (member,) = build_fleet(
        [tmp_path / "run"], [], on_slurm, slurm_for(Replay({})), host="h", act=False,
        dry_run=False, no_restart_exit_code=93,
    ).members  # fmt: skip
    assert member.watcher is None and "job name is unknown" in (member.error or "")
    files_only = WatchSettings(state_dir=tmp_path / "state", platform="none")
    (member,) = build_fleet(
        [tmp_path / "run"], [], files_only, None, host="h", act=False, dry_run=False,
        no_restart_exit_code=93,
    ).members  # fmt: skip
    assert member.watcher is not None  # the cycle files are enough


def test_the_fleet_detector_is_listed_and_can_be_disabled(tmp_path: Path) -> None:
    listed = nvrx_watch("--list-detectors").stdout
    assert "fleet_suspect_node" in listed and "suspect_node" in listed
    restarting_run(tmp_path / "team" / "a")
    restarting_run(tmp_path / "team" / "b")
    _, doc = fleet(tmp_path, tmp_path / "team", extra=("--disable", "fleet_suspect_node"))
    assert doc["fleet_findings"] == []


def test_mine_finds_one_job_per_chain_of_the_current_user_with_one_squeue() -> None:
    from nvrx.watch.fleet import my_chains
    from tests.test_slurm_replay import Replay, slurm_for

    squeue = (
        "205|0|205|PENDING|Dependency|alice|1||main|run-b|(null)\n"
        "200|0|200|RUNNING|None|alice|1|n1|main|run-b|(null)\n"
        "200|1|201|RUNNING|None|alice|1|n2|main|run-b|(null)\n"
        "90|0|90|RUNNING|None|alice|1|n3|main|run-a|(null)\n"
    )
    replay = Replay({"squeue": [(0, squeue, "")]})
    assert my_chains(slurm_for(replay)) == ["90", "200"]  # the oldest job of each name
    assert replay.commands() == ["squeue"] and any("--user=" in a for a in replay.argvs[0])
    down = (1, "", "squeue: error: Unable to contact slurm controller (connect failure)")
    with pytest.raises(FleetError, match="--mine: cannot list your jobs"):
        my_chains(slurm_for(Replay({"squeue": [down] * 100})))


def test_one_order_of_states_for_a_pass_a_chain_row_and_the_fleet() -> None:
    from nvrx.watch.watcher import worst_state

    # Blind outranks critical, as exit 3 outranks 1 (docs/output-contract.md).
    assert worst_state(["critical", "blind", "warning"]) == "blind"
    assert worst_state(["info", "critical", "ok"]) == "critical"
    assert worst_state([]) == "ok"
