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
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nvrx.inject.report import write_html

from .loopback import LoopbackListener
from .test_inject_html import demo_copy

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

if CHROMIUM is None and os.environ.get("NVRX_REQUIRE_BROWSER") == "1":
    raise RuntimeError("NVRX_REQUIRE_BROWSER=1 but no chromium on PATH")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt install chromium)")


class Proxy(LoopbackListener):
    """A TCP listener that counts the connections a browser opens to it (its only proxy)."""

    def __init__(self) -> None:
        self.requests: list[str] = []  # the first line of each: CONNECT host:port, GET url
        super().__init__()

    def handle(self, conn: socket.socket) -> None:  # nothing is served: a request is seen
        conn.settimeout(2)
        try:
            head = conn.recv(4096).split(b"\r\n", 1)[0]
        except OSError:
            head = b"?"
        self.requests.append(head.decode("latin-1"))


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


def render(
    page: Path,
    proxy: Proxy,
    profile: Path,
    screenshot: Path | None = None,
    width: int = 1200,
) -> Rendered:
    assert CHROMIUM is not None
    argv = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
        f"--proxy-server=http://127.0.0.1:{proxy.port}", "--proxy-bypass-list=<-loopback>",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-extensions", "--no-pings", "--disable-default-apps",
        "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,MediaRouter",
        f"--window-size={width},900", "--hide-scrollbars",
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
    assert "Fault-injection campaign" in rendered.dom and rendered.dom.count('<svg role="img"') == 2
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
    from .test_watch_timeline import two_generations
    from .test_watch_watcher import watch

    work = tmp_path / "work"
    two_generations(work)
    page = tmp_path / "timeline.html"
    watch(work, tmp_path / "state", "--html", str(page))
    rendered = render(page, proxy, tmp_path / "profile")
    assert "nvrx watch timeline" in rendered.dom and 'class="track"' in rendered.dom
    assert rendered.console == []
    assert page_requests(proxy) == []


# Run inside a test copy of a page (its policy forbids scripts, so the copy drops it): every
# place where something is wider than the box it sits in, as the browser laid it out.
OVERFLOW_CHECK = """<script>
const bad = [], W = document.documentElement.clientWidth;
if (document.documentElement.scrollWidth > W + 1)
  bad.push(`page ${document.documentElement.scrollWidth}px wide in a ${W}px window`);
const what = (el) => `${el.tagName.toLowerCase()}.${el.className.baseVal ?? el.className}: ` +
  el.textContent.trim().slice(0, 50);
for (const el of document.querySelectorAll(
    "td, th, summary, li, p, h1, h2, figcaption, .bar, .names div, .legend span"))
  if (el.scrollWidth > el.clientWidth + 1) bad.push(`wider than its box: ${what(el)}`);
for (const svg of document.querySelectorAll("svg[role=img]")) {
  if (svg.getBoundingClientRect().right > W + 1) bad.push("a picture past the window");
  const vb = svg.viewBox.baseVal;
  for (const t of svg.querySelectorAll("text")) {
    const b = t.getBBox();
    if (b.x < vb.x - 0.5 || b.x + b.width > vb.x + vb.width + 0.5)
      bad.push(`text outside its picture: ${what(t)}`);
  }
  for (const g of svg.querySelectorAll("g.cell")) {
    const r = g.querySelector("rect").getBBox(), t = g.querySelector("text").getBBox();
    if (t.width > 0 && (t.x < r.x || t.x + t.width > r.x + r.width))
      bad.push(`text wider than its cell: ${what(g)}`);
  }
}
for (const s of document.querySelectorAll(".tl .axis span, .tl .marks span")) {
  const p = s.parentElement.getBoundingClientRect(), b = s.getBoundingClientRect();
  if (b.left < p.left - 1 || b.right > p.right + 1) bad.push(`outside the track: ${what(s)}`);
}
document.body.insertAdjacentHTML("beforeend",
  `<pre id="overflow">${JSON.stringify(bad).replace(/</g, "&lt;")}</pre>`);
</script>"""


