"""The built-in log analyser against what real training jobs printed (`tests/data/real_logs/`,
labelled under docs/log-attribution-policy.md)."""

from __future__ import annotations

from typing import get_args

import pytest

from nvrx.analyze.logattr import CATEGORIES, FaultClass, attribute_log

from .real_logs import CORPUS, FORMATS, LabelledLog, load_corpus

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
            id=c.name,
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
