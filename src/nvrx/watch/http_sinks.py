"""The watcher's HTTP calls (webhook, PagerDuty Events v2, heartbeat), each within a total
deadline. Its own module so that a pass without a URL to call never imports httpx."""

from __future__ import annotations

import time

import httpx

from nvrx.watch.sinks import SinkError

# What a sink's answer may be, at most: nobody reads it, and a server that streams without end
# (or drips a byte at a time, under httpx's per-read timeout) must not hold the pass.
_REPLY_CAP = 64 << 10


def _call(client: httpx.Client, method: str, url: str, payload: object = None) -> None:
    """One sink request within a total deadline of the client's timeout; raises httpx errors
    (HTTPStatusError for a status >= 400)."""
    timeout = client.timeout.read or 20.0
    deadline = time.monotonic() + timeout
    with client.stream(method, url, json=payload) as response:
        read = 0
        for chunk in response.iter_raw():
            read += len(chunk)
            if read > _REPLY_CAP or time.monotonic() > deadline:
                raise httpx.ReadTimeout("the sink's answer did not end in time")
        response.raise_for_status()


def _problem(exc: Exception) -> str:
    """A sink's failure without its URL."""
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    return type(exc).__name__


class HttpSinks:
    """One HTTP client for a watcher's sinks; every failure is a SinkError."""

    def __init__(self, timeout: float) -> None:
        self.client = httpx.Client(timeout=timeout)

    def post(self, url: str, payload: dict[str, object]) -> None:
        try:
            _call(self.client, "POST", url, payload)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise SinkError(_problem(exc)) from None

    def get(self, url: str) -> None:
        """A heartbeat ping."""
        try:
            _call(self.client, "GET", url)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise SinkError(_problem(exc)) from None
