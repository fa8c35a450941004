"""Every input is bounded in size, time and depth: `/dev/zero` anywhere a file goes, logs
built to be slow, judge replies built to be slow or huge, YAML bombs, absurd chain depths and
intervals, deep or doubling user.env expansions and 5,000-digit numbers are each a prompt
one-line error (or, in a log, just text), never a hang, a MemoryError or a traceback."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path

import pytest

from ..test_watch_watcher import healthy_run
from .harness import assert_bad_input, assert_no_traceback, run_nvrx
from .inputs import (
    HUGE,
    FakeOpenAI,
    Reply,
    fr,
    good,
    make_session,
    nested_default,
    srun_task_range_log,
    yaml_bomb,
)

CAP = 256 << 20  # limits.max_input_bytes by default
FAST = 10.0  # wall-time budget (s) of a command that must refuse or finish at once
TRUTH = ["--fault-type", "SEGFAULT", "--rank", "1", "--iter", "3", "--nodes", "1"]
SEGV_LOG = (
    "0: iteration 5 / 100\n1: iteration 5 / 100\n1: Fatal Python error: Segmentation fault\n"
    "srun: error: n2: task 1: Segmentation fault (core dumped)\n"
)


def names_the_cap(line: str) -> bool:
    return str(CAP) in line or "256 MiB" in line


@pytest.mark.parametrize(
    "flags",
    [
        ["--log-path", "/dev/zero", "--log-output", good(1, "Segmentation fault")],
        ["--log-output", "@/dev/zero"],
        ["--log-output", good(1, "Segmentation fault"), "--fr-output", "@/dev/zero"],
    ],
    ids=["log-path", "log-output", "fr-output"],
)
def test_dev_zero_as_a_score_input_is_refused_at_the_cap(home: Path, flags: list[str]) -> None:
    proc = run_nvrx("score", *TRUTH, *flags, cwd=home, wall=FAST, cpu_seconds=8)
    line = assert_bad_input(proc, "/dev/zero")
    assert names_the_cap(line), proc.describe()


def test_a_job_log_symlinked_to_dev_zero_is_refused_at_the_cap(tmp_path: Path, home: Path) -> None:
    session = make_session(tmp_path, [("SEGFAULT", 3, good(3, "Segmentation fault"), fr(3))]).dir
    [log] = (session / "n2_SEGFAULT_r3_i5" / "logs" / "slurm").iterdir()
    log.unlink()
    log.symlink_to("/dev/zero")
    proc = run_nvrx("score", str(session), cwd=home, wall=FAST, cpu_seconds=8)
    line = assert_bad_input(proc)
    assert "main_workload.log" in line or "/dev/zero" in line, proc.describe()
    assert names_the_cap(line) or "symlink" in line, proc.describe()


def test_analyze_log_of_dev_zero_is_refused_at_the_cap(home: Path) -> None:
    proc = run_nvrx("analyze", "log", "/dev/zero", cwd=home, wall=FAST, cpu_seconds=8)
    line = assert_bad_input(proc, "/dev/zero")
    assert names_the_cap(line), proc.describe()


def test_limits_max_input_bytes_is_a_setting_that_caps_inputs(tmp_path: Path, home: Path) -> None:
    shown = run_nvrx("config", "show", "--json", cwd=home)
    assert shown.code == 0, shown.describe()
    setting = json.loads(shown.stdout)["settings"].get("limits.max_input_bytes")
    assert setting == {"value": CAP, "source": "default"}, setting
    log = tmp_path / "job.log"
    log.write_text("1: iteration 5 / 100\n" * 500)  # 10.5 KB
    proc = run_nvrx(
        "score", *TRUTH, "--log-path", str(log), "--log-output", good(1, "Segmentation fault"),
        cwd=home, env={"NVRX_LIMITS_MAX_INPUT_BYTES": "4096"}, wall=FAST,
    )  # fmt: skip
    assert_bad_input(proc, str(log), "4096")


def test_config_and_env_files_over_1_mib_are_refused(tmp_path: Path, home: Path) -> None:
    big = tmp_path / "nvrx.yaml"
    big.write_text("# padding\n" * 120_000)  # 1.2 MB of comments: valid YAML, but too large
    big_env = tmp_path / "user.env"
    big_env.write_text("# padding\n" * 120_000)
    for flag, path in (
        ("--config", "/dev/zero"),
        ("--env-file", "/dev/zero"),
        ("--config", str(big)),
        ("--env-file", str(big_env)),
    ):
        proc = run_nvrx("config", "show", flag, path, cwd=home, wall=FAST, cpu_seconds=8)
        assert_bad_input(proc, path)


def test_analyze_log_of_srun_task_ranges_finishes_in_seconds(tmp_path: Path, home: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(srun_task_range_log())
    assert 5000 < log.stat().st_size < 6000
    proc = run_nvrx("analyze", "log", str(log), cwd=home, wall=5.0, cpu_seconds=5)
    assert_no_traceback(proc)
    assert proc.code == 0, proc.describe()


def test_analyze_log_reads_past_a_100_mb_line_in_flat_memory(tmp_path: Path, home: Path) -> None:
    log = tmp_path / "job.log"
    with log.open("w") as out:
        out.write("0: iteration 5 / 100\n1: ")
        for _ in range(100):
            out.write("x" * (1 << 20))  # one 100 MB line of rank 1
        out.write("\n1: RuntimeError: CUDA error: an illegal memory access was encountered\n")
    proc = run_nvrx("analyze", "log", str(log), "--json", cwd=home, memory_mb=96, wall=FAST)
    assert proc.code == 0, proc.describe()
    doc = json.loads(proc.stdout)
    assert (doc["fault_class"], doc["root_rank"]) == ("GPU_ERROR", 1)
    assert [e["line"] for e in doc["evidence"]] == [3]


def test_analyze_log_streams_a_regular_file_past_the_input_cap_but_not_a_pipe(
    tmp_path: Path, home: Path
) -> None:
    log = tmp_path / "job.log"
    log.write_text("1: iteration 5 / 100\n" * 500 + SEGV_LOG)  # 10.6 KB, over a 4 KiB cap
    capped = {"NVRX_LIMITS_MAX_INPUT_BYTES": "4096"}
    proc = run_nvrx("analyze", "log", str(log), "--json", cwd=home, env=capped, wall=FAST)
    assert proc.code == 0, proc.describe()  # a regular file has an end: read to it
    assert json.loads(proc.stdout)["fault_class"] == "SEGFAULT"
    fifo = tmp_path / "job.fifo"
    os.mkfifo(fifo)

    def write() -> None:
        with contextlib.suppress(BrokenPipeError), fifo.open("wb") as out:
            out.write(log.read_bytes())

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    piped = run_nvrx("analyze", "log", str(fifo), cwd=home, env=capped, wall=FAST)
    writer.join(timeout=FAST)
    assert_bad_input(piped, str(fifo), "4096")  # a stream may have no end: it ends at the cap


def _one_session(tmp_path: Path) -> Path:
    return make_session(tmp_path, [("SEGFAULT", 3, good(3, "Segmentation fault"), fr(3))]).dir


def _score_one_reply(tmp_path: Path, home: Path, content: str, budget: float) -> None:
    """`nvrx score` of one experiment whose judge answers `content`: unscored (exit 3), with
    no traceback, within `budget` seconds of wall and CPU time."""
    session = _one_session(tmp_path)
    with FakeOpenAI(default=Reply(content=content)) as server:
        proc = run_nvrx(
            "score", str(session), "--judge", "llm", "--base-url", server.base_url, "--json",
            "--no-cache", "--set", "score.retry_initial_backoff=0.01",
            "--set", "score.retry_max_backoff=0.02",
            cwd=home, wall=budget, cpu_seconds=int(budget),
        )  # fmt: skip
    assert_no_traceback(proc)
    assert proc.code == 3, proc.describe()
    [case] = json.loads(proc.stdout)["cases"]
    assert case["verdict"]["status"] == "unscored"


def test_a_judge_reply_over_max_reply_bytes_is_unscored_quickly(tmp_path: Path, home: Path) -> None:
    _score_one_reply(tmp_path, home, "{ " * 10_000_000, budget=15.0)  # a 20 MB answer


def test_a_judge_reply_of_open_braces_is_parsed_in_linear_time(tmp_path: Path, home: Path) -> None:
    _score_one_reply(tmp_path, home, "{ " * 100_000, budget=3.0)  # 200 KB: 4 s on the old code


def test_yaml_aliases_in_a_config_file_are_refused(tmp_path: Path, home: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(yaml_bomb())
    assert len(bomb.read_bytes()) < 460
    plain = tmp_path / "alias.yaml"
    plain.write_text("slurm:\n  partition: &p batch\nchain:\n  job_name: *p\n")
    for path in (bomb, plain):
        proc = run_nvrx("config", "show", "--config", str(path), cwd=home, wall=5.0)
        assert_bad_input(proc, str(path))


REHEARSAL = ["--launcher", "/bin/true", "--set", "chain.train_command=/bin/true"]


@pytest.mark.parametrize("depth", ["100000000000000", "1001"])
def test_submit_chain_depth_has_an_upper_limit(
    shared_dir: Path, home: Path, slurm_env: dict[str, str], depth: str
) -> None:
    work = shared_dir / "run"
    proc = run_nvrx(
        "submit-chain", "--dry-run", "-K", depth, "--work-dir", str(work), *REHEARSAL,
        cwd=home, env=slurm_env, wall=5.0, memory_mb=768,
    )  # fmt: skip
    assert_bad_input(proc, "depth")
    assert "[dry-run] sbatch" not in proc.stdout
    assert not work.exists()


def test_a_huge_watch_interval_is_a_one_line_error(tmp_path: Path, home: Path) -> None:
    work = tmp_path / "w"
    healthy_run(work)
    proc = run_nvrx(
        "watch", "--platform", "none", "--work-dir", str(work), "--state-dir",
        str(tmp_path / "state"), "--interval", str(10**30), cwd=home, wall=FAST,
    )  # fmt: skip
    assert_bad_input(proc, "interval")


@pytest.mark.parametrize("depth", [40, 600])
def test_user_env_nesting_deeper_than_32_levels_is_refused(
    tmp_path: Path, home: Path, depth: int
) -> None:
    env_file = tmp_path / "user.env"
    env_file.write_text(f"NVRX_WATCH_USER={nested_default(depth)}\n")
    proc = run_nvrx("config", "show", "--env-file", str(env_file), cwd=home, wall=FAST)
    assert_bad_input(proc, str(env_file))


@pytest.mark.parametrize("doublings", [16, 40])
def test_user_env_expansions_longer_than_64_kib_are_refused(
    tmp_path: Path, home: Path, doublings: int
) -> None:
    env_file = tmp_path / "user.env"
    env_file.write_text("A=xx\n" + "A=$A$A\n" * doublings + "NVRX_WATCH_USER=$A\n")
    proc = run_nvrx("config", "show", "--env-file", str(env_file), cwd=home, wall=FAST)
    line = assert_bad_input(proc, str(env_file))
    assert len(line) < 2000, "the error line carries the expanded value"


@pytest.mark.parametrize(
    "entry", [f"SEGFAULT:{HUGE}:5:2", f"SEGFAULT:1:{HUGE}:2", f"SEGFAULT:1:5:{HUGE}"]
)
def test_a_5000_digit_number_in_a_pool_entry_names_the_entry(home: Path, entry: str) -> None:
    proc = run_nvrx("inject-loop", "--list-pool", "--pool", f"SIGKILL:1:5:2 {entry}", cwd=home)
    line = assert_bad_input(proc, "pool entry", "SEGFAULT")
    assert "SIGKILL" not in line, "the error names another entry"


def test_a_5000_digit_number_in_an_fr_dump_names_the_file(tmp_path: Path, home: Path) -> None:
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    (dumps / "_dump_0").write_text(
        '{"pg_config": {}, "pg_status": {"0": {"last_enqueued_collective": ' + HUGE + "}},"
        ' "entries": []}'
    )
    for fmt in ([], ["--json"]):
        proc = run_nvrx("analyze", "fr", str(dumps), *fmt, cwd=home)
        assert_bad_input(proc, "_dump_0")


def test_a_5000_digit_rank_in_an_fr_table_names_the_file(tmp_path: Path, home: Path) -> None:
    table = fr(3).replace("| 3\n", f"| {HUGE}\n")
    session = make_session(tmp_path, [("SEGFAULT", 3, good(3, "Segmentation fault"), table)]).dir
    proc = run_nvrx("score", str(session), cwd=home)
    assert_bad_input(proc, "fr_analysis.txt")


def test_a_5000_digit_number_in_a_log_is_just_text(tmp_path: Path, home: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(
        SEGV_LOG
        + f"{HUGE}: a line labelled with an absurd rank\n"
        + f"1: rank {HUGE} is mentioned\n"
        + f"srun: error: n3: task {HUGE}: Segmentation fault\n"
        + f"srun: error: n3: tasks 0-{HUGE}: Exited with exit code 1\n"
    )
    proc = run_nvrx("analyze", "log", str(log), "--json", cwd=home, wall=FAST)
    assert_no_traceback(proc)
    assert proc.code == 0, proc.describe()
    doc = json.loads(proc.stdout)
    assert doc["root_rank"] == 1 and doc["fault_class"] == "SEGFAULT", doc
    text = run_nvrx("analyze", "log", str(log), cwd=home, wall=FAST)
    assert text.code == 0 and text.stdout.startswith("STOP - DONT RESTART IMMEDIATE"), (
        text.describe()
    )
