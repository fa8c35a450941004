"""Slurm hostlist expressions (`n[001-004,007],gpu[1-2]`) as pure functions.

Same results as `scontrol show hostnames` / `scontrol show hostlist` for the forms Slurm prints,
without a subprocess: cycle-info files and squeue rows carry compressed lists, and detectors
intersect them many times per pass.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterable

from nvrx.slurm.errors import SlurmParseError

_BRACKET_RE = re.compile(r"\[([^\[\]]*)\]")
_DIGITS = "0123456789"
# A hostlist is at most a few thousand nodes (the largest clusters have about 12,000); refuse
# absurd ranges instead of allocating them: 48 cycle files naming a million hosts each would
# take gigabytes.
MAX_EXPANDED_HOSTS = 16_384


def _split_top_level(expr: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(expr):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise SlurmParseError(f"nested '[' in hostlist {expr!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise SlurmParseError(f"unbalanced ']' in hostlist {expr!r}")
        elif ch == "," and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    if depth != 0:
        raise SlurmParseError(f"unbalanced '[' in hostlist {expr!r}")
    parts.append(expr[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_ranges(body: str, expr: str) -> list[str]:
    """`001-004,007` → ['001', '002', '003', '004', '007'], keeping zero padding."""
    out: list[str] = []
    for item in body.split(","):
        item = item.strip()
        if not item:
            raise SlurmParseError(f"empty range in hostlist {expr!r}")
        lo_s, sep, hi_s = item.partition("-")
        if not lo_s.isdigit() or (sep and not hi_s.isdigit()):
            raise SlurmParseError(f"bad range {item!r} in hostlist {expr!r}")
        if not sep:
            out.append(lo_s)
            continue
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise SlurmParseError(f"descending range {item!r} in hostlist {expr!r}")
        if hi - lo + 1 + len(out) > MAX_EXPANDED_HOSTS:
            raise SlurmParseError(f"range {item!r} in hostlist {expr!r} is too large")
        numbers = map(str, range(lo, hi + 1))
        # Only a padded range needs zfill; str() of the rest is already the name (C speed).
        width = len(lo_s)
        out.extend(numbers if width <= len(str(lo)) else (n.zfill(width) for n in numbers))
    return out


def expand(expr: str) -> list[str]:
    """Expand a hostlist expression into host names, in the order written.

    >>> expand("n[001-003,007],gpu[1-2]")
    ['n001', 'n002', 'n003', 'n007', 'gpu1', 'gpu2']

    Several bracket groups in one name (`r[1-2]n[1-2]`) expand as a cartesian product.
    An empty string expands to an empty list (cycle-info `standby_nodes` is "" without spares).
    """
    hosts: list[str] = []
    for part in _split_top_level(expr.strip()):
        pieces = _BRACKET_RE.split(part)
        # pieces alternates literal, bracket body, literal, ...
        literals = pieces[0::2]
        if any("[" in lit or "]" in lit for lit in literals):
            raise SlurmParseError(f"malformed brackets in hostlist {expr!r}")
        choices = [_expand_ranges(body, expr) for body in pieces[1::2]]
        if len(choices) == 1:  # the common `n[1-64]` form: one comprehension, no product
            head, tail = literals
            if len(hosts) + len(choices[0]) > MAX_EXPANDED_HOSTS:
                raise SlurmParseError(f"hostlist {expr!r} is too large")
            hosts.extend([head + value + tail for value in choices[0]])
            continue
        for combo in itertools.product(*choices):
            name = literals[0]
            for value, literal in zip(combo, literals[1:], strict=True):
                name += value + literal
            hosts.append(name)
            if len(hosts) > MAX_EXPANDED_HOSTS:
                raise SlurmParseError(f"hostlist {expr!r} is too large")
    return hosts


def _format_run(lo: int, hi: int, width: int) -> str:
    return str(lo).zfill(width) if lo == hi else f"{str(lo).zfill(width)}-{str(hi).zfill(width)}"


def compress(hosts: Iterable[str]) -> str:
    """Compress host names into a hostlist expression (sorted, duplicates dropped).

    >>> compress(["n3", "n1", "n2", "gpu01", "gpu02", "login"])
    'gpu[01-02],login,n[1-3]'

    Zero padding is kept: numbers are grouped by prefix and by padded width, so `n01` and `n1`
    never merge into one range. A tuple is remembered: a watch pass names the same few node sets
    (a cycle's, shared by all its restarts) again and again.
    """
    if isinstance(hosts, tuple):
        return _compress_tuple(hosts)
    return _compress(hosts)


def _compress(hosts: Iterable[str]) -> str:
    groups: dict[tuple[str, int], set[int]] = {}
    plain: set[str] = set()
    for host in hosts:
        host = host.strip()
        # String methods rather than a regex per name: a pass compresses millions of names.
        prefix = host.rstrip(_DIGITS)
        if len(prefix) == len(host):
            if host:
                plain.add(host)
            continue
        digits = host[len(prefix) :]
        # Padded numbers (leading zero) keep their width; natural numbers use width 0, which also
        # fits a padded group's numbers that happen to fill the width (n100 beside n099).
        width = len(digits) if digits[0] == "0" and len(digits) > 1 else 0
        key = (prefix, width)
        numbers = groups.get(key)
        if numbers is None:
            numbers = groups[key] = set()
        numbers.add(int(digits))

    # Fold natural numbers that exactly fill a padded group's width into that group.
    for (prefix, width), numbers in list(groups.items()):
        if width == 0:
            continue
        natural = groups.get((prefix, 0))
        if natural:
            fitting = {n for n in natural if len(str(n)) == width}
            numbers |= fitting
            natural -= fitting
            if not natural:
                del groups[(prefix, 0)]

    items: list[tuple[str, str]] = [(h, h) for h in plain]
    for (prefix, width), numbers in groups.items():
        ordered = sorted(numbers)
        runs = _runs(ordered)
        if len(runs) == 1 and runs[0][0] == runs[0][1]:
            text = prefix + str(runs[0][0]).zfill(width)
        else:
            text = prefix + "[" + ",".join(_format_run(lo, hi, width) for lo, hi in runs) + "]"
        items.append((prefix + str(ordered[0]).zfill(width), text))
    return ",".join(text for _, text in sorted(items))


def _runs(ordered: list[int]) -> list[tuple[int, int]]:
    """Runs of consecutive numbers in a sorted list without duplicates."""
    if not ordered:
        return []
    lo, hi = ordered[0], ordered[-1]
    if hi - lo + 1 == len(ordered):  # one run, the usual allocation: no walk
        return [(lo, hi)]
    runs: list[tuple[int, int]] = []
    start = prev = lo
    for n in itertools.islice(ordered, 1, None):
        if n != prev + 1:
            runs.append((start, prev))
            start = n
        prev = n
    runs.append((start, prev))
    return runs


@functools.lru_cache(maxsize=512)
def _compress_tuple(hosts: tuple[str, ...]) -> str:
    return _compress(hosts)
