"""Files followed out of the session: whoever can write a session, chain or pools directory must
not make nvrx read another user's file into an output, nor write to it. Each test failed
before its fix."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ..conftest import SCORE_DEMO
from .harness import (
    Result,
    assert_bad_input,
    assert_no_traceback,
    assert_unchanged,
    run_nvrx,
    tree_state,
)
from .inputs import session_with_two

WALL = 20.0
TORN = b'{"event": "submitted", "index": 0, "jo'  # a write a crash cut short


def refused(result: Result, *needles: str) -> None:
    """Exit 2, its last stderr line the error naming every needle (a warning about the torn
    line may come first), no traceback."""
    assert_no_traceback(result)
    assert result.code == 2, result.describe()
    last = result.stderr.splitlines()[-1]
    assert last.startswith("nvrx: error: "), result.describe()
    for needle in needles:
        assert needle in last, result.describe()


def reanalyze(session: Path, home: Path, *extra: str) -> Result:
    return run_nvrx(
        "inject-loop", "--reanalyze", str(session), *extra,
        cwd=home, wall=WALL,
    )  # fmt: skip


def test_a_torn_file_that_is_a_symlink_appends_nothing_to_what_it_points_at(
    tmp_path: Path, home: Path
) -> None:
    session = session_with_two(tmp_path / "runs")
    victim = home / ".bashrc"
    victim.write_text("# the user's own file\n")
    (session / "journal.jsonl.torn").symlink_to(victim)
    journal = session / "journal.jsonl"
    with journal.open("ab") as f:
        f.write(TORN)
    before = journal.read_bytes()
    proc = reanalyze(session, home)
    refused(proc, "journal.jsonl.torn", "not a regular file")
    assert victim.read_text() == "# the user's own file\n"
    assert journal.read_bytes() == before  # nothing appended, nothing cut


def test_a_journal_that_is_a_symlink_is_never_appended_to(tmp_path: Path, home: Path) -> None:
    session = session_with_two(tmp_path / "runs")
    elsewhere = home / "notes.jsonl"
    (session / "journal.jsonl").rename(elsewhere)
    (session / "journal.jsonl").symlink_to(elsewhere)
    before = elsewhere.read_bytes()
    proc = reanalyze(session, home)
    refused(proc, "journal.jsonl")
    assert elsewhere.read_bytes() == before


def test_a_torn_file_that_is_a_fifo_or_a_directory_stops_the_append_at_once(
    tmp_path: Path, home: Path
) -> None:
    for kind in ("fifo", "dir"):
        session = session_with_two(tmp_path / kind)
        torn = session / "journal.jsonl.torn"
        os.mkfifo(torn) if kind == "fifo" else torn.mkdir()
        with (session / "journal.jsonl").open("ab") as f:
            f.write(TORN)
        before = tree_state(session)
        proc = reanalyze(session, home)
        refused(proc, "journal.jsonl.torn", "not a regular file")
        assert tree_state(session)["journal.jsonl"] == before["journal.jsonl"]


def test_a_torn_tail_longer_than_a_megabyte_moves_whole(tmp_path: Path, home: Path) -> None:
    session = session_with_two(tmp_path / "runs")
    journal = session / "journal.jsonl"
    tail = b'{"event": "analysed", "notes": "' + b"x" * (3 << 20)  # 3 MiB, no newline
    recorded = journal.read_bytes()
    with journal.open("ab") as f:
        f.write(tail)
    proc = reanalyze(session, home)
    assert proc.code in (0, 3), proc.describe()
    assert (session / "journal.jsonl.torn").read_bytes() == tail + b"\n"
    now = journal.read_bytes()
    assert now.startswith(recorded) and now.endswith(b"\n") and b"xxxx" not in now
    again = run_nvrx("report", str(session), cwd=home, wall=WALL)
    assert again.code == 0, again.describe()


CANARY = "sk-canary-0123456789abcdefABCDEF"


def test_report_html_never_copies_a_file_an_evidence_link_leads_to(
    tmp_path: Path, home: Path
) -> None:
    session = tmp_path / "fault_injection" / SCORE_DEMO.name
    shutil.copytree(SCORE_DEMO, session)
    key_file = home / ".config" / "key"
    key_file.parent.mkdir(parents=True)
    key_file.write_text(f"{CANARY}\n")
    stripped = next(session.glob("*/analysis/stripped.log"))
    stripped.unlink()
    stripped.symlink_to(key_file)
    attribution = next(session.glob("*/analysis/log_attribution.txt"))
    attribution.unlink()
    attribution.symlink_to("/proc/self/environ")
    proc = run_nvrx(
        "report", str(session), "--html", cwd=home, wall=WALL, env={"NVRX_SECRET": CANARY}
    )
    assert proc.code == 0, proc.describe()
    page = (session / "report.html").read_text()
    assert CANARY[8:20] not in page and CANARY[8:20] not in proc.output
    # Said, not hidden: in place of each file, and (the demo's verdicts carry the digests of
    # what was judged) as a change since the judging.
    assert page.count(": leads out of ") == 2
    assert "Changed after it was judged: analysis/log_attribution.txt (leads out of" in page


def test_score_refuses_a_job_log_that_leads_out_of_the_session_without_quoting_it(
    tmp_path: Path, home: Path
) -> None:
    session = session_with_two(tmp_path / "runs")
    key_file = home / "key"
    key_file.write_text(f"{CANARY}\n")
    log = next(session.glob("*/logs/slurm/*.main_workload.log"))
    log.unlink()
    log.symlink_to(key_file)
    proc = run_nvrx("score", str(session), "--judge", "rules", cwd=home, wall=WALL)
    refused(proc, "leads out of", "job log")
    assert CANARY[8:20] not in proc.output
    # A directory the user trusts (a log dir on scratch) is named by a setting.
    allowed = run_nvrx(
        "score", str(session), "--judge", "rules", "--set", f"limits.allowed_roots={home}",
        cwd=home, wall=WALL,
    )  # fmt: skip
    assert allowed.code in (0, 1, 3), allowed.describe()


def site_scripts(root: Path, pool_column: str = "-") -> tuple[Path, list[str]]:
    """Upstream's scripts folder (a workloads.conf, a job script, pools/) and the arguments
    that list a pool of its workload."""
    scripts = root / "scripts"
    (scripts / "pools").mkdir(parents=True)
    (scripts / "job.sh").write_text("#!/bin/bash\n")
    (scripts / "workloads.conf").write_text(f"site job.sh - Site_workload {pool_column} -\n")
    return scripts, [
        "inject-loop", "--workload", "site", "--list-pool",
        "--set", f"inject.workloads_file={scripts / 'workloads.conf'}",
    ]  # fmt: skip


def test_a_pool_name_that_leads_out_of_the_pools_folder_is_refused_unquoted(
    tmp_path: Path, home: Path
) -> None:
    key = home / "key"
    key.write_text(f"{CANARY}\n")
    scripts, args = site_scripts(tmp_path)
    (scripts / "pools" / "leak.pool").symlink_to(key)
    proc = run_nvrx(*args, "--pool", "leak.pool", cwd=home, wall=WALL)
    refused(proc, "leads out of", "leak.pool")
    assert CANARY[8:20] not in proc.output


def test_a_registry_pool_column_that_walks_out_of_the_folder_is_refused(
    tmp_path: Path, home: Path
) -> None:
    key = tmp_path / "key"
    key.write_text(f"{CANARY}\n")
    _, args = site_scripts(tmp_path, pool_column="../../key")
    proc = run_nvrx(*args, cwd=home, wall=WALL)
    refused(proc, "workloads.conf line 1", "POOL_FILE must be a file name")
    assert CANARY[8:20] not in proc.output


def test_a_bad_line_of_a_pool_file_is_named_by_line_never_quoted(
    tmp_path: Path, home: Path
) -> None:
    scripts, args = site_scripts(tmp_path)
    (scripts / "pools" / "typo.pool").write_text(
        f"# ok so far\nSIGKILL:1:5:2\nSEGFAULT:0:5:2 {CANARY}\nGPU_SLEPE:1:5:2\n١:1:5:2\n"
    )
    proc = run_nvrx(*args, "--pool", "typo.pool", cwd=home, wall=WALL)
    refused(proc, "typo.pool line 3: entry 2 is not FAULT_TYPE:RANK:ITER:NODES")
    assert CANARY[8:20] not in proc.output
    (scripts / "pools" / "typo.pool").write_text("GPU_SLEPE:1:5:2\n")
    refused(run_nvrx(*args, "--pool", "typo.pool", cwd=home, wall=WALL), "line 1: entry 1 names no")
    (scripts / "pools" / "typo.pool").write_text("SIGKILL:١:5:2\n")  # an Arabic-Indic one
    refused(run_nvrx(*args, "--pool", "typo.pool", cwd=home, wall=WALL), "line 1: entry 1 is not")


def chain_with_manifest(work: Path) -> Path:
    """A chain work dir as submit-chain leaves it (its manifest) with cycle files."""
    from nvrx.chain.manifest import ChainManifest, Submitter, write_manifest

    from ..test_watch_watcher import healthy_run

    healthy_run(work)
    manifest = work / "chain.json"
    write_manifest(
        ChainManifest(
            chain_id="abcabcabc0", job_name="n", work_dir=str(work), script=str(work / "s"),
            script_sha256="0" * 64, depth=2, shape={}, submit_options={}, settings={},
            submitter=Submitter(user="u", host="h", nvrx_version="0", argv=["nvrx"], cwd="/"),
        ),
        manifest,
    )  # fmt: skip
    return manifest


def test_no_watch_output_replaces_a_manifest_a_cycle_file_or_the_state(
    tmp_path: Path, home: Path
) -> None:
    work = tmp_path / "work"
    manifest = chain_with_manifest(work)
    state = tmp_path / "state"
    base = ["watch", "--platform", "none", "--work-dir", str(work), "--state-dir", str(state)]
    assert run_nvrx(*base, cwd=home, wall=WALL).code == 0  # the state exists now
    state_file = next(state.glob("*/state.json"))
    cycle = next(work.rglob("cycle_info.*"))
    future_cycle = cycle.with_name("cycle_info.999.0.0")  # the glob's, before it exists
    before = tree_state(tmp_path)
    for output in (manifest, state_file, cycle, future_cycle):
        for flag in (["--html", str(output)], ["--junit", str(output)]):
            refused(run_nvrx(*base, *flag, cwd=home, wall=WALL), "refusing to write over an input")
        proc = run_nvrx(*base, "--set", f"watch.prom_file={output}", cwd=home, wall=WALL)
        refused(proc, "refusing to write over an input")
    fleet = run_nvrx(
        "watch", "--platform", "none", "--fleet", str(work), "--state-dir", str(state),
        "--set", f"watch.prom_file={cycle}", cwd=home, wall=WALL,
    )  # fmt: skip
    refused(fleet, "refusing to write over an input")
    after = tree_state(tmp_path)
    for name in (manifest, cycle):
        key = str(name.relative_to(tmp_path))
        assert after[key] == before[key]
    assert not future_cycle.exists()


def test_watch_log_is_never_appended_through_a_link_or_into_a_fifo(
    tmp_path: Path, home: Path
) -> None:
    from ..test_watch_watcher import healthy_run

    work, state = tmp_path / "work", tmp_path / "state"
    healthy_run(work)
    base = ["watch", "--platform", "none", "--work-dir", str(work), "--state-dir", str(state)]
    assert run_nvrx(*base, cwd=home, wall=WALL).code == 0
    (log,) = state.glob("*/watch.log")
    victim = home / ".bashrc"
    victim.write_text("# mine\n")
    for swap in ("link", "fifo"):
        log.unlink()
        log.symlink_to(victim) if swap == "link" else os.mkfifo(log)
        refused(run_nvrx(*base, cwd=home, wall=WALL), "watch.log", "not a regular file")
    assert victim.read_text() == "# mine\n"


def test_a_checkpoint_file_linked_out_of_the_work_dir_is_refused_unless_its_root_is_named(
    tmp_path: Path, home: Path
) -> None:
    import json

    from ..test_watch_watcher import healthy_run

    work = tmp_path / "work"
    healthy_run(work)
    (ckpt,) = work.rglob("latest_checkpointed_iteration.txt")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "latest_checkpointed_iteration.txt").write_text("400\n")
    ckpt.unlink()
    ckpt.symlink_to(scratch / "latest_checkpointed_iteration.txt")
    base = ["watch", "--platform", "none", "--work-dir", str(work), "--json"]
    proc = run_nvrx(*base, "--state-dir", str(tmp_path / "s1"), cwd=home, wall=WALL)
    got = json.loads(proc.stdout)["snapshot"]["checkpoint"]
    assert got["value"] is None and "leads out of" in got["error"], proc.describe()
    allowed = run_nvrx(
        *base, "--state-dir", str(tmp_path / "s2"), "--set", f"limits.allowed_roots={scratch}",
        cwd=home, wall=WALL,
    )  # fmt: skip
    assert json.loads(allowed.stdout)["snapshot"]["checkpoint"]["value"] == 400, allowed.describe()


@pytest.mark.parametrize("roots", ["['']", "['  ']", "[scratch]", "['/']", "['/tmp/..']"])
def test_an_allowed_root_must_name_a_directory_not_where_the_command_runs(
    tmp_path: Path, home: Path, roots: str
) -> None:
    # '' resolved to the working directory: run from $HOME, report.html copied in a file of
    # the home directory that a session's link led to.
    session = session_with_two(tmp_path / "runs")
    config = tmp_path / "nvrx.yaml"
    config.write_text(f"limits:\n  allowed_roots: {roots}\n")
    before = tree_state(session)
    proc = run_nvrx(
        "report", str(session), "--html", cwd=home, env={"NVRX_CONFIG": str(config)}, wall=20
    )
    assert_bad_input(proc, "limits.allowed_roots")
    assert_unchanged(before, session)
