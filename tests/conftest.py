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


# Tests that share one outside service run in one xdist worker, one after another: the cluster
# tests (their jobs and nodes are the cluster's; some stop and start its controller) and the
# tests against the one local judge server (a single small model: concurrent calls only slow
# each other past their deadlines), and the scenarios of NVRx's real launcher (one at a time on
# a machine, under their lock: a second worker would only wait for it). Every other test runs wherever a worker is free (`-n auto`,
# pyproject.toml). The groups are chosen by path here, not by xdist's `xdist_group` mark, which
# pytest 9 no longer passes on to xdist's scheduler.
SERVICE_GROUPS = {"tests/slurm/": "slurm", "tests/test_logsage.py": "llm",
                  "tests/test_score_server.py": "llm",
                  "tests/real_nvrx/": "real-nvrx"}  # fmt: skip


def service_group(nodeid: str) -> str | None:
    return next((g for prefix, g in SERVICE_GROUPS.items() if nodeid.startswith(prefix)), None)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class ServiceGroups(LoadScopeScheduling):  # type: ignore[misc]
        """One scope per service group; every other test is a scope of its own."""

        def _split_scope(self, nodeid: str) -> str:
            return service_group(nodeid) or nodeid

    return ServiceGroups(config, log)
