"""The logsage plug-in with the real `logsage` package from PyPI (0.1.8) against the local judge
server (llama.cpp's `llama-server` with SmolLM2, deploy/local-llm/up).

logsage brings langchain, langchain-nvidia-ai-endpoints and pandas, so it lives in a Python of
its own (`.ci/run` installs it in /var/lib/nvrx-logsage/venv; elsewhere name one with
NVRX_LOGSAGE_PYTHON) and nvrx runs it as a command (`inject.logsage_python`).

Between logsage and the server sits a loopback proxy that only lowers `max_tokens`: logsage asks
for 10,000 tokens per call, which the 135M model fills with rambling at about 18 tokens/s on two
cores (ten minutes a call, seen). The model's answers are not asserted, only that the real package
ran end to end, its answer came back as the 5-field text nvrx reads, and no key leaked.

Skipped, saying why, when the package or the server is missing, unless NVRX_REQUIRE_LLM=1 (as in
.ci/run), where that is a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest

from nvrx.config import load_config
from nvrx.inject.analyst import LOGSAGE_OUTPUT, Analyzers, logsage_text
from nvrx.score.evidence import Attribution
from nvrx.score.inputs import STRIPPED_LOG

from .fake_openai import LoopbackServer
from .test_score_server import BASE_URL, MODEL, _server_up

PYTHON = Path(os.environ.get("NVRX_LOGSAGE_PYTHON", "/var/lib/nvrx-logsage/venv/bin/python"))
KEY = "nvapi-logsage-key-must-not-leak-0000"
MAX_TOKENS = 48
LOG = Path(__file__).resolve().parent / "data" / "cpu_logs" / "SEGFAULT_r0_n2.log"


def _missing() -> str | None:
    """Why the real logsage cannot run here, or None."""
    if not PYTHON.is_file():
        return f"no Python with logsage at {PYTHON} (set NVRX_LOGSAGE_PYTHON; .ci/run installs it)"
    probe = [str(PYTHON), "-c", "import logsage.auto_resume_policy.main"]
    proc = subprocess.run(probe, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return f"{PYTHON} cannot import logsage.auto_resume_policy.main: {last}"
    if not _server_up():
        return f"no local judge server at {BASE_URL} (deploy/local-llm/up)"
    return None


class CappingProxy(LoopbackServer):
    """A loopback HTTP proxy to the judge server that lowers each request's `max_tokens` and
    records what it forwarded."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.requests: list[tuple[str, str, dict[str, Any] | None]] = []
        super().__init__()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _forward(self, body: bytes | None) -> None:
                path = self.path.removeprefix("/v1")
                doc = None
                if body is not None:
                    doc = json.loads(body)
                    if "max_tokens" in doc:
                        doc["max_tokens"] = min(int(doc["max_tokens"]), MAX_TOKENS)
                    body = json.dumps(doc).encode()
                auth = self.headers.get("Authorization", "")
                proxy.requests.append((self.command, path, doc | {"_auth": auth} if doc else None))
                reply = httpx.request(
                    self.command, proxy.upstream + path, content=body, timeout=900,
                    headers={"Content-Type": "application/json"},
                )  # fmt: skip
                self.send_response(reply.status_code)
                self.send_header("Content-Type", reply.headers.get("content-type", "text/plain"))
                self.send_header("Content-Length", str(len(reply.content)))
                self.end_headers()
                self.wfile.write(reply.content)

            def do_GET(self) -> None:
                self._forward(None)

            def do_POST(self) -> None:
                self._forward(self.rfile.read(int(self.headers.get("Content-Length", "0"))))

        return Handler


@pytest.fixture(scope="module")
def proxy() -> Iterator[CappingProxy]:
    if (why := _missing()) is not None:
        if os.environ.get("NVRX_REQUIRE_LLM") == "1":
            pytest.fail(f"the real logsage cannot run: {why}")
        pytest.skip(why)
    with CappingProxy(BASE_URL) as running:
        yield running


@pytest.mark.timeout(1500)
def test_the_real_logsage_package_analyses_a_log_through_the_local_judge_server(
    proxy: CappingProxy, tmp_path: Path
) -> None:
    settings = {
        "inject.log_analyzer": "logsage",
        "inject.logsage_python": str(PYTHON),
        "inject.log_analysis_base_url": proxy.base_url,
        "inject.log_analysis_model": MODEL,
        "inject.llm_api_key": KEY,
        "inject.analysis_timeout": 1200.0,
    }
    cli = {k: (v, "test") for k, v in settings.items()}
    config = load_config(environ={}, cli=cli, cwd=tmp_path, home=tmp_path).config
    analyzers = Analyzers.from_config(config, gpus_per_node=2)
    assert analyzers.log_name == "logsage"
    analysis = tmp_path / "analysis"
    analysis.mkdir()
    (analysis / STRIPPED_LOG).write_text(LOG.read_text())

    text, doc = analyzers.log(analysis, LOG.read_text())

    answer = json.loads((analysis / LOGSAGE_OUTPUT).read_text())
    assert answer["error_count"] > 0  # logsage's own extraction found the segfault's lines
    assert text == logsage_text(answer)
    assert Attribution.parse(text).decision in {"STOP", "RESTART", "LLM FAILURE"}
    assert doc["source"] == "logsage" and doc["decision"] == Attribution.parse(text).decision
    chats = [r for r in proxy.requests if r[1] == "/chat/completions"]
    assert chats, proxy.requests  # the model was asked, through ChatNVIDIA, at our URL
    assert all(r[2] is not None and r[2]["_auth"] == f"Bearer {KEY}" for r in chats)
    assert KEY not in text and KEY not in json.dumps(doc)
