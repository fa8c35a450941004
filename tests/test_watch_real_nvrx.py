"""`nvrx watch` on the files NVRx's own ft_launcher wrote (tests/data/real-nvrx/, recorded runs
at NVRx d8686d9): what it says of each run, where it shows each cycle's own log, and that its
findings and exit codes are upstream's watcher's on the same files (recorded in each
scenario's upstream-watch.json; docs/upstream-parity.md).

Each run is laid out as a chain's work dir (`<work>/nvrx/<job>/cycle_infos/`, the recorded files
and `.current` link copied in, the checkpoint-iteration file where the scenario had it) by the
recorder of upstream's answers (`upstream_watch.layout`), so both watchers read the same tree.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from .cli_runner import clean_environ
from .cli_runner import nvrx as nvrx_in_process

RECORDED = Path(__file__).parent / "data" / "real-nvrx"
SCENARIOS = ("restart-after-exception", "no-progress-exit-93", "storage-check-node-leaves")


def _recorder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("upstream_watch", RECORDED / "upstream_watch.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


recorder = _recorder()


def recorded(scenario: str, cycle: int) -> dict[str, Any]:
    """One cycle-info file of a recorded run, as NVRx wrote it."""
    data: dict[str, Any] = json.loads(
        (RECORDED / scenario / "cycle_infos" / f"cycle_info.7300.0.{cycle}").read_text()
    )
    return data


def watch(
    tmp_path: Path,
    scenario: str,
    *args: str,
    env: dict[str, str] | None = None,
    json_out: bool = True,
    variant: str = "files",
) -> tuple[int, Any]:
    """A pass over the recorded `scenario` laid out in tmp_path, with the arguments of one of
    upstream's runs (`variant`: the files alone by default; Slurm's stand-ins answer for the
    ended job when it asks Slurm): its exit code and its --json document (or, with json_out
    False, its screen)."""
    work = tmp_path / "work"
    if not work.exists():
        recorder.layout(scenario, work)
    flags = ["--checkpoint-iteration-file", str(work / recorder.CHECKPOINTS[scenario][0])]
    env = dict(env or {})
    if recorder.asks_slurm(variant):
        env["NVRX_SLURM_BIN_DIR"] = str(recorder.slurm_bin(scenario, tmp_path / "slurm-bin"))
    proc = nvrx_in_process(
        "watch", *recorder.VARIANTS[variant], "--work-dir", str(work),
        "--state-dir", str(tmp_path / "state"), *flags, *(["--json"] if json_out else []), *args,
        env=clean_environ(env),
    )  # fmt: skip
    if not json_out:
        return proc.returncode, proc.stdout
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr
    return proc.returncode, json.loads(lines[-1])


def rewrite(tmp_path: Path, cycle: int, **fields: str) -> dict[str, Any]:
    """Rewrite a laid-out cycle file with `fields` changed, as NVRx rewrites one (a temporary
    file renamed over it); its fields as they were."""
    path = tmp_path / "work" / "nvrx" / "7300" / "cycle_infos" / f"cycle_info.7300.0.{cycle}"
    data: dict[str, Any] = json.loads(path.read_text())
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({**data, **fields}, indent=2))
    tmp.replace(path)
    return data


def findings(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f["detector"], f["severity"]) for f in doc["findings"]]


# ------------------------------------------------------------------ what watch says of each run


def test_a_restart_after_an_exception_is_one_in_job_restart_and_the_current_cycle_1_ended(
    tmp_path: Path,
) -> None:
    code, doc = watch(tmp_path, "restart-after-exception")
    snap = doc["snapshot"]
    assert code == 0
    assert (snap["cycles"], snap["current_job"], snap["restarts"]) == (2, "7300", 1)
    latest = snap["latest_cycle"]
    assert latest["key"] == "7300.0.1"
    assert latest["end"] is not None  # the launcher closed it when training ended
    # One host ran both launchers: NVRx names it `localhost`, and no spare was asked for.
    assert (latest["active_nodes"], latest["standby_nodes"]) == ("localhost", "")
    # The cycle's own log, as the launcher recorded it (the run's directory is gone: only shown).
    assert latest["cycle_log_file"] == recorded("restart-after-exception", 1)["cycle_log_file"]
    assert latest["cycle_log_file"].endswith("/logs/app_cycle1.log")
    assert findings(doc) == [("spares_exhausted", "info")]

    code, screen = watch(tmp_path, "restart-after-exception", "--dry-run", json_out=False)
    assert "cycle: 7300.0.1 (cycle 1, 1 restart in this generation)" in screen
    assert f"cycle log: {latest['cycle_log_file']}\n" in screen


def test_the_current_cycle_is_the_one_the_launchers_current_link_names(tmp_path: Path) -> None:
    """`.current` is a pointer, not a record (counting it would make one restart two), and the
    cycle watch calls current, by start time, is the one it points at."""
    for scenario in SCENARIOS:
        _, doc = watch(tmp_path / scenario, scenario)
        files = list((RECORDED / scenario / "cycle_infos").iterdir())
        link = os.readlink(RECORDED / scenario / "cycle_infos" / "cycle_info.7300.current")
        assert "cycle_info." + doc["snapshot"]["latest_cycle"]["key"] == link, scenario
        assert doc["snapshot"]["cycles"] == len(files) - 1, scenario


def test_the_no_progress_verdict_shows_in_the_files_as_one_cycle_and_a_checkpoint_that_never_moved(
    tmp_path: Path,
) -> None:
    """Exit 93 itself is Slurm's to tell (task 0's exit code: chain_not_cancelled and the
    `task 0 endings` line). The files alone show its evidence: a single cycle, closed, no
    restart, and a checkpoint iteration last written before that cycle started. One cycle is
    fewer than stall_progress needs (3), as for upstream: no stall finding."""
    code, doc = watch(tmp_path, "no-progress-exit-93")
    snap = doc["snapshot"]
    latest = snap["latest_cycle"]
    assert (snap["cycles"], snap["restarts"], latest["key"]) == (1, 0, "7300.0.0")
    assert latest["end"] is not None
    assert snap["checkpoint"]["value"] == 1
    assert snap["checkpoint"]["mtime"] < latest["start"]
    assert latest["cycle_log_file"].endswith("/logs/app_cycle0.log")
    assert findings(doc) == [("spares_exhausted", "info")]
    assert code == 0


def test_with_slurm_the_no_progress_runs_task_0_ending_is_the_no_restart_verdict(
    tmp_path: Path,
) -> None:
    """Asked by job id once the job ended (accounting has it, nothing is queued), with the
    work dir given because no nvrx manifest or readable batch script names its files:
    exit 93 on task 0 is the verdict, and nothing is left to cancel, so no finding."""
    code, doc = watch(tmp_path, "no-progress-exit-93", variant="slurm-job-ended")
    assert doc["chain"]["name"] == recorder.JOB_NAME  # the job id named the chain
    (ending,) = doc["snapshot"]["platform"]["task0_endings"]
    assert (ending["job_id"], ending["exit"], ending["no_restart"]) == ("7300", "93:0", True)
    assert doc["snapshot"]["platform"]["generations"] == []
    assert (doc["findings"], code) == ([], 0)
    _, screen = watch(
        tmp_path, "no-progress-exit-93", "--dry-run", json_out=False, variant="slurm-job-ended"
    )
    assert "task 0 endings: 7300 FAILED 93:0 (no-restart verdict)" in screen


def test_a_node_leaving_on_its_storage_check_is_the_restart_into_cycle_1(tmp_path: Path) -> None:
    """The launcher that failed its check left at the rendezvous and the spare took its rank:
    on one host both are `localhost`, so the files show the restart, not which node left."""
    code, doc = watch(tmp_path, "storage-check-node-leaves")
    snap = doc["snapshot"]
    assert (snap["cycles"], snap["restarts"], snap["latest_cycle"]["key"]) == (2, 1, "7300.0.1")
    assert (
        snap["latest_cycle"]["cycle_log_file"]
        == (recorded("storage-check-node-leaves", 1)["cycle_log_file"])
    )
    assert code == 0


def test_on_a_cluster_the_same_files_name_nodes_as_hostlists_or_comma_lists(tmp_path: Path) -> None:
    """Off one host, NVRx writes Slurm hostlists (a comma list where names do not compress),
    and a spare standing by in standby_nodes: the recorded file so, read as it is."""
    watch(tmp_path, "restart-after-exception")
    rewrite(tmp_path, 1, active_nodes="node[001-002],gpu7", standby_nodes="node003")
    _, doc = watch(tmp_path, "restart-after-exception")
    latest = doc["snapshot"]["latest_cycle"]
    assert (latest["active_nodes"], latest["standby_nodes"]) == ("gpu7,node[001-002]", "node003")
    assert findings(doc) == []  # a spare stands by: spares_exhausted has nothing to say


# ------------------------------------------------------------- the cycle log in restart findings


def test_a_restart_finding_names_the_log_of_the_last_cycle_that_ended(tmp_path: Path) -> None:
    _, doc = watch(tmp_path, "restart-after-exception", "--max-restarts", "1")
    (budget,) = [f for f in doc["findings"] if f["detector"] == "restart_budget_low"]
    log = recorded("restart-after-exception", 1)["cycle_log_file"]
    assert budget["evidence"]["cycle_log_file"] == log
    assert budget["detail"].endswith(f"; cycle log of 7300.0.1: {log}")


def test_a_stalled_cycle_names_its_own_log(tmp_path: Path) -> None:
    """A launcher SIGKILLed mid-cycle leaves its file open (`cycle_end_time` empty): the recorded
    cycle 1 so, with a stall threshold the recording's age passes."""
    watch(tmp_path, "restart-after-exception")  # lays the run out
    data = rewrite(tmp_path, 1, cycle_end_time="")
    code, doc = watch(tmp_path, "restart-after-exception", env={"NVRX_WATCH_STALL_SECONDS": "1"})
    (stalled,) = [f for f in doc["findings"] if f["detector"] == "cycle_stalled"]
    assert stalled["evidence"]["cycle_log_file"] == data["cycle_log_file"]
    assert f"cycle log of 7300.0.1: {data['cycle_log_file']}" in stalled["detail"]
    assert code == 1


