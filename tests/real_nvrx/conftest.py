"""Fixtures for the tests that run NVRx's own ft_launcher (deploy/real-nvrx/install).

They are skipped when `$NVRX_FT_VENV/bin/ft_launcher` (default venv /var/lib/nvrx-ft/venv) is
not installed, unless NVRX_REQUIRE_REAL_NVRX=1 (set by .ci/run), which turns a missing launcher
into a failure: CI must never pass by skipping them.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .harness import missing_launcher, real_launcher, required


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    ours = [
        item
        for item in items
        if here in Path(str(item.fspath)).parents
        and "ft_launcher" in getattr(item, "fixturenames", ())
    ]
    why = missing_launcher()
    if not ours or why is None:
        return
    if required():
        raise pytest.UsageError(f"NVRX_REQUIRE_REAL_NVRX=1 but {why}")
    for item in ours:
        item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture
def ft_launcher() -> Path:
    return real_launcher()


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """A short directory for one scenario: the launcher's Unix sockets live in its tmp/, and
    their paths may not exceed 107 bytes (pytest's tmp_path can be longer)."""
    path = Path(tempfile.mkdtemp(prefix="nr-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
