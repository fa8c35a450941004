"""The LLM judge against the real local judge server (llama.cpp's `llama-server` with SmolLM2,
started by deploy/local-llm/up): a real experiment of a CPU campaign scored, its verdict
schema-valid, and a re-run answered from the cache with zero requests.

One experiment, not the whole demo session: on 2 CPU cores each ~7,400-token prompt takes a
minute or more to read, and the session's other paths are covered against tests/fake_openai.py.

The tiny model's verdicts are not asserted, only their shape. Skipped when the server does not
answer, unless NVRX_REQUIRE_LLM=1 (as in .ci/run), where that is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import httpx
import pytest

from nvrx.score.model import ALLOWED, DIMENSIONS

from .conftest import SCORE_DEMO as DEMO
from .test_score_cli import nvrx

BASE_URL = os.environ.get("NVRX_TEST_LLM_URL", "http://127.0.0.1:8431/v1")
MODEL = os.environ.get("NVRX_TEST_LLM_MODEL", "smollm2")
KEY = "sk-local-judge-must-not-leak-0000"
# A slow CI machine may need more than the default 120 s for one prompt.
ENV = {"JUDGE_API_KEY": KEY, "NVRX_SCORE_REQUEST_TIMEOUT": "600"}


def _server_up() -> bool:
    try:
        return httpx.get(BASE_URL.rsplit("/v1", 1)[0] + "/health", timeout=3).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def server() -> str:
    if not _server_up():
        if os.environ.get("NVRX_REQUIRE_LLM") == "1":
            pytest.fail(
                f"the local judge server at {BASE_URL} does not answer (deploy/local-llm/up)"
            )
        pytest.skip(f"no local judge server at {BASE_URL} (deploy/local-llm/up)")
    return BASE_URL


@pytest.mark.timeout(1500)
def test_a_real_artifact_is_scored_schema_valid_and_a_rerun_costs_no_call(
    server: str, tmp_path: Path
) -> None:
    session = tmp_path / DEMO.name
    shutil.copytree(DEMO, session)
    experiment = session / "n2_SEGFAULT_r1_i3"
    args = [str(experiment), "--judge", f"llm:{MODEL}", "--base-url", server, "--json"]
    first = nvrx(*args, "--junit", str(tmp_path / "j.xml"), cwd=tmp_path, env=ENV)
    assert first.returncode in (0, 1), first.stderr  # scored; thresholds are not asked for
    doc = json.loads(first.stdout)
    assert doc["summary"]["scored"] == 1
    assert doc["summary"]["usage"]["requests"] >= 1
    assert doc["summary"]["usage"]["prompt_tokens"] > 0
    for case in doc["cases"]:
        verdict = case["verdict"]
        assert verdict["status"] == "scored", verdict
        assert verdict["model"] == MODEL
        for dimension in DIMENSIONS:
            assert verdict[dimension] in ALLOWED[dimension], (dimension, verdict)
        assert isinstance(verdict["notes"], str)

    again = nvrx(*args, cwd=tmp_path, env=ENV)
    assert again.returncode == first.returncode, again.stderr
    redo = json.loads(again.stdout)
    assert redo["summary"]["usage"]["requests"] == 0
    assert redo["summary"]["cache_hits"] == 1
    assert [c["verdict"]["rank_any"] for c in redo["cases"]] == [
        c["verdict"]["rank_any"] for c in doc["cases"]
    ]
    written = [(tmp_path / "j.xml").read_text()] + [
        p.read_text() for p in (tmp_path / "judge-cache").rglob("*.json")
    ]
    for text in [first.stdout, first.stderr, again.stdout, again.stderr, *written]:
        assert KEY not in text
