"""The generation script trains as upstream's does: the same Megatron-LM arguments for each
model profile and the same exported environment (tests/data/upstream_recipe.yaml, read from
upstream's script), checked on what the launcher is actually given when the rendered script
runs (with the stand-ins of test_chain_script)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from nvrx.chain.script import render_script
from nvrx.chain.shape import ArrayShape
from nvrx.config import load_config

from .test_chain_script import Generation, finish, stand_ins

RECIPE: dict[str, Any] = yaml.safe_load(
    (Path(__file__).resolve().parent / "data" / "upstream_recipe.yaml").read_text()
)
GPUS = 4


def generation(tmp_path: Path, profile: str) -> Generation:
    bin_dir = stand_ins(tmp_path)
    overrides = {
        "chain.launcher": ([str(bin_dir / "launcher")], "t"),
        "chain.no_restart_demo": (False, "t"),
        "chain.fault_inject": (False, "t"),
        "chain.model_profile": (profile, "t"),
    }
    chain = load_config(environ={}, cli=overrides).config.chain
    work = tmp_path / "work"
    text = render_script(
        chain, ArrayShape(2, 1, 1, 1, GPUS), chain_id="abc123", work_dir=str(work),
        job_name="n", nvrx_version="test",
    )  # fmt: skip
    script = tmp_path / "gen.sbatch"
    script.write_text(text)
    return Generation(tmp_path, work, script)


def megatron_flags(args: list[str]) -> dict[str, str | None]:
    """The arguments after pretrain_gpt.py: flag -> value (None for a switch)."""
    rest = args[[a.endswith("/pretrain_gpt.py") for a in args].index(True) + 1 :]
    flags: dict[str, str | None] = {}
    for i, arg in enumerate(rest):
        if arg.startswith("--"):
            nxt = rest[i + 1] if i + 1 < len(rest) else None
            value = None if nxt is None or nxt.startswith("--") else nxt
            assert arg not in flags, f"{arg} given twice"
            flags[arg] = value
    return flags


def expected(profile: str, work: Path, world: int) -> dict[str, str | None]:
    values = {
        "<work>": str(work), "<world>": str(world), "<2 world>": str(2 * world),
    }  # fmt: skip
    out = {**RECIPE["megatron"], **RECIPE["profiles"][profile]}
    for flag, value in out.items():
        if isinstance(value, str):
            for placeholder, real in values.items():
                value = value.replace(placeholder, real)
            out[flag] = value
    return {k: v for k, v in out.items() if k not in RECIPE["differences"]}


@pytest.mark.parametrize("profile", ["small", "8b"])
def test_megatron_gets_upstreams_arguments_for_each_profile(tmp_path: Path, profile: str) -> None:
    gen = generation(tmp_path, profile)
    rc, out = finish(gen, gen.run(SLURM_JOB_NUM_NODES="1"))
    assert rc == 0, out
    flags = megatron_flags(gen.launcher_args())
    assert flags == expected(profile, gen.work, world=2 * GPUS)


def test_the_launcher_gets_upstreams_environment(tmp_path: Path) -> None:
    gen = generation(tmp_path, "small")
    rc, out = finish(gen, gen.run(task=0))
    assert rc == 0, out
    env = dict(
        line.split("=", 1) for line in (gen.dir / "launcher.env").read_text().splitlines()
        if "=" in line
    )  # fmt: skip
    for name, value in RECIPE["environment"].items():
        assert env.get(name) == value.replace("<task>", "0"), name
    # A site that runs MNNVL sets NCCL_MNNVL_ENABLE itself, and keeps it.
    (tmp_path / "mnnvl").mkdir()
    again = generation(tmp_path / "mnnvl", "small")
    rc, out = finish(again, again.run(task=0, NCCL_MNNVL_ENABLE="1"))
    assert rc == 0, out
    assert "NCCL_MNNVL_ENABLE=1" in (again.dir / "launcher.env").read_text().splitlines()
