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
from datetime import UTC, datetime, timedelta
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


# Run inside a test copy of a page (its policy forbids scripts, so the copy drops it), on the
# page as the browser laid it out:
# - every place where something is wider than the box it sits in;
# - every word broken across lines (a run of letters and digits whose characters lie on more
#   than one line: "resta|rt"); a long path or id (`code.path`) may wrap anywhere, and is left
#   out;
# - every line of a table in text (`pre.table`: the FR analyser's) that wrapped, so that the
#   table lost its columns;
# - every two marks above a timeline's track that overlap, and every critical mark that is not
#   on top where it is drawn (a warning drawn over it hides it).
PAGE_CHECK = """<script>
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
const texts = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT, {acceptNode: (n) =>
  n.parentElement.closest("svg, script, style, code.path") ? NodeFilter.FILTER_REJECT
    : NodeFilter.FILTER_ACCEPT});
const range = document.createRange();
for (let n; (n = texts.nextNode());) {
  // A name with underscores (WORKLOAD_EXC, rank_primary) is one word: no break inside it.
  for (const m of n.data.matchAll(/[\\p{L}\\p{N}_]{2,}/gu)) {
    range.setStart(n, m.index);
    range.setEnd(n, m.index + m[0].length);
    const tops = [...range.getClientRects()].filter((r) => r.width > 0).map((r) => r.top);
    if (tops.length > 1 && Math.max(...tops) - Math.min(...tops) > 2)
      bad.push(`broken word: ${m[0]} in ${what(n.parentElement)}`);
  }
}
for (const pre of document.querySelectorAll("pre.table")) {
  let at = 0;
  for (const line of pre.textContent.split("\\n")) {
    const text = pre.firstChild;
    if (line.trim() && text && text.nodeType === Node.TEXT_NODE) {
      range.setStart(text, at);
      range.setEnd(text, at + line.length);
      const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
      if (tops.size > 1) bad.push(`a table's line wrapped: ${line.slice(0, 50)}`);
    }
    at += line.length + 1;
  }
}
const marks = [...document.querySelectorAll(".tl .marks > span")];
const boxes = marks.map((m) => m.getBoundingClientRect());
for (let i = 0; i < marks.length; i++)
  for (let j = i + 1; j < marks.length; j++) {
    const a = boxes[i], b = boxes[j];
    if (Math.min(a.right, b.right) - Math.max(a.left, b.left) > 0.5 &&
        Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 0.5)
      bad.push(`marks overlap: ${what(marks[i])} and ${what(marks[j])}`);
  }
for (const c of document.querySelectorAll(".tl .marks .sev-critical")) {
  c.scrollIntoView({block: "center", inline: "center"});
  const r = c.getBoundingClientRect();
  const top = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
  if (top === null || !c.contains(top)) bad.push(`critical mark covered: ${what(c)}`);
}
document.body.insertAdjacentHTML("beforeend",
  `<pre id="checked">${JSON.stringify(bad).replace(/</g, "&lt;")}</pre>`);
</script>"""


def page_faults(page: Path, proxy: Proxy, tmp_path: Path, width: int) -> list[str]:
    """What `PAGE_CHECK` finds on `page` at a window `width` px wide, every <details> opened;
    when it finds something, a screenshot is kept beside the copy for whoever reads the failure
    (only then: a render is a second of browser start-up)."""
    import json

    text = re.sub(r"<meta http-equiv='Content-Security-Policy'[^>]*>", "", page.read_text())
    text = text.replace("<details ", "<details open ").replace("</body>", PAGE_CHECK + "</body>")
    copy = tmp_path / f"{page.stem}-{width}.html"
    copy.write_text(text)
    rendered = render(copy, proxy, tmp_path / "profile", width=width)
    found = re.findall(r'<pre id="checked">(\[.*?\])</pre>', rendered.dom, re.S)
    assert found, rendered.dom[-2000:]
    result: list[str] = json.loads(found[-1].replace("&lt;", "<").replace("&amp;", "&"))
    if result:
        render(copy, proxy, tmp_path / "profile", screenshot=copy.with_suffix(".png"), width=width)
    return result


