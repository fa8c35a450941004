"""What upstream's watcher (`nvrx_watch`, stdlib only) says of each recorded run: writes
`<scenario>/upstream-watch.json` (README.md, "Upstream's watcher on these files").

Each run gets a work dir laid out as a chain's (`<work>/nvrx/<job>/cycle_infos/`, the recorded
cycle-info files and `.current` link copied in, the checkpoint-iteration file where the
scenario had it, holding what it held), and the watcher is run on the files alone
(`--platform none --dry-run`: no Slurm, nothing paged, no state written). `layout` is also
what tests/test_watch_real_nvrx.py builds nvrx's work dirs with, so both read the same tree.

A second kind of run asks Slurm too, as a login node would once the job has ended: stand-in
`squeue`, `sinfo`, `scontrol` and `sacct` (`slurm_bin`, this file run as `standin CMD`) answer
for the finished array job 7300 (job name `nvrx-real`, one task per launcher, each task's exit
code the launcher's in scenario.json, task 0 from the first cycle's start - 4 s to the last
cycle's end + 1 s): nothing queued, no drained node, the controller has forgotten the job, and
accounting has its tasks.

    python3 tests/data/real-nvrx/upstream_watch.py WATCH_DIR COMMIT

WATCH_DIR is upstream's examples/fault_tolerance/deployment/watch/ (the directory holding
`nvrx_watch/`) at NVIDIA/nvidia-resiliency-ext commit COMMIT (recorded as given); the watcher
is run from it with this Python.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCENARIOS = ("restart-after-exception", "no-progress-exit-93", "storage-check-node-leaves")
JOB, JOB_NAME = "7300", "nvrx-real"
# The runs of each scenario, by the arguments that differ: the files alone; the same with the
# launcher's --max-restarts told to the watcher as 1 (so the restart-budget detector has a
# restart to speak of); and the job id, with Slurm (the stand-ins) answering for the ended job.
VARIANTS: dict[str, list[str]] = {
    "files": ["--platform", "none"],
    "max-restarts-1": ["--platform", "none", "--max-restarts", "1"],
    "slurm-job-ended": [JOB],
}


def asks_slurm(variant: str) -> bool:
    return "--platform" not in VARIANTS[variant]


# What the recorded runs' iteration files held at the end: the worker's last save, or the
# recorder's static file that never advanced (record.py).
CHECKPOINTS = {
    "restart-after-exception": ("checkpoints/latest_checkpointed_iteration.txt", "80\n"),
    "no-progress-exit-93": ("control/static_iter.txt", "1\n"),
    "storage-check-node-leaves": ("checkpoints/latest_checkpointed_iteration.txt", "300\n"),
}
_LOG_LINE = re.compile(r"^\S+ \S+ (?:\[DRY\] )?[A-Z]+ (.*)$")
_FINDING = re.compile(r"^\[(CRITICAL|WARNING|INFO)\] (\S+) (.*)$")


def _utc(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def layout(scenario: str, work: Path) -> list[str]:
    """Lay out the recorded `scenario` in `work` as a chain's work dir; the watcher arguments
    that point at its checkpoint-iteration file (both watchers take the same flag)."""
    recorded = HERE / scenario / "cycle_infos"
    cycles = sorted(p for p in recorded.iterdir() if not p.name.endswith(".current"))
    job = json.loads(cycles[0].read_text())["job_id"]
    target = work / "nvrx" / job / "cycle_infos"
    shutil.copytree(recorded, target, symlinks=True)  # the .current link stays a link
    infos = [json.loads(p.read_text()) for p in cycles]
    relative, value = CHECKPOINTS[scenario]
    ckpt = work / relative
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    ckpt.write_text(value)
    if relative.startswith("control/"):
        # Written once before the launchers started: the first cycle began after it.
        saved = _utc(infos[0]["cycle_start_time"]) - 4
    else:
        saved = max(_utc(i["cycle_end_time"]) for i in infos)  # the last save, at the end
    os.utime(ckpt, (saved, saved))
    return ["--checkpoint-iteration-file", str(ckpt)]


def _tasks(scenario: str) -> list[dict[str, object]]:
    """The finished job's tasks as accounting would keep them (the module docstring)."""
    run = json.loads((HERE / scenario / "scenario.json").read_text())
    infos = [
        json.loads(p.read_text())
        for p in sorted((HERE / scenario / "cycle_infos").iterdir())
        if not p.name.endswith(".current")
    ]
    start = _utc(infos[0]["cycle_start_time"]) - 4
    end = max(_utc(i["cycle_end_time"]) for i in infos) + 1
    return [
        {"task": t, "exit": code, "start": start, "end": end}
        for t, code in enumerate(run["exit_codes"])
    ]


def _slurm_time(stamp: float) -> str:
    """A time as sacct prints it: epoch seconds under SLURM_TIME_FORMAT=%s, else local ISO."""
    if os.environ.get("SLURM_TIME_FORMAT") == "%s":
        return str(int(stamp))
    return datetime.fromtimestamp(stamp).strftime("%Y-%m-%dT%H:%M:%S")


