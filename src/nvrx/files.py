"""Reading every file nvrx is given, and writing files that other processes read while we write
them (reports, state, manifests).

Reading: one bounded reader, `read_bounded`, for every file or text input of every subcommand.
An input may be anything a user can name: a 50 GB log, `/dev/zero`, a FIFO, a symlink to
either. None of them may take a login node's memory or hang a pass, so a read stops one byte
past its cap and says which file was too large and which setting raises the cap.

Writing: `write_atomic` for nvrx's own files, `write_output` for a file the user named (a
stream is written, never renamed over), and `refuse_overwriting` before either of the latter.

One module because every read and write of a file nvrx is given passes here (one cap, one
directory rule, one way to open what may be a FIFO or a link), and the reader and the writers
share what this process has read: an output may not replace any file a reader opened.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import select
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from nvrx.limits import DEFAULT_INPUT_LIMIT

LIMIT_SETTING = "limits.max_input_bytes"

_input_limit = DEFAULT_INPUT_LIMIT
STREAM_SECONDS = 60.0  # the longest a FIFO or terminal input may take to end


class InputError(Exception):
    """An input that cannot be read: missing, unreadable, or over its cap. One line, naming the
    file; the command stops with exit 2. `reason` is the line without the file, `errno` the
    OS error's when there was one."""

    exit_code = 2  # bad input

    def __init__(self, what: str, path: Path | str, reason: str, errno: int | None = None) -> None:
        super().__init__(f"{what} {path}: {reason}")
        self.reason = reason
        self.errno = errno


class InputTooLarge(InputError):
    """An input over its cap; `size` is its size when that was known before reading (a regular
    file: nothing of it was read)."""

    size: int | None = None


_allowed_roots: tuple[str, ...] = ()

# Every regular file this process has read (device, inode → the path it was read by and its
# ctime): one process runs one command, and no output it is asked for may replace any of them,
# whichever reader read it (the config and env files, a pool, the previous session's journal).
# The ctime tells a file from a later one that was given its inode number after it was deleted.
# The watcher's cycle, cache and state files are not kept: it checks them by name (a pass reads
# 100,000, and a loop of passes must not grow this).
_read: dict[tuple[int, int], tuple[str, int]] = {}


def _saw(path: Path | str, st: os.stat_result) -> None:
    # Every read passes here (a report reads three files an experiment): the path is kept as
    # given and resolved only when an output is checked against it, which is rare.
    if stat.S_ISREG(st.st_mode):
        _read[(st.st_dev, st.st_ino)] = (os.path.abspath(path), st.st_ctime_ns)


def read_by_this_command(path: Path | str) -> str | None:
    """The file `path` names (links followed) when this process has read it: the path it was
    read by; None otherwise."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    seen = _read.get((st.st_dev, st.st_ino))
    if seen is None:
        return None
    where, ctime = seen
    # The same file: unchanged since, or changed but still at the path it was read by.
    same_path = os.path.realpath(where) == os.path.realpath(path)
    return where if ctime == st.st_ctime_ns or same_path else None


def set_allowed_roots(roots: tuple[str, ...]) -> None:
    """Directories outside a session, chain or pools folder that its symlinks may lead into
    (`limits.allowed_roots`): set once, when the command's settings are loaded."""
    global _allowed_roots
    _allowed_roots = tuple(os.path.realpath(os.path.expanduser(r)) for r in roots)


def _under(real: str, base: str) -> bool:
    return real == base or real.startswith(base.rstrip("/") + "/")


def lexically_under(path: Path | str, root: Path | str) -> bool:
    """`path`, as written (no link followed), names something inside `root`: a file nvrx would
    read on the directory's behalf, whose real path `within_root` then checks."""
    return _under(os.path.abspath(path), os.path.abspath(root))


def within_root(path: Path | str, root: Path | str, what: str) -> Path:
    """`path`, resolved, when it stays inside `root` (a session, a chain's work dir, a pools
    folder) or a directory `limits.allowed_roots` names: a file nvrx reads on the directory's
    behalf. A symlink that leads anywhere else (another user's key file, `/proc/self/environ`)
    is an InputError naming where it leads, never its content."""
    real = os.path.realpath(path)
    for base in (os.path.realpath(root), *_allowed_roots):
        if _under(real, base):
            return Path(real)
    raise InputError(
        what, path, f"leads out of {root} (to {real}): refusing to read it "
        "(limits.allowed_roots admits a directory)",
    )  # fmt: skip