def test_a_cycle_log_path_is_shown_escaped_never_as_the_file_has_it(tmp_path: Path) -> None:
    """Whoever can write the work dir writes `cycle_log_file`: it reaches the screen with its
    control characters escaped, the page HTML-escaped, and is never opened."""
    watch(tmp_path, "restart-after-exception")
    hostile = "/tmp/a\x1b[2J<b>x</b>\u202e.log"
    rewrite(tmp_path, 1, cycle_log_file=hostile)
    page = tmp_path / "timeline.html"
    _, screen = watch(tmp_path, "restart-after-exception", "--html", str(page), json_out=False)
    assert "\x1b" not in screen and "\u202e" not in screen
    assert "cycle log: /tmp/a\\x1b[2J<b>x</b>" in screen
    html = page.read_text()
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html
    _, doc = watch(tmp_path, "restart-after-exception")
    assert doc["snapshot"]["latest_cycle"]["cycle_log_file"] == hostile  # data, JSON-escaped


def test_the_timeline_page_shows_each_cycles_log(tmp_path: Path) -> None:
    page = tmp_path / "timeline.html"
    watch(tmp_path, "restart-after-exception", "--html", str(page))
    html = page.read_text()
    for cycle in (0, 1):
        assert f"log: {recorded('restart-after-exception', cycle)['cycle_log_file']}" in html


