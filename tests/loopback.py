"""TCP peers on 127.0.0.1 for tests that need one which misbehaves on purpose: a listener that
hands each connection to `handle` (a proxy that only counts requests, a server that drips), a
port nothing listens on (refused), and one that accepts nothing (a connect that times out)."""

from __future__ import annotations

import socket
import threading


class LoopbackListener:
    """Accepts until closed and hands each connection to `handle`, in the accepting thread or,
    with `threaded`, in a thread of its own (a handler that takes its time)."""

    def __init__(self, *, threaded: bool = False) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port: int = self.sock.getsockname()[1]
        self.connections = 0
        self._threaded = threaded
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._serve, daemon=True)]
        self._threads[0].start()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            if self._threaded:
                t = threading.Thread(target=self._run, args=(conn,), daemon=True)
                t.start()
                self._threads.append(t)
            else:
                self._run(conn)

    def _run(self, conn: socket.socket) -> None:
        with conn:
            self.handle(conn)

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        self.sock.close()


def closed_port() -> int:
    """A loopback port nothing listens on: a connection to it is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class NotAccepting:
    """A loopback port whose listener accepts nothing and whose queue is full: the kernel drops
    further connection attempts, so a client's connect waits until its own timeout (a host
    that drops packets)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=0)
        self.port: int = self.sock.getsockname()[1]
        self._fillers: list[socket.socket] = []
        for _ in range(3):  # a backlog of 0 still queues one or two
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", self.port))  # in progress: never waited for
            self._fillers.append(filler)

    def __enter__(self) -> NotAccepting:
        return self

    def __exit__(self, *exc: object) -> None:
        for filler in self._fillers:
            filler.close()
        self.sock.close()
