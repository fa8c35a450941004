"""The skill's sweep as nvrx proposes it: `--next SESSION` prints the next iteration's pool from
the session's results, and `--iters` expands the iteration dimension."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from nvrx.campaign.pool import at_iterations
from nvrx.inject.sweep import WIDER, next_iteration

from .cli_runner import nvrx as nvrx_in_process
from .conftest import CPU_FAULT_DEMO
from .test_inject_report import session_with, verdict

FAILS = verdict(rank_any="false")
NODE_ONLY = verdict(fr_rank_correct="node")  # passes the four text dimensions


def nvrx(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return nvrx_in_process(*args, env=dict(os.environ), cwd=cwd)


def test_each_entry_at_each_iteration_in_pool_order_once() -> None:
    assert at_iterations(["SIGKILL:1:5:2", "GPU_SLEEP:0:5:4", "SIGKILL:1:5:2"], [2, 10]) == [
        "SIGKILL:1:2:2", "SIGKILL:1:10:2", "GPU_SLEEP:0:2:4", "GPU_SLEEP:0:10:4",
    ]  # fmt: skip


def test_the_sweep_goes_failing_cells_then_iterations_then_wider_cells(tmp_path: Path) -> None:
    base = tmp_path / "fault_injection"
    first = session_with(base.parent, "20260101_000000", [
        ("SEGFAULT:1:5:2", verdict()), ("SIGKILL:0:5:2", FAILS), ("GPU_SLEEP:1:5:2", NODE_ONLY),
    ])  # fmt: skip
    step = next_iteration(first.dir)
    assert (step.iteration, step.entries) == (2, ("SIGKILL:0:5:2",))
    second = session_with(base.parent, "20260102_000000", [("SIGKILL:0:5:2", FAILS)])
    step = next_iteration(second.dir)
    assert step.iteration == 3
    assert step.entries == ("SIGKILL:0:5:2", "SIGKILL:0:2:2", "SIGKILL:0:10:2")
    third = session_with(base.parent, "20260103_000000", [("SIGKILL:0:10:2", FAILS)])
    step = next_iteration(third.dir)
    assert step.iteration == 4 and step.entries == ("SIGKILL:0:10:2", *WIDER)
    assert set(WIDER) == {"SEGFAULT:1:5:4", "SEGFAULT:1:5:8", "LOCK_GIL:1:5:4", "LOCK_GIL:1:5:8"}


def test_a_passing_iteration_is_run_again_and_two_in_a_row_stop(tmp_path: Path) -> None:
    cells: list[tuple[str, dict[str, object] | None]] = [
        ("SEGFAULT:1:5:2", verdict()), ("GPU_SLEEP:1:5:2", NODE_ONLY),
    ]  # fmt: skip
    first = session_with(tmp_path, "20260101_000000", cells)
    step = next_iteration(first.dir)
    assert step.entries == ("SEGFAULT:1:5:2", "GPU_SLEEP:1:5:2") and "two in a row" in step.why
    second = session_with(tmp_path, "20260102_000000", cells)
    step = next_iteration(second.dir)
    assert step.entries == () and "stop condition is met" in step.why


def test_next_prints_a_pool_that_inject_loop_takes(tmp_path: Path) -> None:
    s = session_with(tmp_path, "20260101_000000", [("SIGKILL:0:5:2", FAILS)])
    proc = nvrx("inject-loop", "--next", str(s.dir))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "SIGKILL:0:5:2\n"
    assert proc.stderr.startswith("nvrx: note: iteration 2: the 1 failing cell")
    as_json = nvrx("inject-loop", "--next", str(s.dir), "--json")
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert (doc["ok"], doc["iteration"], doc["entries"]) == (True, 2, ["SIGKILL:0:5:2"])
    assert doc["session"] == str(s.dir.resolve()) and "failing cell" in doc["why"]
    listed = nvrx(
        "inject-loop", "--config", str(CPU_FAULT_DEMO / "nvrx.yaml"), "--list-pool",
        "--pool", proc.stdout.strip(), "--set", "slurm.gpus_per_node=4",
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    refused = nvrx("inject-loop", "--next", str(s.dir), "--pool", "quick")
    assert refused.returncode == 2 and "--next" in refused.stderr


def test_iters_expands_the_iteration_dimension_of_the_pool(tmp_path: Path) -> None:
    proc = nvrx(
        "inject-loop", "--config", str(CPU_FAULT_DEMO / "nvrx.yaml"), "--list-pool",
        "--pool", "SEGFAULT:1:3:2 SIGKILL:0:3:2", "--iters", "2,10",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert _listed(proc) == [
        "SEGFAULT:1:2:2", "SEGFAULT:1:10:2", "SIGKILL:0:2:2", "SIGKILL:0:10:2",
    ]  # fmt: skip
    bad = nvrx("inject-loop", "--pool", "quick", "--iters", "2,x", "--list-pool")
    assert bad.returncode == 2 and "inject.iters" in bad.stderr


def _listed(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """The entries of `--list-pool`'s table."""
    rows = [line.split() for line in proc.stdout.splitlines()[1:] if line.strip()]
    return [":".join(row[1:5]) for row in rows]


def test_a_pool_of_upstreams_pools_dir_is_taken_by_its_file_name(tmp_path: Path) -> None:
    scripts = tmp_path / "scripts"
    (scripts / "pools").mkdir(parents=True)
    script = scripts / "job.sh"
    script.write_text("#!/bin/bash\n")
    (scripts / "workloads.conf").write_text("site job.sh - Site_workload - -\n")
    (scripts / "pools" / "wide.pool").write_text("# two\nSIGKILL:1:5:2\nSEGFAULT:0:5:4\n")
    args = ("inject-loop", "--workload", "site", "--list-pool",
            "--set", f"inject.workloads_file={scripts / 'workloads.conf'}")  # fmt: skip
    proc = nvrx(*args, "--pool", "wide.pool", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(_listed(proc)) == 2
    missing = nvrx(*args, "--pool", "nope.pool", cwd=tmp_path)
    assert missing.returncode == 2 and "wide.pool" in missing.stderr  # the choices are named


def test_an_empty_iteration_list_means_the_pools_own(tmp_path: Path) -> None:
    from nvrx.config import load_config

    cli = {"inject.iters": ("", "t")}
    iters = load_config(environ={}, cli=cli, cwd=tmp_path, home=tmp_path).config.inject.iters
    assert iters is None


@pytest.mark.parametrize(
    ("value", "says"),
    [(",", "an empty item in ','"), ("2,,10", "an empty item in '2,,10'"),
     ("2,١", "ASCII digits"), ("1_000", "ASCII digits")],
)  # fmt: skip
def test_an_iteration_list_with_a_hole_or_foreign_digits_is_an_error(
    value: str, says: str, tmp_path: Path
) -> None:
    from nvrx.config import ConfigError, load_config

    cli = {"inject.iters": (value, "--iters")}
    with pytest.raises(ConfigError, match=re.escape(says)):
        load_config(environ={}, cli=cli, cwd=tmp_path, home=tmp_path)
