"""The generation script `nvrx submit-chain` renders, against whoever can write the chain's work
dir and against the environment the job inherits (docs/submit-chain.md, "Links and the
environment"):

- no file the script writes is written through a link or lands in the directory a link names:
  the drain poller's markers, its temporary files and admit tokens, the token every task creates
  when it starts, task 0's control files and each node's no-restart flag;
- Slurm's clients never see the variables that set their options, which would narrow a query
  (and "nothing drained in this partition" would readmit a drained task);
- a query that ignores TERM is killed, so a pass ends within its timeout and the kill grace.

Run by bash with the stand-in Slurm commands of tests/test_chain_script.py; the same script runs
on the real cluster in tests/slurm/test_chain.py."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..test_chain_script import Poller, finish, rendered, stand_ins

# The variables Slurm 22.05's clients read as options (their man pages, ENVIRONMENT VARIABLES,
# and the names in the installed binaries, which add SQUEUE_ARRAY_UNIQUE and SQUEUE_SIB).
SINFO_OPTIONS = (
    "SINFO_ALL", "SINFO_FEDERATION", "SINFO_FORMAT", "SINFO_LOCAL", "SINFO_PARTITION",
    "SINFO_SORT",
)  # fmt: skip
SQUEUE_OPTIONS = (
    "SQUEUE_ACCOUNT", "SQUEUE_ALL", "SQUEUE_ARRAY", "SQUEUE_ARRAY_UNIQUE", "SQUEUE_FEDERATION",
    "SQUEUE_FORMAT", "SQUEUE_FORMAT2", "SQUEUE_LICENSES", "SQUEUE_LOCAL", "SQUEUE_NAMES",
    "SQUEUE_PARTITION", "SQUEUE_PRIORITY", "SQUEUE_QOS", "SQUEUE_SIB", "SQUEUE_SIBLING",
    "SQUEUE_SORT", "SQUEUE_STATES", "SQUEUE_USERS",
)  # fmt: skip
SCANCEL_OPTIONS = (
    "SCANCEL_ACCOUNT", "SCANCEL_BATCH", "SCANCEL_CTLD", "SCANCEL_FULL", "SCANCEL_HURRY",
    "SCANCEL_INTERACTIVE", "SCANCEL_NAME", "SCANCEL_PARTITION", "SCANCEL_QOS", "SCANCEL_STATE",
    "SCANCEL_USER", "SCANCEL_VERBOSE", "SCANCEL_WCKEY",
)  # fmt: skip
SCONTROL_OPTIONS = (
    "SCONTROL_ALL", "SCONTROL_FEDERATION", "SCONTROL_FUTURE", "SCONTROL_LOCAL", "SCONTROL_SIB",
    "SCONTROL_SIBLING",
)  # fmt: skip
SHARED_OPTIONS = ("SLURM_CLUSTERS", "SLURM_BITSTR_LEN", "SLURM_TIME_FORMAT", "SLURM_DEBUG_FLAGS")
OPTIONS = SINFO_OPTIONS + SQUEUE_OPTIONS + SCANCEL_OPTIONS + SCONTROL_OPTIONS + SHARED_OPTIONS

# Ahead of each Slurm stand-in: a client that sees one of its own option variables answers as
# the real one would with a narrowed query (nothing), and says so in `seen`.
CLIENT_OPTIONS = {
    "sinfo": SINFO_OPTIONS + SHARED_OPTIONS,
    "squeue": SQUEUE_OPTIONS + SHARED_OPTIONS,
    "scancel": SCANCEL_OPTIONS + SHARED_OPTIONS,
    "scontrol": SCONTROL_OPTIONS + SHARED_OPTIONS,
}


def narrowing_stand_ins(bin_dir: Path) -> None:
    for name, options in CLIENT_OPTIONS.items():
        narrowed = (
            f"narrowed=\nfor v in {' '.join(options)}; do\n"
            '  if [ -n "${!v+set}" ]; then echo "${0##*/} saw $v" >>"$FAKE_DIR/seen"; narrowed=1; fi\n'
            'done\n[ -z "$narrowed" ] || exit 0\n'
        )
        path = bin_dir / name
        shebang, body = path.read_text().split("\n", 1)
        path.write_text(f"{shebang}\n{narrowed}{body}")


def seen(directory: Path) -> list[str]:
    path = directory / "seen"
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def poller(tmp_path: Path) -> Poller:
    narrowing_stand_ins(stand_ins(tmp_path))
    p = Poller(tmp_path)
    p.drain.mkdir()
    (p.drain / "admit.502").touch()  # task 1 created its token when it started
    return p


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the work dir, where nothing may ever be written."""
    path = tmp_path / "outside"
    path.mkdir()
    return path