# --------------------------------------------------------------- agreement with upstream's watcher

# Upstream's finding keys name their detector (`nvrx-<name>-<job>...`); the same keys are nvrx's.
UPSTREAM_DETECTOR_OF_KEY = {
    "nvrx-orphan-": "orphaned_generation",
    "nvrx-chain-exhausted-": "chain_exhausted",
    "nvrx-no-restart-not-honoured-": "chain_not_cancelled",
    "nvrx-generation-churn-": "generation_churn",
    "nvrx-restart-storm-": "restart_storm",
    "nvrx-no-checkpoint-": "stalled_progress",
    "nvrx-stalled-progress-": "stalled_progress",
    "nvrx-cycle-stalled-": "cycle_stalled",
    "nvrx-restart-budget-": "restart_budget_low",
    "nvrx-spares-exhausted-": "spares_exhausted",
    "nvrx-suspect-node-": "suspect_node",
    "nvrx-watch-blind-": "watch_blind",
}
# nvrx's codes for upstream's (docs/upstream-parity.md, "Watch"): 1 blind is 3, 2 critical is 1.
NVRX_EXIT_OF_UPSTREAM = {0: 0, 1: 3, 2: 1}


def upstream_detector(key: str) -> str:
    prefix = max((p for p in UPSTREAM_DETECTOR_OF_KEY if key.startswith(p)), key=len)
    return UPSTREAM_DETECTOR_OF_KEY[prefix]


