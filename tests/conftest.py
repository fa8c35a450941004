"""Fixtures shared by the unit and the cluster tests."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvrx.chain.shape import ChainError, check_work_dir

REPO = Path(__file__).resolve().parents[1]
# A real session of the CPU fault workload on the local cluster, with its dumps and built-in
# analysis: docs/score.md's scoring demo.
SCORE_DEMO = REPO / "examples" / "score_demo" / "20261129_124154"
CPU_FAULT_DEMO = REPO / "examples" / "workloads" / "cpu_fault_demo"


def shared_base() -> Path:
    """Where tests put chain work dirs: a directory every node of the test cluster sees.

    nvrx refuses node-local work dirs (the system temp dirs), so neither pytest's tmp_path nor a
    checkout under /tmp will do. NVRX_TEST_SHARED_DIR overrides the default.
    """
    base = Path(os.environ.get("NVRX_TEST_SHARED_DIR") or Path.home() / ".cache" / "nvrx-tests")
    try:
        return check_work_dir(base)
    except ChainError as exc:
        raise pytest.UsageError(f"{exc} (set NVRX_TEST_SHARED_DIR)") from None


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    path = shared_base() / uuid.uuid4().hex[:10]
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)
