"""How watch finds a chain's files: from the manifest, a batch script, or a work dir."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nvrx.chain.script import render_script
from nvrx.chain.shape import ArrayShape
from nvrx.config import SlurmSettings, WatchSettings, load_config
from nvrx.watch.resolve import Overrides, WatchError, resolve
from nvrx.watch.script import flags_from_script
from nvrx.watch.state import WatchState, load_state, save_state


def test_an_nvrx_generation_script_names_the_cycle_dir_of_every_generation() -> None:
    chain = load_config(environ={}).config.chain
    text = render_script(
        chain.model_copy(update={"train_command": ["/bin/true"]}),
        ArrayShape(1, 1, 1, 1, 4),
        chain_id="abc",
        work_dir="/lustre/w",
        job_name="n",
        nvrx_version="t",
    )
    found = flags_from_script(text)
    assert found["cycles"] == "/lustre/w/nvrx/*/cycle_infos"
    # (the script's last assignment of the iteration file is the non-demo one)
    assert found["checkpoint"] == "/lustre/w/checkpoints/latest_checkpointed_iteration.txt"


def test_an_upstream_style_script_with_assignments_and_the_last_flag_winning() -> None:
    text = """#!/bin/bash
#SBATCH --job-name=x
NVRX_WORK_DIR="/lustre/run 1"
JOB_DIR=$NVRX_WORK_DIR/nvrx/${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}
CKPT=$(hostname)/ckpt   # a command substitution nvrx does not evaluate
srun ft_launcher --ft-cycle-info-dir=/old/place \\
    --ft-cycle-info-dir "$JOB_DIR/cycle_infos" \\
    --ft-checkpoint-iteration-file $NVRX_WORK_DIR/checkpoints/latest_checkpointed_iteration.txt
