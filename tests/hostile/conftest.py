"""The hostile-input suite's fixtures. Every command runs in a forked child (harness.py); the
modules the subcommands import lazily are imported here once, so that each child starts warm."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from .inputs import stub_slurm

for _module in (
    "nvrx.cli",
    "nvrx.cli.analyze",
    "nvrx.cli.chain",
    "nvrx.cli.config",
    "nvrx.cli.inject",
    "nvrx.cli.report",
    "nvrx.cli.score",
    "nvrx.cli.watch",
    "nvrx.analyze.command",
    "nvrx.chain.command",
    "nvrx.config.show",
    "nvrx.inject.command",
    "nvrx.inject.report_command",
    "nvrx.score.command",
    "nvrx.watch.command",
    "nvrx.chain.submit",
    "nvrx.chain.output",
    "nvrx.inject.analyst",
    "nvrx.analyze.logattr",
    "nvrx.analyze.fr",
    "nvrx.inject.output",
    "nvrx.inject.plan",
    "nvrx.inject.report",
    "nvrx.inject.driver",
    "nvrx.score.judges",
    "nvrx.score.load",
    "nvrx.score.output",
    "nvrx.score.report",
    "nvrx.slurm",
    "nvrx.watch.output",
    "nvrx.watch.resolve",
    "nvrx.watch.watcher",
    "httpx",
):
    importlib.import_module(_module)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The runs' HOME and working directory: no config, key file or cache of the developer's."""
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def slurm_env(tmp_path: Path) -> dict[str, str]:
    """Stand-in Slurm commands that refuse everything (see inputs.stub_slurm)."""
    return stub_slurm(tmp_path / "slurm-bin")