def pages(tmp_path: Path) -> dict[str, Path]:
    """Each page nvrx draws, on data that fills it: a campaign with a previous session to
    compare (long entries, changed cells, unscored and failing ones), the score page of the
    demo and of that campaign, a storm chain's timeline (restarts and findings crowded at its
    end), a stalled one's, and a chain of one minute."""
    from nvrx.inject.report import session_rows, write_html
    from nvrx.score.html import page as score_page
    from nvrx.score.report import summarise

    from .cli_runner import nvrx
    from .test_inject_report import session_with, verdict
    from .test_watch_watcher import cycle_file

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
    rows = session_rows(new.dir)
    verdicts = [r.verdict for r in rows]
    out["score-session"] = tmp_path / "score-session.html"
    out["score-session"].write_text(
        score_page([r.case for r in rows], verdicts, summarise(verdicts), "session")
    )
    chains = tmp_path / "chains"
    made = subprocess.run(
        [sys.executable, str(REPO / "examples" / "chains" / "make_chains.py"), str(chains)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    start = datetime.now(UTC) - timedelta(minutes=5)
    for i in range(4):  # a minute-long chain: three restarts 20 s apart
        at = start + timedelta(seconds=20 * i)
        cycle_file(chains / "minute", "905", i, at, at + timedelta(seconds=15))
    for name in ("storm", "stalled", "minute"):
        page = tmp_path / f"{name}.html"
        done = nvrx(
            "watch", "--platform", "none", "--work-dir", str(chains / name),
            "--state-dir", str(tmp_path / "state"), "--html", str(page),
        )  # fmt: skip
        assert page.is_file(), done.stderr
        out[name] = page
    return out


@pytest.mark.parametrize("width", [900, 1400])
def test_no_page_overflows_a_box_breaks_a_word_or_hides_a_mark(
    tmp_path: Path, proxy: Proxy, width: int
) -> None:
    found = {
        name: page_faults(page, proxy, tmp_path, width) for name, page in pages(tmp_path).items()
    }
    assert found == {name: [] for name in found}


def test_the_checks_catch_a_cell_too_narrow_for_its_text(tmp_path: Path, proxy: Proxy) -> None:
    page = tmp_path / "narrow.html"
    page.write_text(
        "<!DOCTYPE html><html><body><table><tr><td style='max-width:40px;overflow:hidden'>"
        "averyveryverylongunbreakableword</td></tr></table>"
        "<svg role='img' width='100' height='30' viewBox='0 0 100 30'><g class='cell'>"
        "<rect x='0' y='0' width='30' height='30'/><text x='2' y='20'>much too long</text></g>"
        "</svg></body></html>"
    )
    found = page_faults(page, proxy, tmp_path, 900)
    assert any("wider than its box: td" in f for f in found)
    assert any("text wider than its cell" in f for f in found)


def test_the_checks_catch_a_broken_word_a_wrapped_table_and_a_critical_mark_under_a_warning(
    tmp_path: Path, proxy: Proxy
) -> None:
    page = tmp_path / "crowded.html"
    page.write_text(
        "<!DOCTYPE html><html><body><table><tr><th style='width:30px;word-break:break-all'>"
        "restart</th><td style='width:30px;word-break:break-all'>unscored</td></tr></table>"
        "<p><code class='path'>/a/path/that/may/wrap/anywhere</code></p>"
        # A name broken at its underscore, every part of it whole ("WORKLOAD" / "_EXC").
        "<div style='font-family:monospace;width:9ch;padding:0;overflow-wrap:anywhere'>"
        "WORKLOAD_EXC</div>"
        "<div class='tl'><div class='marks' style='position:relative;width:300px;height:18px'>"
        "<span class='mark' style='position:absolute;left:100px'>"
        "<span class='sev-critical'>◆</span></span>"
        "<span class='mark' style='position:absolute;left:103px;background:#fff'>"
        "<span class='sev-warning'>▲</span></span>"
        "<span class='mark' style='position:absolute;left:200px'>↻</span></div></div>"
        "<pre class='table' style='width:120px;white-space:pre-wrap'>PGID | Process Group Desc | "
        "Op Type\n5    | DATA_PARALLEL     | all_reduce</pre></body></html>"
    )
    found = page_faults(page, proxy, tmp_path, 900)
    assert any(f.startswith("broken word: restart in th") for f in found), found
    assert any(f.startswith("broken word: unscored in td") for f in found), found
    assert any(f.startswith("broken word: WORKLOAD_EXC in div") for f in found), found
    assert not any("path" in f for f in found), found
    assert sum(f.startswith("marks overlap: ") for f in found) == 1, found
    assert any(f.startswith("critical mark covered: ") for f in found), found
    assert sum(f.startswith("a table's line wrapped: ") for f in found) == 2, found
