"""The one output contract (docs/output-contract.md), walked over every subcommand: each `--json`
document is one object on one line, `schema` then `ok` (the exit code is 0) first and the
process's `exit_code` last, its paths are absolute, and an error under `--json` is a document on
stdout as well as one line on stderr."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from .cli_runner import clean_environ, slurm_settings
from .cli_runner import nvrx as nvrx_in_process
from .test_inject_report import session_with, verdict
from .test_watch_watcher import healthy_run

REPO = Path(__file__).resolve().parents[1]
SESSION = REPO / "examples" / "score_demo" / "20261129_124154"
WORKLOAD = REPO / "examples" / "workloads" / "cpu_fault_demo" / "nvrx.yaml"
LOG = SESSION / "n2_SEGFAULT_r1_i3" / "logs" / "slurm" / "90.0.1.main_workload.log"
PATH_KEYS = {"work_dir", "session", "experiment_dir", "script", "manifest", "config_file",
             "env_file", "old", "new"}  # fmt: skip


@pytest.fixture
def where(tmp_path: Path, shared_dir: Path) -> dict[str, str]:
    healthy_run(tmp_path / "w")
    (tmp_path / "team").mkdir()
    (tmp_path / "empty").mkdir()
    shutil.copytree(tmp_path / "w", tmp_path / "team" / "a")
    session = tmp_path / "fault_injection" / SESSION.name
    shutil.copytree(SESSION, session)
    passing = session_with(tmp_path / "diff", "20260101_000000", [("SIGKILL:0:5:2", verdict())])
    failing = session_with(
        tmp_path / "diff", "20260102_000000", [("SIGKILL:0:5:2", verdict(rank_any="false"))]
    )
    return {
        "w": str(tmp_path / "w"), "team": str(tmp_path / "team"), "state": str(tmp_path / "s"),
        "empty": str(tmp_path / "empty"),
        "session": str(session), "chain": str(shared_dir / "chain"),
        "passing": str(passing.dir), "failing": str(failing.dir),
    }  # fmt: skip


# Every mode of a watch pass, each a document with the pass's `state` under --json.
WATCH_ONE = ["watch", "--platform", "none", "--state-dir", "{state}"]
WATCH_MODES: list[tuple[list[str], int]] = [
    ([*WATCH_ONE, "--work-dir", "{w}"], 0),
    ([*WATCH_ONE, "--work-dir", "{w}", "--goodput"], 0),
    ([*WATCH_ONE, "--work-dir", "{w}", "--dry-run"], 0),
    ([*WATCH_ONE, "--work-dir", "{empty}"], 3),  # blind: nothing to read there
    ([*WATCH_ONE, "--work-dir", "{empty}", "--goodput"], 3),
    ([*WATCH_ONE, "--fleet", "{team}"], 0),
    ([*WATCH_ONE, "--fleet", "{team}", "--goodput"], 0),
    ([*WATCH_ONE, "--fleet", "{empty}"], 0),  # no chain found: an answer
    ([*WATCH_ONE, "--work-dir", "{w}", "--exit-codes", "upstream"], 0),
]


# (the command, its exit code on these inputs): every subcommand and every listing it prints.
COMMANDS: list[Any] = [
    (["config", "show"], 0),
    (["config", "env"], 0),
    (["submit-chain", "--dry-run", "--work-dir", "{chain}", "--launcher", "/bin/true",
      "--set", "chain.train_command=/bin/true"], 0),
    *WATCH_MODES,
    (["watch", "--list-detectors"], 0),
    (["watch", "--platform", "none", "--fleet", "{session}"], 0),
    (["inject-loop", "--config", str(WORKLOAD), "--list-pool"], 0),
    (["inject-loop", "--config", str(WORKLOAD), "--dry-run", "--base-dir", "{state}"], 0),
    (["inject-loop", "--next", "{session}"], 0),
    (["report", "{session}"], 0),
    (["report", "diff", "{session}", "{session}"], 0),
    (["report", "diff", "{passing}", "{failing}"], 1),
    (["score", "{session}"], 0),
    (["analyze", "log", str(LOG)], 0),
    (["analyze", "fr", "{session}/n2_SEGFAULT_r1_i3/checkpoints"], 0),
]  # fmt: skip


def run(args: list[str], where: dict[str, str]) -> tuple[int, str, str]:
    argv = [a.format(**where) for a in args]
    home = Path(where["state"]).parent
    env = clean_environ({"HOME": str(home), **slurm_settings(home)})
    proc = nvrx_in_process(*argv, "--json", env=env, cwd=home)
    return proc.returncode, proc.stdout, proc.stderr


def paths_in(doc: Any) -> list[str]:
    found: list[str] = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key in PATH_KEYS and isinstance(value, str):
                found.append(value)
            found += paths_in(value)
    elif isinstance(doc, list):
        for item in doc:
            found += paths_in(item)
    return found


def command_id(i: int, row: Any) -> str:
    args = row.values[0] if hasattr(row, "values") else row[0]  # a pytest.param, or a tuple
    return " ".join(args[:2]) + f"-{i}"


COMMAND_IDS = [command_id(i, row) for i, row in enumerate(COMMANDS)]


@pytest.mark.parametrize(("args", "code"), COMMANDS, ids=COMMAND_IDS)
def test_every_json_document_is_one_line_framed_by_schema_ok_and_exit_code(
    where: dict[str, str], args: list[str], code: int
) -> None:
    rc, out, err = run(args, where)
    assert rc == code, err
    (line,) = out.splitlines()  # one document, on one line, nothing else on stdout
    assert out == line + "\n"
    doc = json.loads(line)
    assert isinstance(doc, dict)
    keys = list(doc)
    assert keys[:2] == ["schema", "ok"] and keys[-1] == "exit_code", keys
    assert doc["schema"] == 1 and doc["exit_code"] == rc
    assert doc["ok"] is (rc == 0)
    for path in paths_in(doc):
        assert path.startswith("/"), (path, args)


@pytest.mark.parametrize(
    ("args", "code"), WATCH_MODES, ids=[" ".join(a[5:]) for a, _ in WATCH_MODES]
)
def test_every_watch_document_says_the_passs_state(
    where: dict[str, str], args: list[str], code: int
) -> None:
    rc, out, err = run(args, where)
    assert rc == code, err
    doc = json.loads(out)
    assert doc["state"] == ("blind" if code == 3 else "ok"), doc


def test_the_detector_listing_is_a_document_too(where: dict[str, str]) -> None:
    rc, out, _ = run(["watch", "--list-detectors"], where)
    doc = json.loads(out)
    names = [d["name"] for d in doc["detectors"]]
    assert rc == doc["exit_code"] == 0 and "watch_blind" in names and "action_refused" in names
    assert {d["scope"] for d in doc["detectors"]} == {"chain", "fleet", "action"}
    assert all(d["summary"].endswith(".") for d in doc["detectors"])
    rc, _, err = run(["watch", "--list-detectors", "--fleet"], where)  # still takes nothing else
    assert rc == 2 and "not with --fleet" in err


BAD = [
    ["no-such-command"],
    ["config", "show", "--set", "watch.storm_cycle=1"],
    ["submit-chain", "--dry-run", "--work-dir", "/tmp/x"],
    ["watch", "--platform", "none", "--work-dir", "{w}", "--interval", "0x"],
    ["inject-loop", "--pool", "NOPE:1:1:1", "--list-pool"],
    ["report", "{state}/not-a-session"],
    ["score", "{state}/not-a-session"],
    ["analyze", "log", "{state}/no-such.log"],
    ["analyze", "fr", "{state}/no-such-dir"],
]


@pytest.mark.parametrize("args", BAD, ids=[" ".join(a[:2]) for a in BAD])
def test_an_error_under_json_is_a_document_and_one_line(
    where: dict[str, str], args: list[str]
) -> None:
    rc, out, err = run(args, where)
    assert rc == 2
    (line,) = err.strip().splitlines()
    assert line.startswith("nvrx: error: ")
    doc = json.loads(out)
    assert doc == {"schema": 1, "ok": False, "error": line.removeprefix("nvrx: error: "),
                   "exit_code": 2}  # fmt: skip


# Every command that draws a page: its arguments and where `--html` alone puts the page.
PAGES = [
    (["watch", "--platform", "none", "--work-dir", "{w}", "--state-dir", "{state}"],
     "{state}/*/timeline.html"),
    (["report", "{session}"], "{session}/report.html"),
    (["report", "--html", "{session}"], "{session}/report.html"),  # a directory is not FILE
    (["score", "{session}", "--judge", "rules"], "{session}/score.html"),
]  # fmt: skip


def plain(args: list[str], where: dict[str, str]) -> tuple[int, str, str]:
    home = Path(where["state"]).parent
    argv = [a.format(**where) for a in args]
    proc = nvrx_in_process(*argv, env=clean_environ({"HOME": str(home)}), cwd=home)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize(("args", "default"), PAGES, ids=[" ".join(a[:2]) for a, _ in PAGES])
def test_html_and_junit_mean_the_same_on_every_command_that_draws_a_page(
    where: dict[str, str], tmp_path: Path, args: list[str], default: str
) -> None:
    code, _, _ = plain(args, where)
    # --html alone: the command's default place, named on stderr; the answer is unchanged.
    rc, _, err = plain([*args, "--html"] if "--html" not in args else args, where)
    assert rc == code, err
    (page,) = Path("/").glob(default.format(**where).lstrip("/"))
    assert page.read_text().startswith("<!DOCTYPE html>")
    assert f"nvrx: note: wrote {page}" in err
    # --html FILE and --junit FILE: those files; the JUnit file fails where the exit code does.
    html, junit = tmp_path / "out" / "page.html", tmp_path / "out" / "result.xml"
    html.parent.mkdir()
    plain_args = [a for a in args if a != "--html"]
    rc, _, err = plain([*plain_args, "--html", str(html), "--junit", str(junit)], where)
    assert rc == code, err
    assert html.read_text().startswith("<!DOCTYPE html>")
    suite = ET.parse(junit).getroot()
    assert suite.tag == "testsuite" and int(suite.get("tests", "0")) > 0
    assert (int(suite.get("failures", "0")) > 0) == (code == 1)
    # Never over an input: one line, exit 2, the input untouched.
    victim = (
        next(Path(where["w"]).rglob("cycle_info.*"))
        if args[0] == "watch"
        else (Path(where["session"]) / "journal.jsonl")
    )
    before = victim.read_bytes()
    for flag in ("--html", "--junit"):
        rc, _, err = plain([*plain_args, flag, str(victim)], where)
        assert rc == 2 and "refusing to write over an input" in err, err
        assert err.count("\n") == 1
    assert victim.read_bytes() == before
