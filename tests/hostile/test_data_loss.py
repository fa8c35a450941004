"""Nothing a campaign recorded is lost or overwritten: a damaged journal line stops the
command (unless --force, which says what it skipped), an output never replaces an input, and
an empty pool is a mistake, not the default pool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .harness import assert_bad_input, assert_no_traceback, assert_unchanged, run_nvrx, tree_state
from .inputs import damage_journal_line, session_with_two, slurm_calls

WALL = 20.0


def names_line(line: str, number: int) -> bool:
    """`journal.jsonl line 3` (or `journal.jsonl:3`)."""
    return f"line {number}" in line or f"journal.jsonl:{number}" in line


@pytest.fixture
def damaged(tmp_path: Path) -> Path:
    """A two-experiment session whose journal line 3 (the second experiment's `planned` event)
    was damaged: without it the second experiment silently disappears."""
    session = session_with_two(tmp_path / "runs")
    damage_journal_line(session, 3)
    return session


def test_a_damaged_journal_line_stops_report_naming_the_line(damaged: Path, home: Path) -> None:
    before = tree_state(damaged)
    for fmt in ([], ["--json"]):
        proc = run_nvrx("report", str(damaged), *fmt, cwd=home, wall=WALL)
        line = assert_bad_input(proc, "journal.jsonl")
        assert names_line(line, 3), proc.describe()
    assert_unchanged(before, damaged)


@pytest.mark.parametrize(
    "command",
    [["score"], ["inject-loop", "--reanalyze"]],
    ids=["score", "reanalyze (before it rewrites the reports)"],
)
def test_a_damaged_journal_line_stops_score_and_reanalyze_naming_the_line(
    damaged: Path, home: Path, command: list[str]
) -> None:
    before = tree_state(damaged)
    proc = run_nvrx(*command, str(damaged), cwd=home, wall=WALL)
    line = assert_bad_input(proc, "journal.jsonl")
    assert names_line(line, 3), proc.describe()
    assert_unchanged(before, damaged)


def test_report_force_skips_a_damaged_journal_line_and_says_how_many(
    damaged: Path, home: Path
) -> None:
    proc = run_nvrx("report", "--force", str(damaged), "--json", cwd=home, wall=WALL)
    assert_no_traceback(proc)
    assert proc.code == 0, proc.describe()
    assert any("skipped 1" in line for line in proc.stderr.splitlines()), proc.describe()
    doc = json.loads(proc.stdout)
    assert [c["case"].rsplit("/", 1)[-1] for c in doc["cases"]] == ["n2_SEGFAULT_r3_i5"], doc


def test_reanalyze_force_skips_a_damaged_journal_line_and_says_how_many(
    damaged: Path, home: Path
) -> None:
    proc = run_nvrx("inject-loop", "--reanalyze", str(damaged), "--force", cwd=home, wall=WALL)
    assert_no_traceback(proc)
    assert proc.code in (0, 3), proc.describe()
    assert any("skipped 1" in line for line in proc.stderr.splitlines()), proc.describe()
    assert (damaged / "experiments_report.md").is_file()


def test_a_binary_journal_is_refused_not_a_session_of_0_cases(tmp_path: Path, home: Path) -> None:
    session = session_with_two(tmp_path / "runs")
    (session / "journal.jsonl").write_bytes(bytes(range(256)) * 8)
    before = tree_state(session)
    for command in (["report", str(session)], ["score", str(session)]):
        proc = run_nvrx(*command, cwd=home, wall=WALL)
        assert_bad_input(proc, "journal.jsonl")
    proc = run_nvrx("inject-loop", "--reanalyze", str(session), cwd=home, wall=WALL)
    assert_bad_input(proc, "journal.jsonl")
    assert_unchanged(before, session)


@pytest.mark.parametrize(
    ("flag", "target"),
    [
        ("--junit", "journal.jsonl"),
        ("--markdown", "journal.jsonl"),
        ("--junit", "experiments.tsv"),
        ("--markdown", "n2_SEGFAULT_r3_i5/analysis/log_attribution.txt"),
        ("--junit", "n2_GPU_SLEEP_r6_i5/logs/slurm/1001.0.1.main_workload.log"),
    ],
)
def test_score_never_writes_a_report_over_one_of_its_inputs(
    tmp_path: Path, home: Path, flag: str, target: str
) -> None:
    session = session_with_two(tmp_path / "runs")
    assert (session / target).is_file()
    before = tree_state(session)
    proc = run_nvrx("score", str(session), flag, str(session / target), cwd=home, wall=WALL)
    assert_bad_input(proc, target.rsplit("/", 1)[-1])
    assert_unchanged(before, session)


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--pool", "", "--dry-run"], {}),
        (["--dry-run"], {"POOL": ""}),
        (["--pool", "   "], {}),
        ([], {"POOL": ""}),
    ],
    ids=["flag-dry-run", "env-dry-run", "flag-blank", "env"],
)
def test_an_empty_pool_is_refused_not_the_default_pool_of_34(
    tmp_path: Path, home: Path, slurm_env: dict[str, str], args: list[str], env: dict[str, str]
) -> None:
    script = tmp_path / "workload.sbatch"
    script.write_text("#!/bin/sh\nexit 0\n")
    base = tmp_path / "runs"
    proc = run_nvrx(
        "inject-loop", "--sbatch-script", str(script), "--base-dir", str(base), *args,
        cwd=home, env={**slurm_env, **env}, wall=WALL,
    )  # fmt: skip
    line = assert_bad_input(proc, "pool")
    assert "empty" in line, proc.describe()
    assert "[dry-run]" not in proc.stdout
    assert not (base / "fault_injection").exists(), "a session directory was created"
    assert not [c for c in slurm_calls(tmp_path / "slurm-bin") if c.startswith("sbatch")]


def test_list_pool_of_an_empty_pool_is_refused(home: Path) -> None:
    for args, env in ((["--pool", ""], {}), ([], {"POOL": ""})):
        proc = run_nvrx("inject-loop", "--list-pool", *args, cwd=home, env=env, wall=WALL)
        assert_bad_input(proc, "pool", "empty")
