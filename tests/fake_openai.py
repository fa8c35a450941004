"""A real HTTP server on 127.0.0.1 that speaks just enough of the OpenAI chat API to misbehave
on purpose: scripted status codes, Retry-After, delays, bodies that are not JSON, answers that
break the schema, and servers that reject `response_format` json_schema.

Used by the LLM judge's tests and by bench/score_throughput.py. Every request is recorded.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

GOOD_ANSWER = {
    "restart_correct": "true",
    "rank_primary": "true",
    "rank_any": "true",
    "fault_described": "partial",
    "fr_rank_correct": "rank",
    "notes": "The injected rank is the primary root cause.",
}


@dataclass
class Reply:
    """One scripted reply. `content` is the assistant message (a dict is sent as JSON text);
    `raw` replaces the whole body; `delay` is slept before answering."""

    status: int = 200
    content: str | dict[str, Any] | None = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    finish_reason: str = "stop"


@dataclass
class Seen:
    body: dict[str, Any]
    headers: dict[str, str]
    raw: bytes


class LoopbackServer:
    """A threaded HTTP server on 127.0.0.1 (a free port, or `port`) serving `_handler()`'s
    requests while it is entered; `base_url` is its OpenAI-style `/v1` root."""

    def __init__(self, port: int = 0) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.server.daemon_threads = True
        # A short poll: shutdown() waits for the loop to notice, and every test stops a server.
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/v1"

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class FakeOpenAI(LoopbackServer):
    def __init__(
        self,
        replies: list[Reply] | None = None,
        *,
        default: Reply | None = None,
        reject_formats: tuple[str, ...] = (),
        port: int = 0,
    ) -> None:
        self.replies: deque[Reply] = deque(replies or [])
        self.default = default or Reply(content=GOOD_ANSWER)
        self.reject_formats = reject_formats
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        super().__init__(port)

    def _next(self, body: dict[str, Any]) -> Reply:
        fmt = (body.get("response_format") or {}).get("type")
        if fmt in self.reject_formats:
            return Reply(
                status=400,
                raw=json.dumps(
                    {"error": {"message": f"response_format {fmt} unsupported"}}
                ).encode(),
            )
        with self._lock:
            return self.replies.popleft() if self.replies else self.default

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {}
                with fake._lock:
                    fake.seen.append(Seen(body, dict(self.headers.items()), raw))
                reply = fake._next(body)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.raw is not None:
                    payload = reply.raw
                else:
                    content = reply.content
                    if isinstance(content, dict):
                        content = json.dumps(content)
                    payload = json.dumps(
                        {
                            "id": "chatcmpl-test",
                            "object": "chat.completion",
                            "model": body.get("model"),
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {"role": "assistant", "content": content},
                                    "finish_reason": reply.finish_reason,
                                }
                            ],
                            "usage": {
                                "prompt_tokens": 100,
                                "completion_tokens": 20,
                                "total_tokens": 120,
                            },
                        }
                    ).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        return Handler
