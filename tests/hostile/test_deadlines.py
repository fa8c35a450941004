"""Deadlines that slipped: a sink, heartbeat or PagerDuty server that drips
its answer or never finishes its headers, a key file that drips, a cache or torn file that is a
FIFO. Each exchange has one total deadline kept by the clock; every open is non-blocking. Each
test failed (by the harness's wall budget) before its fix."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvrx import files

from ..loopback import LoopbackListener
from .harness import run_nvrx

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 1.0  # watch.http_timeout in these tests: the pass must end soon after it
WALL = 15.0  # far below what a drip would take, far above a deadline kept


class Dripper(LoopbackListener):
    """A server that accepts every connection and sends one byte of an HTTP answer every
    `every` seconds, never finishing its headers (each read comes well within any per-read
    timeout)."""

    def __init__(self, every: float = 0.3) -> None:
        self.every = every
        super().__init__(threaded=True)
        self.url = f"http://127.0.0.1:{self.port}/hook"

    def handle(self, conn: socket.socket) -> None:
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"x" * 100_000:
            if self.stopping:
                return
            try:
                conn.sendall(bytes([byte]))
            except OSError:
                return
            time.sleep(self.every)


def storm_chain(tmp_path: Path) -> Path:
    made = subprocess.run(
        [sys.executable, str(REPO / "examples" / "chains" / "make_chains.py"), str(tmp_path / "ex")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return tmp_path / "ex" / "storm"


@pytest.fixture
def dripper() -> Iterator[Dripper]:
    d = Dripper()
    yield d
    d.close()


@pytest.mark.parametrize("sink", ["webhook_url", "heartbeat_url", "pd_url"])
def test_a_sink_that_drips_its_headers_holds_the_pass_no_longer_than_its_deadline(
    tmp_path: Path, home: Path, dripper: Dripper, sink: str
) -> None:
    work = storm_chain(tmp_path)  # critical findings: something to alert about
    settings = [f"watch.{sink}={dripper.url}", f"watch.http_timeout={TIMEOUT}"]
    if sink == "pd_url":
        settings.append("watch.pd_routing_key=R0123456789abcdef0123456789abcdef")
    started = time.monotonic()
    proc = run_nvrx(
        "watch", "--platform", "none", "--work-dir", str(work), "--state-dir", str(tmp_path / "s"),
        *(a for s in settings for a in ("--set", s)),
        cwd=home, wall=WALL,
    )  # fmt: skip
    took = time.monotonic() - started
    assert proc.code == 1, proc.describe()
    assert dripper.connections, "the sink was never called"
    assert took < TIMEOUT + 5, proc.describe()  # it failed within its deadline, and says so
    assert f"no whole answer within {TIMEOUT:g} s" in proc.output, proc.describe()


def test_a_key_file_that_drips_fails_within_its_deadline(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The forked child inherits a shorter deadline: the same rule, proved in a second, not five.
    monkeypatch.setattr(files, "KEY_SECONDS", 1.0)
    work = storm_chain(tmp_path)
    fifo = tmp_path / "pd-key"
    os.mkfifo(fifo)
    stop = threading.Event()

    def drip() -> None:
        with open(fifo, "wb", buffering=0) as w, contextlib.suppress(BrokenPipeError):
            while not stop.is_set():  # until the reader gives up (a broken pipe) or the test ends
                w.write(b"k")
                time.sleep(0.2)

    writer = threading.Thread(target=drip, daemon=True)
    writer.start()
    try:
        proc = run_nvrx(
            "watch", "--platform", "none", "--work-dir", str(work),
            "--state-dir", str(tmp_path / "s"), "--set", f"watch.pd_routing_key_file={fifo}",
            cwd=home, wall=WALL,
        )  # fmt: skip
    finally:
        stop.set()
    # The pass goes on (the key is read when there is something to page about) and says so, as
    # a warning on stderr.
    assert proc.code == 1, proc.describe()
    warning = "nvrx: warning: sink failed: pagerduty: PagerDuty key file"
    assert warning in proc.stderr, proc.describe()
    assert "did not end within 1 s" in proc.stderr, proc.describe()


@pytest.mark.parametrize("fleet", [False, True], ids=["one-chain", "fleet"])
def test_every_sink_of_a_pass_together_keeps_one_deadline(
    tmp_path: Path, home: Path, dripper: Dripper, fleet: bool
) -> None:
    # Each exchange kept its own deadline, but a pass makes one per finding and sink: with a
    # webhook and PagerDuty that drip, four findings held a pass for eight deadlines.
    work = storm_chain(tmp_path)
    where = (
        ["--fleet", str(work), str(work.parent / "stalled")] if fleet else ["--work-dir", str(work)]
    )
    settings = [
        f"watch.webhook_url={dripper.url}", f"watch.pd_url={dripper.url}",
        "watch.pd_routing_key=R0123456789abcdef0123456789abcdef",
        f"watch.http_timeout={TIMEOUT}", f"watch.sinks_timeout={TIMEOUT}",
    ]  # fmt: skip
    started = time.monotonic()
    proc = run_nvrx(
        "watch", "--platform", "none", *where, "--state-dir", str(tmp_path / "s"),
        *(a for s in settings for a in ("--set", s)), cwd=home, wall=WALL,
    )  # fmt: skip
    took = time.monotonic() - started
    assert dripper.connections, "the sinks were never called"
    assert took < 2 * TIMEOUT + 0.5, proc.describe()  # one deadline, not one per exchange
    assert "watch.sinks_timeout" in proc.output, proc.describe()  # what was not sent, and why
