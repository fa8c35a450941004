"""NVRx's own ft_launcher, run outside Slurm with the project's DDP worker: what a chain under
the real launcher relies on happens, and every process a scenario started is gone after it.

Each test is one scenario of harness.py (the same ones tests/data/real-nvrx/record.py records),
run alone under the machine's real-launcher lock with its own ports and temp dir.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from .harness import SCENARIOS, Run, run_scenario


def cycle_numbers(run: Run) -> list[int]:
    files = sorted((run.dir / "cycle_infos").glob("cycle_info.*.*.[0-9]*"))
    return sorted(json.loads(f.read_text())["cycle_number"] for f in files)


def app_log(run: Run, cycle: int) -> str:
    return (run.dir / "logs" / f"app_cycle{cycle}.log").read_text(errors="replace")


def checkpointed(run: Run) -> int:
    return int((run.dir / "checkpoints" / "latest_checkpointed_iteration.txt").read_text())


def test_a_ddp_rank_that_raises_restarts_the_group_in_job_from_the_last_checkpoint(
    ft_launcher: Path, run_dir: Path
) -> None:
    sc = dataclasses.replace(SCENARIOS["restart-after-exception"], worker="ddp")
    run = run_scenario(sc, ft_launcher, run_dir)

    assert run.exit_codes == [0, 0]
    assert run.left_behind == []
    assert cycle_numbers(run) == [0, 1]
    assert "will restart worker group" in (run.dir / "logs" / "nvrx.log").read_text()
    assert "injected workload exception" in app_log(run, 0)
    # Cycle 1 starts from the last checkpoint cycle 0 wrote (none: from 0), on every rank.
    saved = [int(n) for n in re.findall(r"saved checkpoint at iteration (\d+)", app_log(run, 0))]
    resumed = re.findall(r"^(\d): resuming from iteration (\d+)", app_log(run, 1), re.M)
    assert sorted(resumed) == [("0", str(max(saved, default=0))), ("1", str(max(saved, default=0)))]
    assert checkpointed(run) == sc.train_iters
    assert (run.dir / "checkpoints" / f"iter_{sc.train_iters:07d}" / "mp_rank_00").is_dir()


def test_a_hot_spare_takes_the_place_of_a_node_whose_process_tree_was_killed(
    ft_launcher: Path, run_dir: Path
) -> None:
    sc = SCENARIOS["hot-spare-takes-killed-node"]
    run = run_scenario(sc, ft_launcher, run_dir)

    # Launcher 1 died of the SIGKILL; the other active node and the spare trained to the end.
    assert run.exit_codes == [0, -9, 0]
    assert run.left_behind == []
    assert cycle_numbers(run) == [0, 1]
    # The survivor learnt of the death from its all-reduce (gloo's words vary with the moment).
    assert re.search(r"^0: \[rank0\]: RuntimeError: .*gloo", app_log(run, 0), re.M)
    final = app_log(run, 1)
    # Killed mid-training: both ranks of cycle 1, the spare's included, resume from a checkpoint.
    resumed = re.findall(r"^\d: resuming from iteration (\d+)", final, re.M)
    assert len(resumed) == 2 and all(int(n) > 0 for n in resumed)
    assert f"0: training complete at iteration {sc.train_iters}" in final
    assert f"1: training complete at iteration {sc.train_iters}" in final
    assert checkpointed(run) == sc.train_iters


def test_no_progress_ends_every_launcher_the_spare_too_with_exit_93(
    ft_launcher: Path, run_dir: Path
) -> None:
    sc = dataclasses.replace(SCENARIOS["no-progress-exit-93"], count=3, nnodes="2:3", worker="ddp")
    run = run_scenario(sc, ft_launcher, run_dir)

    assert run.exit_codes == [93, 93, 93]
    assert run.left_behind == []
    assert "EARLY TERMINATION" in (run.dir / "logs" / "nvrx.log").read_text()


def test_a_hung_ddp_rank_is_caught_by_its_step_section_timeout_and_the_group_restarts(
    ft_launcher: Path, run_dir: Path
) -> None:
    sc = SCENARIOS["hang-caught-by-section-timeout"]
    run = run_scenario(sc, ft_launcher, run_dir)

    assert run.exit_codes == [0, 0]
    assert run.left_behind == []
    assert cycle_numbers(run) == [0, 1]
    # The worker's sections reached NVRx's rank monitor, which ended the silent rank.
    assert "Section 'step' has been open for" in (run.dir / "logs" / "nvrx.log").read_text()
    assert checkpointed(run) == sc.train_iters
