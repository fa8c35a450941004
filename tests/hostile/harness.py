"""Run `nvrx` (or one pure function) in a forked child of the pytest process, under a memory,
CPU and wall-time budget.

The parent has imported nvrx already, so a run costs a fork, not a new interpreter. The child
puts itself in its own process group, limits its address space (RLIMIT_AS: its size at the fork
plus the budget) and its CPU time (RLIMIT_CPU), gets a fresh environment, working directory and
standard streams (stdin from the given bytes or /dev/null, stdout and stderr to anonymous
temporary files, rebound as sys.stdout/sys.stderr, which nvrx's rich Consoles write to), and
calls `nvrx.cli.main()`. The parent waits on a pidfd with the wall deadline (select, no sleeping
loop) and kills the child's process group when it passes. A budget that is overrun, or an
exception that escapes nvrx, fails the test and names the budget or shows the traceback.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import resource
import select
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, Unpack

import pytest

import nvrx.cli

# Exit codes the child uses for what nvrx itself never exits with.
EXIT_MEMORY = 98  # a MemoryError escaped: the memory budget was hit
EXIT_CRASH = 99  # any other exception escaped: a traceback

DEFAULT_MEMORY_MB = 1536
DEFAULT_CPU_SECONDS = 20
DEFAULT_WALL_SECONDS = 30.0

# The environment of every run: nothing of the developer's shell (no NVRX_*, JUDGE_*, keys),
# only what finding tools needs. HOME is always the test's own directory.
_KEEP = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME")


@dataclass(frozen=True)
class Result:
    args: tuple[str, ...]
    code: int
    stdout_bytes: bytes
    stderr_bytes: bytes
    wall: float

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", errors="backslashreplace")

    @property
    def stderr(self) -> str:
        return self.stderr_bytes.decode("utf-8", errors="backslashreplace")

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def describe(self) -> str:
        shown = " ".join(a if len(a) < 200 else a[:200] + "..." for a in self.args)
        return (
            f"{shown!r}: exit {self.code} in {self.wall:.2f} s\n"
            f"--- stdout ---\n{self.stdout[-2500:]}\n--- stderr ---\n{self.stderr[-4000:]}"
        )


def base_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: os.environ[k] for k in _KEEP if k in os.environ}
    env["HOME"] = str(home)
    env.update(extra or {})
    return env


def _vm_size_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _child(
    body: Callable[[], int],
    argv: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
    fds: tuple[int, int, int],
    memory_mb: int,
    cpu_seconds: int,
) -> int:
    os.setpgid(0, 0)  # its own process group: an overrun kills whatever it started, too
    limit = _vm_size_bytes() + memory_mb * (1 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    # The streams a real interpreter would have (same encoding and error handler), on the new
    # descriptors.
    real = sys.__stdout__
    encoding = getattr(real, "encoding", None) or "utf-8"
    errors = getattr(real, "errors", None) or "strict"
    # (Never closed: the child ends in os._exit.)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "rb", closefd=False), encoding=encoding)
    sys.stdout = io.TextIOWrapper(
        io.FileIO(1, "wb", closefd=False), encoding=encoding, errors=errors, write_through=True
    )
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "wb", closefd=False),
        encoding=encoding,
        errors="backslashreplace",
        write_through=True,
    )
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["nvrx", *argv]
    # Click names the program after `python -m <package of __main__>`: here that is pytest.
    main_module = sys.modules.get("__main__")
    if main_module is not None:
        main_module.__package__ = None
    try:
        code = body()
    except MemoryError:
        traceback.print_exc()
        code = EXIT_MEMORY
    except BaseException:
        traceback.print_exc()
        code = EXIT_CRASH
    _flush_std()
    return code


def _cli_main() -> int:
    try:
        nvrx.cli.main()
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    return 0


class ChildOptions(TypedDict, total=False):
    """What a child runs with, besides its body: `env` added to `base_env`, its home (default:
    its cwd), its stdin, and its budgets (default: DEFAULT_MEMORY_MB, DEFAULT_CPU_SECONDS,
    DEFAULT_WALL_SECONDS)."""

    env: Mapping[str, str] | None
    home: Path | None
    stdin: bytes | None
    memory_mb: int
    cpu_seconds: int
    wall: float


def run_in_child(
    body: Callable[[], int],
    *,
    label: Sequence[str],
    cwd: Path,
    argv: Sequence[str] = (),
    **options: Unpack[ChildOptions],
) -> Result:
    """`body()` in a forked child under the budgets; its return value is the exit code."""
    stdin = options.get("stdin")
    memory_mb = options.get("memory_mb", DEFAULT_MEMORY_MB)
    cpu_seconds = options.get("cpu_seconds", DEFAULT_CPU_SECONDS)
    wall = options.get("wall", DEFAULT_WALL_SECONDS)
    full_env = base_env(options.get("home") or cwd, options.get("env"))
    _flush_std()
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.TemporaryFile() as inp,
    ):
        if stdin:
            inp.write(stdin)
            inp.flush()
            inp.seek(0)
        in_fd = inp.fileno() if stdin else os.open(os.devnull, os.O_RDONLY)
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:  # the child never returns into pytest
            code = EXIT_CRASH
            try:
                fds = (in_fd, out.fileno(), err.fileno())
                code = _child(body, argv, cwd, full_env, fds, memory_mb, cpu_seconds)
            finally:
                os._exit(code)
        if not stdin:
            os.close(in_fd)
        pidfd = os.pidfd_open(pid)
        try:
            ready, _, _ = select.select([pidfd], [], [], wall)
            overrun = not ready
            if overrun:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
        finally:
            os.close(pidfd)
        elapsed = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        stdout_bytes, stderr_bytes = out.read(), err.read()
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
    result = Result(tuple(label), code, stdout_bytes, stderr_bytes, elapsed)
    if overrun:
        pytest.fail(f"over the wall-time budget of {wall:g} s: {result.describe()}", False)
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status))
        why = (
            f"the CPU budget of {cpu_seconds} s"
            if sig in (signal.SIGXCPU, signal.SIGKILL)
            else f"signal {sig.name}"
        )
        pytest.fail(f"killed by {why}: {result.describe()}", False)
    if code == EXIT_MEMORY:
        pytest.fail(f"over the memory budget of {memory_mb} MiB: {result.describe()}", False)
    if code == EXIT_CRASH:
        pytest.fail(f"an exception escaped: {result.describe()}", False)
    return result


def run_nvrx(*args: str, cwd: Path, **options: Unpack[ChildOptions]) -> Result:
    """`nvrx ARGS` in a forked child (see the module). `env` is added to `base_env`: the
    child's environment holds nothing else."""
    return run_in_child(_cli_main, label=("nvrx", *args), argv=args, cwd=cwd, **options)


