"""The one output contract (docs/output-contract.md), walked over every subcommand: each `--json`
document is one object with `schema` and the process's `exit_code`, its paths are absolute, and
an error under `--json` is a document on stdout as well as one line on stderr."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from .cli_runner import clean_environ
from .cli_runner import nvrx as nvrx_in_process
from .test_watch_run import healthy_run

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
    shutil.copytree(tmp_path / "w", tmp_path / "team" / "a")
    session = tmp_path / "fault_injection" / SESSION.name
    shutil.copytree(SESSION, session)
    return {
        "w": str(tmp_path / "w"), "team": str(tmp_path / "team"), "state": str(tmp_path / "s"),
        "session": str(session), "chain": str(shared_dir / "chain"),
    }  # fmt: skip


# (the command, its exit code on these inputs): every subcommand and every listing it prints.
COMMANDS: list[tuple[list[str], int]] = [
    (["config", "show"], 0),
    (["config", "env"], 0),
    (["submit-chain", "--dry-run", "--work-dir", "{chain}", "--launcher", "/bin/true",
      "--set", "chain.train_command=/bin/true"], 0),
    (["watch", "--platform", "none", "--work-dir", "{w}", "--state-dir", "{state}"], 0),
    (["watch", "--platform", "none", "--work-dir", "{w}", "--state-dir", "{state}", "--goodput"],
     0),
    (["watch", "--platform", "none", "--fleet", "{team}", "--state-dir", "{state}"], 0),
    (["inject-loop", "--config", str(WORKLOAD), "--list-pool"], 0),
    (["inject-loop", "--config", str(WORKLOAD), "--dry-run", "--base-dir", "{state}"], 0),
    (["report", "{session}"], 0),
    (["report", "diff", "{session}", "{session}"], 0),
    (["score", "{session}"], 0),
    (["analyze", "log", str(LOG)], 0),
    (["analyze", "fr", "{session}/n2_SEGFAULT_r1_i3/checkpoints"], 0),
]  # fmt: skip


def run(args: list[str], where: dict[str, str]) -> tuple[int, str, str]:
    argv = [a.format(**where) for a in args]
    home = Path(where["state"]).parent
    proc = nvrx_in_process(*argv, "--json", env=clean_environ({"HOME": str(home)}), cwd=home)
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


@pytest.mark.parametrize(
    ("args", "code"), COMMANDS, ids=[" ".join(a[:2]) + f"-{i}" for i, (a, _) in enumerate(COMMANDS)]
)
def test_every_json_document_has_schema_exit_code_and_absolute_paths(
    where: dict[str, str], args: list[str], code: int
) -> None:
    rc, out, err = run(args, where)
    assert rc == code, err
    doc = json.loads(out)  # one document, nothing else on stdout
    assert isinstance(doc, dict)
    assert next(iter(doc)) == "schema" and doc["schema"] == 1
    assert doc["exit_code"] == rc
    for path in paths_in(doc):
        assert path.startswith("/"), (path, args)


BAD = [
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