@pytest.fixture
def stand_in_pids(tmp_path: Path) -> Iterator[Path]:
    """A file where stand-ins that outlive a test write their pid; each is killed afterwards."""
    path = tmp_path / "pids"
    yield path
    for line in path.read_text().split() if path.exists() else []:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line), signal.SIGKILL)


# --- links in the drain dir -------------------------------------------------------------------


def test_a_marker_that_links_to_a_directory_is_replaced_and_nothing_moves_into_it(
    poller: Poller, outside: Path
) -> None:
    (poller.drain / "task_1.drained").symlink_to(outside, target_is_directory=True)
    poller.tasks("1|502|n3\n", drained="n3\n")
    done = poller.run_pass()
    assert done.returncode == 0, done.stderr
    assert list(outside.iterdir()) == []
    assert not (poller.drain / "task_1.drained").is_symlink()
    assert poller.marker(1) == {"job_id": "502", "nodes": "n3", "drained": "n3"}
    assert not poller.admitted(502)


def test_a_planted_temporary_name_is_never_written_through(poller: Poller, outside: Path) -> None:
    # The name the poller used to write through (FILE.tmp.<its pid>), planted by whoever can
    # write the drain dir: the pass must neither write the link's target nor publish the link.
    target = outside / "written-through"
    planted = f'ln -s {target} "$NVRX_DRAIN_DIR/task_1.drained.tmp.$$"'
    poller.tasks("1|502|n3\n", drained="")
    done = poller.run_pass(before=planted)
    assert done.returncode == 0, done.stderr
    assert not target.exists() and not target.is_symlink()
    assert not (poller.drain / "task_1.drained").is_symlink()
    assert poller.marker(1) == {"job_id": "502", "nodes": "n3", "drained": ""}


def test_a_dangling_token_link_creates_nothing_outside_and_a_drained_token_link_goes(
    poller: Poller, outside: Path
) -> None:
    token = poller.drain / "admit.502"
    token.unlink()
    token.symlink_to(outside / "planted")
    poller.tasks("1|502|n3\n", drained="")
    done = poller.run_pass()
    assert done.returncode == 0, done.stderr
    assert list(outside.iterdir()) == []
    assert not token.is_symlink() and poller.admitted(502)  # a clean task keeps its token
    # Drained, with a link to a file outside as its token: the link goes, the file stays.
    precious = outside / "precious"
    precious.write_text("keep\n")
    token.unlink()
    token.symlink_to(precious)
    poller.tasks("1|502|n3\n", drained="n3\n")
    poller.run_pass()
    assert not token.is_symlink() and not poller.admitted(502)
    assert precious.read_text() == "keep\n"


def test_a_drained_task_whose_token_is_a_directory_is_still_evicted(poller: Poller) -> None:
    # rm cannot remove it, and the launcher's check (the path exists) would pass: it is moved
    # aside, so a refused write never readmits a drained task.
    token = poller.drain / "admit.502"
    token.unlink()
    token.mkdir()
    poller.tasks("1|502|n3\n", drained="n3\n")
    done = poller.run_pass()
    assert done.returncode == 0, done.stderr
    assert not os.path.lexists(token)


def test_a_marker_that_cannot_be_written_is_one_line_and_the_pass_goes_on(
    poller: Poller,
) -> None:
    (poller.drain / "task_1.drained").mkdir()  # a directory where task 1's marker goes
    (poller.drain / "admit.503").touch()
    poller.tasks("1|502|n3\n2|503|n5\n", drained="n3\nn5\n")
    done = poller.run_pass()
    assert done.returncode == 0, done.stderr
    refused = [line for line in done.stdout.splitlines() if "cannot write" in line]
    assert refused == [
        f"LOG drain poller: cannot write {poller.drain}/task_1.drained (a directory there?); "
        "the marker keeps its last state"
    ]
    assert not poller.admitted(502) and not poller.admitted(503)  # both still evicted
    assert poller.marker(2)["drained"] == "n5"


# --- links at the files task 0 and every task write -------------------------------------------


def test_the_token_a_task_creates_at_start_never_writes_through_a_link(
    tmp_path: Path, outside: Path
) -> None:
    spare = rendered(tmp_path, train_command=["/bin/true"], drain_poll="on")
    spare.control.mkdir(parents=True)
    (spare.control / "datetime.txt").write_text("date_x\n")
    (spare.control / "rdzv_host").write_text("n1\n")
    drain = spare.work / "nvrx" / "500" / "drain"
    drain.mkdir()
    precious = outside / "precious"
    precious.write_text("keep\n")
    (drain / "admit.502").symlink_to(precious)
    rc, out = finish(spare, spare.run(task=2))
    assert rc == 0, out
    assert precious.read_text() == "keep\n"
    assert (drain / "admit.502").is_file() and not (drain / "admit.502").is_symlink()
    assert f"--ft-storage-health-check-path={drain}/admit.502" in spare.launcher_args()