def _option(args: list[str], *names: str) -> str | None:
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if name.startswith("--") and arg.startswith(name + "="):
                return arg[len(name) + 1 :]
    return None


def standin(command: str, scenario: str, args: list[str]) -> int:
    """What Slurm answers about the finished job (the module docstring)."""
    if command in ("squeue", "sinfo"):
        return 0  # nothing queued, no node drained (and -o %N lists none we need)
    if command == "scontrol":
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        return 1
    asked = _option(args, "-j", "--jobs")
    name = _option(args, "--name")
    if (asked is not None and asked.split("_")[0] != JOB) or name not in (None, JOB_NAME):
        return 0
    fields = (_option(args, "-o", "--format") or "JobID,State,ExitCode").split(",")
    user = pwd.getpwuid(os.getuid()).pw_name
    for t in _tasks(scenario):
        code = int(t["exit"])  # type: ignore[call-overload]
        row = {
            "JobID": f"{JOB}_{t['task']}",
            "JobIDRaw": str(int(JOB) + int(t["task"])),  # type: ignore[call-overload]
            "State": "COMPLETED" if code == 0 else "FAILED",
            "ExitCode": f"{code}:0",
            "Start": _slurm_time(float(t["start"])),  # type: ignore[arg-type]
            "End": _slurm_time(float(t["end"])),  # type: ignore[arg-type]
            "NodeList": "localhost",
            "User": user,
            "JobName": JOB_NAME,
        }
        print("|".join(row.get(f, "") for f in fields))
    return 0


def slurm_bin(scenario: str, where: Path, python: str = sys.executable) -> Path:
    """A directory of stand-in Slurm commands answering for the recorded `scenario`."""
    where.mkdir(parents=True, exist_ok=True)
    for command in ("squeue", "sinfo", "scontrol", "sacct"):
        path = where / command
        path.write_text(
            f"#!/bin/sh\nexec '{python}' '{Path(__file__).resolve()}' standin {command} "
            f'{scenario} "$@"\n'
        )
        path.chmod(0o755)
    return where


def _findings(stdout: str, work: Path) -> list[dict[str, str]]:
    """The findings of the watcher's log lines (`<date> <time> [DRY] <LEVEL> <message>`): a
    message `[SEVERITY] key summary`, then one indented message, its detail."""
    found: list[dict[str, str]] = []
    for line in stdout.splitlines():
        logged = _LOG_LINE.match(line)
        if logged is None:
            continue
        message = logged.group(1)
        match = _FINDING.match(message)
        if match is not None:
            severity, key, summary = match.groups()
            found.append({"severity": severity.lower(), "key": key, "summary": summary})
        elif message.startswith("    ") and found and "detail" not in found[-1]:
            found[-1]["detail"] = message.strip()
    return [{k: v.replace(str(work), "<work>") for k, v in f.items()} for f in found]


def run(watch_dir: Path, scenario: str, variant: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="upwatch-") as tmp:
        work, state = Path(tmp) / "work", Path(tmp) / "state"
        flags = layout(scenario, work)
        argv = [*VARIANTS[variant], "--work-dir", str(work), "--state-dir", str(state),
                "--dry-run", *flags]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("NVRX_")}
        env.update(HOME=tmp, PYTHONPATH=str(watch_dir), TZ="UTC")
        if asks_slurm(variant):
            standins = slurm_bin(scenario, Path(tmp) / "bin")
            env["PATH"] = f"{standins}{os.pathsep}{env.get('PATH', '')}"
        proc = subprocess.run(
            [sys.executable, "-m", "nvrx_watch", *argv],
            capture_output=True, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip
        shown = [a.replace(str(work), "<work>").replace(str(state), "<state>") for a in argv]
        return {
            "command": ["python3", "-m", "nvrx_watch", *shown],
            "slurm": "stand-ins answering for the ended job" if asks_slurm(variant) else None,
            "exit_code": proc.returncode,
            "findings": _findings(proc.stdout, work),
        }


def main() -> int:
    if sys.argv[1:2] == ["standin"] and len(sys.argv) >= 4:
        return standin(sys.argv[2], sys.argv[3], sys.argv[4:])
    if len(sys.argv) != 3 or not (Path(sys.argv[1]) / "nvrx_watch").is_dir():
        print("usage: upstream_watch.py WATCH_DIR COMMIT (WATCH_DIR holds nvrx_watch/)",
              file=sys.stderr)  # fmt: skip
        return 2
    watch_dir, commit = Path(sys.argv[1]).resolve(), sys.argv[2]
    for scenario in SCENARIOS:
        runs = {variant: run(watch_dir, scenario, variant) for variant in VARIANTS}
        record = {"upstream_commit": commit, "python": sys.version.split()[0], "runs": runs}
        out = HERE / scenario / "upstream-watch.json"
        out.write_text(json.dumps(record, indent=2) + "\n")
        print(f"{out.relative_to(HERE)}: " + ", ".join(
            f"{name} exit {r['exit_code']} ({len(r['findings'])} findings)"  # type: ignore[arg-type]
            for name, r in runs.items()
        ))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
