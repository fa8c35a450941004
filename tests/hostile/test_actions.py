"""What `nvrx watch --act` may do to a cluster when the cycle files it reads were written by
someone else: a drain names exactly one node Slurm lists, or it is refused, said, and the pass
goes on with everything else it found."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from .harness import assert_no_traceback, run_nvrx
from .inputs import answering_slurm, slurm_calls

NODES = ("n1", "n2", "n3", "n4")
JOB = "700"


def short_cycles_on(work: Path, node: str) -> None:
    """Three short cycles of job 700, each on `node` and one other node: `node` is suspect."""
    directory = work / "nvrx" / JOB / "cycle_infos"
    directory.mkdir(parents=True)
    stamp = "%Y-%m-%dT%H:%M:%S.%fZ"
    now = datetime.now(UTC)
    for cycle, other in enumerate(("n1", "n2", "n3")):
        start = now - timedelta(minutes=30 - 5 * cycle)
        record = {
            "job_id": JOB, "attempt_index": 0, "cycle_number": cycle,
            "cycle_start_time": start.strftime(stamp),
            "cycle_end_time": (start + timedelta(seconds=60)).strftime(stamp),
            "cycle_log_file": "", "active_nodes": f"{node},{other}", "standby_nodes": "",
            "generation": "0", "active_ranks": "0-1",
        }  # fmt: skip
        (directory / f"cycle_info.{JOB}.0.{cycle}").write_text(json.dumps(record))


def act_pass(tmp_path: Path, home: Path, node: str) -> tuple[int, dict[str, Any], list[str]]:
    work = tmp_path / "w"
    short_cycles_on(work, node)
    row = f"{JOB}|0|{JOB}|RUNNING|None|root|2|n1,n2|debug|train|"
    env = answering_slurm(tmp_path / "bin", NODES, row)
    proc = run_nvrx(
        "watch", "--work-dir", str(work), "--job-name", "train", "--user", "root",
        "--state-dir", str(tmp_path / "state"), "--act", "--set", "watch.drain_suspects=true",
        "--set", f"watch.prom_file={tmp_path / 'nvrx.prom'}", "--json",
        cwd=home, env=env, wall=15.0,
    )  # fmt: skip
    assert_no_traceback(proc)
    doc: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return proc.code, doc, slurm_calls(tmp_path / "bin")


@pytest.mark.parametrize(
    ("node", "why"),
    [
        ("ALL", "a Slurm keyword that names more than one node"),  # drained the whole cluster
        ("All", "a Slurm keyword that names more than one node"),
        ("n99", "'n99' is not a node Slurm lists"),
        ("n2:8", "invalid node name 'n2:8'"),  # refused by the adapter: the pass exited 2
    ],
)
def test_a_drain_names_one_node_slurm_lists_or_is_a_finding_of_its_own(
    tmp_path: Path, home: Path, node: str, why: str
) -> None:
    code, doc, calls = act_pass(tmp_path, home, node)
    assert not [c for c in calls if c.startswith("scontrol update")], calls
    (refused,) = [f for f in doc["findings"] if f["detector"] == "action_refused"]
    assert why in refused["summary"] and refused["command"] == []
    assert "nodename=" not in json.dumps(refused)  # nothing an operator could paste
    (suspect,) = [f for f in doc["findings"] if f["detector"] == "suspect_node"]
    assert suspect["command"] == []
    # The pass went on: its other findings, its exit code, its state and its textfile.
    assert code == 1 and "stalled_progress" in {f["detector"] for f in doc["findings"]}
    assert (tmp_path / "state").is_dir()
    prom = (tmp_path / "nvrx.prom").read_text()
    assert 'detector="action_refused"} 1' in prom


def test_a_drain_of_a_node_slurm_lists_runs(tmp_path: Path, home: Path) -> None:
    _, doc, calls = act_pass(tmp_path, home, "n4")
    assert [c.split()[:3] for c in calls if c.startswith("scontrol")] == [
        ["scontrol", "update", "nodename=n4"]
    ]
    assert "action_refused" not in {f["detector"] for f in doc["findings"]}
