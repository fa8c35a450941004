"""Fixtures for tests against the real local Slurm cluster (deploy/local-slurm/up).

These tests are skipped when no cluster answers, unless NVRX_REQUIRE_SLURM=1 (set by .ci/run),
which turns a missing cluster into a failure: CI must never pass by skipping them.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nvrx.config import SlurmSettings
from nvrx.slurm import QueueRow, Slurm

REPO = Path(__file__).resolve().parents[2]
LOCAL_SLURM = REPO / "deploy" / "local-slurm"


def _cluster_answers() -> bool:
    # `scontrol ping` answers at once either way; a query (sinfo) retries the connection for
    # the client's MessageTimeout when no controller answers.
    from ..cli_runner import slurm_answers

    if not slurm_answers():
        return False
    try:
        proc = subprocess.run(
            ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=15, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and bool(proc.stdout.strip())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    slurm_items = [item for item in items if here in Path(str(item.fspath)).parents]
    for item in slurm_items:
        item.add_marker(pytest.mark.slurm)
    if not slurm_items or _cluster_answers():
        return
    if os.environ.get("NVRX_REQUIRE_SLURM") == "1":
        raise pytest.UsageError(
            "NVRX_REQUIRE_SLURM=1 but the local Slurm cluster does not answer "
            "(run deploy/local-slurm/up)"
        )
    skip = pytest.mark.skip(reason="no local Slurm cluster (run deploy/local-slurm/up)")
    for item in slurm_items:
        item.add_marker(skip)


@pytest.fixture
def slurm() -> Slurm:
    return Slurm(SlurmSettings(command_timeout=20, retry_deadline=60, retry_max_backoff=2))


@pytest.fixture
def job_name(slurm: Slurm) -> Iterator[str]:
    """A unique job name; every job of that name is cancelled after the test."""
    name = f"nvrx-test-{uuid.uuid4().hex[:8]}"
    yield name
    subprocess.run(
        ["scancel", f"--name={name}", f"--user={Slurm.current_user()}"],
        capture_output=True,
        timeout=30,
        check=False,
    )


def wait_for(
    probe: Callable[[], Any], *, timeout: float = 180.0, interval: float = 0.5, what: str = ""
) -> Any:
    """Poll `probe` until it returns something truthy (and return that); fail on timeout.

    Deadlines are generous: the cluster shares this machine's cores with the unit tests, which
    run beside the cluster tests (xdist), and a deadline only bounds a hang, it never slows a
    test that passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what or probe}")
        time.sleep(interval)


def local_slurm(*args: str) -> None:
    subprocess.run(
        [str(LOCAL_SLURM / args[0]), *args[1:]],
        check=True,
        timeout=120,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


@pytest.fixture(autouse=True)
def _job_output_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sbatch writes slurm-N.out into the submit directory: keep it out of the checkout."""
    monkeypatch.chdir(tmp_path)


def live(rows: list[QueueRow]) -> list[QueueRow]:
    """The rows Slurm still runs or queues."""
    return [r for r in rows if r.state.is_live]


def cycle_info(work: Path, generation: str, cycle: int) -> dict[str, Any] | None:
    """A chain generation's cycle-info file of `cycle` (attempt 0), None until it is readable."""
    path = work / "nvrx" / generation / "cycle_infos" / f"cycle_info.{generation}.0.{cycle}"
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data
