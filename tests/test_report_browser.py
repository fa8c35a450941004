"""The report page in a real headless browser (Debian's chromium): it loads with no console
message and makes no network request.

Requests are caught, not assumed: the browser is pointed at a proxy of the test's own on
127.0.0.1 (loopback included), so any request the page made, whatever the page's own policy
says, would arrive there; the browser's own calls to its vendor's services are told apart by
host. A control page that does fetch proves the check can fail.

Skipped when chromium is not installed, unless NVRX_REQUIRE_BROWSER=1 (set by .ci/run).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nvrx.inject.report import write_html

from .test_inject_html import demo_copy

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

if CHROMIUM is None and os.environ.get("NVRX_REQUIRE_BROWSER") == "1":
    raise RuntimeError("NVRX_REQUIRE_BROWSER=1 but no chromium on PATH")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt install chromium)")


class Proxy:
    """A TCP listener that counts the connections a browser opens to it (its only proxy)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.requests: list[str] = []  # the first line of each: CONNECT host:port, GET url
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:  # nothing is served: a request only needs to be seen
                conn.settimeout(2)
                try:
                    head = conn.recv(4096).split(b"\r\n", 1)[0]
                except OSError:
                    head = b"?"
                self.requests.append(head.decode("latin-1"))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


# Chromium's own services (component updates, sign-in, network time), which it calls whatever page
# it shows and whatever flags say; every other request came from the page.
BROWSER_SERVICES = re.compile(
    r"^\S+ (?:https?://)?[a-z0-9.-]*\b(?:google\.com|googleapis\.com|gvt1\.com|gstatic\.com)[:/ ]"
)


def page_requests(proxy: Proxy) -> list[str]:
    return [r for r in proxy.requests if not BROWSER_SERVICES.match(r)]


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    p = Proxy()
    yield p
    p.close()


@dataclass
class Rendered:
    dom: str
    console: list[str]


def render(page: Path, proxy: Proxy, profile: Path, screenshot: Path | None = None) -> Rendered:
    assert CHROMIUM is not None
    argv = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
        f"--proxy-server=http://127.0.0.1:{proxy.port}", "--proxy-bypass-list=<-loopback>",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-extensions", "--no-pings", "--disable-default-apps",
        "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,MediaRouter",
        "--window-size=1200,900", "--hide-scrollbars",
        f"--screenshot={screenshot}" if screenshot else "--dump-dom", page.as_uri(),
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return Rendered(done.stdout, console)


def test_the_demo_report_loads_with_no_console_message_and_no_request(
    tmp_path: Path, proxy: Proxy
) -> None:
    page = write_html(demo_copy(tmp_path))
    shot = tmp_path / "report.png"
    rendered = render(page, proxy, tmp_path / "profile")
    assert "Fault-injection campaign" in rendered.dom and rendered.dom.count("<svg") == 2
    assert rendered.console == []
    render(page, proxy, tmp_path / "profile", screenshot=shot)
    assert page_requests(proxy) == []
    assert shot.stat().st_size > 10_000  # a picture, not a blank page


def test_the_checks_catch_a_page_that_fetches(tmp_path: Path, proxy: Proxy) -> None:
    page = tmp_path / "fetches.html"
    page.write_text(
        "<!DOCTYPE html><html><body><img src='http://example.invalid/x.png'>"
        "<script>console.error('boom')</script></body></html>"
    )
    rendered = render(page, proxy, tmp_path / "profile")
    assert any("boom" in line for line in rendered.console)
    assert any("example.invalid" in r for r in page_requests(proxy))


def test_the_watch_timeline_loads_with_no_console_message_and_no_request(
    tmp_path: Path, proxy: Proxy
) -> None:
    from .test_watch_run import watch
    from .test_watch_timeline import two_generations

    work = tmp_path / "work"
    two_generations(work)
    page = tmp_path / "timeline.html"
    watch(work, tmp_path / "state", "--html", str(page))
    rendered = render(page, proxy, tmp_path / "profile")
    assert "nvrx watch timeline" in rendered.dom and "<svg" in rendered.dom
    assert rendered.console == []
    assert page_requests(proxy) == []
