"""An output never lands on an input, a stream or a link of the system's: every file a command
read (the previous session's journal, the `--config` file, an env file) is as safe from
`--html`, `--junit` and `--markdown` as the files it was pointed at, and a stream named as the
output (`/dev/stdout`, `/dev/fd/1`, a FIFO) is written to, never renamed over."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from ..test_inject_report import session_with, verdict
from .harness import assert_bad_input, assert_no_traceback, assert_unchanged, run_nvrx, tree_state
from .inputs import session_with_two

WALL = 20.0


def two_sessions(base: Path) -> tuple[Path, Path]:
    old = session_with(base, "20260101_000000", [("SEGFAULT:1:5:2", verdict())])
    new = session_with(base, "20260102_000000", [("SEGFAULT:1:5:2", verdict())])
    return old.dir, new.dir


@pytest.mark.parametrize("flag", ["--html", "--junit"])
@pytest.mark.parametrize("target", ["journal.jsonl", "experiments.tsv"])
def test_report_never_writes_over_the_previous_sessions_files(
    tmp_path: Path, home: Path, flag: str, target: str
) -> None:
    # report reads the previous session for its trend: that journal is an input too.
    old, new = two_sessions(tmp_path / "runs")
    assert (old / target).is_file()
    before = tree_state(old)
    proc = run_nvrx("report", str(new), flag, str(old / target), cwd=home, wall=WALL)
    line = assert_bad_input(proc, target)
    assert "refusing to write over an input" in line, proc.describe()
    assert_unchanged(before, old)


@pytest.mark.parametrize("flag", ["--junit", "--markdown", "--html"])
def test_score_never_writes_over_the_config_file_it_read(
    tmp_path: Path, home: Path, flag: str
) -> None:
    session = session_with_two(tmp_path / "runs")
    config = tmp_path / "nvrx.yaml"
    config.write_text("score:\n  segment_size: 4\n")
    proc = run_nvrx("score", str(session), "--config", str(config), flag, str(config),
                    cwd=home, wall=WALL)  # fmt: skip
    assert_bad_input(proc, "nvrx.yaml", "refusing to write over an input")
    assert config.read_text() == "score:\n  segment_size: 4\n"


def test_score_never_writes_over_the_env_file_it_read(tmp_path: Path, home: Path) -> None:
    session = session_with_two(tmp_path / "runs")
    env_file = tmp_path / "user.env"
    env_file.write_text("FR_SEGMENT_SIZE=4\n")
    link = tmp_path / "report.xml"  # another name for it: the same file
    link.symlink_to(env_file)
    proc = run_nvrx("score", str(session), "--junit", str(link), cwd=home, wall=WALL,
                    env={"NVRX_ENV_FILE": str(env_file)})  # fmt: skip
    assert_bad_input(proc, "report.xml", "refusing to write over an input")
    assert env_file.read_text() == "FR_SEGMENT_SIZE=4\n" and link.is_symlink()


@pytest.mark.parametrize("name", ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"])
def test_junit_to_stdout_reaches_stdout(tmp_path: Path, home: Path, name: str) -> None:
    session = session_with_two(tmp_path / "runs")
    before = os.readlink("/dev/stdout")
    try:
        proc = run_nvrx("score", str(session), "--junit", name, "--json", cwd=home, wall=WALL)
    finally:
        if not os.path.islink("/dev/stdout"):  # the old bug replaced it: put it back
            os.remove("/dev/stdout")
            os.symlink(before, "/dev/stdout")
    assert_no_traceback(proc)
    assert proc.code == 0, proc.describe()
    assert proc.stdout.startswith("<?xml") and "<testsuite" in proc.stdout, proc.describe()
    assert '"schema"' in proc.stdout  # the JSON document after it: the same stream, appended
    assert os.readlink("/dev/stdout") == before


def test_a_fifo_with_a_reader_gets_the_report_and_stays_a_fifo(tmp_path: Path, home: Path) -> None:
    session = session_with_two(tmp_path / "runs")
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as handle:
            got.append(handle.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    proc = run_nvrx("score", str(session), "--junit", str(fifo), cwd=home, wall=WALL)
    reader.join(10)
    assert_no_traceback(proc)
    assert proc.code == 0, proc.describe()
    assert got and got[0].startswith(b"<?xml"), got
    assert fifo.is_fifo()


def test_a_fifo_nobody_reads_is_refused_at_once(tmp_path: Path, home: Path) -> None:
    session = session_with_two(tmp_path / "runs")
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    proc = run_nvrx("score", str(session), "--junit", str(fifo), cwd=home, wall=WALL)
    assert_bad_input(proc, "report.fifo", "a FIFO that nobody reads")
    assert fifo.is_fifo() and proc.wall < 10


def test_a_prom_file_that_is_a_fifo_is_a_sink_failure_not_replaced(
    tmp_path: Path, home: Path
) -> None:
    from ..test_watch_watcher import healthy_run

    work = tmp_path / "w"
    healthy_run(work)
    fifo = tmp_path / "nvrx.prom"
    os.mkfifo(fifo)
    proc = run_nvrx(
        "watch", "--platform", "none", "--work-dir", str(work), "--state-dir",
        str(tmp_path / "state"), "--set", f"watch.prom_file={fifo}", cwd=home, wall=WALL,
    )  # fmt: skip
    assert_no_traceback(proc)
    assert fifo.is_fifo(), "the FIFO was replaced by a regular file"
    assert "not a regular file: refusing to replace it" in proc.output, proc.describe()
