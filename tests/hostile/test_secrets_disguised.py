"""Secrets, second pass: a key typed after the wrong separator, a key a
server or analyser echoes in another case or split by invisible characters, a key an analyser
writes into its own output file. Each test failed before its fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .harness import Result, every_file_text, leaked, run_nvrx
from .inputs import FakeOpenAI, Reply, canary, fr, good, make_session

WALL = 20.0
ZWSP = "\u200b"


def disguises(key: str) -> list[str]:
    """How an echo can change a key and still show it to a reader."""
    return [key.upper(), key.lower(), ZWSP.join(key), key[:6] + "\u00ad" + key[6:]]


def no_leak(key: str, texts: dict[str, str]) -> None:
    for where, text in texts.items():
        shown = text.replace(ZWSP, "").replace("\u00ad", "").lower()
        piece = leaked(key.lower(), shown)
        assert piece is None, f"{piece!r} (a piece of the key, in some disguise) is in {where}"


@pytest.mark.parametrize("separator", [":", " ", "\t"])
def test_a_key_set_with_the_wrong_separator_is_never_printed(home: Path, separator: str) -> None:
    key = canary("Sep")
    proc = run_nvrx(
        "config", "show", "--set", f"score.api_key{separator}{key}", cwd=home, wall=WALL
    )
    assert proc.code == 2 and "score.api_key" in proc.stderr, proc.describe()
    no_leak(key, {"output": proc.output})
    env_file = home / "site.env"
    env_file.write_text(f"JUDGE_API_KEY{separator}{key}\n")
    proc = run_nvrx("config", "show", "--env-file", str(env_file), cwd=home, wall=WALL)
    assert proc.code == 2 and "site.env line 1" in proc.stderr, proc.describe()
    no_leak(key, {"output": proc.output})


def test_a_judge_echoing_the_key_in_disguise_reaches_no_output(tmp_path: Path, home: Path) -> None:
    key = canary("Disguise")
    session = make_session(tmp_path, [("SEGFAULT", 3, good(3, "Segmentation fault"), fr(3))]).dir
    notes = "echoed: " + " / ".join(disguises(key))
    answer = {
        "restart_correct": "true", "rank_primary": "true", "rank_any": "true",
        "fault_described": "true", "fr_rank_correct": "rank", "notes": notes,
    }  # fmt: skip
    junit, md, page = tmp_path / "s.xml", tmp_path / "s.md", tmp_path / "s.html"
    with FakeOpenAI(default=Reply(content=answer)) as server:
        args = ["score", str(session), "--judge", "llm", "--base-url", server.base_url,
                "--no-cache"]  # fmt: skip
        env = {"JUDGE_API_KEY": key}
        table = run_nvrx(
            *args, "--junit", str(junit), "--markdown", str(md), "--html", str(page),
            cwd=home, env=env, wall=WALL,
        )  # fmt: skip
        as_json = run_nvrx(*args, "--json", cwd=home, env=env, wall=WALL)
    assert table.code == 0 and as_json.code == 0, table.describe() + as_json.describe()
    assert "echoed" in table.stdout  # the notes are shown, the key in them is not
    no_leak(key, {
        "stdout": table.stdout, "stderr": table.stderr, "--json": as_json.stdout,
        "JUnit": junit.read_text(), "markdown": md.read_text(), "page": page.read_text(),
    })  # fmt: skip


FAKE_LOGSAGE = """#!/bin/sh
# logsage as far as nvrx sees it: `python -m logsage... -a LOG -o OUT`, an answer in OUT that
# echoes the key it was given, in disguise.
while [ "$#" -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done
key_upper=$(printf %s "$NVIDIA_API_KEY" | tr a-z A-Z)
cat > "$out" <<EOF
{"error_count": 1, "error_analysis": {"auto_resume": "STOP - DONT RESTART IMMEDIATE",
 "explanation": "rank 3 crashed; I was given $NVIDIA_API_KEY and $key_upper",
 "attribution": "Primary issues: [rank 3: Segmentation fault], Secondary issues: []"}}
EOF
"""


def test_an_analysers_own_output_file_is_kept_masked(tmp_path: Path, home: Path) -> None:
    key = canary("Sage")
    session = make_session(tmp_path, [("SEGFAULT", 3, good(3, "Segmentation fault"), fr(3))]).dir
    python = tmp_path / "fake-python"
    python.write_text(FAKE_LOGSAGE)
    python.chmod(0o755)
    proc: Result = run_nvrx(
        "inject-loop", "--reanalyze", str(session),
        "--set", "inject.log_analyzer=logsage", "--set", f"inject.logsage_python={python}",
        "--set", "inject.llm_base_url=http://127.0.0.1:9/v1", "--set", f"inject.llm_api_key={key}",
        cwd=home, wall=WALL,
    )  # fmt: skip
    assert proc.code in (0, 1, 3), proc.describe()
    kept = every_file_text(session)
    answers = [p for p in kept if p.name.startswith("logsage")]
    assert answers, f"no logsage answer kept: {sorted(p.name for p in kept)}"
    assert "rank 3 crashed" in json.dumps([kept[p] for p in answers])
    no_leak(key, {str(p): t for p, t in kept.items()} | {"output": proc.output})
