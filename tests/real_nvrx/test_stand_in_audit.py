"""The stand-in (examples/rehearsal/ft_launcher.py) audited against NVRx's own launcher: one
scenario, run here under the stand-in, and the files and exit codes the real launcher wrote in
the same scenario (its recording, tests/data/real-nvrx/restart-after-exception), compared field
by field. Where they differ, examples/rehearsal/README.md ("How the stand-in differs") says so;
a difference that goes away must leave that table too.

It needs no torch and no real launcher (the recording stands for it), so it runs everywhere.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .harness import REPO, SCENARIOS, STAND_IN, run_scenario

SCENARIO = "restart-after-exception"
RECORDED = REPO / "tests" / "data" / "real-nvrx" / SCENARIO
# Cycle-info fields the stand-in writes otherwise, each a row of the README's table.
DIFFERENT = {"active_nodes", "active_ranks"}
OF_THE_RUN = {"cycle_start_time", "cycle_end_time", "cycle_log_file"}  # times and paths


def cycle_infos(run_dir: Path) -> dict[str, dict[str, Any]]:
    return {
        f.name: json.loads(f.read_text())
        for f in sorted((run_dir / "cycle_infos").iterdir())
        if not f.is_symlink()
    }


def test_the_stand_in_writes_what_nvrx_s_launcher_wrote_in_the_same_scenario(
    run_dir: Path,
) -> None:
    real = json.loads((RECORDED / "scenario.json").read_text())
    run = run_scenario(SCENARIOS[SCENARIO], STAND_IN, run_dir)

    assert run.left_behind == []
    assert run.exit_codes == real["exit_codes"]
    ours, theirs = cycle_infos(run_dir), cycle_infos(RECORDED)
    assert list(ours) == list(theirs)  # cycle_info.<job>.<attempt>.<cycle>, the same cycles
    current = "cycle_info.7300.current"
    assert os.readlink(run_dir / "cycle_infos" / current) == os.readlink(
        RECORDED / "cycle_infos" / current
    )
    for name, real_info in theirs.items():
        info = ours[name]
        assert set(info) == set(real_info), name
        assert {k: type(v) for k, v in info.items()} == {
            k: type(v) for k, v in real_info.items()
        }, name
        same = set(real_info) - DIFFERENT - OF_THE_RUN
        assert {k: info[k] for k in same} == {k: real_info[k] for k in same}, name
        assert Path(info["cycle_log_file"]).name == Path(real_info["cycle_log_file"]).name
        assert bool(info["cycle_end_time"]) == bool(real_info["cycle_end_time"])
        # Still different (on one host): when one is no longer, update the README's table.
        assert {k: info[k] for k in DIFFERENT} != {k: real_info[k] for k in DIFFERENT}, name

    # The per-cycle application logs: the same files, each line "<rank>: ..." of both ranks.
    def app_logs(where: Path) -> list[str]:
        return sorted(p.name for p in (where / "logs").glob("app_cycle*.log"))

    assert app_logs(run_dir) == app_logs(RECORDED)
    for name in app_logs(RECORDED):
        for where in (run_dir, RECORDED):
            ranks = {line.split(":", 1)[0] for line in (where / "logs" / name).open()}
            assert ranks == {"0", "1"}, (where, name)
    # The real launcher's restart line, and its silent console with --ft-nvrx-logfile.
    real_log = (RECORDED / "logs" / "nvrx.log").read_text()
    assert "Worker group FAILED. 3/3 attempts left; will restart worker group" in real_log
    assert all((RECORDED / "logs" / f"launcher{i}.console").stat().st_size == 0 for i in (0, 1))
    assert all((run_dir / "logs" / f"launcher{i}.console").stat().st_size > 0 for i in (0, 1))


def test_the_stand_in_takes_every_command_line_nvrx_s_launcher_was_run_with() -> None:
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("rehearsal_ft_launcher", STAND_IN)
    assert spec is not None and spec.loader is not None
    stand_in = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = stand_in  # its dataclasses look their module up
    spec.loader.exec_module(stand_in)
    for scenario in sorted((REPO / "tests" / "data" / "real-nvrx").glob("*/scenario.json")):
        for argv in json.loads(scenario.read_text())["argv"]:
            stand_in.parse_config(argv[1:])  # --rdzv-backend c10d included
