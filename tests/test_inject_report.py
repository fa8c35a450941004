"""A campaign's report as researchers read it: rebuilt from the journal, every ended experiment
once, the matrix adding up, failure patterns, diffs between sessions and the stop condition."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from datetime import datetime
from pathlib import Path

from nvrx.campaign.pool import Experiment, FaultType
from nvrx.campaign.session import Session
from nvrx.inject.driver import CampaignSpec, record_session
from nvrx.inject.report import session_rows, write_reports
from nvrx.inject.rows import diff, failing_entries, matrix, rank_position, stop_condition
from nvrx.inject.window import Window
from nvrx.score.model import DIMENSIONS

from .cli_runner import nvrx as nvrx_in_process
from .conftest import CPU_FAULT_DEMO, SCORE_DEMO

PASS = {
    "restart_correct": "true",
    "rank_primary": "true",
    "rank_any": "true",
    "fault_described": "true",
    "fr_rank_correct": "rank",
}


def verdict(**dims: str) -> dict[str, object]:
    return {"case": "c", "status": "scored", "judge": "rules", "notes": "n", **PASS, **dims}


def session_with(
    base: Path, stamp: str, outcomes: list[tuple[str, dict[str, object] | None]]
) -> Session:
    """A session whose experiments (FAULT:RANK:ITER:NODES) all ended; each with the verdict
    its analysis journalled (None: not analysed)."""
    session = Session.create(base, now=datetime.strptime(stamp, "%Y%m%d_%H%M%S"))
    experiments = []
    for entry, _ in outcomes:
        fault, rank, iteration, nodes = entry.split(":")
        experiments.append(Experiment(FaultType(fault), int(rank), int(iteration), int(nodes)))
    spec = CampaignSpec(workload="w", script="s", gpus_per_node=4, time_limit="00:10:00")
    record_session(
        session, spec, experiments, pool_source="t", settings={}, argv=[], window=Window(2)
    )
    for i, (_, v) in enumerate(outcomes):
        session.journal.append("submitted", index=i, job_id=str(100 + i), comment="c")
        session.journal.append("ended", index=i, job_id=str(100 + i), state="FAILED")
        if v is not None:
            session.journal.append("analysed", index=i, validity="valid", reason="r", verdict=v)
    return session


def test_the_report_has_every_ended_experiment_once_even_unanalysed(tmp_path: Path) -> None:
    s = session_with(
        tmp_path,
        "20260101_000000",
        [("SEGFAULT:1:5:2", verdict()), ("GPU_SLEEP:0:5:2", None), ("SIGKILL:7:5:2", verdict())],
    )
    # A re-analysis appends a newer verdict: the latest wins, the row is not doubled.
    s.journal.append(
        "analysed", index=0, validity="valid", reason="r", verdict=verdict(rank_any="false")
    )
    paths, rows, _ = write_reports(s.dir)
    assert [r.record.experiment.entry for r in rows] == [
        "SEGFAULT:1:5:2",
        "GPU_SLEEP:0:5:2",
        "SIGKILL:7:5:2",
    ]
    assert rows[0].verdict.rank_any == "false"
    assert rows[1].verdict.status == "unscored"
    assert "not analysed yet" in (rows[1].verdict.reason or "")
    md = paths[0].read_text()
    assert md.startswith("# Fault Injection Experiment Report")
    assert md.count("| SEGFAULT | 2 | 1 | 5 | 100 | FAILED |") == 1
    doc = json.loads(paths[1].read_text())
    assert len(doc["cases"]) == 3
    assert ET.parse(paths[2]).getroot().get("tests") == "15"


def test_matrix_totals_add_up_and_rank_positions(tmp_path: Path) -> None:
    s = session_with(
        tmp_path,
        "20260101_000000",
        [
            ("SEGFAULT:0:5:2", verdict()),
            ("SEGFAULT:1:5:2", verdict(rank_primary="false")),
            ("SEGFAULT:3:5:2", verdict()),
            ("SEGFAULT:7:5:2", None),
            ("LOCK_GIL:4:5:2", verdict()),
        ],
    )
    rows = session_rows(s.dir)
    cells = matrix(rows)
    assert sum(c.experiments for c in cells.values()) == len(rows) == 5
    assert set(cells) == {
        ("SEGFAULT", 2, "0"),
        ("SEGFAULT", 2, "1"),
        ("SEGFAULT", 2, "mid"),
        ("SEGFAULT", 2, "last"),
        ("LOCK_GIL", 2, "mid"),
    }
    assert cells[("SEGFAULT", 2, "1")].rate("rank_primary") == 0.0
    assert cells[("SEGFAULT", 2, "last")].rate("rank_primary") is None  # nothing scored
    assert [rank_position(r, 8) for r in (0, 1, 2, 6, 7)] == ["0", "1", "mid", "mid", "last"]


def test_failure_patterns_name_the_matching_experiments(tmp_path: Path) -> None:
    s = session_with(
        tmp_path,
        "20260101_000000",
        [
            ("SEGFAULT:1:5:2", verdict(rank_primary="false")),  # collateral
            ("GPU_SLEEP:0:5:2", verdict(rank_any="false", rank_primary="false")),  # rank-0 silent
            ("GPU_ERROR:2:5:2", verdict(restart_correct="false", fr_rank_correct="no_dumps")),
        ],
    )
    paths, _, _ = write_reports(s.dir)
    doc = json.loads(paths[1].read_text())
    found = {
        p["pattern"]: [c.rsplit("/", 1)[-1] for c in p["experiments"]]
        for p in doc["failure_patterns"]
    }
    assert found == {
        "collateral": ["n2_SEGFAULT_r1_i5"],
        "rank0_silent": ["n2_GPU_SLEEP_r0_i5"],
        "gpu_error_restart": ["n2_GPU_ERROR_r2_i5"],
        "fr_no_dumps": ["n2_GPU_ERROR_r2_i5"],
    }


def test_diff_reports_cells_that_improved_or_regressed(tmp_path: Path) -> None:
    old = session_with(
        tmp_path,
        "20260101_000000",
        [
            ("SEGFAULT:1:5:2", verdict(rank_primary="false")),
            ("SIGKILL:2:5:2", verdict()),
            ("LOCK_GIL:3:5:2", verdict()),
        ],
    )
    new = session_with(
        tmp_path,
        "20260102_000000",
        [
            ("SEGFAULT:1:5:2", verdict()),
            ("SIGKILL:2:5:2", verdict(fr_rank_correct="node")),
            ("OS_ABORT:1:5:2", verdict()),
        ],
    )
    changes, only_old, only_new = diff(session_rows(old.dir), session_rows(new.dir))
    assert [(c.entry, c.dimension, c.before, c.after, c.improved) for c in changes] == [
        ("SEGFAULT:1:5:2", "rank_primary", "false", "true", True),
        ("SIGKILL:2:5:2", "fr_rank_correct", "rank", "node", False),
    ]
    assert (only_old, only_new) == (["LOCK_GIL:3:5:2"], ["OS_ABORT:1:5:2"])
    proc = nvrx("report", "diff", str(old.dir), str(new.dir))
    assert proc.returncode == 1  # something regressed
    assert "regressed SIGKILL:2:5:2 fr_rank_correct: rank -> node" in proc.stdout


def test_the_stop_condition_needs_two_consecutive_passing_sessions(tmp_path: Path) -> None:
    first = session_with(tmp_path, "20260101_000000", [("SEGFAULT:1:5:2", verdict())])
    _, rows, stop = write_reports(first.dir)
    assert stop == (
        False,
        "this session passes, but there is no session before it to compare with; the next session "
        "meets it if it passes too; fr_rank_correct (not counted): 1 of 1 at rank",
        "every experiment passes restart_correct, rank_primary, rank_any and fault_described "
        "in two consecutive sessions",
    )
    second = session_with(tmp_path, "20260102_000000", [("SEGFAULT:1:5:2", verdict())])
    _, rows2, stop = write_reports(second.dir)
    assert stop.met is True
    assert stop.why.startswith("this session and the one before it pass")
    third = session_with(tmp_path, "20260103_000000", [("SEGFAULT:1:5:2", None)])
    _, rows3, stop = write_reports(third.dir)
    assert stop[0] is False
    assert stop_condition(rows2, rows)[0] is True
    assert stop_condition(rows3, rows2)[0] is False


def test_every_report_says_the_stop_condition_in_one_sentence_that_names_the_rule(
    tmp_path: Path,
) -> None:
    # A first session where everything passes: not met, and the reader is told what the rule
    # is and what would meet it (not "the previous session is unknown").
    first = session_with(tmp_path, "20260101_000000", [("SEGFAULT:1:5:2", verdict())])
    write_reports(first.dir)
    shown = nvrx("report", str(first.dir))
    assert shown.returncode == 0, shown.stderr
    sentence = (
        "stop condition (every experiment passes restart_correct, rank_primary, rank_any and "
        "fault_described in two consecutive sessions): not met: this session passes, but there "
        "is no session before it to compare with; the next session meets it if it passes too"
    )
    assert sentence in " ".join(shown.stdout.split())
    assert "unknown" not in shown.stdout
    capital = "S" + sentence[1:]
    assert capital in (first.dir / "experiments_report.md").read_text()
    assert capital in (first.dir / "report.html").read_text()
    doc = json.loads((first.dir / "report.json").read_text())["stop_condition"]
    assert doc["rule"] in sentence and doc["why"] in " ".join(shown.stdout.split())


def test_the_stop_rule_counts_the_text_dimensions_and_reports_fr_beside(tmp_path: Path) -> None:
    # An FR answer of `node` (or no dumps) is not an attribution failure of the log text: two
    # sessions whose text dimensions all pass stop the campaign, with the FR figure said.
    node = verdict(fr_rank_correct="node")
    first = session_with(tmp_path, "20260101_000000", [("SEGFAULT:1:5:2", node)])
    second = session_with(tmp_path, "20260102_000000", [("SEGFAULT:1:5:2", node)])
    rows, rows2 = session_rows(first.dir), session_rows(second.dir)
    met, why, _ = stop_condition(rows2, rows)
    assert met, why
    assert why.endswith("fr_rank_correct (not counted): 0 of 1 at rank")
    assert stop_condition(rows2, rows, DIMENSIONS)[:2] == (False, "1 of 1 experiment does not pass")
    assert stop_condition(rows2, rows, DIMENSIONS).rule == (
        "every experiment passes restart_correct, rank_primary, rank_any, fault_described and "
        "fr_rank_correct in two consecutive sessions"
    )
    assert failing_entries(rows2) == [] and failing_entries(rows2, DIMENSIONS) == ["SEGFAULT:1:5:2"]


def test_which_dimensions_the_stop_rule_counts_is_a_setting(tmp_path: Path) -> None:
    node = verdict(fr_rank_correct="node")
    session_with(tmp_path, "20260101_000000", [("SEGFAULT:1:5:2", node)])
    second = session_with(tmp_path, "20260102_000000", [("SEGFAULT:1:5:2", node)])
    every = ",".join(DIMENSIONS)
    shown = subprocess.run(
        [sys.executable, "-m", "nvrx.cli", "report", str(second.dir), "--json"],
        capture_output=True, text=True, check=False, cwd=tmp_path,
        env={**os.environ, "NVRX_INJECT_STOP_DIMENSIONS": every},
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["stop_condition"]["met"] is False
    assert nvrx("report", str(second.dir), "--json").returncode == 0


def test_failing_entries_make_the_rerun_pool(tmp_path: Path) -> None:
    s = session_with(
        tmp_path,
        "20260101_000000",
        [
            ("SEGFAULT:1:5:2", verdict()),
            ("GPU_SLEEP:0:5:2", None),
            ("SIGKILL:7:5:2", verdict(rank_any="false")),
        ],
    )
    assert failing_entries(session_rows(s.dir)) == ["GPU_SLEEP:0:5:2", "SIGKILL:7:5:2"]


def test_rerun_failing_plans_a_session_of_the_failing_experiments(tmp_path: Path) -> None:
    old = session_with(
        tmp_path,
        "20260101_000000",
        [
            ("SEGFAULT:1:5:2", verdict()),
            ("GPU_SLEEP:0:5:2", None),
            ("SIGKILL:3:5:2", verdict(rank_any="false")),
        ],
    )
    # (No --base-dir: the re-run goes beside OLD, so the option is refused.)
    proc = nvrx(
        "inject-loop", "--rerun-failing", str(old.dir), "--config",
        str(CPU_FAULT_DEMO / "nvrx.yaml"), "--dry-run",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2
    assert "FAULT_TYPE=GPU_SLEEP" in lines[0] and "FAULT_TYPE=SIGKILL" in lines[1]
    assert "nvrx: note: re-running 2 failing experiments" in proc.stderr


def nvrx(*args: str) -> subprocess.CompletedProcess[str]:
    return nvrx_in_process(*args, env=dict(os.environ))


def test_the_stop_condition_is_not_met_by_a_session_that_did_not_finish_or_ran_other_experiments(
    tmp_path: Path,
) -> None:
    first = session_with(tmp_path, "20260101_000000", [("SIGTERM:1:5:2", verdict())])
    second = session_with(tmp_path, "20260102_000000", [("SEGFAULT:1:5:2", verdict())])
    _, _, stop = write_reports(second.dir)
    assert stop.why.startswith(
        "this session passes, but the session before it ran other experiments"
    )
    third = session_with(tmp_path, "20260103_000000", [("SEGFAULT:1:5:2", verdict())])
    # A fourth experiment planned but never run: the session is not finished.
    record_session(
        third,
        CampaignSpec(workload="w", script="s", gpus_per_node=4, time_limit="00:10:00"),
        [],
        pool_source="t",
        settings={},
        argv=[],
        window=Window(2),
    )
    third.journal.append("planned", index=1, fault="LOCK_GIL", rank=2, iter=5, nodes=2)
    _, rows, stop = write_reports(third.dir)
    assert len(rows) == 2 and rows[1].verdict.reason == "the job has not ended (status planned)"
    assert stop[0] is False
    assert first.dir.is_dir()


def test_a_damaged_journal_is_one_line_and_exit_2(tmp_path: Path) -> None:
    s = session_with(tmp_path, "20260101_000000", [("SEGFAULT:1:5:2", verdict())])
    s.journal.append("planned", index=1, fault="BOGUS", rank=1, iter=5, nodes=2)
    proc = nvrx("report", str(s.dir))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert (
        "journal.jsonl line 6: event 'planned' is damaged: ValueError: 'BOGUS' is not a valid "
        "FaultType" in proc.stderr
    )


def test_reanalyze_takes_a_session_alone_and_prints_json(tmp_path: Path) -> None:
    copy = tmp_path / "fault_injection" / SCORE_DEMO.name
    shutil.copytree(SCORE_DEMO, copy)
    refused = nvrx("inject-loop", "--reanalyze", str(copy), "--pool", "quick")
    assert refused.returncode == 2 and "--reanalyze works on a session alone" in refused.stderr
    proc = nvrx("inject-loop", "--reanalyze", str(copy), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["summary"]["scored"] == 4 and doc["session"] == str(copy)
    assert ">>> [4/4] Analyzing" in proc.stderr


def test_the_demo_sessions_analysis_and_report_are_what_nvrx_writes_today(tmp_path: Path) -> None:
    # docs/score.md says examples/score_demo's analysis files and report were written by
    # nvrx's own analysers: a re-analysis of a copy writes the same (but where the copy is).
    copy = tmp_path / "fault_injection" / SCORE_DEMO.name
    shutil.copytree(SCORE_DEMO, copy)
    proc = nvrx("inject-loop", "--reanalyze", str(copy))
    assert proc.returncode == 0, proc.stderr
    written = sorted(p.relative_to(copy) for p in copy.glob("*/analysis/*.txt"))
    assert len(written) >= 8
    where = json.loads((SCORE_DEMO / "report.json").read_text())["session"]  # as recorded
    for name in [*written, Path("experiments_report.md")]:
        today = (copy / name).read_text().replace(str(copy), "SESSION")
        recorded = (SCORE_DEMO / name).read_text().replace(where, "SESSION")
        assert today == recorded, f"{name} is stale: run nvrx inject-loop --reanalyze on it"


def test_reanalyze_with_a_judge_that_cannot_answer_exits_3(tmp_path: Path) -> None:
    copy = tmp_path / "fault_injection" / SCORE_DEMO.name
    shutil.copytree(SCORE_DEMO, copy)
    proc = nvrx(
        "inject-loop", "--reanalyze", str(copy), "--set", "score.base_url=http://127.0.0.1:9/v1",
        "--set", "score.max_retries=0", "--set", f"score.cache_dir={tmp_path / 'cache'}",
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert "nvrx: warning: 4 experiments unscored after re-analysis" in proc.stderr
    assert "nothing answers at http://127.0.0.1:9/v1: connection refused" in proc.stdout


def test_a_judge_that_cannot_be_built_fails_before_a_session_is_created(tmp_path: Path) -> None:
    # An empty session would become "the previous session" of the next one's stop condition.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVRX_", "JUDGE_", "LLM_"))}
    env["HOME"] = str(tmp_path)  # no ~/.config/nvrx/llm_api_key
    proc = subprocess.run(
        [
            sys.executable, "-m", "nvrx.cli", "inject-loop",
            "--config", str(CPU_FAULT_DEMO / "nvrx.yaml"), "--base-dir", str(tmp_path / "runs"),
            "--set", "score.base_url=https://judge.example.com/v1",
        ],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "no API key for the judge at https://judge.example.com/v1" in proc.stderr
    assert not (tmp_path / "runs" / "fault_injection").exists()


def test_a_key_given_on_the_command_line_never_reaches_the_journal(tmp_path: Path) -> None:
    session = Session.create(tmp_path)
    spec = CampaignSpec(workload="w", script="s", gpus_per_node=4, time_limit="00:10:00")
    argv = [
        "nvrx",
        "inject-loop",
        "--set",
        "score.api_key=sk-live-1",
        "--set=inject.llm_api_key=sk-2",
    ]
    record_session(session, spec, [], pool_source="t", settings={}, argv=argv, window=Window(2))
    text = (session.dir / "journal.jsonl").read_text()
    assert "sk-live-1" not in text and "sk-2" not in text
    (event,) = [json.loads(line) for line in text.splitlines()]
    assert event["argv"][-2:] == ["score.api_key=<hidden>", "--set=inject.llm_api_key=<hidden>"]


def test_an_analysis_file_edited_after_judging_is_named_by_report_and_score(
    tmp_path: Path,
) -> None:
    # The journal keeps each verdict with the digests of the files it was judged from; after
    # an edit, report (journalled verdict) and score (files as they are now) disagree, and
    # both say which file changed and what their figure is of.
    copy = tmp_path / "fault_injection" / SCORE_DEMO.name
    shutil.copytree(SCORE_DEMO, copy)
    assert nvrx("inject-loop", "--reanalyze", str(copy)).returncode == 0
    clean = nvrx("report", str(copy))
    assert "changed after" not in clean.stdout
    edited = copy / "n2_SEGFAULT_r1_i3" / "analysis" / "log_attribution.txt"
    edited.write_text(edited.read_text().replace("rank 1", "rank 3"))
    case = f"{copy.name}/n2_SEGFAULT_r1_i3"
    report = nvrx("report", str(copy))
    assert report.returncode == 0, report.stderr
    assert (
        f"changed after the campaign judged it: {case}: analysis/log_attribution.txt"
        in report.stdout
    )
    assert "the verdict shown is the one judged before" in report.stdout
    doc = json.loads(nvrx("report", str(copy), "--json").stdout)
    changed = {c["case"]: c["changed_after_judged"] for c in doc["cases"]}
    assert changed[case] == ["analysis/log_attribution.txt"]
    assert sum(bool(v) for v in changed.values()) == 1
    score = nvrx("score", str(copy), "--judge", "rules")
    assert f"{case}: analysis/log_attribution.txt" in score.stdout
    assert "this score reads them as they are now" in score.stdout
    page = nvrx("report", str(copy), "--html")
    assert (
        "Changed after it was judged: analysis/log_attribution.txt"
        in (copy / "report.html").read_text()
    ), page.stderr


def test_a_session_path_that_does_not_exist_says_so_and_a_directory_that_is_no_session_says_that(
    tmp_path: Path,
) -> None:
    missing, bare = tmp_path / "missing", tmp_path / "bare"
    bare.mkdir()
    for args in (["report", str(missing)], ["inject-loop", "--resume", str(missing)]):
        proc = nvrx(*args)
        assert (proc.returncode, proc.stderr) == (2, f"nvrx: error: {missing} does not exist\n")
    proc = nvrx("report", str(bare))
    assert proc.returncode == 2
    assert proc.stderr == (
        f"nvrx: error: {bare} is not an nvrx inject-loop session (no journal.jsonl)\n"
    )