def test_task_0s_control_files_and_the_no_restart_flag_never_follow_a_link(
    tmp_path: Path, outside: Path
) -> None:
    generation = rendered(
        tmp_path, train_command=["/bin/true"], no_restart_demo=False, drain_poll="off"
    )
    control = generation.control
    control.mkdir(parents=True)
    (control / "rdzv_closed").symlink_to(outside / "closed")  # dangling: the gate is open
    (control / "no_restart").symlink_to(outside / "no_restart")
    (control / "rdzv_host").symlink_to(outside, target_is_directory=True)
    # The script's own pid names its old temporary files: plant one through BASH_ENV, which
    # bash runs first in the script's shell.
    plant = tmp_path / "plant.sh"
    plant.write_text(f'ln -s {outside / "datetime"} "{control}/datetime.txt.tmp.$$"\n')
    rc, out = finish(generation, generation.run(rc="93", BASH_ENV=str(plant)))
    assert rc == 93, out
    assert list(outside.iterdir()) == []
    for name in ("rdzv_closed", "no_restart", "rdzv_host", "datetime.txt"):
        assert (control / name).is_file() and not (control / name).is_symlink(), name
    assert (control / "rdzv_host").read_text() == "n7\n"
    assert any(line.startswith("squeue") for line in generation.log)  # the chain cancel ran


def test_a_control_dir_that_is_a_link_is_refused_and_the_generation_ends(
    tmp_path: Path, outside: Path
) -> None:
    generation = rendered(tmp_path, train_command=["/bin/true"], drain_poll="off")
    generation.control.parent.mkdir(parents=True)
    generation.control.symlink_to(outside, target_is_directory=True)
    rc, out = finish(generation, generation.run())
    assert rc == 1
    assert f"cannot use {generation.control} (a link or not a directory: not followed)" in out
    assert list(outside.iterdir()) == []
    assert not (generation.dir / "launcher.args").exists()
    assert generation.log[-1] == "scancel 500"  # task 0 still ends its generation


# --- Slurm's option variables -----------------------------------------------------------------


@pytest.mark.parametrize(
    "exported", [("SINFO_PARTITION",), OPTIONS], ids=["SINFO_PARTITION", "every-one-at-once"]
)
def test_option_variables_in_the_jobs_environment_never_readmit_a_drained_task(
    poller: Poller, exported: tuple[str, ...]
) -> None:
    poller.tasks("1|502|n3\n", drained="n3\n")
    assert poller.run_pass().returncode == 0
    assert not poller.admitted(502)
    # The job inherited them (sbatch's --export=ALL; `seen` names each one a client saw): a
    # query they narrowed would answer "nothing drained" and give the drained task its token
    # back.
    done = poller.run_pass(env=dict.fromkeys(exported, "elsewhere"))
    assert done.returncode == 0, done.stderr
    assert poller.marker(1)["drained"] == "n3" and not poller.admitted(502)
    assert seen(poller.dir) == []


def test_the_chain_cancel_sees_the_whole_queue_whatever_the_job_exports(tmp_path: Path) -> None:
    # One variable from the job's environment, one exported by the script's own header
    # (chain.extra_env): both are set when squeue and scancel run.
    generation = rendered(
        tmp_path, train_command=["/bin/true"], no_restart_demo=False, drain_poll="off",
        extra_env={"SCANCEL_STATE": "PENDING"},
    )  # fmt: skip
    narrowing_stand_ins(generation.dir / "bin")
    (generation.dir / "squeue.out").write_text("501|nvrx-chain=abc123 gen=1 nvrx-submit=b\n")
    rc, out = finish(generation, generation.run(rc="93", SQUEUE_STATES="RUNNING"))
    assert rc == 93, out
    assert [line for line in generation.log if line.startswith("scancel")] == [
        "scancel 501",
        "scancel 500",
    ]
    assert seen(generation.dir) == []


# --- a query that ignores TERM ----------------------------------------------------------------


def test_a_sinfo_that_ignores_term_is_killed_and_the_pass_ends_within_its_grace(
    poller: Poller, stand_in_pids: Path
) -> None:
    # (squeue runs under the same `timeout -k`.)
    poller.tasks("1|502|n3\n", drained="n3\n")
    assert poller.run_pass().returncode == 0
    (poller.dir / "bin" / "sinfo").write_text(
        f"#!/bin/bash\necho $$ >>{stand_in_pids}\ntrap '' TERM\nexec sleep 30\n"
    )
    started = time.monotonic()
    done = poller.run_pass(1, cap=10)
    assert time.monotonic() - started < 6  # 1 s, then KILL 2 s after TERM
    assert done.returncode != 0
    assert "sinfo failed or timed out after 1s; this pass publishes nothing" in done.stdout
    assert poller.marker(1)["drained"] == "n3" and not poller.admitted(502)