def set_input_limit(limit: int) -> None:
    """The cap of every later `read_bounded` without an explicit `limit`: set once, when the
    command's settings are loaded (one process runs one command with one configuration)."""
    global _input_limit
    _input_limit = limit


def read_bounded(
    path: Path | str,
    what: str,
    *,
    limit: int | None = None,
    follow_symlinks: bool = True,
    regular_only: bool = False,
    setting: str | None = LIMIT_SETTING,
    deadline: float | None = None,
    remember: bool = True,
) -> tuple[bytes, os.stat_result]:
    """At most `limit` bytes of `path` (default: `limits.max_input_bytes`), and the fstat of the
    inode actually read (a file may be replaced between listing and opening it).

    Raises InputError naming `what`, the path and, for an input over the cap, the cap and the
    `setting` that raises it. A FIFO never hangs the open; a character device such as
    `/dev/zero` is read like a file, so it ends at the cap. With `follow_symlinks=False` a
    symlink is refused (`InputError` whose `errno` is ELOOP); with `regular_only`, anything but
    a regular file is. `remember=False`: not kept among the files this command read (the
    watcher's cycle files, which it protects by their globs).
    """
    cap = _input_limit if limit is None else limit
    fd, st = _open(path, what, follow_symlinks=follow_symlinks, regular_only=regular_only)
    if remember:
        _saw(path, st)
    regular = stat.S_ISREG(st.st_mode)
    # A FIFO or a terminal is read against the clock, without blocking: its writer may drip
    # for ever (a FIFO with no writer reads as ended at once).
    seconds = deadline or STREAM_SECONDS
    until = None if regular else time.monotonic() + seconds
    try:
        if regular:
            if st.st_size > cap:  # over the cap already: nothing of it is read
                too_large = _too_large(what, path, cap, setting)
                too_large.size = st.st_size
                raise too_large
            first = os.read(fd, st.st_size + 1)
            if len(first) == st.st_size:  # the whole file in one read (a watch pass: 100,000)
                return first, st
            # It grew or shrank since the fstat: read on, as any other input.
            if len(first) > cap:
                raise _too_large(what, path, cap, setting)
        if until is not None:
            os.set_blocking(fd, False)
        chunks: list[bytes] = [first] if regular else []
        total = len(chunks[0]) if chunks else 0
        want = 1 << 20 if regular else 65536
        while True:
            if until is not None and time.monotonic() > until:
                raise InputError(what, path, f"did not end within {seconds:g} s")
            try:
                chunk = os.read(fd, max(min(want, cap + 1 - total), 1))
            except BlockingIOError:  # nothing yet: wait for it, never past the deadline
                assert until is not None
                select.select([fd], [], [], max(until - time.monotonic(), 0))
                continue
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:
                raise _too_large(what, path, cap, setting)
            want = 1 << 20
        return b"".join(chunks), st
    except OSError as exc:
        raise _os_error(what, path, exc) from None
    finally:
        os.close(fd)


def read_line_blocks(
    path: Path | str,
    what: str,
    *,
    max_line: int,
    block: int = 1 << 20,
    limit: int | None = None,
    setting: str | None = LIMIT_SETTING,
) -> Iterator[str]:
    """The text of `path` as it is read, in blocks of whole lines (about `block` bytes each; the
    last may lack its newline), each block decoded like `decode_text`. Memory stays at a block
    whatever the file's size: a line longer than `max_line` bytes keeps its first `max_line`
    bytes and the rest is read past, so a 100 MB line costs no more than a short one.

    A regular file is read to its end, whatever its size (it has one, and reading it is linear);
    anything else (a FIFO, `/dev/zero`, a terminal) ends at `limit` (default:
    `limits.max_input_bytes`) with InputTooLarge, as in `read_bounded`.
    """
    fd, st = _open(path, what, follow_symlinks=True, regular_only=False)
    _saw(path, st)
    cap = None if stat.S_ISREG(st.st_mode) else (_input_limit if limit is None else limit)
    try:
        total = 0
        head = b""  # the start of a line that has no newline yet (at most max_line bytes)
        skipping = False  # inside a line past its first max_line bytes
        while chunk := os.read(fd, block):
            total += len(chunk)
            if cap is not None and total > cap:
                raise _too_large(what, path, cap, setting)
            if skipping:
                newline = chunk.find(b"\n")
                if newline < 0:
                    continue
                chunk, skipping = chunk[newline + 1 :], False
            last = chunk.rfind(b"\n")
            if last < 0:
                room = max_line - len(head)
                if len(chunk) > room:  # a line too long: its start is kept, the rest read past
                    yield decode_text(head + chunk[:room] + b"\n")
                    head, skipping = b"", True
                else:
                    head += chunk
                continue
            whole = head + chunk[: last + 1]
            head = chunk[last + 1 :]
            if len(head) > max_line:
                whole += head[:max_line] + b"\n"
                head, skipping = b"", True
            yield decode_text(whole)
        if head:
            yield decode_text(head)
    except OSError as exc:
        raise _os_error(what, path, exc) from None
    finally:
        os.close(fd)


