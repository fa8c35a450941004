"""The rehearsal's training worker (examples/rehearsal/worker.py) under either launcher: it
faults in cycle 0 only, and knows its cycle from what each launcher gives it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

WORKER = Path(__file__).resolve().parents[1] / "examples" / "rehearsal" / "worker.py"
RECORDED = Path(__file__).resolve().parent / "data" / "real-nvrx" / "restart-after-exception"


def worker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rehearsal_worker", WORKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_rehearsal_launchers_cycle_is_taken_as_it_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVRX_CYCLE", "2")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    assert worker().current_cycle() == 2


def test_under_nvrx_launcher_the_cycle_info_file_or_the_restart_count_says_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cycle-info file NVRx's launcher wrote for cycle 1 (recorded), behind its link.
    monkeypatch.delenv("NVRX_CYCLE", raising=False)
    recorded = json.loads((RECORDED / "cycle_infos" / "cycle_info.7300.0.1").read_text())
    (tmp_path / "cycle_info.7300.0.1").write_text(json.dumps(recorded))
    (tmp_path / "cycle_info.7300.current").symlink_to("cycle_info.7300.0.1")
    monkeypatch.setenv("NVRX_CURRENT_CYCLE_INFO", str(tmp_path / "cycle_info.7300.current"))
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")  # a spare promoted in cycle 1
    assert worker().current_cycle() == 1
    # Not written yet: the group's restarts so far stand.
    monkeypatch.setenv("NVRX_CURRENT_CYCLE_INFO", str(tmp_path / "missing"))
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert worker().current_cycle() == 1
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT")
    assert worker().current_cycle() == 0