"""
    found = flags_from_script(text)
    assert found["cycles"] == "/lustre/run 1/nvrx/*/cycle_infos"
    assert found["checkpoint"] == "/lustre/run 1/checkpoints/latest_checkpointed_iteration.txt"


def test_a_work_dir_without_manifest_uses_the_standard_layout(tmp_path: Path) -> None:
    target = resolve(Overrides(work_dir=tmp_path, platform="none"), None, WatchSettings())
    assert target.cycle_globs == (f"{tmp_path}/nvrx/*/cycle_infos/cycle_info.*",)
    assert target.checkpoint_file == f"{tmp_path}/checkpoints/latest_checkpointed_iteration.txt"
    assert target.chain.resolved_from == "work dir"


@pytest.mark.parametrize(
    ("over", "match"),
    [
        (Overrides(platform="none"), "--platform none needs --work-dir or --cycle-info-glob"),
        (
            Overrides(),
            "a JOB_ID, --work-dir DIR or --cycle-info-glob GLOB; or several chains: "
            "--fleet PATH... or --mine",
        ),
    ],
)
def test_what_watch_needs_to_start(over: Overrides, match: str) -> None:
    with pytest.raises(WatchError, match=match):
        resolve(over, None, WatchSettings())


def test_with_slurm_the_name_must_be_known(tmp_path: Path) -> None:
    with pytest.raises(WatchError, match="job name is unknown"):
        resolve(Overrides(work_dir=tmp_path), None, WatchSettings())
    target = resolve(Overrides(work_dir=tmp_path, job_name="n", user="u"), None, WatchSettings())
    assert (target.chain.name, target.chain.user) == ("n", "u")


def test_state_survives_a_round_trip_and_a_corrupt_file_starts_fresh(tmp_path: Path) -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    state = WatchState()
    state.see_checkpoint(10, now, now)
    state.see_checkpoint(20, now + timedelta(seconds=100), now + timedelta(seconds=100))
    state.see_checkpoint(30, now + timedelta(seconds=300), now + timedelta(seconds=300))
    assert state.save_interval_seconds() == 200
    state.first_seen("k", now)
    state.alerted("k", "webhook", now, 3600)
    path = tmp_path / "s" / "state.json"
    save_state(state, path)
    again = load_state(path)
    assert again.checkpoint_value == 30 and again.save_interval_seconds() == 200
    assert again.findings == {"k": now}
    assert not again.may_alert("k", "webhook", now + timedelta(seconds=10), 3600)
    assert again.may_alert("k", "webhook", now + timedelta(seconds=3600), 3600)
    path.write_text("{not json")
    fresh = load_state(path)
    assert fresh.findings == {} and fresh.note is not None and "starting fresh" in fresh.note


def test_a_flag_built_from_an_unknown_variable_is_not_guessed() -> None:
    text = (
        "BASE=$(hostname)\n"  # a command nvrx does not run
        "srun ft_launcher --ft-cycle-info-dir=$BASE/ci --ft-checkpoint-iteration-file $RUN/it.txt\n"
        "srun ft_launcher --ft-checkpoint-iteration-file=/a/it.txt $(date) \n"  # same line: unknown
    )
    assert flags_from_script(text) == {}


def test_a_relative_cycle_dir_is_relative_to_the_jobs_working_dir(tmp_path: Path) -> None:
    from nvrx.watch.resolve import _from_job

    script = tmp_path / "job.sbatch"
    script.write_text("srun ft_launcher --ft-cycle-info-dir cycle_infos/${SLURM_JOB_ID}\n")
    target = _from_job(str(script), "/lustre/run", "n", "u")
    assert target is not None
    assert target.cycle_globs == ("/lustre/run/cycle_infos/*/cycle_info.*",)


def test_the_expect_chain_marker_of_upstream_is_honoured(tmp_path: Path) -> None:
    marker = tmp_path / "expect"
    marker.write_text("train\n")
    settings = WatchSettings(expect_file=marker)
    target = resolve(Overrides(work_dir=tmp_path, job_name="train", user="u"), None, settings)
    assert target.chain.expect_running
    other = resolve(Overrides(work_dir=tmp_path, job_name="other", user="u"), None, settings)
    assert not other.chain.expect_running


def test_the_user_defaults_to_the_current_one_never_everybody(tmp_path: Path) -> None:
    from nvrx.slurm import Slurm

    target = resolve(Overrides(work_dir=tmp_path, job_name="n"), None, WatchSettings())
    assert target.chain.user == Slurm.current_user()


def test_a_bad_job_id_is_a_one_line_error() -> None:
    from nvrx.slurm import Slurm

    with pytest.raises(WatchError, match="invalid job id 'abc'"):
        resolve(Overrides(job_id="abc"), Slurm(SlurmSettings()), WatchSettings())


def test_one_pass_asks_slurm_once_per_question_and_keeps_to_its_chain(tmp_path: Path) -> None:
    from nvrx.watch.model import ChainRef
    from nvrx.watch.observe import observe_platforms
    from nvrx.watch.resolve import Target
    from tests.test_slurm_replay import Replay, slurm_for

    chain = ChainRef("train", "alice", str(tmp_path), chain_id="c1", manifest_job_ids=("100",))
    target = Target(chain, (), None, "k")
    squeue = (
        # this chain: gen 100 lost task 0, tasks 1-2 pending; gen 101 queued behind it
        "100|1|102|PENDING|JobArrayTaskLimit|alice|1||main|train|nvrx-chain=c1 gen=0 nvrx-submit=a\n"
        "100|2|103|PENDING|JobArrayTaskLimit|alice|1||main|train|nvrx-chain=c1 gen=0 nvrx-submit=a\n"
        "101|0|101|PENDING|Dependency|alice|1||main|train|nvrx-chain=c1 gen=1 nvrx-submit=b\n"
        # another chain of the same name and user, and another user's job of the name
        "200|0|200|RUNNING|None|alice|1|n4|main|train|nvrx-chain=c2 gen=0 nvrx-submit=c\n"
        "300|0|300|PENDING|Priority|bob|1||main|train|(null)\n"
    )
    sacct_window = "200_0|200|FAILED|93:0|1795944250|1795944260|n4|alice|train\n"
    sacct_targeted = "100_0|100|FAILED|0:9|1795944250|1795944270|n1|alice|train\n"
    replay = Replay(
        {
            "squeue": [(0, squeue, "")],
            "sinfo": [(0, "", "")],
            "sacct": [(0, sacct_window, ""), (0, sacct_targeted, "")],
        }
    )
    (platform,) = observe_platforms([target], slurm_for(replay), WatchSettings(), datetime.now(UTC))
    assert [g.job_id for g in platform.generations] == ["100", "101"]
    assert not platform.generation("100").task0_live  # type: ignore[union-attr]
    # the other chain's 93 is not ours; gen 100's ending came from the targeted query
    assert [(e.job_id, str(e.exit)) for e in platform.endings] == [("100", "0:9")]
    assert replay.commands() == ["squeue", "sinfo", "sacct", "sacct"]
    assert "--user=alice" in replay.argvs[0] and "--jobs=100" in replay.argvs[3]


def test_what_a_job_id_resolved_to_is_remembered_and_recalled_whole(tmp_path: Path) -> None:
    from nvrx.watch.model import ChainRef
    from nvrx.watch.resolve import Target, _recall, _remember

    settings = WatchSettings(state_dir=tmp_path / "state")
    submitted = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    chain = ChainRef(
        "train", "alice", None, manifest_job_ids=("41", "42"),
        manifest_submitted=(("41", submitted), ("42", submitted + timedelta(hours=1))),
        resolved_from="batch script",
    )  # fmt: skip
    target = Target(chain, ("/w/nvrx/*/cycle_infos/cycle_info.*",), "/w/ckpt.txt", "")
    _remember(settings, "41", target)
    assert _recall(settings, "41") == target


def test_the_script_directory_idioms_are_followed_without_running_anything() -> None:
    text = """#!/bin/bash
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT=$(dirname "$HERE")
NAME=$(basename "$0" .sbatch)
srun ft_launcher --ft-cycle-info-dir "$ROOT/runs/$NAME/${SLURM_JOB_ID}" \\
    --ft-checkpoint-iteration-file="$(realpath "$HERE/../ckpt")/latest.txt"
