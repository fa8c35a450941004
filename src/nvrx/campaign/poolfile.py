"""A pool as the user names it: a named pool, a pool file (of the pools folder, or anywhere), or
the entries themselves. Reads the files; the entries are `campaign.pool`'s (pure)."""

from __future__ import annotations

from pathlib import Path

from nvrx.campaign.errors import PoolError
from nvrx.campaign.pool import ENTRY_RE, NAMED_POOLS, FaultType, parse_entry, split_pool
from nvrx.display import some_of
from nvrx.files import InputError, lexically_under, read_bounded, within_root


def pool_entries(source: str, pools_dir: Path | None = None) -> list[str]:
    """A pool given as a name (`default`, `n3_super`, `quick`, or a file of `pools_dir`: the
    `pools/` of upstream's scripts, `n3_super_8n_16n.pool`), a file (comments allowed) or the
    entries themselves (`GPU_SLEEP:1:5:2 SIGKILL:0:5:2`)."""
    text = source.strip()
    if text in NAMED_POOLS:
        return split_pool(NAMED_POOLS[text])
    path = Path(text).expanduser()
    if pools_dir is not None and "/" not in text and ":" not in text and text:
        named = pools_dir / text
        path = named if named.is_file() else path
    try:
        is_file = path.is_file()
    except OSError:  # an inline pool longer than a file name can be (ENAMETOOLONG)
        is_file = False
    if is_file:
        try:
            # A file of the pools folder (by name, or a registry's pool column) is read on the
            # folder's behalf: it may not lead out of it (files.within_root).
            if pools_dir is not None and lexically_under(path, pools_dir):
                path = within_root(path, pools_dir, "pool file")
            data, _ = read_bounded(path, "pool file")
            return _file_entries(data.decode("utf-8"), path)
        except InputError as exc:
            raise PoolError(str(exc)) from None
        except UnicodeDecodeError as exc:
            raise PoolError(f"pool file {path} is not UTF-8 text (byte {exc.start})") from None
    words = split_pool(text)
    if "/" in text or (len(words) == 1 and ":" not in words[0]):
        names = some_of([*NAMED_POOLS, *(pool_files(pools_dir))])
        shown = repr(source) if len(source) <= 80 else repr(source[:77]) + "..."
        raise PoolError(f"pool {shown} is not a pool name ({names}), a file or entries")
    return words


def _file_entries(text: str, path: Path) -> list[str]:
    """A pool file's entries, each checked where it stands: a bad one is named by line and
    position, never quoted (a file's content is not echoed: it may be anything)."""
    entries: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        for k, entry in enumerate(split_pool(line), start=1):
            try:
                parse_entry(entry)
            except PoolError:
                m = ENTRY_RE.match(entry.strip())
                if m is None:
                    why = "is not FAULT_TYPE:RANK:ITER:NODES"
                elif m.group(1).upper() not in FaultType.__members__:
                    known = ", ".join(f.value for f in FaultType)
                    why = f"names no known fault type (known: {known})"
                else:
                    why = "has a number out of range"
                raise PoolError(f"pool file {path} line {number}: entry {k} {why}") from None
            entries.append(entry)
    return entries


def pool_files(pools_dir: Path | None) -> list[str]:
    if pools_dir is None or not pools_dir.is_dir():
        return []
    return sorted(p.name for p in pools_dir.iterdir() if p.is_file())
