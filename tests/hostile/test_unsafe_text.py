"""Wrong answers and unsafe text: what a completion puts on a command line,
what --install-completion writes into, numbers written in other scripts, values read twice.
Each test failed before its fix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nvrx.campaign.session import TSV_HEADER

from ..test_watch_watcher import healthy_run
from .harness import assert_bad_input, run_nvrx

WALL = 20.0


def test_completion_never_offers_a_name_the_shell_would_run(tmp_path: Path, home: Path) -> None:
    scripts = tmp_path / "scripts"
    (scripts / "pools").mkdir(parents=True)
    (scripts / "job.sh").write_text("#!/bin/bash\n")
    (scripts / "workloads.conf").write_text("site job.sh - Site - -\n")
    for name in ("$(touch PWNED).pool", "`id`.pool", "a;b.pool", "ok.pool"):
        (scripts / "pools" / name).write_text("SIGKILL:1:5:2\n")
    (home / "nvrx.yaml").write_text(
        f"inject:\n  workload: site\n  workloads_file: {scripts / 'workloads.conf'}\n"
    )
    proc = run_nvrx(
        cwd=home, wall=WALL,
        env={"_NVRX_COMPLETE": "complete_bash", "COMP_WORDS": "nvrx inject-loop --pool ",
             "COMP_CWORD": "3"},
    )  # fmt: skip
    offered = proc.stdout.split()
    assert "ok.pool" in offered and "quick" in offered, proc.describe()
    assert not [w for w in offered if set(w) & set("$`;()|&<> ")], proc.describe()


def test_install_completion_never_writes_into_a_fifo(home: Path) -> None:
    os.mkfifo(home / ".bashrc")
    proc = run_nvrx("--install-completion", "bash", cwd=home, wall=WALL)
    assert_bad_input(proc, ".bashrc", "not a regular file")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("score:\n  model: a\n  model: b\n", "config.yaml line 3 is not valid YAML: 'model' is given twice"),
        ("score:\n  model: a\nslurm:\n  account: x\nscore:\n  concurrency: 2\n",
         "line 5 is not valid YAML: 'score' is given twice"),
    ],
    ids=["a key twice", "a section twice"],
)  # fmt: skip
def test_a_setting_or_section_given_twice_is_an_error_not_the_last_one(
    home: Path, text: str, says: str
) -> None:
    config = home / "config.yaml"
    config.write_text(text)
    assert_bad_input(run_nvrx("config", "show", "--config", str(config), cwd=home, wall=WALL), says)


def upstream_session(root: Path, rows: list[str], header: str = TSV_HEADER) -> Path:
    """A session the upstream scripts wrote: a tracking file, no journal."""
    session = root / "fault_injection" / "20260101_000000"
    session.mkdir(parents=True)
    (session / "experiments.tsv").write_text(header + "".join(r + "\n" for r in rows))
    return session


@pytest.mark.parametrize(
    ("rows", "header", "says"),
    [
        (["1\tSIGKILL\t1\t5\t2\t/x/n2_SIGKILL_r1_i5"],
         "JOB_ID\tFAULT_TYPE\tRANK\tRANK\tITER\tNODES\tEXPERIMENT_DIR\n", "column RANK is given twice"),
        (['1\tSIGKILL\t1\t5\t2\t"' + "x" * 300_000], TSV_HEADER, "line 2"),
        (["1\tSIGKILL\t1_000\t5\t2\t/x/e"], TSV_HEADER, "line 2: not a tracking row (RANK not a number)"),
        (["1\tSIGKILL\t١\t5\t2\t/x/e"], TSV_HEADER, "line 2: not a tracking row (RANK not a number)"),
        (["1\tSIGKILL\t1\t5\t2\t.."], TSV_HEADER, "line 2: EXPERIMENT_DIR names no experiment"),
    ],
    ids=["a column twice", "an unbalanced quote", "underscores", "foreign digits", "dot-dot"],
)  # fmt: skip
def test_an_upstream_tracking_file_is_read_strictly(
    tmp_path: Path, home: Path, rows: list[str], header: str, says: str
) -> None:
    session = upstream_session(tmp_path, rows, header)
    assert_bad_input(run_nvrx("score", str(session), "--judge", "rules", cwd=home, wall=WALL), says)


def test_a_tracking_row_never_sends_the_scorer_out_of_the_session(
    tmp_path: Path, home: Path
) -> None:
    elsewhere = tmp_path / "elsewhere" / "n2_SIGKILL_r1_i5"
    (elsewhere / "analysis").mkdir(parents=True)
    (elsewhere / "analysis" / "log_attribution.txt").write_text("STOP - DONT RESTART IMMEDIATE\n")
    session = upstream_session(tmp_path / "runs", [f"1\tSIGKILL\t1\t5\t2\t{elsewhere}"])
    proc = run_nvrx("score", str(session), "--judge", "rules", "--json", cwd=home, wall=WALL)
    (case,) = json.loads(proc.stdout)["cases"]
    assert case["experiment_dir"] == str(session / "n2_SIGKILL_r1_i5")  # looked for in the session


def test_a_checkpoint_iteration_is_ascii_digits_only(tmp_path: Path, home: Path) -> None:
    work = tmp_path / "work"
    healthy_run(work)
    (checkpoint,) = work.rglob("latest_checkpointed_iteration.txt")
    for text in ("1_000_000", "+5", "١٢"):
        checkpoint.write_text(text + "\n")
        proc = run_nvrx(
            "watch", "--platform", "none", "--work-dir", str(work),
            "--state-dir", str(tmp_path / "s"), "--json", cwd=home, wall=WALL,
        )  # fmt: skip
        ckpt = json.loads(proc.stdout)["snapshot"]["checkpoint"]
        assert "not an integer" in (ckpt["error"] or ""), proc.describe()
        assert ckpt["value"] in (None, 400), proc.describe()  # the last good value, or none


HOSTILE = "evil \x1b[2J\x1b]0;owned\x07 \u202eesrever"  # clear screen, retitle, reverse


def raw_controls(text: str) -> list[str]:
    """Terminal controls or bidi overrides that reached the output unescaped."""
    return [c for c in "\x1b\x07\u202e" if c in text]


def test_a_journalled_verdict_reaches_no_terminal_page_or_file_raw(
    tmp_path: Path, home: Path
) -> None:
    import shutil

    from ..conftest import SCORE_DEMO

    session = tmp_path / "fault_injection" / SCORE_DEMO.name
    shutil.copytree(SCORE_DEMO, session)
    journal = session / "journal.jsonl"
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    for ev in events:
        if ev.get("event") == "analysed":
            ev["verdict"]["notes"] = HOSTILE
            ev["verdict"]["rank_any"] = "false"  # a failure: its notes go into the JUnit file
    journal.write_text("".join(json.dumps(ev) + "\n" for ev in events))
    page, junit = tmp_path / "page.html", tmp_path / "report.xml"
    proc = run_nvrx(
        "report", str(session), "--html", str(page), "--junit", str(junit), cwd=home, wall=WALL
    )
    assert proc.code == 0, proc.describe()
    assert "evil" in proc.stdout and raw_controls(proc.output) == [], proc.describe()
    assert raw_controls(page.read_text()) == []
    import xml.etree.ElementTree as ET

    ET.parse(junit)  # well-formed: XML 1.0 cannot even hold ESC or BEL
    assert "evil" in junit.read_text() and raw_controls(junit.read_text()) == []


def test_a_chain_dir_named_to_reverse_the_screen_is_shown_escaped(
    tmp_path: Path, home: Path
) -> None:
    work = tmp_path / "team" / f"chain{HOSTILE}"
    healthy_run(work)
    proc = run_nvrx(
        "watch", "--platform", "none", "--fleet", str(tmp_path / "team"),
        "--state-dir", str(tmp_path / "s"), cwd=home, wall=WALL,
    )  # fmt: skip
    assert proc.code == 0 and "chainevil" in proc.stdout, proc.describe()
    assert raw_controls(proc.output) == []


def test_analyze_log_quotes_a_log_line_escaped(tmp_path: Path, home: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(
        "0: iteration 5 / 100\n1: Traceback (most recent call last):\n"
        f'1:   File "x.py", line 1, in <module>\n1: RuntimeError: boom {HOSTILE}\n'
    )
    proc = run_nvrx("analyze", "log", str(log), cwd=home, wall=WALL)
    assert proc.code == 0 and "RuntimeError: boom" in proc.stdout, proc.describe()
    assert raw_controls(proc.output) == []


def test_thousands_of_names_make_one_short_error_line(tmp_path: Path, home: Path) -> None:
    scripts = tmp_path / "scripts"
    (scripts / "pools").mkdir(parents=True)
    (scripts / "job.sh").write_text("#!/bin/bash\n")
    (scripts / "workloads.conf").write_text(
        "".join(f"site{i} job.sh - Site - -\n" for i in range(5000))
    )
    for i in range(5000):
        (scripts / "pools" / f"pool{i:04d}.pool").write_text("SIGKILL:1:5:2\n")
    args = [
        "inject-loop",
        "--list-pool",
        "--set",
        f"inject.workloads_file={scripts / 'workloads.conf'}",
    ]
    for extra, says in ((["--workload", "nope"], "unknown workload"),
                        (["--workload", "site1", "--pool", "nope.pool"], "is not a pool name")):  # fmt: skip
        line = assert_bad_input(run_nvrx(*args, *extra, cwd=home, wall=WALL), says)
        assert len(line) < 2000 and "more" in line


@pytest.mark.parametrize("column", ["job\x00.sh", "x" * 5_000_000], ids=["NUL", "5 MB"])
def test_a_workloads_file_column_with_a_nul_or_megabytes_is_one_line(
    tmp_path: Path, home: Path, column: str
) -> None:
    conf = tmp_path / "workloads.conf"
    conf.write_text(f"site {column} - Site - -\n")
    proc = run_nvrx(
        "inject-loop", "--workload", "site", "--list-pool",
        "--set", f"inject.workloads_file={conf}", cwd=home, wall=WALL,
    )  # fmt: skip
    line = assert_bad_input(proc, "workloads.conf line 1", "script column")
    assert len(line) < 500


def test_a_fifo_where_a_session_keeps_a_log_is_an_error_not_an_empty_log(
    tmp_path: Path, home: Path
) -> None:
    import shutil

    from ..conftest import SCORE_DEMO

    session = tmp_path / "fault_injection" / SCORE_DEMO.name
    shutil.copytree(SCORE_DEMO, session)
    log = next(session.glob("n2_SEGFAULT_*/logs/slurm/*.main_workload.log"))
    log.unlink()
    os.mkfifo(log)
    proc = run_nvrx("score", str(session), "--judge", "rules", cwd=home, wall=WALL)
    assert_bad_input(proc, "job log", "not a regular file")


def test_an_empty_at_file_is_said_on_stderr(tmp_path: Path, home: Path) -> None:
    fifo = tmp_path / "attribution"
    os.mkfifo(fifo)  # nobody writes: it reads as empty
    proc = run_nvrx(
        "score", "--fault-type", "SEGFAULT", "--rank", "1", "--iter", "3", "--nodes", "1",
        "--log-output", f"@{fifo}", "--judge", "rules", cwd=home, wall=WALL,
    )  # fmt: skip
    assert_bad_input(proc, "attribution", "is empty")