"""
    found = flags_from_script(text, script="/lustre/proj/jobs/train.sbatch", cwd="/lustre/w")
    assert found == {
        "cycles": "/lustre/proj/runs/train/*",
        "checkpoint": "/lustre/proj/ckpt/latest.txt",
    }


def test_sourced_files_are_followed_relative_to_the_working_dir_and_their_own_place(
    tmp_path: Path,
) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "env.sh").write_text('source "$(dirname "${BASH_SOURCE[0]}")/conf/paths.sh"\n')
    (tmp_path / "conf" / "paths.sh").write_text(
        "export NVRX_RUN=/lustre/run\nCKPT_FILE=$NVRX_RUN/checkpoints/latest.txt\n"
    )
    text = (
        ". ./env.sh\n"
        "srun ft_launcher --ft-cycle-info-dir $NVRX_RUN/cycles --ft-checkpoint-iteration-file "
        "$CKPT_FILE\n"
    )
    read_paths: list[str] = []

    def read(path: str) -> str | None:
        read_paths.append(path)
        p = Path(path)
        return p.read_text() if p.is_file() else None

    found = flags_from_script(
        text, script=str(tmp_path / "job.sbatch"), cwd=str(tmp_path), read=read
    )
    assert found == {
        "cycles": "/lustre/run/cycles",
        "checkpoint": "/lustre/run/checkpoints/latest.txt",
    }
    assert read_paths == [f"{tmp_path}/env.sh", f"{tmp_path}/conf/paths.sh"]
    # A sourced file that cannot be read leaves what it would set unknown: no guess.
    assert (
        flags_from_script(text, script=str(tmp_path / "job.sbatch"), cwd="/nowhere", read=read)
        == {}
    )


def test_sourcing_stops_at_the_depth_and_size_caps() -> None:
    from nvrx.watch.script import MAX_DEPTH, MAX_TOTAL

    def endless(path: str) -> str:
        return f"source {path}x\nDIR=/deep\n"  # every file sources the next one

    text = "source /a\nsrun ft_launcher --ft-cycle-info-dir $DIR\n"
    calls: list[str] = []

    def counting(path: str) -> str:
        calls.append(path)
        return endless(path)

    assert flags_from_script(text, read=counting) == {"cycles": "/deep"}
    assert len(calls) == MAX_DEPTH
    huge = "# " + "x" * MAX_TOTAL + "\n"
    assert flags_from_script(text, read=lambda _: huge) == {}  # past the cap: nothing known


def test_a_batch_script_that_sources_its_settings_resolves_end_to_end(tmp_path: Path) -> None:
    from nvrx.watch.resolve import _from_job

    (tmp_path / "settings.sh").write_text("CYCLES=$(pwd)/nvrx/cycle_infos\n")
    script = tmp_path / "job.sbatch"
    script.write_text(
        'source "$(dirname "$0")/settings.sh"\nsrun ft_launcher --ft-cycle-info-dir $CYCLES\n'
    )
    target = _from_job(str(script), str(tmp_path / "w"), "n", "u")
    assert target is not None
    assert target.cycle_globs == (f"{tmp_path}/w/nvrx/cycle_infos/cycle_info.*",)


def test_a_fleet_of_chains_costs_one_squeue_one_sinfo_and_one_sacct_whatever_its_size(
    tmp_path: Path,
) -> None:
    from nvrx.watch.model import ChainRef
    from nvrx.watch.observe import observe_platforms
    from nvrx.watch.resolve import Target
    from tests.test_slurm_replay import Replay, slurm_for

    targets = [
        Target(ChainRef(f"run{i}", "alice", str(tmp_path / f"run{i}")), (), None, f"k{i}")
        for i in range(3)
    ]
    squeue = (
        "100|0|100|RUNNING|None|alice|1|n1|main|run0|(null)\n"
        "101|0|101|PENDING|Dependency|alice|1||main|run0|(null)\n"
        "200|1|201|PENDING|Priority|alice|1||main|run1|(null)\n"
        "300|0|300|RUNNING|None|bob|1|n3|main|run2|(null)\n"  # bob's job of that name: not ours
    )
    sacct = (
        "90_0|90|FAILED|0:9|1795944250|1795944270|n1|alice|run0\n"
        "290_0|290|COMPLETED|0:0|1795944250|1795944270|n2|alice|run2\n"
    )
    late = "200_0|200|FAILED|1:0|1795944250|1795944260|n2|alice|run1\n"
    replay = Replay(
        {
            "squeue": [(0, squeue, "")],
            "sinfo": [(0, "", "")],
            "sacct": [(0, sacct, ""), (0, late, "")],
        }
    )
    platforms = observe_platforms(targets, slurm_for(replay), WatchSettings(), datetime.now(UTC))
    assert replay.commands() == ["squeue", "sinfo", "sacct", "sacct"]  # last: gen 200's task 0
    assert "--name=run0,run1,run2" in replay.argvs[0] and "--user=alice" in replay.argvs[0]
    assert [[g.job_id for g in p.generations] for p in platforms] == [["100", "101"], ["200"], []]
    assert [[e.job_id for e in p.endings] for p in platforms] == [["90"], ["200"], ["290"]]
    assert replay.argvs[3][-1] == "--jobs=200"


def test_a_failed_fleet_query_blinds_every_chain_never_one_alone(tmp_path: Path) -> None:
    from nvrx.watch.model import ChainRef
    from nvrx.watch.observe import observe_platforms
    from nvrx.watch.resolve import Target
    from tests.test_slurm_replay import Replay, slurm_for

    targets = [Target(ChainRef(f"run{i}", "alice", None), (), None, f"k{i}") for i in range(2)]
    down = (1, "", "squeue: error: Unable to contact slurm controller (connect failure)")
    replay = Replay({"squeue": [down] * 100})
    platforms = observe_platforms(targets, slurm_for(replay), WatchSettings(), datetime.now(UTC))
    assert [p.queue_ok for p in platforms] == [False, False]
    assert all("Unable to contact" in (p.queue_error or "") for p in platforms)
