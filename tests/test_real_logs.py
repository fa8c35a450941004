"""The built-in log analyser against what real training jobs printed (`tests/data/real_logs/`,
labelled under docs/log-attribution-policy.md)."""

from __future__ import annotations

from typing import get_args

import pytest

from nvrx.analyze.logattr import CATEGORIES, FaultClass, attribute_log

from .real_logs import (
    CHECK_SHARE,
    CORPUS,
    FORMATS,
    TUNED_THREADS,
    LabelledLog,
    load_corpus,
    part_of,
    thread_of,
)

CASES = load_corpus()


def _known_misses() -> frozenset[str]:
    """The cases the analyser does not agree with yet (`known_misses.txt`, one name a line, `#`
    comments). Each is a strict xfail: one it comes to agree with fails until it is taken off
    the list, so the list only ever shrinks."""
    text = (CORPUS / "known_misses.txt").read_text(encoding="utf-8")
    return frozenset(n for line in text.splitlines() if (n := line.split("#")[0].strip()))


KNOWN_MISSES = _known_misses()


def test_the_corpus_covers_failures_negatives_and_every_format() -> None:
    failures = [c for c in CASES if c.category != "none"]
    negatives = [c for c in CASES if c.category == "none"]
    assert len(failures) >= 60 and len(negatives) >= 10, (len(failures), len(negatives))
    assert {f for c in CASES for f in c.formats} == FORMATS
    assert {c.category for c in CASES} == {
        "software", "resource", "hardware", "infrastructure", "hang", "none"
    }  # fmt: skip
    assert len({c.source for c in CASES}) >= 40  # many threads, not a few long ones
    assert {c.name for c in CASES} >= KNOWN_MISSES


def test_every_fault_class_has_a_category() -> None:
    assert set(CATEGORIES) == set(get_args(FaultClass))


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            c,
            id=f"{c.part}:{c.name}",  # `pytest -k check:` runs the held-out part alone
            marks=[pytest.mark.xfail(strict=True, reason="a known miss")]
            if c.name in KNOWN_MISSES
            else [],
        )
        for c in CASES
    ],
)
def test_the_analyser_agrees_with_the_label(case: LabelledLog) -> None:
    wrong = case.disagreements(attribute_log(case.text))
    assert not wrong, f"{case.name} ({case.source}): " + "; ".join(wrong)


def test_a_cases_part_is_its_threads_and_never_chosen_by_hand() -> None:
    # The threads tuned on before the split are tune; any other thread's part is its hash's,
    # the same for every case and anchor of it, about CHECK_SHARE of them check.
    for case in CASES:
        assert case.part == part_of(case.source)
    a = "https://github.com/o/r/issues/7"
    assert (
        part_of(a) == part_of(a + "#issuecomment-1") == part_of("https://GitHub.com/o/r/issues/7/")
    )
    fresh = [part_of(f"https://github.com/o/r/issues/{i}", frozenset()) for i in range(4000)]
    assert abs(fresh.count("check") / len(fresh) - CHECK_SHARE) < 0.03
    tuned = TUNED_THREADS.read_text().splitlines()
    assert all(c.part == "tune" for c in CASES if thread_of(c.source) in tuned)
    assert {c.part for c in CASES} == {"tune", "check"}


def test_the_list_of_threads_tuned_before_the_split_never_grows() -> None:
    # Adding a thread to it would move that thread's cases from check to tune.
    import hashlib

    names = [line for line in TUNED_THREADS.read_text().splitlines() if not line.startswith("#")]
    assert len(names) == 86
    assert hashlib.sha256("\n".join(names).encode()).hexdigest()[:16] == FROZEN_DIGEST


FROZEN_DIGEST = "57e4ecca1389ff75"
