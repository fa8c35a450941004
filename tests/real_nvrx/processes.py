"""The processes of a run of NVRx's launcher, by PID, from /proc: a launcher's whole tree, and
every process that carries the run's token in its environment (torchelastic starts workers in
sessions of their own, so neither a process group nor the launcher's death ends them).

Standard library only: it runs under the project's Python and under the launcher's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

TOKEN_VAR = "NVRX_REAL_RUN_TOKEN"  # set in a run's launchers' environment, inherited by all


def _stat_fields(pid: int) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, ...


def parents() -> dict[int, int]:
    """Every live process's parent."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat_fields(int(entry.name))):
            found[int(entry.name)] = int(fields[1])
    return found


def tree(pid: int) -> list[int]:
    """PID and every process under it, parents first."""
    children: dict[int, list[int]] = {}
    for child, parent in parents().items():
        children.setdefault(parent, []).append(child)
    order, todo = [], [pid]
    while todo:
        current = todo.pop(0)
        order.append(current)
        todo.extend(children.get(current, []))
    return order


def kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def kill_tree(pid: int) -> None:
    """SIGKILL a launcher and every process under it: a node that dies. Twice, for a child
    started while the first pass read /proc."""
    for _ in range(2):
        kill(tree(pid))


def tagged(token: str) -> list[int]:
    """Live processes whose environment carries the run's token (zombies have none)."""
    needle = f"{TOKEN_VAR}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
    return found


def argv_of(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return ["?"]


def describe(pid: int) -> str:
    return f"{pid} {' '.join(argv_of(pid)).strip()[:120]}"


def left_behind(token: str, grace: float = 5.0) -> list[str]:
    """The run's processes still alive GRACE seconds after its launchers ended (orphans of a
    killed launcher, a worker that ignored its launcher's end), each then SIGKILLed."""
    deadline = time.monotonic() + grace
    while (alive := tagged(token)) and time.monotonic() < deadline:
        time.sleep(0.2)
    found = [describe(pid) for pid in alive]
    kill(alive)
    return found