def call_in_child(
    fn: Callable[[], object],
    expected: tuple[type[BaseException], ...],
    *,
    label: str,
    cwd: Path,
    memory_mb: int = DEFAULT_MEMORY_MB,
    cpu_seconds: int = 10,
    wall: float = 10.0,
) -> Result:
    """One pure function under the budgets: exit 0 when it returns, 2 (its message on stderr)
    when it raises one of `expected`; anything else fails the test."""

    def body() -> int:
        try:
            fn()
        except expected as exc:
            print(str(exc), file=sys.stderr)
            return 2
        return 0

    return run_in_child(
        body, label=(label,), cwd=cwd, memory_mb=memory_mb, cpu_seconds=cpu_seconds, wall=wall
    )


# --- assertions -----------------------------------------------------------------------------


def assert_no_traceback(result: Result, *, stdout: bool = True) -> None:
    """No traceback nor logging error on stderr, nor on stdout unless `stdout` is False (for a
    command whose answer quotes its input, which may hold tracebacks: a job log)."""
    for text in (result.stdout, result.stderr) if stdout else (result.stderr,):
        assert "Traceback (most recent call last)" not in text, result.describe()
        assert "--- Logging error ---" not in text, result.describe()


def assert_bad_input(result: Result, *needles: str, prefix: str = "nvrx: error:") -> str:
    """Exit 2, exactly one non-empty stderr line starting with `prefix` and holding every
    needle, no traceback anywhere. Returns the line."""
    assert_no_traceback(result)
    assert result.code == 2, result.describe()
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), result.describe()
    line = lines[0]
    assert line.startswith(prefix), result.describe()
    for needle in needles:
        assert needle in line, f"{needle!r} is not in the error line: {result.describe()}"
    return line


def assert_ok_or_one_line_error(result: Result, ok: Sequence[int] = (0,)) -> None:
    """What any input must give: one of the `ok` exit codes, or exit 2 with one error line; never
    a traceback."""
    assert_no_traceback(result)
    if result.code == 2:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("nvrx: "), result.describe()
    else:
        assert result.code in ok, result.describe()


def leaked(secret: str, text: str, window: int = 8) -> str | None:
    """The first piece of `secret` at least `window` characters long that appears in `text`."""
    for start in range(len(secret) - window + 1):
        piece = secret[start : start + window]
        if piece in text:
            return piece
    return None


# --- "nothing changed" ----------------------------------------------------------------------

TreeState = dict[str, tuple[str, int]]


def tree_state(root: Path) -> TreeState:
    """Every entry under `root`, itself included: relative path → (the sha256 of a file's bytes,
    a link's target, or the kind; the mtime in ns)."""
    state: TreeState = {}
    for path in [root, *sorted(root.rglob("*"))]:
        st = path.lstat()
        if path.is_symlink():
            digest = "link:" + os.readlink(path)
        elif path.is_dir():
            digest = "dir"
        elif path.is_file():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            digest = "special"
        state[str(path.relative_to(root))] = (digest, st.st_mtime_ns)
    return state


def assert_unchanged(before: TreeState, root: Path) -> None:
    after = tree_state(root)
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    assert not (added or removed or changed), (
        f"{root} changed: added {added}, removed {removed}, changed {changed}"
    )


def every_file_text(root: Path, exclude: Sequence[Path] = ()) -> dict[Path, str]:
    """Every regular file under `root` (not following links), decoded leniently."""
    skip = [p.resolve() for p in exclude]
    out: dict[Path, str] = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        if any(path.resolve() == s or s in path.resolve().parents for s in skip):
            continue
        out[path] = path.read_bytes().decode("utf-8", errors="replace")
    return out
