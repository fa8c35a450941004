"""Every entry point, given bad input: exit 2, one `nvrx: error:` line on stderr, no traceback,
nothing written, within the budget. And no input can make one hang (a FIFO with no writer)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ..test_watch_watcher import healthy_run
from .harness import (
    assert_bad_input,
    assert_ok_or_one_line_error,
    assert_unchanged,
    run_nvrx,
    tree_state,
)
from .inputs import good, session_with_two

WALL = 10.0
TRUTH = ["--fault-type", "SEGFAULT", "--rank", "1", "--iter", "3", "--nodes", "1"]

# (command line with {tmp} and {work} placeholders, a piece of the error line)
BAD_INPUT: list[tuple[str, str]] = [
    ("config show --config {tmp}/missing.yaml", "config file not found"),
    ("config show --config {tmp}/broken.yaml", "is not valid YAML"),
    ("config show --set nope.key=1", "unknown key"),
    ("config show --env-file {tmp}/shell.env", "command substitution"),
    ("config env --bogus", "--bogus"),
    ("submit-chain --dry-run --extend", "choose one of"),
    ("submit-chain --dry-run --train-tasks 0", "chain.train_tasks"),
    ("watch --platform none --work-dir {work} --disable nope", "unknown detector"),
    ("watch --platform none --work-dir {work} --set watch.storm_cycles=0", "storm_cycles"),
    ("inject-loop --list-pool --pool SEGFAULT:x:1:2", "malformed pool entry"),
    ("inject-loop --list-pool --pool BOOM:1:5:2", "unknown fault type"),
    ("inject-loop --reanalyze {tmp}/not-a-session", "not an nvrx inject-loop session"),
    ("inject-loop --resume {tmp}/not-a-session", "not an nvrx inject-loop session"),
    ("score {tmp}/missing", "not a directory"),
    ("score --judge gpt", "--judge 'gpt'"),
    ("score --min rank_any=1.5", "rate must lie in 0..1"),
    ("report {tmp}/not-a-session", "not an nvrx inject-loop session"),
    ("report {tmp}/missing", "missing does not exist"),
    ("report diff {tmp}/not-a-session", "two sessions"),
    ("analyze fr {tmp}/missing", "missing"),
    ("analyze log {tmp}/missing.log", "missing.log"),
]


@pytest.mark.parametrize(("line", "message"), BAD_INPUT, ids=[b[0] for b in BAD_INPUT])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    tmp_path: Path, home: Path, slurm_env: dict[str, str], line: str, message: str
) -> None:
    (tmp_path / "broken.yaml").write_text("slurm: [\n")
    (tmp_path / "shell.env").write_text("NVRX_SLURM_PARTITION=$(hostname)\n")
    (tmp_path / "not-a-session").mkdir()
    work = tmp_path / "work"
    healthy_run(work)
    args = [a.format(tmp=tmp_path, work=work) for a in line.split()]
    before = tree_state(tmp_path)
    proc = run_nvrx(*args, cwd=home, env=slurm_env, wall=WALL)
    assert_bad_input(proc, message)
    assert_unchanged(before, tmp_path)


CONFIGURED = [
    ["config", "show"],
    ["submit-chain", "--dry-run"],
    ["watch", "--platform", "none", "--work-dir", "{work}"],
    ["inject-loop", "--list-pool"],
    ["score", *TRUTH, "--log-output", "x"],
]


@pytest.mark.parametrize("command", CONFIGURED, ids=[" ".join(c[:2]) for c in CONFIGURED])
@pytest.mark.parametrize("flag", ["--config", "--env-file"])
def test_every_configured_command_refuses_dev_zero_as_its_config(
    tmp_path: Path, home: Path, slurm_env: dict[str, str], command: list[str], flag: str
) -> None:
    work = tmp_path / "work"
    healthy_run(work)
    args = [a.format(work=work) for a in command]
    before = tree_state(tmp_path)
    proc = run_nvrx(*args, flag, "/dev/zero", cwd=home, env=slurm_env, wall=WALL, cpu_seconds=8)
    assert_bad_input(proc, "/dev/zero")
    assert_unchanged(before, tmp_path)


@pytest.mark.parametrize(
    "command",
    [
        ["analyze", "log", "{fifo}"],
        ["score", *TRUTH, "--log-path", "{fifo}", "--log-output", good(1, "Segmentation fault")],
        ["score", *TRUTH, "--log-output", "@{fifo}"],
        ["analyze", "fr", "{fifo}"],
    ],
    ids=["analyze-log", "score-log-path", "score-log-output", "analyze-fr"],
)
def test_a_fifo_without_a_writer_never_hangs_an_input(
    tmp_path: Path, home: Path, command: list[str]
) -> None:
    fifo = tmp_path / "input.fifo"
    os.mkfifo(fifo)
    args = [a.replace("{fifo}", str(fifo)) for a in command]
    proc = run_nvrx(*args, cwd=home, wall=WALL)
    assert_ok_or_one_line_error(proc, ok=(0, 3))


def test_a_non_utf8_file_name_as_an_input_is_no_traceback(tmp_path: Path, home: Path) -> None:
    name = os.fsdecode(b"job-\xff\xfe.log")
    (tmp_path / name).write_text(
        "1: iteration 5 / 100\n1: Fatal Python error: Segmentation fault\n"
    )
    proc = run_nvrx("analyze", "log", str(tmp_path / name), cwd=home, wall=WALL)
    assert_ok_or_one_line_error(proc)
    assert proc.code == 0, proc.describe()


def test_a_session_is_never_written_by_a_command_that_only_reads_it(
    tmp_path: Path, home: Path
) -> None:
    session = session_with_two(tmp_path / "runs")
    before = tree_state(session)
    for args in (["report", str(session)], ["report", str(session), "--json"]):
        assert run_nvrx(*args, cwd=home, wall=WALL).code == 0
    for args in (["score", str(session)], ["score", str(session), "--json"]):
        assert run_nvrx(*args, cwd=home, wall=WALL).code in (0, 1, 3)
    assert_unchanged(before, session)
