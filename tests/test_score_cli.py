"""`nvrx score` as CI and people run it: sessions and experiment dirs, exit codes, JSON, JUnit,
markdown, judges and votes, and an API key that never leaks."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from nvrx.campaign.pool import Experiment, FaultType
from nvrx.campaign.session import Session
from nvrx.inject.driver import CampaignSpec, record_session
from nvrx.inject.window import Window

from .cli_runner import nvrx as nvrx_in_process
from .fake_openai import GOOD_ANSWER, FakeOpenAI, Reply
from .loopback import closed_port

KEY = "sk-live-NEVER-PRINT-ME-9f8e7d"
STOP = "STOP - DONT RESTART IMMEDIATE"
RESTART = "RESTART IMMEDIATE"
MARKER = "[2026-11-29 10:00:00.000000] FAULT INJECTION: Rank {r} will inject fault {f} at 10:00:15"


def nvrx(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`nvrx score ARGS` with HOME and the verdict cache in `cwd`, and no judge settings or keys
    from the developer's environment."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NVRX_", "JUDGE_", "LLM_")) and k not in ("GPUS_PER_NODE",)
    }
    base.update({"HOME": str(cwd), "NVRX_SCORE_CACHE_DIR": str(cwd / "judge-cache")})
    base.update(env or {})
    return nvrx_in_process("score", *args, env=base, cwd=cwd)


def make_session(
    base: Path, rows: list[tuple[str, int, str | None, str | None]], gpus: int = 4
) -> Session:
    """A session as inject-loop leaves it: journal, tracking rows, logs and analysis files.
    Each row: (fault, rank, attribution text or None, FR table or None)."""
    session = Session.create(base)
    experiments = [Experiment(FaultType(f), r, 5, 2) for f, r, _, _ in rows]
    spec = CampaignSpec(workload="w", script="s.sbatch", gpus_per_node=gpus, time_limit="00:10:00")
    record_session(
        session, spec, experiments, pool_source="test", settings={}, argv=["nvrx"], window=Window(2)
    )
    for i, (e, (_, _, text, fr)) in enumerate(zip(experiments, rows, strict=True)):
        job = str(1000 + i)
        d = session.dir / e.dir_name
        (d / "logs" / "slurm").mkdir(parents=True)
        (d / "logs" / "slurm" / f"{job}.0.1.main_workload.log").write_text(
            f"{e.rank}: iteration 5\n{MARKER.format(r=e.rank, f=e.fault.value)}\n{e.rank}: boom\n"
        )
        if text is not None:
            (d / "analysis").mkdir()
            (d / "analysis" / "log_attribution.txt").write_text(text)
            if fr is not None:
                (d / "analysis" / "fr_analysis.txt").write_text(fr)
        session.journal.append("submitting", index=i, job_name=f"fi-{i}", comment="c")
        session.journal.append("submitted", index=i, job_id=job, comment="c")
        session.journal.append("ended", index=i, job_id=job, state="FAILED", exit="1:0")
    return session


def fr(*ranks: int) -> str:
    return (
        "PGID | Process Group Desc | Op Type | Size | Dtype | Missing Ranks\n"
        f"0 | default_pg,0 | nccl:all_reduce | 8 | Float | {','.join(map(str, ranks))}\n"
    )


def good(rank: int, words: str, decision: str = STOP) -> str:
    return f"{decision}\n\nAttribution: Primary issues: [rank {rank} {words}], Secondary issues: []\n\nFalse"


@pytest.fixture
def session(tmp_path: Path) -> Session:
    # 8 GPUs per node, not the default 4: the session's shape must be the one used.
    return make_session(
        tmp_path,
        [
            ("SEGFAULT", 3, good(3, "Segmentation fault"), fr(3)),
            ("GPU_SLEEP", 6, good(6, "GPU hang", RESTART), fr(6, 7)),
        ],
        gpus=8,
    )


def test_a_session_scores_offline_with_rules_by_default(tmp_path: Path, session: Session) -> None:
    proc = nvrx(str(session.dir), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["judge"] == "rules"
    assert doc["summary"]["scored"] == 2
    assert doc["summary"]["pass_rates"]["fr_rank_correct"] == 0.5
    first, second = doc["cases"]
    assert first["job_id"] == "1000" and first["job_state"] == "FAILED"
    assert first["truth"]["gpus_per_node"] == 8  # from the session, not the default 4
    assert second["verdict"]["fr_rank_correct"] == "node"


def test_thresholds_fail_with_exit_1_and_name_the_dimension(
    tmp_path: Path, session: Session
) -> None:
    proc = nvrx(
        str(session.dir), "--min", "fr_rank_correct=0.9", "--min", "rank_any=1", cwd=tmp_path
    )
    assert proc.returncode == 1
    assert "below threshold: fr_rank_correct 50% < 90%" in proc.stdout
    assert "rank_any" not in proc.stdout.split("below threshold")[-1]
    ok = nvrx(str(session.dir), "--min", "fr_rank_correct=50%", cwd=tmp_path)
    assert ok.returncode == 0


def test_an_experiment_without_analysis_is_unscored_and_exits_3(tmp_path: Path) -> None:
    s = make_session(
        tmp_path, [("SEGFAULT", 3, good(3, "segfault"), fr(3)), ("SIGKILL", 1, None, None)]
    )
    proc = nvrx(str(s.dir), "--min", "all=0", cwd=tmp_path)
    assert proc.returncode == 3
    assert "log_attribution.txt is missing" in proc.stdout
    assert "1 case unscored" in proc.stdout


def test_one_experiment_dir_scores_that_experiment(tmp_path: Path, session: Session) -> None:
    exp = session.dir / "n2_GPU_SLEEP_r6_i5"
    proc = nvrx(str(exp), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [only] = json.loads(proc.stdout)["cases"]
    assert only["case"].endswith("/n2_GPU_SLEEP_r6_i5")


def test_a_run_that_never_reached_the_fault_is_invalid_without_a_call(tmp_path: Path) -> None:
    s = make_session(tmp_path, [("SEGFAULT", 3, None, None)])
    log = next((s.dir / "n2_SEGFAULT_r3_i5" / "logs" / "slurm").iterdir())
    log.write_text("3: container failed to start\n")  # no marker: never armed
    with FakeOpenAI() as server:
        proc = nvrx(
            str(s.dir), "--json", "--judge", "llm", "--base-url", server.base_url, cwd=tmp_path
        )
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads(proc.stdout)["cases"][0]["verdict"]
    assert verdict["status"] == "invalid"
    assert verdict["restart_correct"] == "N/A"
    assert server.seen == []


def test_junit_has_a_testcase_per_experiment_and_dimension(
    tmp_path: Path, session: Session
) -> None:
    out = tmp_path / "score.xml"
    proc = nvrx(str(session.dir), "--junit", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    suite = ET.parse(out).getroot()
    assert suite.tag == "testsuite"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("10", "1", "0")
    [failure] = suite.iter("failure")
    assert failure.get("message") == "fr_rank_correct=node, pass is rank"


def test_markdown_has_the_upstream_columns(tmp_path: Path, session: Session) -> None:
    out = tmp_path / "report.md"
    assert nvrx(str(session.dir), "--markdown", str(out), cwd=tmp_path).returncode == 0
    header, _rule, row1, _ = out.read_text().splitlines()
    assert header == (
        "| # | FAULT_TYPE | NODES | RANK | ITER | JOB_ID | STATE | run_valid | restart_correct "
        "| rank_primary | rank_any | fault_described | fr_rank_correct | judge_notes |"
    )
    assert row1.startswith(
        "| 1 | SEGFAULT | 2 | 3 | 5 | 1000 | FAILED | true | true | true | true | true | rank |"
    )


def test_an_upstream_session_with_only_its_tracking_file(tmp_path: Path) -> None:
    s = tmp_path / "fault_injection" / "20260101_000000"
    exp = s / "n1_SIGKILL_r2_i5"
    (exp / "analysis").mkdir(parents=True)
    (exp / "logs" / "slurm").mkdir(parents=True)
    (exp / "logs" / "slurm" / "77.0.1.main_workload.log").write_text(
        MARKER.format(r=2, f="SIGKILL")
    )
    (exp / "analysis" / "log_attribution.txt").write_text(good(2, "Killed"))
    (s / "experiments.tsv").write_text(
        f"JOB_ID\tFAULT_TYPE\tRANK\tITER\tNODES\tEXPERIMENT_DIR\n77\tSIGKILL\t2\t5\t1\t{exp}\n"
    )
    proc = nvrx(str(s), "--json", cwd=tmp_path, env={"GPUS_PER_NODE": "8"})
    assert proc.returncode == 0, proc.stderr
    [c] = json.loads(proc.stdout)["cases"]
    assert c["truth"]["gpus_per_node"] == 8
    assert c["verdict"]["fr_rank_correct"] == "no_dumps"
    assert c["verdict"]["fault_described"] == "true"


def test_upstream_flags(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("5: Segmentation fault\n")
    (tmp_path / "attr.txt").write_text(good(5, "segfault"))
    proc = nvrx(
        "--fault-type", "segfault", "--rank", "5", "--iter", "3", "--nodes", "2",
        "--gpus-per-node", "8", "--log-path", str(log), "--log-output", f"@{tmp_path / 'attr.txt'}",
        "--fr-output", fr(5), "--json", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    [c] = json.loads(proc.stdout)["cases"]
    assert c["truth"] == {
        "fault_type": "SEGFAULT", "rank": 5, "iter": 3, "nodes": 2, "gpus_per_node": 8,
        "segment_size": 32, "run_valid": True,
    }  # fmt: skip
    assert c["verdict"]["fr_rank_correct"] == "rank"


@pytest.mark.parametrize("answer", ["LLM FAILURE", "NO LOGS"])
def test_an_analyser_that_failed_is_unscored_not_a_wrong_answer(
    tmp_path: Path, answer: str
) -> None:
    # logsage fills its fields with these when its own model call failed or it saw no log.
    text = f"{answer}\n\nAttribution: {answer}\n\nFalse"
    proc = nvrx(
        "--fault-type", "SEGFAULT", "--rank", "1", "--iter", "3", "--nodes", "1",
        "--log-output", text, "--json", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    [c] = json.loads(proc.stdout)["cases"]
    assert c["verdict"]["status"] == "unscored"
    assert f"its answer is {answer}" in c["verdict"]["reason"]


TRUTH = "--fault-type SEGFAULT --rank 1 --iter 1 --nodes 1"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("/nonexistent/session", "/nonexistent/session: not a directory"),
        ("--fault-type SEGFAULT --rank 1", "missing: --iter, --nodes"),
        ("--fault-type BOOM --rank 1 --iter 1 --nodes 1", "unknown fault type 'BOOM'"),
        (
            "--fault-type SEGFAULT --rank 4 --iter 1 --nodes 1 --log-output x",
            "rank 4 is outside the job",
        ),
        (f"{TRUTH} --run-valid maybe", "--run-valid 'maybe'"),
        (f"{TRUTH} --log-path /nope.log", "log /nope.log: no such file"),
        ("--judge gpt", "--judge 'gpt': expected rules, llm or llm:MODEL"),
        ("--rank abc", "Invalid value for '--rank'"),
        ("--junit /tmp", "is a directory"),
        ("--min rank_any", "--min 'rank_any': expected DIM=RATE"),
        ("--min rank_any=1.5", "rate must lie in 0..1"),
        ("--base-url ftp://x --judge llm", "expected an http:// or https:// URL"),
        (
            f"--judge llm --base-url https://api.example.com/v1 {TRUTH}",
            "no API key for the judge at https://api.example.com/v1",
        ),
        (
            f"--judge llm {TRUTH} --set score.api_key=sk-pasted…",
            "has non-ASCII or control characters",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: str, message: str) -> None:
    proc = nvrx(*shlex.split(args), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr


def test_directories_and_ground_truth_flags_do_not_mix(tmp_path: Path, session: Session) -> None:
    proc = nvrx(str(session.dir), "--rank", "3", cwd=tmp_path)
    assert proc.returncode == 2
    assert "not both" in proc.stderr


def test_llm_judge_scores_a_session_and_the_key_never_leaks(
    tmp_path: Path, session: Session
) -> None:
    junit, md = tmp_path / "j.xml", tmp_path / "r.md"
    with FakeOpenAI() as server:
        args = [str(session.dir), "--judge", "llm:judge-a", "--base-url", server.base_url]
        outputs = ["--json", "--junit", str(junit), "--markdown", str(md)]
        proc = nvrx(*args, *outputs, cwd=tmp_path, env={"JUDGE_API_KEY": KEY})
        again = nvrx(*args, cwd=tmp_path, env={"JUDGE_API_KEY": KEY})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["judge"] == "llm:judge-a"
    assert doc["summary"]["usage"]["requests"] == 2
    assert {s.body["model"] for s in server.seen} == {"judge-a"}
    assert all(s.headers["Authorization"] == f"Bearer {KEY}" for s in server.seen)
    # The re-run is answered from the cache: no further request.
    assert again.returncode == 0 and len(server.seen) == 2
    assert "2 cache hits" in again.stdout
    written = [junit.read_text(), md.read_text()] + [
        p.read_text() for p in (tmp_path / "judge-cache").rglob("*") if p.is_file()
    ]
    for text in [proc.stdout, proc.stderr, again.stdout, again.stderr, *written]:
        assert KEY not in text


def test_a_judge_that_cannot_answer_is_unscored_never_a_default(
    tmp_path: Path, session: Session
) -> None:
    with FakeOpenAI(default=Reply(status=500)) as server:
        proc = nvrx(
            str(session.dir), "--judge", "llm", "--base-url", server.base_url, "--json",
            "--set", "score.max_retries=1", "--set", "score.retry_initial_backoff=0.05",
            cwd=tmp_path, env={"JUDGE_API_KEY": KEY},
        )  # fmt: skip
    assert proc.returncode == 3
    doc = json.loads(proc.stdout)
    assert doc["exit_code"] == 3
    for c in doc["cases"]:
        v = c["verdict"]
        assert v["status"] == "unscored"
        assert v["reason"] == "HTTP 500; gave up after 2 attempts"
        assert "restart_correct" not in v
    assert len(server.seen) == 2 * 2  # overloaded, not unreachable: every experiment retried
    assert "unreachable" not in proc.stderr
    assert KEY not in proc.stdout + proc.stderr


def dead_judge_run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """`nvrx score` of a session of 8 experiments with a judge URL (credentials in it) where
    nothing listens, one request at a time, 2 retries a case; and the port."""
    session = make_session(
        tmp_path, [("SEGFAULT", r, good(r, "Segmentation fault"), fr(r)) for r in range(8)]
    )
    port = closed_port()
    proc = nvrx(
        str(session.dir), "--judge", "llm:m", "--base-url",
        f"http://judge:s3cret-pass@127.0.0.1:{port}/v1", "--concurrency", "1", "--no-cache",
        "--set", "score.max_retries=2", "--set", "score.retry_initial_backoff=0.05", *args,
        cwd=tmp_path, env={"JUDGE_API_KEY": KEY},
    )  # fmt: skip
    assert "s3cret-pass" not in proc.stdout + proc.stderr
    return proc, port


def test_a_judge_nothing_listens_at_is_said_once_not_once_per_experiment(tmp_path: Path) -> None:
    proc, port = dead_judge_run(tmp_path)
    assert proc.returncode == 3
    (line,) = proc.stderr.splitlines()
    assert line.startswith(
        f"nvrx: error: judge llm:m unreachable: nothing answers at http://127.0.0.1:{port}/v1: "
        "connection refused (3 attempts in "
    )
    assert line.endswith(" s); 8 experiments left unscored")
    # The answer keeps its row per experiment; why they are unscored is not repeated below it.
    out = proc.stdout.splitlines()
    assert sum(row.endswith("judge unreachable") for row in out) == 8
    assert [row for row in out if row.startswith("unscored ")] == []
    assert "8 cases unscored: no verdict" in out
    # The first experiment's attempts (max_retries + 1), then no request for the other seven.
    assert "judge calls: 3 requests, 0 prompt + 0 completion tokens, 0 cache hits" in out


def test_a_judge_nothing_listens_at_under_json_leaves_every_experiment_unscored_with_why(
    tmp_path: Path,
) -> None:
    proc, port = dead_judge_run(tmp_path, "--json")
    assert proc.returncode == 3
    doc = json.loads(proc.stdout)
    assert doc["exit_code"] == 3
    assert doc["summary"]["unscored"] == 8 and doc["summary"]["usage"]["requests"] == 3
    (reason,) = {c["verdict"]["reason"] for c in doc["cases"]}
    assert reason.startswith(f"nothing answers at http://127.0.0.1:{port}/v1: connection refused")
    (line,) = proc.stderr.splitlines()
    assert line.startswith("nvrx: error: ") and reason in line


def test_a_key_file_readable_by_others_gets_a_warning_naming_the_file(
    tmp_path: Path, session: Session
) -> None:
    key_file = tmp_path / ".llm_api_key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o644)
    with FakeOpenAI() as server:
        proc = nvrx(str(session.dir), "--judge", "llm", "--base-url", server.base_url, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"API key file {key_file} is readable by others (mode -rw-r--r--)" in proc.stderr
    assert server.seen[0].headers["Authorization"] == f"Bearer {KEY}"
    assert KEY not in proc.stdout + proc.stderr


def test_judge_key_resolution_order(tmp_path: Path, session: Session) -> None:
    (tmp_path / "judge.key").write_text("from-judge-file")
    (tmp_path / "judge.key").chmod(0o600)
    with FakeOpenAI() as server:
        for env, expected in [
            ({"JUDGE_API_KEY": "a", "JUDGE_API_KEY_FILE": str(tmp_path / "judge.key")}, "a"),
            (
                {"JUDGE_API_KEY_FILE": str(tmp_path / "judge.key"), "LLM_API_KEY": "c"},
                "from-judge-file",
            ),
            ({"LLM_API_KEY": "c"}, "c"),
        ]:
            server.seen.clear()
            proc = nvrx(
                str(session.dir), "--judge", "llm", "--base-url", server.base_url, "--no-cache",
                cwd=tmp_path, env=env,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
            assert server.seen[0].headers["Authorization"] == f"Bearer {expected}"


def test_a_vote_reports_majority_and_agreement(tmp_path: Path, session: Session) -> None:
    dissent = {**GOOD_ANSWER, "rank_any": "false"}
    with FakeOpenAI(default=Reply(content=dissent)) as server:
        proc = nvrx(
            str(session.dir / "n2_SEGFAULT_r3_i5"), "--judge", "rules", "--judge", "llm:a",
            "--judge", "llm:b", "--base-url", server.base_url, "--json", cwd=tmp_path,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["judge"] == "vote(rules, llm:a, llm:b)"
    v = doc["cases"][0]["verdict"]
    assert v["rank_any"] == "false"  # two of three
    assert v["fault_described"] == "partial"  # llm a and b say partial, rules true
    assert v["agreement"] == pytest.approx(3 / 5)
    assert [j["judge"] for j in v["judges"]] == ["rules", "llm:a", "llm:b"]


def test_a_vote_with_a_judge_that_failed_is_unscored(tmp_path: Path, session: Session) -> None:
    with FakeOpenAI(default=Reply(status=401)) as server:
        proc = nvrx(
            str(session.dir), "--judge", "rules", "--judge", "llm:m", "--base-url", server.base_url,
            cwd=tmp_path,
        )  # fmt: skip
    assert proc.returncode == 3
    assert (
        "1 of 2 judges could not score it (llm:m: authentication failed (HTTP 401)" in proc.stdout
    )


def test_a_tied_vote_takes_the_worse_value(tmp_path: Path, session: Session) -> None:
    dissent = {**GOOD_ANSWER, "rank_any": "false", "fault_described": "true"}
    with FakeOpenAI(default=Reply(content=dissent)) as server:
        proc = nvrx(
            str(session.dir / "n2_SEGFAULT_r3_i5"), "--judge", "rules", "--judge", "llm:m",
            "--base-url", server.base_url, "--json", cwd=tmp_path,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    v = doc["cases"][0]["verdict"]
    assert v["rank_any"] == "false"  # rules: true, llm: false
    assert v["restart_correct"] == "true"  # both true
    assert doc["summary"]["agreement"] == pytest.approx(4 / 5)


def test_missing_logs_and_directories_are_unscored_not_invalid(tmp_path: Path) -> None:
    s = make_session(
        tmp_path,
        [("SEGFAULT", 3, good(3, "segfault"), fr(3)), ("SIGKILL", 1, good(1, "Killed"), None)],
    )
    for log in (s.dir / "n2_SEGFAULT_r3_i5" / "logs" / "slurm").iterdir():
        log.unlink()
    shutil.rmtree(s.dir / "n2_SIGKILL_r1_i5")
    proc = nvrx(str(s.dir), "--json", cwd=tmp_path)
    assert proc.returncode == 3
    reasons = [c["verdict"]["reason"] for c in json.loads(proc.stdout)["cases"]]
    assert reasons[0].startswith("no job log ") and "1000.*.1.main_workload.log" in reasons[0]
    assert reasons[1] == f"no experiment directory {s.dir / 'n2_SIGKILL_r1_i5'}"


def test_a_tracking_file_without_its_columns_is_refused(tmp_path: Path) -> None:
    s = tmp_path / "sess"
    s.mkdir()
    (s / "experiments.tsv").write_text("JOB\tFAULT\n1\tSEGFAULT\n")
    proc = nvrx(str(s), cwd=tmp_path)
    assert proc.returncode == 2
    assert (
        "not a tracking file (no column JOB_ID, FAULT_TYPE, RANK, ITER, NODES, EXPERIMENT_DIR)"
        in proc.stderr
    )


def test_a_session_with_a_damaged_journal_is_a_one_line_error(tmp_path: Path) -> None:
    s = tmp_path / "fault_injection" / "20260101_000000"
    s.mkdir(parents=True)
    (s / "experiments.tsv").write_text("JOB_ID\tFAULT_TYPE\tRANK\tITER\tNODES\tEXPERIMENT_DIR\n")
    (s / "journal.jsonl").write_text(
        '{"event": "session", "spec": {}}\n'
        '{"event": "planned", "index": 0, "fault": "BOOM", "rank": 0, "iter": 1, "nodes": 1}\n'
    )
    proc = nvrx(str(s), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "journal.jsonl line 2: event 'planned' is damaged" in lines[0], (
        proc.stderr
    )


@pytest.mark.parametrize("columns", [120, 160])
def test_case_names_never_fold_mid_word_on_a_terminal(columns: int) -> None:
    import io

    from rich.console import Console

    from nvrx.score.load import Shape, cases_from_path
    from nvrx.score.output import render
    from nvrx.score.report import summarise
    from nvrx.score.rules import judge_rules

    from .conftest import SCORE_DEMO

    cases = cases_from_path(SCORE_DEMO, Shape(4, 32))
    verdicts = [judge_rules(c) for c in cases]
    buffer = io.StringIO()
    render(Console(file=buffer, width=columns), cases, verdicts, summarise(verdicts), "rules")
    screen = buffer.getvalue()
    assert screen.splitlines()[0] == f"session {SCORE_DEMO.name}"  # said once, above
    for case in cases:
        name = case.id.rpartition("/")[2]
        assert any(line.split()[1:2] == [name] for line in screen.splitlines()[2:]), screen


def test_the_score_request_takes_directories_or_the_ground_truth() -> None:
    from nvrx.score.command import ScoreRequest
    from nvrx.score.model import ScoreError

    ScoreRequest(targets=(Path("session"),)).check()
    ScoreRequest(fault_type="SIGKILL", rank=1, iteration=5, nodes=2).check()
    with pytest.raises(ScoreError, match="not both"):
        ScoreRequest(targets=(Path("session"),), rank=1).check()
    with pytest.raises(ScoreError, match=r"missing: --iter, --nodes"):
        ScoreRequest(fault_type="SIGKILL", rank=1).check()
