"""What recorder.sbatch saw in each experiment of one session, as JSON on stdout, with the run's
own paths and ids replaced by placeholders so that two drivers' runs compare: the session dir
by <SESSION>, the scripts dir by <SCRIPTS>, the run's root (the driver's HOME and experiments
dir sit under it) by <RUN>, the job id by <JOB>.

    python3 normalize.py EXPERIMENTS_DIR SCRIPTS_DIR

Kept: every environment variable except the ones the shell, the node or Slurm set per job (a
fresh value each run), plus the Slurm variables and job fields the sbatch flags decide.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# Set by bash, by slurmd (the user's login variables, the GPUs of the node) or by this machine
# (PATH and the login shell's variables pass through both drivers' --export=ALL as they are):
# not the driver's doing.
DROPPED = {
    "PWD", "OLDPWD", "SHLVL", "_", "HOSTNAME", "TMPDIR", "ENVIRONMENT", "PATH", "MAIL",
    "LOGNAME", "SHELL", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES",
    "ZE_AFFINITY_MASK",
}  # fmt: skip
DROPPED_PREFIXES = ("PYENV_", "SSH_", "XDG_")
SLURM_KEPT = {
    "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_NTASKS_PER_NODE", "SLURM_GPUS_PER_NODE",
    "SLURM_MEM_PER_NODE", "SLURM_EXPORT_ENV", "SLURM_JOB_PARTITION", "SLURM_JOB_ACCOUNT",
}  # fmt: skip
JOB_KEPT = (
    "NumNodes", "NumTasks", "TimeLimit", "OverSubscribe", "MinMemoryNode", "StdOut", "StdErr",
    "TresPerNode", "Command", "Partition",
)  # fmt: skip


def record(path: Path, session: Path, scripts: Path, run: Path) -> dict[str, object]:
    env: dict[str, str] = {}
    job: dict[str, str] = {}
    argv = ""
    job_id = ""
    for line in path.read_text().splitlines():
        if line.startswith("ARGV="):
            argv = line[5:]
        elif line.startswith("ENV "):
            name, _, value = line[4:].partition("=")
            if name == "SLURM_JOB_ID":
                job_id = value
            if (
                name in DROPPED
                or name.startswith(DROPPED_PREFIXES)
                or (name.startswith("SLURM") and name not in SLURM_KEPT)
            ):
                continue
            env[name] = value
        elif line.startswith("JOB "):
            name, _, value = line[4:].partition("=")
            if name in JOB_KEPT:
                job[name] = value

    def placeholders(text: str) -> str:
        text = text.replace(str(session), "<SESSION>").replace(str(scripts), "<SCRIPTS>")
        text = text.replace(str(run), "<RUN>")
        return text.replace(job_id, "<JOB>") if job_id else text

    return {
        "argv": placeholders(argv),
        "env": {k: placeholders(v) for k, v in sorted(env.items())},
        "job": {k: placeholders(v) for k, v in job.items()},
    }


def main() -> None:
    experiments, scripts = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    (session,) = sorted((experiments / "fault_injection").iterdir())
    run = experiments.parent
    out = {
        p.parent.name: record(p, session, scripts, run)
        for p in sorted(session.glob("*/recorded.env"))
    }
    json.dump(out, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
