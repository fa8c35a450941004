"""The generation script's own logic, run by bash with stand-ins for srun, squeue, scancel and
scontrol that record what they were asked. (The same script runs on the real cluster in
tests/slurm/test_chain.py; here each branch can be driven exactly.)"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from nvrx.chain.script import render_script
from nvrx.chain.shape import ArrayShape
from nvrx.config import load_config

FAKES = {
    # srun: drop srun's own options, run the node command (sh -c ... nvrx-node LAUNCH...).
    "srun": 'while [ "$1" != sh ]; do shift; done\nexec "$@"\n',
    "squeue": 'echo "squeue $*" >>"$FAKE_LOG"\ncat "$FAKE_DIR/squeue.out"\n',
    "scancel": 'echo "scancel $*" >>"$FAKE_LOG"\n',
    "scontrol": (
        'echo "scontrol $*" >>"$FAKE_LOG"\n'
        'case "$2" in hostnames) echo n7;; job) cat "$FAKE_DIR/scontrol.out";; esac\n'
    ),
    # The launcher: record its arguments, then behave as FAKE_RC says ("sleep" waits for TERM).
    "launcher": (
        'printf "%s\\n" "$@" >"$FAKE_DIR/launcher.args"\n'
        'env >"$FAKE_DIR/launcher.env"\n'
        'if [ "$FAKE_RC" = sleep ]; then sleep 60; exit 0; fi\n'
        'exit "$FAKE_RC"\n'
    ),
}


@dataclass
class Generation:
    dir: Path
    work: Path
    script: Path

    @property
    def log(self) -> list[str]:
        path = self.dir / "calls.log"
        return path.read_text().splitlines() if path.exists() else []

    @property
    def control(self) -> Path:
        return self.work / "nvrx" / "500" / "control"

    def launcher_args(self) -> list[str]:
        return (self.dir / "launcher.args").read_text().splitlines()

    def run(self, task: int = 0, rc: str = "0", **env: str) -> subprocess.Popen[str]:
        full = {
            **os.environ,
            "PATH": f"{self.dir / 'bin'}:{os.environ['PATH']}",
            "FAKE_DIR": str(self.dir),
            "FAKE_LOG": str(self.dir / "calls.log"),
            "FAKE_RC": rc,
            "SLURM_JOB_ID": str(500 + task),
            "SLURM_ARRAY_JOB_ID": "500",
            "SLURM_ARRAY_TASK_ID": str(task),
            "SLURM_JOB_NODELIST": "n7",
            "SLURM_JOB_NUM_NODES": "1",
            "SLURM_JOB_USER": "alice",
            "SLURM_JOB_NAME": "shared-name",
            **env,
        }
        # Output to a file, not a pipe: a stand-in launcher left running must not hold it open.
        with open(self.dir / "output.txt", "w") as out:
            return subprocess.Popen(
                ["bash", str(self.script)],
                env=full,
                cwd=self.dir,
                text=True,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def output(self) -> str:
        return (self.dir / "output.txt").read_text()


def stand_ins(tmp_path: Path) -> Path:
    """The stand-ins' bin dir in `tmp_path`, with an empty queue and generation 500's record."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in FAKES.items():
        path = bin_dir / name
        path.write_text("#!/bin/bash\n" + body)
        path.chmod(0o755)
    (tmp_path / "squeue.out").write_text("")
    (tmp_path / "scontrol.out").write_text("JobId=500 ArrayJobId=500 ArrayTaskThrottle=2\n")
    return bin_dir


def rendered(tmp_path: Path, **overrides: object) -> Generation:
    """The generation script for the built-in defaults plus `overrides`, with the stand-in
    launcher."""
    bin_dir = stand_ins(tmp_path)
    work = tmp_path / "work"
    cli: dict[str, tuple[object, str]] = {"chain.launcher": ([str(bin_dir / "launcher")], "t")}
    cli |= {f"chain.{key}": (value, "t") for key, value in overrides.items()}
    chain = load_config(environ={}, cli=cli).config.chain
    text = render_script(
        chain,
        ArrayShape(1, 1, 1, 1, 4),
        chain_id="abc123",
        work_dir=str(work),
        job_name="shared-name",
        nvrx_version="test",
    )
    script = tmp_path / "gen.sbatch"
    script.write_text(text)
    return Generation(tmp_path, work, script)


@pytest.fixture
def generation(tmp_path: Path) -> Generation:
    return rendered(tmp_path, train_command=["/bin/true"], no_restart_demo=False)


def finish(generation: Generation, proc: subprocess.Popen[str]) -> tuple[int, str]:
    rc = proc.wait(timeout=60)
    return rc, generation.output()


