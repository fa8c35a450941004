"""Day-one parity: a workload script submitted by nvrx sees what upstream's driver gives it.

tests/data/upstream_env/upstream.json is what recorder.sbatch saw when upstream's own
prepare_node_alloc.sh submitted it on this local cluster (record.sh there says how it was
made). Here nvrx submits the same script from the same files (upstream's workloads.conf format,
its pools/ dir, its user.env) and the same starting environment (the upstream variable names),
and the two recordings must agree: every variable, every value, and the job's shape in Slurm.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from nvrx.slurm import Slurm

from .conftest import REPO

DATA = REPO / "tests" / "data" / "upstream_env"


def _export_items(record: dict[str, dict[str, str]]) -> set[str]:
    """--export=ALL,A=1,B=2: the same variables in any order."""
    return set(record["env"].pop("SLURM_EXPORT_ENV").split(","))


def test_a_workload_script_sees_what_upstreams_driver_gives_it(
    slurm: Slurm, shared_dir: Path
) -> None:
    run = shared_dir / "run"
    scripts = run / "scripts"
    (scripts / "pools").mkdir(parents=True)
    for name in ("recorder.sbatch", "workloads.conf", "user.env"):
        shutil.copy2(DATA / name, scripts / name)
    shutil.copy2(DATA / "pools" / "recorder.txt", scripts / "pools" / "recorder.txt")
    (run / "home").mkdir()
    # What record.sh gave upstream's driver: the user's own variables, upstream's names.
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(run / "home"),
        "USER": os.environ.get("USER", "root"),
        "LANG": "C.UTF-8",
        "WORKLOAD": "recorder",
        "GPUS_PER_NODE": "2",
        "BATCH_SIZE": "2",
        "POLL_INTERVAL": "1",
        "BASE_EXPERIMENTS_DIR": str(run / "experiments"),
    }
    proc = subprocess.run(
        [
            sys.executable, "-m", "nvrx.cli", "inject-loop", "--no-analysis",
            "--env-file", str(scripts / "user.env"),
            "--set", f"inject.workloads_file={scripts / 'workloads.conf'}",
        ],
        capture_output=True, text=True, timeout=600, check=False, env=env, cwd=run,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    normalized = subprocess.run(
        [sys.executable, str(DATA / "normalize.py"), str(run / "experiments"), str(scripts)],
        capture_output=True, text=True, timeout=180, check=True,
    )  # fmt: skip
    ours = json.loads(normalized.stdout)
    upstream = json.loads((DATA / "upstream.json").read_text())
    assert sorted(ours) == sorted(upstream) == ["n2_GPU_SLEEP_r0_i5", "n2_SEGFAULT_r1_i3"]
    for name, theirs in upstream.items():
        mine = ours[name]
        assert _export_items(mine) == _export_items(theirs), name
        assert mine == theirs, name
