"""The scenario runner's promise that no process of a run outlives it, checked without the
real launcher: a launcher's worker lives in a session of its own, so ending the launcher's
process group or the launcher alone leaves it running."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from .processes import TOKEN_VAR, kill_tree, left_behind, tagged, tree

# A stand-in "launcher": starts a "worker" in a new session, prints its pid, then waits.
LAUNCHER = """
import subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                          start_new_session=True)
print(worker.pid, flush=True)
time.sleep(60)
"""


def start(token: str) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, TOKEN_VAR: token}
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER], env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def gone(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_killing_a_launcher_tree_ends_its_worker_in_another_session() -> None:
    proc, worker = start(uuid.uuid4().hex)
    assert worker in tree(proc.pid)
    kill_tree(proc.pid)
    proc.wait(timeout=10)
    assert gone(worker)


def test_a_worker_orphaned_by_its_launcher_is_found_left_behind_and_ended() -> None:
    token = uuid.uuid4().hex
    proc, worker = start(token)
    proc.kill()  # the launcher only: its worker is reparented and runs on
    proc.wait(timeout=10)
    assert tagged(token) == [worker]

    found = left_behind(token, grace=0.5)

    assert [line.split()[0] for line in found] == [str(worker)]
    assert gone(worker)
    assert tagged(token) == []