def test_the_launcher_gets_the_reference_flags(generation: Generation) -> None:
    rc, out = finish(generation, generation.run())
    assert rc == 0, out
    args = generation.launcher_args()
    flag = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
    assert flag["--nnodes"] == "1:2" and flag["--nproc-per-node"] == "4"
    assert flag["--rdzv-endpoint"] == "n7:29400" and flag["--rdzv-id"] == "500"
    assert flag["--ft-cycle-info-dir"] == f"{generation.work}/nvrx/500/cycle_infos"
    assert flag["--ft-checkpoint-iteration-file"] == (
        f"{generation.work}/checkpoints/latest_checkpointed_iteration.txt"
    )
    assert flag["--max-restarts"] == "7" and args[-1] == "/bin/true"
    assert (generation.control / "rdzv_host").read_text() == "n7\n"


def test_a_chain_with_the_default_settings_injects_no_fault(tmp_path: Path) -> None:
    # Megatron's command line as the defaults render it: no injector flag, no GPU failure for
    # the launcher, and the real checkpoint file as the progress file (not the demo's).
    generation = rendered(tmp_path)
    rc, out = finish(generation, generation.run())
    assert rc == 0, out
    args = generation.launcher_args()
    assert "--enable-ft-package" in args  # it is Megatron's command line
    assert not [a for a in args if a.startswith("--fault-injector")], args
    assert "--ft-max-no-progress-cycles" not in args
    iteration_file = args[args.index("--ft-checkpoint-iteration-file") + 1]
    assert iteration_file.endswith("/checkpoints/latest_checkpointed_iteration.txt")
    env = dict(
        line.split("=", 1)
        for line in (generation.dir / "launcher.env").read_text().splitlines()
        if "=" in line
    )
    assert env["NVRX_FAULT_INJECT"] == "0" and "NVRX_INJECT_GPU_FAILURE" not in env


def test_an_ordinary_ending_closes_the_gate_and_cancels_only_the_generation(
    generation: Generation,
) -> None:
    rc, out = finish(generation, generation.run(rc="5"))
    assert rc == 5, out
    assert (generation.control / "rdzv_closed").exists()
    assert generation.log[-1] == "scancel 500"
    assert not any(line.startswith("squeue") for line in generation.log)  # no chain cancel


def test_no_restart_cancels_this_chains_other_generations_only(generation: Generation) -> None:
    (generation.dir / "squeue.out").write_text(
        "500|nvrx-chain=abc123 gen=0 nvrx-submit=a\n"  # this generation: cancelled last
        "501|nvrx-chain=abc123 gen=1 nvrx-submit=b\n"
        "502|nvrx-chain=abc1234 gen=0 nvrx-submit=c\n"  # another chain whose id extends ours
        "503|nvrx-chain=zzz gen=0 nvrx-submit=d\n"  # another chain sharing the name
        "504|\n"  # a job of the name nvrx did not submit
        "501|nvrx-chain=abc123 gen=1 nvrx-submit=b\n"  # its second task
    )
    rc, out = finish(generation, generation.run(rc="93"))
    assert rc == 93, out
    assert (generation.control / "no_restart").exists()
    cancels = [line for line in generation.log if line.startswith("scancel")]
    assert cancels == ["scancel 501", "scancel 500"]
    assert "squeue -h -r -u alice -n shared-name -o %F|%k" in generation.log


def test_the_verdict_survives_as_a_file_when_93_reaches_task_0_as_143(
    generation: Generation,
) -> None:
    # Another node's launcher exited 93 and wrote the flag; task 0's step ends with 143.
    generation.control.mkdir(parents=True)
    (generation.control / "no_restart").touch()
    rc, _ = finish(generation, generation.run(rc="143"))
    assert rc == 143
    assert any(line.startswith("squeue") for line in generation.log)  # the chain cancel ran


def test_a_signal_to_the_batch_shell_tears_down_at_once(generation: Generation) -> None:
    proc = generation.run(rc="sleep")
    deadline = time.monotonic() + 20
    while not (generation.dir / "launcher.args").exists():
        assert time.monotonic() < deadline, "the launcher never started"
        time.sleep(0.1)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rc, out = finish(generation, proc)
    assert rc == 143, out
    assert time.monotonic() - started < 10  # not after the launcher's 60 s
    assert (generation.control / "rdzv_closed").exists()
    assert generation.log[-1] == "scancel 500"


def test_a_peer_behind_a_closed_gate_never_launches(generation: Generation) -> None:
    generation.control.mkdir(parents=True)
    (generation.control / "datetime.txt").write_text("date_x\n")
    (generation.control / "rdzv_host").write_text("n1\n")  # stale: task 0 already exited
    (generation.control / "rdzv_closed").touch()
    rc, out = finish(generation, generation.run(task=2))
    assert rc == 1 and "task 0 exited" in out
    assert not (generation.dir / "launcher.args").exists()
    assert not any(line.startswith("scancel") for line in generation.log)  # peers never cancel


def test_the_live_throttle_wins_over_the_rendered_width(generation: Generation) -> None:
    (generation.dir / "scontrol.out").write_text("JobId=500 ArrayJobId=500 ArrayTaskThrottle=3\n")
    rc, out = finish(generation, generation.run())
    assert rc == 0
    assert "Array throttle is 3, not 2; using the throttle" in out
    args = generation.launcher_args()
    assert args[args.index("--nnodes") + 1] == "1:3"
