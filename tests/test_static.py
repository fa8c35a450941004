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
        REPO / "deploy" / "real-nvrx" / "install",
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
    # A section sign cites a numbered section: this repository's documents number none, so it
    # is always one of a document elsewhere.
    cites = re.compile(r"shared/reference|§")
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
    "limits": -1, "files": 0, "display": 0, "retry": 0, "htmlpage": 1, "terminal": 1, "logtext": 1,
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


# --- DESIGN.md's module table, held against the code -----------------------------------------


def module_table() -> dict[str, bool]:
    """DESIGN.md's module table: each module named in it, and whether it is marked IO. A row
    names a module in full (`config.values`), then its siblings by their last name (`model`);
    names in parentheses after one are its submodules (`watch.detectors` (`chain`, ...))."""
    import re

    text = (REPO / "DESIGN.md").read_text()
    section = text[text.index("## Modules") : text.index("## Errors")]
    table: dict[str, bool] = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        first, io = (cell.strip() for cell in line.strip("|").split("|")[:2])
        package = ""
        for m in re.finditer(r"`([\w.]+)`(\s*\()?", first):
            name = m.group(1)
            full = name if "." in name or not package else f"{package}.{name}"
            if "." in name:
                package = name.rsplit(".", 1)[0]
            if m.group(2):  # `a.b` (`c`, ...): c is a.b.c
                package = full
            table[full] = bool(io)
    return table


def package_modules(*, packages: bool = False) -> set[str]:
    """nvrx's modules by dotted name below `nvrx` (with the packages themselves if asked)."""
    src = REPO / "src" / "nvrx"
    found = set()
    for path in src.rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
            if not (packages and parts):
                continue
        if parts[-1] != "__main__":
            found.add(".".join(parts))
    return found


def test_the_module_table_names_every_module_and_nothing_else() -> None:
    table, modules = module_table(), package_modules()
    # a row for a module (or package) that is not there
    assert sorted(set(table) - package_modules(packages=True)) == []
    # `cli` stands for its modules (one per subcommand): every other module has its row.
    unlisted = {m for m in modules - set(table) if not m.startswith("cli.")}
    assert sorted(unlisted) == []


_IMPORT_PROBE = """
import json, os, sys
loaded = {}
for name in sys.argv[1:]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a fresh child per module: nothing of nvrx is imported before it
        os.close(read)
        __import__("nvrx." + name)
        os.write(write, json.dumps(sorted(m[5:] for m in sys.modules if m.startswith("nvrx."))).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 1 << 16):
        data += chunk
    os.close(read)
    _, status = os.waitpid(pid, 0)
    loaded[name] = json.loads(data) if status == 0 and data else None
print(json.dumps(loaded))
"""


def imports_of(modules: list[str]) -> dict[str, list[str] | None]:
    """The nvrx modules that importing each module loads (None: its import failed)."""
    import json

    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_PROBE, *modules],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    loaded: dict[str, list[str] | None] = json.loads(proc.stdout)
    return loaded


def test_importing_a_pure_module_loads_no_module_that_does_io() -> None:
    # DESIGN.md marks which modules do IO; a pure one must not reach one through its imports
    # (types only an annotation needs are imported under TYPE_CHECKING).
    table = module_table()
    pure = sorted(m for m, io in table.items() if not io)
    doing_io = {m for m, io in table.items() if io}
    loaded = imports_of(pure)
    assert {m: None for m in pure if loaded[m] is None} == {}
    assert {
        m: sorted(set(got or ()) & doing_io)
        for m, got in loaded.items()
        if set(got or ()) & doing_io
    } == {}


def test_no_analyser_can_reach_the_judge_or_its_ground_truth() -> None:
    # The analysers never see the injected fault: nothing under analyze/ loads score (where the
    # restart table and the judge live), whatever it imports.
    analysers = sorted(m for m in package_modules() if m.startswith("analyze."))
    loaded = imports_of(analysers)
    assert {m: [x for x in got or () if x.startswith("score")] for m, got in loaded.items()} == {
        m: [] for m in analysers
    }


def test_no_private_name_is_imported_from_another_module() -> None:
    # A name another module needs is part of its module's face: it says so by having no
    # leading underscore.
    import ast

    src = REPO / "src"
    crossing = []
    for path in sorted(src.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nvrx"):
                crossing += [
                    f"{path.relative_to(src)}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert crossing == []
