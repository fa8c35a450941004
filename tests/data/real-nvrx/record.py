#!/usr/bin/env python3
"""Record what NVRx's own `ft_launcher` writes, outside Slurm, for nvrx's tests to read.

    $NVRX_FT_VENV/bin/python tests/data/real-nvrx/record.py SCENARIO [--worker W] [--out DIR]

Each scenario (tests/real_nvrx/harness.py says what they are and how they run; the tests in
tests/real_nvrx/ run the same ones) starts a few real launchers on this host, makes something
happen to them, waits for every launcher to end and copies what they wrote into DIR/SCENARIO/
(default: beside this file): the cycle-info files and their `.current` link, the launcher log,
the per-cycle application logs, each launcher's console output and `scenario.json` (the
command lines, what was done when, every exit code).

`--worker` picks the training script: `rehearsal` (examples/rehearsal/worker.py, independent
ranks) or `ddp` (examples/rehearsal/ddp_worker.py, gloo DDP with NVRx's sections client);
the default is the scenario's own. Run with the launcher's own Python: the DDP worker needs
torch, and the launcher's version is read from its venv.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository, for tests.real_nvrx.harness

from tests.real_nvrx.harness import SCENARIOS, WORKERS, run_scenario  # noqa: E402


def record(name: str, launcher: Path, out: Path, worker: str | None) -> int:
    sc = SCENARIOS[name]
    if worker is not None:
        sc = dataclasses.replace(sc, worker=worker)
    run_dir = Path(tempfile.mkdtemp(prefix="nr-", dir="/tmp"))  # short: Unix socket paths
    try:
        run = run_scenario(sc, launcher, run_dir)
        target = out / name
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        shutil.copytree(run_dir / "cycle_infos", target / "cycle_infos", symlinks=True)
        shutil.copytree(run_dir / "logs", target / "logs")
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    meta = {
        "scenario": name,
        "summary": sc.summary,
        "worker": WORKERS[sc.worker].name,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "run_dir": str(run_dir),
        "launcher_version": launcher_version(launcher),
        "argv": [[Path(a).name if a == str(launcher) else a for a in argv] for argv in run.argvs],
        "events": run.events,
        "exit_codes": run.exit_codes,
        "ended_by_deadline": run.ended_by_deadline,
    }
    (target / "scenario.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(
        f"{name}: exit codes {run.exit_codes}, events {run.events}, "
        f"timed out {run.ended_by_deadline}, left behind {run.left_behind}"
    )
    return 0 if not run.ended_by_deadline and not run.left_behind else 1


def launcher_version(launcher: Path) -> str:
    proc = subprocess.run(
        [str(launcher.with_name("python")), "-c",
         "import importlib.metadata as m; print(m.version('nvidia-resiliency-ext'))"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    return proc.stdout.strip() or "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("scenario", choices=[*SCENARIOS, "all"])
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument(
        "--worker", choices=sorted(WORKERS), default=None,
        help="the training script (default: the scenario's own)",
    )  # fmt: skip
    parser.add_argument(
        "--launcher", type=Path, default=Path(sys.executable).with_name("ft_launcher"),
        help="NVRx's ft_launcher (default: the one beside this Python)",
    )  # fmt: skip
    args = parser.parse_args()
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    return max(record(n, args.launcher, args.out, args.worker) for n in names)


if __name__ == "__main__":
    sys.exit(main())
