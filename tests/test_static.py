"""The code base stays ruff- and mypy-clean, and never reaches for a shell."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True, check=False
    )


def test_ruff_is_clean() -> None:
    proc = run("ruff", "check", "src", "tests", "bench", "examples")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_is_clean() -> None:
    proc = run("mypy")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_shell_true_anywhere_in_the_package() -> None:
    offenders = [
        str(path.relative_to(REPO))
        for path in (REPO / "src").rglob("*.py")
        if "shell=True" in path.read_text()
    ]
    assert offenders == []


def test_the_shell_scripts_are_shellcheck_clean() -> None:
    import shutil

    assert shutil.which("shellcheck"), "shellcheck is required (.ci/run installs it)"
    scripts = [
        REPO / ".ci" / "run",
        REPO / "deploy" / "quickstart",
        REPO / "deploy" / "lib" / "common.sh",
        *(
            REPO / "deploy" / service / name
            for service in ("local-slurm", "local-llm")
            for name in ("up", "down", "status", "lib.sh")
        ),
        REPO / "examples" / "workloads" / "cpu_fault_demo" / "cpu_fault_demo.sbatch",
    ]
    proc = subprocess.run(
        ["shellcheck", "-x", "-s", "bash", *map(str, scripts)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout
