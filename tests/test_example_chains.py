"""The example chains of examples/chains/ that every watch example of the README and docs runs
against: each says what it is meant to show, and the generator overwrites nothing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from .cli_runner import clean_environ
from .cli_runner import nvrx as nvrx_in_process

MAKE = Path(__file__).resolve().parents[1] / "examples" / "chains" / "make_chains.py"


def make(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(MAKE), str(root)], capture_output=True, text=True, check=False
    )


def watch(root: Path, *args: str) -> tuple[int, dict[str, Any]]:
    proc = nvrx_in_process(
        "watch", "--platform", "none", "--state-dir", str(root / "state"), "--json", *args,
        env=clean_environ({"HOME": str(root)}), cwd=root,
    )  # fmt: skip
    return proc.returncode, json.loads(proc.stdout.splitlines()[-1])


def test_the_three_example_chains_show_what_they_are_named_for(tmp_path: Path) -> None:
    assert make(tmp_path / "ex").returncode == 0
    code, healthy = watch(tmp_path, "--work-dir", str(tmp_path / "ex" / "healthy"))
    assert (code, healthy["findings"], healthy["state"]) == (0, [], "ok")
    assert healthy["goodput"]["fraction"] == 1.0

    code, storm = watch(tmp_path, "--work-dir", str(tmp_path / "ex" / "storm"))
    found = {f["detector"] for f in storm["findings"]}
    assert code == 1 and {"restart_storm", "stalled_progress", "suspect_node"} <= found

    code, stalled = watch(tmp_path, "--work-dir", str(tmp_path / "ex" / "stalled"))
    assert code == 1 and [f["detector"] for f in stalled["findings"]] == ["cycle_stalled"]
    assert stalled["goodput"]["seconds"]["stalled"] > 2 * 3600

    code, fleet = watch(tmp_path, "--fleet", str(tmp_path / "ex"))
    assert code == 1 and len(fleet["chains"]) == 3


def test_the_generator_never_writes_over_a_chain(tmp_path: Path) -> None:
    assert make(tmp_path).returncode == 0
    before = (tmp_path / "healthy" / "checkpoints" / "latest_checkpointed_iteration.txt").stat()
    again = make(tmp_path)
    assert again.returncode == 2 and "exists; choose an empty DIR" in again.stderr
    after = (tmp_path / "healthy" / "checkpoints" / "latest_checkpointed_iteration.txt").stat()
    assert after.st_mtime_ns == before.st_mtime_ns


def test_a_cycle_files_only_screen_claims_no_user_and_no_unread_figure(tmp_path: Path) -> None:
    # --platform none asks Slurm nothing: no user's jobs were looked at, and no queue wait or
    # startup was read, so neither is shown as if it had been (never "queue 0s").
    assert make(tmp_path / "ex").returncode == 0
    proc = nvrx_in_process(
        "watch", "--platform", "none", "--state-dir", str(tmp_path / "state"),
        "--work-dir", str(tmp_path / "ex" / "storm"),
        env=clean_environ({"HOME": str(tmp_path)}), cwd=tmp_path,
    )  # fmt: skip
    first, *rest = proc.stdout.splitlines()
    assert first == "nvrx watch: (cycle files only)  CRITICAL"
    (goodput,) = [line for line in rest if line.startswith("goodput: ")]
    assert "queue not read, startup not read" in goodput
    fleet = nvrx_in_process(
        "watch", "--platform", "none", "--state-dir", str(tmp_path / "state"),
        "--fleet", str(tmp_path / "ex"), env=clean_environ({"HOME": str(tmp_path)}), cwd=tmp_path,
    )  # fmt: skip
    assert fleet.stdout.count("\n") > 5
    assert [line for line in fleet.stdout.splitlines() if line != line.rstrip()] == []


def test_example_chains_are_made_outside_the_repository_or_ignored_in_it() -> None:
    repo = MAKE.parents[2]
    # The pages say where to make them: never a relative directory, which would land in the
    # checkout when run from its root as they say.
    pages = [repo / "README.md", *sorted((repo / "docs").glob("*.md")), MAKE]
    for page in pages:
        text = page.read_text()
        for target in re.findall(r"make_chains\.py ([^\s`\\]+)", text):
            assert target == "DIR" or target.startswith("/tmp/"), (page.name, target)
        # ... and watch them where they were made.
        for target in re.findall(r"--(?:work-dir|fleet) (chains\S*)", text):
            raise AssertionError(f"{page.name} watches {target}, a relative path")
    if (repo / ".git").exists():  # a checkout: one made in its root anyway is ignored
        ignored = subprocess.run(
            ["git", "check-ignore", "-q", "chains/storm/checkpoints/x"], cwd=repo, check=False
        )
        assert ignored.returncode == 0


def quoted_run(page: Path, command: str) -> list[str]:
    """The lines a page quotes after `$ <command>`, up to the next `$ ` or the fence's end."""
    lines = [line.strip() for line in page.read_text().splitlines()]
    start = lines.index(f"$ {command}") + 1
    end = next(i for i in range(start, len(lines)) if lines[i].startswith(("$ ", "```")))
    return lines[start:end]


def same_but_elided(quoted: list[str], printed: list[str]) -> bool:
    """`printed` as the page quotes it: a quoted `[...]` (or `[detail and runbook lines]`)
    stands for the indented lines printed there; a goodput figure may differ in its last digit
    (the pages were made a few seconds apart from the chains)."""

    def plain(line: str) -> str:
        return re.sub(r"\d+\.\d%", "N%", line.strip())

    at = 0
    for line in quoted:
        if line.startswith("["):
            while at < len(printed) and printed[at].startswith("           "):
                at += 1
            continue
        if at >= len(printed) or plain(printed[at]) != plain(line):
            return False
        at += 1
    return at == len(printed)


def test_the_readme_and_watch_pages_quote_what_watch_prints_of_the_example_chains() -> None:
    import tempfile

    repo = MAKE.parents[2]
    quoted_at = "/tmp/exrun/chains"
    # A directory whose name is as long as the quoted one, so that the fleet's columns line up
    # as quoted.
    with tempfile.TemporaryDirectory(prefix="nvrx", dir="/tmp") as root:
        assert len(root) == len(quoted_at)
        assert make(Path(root)).returncode == 0
        for page, args in (
            (repo / "README.md", ["--work-dir", f"{quoted_at}/storm"]),
            (repo / "docs" / "watch.md", ["--fleet", quoted_at]),
        ):
            proc = nvrx_in_process(
                "watch", "--platform", "none", "--state-dir", f"{root}/state",
                *[a.replace(quoted_at, root) for a in args],
                env=clean_environ({"HOME": root}), cwd=Path(root),
            )  # fmt: skip
            printed = proc.stdout.replace(root, quoted_at).splitlines()
            quoted = quoted_run(page, " ".join(["nvrx watch --platform none", *args]))
            assert same_but_elided(quoted, printed), (page.name, printed)
