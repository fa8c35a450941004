"""Writing files that other processes read while we write them (reports, state, manifests)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, text: str, *, mode: int | None = None, durable: bool = False) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path`: a reader (or
    a crash) sees the old file or the new one, never half of either. The directory is created
    when missing; the temporary name is unique, so concurrent writers (login nodes sharing a
    home) never share one.

    `mode`: the file's permissions; None gives what the umask allows a new file (0666 & ~umask).
    `durable`: fsync the file and its directory, so the rename survives a power loss.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.fchmod(fd, mode)  # mkstemp makes 0600
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
