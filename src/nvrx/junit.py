"""JUnit XML, the one way every `--junit FILE` writes it (`score`, `report`, `watch`).

A testcase fails where the command's exit code says 1 (something is wrong) and errors where it
says 3 (could not judge): a CI system that reads the file agrees with the one that reads the
exit code (docs/output-contract.md).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from nvrx.display import printable

Outcome = Literal["passed", "failure", "error", "skipped"]


@dataclass(frozen=True)
class TestCase:
    classname: str
    name: str
    outcome: Outcome = "passed"
    message: str = ""  # the failure's, error's or skip's one line
    text: str = ""  # the failure's or error's body; for a passed case, its system-out
    kind: str = ""  # the failure's or error's `type`
    time: float = 0.0


def junit_xml(suite: str, properties: Mapping[str, str], cases: Sequence[TestCase]) -> str:
    """One `<testsuite>` with its counts, properties first (as the schema wants)."""
    # Text from outside through display.printable: XML 1.0 cannot hold most control
    # characters at all, and a CI page shows the rest raw.
    root = ET.Element("testsuite", name=suite)
    props = ET.SubElement(root, "properties")
    for key, value in properties.items():
        ET.SubElement(props, "property", name=key, value=printable(value))
    counts = {"tests": len(cases), "failures": 0, "errors": 0, "skipped": 0}
    for case in cases:
        element = ET.SubElement(
            root, "testcase", classname=printable(case.classname), name=printable(case.name)
        )
        element.set("time", f"{case.time:.3f}")
        if case.outcome == "skipped":
            counts["skipped"] += 1
            ET.SubElement(element, "skipped", message=printable(case.message))
        elif case.outcome in ("failure", "error"):
            counts["failures" if case.outcome == "failure" else "errors"] += 1
            child = ET.SubElement(
                element, case.outcome, message=printable(case.message), type=case.kind
            )
            child.text = printable(case.text, lines=True)
        elif case.text:
            ET.SubElement(element, "system-out").text = printable(case.text, lines=True)
    for key, count in counts.items():
        root.set(key, str(count))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
