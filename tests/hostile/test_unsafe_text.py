"""Wrong answers and unsafe text (issue 26, family 5): what a completion puts on a command line,
what --install-completion writes into, numbers written in other scripts, values read twice.
Each is a regression that fails on main 9b81a23."""

from __future__ import annotations

import os
from pathlib import Path

from .harness import assert_bad_input, run_nvrx

WALL = 20.0


def test_completion_never_offers_a_name_the_shell_would_run(tmp_path: Path, home: Path) -> None:
    scripts = tmp_path / "scripts"
    (scripts / "pools").mkdir(parents=True)
    (scripts / "job.sh").write_text("#!/bin/bash\n")
    (scripts / "workloads.conf").write_text("site job.sh - Site - -\n")
    for name in ("$(touch PWNED).pool", "`id`.pool", "a;b.pool", "ok.pool"):
        (scripts / "pools" / name).write_text("SIGKILL:1:5:2\n")
    (home / "nvrx.yaml").write_text(
        f"inject:\n  workload: site\n  workloads_file: {scripts / 'workloads.conf'}\n"
    )
    proc = run_nvrx(
        cwd=home, wall=WALL,
        env={"_NVRX_COMPLETE": "complete_bash", "COMP_WORDS": "nvrx inject-loop --pool ",
             "COMP_CWORD": "3"},
    )  # fmt: skip
    offered = proc.stdout.split()
    assert "ok.pool" in offered and "quick" in offered, proc.describe()
    assert not [w for w in offered if set(w) & set("$`;()|&<> ")], proc.describe()


def test_install_completion_never_writes_into_a_fifo(home: Path) -> None:
    os.mkfifo(home / ".bashrc")
    proc = run_nvrx("--install-completion", "bash", cwd=home, wall=WALL)
    assert_bad_input(proc, ".bashrc", "not a regular file")
