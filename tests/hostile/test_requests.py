"""Requests that do not go together: an option that a mode would drop without a word is refused,
exit 2, one `nvrx: error:` line naming the mode and the option, before anything is read or
written. And the example generator never writes through a link nor prints a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..test_watch_watcher import healthy_run
from .harness import assert_bad_input, assert_unchanged, run_nvrx, tree_state
from .inputs import session_with_two

WALL = 10.0
MAKE_CHAINS = Path(__file__).resolve().parents[2] / "examples" / "chains" / "make_chains.py"


def refused(tmp_path: Path, home: Path, env: dict[str, str], line: str, *names: str) -> None:
    """`nvrx LINE` ({session}, {work}, {tmp} filled in) is bad input naming every one of `names`,
    and leaves everything under tmp_path as it was."""
    session = session_with_two(tmp_path / "base")
    work = tmp_path / "work"
    healthy_run(work)
    args = [a.format(session=session, work=work, tmp=tmp_path) for a in line.split()]
    before = tree_state(tmp_path)
    proc = run_nvrx(*args, cwd=home, env=env, wall=WALL)
    assert_bad_input(proc, *names)
    assert_unchanged(before, tmp_path)


def test_iters_beside_reanalyze_is_refused_naming_both(
    tmp_path: Path, home: Path, slurm_env: dict[str, str]
) -> None:
    # Before: the session was analysed again as if --iters had not been given.
    line = "inject-loop --reanalyze {session} --iters 2,10"
    refused(tmp_path, home, slurm_env, line, "--reanalyze", "--iters")


def test_iters_beside_resume_is_refused_naming_both(
    tmp_path: Path, home: Path, slurm_env: dict[str, str]
) -> None:
    # Before: the session went on as it was planned, at its own iterations.
    line = "inject-loop --resume {session} --iters 2,10"
    refused(tmp_path, home, slurm_env, line, "--resume", "--iters")


# (command line, the mode, the option it would have dropped)
DROPPED: list[tuple[str, str, str]] = [
    # inject-loop: a session keeps what it recorded; --reanalyze and --next run no campaign.
    ("inject-loop --reanalyze {session} --allow-duplicates", "--reanalyze", "--allow-duplicates"),
    ("inject-loop --reanalyze {session} --cancel-on-interrupt", "--reanalyze",
     "--cancel-on-interrupt"),
    ("inject-loop --resume {session} --time-limit 00:10:00", "--resume", "--time-limit"),
    ("inject-loop --resume {session} --base-dir {tmp}/elsewhere", "--resume", "--base-dir"),
    ("inject-loop --resume {session} --allow-duplicates", "--resume", "--allow-duplicates"),
    ("inject-loop --rerun-failing {session} --dry-run --iters 2,10", "--rerun-failing", "--iters"),
    ("inject-loop --rerun-failing {session} --dry-run --time-limit 00:10:00", "--rerun-failing",
     "--time-limit"),
    ("inject-loop --rerun-failing {session} --dry-run --base-dir {tmp}/elsewhere",
     "--rerun-failing", "--base-dir"),
    ("inject-loop --rerun-failing {session} --dry-run --allow-duplicates", "--rerun-failing",
     "--allow-duplicates"),
    ("inject-loop --rerun-failing {session} --dry-run -- --gres=gpu:1", "--rerun-failing",
     "-- ARGS"),
    ("inject-loop --next {session} --workload cpu_fault_demo", "--next", "--workload"),
    ("inject-loop --next {session} --sbatch-script {tmp}/job.sh", "--next", "--sbatch-script"),
    ("inject-loop --next {session} --batch-size 4", "--next", "--batch-size"),
    ("inject-loop --next {session} --window strict", "--next", "--window"),
    ("inject-loop --next {session} --base-dir {tmp}/elsewhere", "--next", "--base-dir"),
    ("inject-loop --next {session} --time-limit 00:10:00", "--next", "--time-limit"),
    ("inject-loop --next {session} --no-analysis", "--next", "--no-analysis"),
    ("inject-loop --next {session} --allow-duplicates", "--next", "--allow-duplicates"),
    ("inject-loop --next {session} --cancel-on-interrupt", "--next", "--cancel-on-interrupt"),
    ("inject-loop --next {session} --list-pool", "--next", "--list-pool"),
    ("inject-loop --next {session} -- --gres=gpu:1", "--next", "-- ARGS"),
    ("inject-loop --list-pool --dry-run --pool quick", "--list-pool", "--dry-run"),
    # watch: --list-detectors lists and exits; --goodput is one read-only pass.
    ("watch --list-detectors --act", "--list-detectors", "--act"),  # --json it honours
    ("watch --list-detectors --fleet {work}", "--list-detectors", "--fleet"),
    ("watch --list-detectors --work-dir {work}", "--list-detectors", "--work-dir"),
    ("watch --list-detectors --disable restart_storm", "--list-detectors", "--disable"),
    ("watch --list-detectors --interval 5", "--list-detectors", "--interval"),
    ("watch --platform none --work-dir {work} --goodput --interval 5", "--goodput", "--interval"),
    ("watch --platform none --work-dir {work} --goodput --html", "--goodput", "--html"),
    ("watch --platform none --work-dir {work} --goodput --junit {tmp}/pass.xml", "--goodput",
     "--junit"),
    ("watch --platform none --work-dir {work} --goodput --prom-file {tmp}/chain.prom",
     "--goodput", "--prom-file"),
    ("watch --platform none --work-dir {work} --goodput --webhook-url http://127.0.0.1:9/",
     "--goodput", "--webhook-url"),
    ("watch --platform none --work-dir {work} --goodput --heartbeat-url http://127.0.0.1:9/",
     "--goodput", "--heartbeat-url"),
    ("watch --platform none --work-dir {work} --goodput --pd-routing-key-file {tmp}/key",
     "--goodput", "--pd-routing-key-file"),
    ("watch --platform none --work-dir {work} --goodput --disable restart_storm", "--goodput",
     "--disable"),
    ("watch --platform none --fleet {work} --goodput --prom-file {tmp}/fleet.prom", "--goodput",
     "--prom-file"),
    # score: a directory holds its own ground truth and analyses.
    ("score {session} --run-valid false", "not both", "--run-valid"),
    ("score {session} --fr-output no_dumps", "not both", "--fr-output"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "mode", "option"), DROPPED, ids=[d[0] for d in DROPPED])
def test_an_option_the_mode_would_drop_is_refused_naming_both(
    tmp_path: Path, home: Path, slurm_env: dict[str, str], line: str, mode: str, option: str
) -> None:
    (tmp_path / "key").write_text("routing-key\n")
    refused(tmp_path, home, slurm_env, line, mode, option)


@pytest.mark.parametrize("link", [".", "storm"], ids=["DIR", "DIR/storm"])
def test_make_chains_onto_a_dangling_link_is_one_line_and_writes_nothing_through_it(
    tmp_path: Path, link: str
) -> None:
    # Before: DIR a dangling link made its target and wrote the chains there (exit 0), and a
    # chain name left as a dangling link was a traceback.
    target = tmp_path / "nowhere" / "chains"
    place = tmp_path / "out"
    if link == ".":
        place.symlink_to(target)
    else:
        place.mkdir()
        (place / link).symlink_to(target)
    before = tree_state(tmp_path)
    proc = subprocess.run(
        [sys.executable, str(MAKE_CHAINS), str(place)],
        capture_output=True,
        text=True,
        timeout=WALL,
        check=False,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)},
    )
    assert proc.returncode != 0, proc
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    named = place if link == "." else place / link
    assert proc.stderr.startswith("make_chains.py: ") and str(named) in proc.stderr
    assert not os.path.lexists(target)
    assert_unchanged(before, tmp_path)
