"""A verdict's inputs, edited after the campaign judged them: every file the judge read (the job
log, the analysis files) and the blinded log the log analyser read is named by `report` and
`score` when it changed since; a record of an older nvrx, which kept digests of the analysis
files only, says what it cannot tell instead of a quiet "unchanged"; a damaged digest record
stops the command naming the journal's line. Each test failed before its fix (cea9fd4)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .harness import Result, assert_bad_input, assert_no_traceback, run_nvrx
from .inputs import session_with_two

WALL = 20.0
SEGFAULT = "n2_SEGFAULT_r3_i5"  # the first experiment of session_with_two
JOB_LOG = "logs/slurm/1000.0.1.main_workload.log"  # its job log, in its directory
# What nvrx journalled until then: the analysis files' digests, by their bare names.
OLDER_NVRX_DIGESTS = ("run_valid.txt", "log_attribution.txt", "fr_analysis.txt")


def judged_session(base: Path, home: Path, env: dict[str, str]) -> Path:
    """A two-experiment session analysed and judged by the campaign (rules judge, offline)."""
    session = session_with_two(base)
    proc = run_nvrx("inject-loop", "--reanalyze", str(session), cwd=home, env=env, wall=WALL)
    assert proc.code == 0, proc.describe()
    return session


def changed_after_judged(proc: Result) -> dict[str, list[str]]:
    assert proc.code == 0, proc.describe()
    return {c["case"]: c["changed_after_judged"] for c in json.loads(proc.stdout)["cases"]}


def report_and_score(session: Path, home: Path, env: dict[str, str]) -> list[Result]:
    return [
        run_nvrx(*argv, cwd=home, env=env, wall=WALL)
        for argv in (
            ["report", str(session)],
            ["report", str(session), "--json"],
            ["score", str(session), "--judge", "rules"],
            ["score", str(session), "--judge", "rules", "--json"],
        )
    ]


def append_to(path: Path) -> None:
    with path.open("a") as handle:
        handle.write("0: a line added after the verdict\n")


@pytest.mark.parametrize(
    "edited",
    [JOB_LOG, "analysis/stripped.log"],
    ids=["job-log-edited-after-judging", "stripped-log-edited-after-judging"],
)
def test_a_log_edited_after_judging_is_named_by_report_and_score(
    tmp_path: Path, home: Path, slurm_env: dict[str, str], edited: str
) -> None:
    # Before: the journal kept digests of run_valid.txt, log_attribution.txt and
    # fr_analysis.txt only; an edited job log (what the judge's excerpt is cut from) or
    # stripped.log (what the log analyser read, and the page shows as the judge's log) left
    # both commands silent.
    session = judged_session(tmp_path, home, slurm_env)
    case = f"{session.name}/{SEGFAULT}"
    clean = report_and_score(session, home, slurm_env)
    assert all("changed after" not in r.stdout for r in clean), clean[0].describe()
    append_to(session / SEGFAULT / edited)
    text, as_json, score_text, score_json = report_and_score(session, home, slurm_env)
    for proc in (text, score_text):
        assert_no_traceback(proc)
        assert proc.code == 0, proc.describe()
        assert f"changed after the campaign judged it: {case}: {edited}" in proc.stdout, (
            proc.describe()
        )
    assert "the verdict shown is the one judged before" in text.stdout, text.describe()
    assert "this score reads them as they are now" in score_text.stdout, score_text.describe()
    for proc in (as_json, score_json):
        changed = changed_after_judged(proc)
        assert changed[case] == [edited], proc.describe()
        assert sum(bool(v) for v in changed.values()) == 1, proc.describe()


def test_a_journal_of_an_older_nvrx_says_the_logs_were_not_recorded(
    tmp_path: Path, home: Path, slurm_env: dict[str, str]
) -> None:
    # Before: a record with the three analysis digests alone (what nvrx journalled until
    # then) read as "nothing changed", the logs included, which it never looked at.
    session = judged_session(tmp_path, home, slurm_env)
    journal = session / "journal.jsonl"
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    for ev in events:
        if ev["event"] == "analysed":
            bare = {k.removeprefix("analysis/"): v for k, v in ev["judged"].items()}
            ev["judged"] = {k: v for k, v in bare.items() if k in OLDER_NVRX_DIGESTS}
            assert len(ev["judged"]) == 3, ev
    journal.write_text("".join(json.dumps(ev) + "\n" for ev in events))
    case = f"{session.name}/{SEGFAULT}"
    text, as_json, score_text, _ = report_and_score(session, home, slurm_env)
    unknown = [f"{JOB_LOG} (not recorded when judged)",
               "analysis/stripped.log (not recorded when judged)"]  # fmt: skip
    assert changed_after_judged(as_json)[case] == unknown, as_json.describe()
    for proc in (text, score_text):
        assert f"{case}: {', '.join(unknown)}" in proc.stdout, proc.describe()
    # What the older record does hold is still compared.
    append_to(session / SEGFAULT / "analysis" / "log_attribution.txt")
    again = run_nvrx("report", str(session), "--json", cwd=home, env=slurm_env, wall=WALL)
    assert changed_after_judged(again)[case] == ["analysis/log_attribution.txt", *unknown]


def not_an_object(judged: dict[str, Any]) -> Any:
    return list(judged)


def a_digest_that_is_no_digest(judged: dict[str, Any]) -> Any:
    return {**judged, JOB_LOG: "cafe"}


def a_name_out_of_the_experiment(judged: dict[str, Any]) -> Any:
    return {**judged, "../../../../etc/passwd": None}


@pytest.mark.parametrize(
    "damage", [not_an_object, a_digest_that_is_no_digest, a_name_out_of_the_experiment]
)
def test_a_damaged_digest_record_stops_report_and_score_naming_the_line(
    tmp_path: Path,
    home: Path,
    slurm_env: dict[str, str],
    damage: Callable[[dict[str, Any]], Any],
) -> None:
    # Before: a `judged` that was no object read as "no digests"; a digest that was none, or a
    # name that leads out of the experiment, as one more file that did not match.
    session = judged_session(tmp_path, home, slurm_env)
    journal = session / "journal.jsonl"
    lines = journal.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if '"analysed"' in line)
    event = json.loads(lines[at])
    event["judged"] = damage(event["judged"])
    lines[at] = json.dumps(event)
    journal.write_text("\n".join(lines) + "\n")
    for argv in (["report", str(session)], ["score", str(session), "--judge", "rules"]):
        proc = run_nvrx(*argv, cwd=home, env=slurm_env, wall=WALL)
        assert_bad_input(proc, f"journal.jsonl line {at + 1}", "judged")


def test_report_hashes_a_huge_job_log_in_flat_memory(
    tmp_path: Path, home: Path, slurm_env: dict[str, str]
) -> None:
    # The guard of the fix rather than a regression (cea9fd4 fails it only as it fails the
    # edited job log: `report` never looked at the log). A job log grown to 384 MiB after
    # judging (past the reader's cap: `score` refuses to judge it) is hashed in blocks, so
    # `report` names it within a memory budget of a third of its size.
    session = judged_session(tmp_path, home, slurm_env)
    with (session / SEGFAULT / JOB_LOG).open("r+b") as log:
        log.truncate(384 << 20)  # sparse: costs the test no disk
    proc = run_nvrx(
        "report", str(session), "--json", cwd=home, env=slurm_env, wall=WALL, memory_mb=128
    )
    assert changed_after_judged(proc)[f"{session.name}/{SEGFAULT}"] == [JOB_LOG]
