"""Analysing a real session of the CPU fault workload (recorded on the local cluster): every
experiment's analysis/ files, blinding checked on the files and prompts actually produced, the
journal and the report after a re-analysis."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import SCORE_DEMO as DEMO
from .fake_openai import FakeOpenAI

LEAKS = (
    "FAULT INJECTION",
    "inject_fault",
    "InjectedException",
    "MEGATRON_FAULT",
    "_r1_i3",
    "_r2_i3",
    "_r3_i3",
    "_r0_i3",
)


@pytest.fixture
def session(tmp_path: Path) -> Path:
    copy = tmp_path / "fault_injection" / DEMO.name
    shutil.copytree(DEMO, copy)
    for analysis in copy.glob("*/analysis"):
        shutil.rmtree(analysis)  # analysed from scratch below
    journal = copy / "journal.jsonl"
    kept = [line for line in journal.read_text().splitlines() if '"event": "analysed"' not in line]
    journal.write_text("\n".join(kept) + "\n")
    return copy


def reanalyze(session: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVRX_", "JUDGE_", "LLM_"))}
    env["HOME"] = str(session.parent.parent)
    return subprocess.run(
        [sys.executable, "-m", "nvrx.cli", "inject-loop", "--reanalyze", str(session), *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )


def test_reanalysis_writes_every_artifact_and_nothing_leaks(session: Path) -> None:
    with FakeOpenAI() as judge:
        proc = reanalyze(session, "--set", f"score.base_url={judge.base_url}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count(">>> [") == 4
    experiments = sorted(p for p in session.iterdir() if p.is_dir())
    assert len(experiments) == 4
    raw = "".join(p.read_text() for p in session.rglob("*.1.main_workload.log"))
    assert all(leak in raw for leak in ("FAULT INJECTION", "inject_fault", "_r1_i3"))
    for exp in experiments:
        analysis = exp / "analysis"
        assert (analysis / "run_valid.txt").read_text().startswith("true\nvalid: ")
        for name in (
            "stripped.log", "log_attribution.txt", "log_attribution.json",
            "fr_analysis.txt", "fr_analysis.json",
        ):  # fmt: skip
            text = (analysis / name).read_text()
            for leak in LEAKS:
                assert leak not in text, (exp.name, name, leak)
        rank = int(exp.name.split("_r")[1].split("_")[0])
        assert json.loads((analysis / "fr_analysis.json").read_text())["ranks"] == [rank]
        verdict = json.loads((analysis / "verdict.json").read_text())
        assert verdict["status"] == "scored" and verdict["judge"].startswith("llm:")
    # What the judge was actually sent: ground truth only in its own section.
    assert len(judge.seen) == 4
    for request in judge.seen:
        prompt = request.body["messages"][1]["content"]
        evidence = prompt.split("## Raw job log", 1)[1]
        for leak in LEAKS:
            assert leak not in evidence, leak


def test_a_reanalysis_keeps_one_row_per_experiment(session: Path) -> None:
    assert reanalyze(session).returncode == 0
    assert reanalyze(session).returncode == 0
    events = [json.loads(line) for line in (session / "journal.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "analysed" for e in events) == 8  # history kept
    report = json.loads((session / "report.json").read_text())
    assert len(report["cases"]) == 4  # the latest analysis of each, once
    assert report["summary"]["scored"] == 4
    md = (session / "experiments_report.md").read_text()
    assert md.startswith("# Fault Injection Experiment Report")
    assert sum(line.startswith("| ") and "| FAILED |" in line for line in md.splitlines()) == 4


def failing_upstream_fr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stderr: str) -> str:
    """The error of the upstream FR adapter run on a stand-in for upstream's module that
    writes the Python expression `stderr` to its stderr and exits 1."""
    from nvrx.inject import analyst as analysis

    (tmp_path / "fake_fr.py").write_text(
        f"import os, sys\nsys.stderr.write({stderr})\nsys.exit(1)\n"
    )
    monkeypatch.setattr(analysis, "UPSTREAM_FR_MODULE", "fake_fr")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with pytest.raises(analysis.AnalysisError) as err:
        analysis.upstream_fr_analyzer(timeout=60)(tmp_path, "_dump_*")
    return str(err.value)


def test_an_upstream_fr_analyzer_that_fails_is_an_error_not_no_dumps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It crashes, echoing the key it found in the environment.
    monkeypatch.setenv("LLM_API_KEY", "sk-upstream-secret")
    error = failing_upstream_fr(
        tmp_path,
        monkeypatch,
        "'Traceback ...\\nRuntimeError: bad key ' + os.environ['LLM_API_KEY']",
    )
    assert error == "nvrx-fr exited 1: RuntimeError: bad key <hidden>"


def test_a_key_across_the_cut_of_an_analyser_error_leaves_no_part_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The key straddles the 200th character of the error line the reason keeps.
    monkeypatch.setenv("JUDGE_API_KEY", "sk-0123456789abcdef")
    error = failing_upstream_fr(
        tmp_path, monkeypatch, "'x' * 190 + os.environ['JUDGE_API_KEY'] + ' rejected'"
    )
    assert "sk-0123" not in error and "<hidden>" in error


def test_an_experiment_whose_job_left_no_log_is_unscored_not_invalid(session: Path) -> None:
    experiments = sorted(p for p in session.iterdir() if p.is_dir())
    lost = experiments[0]
    for log in (lost / "logs").rglob("*.main_workload.log"):
        log.unlink()
    proc = reanalyze(session, "--json")
    assert proc.returncode == 3, proc.stderr  # unscored, as `nvrx score` says (exit 3)
    assert not (lost / "analysis" / "run_valid.txt").exists()
    verdict = json.loads((lost / "analysis" / "verdict.json").read_text())
    assert verdict["status"] == "unscored" and "no job log" in verdict["reason"]
    report = json.loads((session / "report.json").read_text())
    assert report["summary"]["scored"] == 3


def test_an_upstream_fr_analyzer_reads_a_missing_dump_dir_as_no_dumps(tmp_path: Path) -> None:
    from nvrx.inject import analyst as analysis

    text, doc = analysis.upstream_fr_analyzer(timeout=60)(tmp_path / "checkpoints", "_dump_*")
    assert (text, doc["ranks"]) == (analysis.NO_DUMPS, [])


# --- the logsage plug-in (the real package end to end: tests/test_logsage.py) -------------------


def _logsage_config(tmp_path: Path, **settings: object) -> object:
    from nvrx.config import load_config

    cli = {k: (v, "test") for k, v in {"inject.log_analyzer": "logsage", **settings}.items()}
    return load_config(environ={}, cli=cli, cwd=tmp_path, home=tmp_path).config


def test_logsages_json_answer_becomes_its_five_field_text() -> None:
    from nvrx.inject.analyst import logsage_text
    from nvrx.score.evidence import Attribution

    stop = {
        "error_count": 3,
        "error_analysis": {
            "auto_resume": "STOP - DONT RESTART IMMEDIATE",
            "auto_resume_verbose": "user code\nfailed",
            "attribution": "Primary issues: [rank 1 segfault], Secondary issues: [rank 0 timeout]",
            "explanation": "",
            "checkpoint_saved": False,
        },
    }
    parsed = Attribution.parse(logsage_text(stop))
    assert (parsed.decision, parsed.primary_ranks, parsed.secondary_ranks) == (
        "STOP", frozenset({1}), frozenset({0}),
    )  # fmt: skip
    assert logsage_text(stop).splitlines()[3] == "user code failed"  # one line per field
    clean = {"error_count": 0, "recommendation": "No errors detected, no action needed."}
    assert Attribution.parse(logsage_text(clean)).decision == "CONTINUE"
    failed = {"error_count": 1, "error_analysis": {"auto_resume": "LLM ENDPOINT FAILED"}}
    assert Attribution.parse(logsage_text(failed)).decision == "LLM FAILURE"


@pytest.mark.parametrize("doc", [[], {"answer": 1}, {"error_count": 1, "error_analysis": "x"}])
def test_an_answer_that_is_not_logsages_is_an_analysis_error(doc: object) -> None:
    from nvrx.inject.analyst import AnalysisError, logsage_text

    with pytest.raises(AnalysisError, match="logsage output"):
        logsage_text(doc)


def test_logsage_without_the_package_or_with_a_bad_python_is_refused_before_any_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nvrx.inject.analyst import AnalyserSetupError, Analyzers

    monkeypatch.delenv("NVRX_LOGSAGE_SCRIPT", raising=False)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(AnalyserSetupError, match="pip install logsage"):
        Analyzers.from_config(_logsage_config(tmp_path), 2)  # type: ignore[arg-type]
    text = tmp_path / "python"
    text.write_text("not a program")
    with pytest.raises(AnalyserSetupError, match=f"not an executable file: {text}"):
        Analyzers.from_config(_logsage_config(tmp_path, **{"inject.logsage_python": str(text)}), 2)  # type: ignore[arg-type]


def test_logsage_at_a_remote_endpoint_needs_a_key_but_a_loopback_one_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nvrx.inject.analyst import AnalyserSetupError, Analyzers

    monkeypatch.delenv("NVRX_LOGSAGE_SCRIPT", raising=False)
    monkeypatch.delenv("NVIDIA_API_KEY", raising=False)
    python = {"inject.logsage_python": sys.executable}
    remote = _logsage_config(
        tmp_path, **python, **{"inject.llm_base_url": "https://llm.example/v1"}
    )
    with pytest.raises(AnalyserSetupError, match="needs an API key"):
        Analyzers.from_config(remote, 2)  # type: ignore[arg-type]
    local = _logsage_config(tmp_path, **python, **{"inject.llm_base_url": "http://127.0.0.1:9/v1"})
    assert Analyzers.from_config(local, 2).log_name == "logsage"  # type: ignore[arg-type]
