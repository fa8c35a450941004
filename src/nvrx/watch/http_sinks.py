"""The watcher's HTTP calls (webhook, PagerDuty Events v2, heartbeat), each within a total
deadline. Its own module so that a pass without a URL to call never imports httpx."""

from __future__ import annotations

import asyncio

import httpx

from nvrx.watch.sinks import SinkBudget, SinkError

# What a sink's answer may be, at most: nobody reads it, and a server that streams without end
# (or drips a byte at a time, under httpx's per-read timeout) must not hold the pass.
_REPLY_CAP = 64 << 10


async def _exchange(
    client: httpx.AsyncClient, method: str, url: str, payload: object = None
) -> None:
    """One sink request, its answer read (and dropped) up to _REPLY_CAP; raises httpx errors
    (HTTPStatusError for a status >= 400)."""
    async with client.stream(method, url, json=payload) as response:
        read = 0
        async for chunk in response.aiter_raw():
            read += len(chunk)
            if read > _REPLY_CAP:
                raise httpx.ReadError("the sink's answer is larger than nvrx reads")
        response.raise_for_status()


class _NoWholeAnswer(httpx.TimeoutException):
    """The exchange's total deadline passed (its message says how long it was)."""


def _call(timeout: float, method: str, url: str, payload: object = None) -> None:
    """One sink exchange (connect, headers, body) within one total deadline, kept by the clock:
    httpx's timeouts are per read, so a server that drips its headers a byte at a time would
    hold the pass for ever. Past the deadline the exchange is cancelled, its connection closed."""

    async def bounded() -> None:
        async with httpx.AsyncClient(timeout=timeout) as client:
            await asyncio.wait_for(_exchange(client, method, url, payload), timeout)

    try:
        asyncio.run(bounded())
    except TimeoutError:
        raise _NoWholeAnswer(f"no whole answer within {timeout:g} s") from None


def _problem(exc: Exception) -> str:
    """A sink's failure without its URL."""
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    if isinstance(exc, _NoWholeAnswer):
        return str(exc)
    return type(exc).__name__


class HttpSinks:
    """A watcher's sinks' calls, each a fresh exchange within the total deadline (a pass makes
    a handful: no connection is worth keeping), and all of a pass's within its `SinkBudget`;
    every failure is a SinkError."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.budget: SinkBudget | None = None  # the pass's, set by its watcher

    def _seconds(self) -> float:
        return self.timeout if self.budget is None else self.budget.seconds(self.timeout)

    def post(self, url: str, payload: dict[str, object]) -> None:
        try:
            _call(self._seconds(), "POST", url, payload)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise SinkError(_problem(exc)) from None

    def get(self, url: str) -> None:
        """A heartbeat ping."""
        try:
            _call(self._seconds(), "GET", url)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise SinkError(_problem(exc)) from None
