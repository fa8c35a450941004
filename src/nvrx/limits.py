"""Numbers read from text that nvrx did not write (logs, analyser output, dumps): no rank,
task, iteration or node count has more than `MAX_DIGITS` digits, and Python refuses to turn a
string of more than 4,300 digits into a number at all. A longer run of digits is text, not a
number (docs/reliability.md)."""

from __future__ import annotations

MAX_DIGITS = 9

# The default of `limits.max_input_bytes`: far above any real job log of one fault-injection
# experiment or any journal, far below what would hurt a login node.
DEFAULT_INPUT_LIMIT = 256 << 20
# Config and env files are read before the settings exist, so their cap is fixed.
CONFIG_FILE_LIMIT = 1 << 20


def small_int(digits: str) -> int | None:
    """`digits` (an optional sign, then 0-9) as a number, or None when it has more than
    MAX_DIGITS digits."""
    if len(digits.lstrip("+-")) > MAX_DIGITS:
        return None
    return int(digits)


# No job has more ranks (or srun tasks): a larger rank or task id read from a log is garbage,
# not a job, and every per-rank table an analyser keeps is bounded by it.
MAX_RANKS = 1 << 17


def as_rank(digits: str) -> int | None:
    """`digits` as a rank or task id, or None when it is not one (more than MAX_DIGITS digits,
    or MAX_RANKS or more)."""
    rank = small_int(digits)
    return rank if rank is not None and rank < MAX_RANKS else None
