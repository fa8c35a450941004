"""Running `nvrx ARGS` in this process: the same entry point (`nvrx.cli.main`) as the installed
command, with its own argv, environment, working directory and captured stdout/stderr, and its
exit code. A real process costs about half a second of start-up per call; the CLI tests make
hundreds of calls, so only the few tests about start-up and process behaviour run real ones
(tests/test_cli.py, tests/hostile/)."""

from __future__ import annotations

import contextlib
import functools
import io
import os
import subprocess
import sys
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from unittest import mock

from nvrx.config import ENV_NAMES


@functools.cache
def slurm_answers() -> bool:
    """Whether a Slurm controller answers here. `scontrol ping` makes one attempt and says so in
    milliseconds either way; a query (sinfo, squeue, scontrol show) retries the connection for
    the client's MessageTimeout (9 s with the local cluster's slurm.conf) when none answers."""
    try:
        proc = subprocess.run(
            ["scontrol", "ping"], capture_output=True, text=True, timeout=15, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def slurm_settings(where: Path) -> dict[str, str]:
    """The environment for a unit test's nvrx command that asks Slurm something on the side (a
    dry run's MaxArraySize and job-name checks): nothing when a controller answers, so it asks
    the real cluster; otherwise a `slurm.bin_dir` that holds no Slurm command, so it takes the
    path of a machine without Slurm (a note, at once) instead of retrying each query for
    `slurm.retry_deadline` (two minutes) while the controller is down."""
    return {} if slurm_answers() else {"NVRX_SLURM_BIN_DIR": str(where / "no-slurm-here")}


def clean_environ(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without any nvrx setting (`NVRX_*` or an upstream name such as TIME,
    ACCOUNT, POOL) the developer's shell may hold, plus `extra`."""
    base = {k: v for k, v in os.environ.items() if k not in ENV_NAMES and not k.startswith("NVRX_")}
    return {**base, **(extra or {})}


@contextlib.contextmanager
def _cwd(path: Path | None) -> Iterator[None]:
    before = os.getcwd()
    if path is not None:
        os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def nvrx(
    *args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`nvrx ARGS` in process, with exactly `env` as its environment (default: this one, without
    nvrx settings). An exception that escapes `main` is exit 1 with its traceback on stderr, as
    the interpreter would print it."""
    from nvrx.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    environ = clean_environ() if env is None else dict(env)
    with (
        mock.patch.dict(os.environ, environ, clear=True),
        mock.patch.object(sys, "argv", ["nvrx", *args]),
        _cwd(cwd),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            err.write(traceback.format_exc())
            code = 1
    return subprocess.CompletedProcess(["nvrx", *args], code, out.getvalue(), err.getvalue())
