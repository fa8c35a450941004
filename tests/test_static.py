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


def test_nothing_cites_a_file_outside_the_repository() -> None:
    # Whoever clones the repository must find every contract and reason in it (DESIGN.md,
    # docs/): no pointer into the development machine's reference notes.
    import re

    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    cites = re.compile(r"shared/reference|\b[\w-]+\.md §|\breference §")
    found = [
        f"{name}:{no}"
        for name in tracked
        if name.endswith((".py", ".sh", ".md", ".yaml", ".toml", ".txt", ".sbatch"))
        and name != "tests/test_static.py"
        for no, line in enumerate((REPO / name).read_text(errors="replace").splitlines(), 1)
        if cites.search(line)
    ]
    assert not found, found


# The packages, lowest first: a module imports only from its own package or a lower layer
# (DESIGN.md). Siblings on one layer do not import each other.
LAYERS = {
    "files": 0, "limits": 0, "display": 0, "retry": 0, "htmlpage": 1, "terminal": 1,
    "slurm": 1, "config": 2, "campaign": 3, "score": 4, "chain": 5, "analyze": 5,
    "watch": 6, "inject": 6, "cli": 7,
}  # fmt: skip
# Imports that still run upwards, each to be removed (the list only shrinks).
KNOWN_UPWARD: set[tuple[str, str]] = set()


def test_imports_run_downwards_only() -> None:
    import ast

    src = REPO / "src"
    upward = set()
    for path in src.rglob("*.py"):
        module = ".".join(path.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for target in targets:
                here, there = module.split(".")[1:2], target.split(".")[1:2]
                if target.split(".")[0] != "nvrx" or not here or not there or here == there:
                    continue
                known = here[0] in LAYERS and there[0] in LAYERS
                if known and LAYERS[there[0]] >= LAYERS[here[0]]:
                    upward.add((module, f"nvrx.{there[0]}"))
    assert upward == KNOWN_UPWARD


def test_every_module_over_400_lines_says_why_it_is_one_module() -> None:
    # Long modules are split by what they do; one that stays long says why at its top.
    import ast

    unexplained = []
    for path in sorted((REPO / "src" / "nvrx").rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > 400:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "one module" not in doc.lower():
                unexplained.append(str(path.relative_to(REPO)))
    assert unexplained == []