_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _open(
    path: Path | str, what: str, *, follow_symlinks: bool, regular_only: bool
) -> tuple[int, os.stat_result]:
    """An open, blocking file descriptor of `path` and its fstat; InputError when it cannot be
    opened or is a directory (or not a regular file, with `regular_only`)."""
    flags = _OPEN_FLAGS if follow_symlinks else _OPEN_FLAGS | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise _os_error(what, path, exc) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InputError(what, path, "is a directory")
        if regular_only and not stat.S_ISREG(st.st_mode):
            raise InputError(what, path, "not a regular file")
        # Blocking from here on: a FIFO whose writer is slow is read as it comes (the open,
        # which would wait for a writer that may never come, is what O_NONBLOCK was for). A
        # regular file never blocks, whatever the flag says: two system calls saved a file.
        if not stat.S_ISREG(st.st_mode):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _too_large(what: str, path: Path | str, cap: int, setting: str | None) -> InputTooLarge:
    how = f"raise it with {setting}" if setting else "fixed"
    return InputTooLarge(what, path, f"larger than {cap} bytes (the cap; {how})")


KEY_FILE_LIMIT = 64 << 10
KEY_SECONDS = 5.0


def read_key_file(path: Path | str, what: str) -> tuple[str, int]:
    """A secret kept in a file (an API or routing key): its text, stripped, and the file's mode
    (callers warn when others can read it). InputError, naming the file and never its contents,
    when it cannot be read, is not UTF-8 or is empty."""
    # A key may come through a pipe (`<(pass show ...)`): it is small, and arrives at once.
    data, st = read_bounded(path, what, limit=KEY_FILE_LIMIT, setting=None, deadline=KEY_SECONDS)
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise InputError(what, path, "not UTF-8 text") from None
    if not text:
        raise InputError(what, path, "is empty")
    return text, st.st_mode


def read_text(path: Path | str, what: str, *, limit: int | None = None) -> str:
    """A text input: UTF-8, else latin-1 (which never fails: logs carry binary junk from crashing
    ranks)."""
    return decode_text(read_bounded(path, what, limit=limit)[0])


def file_sha256(path: Path | str, what: str) -> str:
    """The sha256 of a regular file's bytes, read in blocks: memory stays at a block whatever its
    size (a job log). InputError when it cannot be read or is not a regular file (a FIFO)."""
    fd, st = _open(path, what, follow_symlinks=True, regular_only=True)
    _saw(path, st)
    digest = hashlib.sha256()
    try:
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
    except OSError as exc:
        raise _os_error(what, path, exc) from None
    finally:
        os.close(fd)
    return digest.hexdigest()


def read_tail(path: Path | str, what: str, limit: int) -> str:
    """The last `limit` bytes of a text input at most, from the start of a line: what a page
    shows of a log of any size (where it failed). InputError when it cannot be read."""
    fd, st = _open(path, what, follow_symlinks=True, regular_only=True)
    _saw(path, st)
    try:
        start = max(0, st.st_size - limit)
        os.lseek(fd, start, os.SEEK_SET)
        chunks, total = [], 0
        while total < limit:
            chunk = os.read(fd, min(65536, limit - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise _os_error(what, path, exc) from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if start and b"\n" in data:  # the first line was cut: drop it
        data = data.split(b"\n", 1)[1]
    return decode_text(data)


def decode_text(data: bytes) -> str:
    """UTF-8, else latin-1 (which never fails)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _os_error(what: str, path: Path | str, exc: OSError) -> InputError:
    if exc.errno == errno.ENOENT:
        reason = "no such file"
    elif exc.errno == errno.ELOOP:
        reason = "a symlink (not followed)"
    elif exc.errno == errno.EISDIR:
        reason = "is a directory"
    else:
        reason = exc.strerror or str(exc)
    return InputError(what, path, reason, exc.errno)


# Opened for appending, never through a symlink (whoever can write the directory must not make
# nvrx append to another user's file) and never blocking on a FIFO put in its place.
_APPEND_FLAGS = (
    os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
)


def open_append(path: Path | str, what: str, *, read: bool = False) -> int:
    """A blocking descriptor of the regular file `path`, opened (created) to append to, also to
    read with `read`. InputError, nothing written, for a symlink, a FIFO, a directory or a file
    that cannot be opened: every append nvrx makes (journals, tracking files, watch.log)."""
    flags = (_APPEND_FLAGS & ~os.O_WRONLY) | os.O_RDWR if read else _APPEND_FLAGS
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise InputError(
                f"the {what}", path, "is not a regular file (a symlink, directory or FIFO): "
                "refusing to write to it; move it away",
            ) from None  # fmt: skip
        raise InputError(f"the {what}", path, f"cannot be written: {exc.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise InputError(
            f"the {what}", path, "is not a regular file: refusing to write to it; move it away"
        )
    if read:
        _saw(path, st)
    os.set_blocking(fd, True)
    return fd


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


def refuse_overwriting(output: Path, inputs: list[Path], what: str) -> None:
    """An output must never replace one of the command's inputs (a `--junit` pointed at the
    journal it scores, or at the `--config` file it read): InputError when `output` is one of
    `inputs` or of the files this command read (the same file, by path or by inode), or lies
    inside an input that is a directory."""
    out = Path(os.path.realpath(output))
    for source in inputs:
        real = Path(os.path.realpath(source))
        inside = real == out or (real.is_dir() and out.is_relative_to(real))
        with contextlib.suppress(OSError):  # a hard link to an input is that input too
            inside = inside or (out.exists() and os.path.samefile(out, real))
        if inside:
            raise InputError(what, output, f"refusing to write over an input ({source})")
    if (read := read_by_this_command(output)) is not None:
        raise InputError(
            what, output, f"refusing to write over an input ({read}, read by this command)"
        )


# Names that stand for a descriptor this process already holds: written through it, so the
# text lands where the shell sent that stream (a rename would replace the name itself, and a
# fresh open of /proc/self/fd/1 would start writing at the file's first byte).
_STREAM_NAMES = {"/dev/stdout": 1, "/dev/stderr": 2}
_FD_PREFIXES = ("/dev/fd/", "/proc/self/fd/")


def _descriptor(path: Path) -> int | None:
    text = os.path.abspath(path)
    if text in _STREAM_NAMES:
        return _STREAM_NAMES[text]
    for prefix in _FD_PREFIXES:
        number = text.removeprefix(prefix)
        if number != text and number.isascii() and number.isdigit() and len(number) < 8:
            return int(number)
    return None


def system_path(path: Path | str) -> bool:
    """`path` (as written, made absolute) lies under /dev or /proc: the system's names, which
    nvrx writes through (a stream) or refuses, never creates or renames over."""
    absolute = os.path.abspath(path)
    return _under(absolute, "/dev") or _under(absolute, "/proc")


def write_output(path: Path, text: str, what: str) -> None:
    """A file the user named for an output (`--junit`, `--html`, `--markdown`): a regular file
    (or a new one) is replaced atomically (`write_atomic`); a stream is written, never renamed
    over: `/dev/stdout`, `/dev/stderr` and `/dev/fd/N` through the descriptor this process
    holds, a FIFO or a device (`/dev/null`, a terminal) opened as it is, without creating or
    truncating anything. A FIFO that nobody reads is refused at once (InputError), never waited
    for; so are a directory and a link of the system's (under /dev or /proc)."""
    fd = _descriptor(path)
    if fd is not None:
        _write_all(fd, text, what, path)
        return
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _os_error(what, path, exc) from None
    special = st is not None and not stat.S_ISREG(st.st_mode)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise InputError(what, path, "is a directory")
    if not special:
        # /dev/core, /dev/fd: the system's links, never a report's place.
        if system_path(path) and os.path.islink(path):
            raise InputError(what, path, "a link of the system's: refusing to replace it")
        write_atomic(path, text)
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise InputError(what, path, "a FIFO that nobody reads: nothing written") from None
        raise _os_error(what, path, exc) from None
    try:
        os.set_blocking(fd, True)
        _write_all(fd, text, what, path)
    finally:
        os.close(fd)


def _write_all(fd: int, text: str, what: str, path: Path) -> None:
    import sys

    for stream in (sys.stdout, sys.stderr):  # what was printed before comes first
        with contextlib.suppress(Exception):
            stream.flush()
    data = text.encode("utf-8")
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        raise _os_error(what, path, exc) from None