def overflows(page: Path, proxy: Proxy, tmp_path: Path, width: int) -> list[str]:
    """What overflows on `page` at a window `width` px wide, every <details> opened; when
    something does, a screenshot of it is kept beside the copy for whoever reads the failure
    (only then: a render is a second of browser start-up)."""
    import json

    text = re.sub(r"<meta http-equiv='Content-Security-Policy'[^>]*>", "", page.read_text())
    text = text.replace("<details ", "<details open ").replace(
        "</body>", OVERFLOW_CHECK + "</body>"
    )
    copy = tmp_path / f"{page.stem}-{width}.html"
    copy.write_text(text)
    rendered = render(copy, proxy, tmp_path / "profile", width=width)
    found = re.findall(r'<pre id="overflow">(\[.*?\])</pre>', rendered.dom, re.S)
    assert found, rendered.dom[-2000:]
    result: list[str] = json.loads(found[-1].replace("&lt;", "<").replace("&amp;", "&"))
    if result:
        render(copy, proxy, tmp_path / "profile", screenshot=copy.with_suffix(".png"), width=width)
    return result


def pages(tmp_path: Path) -> dict[str, Path]:
    """Each page nvrx draws, on data that fills it: a campaign with a previous session to
    compare (long entries, changed cells), the score page, a storm chain's timeline."""
    from nvrx.inject.report import write_html

    from .cli_runner import nvrx
    from .test_inject_report import session_with, verdict

    base = tmp_path / "campaigns"
    base.mkdir()
    session_with(base, "20260101_000000", [
        ("GPU_SLEEP:2:3:2", verdict()), ("SEGFAULT:1:3:2", verdict(fr_rank_correct="no_dumps")),
        ("WORKLOAD_EXC:3:3:16", verdict()), ("LOCK_GIL:5:10:4", verdict()),
    ])  # fmt: skip
    new = session_with(base, "20260102_000000", [
        ("GPU_SLEEP:2:3:2", verdict(rank_any="false")),
        ("SEGFAULT:1:3:2", verdict(fr_rank_correct="rank")),
        ("WORKLOAD_EXC:3:3:16", verdict(fr_rank_correct="node")), ("LOCK_GIL:5:10:4", None),
        ("ASYNC_EXC:127:10:128", verdict(restart_correct="false")),
    ])  # fmt: skip
    out = {"report": write_html(new.dir), "demo": write_html(demo_copy(tmp_path))}
    score = tmp_path / "score.html"
    done = nvrx(
        "score", str(demo_copy(tmp_path / "again")), "--judge", "rules", "--html", str(score)
    )
    assert done.returncode == 0, done.stderr
    out["score"] = score
    chains = tmp_path / "chains"
    made = subprocess.run(
        [sys.executable, str(REPO / "examples" / "chains" / "make_chains.py"), str(chains)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    for name in ("storm", "stalled"):
        page = tmp_path / f"{name}.html"
        done = nvrx(
            "watch", "--platform", "none", "--work-dir", str(chains / name),
            "--state-dir", str(tmp_path / "state"), "--html", str(page),
        )  # fmt: skip
        assert page.is_file(), done.stderr
        out[name] = page
    return out


@pytest.mark.parametrize("width", [900, 1400])
def test_no_page_has_anything_wider_than_its_box(tmp_path: Path, proxy: Proxy, width: int) -> None:
    found = {
        name: overflows(page, proxy, tmp_path, width) for name, page in pages(tmp_path).items()
    }
    assert found == {name: [] for name in found}


def test_the_overflow_check_catches_a_cell_too_narrow_for_its_text(
    tmp_path: Path, proxy: Proxy
) -> None:
    page = tmp_path / "narrow.html"
    page.write_text(
        "<!DOCTYPE html><html><body><table><tr><td style='max-width:40px;overflow:hidden'>"
        "averyveryverylongunbreakableword</td></tr></table>"
        "<svg role='img' width='100' height='30' viewBox='0 0 100 30'><g class='cell'>"
        "<rect x='0' y='0' width='30' height='30'/><text x='2' y='20'>much too long</text></g>"
        "</svg></body></html>"
    )
    found = overflows(page, proxy, tmp_path, 900)
    assert any("wider than its box: td" in f for f in found)
    assert any("text wider than its cell" in f for f in found)