def upstream_runs() -> list[tuple[str, str, dict[str, Any]]]:
    runs = []
    for scenario in SCENARIOS:
        record = json.loads((RECORDED / scenario / "upstream-watch.json").read_text())
        assert record["upstream_commit"].startswith("d8686d9")  # the launcher's own commit
        runs += [(scenario, name, run) for name, run in record["runs"].items()]
    return runs


@pytest.mark.parametrize(
    ("scenario", "variant", "upstream"),
    upstream_runs(),
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_nvrx_finds_what_upstreams_watcher_found_on_the_same_files(
    tmp_path: Path, scenario: str, variant: str, upstream: dict[str, Any]
) -> None:
    """Same detectors, same severities, same keys, and the exit code through the mapping; on the
    files alone and with Slurm answering for the ended job. No difference on these runs is
    deliberate: where nvrx differs on purpose (docs/watch.md's improvements: the storm reset, one
    suspect_node finding per generation, stand-downs once a generation ended, chain_exhausted
    from a manifest), these runs do not reach it."""
    code, doc = watch(tmp_path, scenario, "--dry-run", "--exit-codes", "upstream", variant=variant)
    theirs = sorted(
        (upstream_detector(f["key"]), f["severity"], f["key"]) for f in upstream["findings"]
    )
    ours = sorted((f["detector"], f["severity"], f["key"]) for f in doc["findings"])
    assert ours == theirs
    assert code == upstream["exit_code"]
    code, _ = watch(tmp_path, scenario, "--dry-run", variant=variant)
    assert code == NVRX_EXIT_OF_UPSTREAM[upstream["exit_code"]]


def test_upstreams_answers_were_recorded_on_the_files_these_tests_read() -> None:
    """Each recording's command is the one `upstream_watch.py` runs, and these tests give nvrx:
    the variant's arguments, the work dir, the scenario's checkpoint file."""
    for scenario, variant, run in upstream_runs():
        relative, _ = recorder.CHECKPOINTS[scenario]
        assert run["command"] == [
            "python3", "-m", "nvrx_watch", *recorder.VARIANTS[variant], "--work-dir", "<work>",
            "--state-dir", "<state>", "--dry-run",
            "--checkpoint-iteration-file", f"<work>/{relative}",
        ]  # fmt: skip
        assert (run["slurm"] is not None) == recorder.asks_slurm(variant)
