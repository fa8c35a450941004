"""What analysers and the judge read of a log the same way: the two restart decisions' words,
the ground truth blinded out of a line (the injector's markers, the experiment's directory name,
the injected exception's class), and the ranks a text names. Neutral ground: `analyze` reads
logs with it and never imports `score`, where the ground truth (the restart table) lives.
"""

from __future__ import annotations

import re

from nvrx.limits import small_int

RESTART = "RESTART IMMEDIATE"
STOP = "STOP - DONT RESTART IMMEDIATE"


# --- blinding: the ground truth out of what analysers and the judge read ------------------------

# Ground truth in text: Megatron's marker, the stale `[MEGATRON_FAULT]` marker, and the
# injector's own logger lines.
# Also the injector's frames in tracebacks (`.../shared_utils/inject_fault.py`).
_MARKER = re.compile(
    r"FAULT INJECTION|\[MEGATRON_FAULT\]|nvidia_resiliency_ext[./]shared_utils[./]inject_fault"
)
# The exception class the injector raises names the fault as plainly as the marker: replaced,
# not dropped, so a traceback keeps its shape (`raise <exception>`).
_INJECTED_CLASS = re.compile(r"\bInjectedException\b")
BLINDED_CLASS = "<exception>"


# An experiment directory's name spells its ground truth (`n2_SEGFAULT_r1_i3`), and logs quote it
# in paths (the FR dump path, --output): blinded like the markers.
# Any fault's name, not only today's: the blinding must not depend on the list of faults.
_EXPERIMENT_NAME = re.compile(r"n\d+_[A-Za-z]+(?:_[A-Za-z]+)*_r\d+_i\d+(?:_dup\d+)?")
BLINDED_NAME = "<experiment>"


def blind(text: str) -> str:
    """Ground truth removed from any text an analyser or the judge reads: marker lines dropped,
    experiment directory names replaced."""
    text = _EXPERIMENT_NAME.sub(BLINDED_NAME, strip_markers(text))
    return _INJECTED_CLASS.sub(BLINDED_CLASS, text)


def blind_line(line: str) -> str | None:
    """`blind` of one line: None for a ground-truth line (dropped), else the line with
    experiment names and the injected class replaced."""
    if _MARKER.search(line) is not None:
        return None
    return _INJECTED_CLASS.sub(BLINDED_CLASS, _EXPERIMENT_NAME.sub(BLINDED_NAME, line))


# Lower-case words one of which every line that `blind` drops holds: a reader that looks only at
# lines holding some word of its own (logscan's gate) must look at these too, to drop them.
MARKER_WORDS = ("fault injection", "megatron_fault", "inject_fault")


def has_marker(text: str) -> bool:
    return _MARKER.search(text) is not None


def strip_markers(text: str) -> str:
    """The log with every ground-truth line removed (what analysers may read)."""
    return "".join(line for line in text.splitlines(keepends=True) if _MARKER.search(line) is None)


# --- ranks a text names --------------------------------------------------------------------------

_INT = re.compile(r"\d+")


def numbers(found: list[str]) -> list[int]:
    """The numbers among digit runs (a run too long for a rank is text)."""
    return [n for n in map(small_int, found) if n is not None]


# `rank 3`, `rank=3`, `[rank3]:` (PyTorch's prefix), `ranks 3, 5 and 7`, `ranks [3, 5]`,
# `global_rank 3`; not `local rank 1` (a device index) and not the 8 of `rank 5/8`.
_NOT_LOCAL = r"(?<!local )(?<!local_)(?<!local-)"
_RANK_LIST = re.compile(
    _NOT_LOCAL + r"\b(?:global[_ ])?ranks?\s*(?:[:=#]\s*|\(\s*|\[\s*)?"
    r"(\d+(?:\s*(?:,|\band\b|&)\s*\d+)*)",
    re.IGNORECASE,
)
_RANK_RANGE = re.compile(
    _NOT_LOCAL + r"\branks?\s*\[?\s*(\d+)\s*(?:-|–|to|\.\.)\s*(\d+)", re.IGNORECASE
)


def rank_mentions(text: str) -> frozenset[int]:
    """Ranks a text names (forms above, and ranges `ranks 4-7`). Bare numbers are not ranks:
    iterations, exit codes and sizes are numbers too."""
    found: set[int] = set()
    for match in _RANK_LIST.finditer(text):
        found.update(numbers(_INT.findall(match.group(1))))
    for match in _RANK_RANGE.finditer(text):
        low, high = small_int(match.group(1)), small_int(match.group(2))
        if low is not None and high is not None and low <= high and high - low < 4096:
            found.update(range(low, high + 1))
    return frozenset(found)
