"""The generation script's own logic, run by bash with stand-ins for srun, squeue, sinfo, scancel
and scontrol that record what they were asked. (The same script runs on the real cluster in
tests/slurm/test_chain.py; here each branch can be driven exactly.)"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from nvrx.chain.script import render_script
from nvrx.chain.shape import ArrayShape
from nvrx.config import load_config

FAKES = {
    # srun: drop srun's own options, run the node command (sh -c ... nvrx-node LAUNCH...).
    "srun": 'while [ "$1" != sh ]; do shift; done\nexec "$@"\n',
    # squeue and sinfo fail when a `.fail` file says so, and hang when a `.hang` file does.
    "squeue": (
        'echo "squeue $*" >>"$FAKE_LOG"\n'
        '[ -e "$FAKE_DIR/squeue.hang" ] && sleep 30\n[ -e "$FAKE_DIR/squeue.fail" ] && exit 1\n'
        'cat "$FAKE_DIR/squeue.out"\n'
    ),
    "sinfo": (
        'echo "sinfo $*" >>"$FAKE_LOG"\n'
        '[ -e "$FAKE_DIR/sinfo.hang" ] && sleep 30\n[ -e "$FAKE_DIR/sinfo.fail" ] && exit 1\n'
        'cat "$FAKE_DIR/sinfo.out"\n'
    ),
    "scancel": 'echo "scancel $*" >>"$FAKE_LOG"\n',
    # hostnames: plain comma lists only (a bracket is "cannot expand").
    "scontrol": (
        'echo "scontrol $*" >>"$FAKE_LOG"\n'
        'case "$2" in\n'
        '  hostnames) case "$3" in *"["*|"") exit 1;; esac; printf "%s\\n" ${3//,/ };;\n'
        '  job) cat "$FAKE_DIR/scontrol.out";;\nesac\n'
    ),
    # The launcher: record its arguments, then behave as FAKE_RC says ("sleep" waits for TERM).
    "launcher": (
        'printf "%s\\n" "$@" >"$FAKE_DIR/launcher.args"\n'
        'env >"$FAKE_DIR/launcher.env"\n'
        'if [ "$FAKE_RC" = sleep ]; then sleep 60; exit 0; fi\n'
        'sleep "${FAKE_SLEEP:-0}"\n'
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
    (tmp_path / "sinfo.out").write_text("")
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
    # The drain poller has its own tests below (its squeue and sinfo would mix into these).
    return rendered(tmp_path, train_command=["/bin/true"], no_restart_demo=False, drain_poll="off")


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


# --- the drain poller (docs/submit-chain.md, "Drained nodes leave the rendezvous") ------------

POLLER = Path(__file__).resolve().parent.parent / "src" / "nvrx" / "chain" / "templates"


@dataclass
class Poller:
    dir: Path

    @property
    def drain(self) -> Path:
        return self.dir / "drain"

    def tasks(self, rows: str, drained: str) -> None:
        """What squeue (index|job id|nodes) and sinfo (drained nodes) answer next."""
        (self.dir / "squeue.out").write_text(rows)
        (self.dir / "sinfo.out").write_text(drained)

    def run_pass(
        self,
        timeout: int = 2,
        *,
        before: str = "",
        cap: float = 60.0,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """One drain pass of the poller functions, `before` run first in the same shell, `env`
        added to the environment; it must end within `cap` seconds."""
        script = (
            f'log() {{ echo "LOG $*"; }}\n{before}\n'
            f"source {POLLER / 'safety.sh'}\nsource {POLLER / 'drain_poller.sh'}\ndrain_pass\n"
        )
        full = {
            **os.environ,
            "PATH": f"{self.dir / 'bin'}:{os.environ['PATH']}",
            "FAKE_DIR": str(self.dir),
            "FAKE_LOG": str(self.dir / "calls.log"),
            "NVRX_DRAIN_DIR": str(self.drain),
            "NVRX_DRAIN_TIMEOUT": str(timeout),
            "NVRX_DRAIN_STATES": "drain",
            "NVRX_JOB_ID": "500",
            **(env or {}),
        }
        argv = ["bash", "-uo", "pipefail", "-c", script]
        with subprocess.Popen(
            argv, env=full, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,
        ) as proc:  # fmt: skip
            try:
                out, err = proc.communicate(timeout=cap)
            except subprocess.TimeoutExpired:
                # (Not its output: a stand-in that ignores TERM may hold the pipe, in timeout's
                # own process group; whoever planted it kills it.)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                pytest.fail(f"the pass did not end within {cap:g} s")
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    def marker(self, task: int) -> dict[str, str]:
        text = (self.drain / f"task_{task}.drained").read_text()
        return dict(line.split("=", 1) for line in text.splitlines())

    def admitted(self, job: int) -> bool:
        return (self.drain / f"admit.{job}").exists()


@pytest.fixture
def poller(tmp_path: Path) -> Poller:
    stand_ins(tmp_path)
    p = Poller(tmp_path)
    p.drain.mkdir()
    for job in (501, 502, 503):  # each task creates its token when it starts
        (p.drain / f"admit.{job}").touch()
    return p


def test_a_task_holding_a_drained_node_loses_its_admit_token_and_clean_tasks_keep_theirs(
    poller: Poller,
) -> None:
    poller.tasks("0|501|n1\n1|502|n3,n4\n2|503|n5\n", drained="n4\nn9\nn4\n")
    done = poller.run_pass()
    assert done.returncode == 0, done.stderr
    assert poller.marker(1) == {"job_id": "502", "nodes": "n3,n4", "drained": "n4"}
    assert not poller.admitted(502)
    assert poller.marker(0) == {"job_id": "501", "nodes": "n1", "drained": ""}
    assert poller.admitted(501) and poller.admitted(503)
    assert "task 1 (job 502) holds drained node n4" in done.stdout
    # One sinfo and one squeue for the whole array, whatever the number of tasks.
    calls = (poller.dir / "calls.log").read_text().splitlines()
    assert [c.split()[0] for c in calls if not c.startswith("scontrol")] == ["sinfo", "squeue"]
    assert "sinfo -h -N -a -t drain -o %N" in calls
    assert "squeue -h -r -j 500 -t R -o %K|%A|%N" in calls
    # Its other node drains too: the job log names both, in the plural.
    poller.tasks("0|501|n1\n1|502|n3,n4\n2|503|n5\n", drained="n3\nn4\n")
    both = poller.run_pass()
    assert poller.marker(1)["drained"] == "n3,n4"
    assert "task 1 (job 502) holds drained nodes n3,n4" in both.stdout


@pytest.mark.parametrize("query", ["sinfo", "squeue"])
@pytest.mark.parametrize("how", ["fail", "hang"])
def test_a_failed_or_timed_out_query_publishes_nothing(
    poller: Poller, query: str, how: str
) -> None:
    poller.tasks("1|502|n3\n", drained="n3\n")
    assert poller.run_pass().returncode == 0
    before = (poller.drain / "task_1.drained").stat().st_mtime_ns
    # The controller stops answering, and the node is in fact undrained meanwhile: the pass
    # must not read the silence as "clean" and readmit the task.
    poller.tasks("1|502|n3\n", drained="")
    (poller.dir / f"{query}.{how}").touch()
    started = time.monotonic()
    done = poller.run_pass(timeout=1)
    assert done.returncode != 0
    assert time.monotonic() - started < 10  # the query's timeout, not its 30 s
    assert f"{query} failed or timed out" in done.stdout
    assert (poller.drain / "task_1.drained").stat().st_mtime_ns == before
    assert poller.marker(1)["drained"] == "n3" and not poller.admitted(502)


def test_an_undrained_node_gives_the_task_its_token_back(poller: Poller) -> None:
    poller.tasks("1|502|n3\n", drained="n3\n")
    poller.run_pass()
    assert not poller.admitted(502)
    poller.tasks("1|502|n3\n", drained="")
    done = poller.run_pass()
    assert poller.marker(1)["drained"] == "" and poller.admitted(502)
    assert "task 1 (job 502) is clean" in done.stdout


def test_a_stale_marker_of_another_allocation_is_replaced_not_obeyed(poller: Poller) -> None:
    (poller.drain / "task_1.drained").write_text("job_id=499\nnodes=n3\ndrained=n3\n")
    poller.tasks("1|502|n3\n", drained="")
    poller.run_pass()
    assert poller.marker(1) == {"job_id": "502", "nodes": "n3", "drained": ""}
    assert poller.admitted(502)


def test_an_unchanged_verdict_is_not_rewritten_and_an_unexpandable_task_keeps_its_state(
    poller: Poller,
) -> None:
    poller.tasks("1|502|n3\n2|503|n5\n", drained="n3\n")
    poller.run_pass()
    before = (poller.drain / "task_1.drained").stat().st_mtime_ns
    time.sleep(0.05)
    poller.tasks("1|502|n[3\n2|503|n5\n", drained="")  # task 1's node list cannot be expanded
    done = poller.run_pass()
    assert "cannot expand task 1's nodes" in done.stdout
    assert (poller.drain / "task_1.drained").stat().st_mtime_ns == before
    assert not poller.admitted(502)
    mtime = (poller.drain / "task_2.drained").stat().st_mtime_ns
    time.sleep(0.05)
    poller.run_pass()
    assert (poller.drain / "task_2.drained").stat().st_mtime_ns == mtime


def test_auto_runs_the_poller_only_for_a_chain_with_spares(tmp_path: Path) -> None:
    def rendered_setting(shape: ArrayShape, drain_poll: str) -> str:
        cli: dict[str, tuple[object, str]] = {"chain.drain_poll": (drain_poll, "t")}
        chain = load_config(environ={}, cli=cli).config.chain
        text = render_script(
            chain, shape, chain_id="c", work_dir=str(tmp_path), job_name="n", nvrx_version="t"
        )
        (line,) = [x for x in text.splitlines() if x.startswith("NVRX_DRAIN_POLL=")]
        return line.split("=", 1)[1]

    with_spares, without = ArrayShape(2, 1, 0, 1, 4), ArrayShape(2, 0, 0, 1, 4)
    assert rendered_setting(with_spares, "auto") == "1"
    assert rendered_setting(ArrayShape(2, 0, 1, 1, 4), "auto") == "1"
    assert rendered_setting(without, "auto") == "0"
    assert rendered_setting(without, "on") == "1"
    assert rendered_setting(with_spares, "off") == "0"


def test_every_task_checks_its_own_token_and_task_0_runs_the_poller_until_it_ends(
    tmp_path: Path,
) -> None:
    generation = rendered(
        tmp_path,
        train_command=["/bin/true"],
        no_restart_demo=False,
        drain_poll="on",
        drain_poll_interval=1,
    )
    rc, out = finish(generation, generation.run(FAKE_SLEEP="2.5"))
    assert rc == 0, out
    token = generation.work / "nvrx" / "500" / "drain" / "admit.500"
    assert f"--ft-storage-health-check-path={token}" in generation.launcher_args()
    assert token.exists()
    polls = sum(line.startswith("sinfo") for line in generation.log)
    assert polls >= 2, out
    time.sleep(1.5)  # the poller is gone with the generation: no pass after the end
    assert sum(line.startswith("sinfo") for line in generation.log) == polls

    (tmp_path / "spare").mkdir()
    spare = rendered(tmp_path / "spare", train_command=["/bin/true"], drain_poll="on")
    spare.control.mkdir(parents=True)
    (spare.control / "datetime.txt").write_text("date_x\n")
    (spare.control / "rdzv_host").write_text("n1\n")
    rc, out = finish(spare, spare.run(task=2))
    assert rc == 0, out
    assert f"--ft-storage-health-check-path={spare.work}/nvrx/500/drain/admit.502" in (
        spare.launcher_args()
    )
    assert not any(line.startswith("sinfo") for line in spare.log)  # only task 0 polls


# --- the one-host rehearsal (docs/submit-chain.md, "Rehearsing with NVRx's own launcher") -----


def env_of(generation: Generation) -> dict[str, str]:
    lines = (generation.dir / "launcher.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def flag_of(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.fixture
def one_host(tmp_path: Path) -> Generation:
    return rendered(
        tmp_path,
        train_command=["/bin/true"],
        no_restart_demo=False,
        drain_poll="off",
        one_host_rehearsal=True,
    )


def test_a_one_host_rehearsal_gives_task_0_what_launchers_sharing_a_host_need(
    one_host: Generation,
) -> None:
    rc, out = finish(one_host, one_host.run(SLURM_ARRAY_JOB_ID="1234"))
    assert rc == 0, out
    args = one_host.launcher_args()
    # 127.0.0.1 (the node names do not resolve); this generation's own pair of ports, from its
    # job id: 29400 + (1234 mod 500) x 2, and the log server's next to it.
    assert flag_of(args, "--rdzv-endpoint") == "127.0.0.1:29868"
    assert flag_of(args, "--ft-log-server-port") == "29869"
    assert flag_of(args, "--rdzv-conf").endswith(",is_host=1")
    control = one_host.work / "nvrx" / "1234" / "control"
    assert (control / "rdzv_host").read_text() == "127.0.0.1\n"
    env = env_of(one_host)
    assert env["NVRX_ENABLE_MULTI_LAUNCHERS_PER_NODE"] == "1"
    # A short temp dir of the task's own (the launcher's Unix sockets), gone when it ends.
    tmpdir = Path(env["TMPDIR"])
    assert tmpdir.parent == Path("/tmp") and len(str(tmpdir)) <= 16
    assert not tmpdir.exists()
    assert "a real cluster needs none of this" in out


@pytest.mark.parametrize(
    ("task", "procid"), [(1, "0"), (0, "1")], ids=["another task", "task 0's second node"]
)
def test_only_task_0s_first_node_hosts_the_store(
    one_host: Generation, task: int, procid: str
) -> None:
    if task:  # a peer starts once task 0 has published (and has not closed the gate)
        one_host.control.mkdir(parents=True)
        (one_host.control / "datetime.txt").write_text("date_x\n")
        (one_host.control / "rdzv_host").write_text("127.0.0.1\n")
    rc, out = finish(one_host, one_host.run(task=task, SLURM_PROCID=procid))
    assert rc == 0, out
    args = one_host.launcher_args()
    assert flag_of(args, "--rdzv-conf").endswith(",is_host=0")
    assert args.count("--rdzv-conf") == 1 and args[-1] == "/bin/true"
    assert not Path(env_of(one_host)["TMPDIR"]).exists()
