"""`nvrx submit-chain` without a cluster: dry runs, refusals and the manifest file."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvrx.chain.manifest import (
    ChainManifest,
    GenerationRecord,
    Submitter,
    read_manifest,
    write_manifest,
)
from nvrx.chain.shape import ChainError
from nvrx.config import ENV_NAMES

from .cli_runner import clean_environ, slurm_settings
from .cli_runner import nvrx as nvrx_in_process


def nvrx(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = clean_environ({"HOME": str(cwd), **slurm_settings(cwd)})
    return nvrx_in_process(*args, env=env, cwd=cwd)


def sbatch(cwd: Path) -> str:
    """How the dry runs of `nvrx(..., cwd=cwd)` name sbatch: on PATH, or in their bin_dir."""
    return os.path.join(slurm_settings(cwd).get("NVRX_SLURM_BIN_DIR", ""), "sbatch")


REPO = Path(__file__).resolve().parents[1]
REHEARSAL = ["--launcher", "/bin/true", "--set", "chain.train_command=/bin/true"]


def test_dry_run_prints_every_generation_and_writes_nothing(shared_dir: Path) -> None:
    work = shared_dir / "run"
    proc = nvrx(
        "submit-chain",
        "--dry-run",
        "--work-dir",
        str(work),
        "-K",
        "3",
        "--train-tasks",
        "2",
        "--hot-spares",
        "1",
        "--cold-spares",
        "1",
        *REHEARSAL,
        "--",
        "--begin=now+60",
        cwd=shared_dir,
    )
    assert proc.returncode == 0, proc.stderr
    planned = [
        ln for ln in proc.stdout.splitlines() if ln.startswith(f"[dry-run] {sbatch(shared_dir)} ")
    ]
    assert len(planned) == 3
    for index, line in enumerate(planned):
        for flag in (
            "--array=0-3%3",
            "--dependency=singleton",
            "--no-requeue",
            "--exclusive",
            "--mem=0",
            "--gpus-per-node=4",
            "--nodes=1",
            "--begin=now+60",
        ):
            assert flag in line, (flag, line)
        assert f"gen={index}'" in line
        assert line.endswith(str(work / "nvrx_singleton_array.sbatch"))
    assert "Launcher: --nnodes 2:3; world size 8 GPUs" in proc.stdout
    assert not work.exists()


def test_the_dry_run_summary_counts_in_the_right_number(shared_dir: Path) -> None:
    """`1 generation`, `2 generations`: every count of the summary agrees with its noun."""
    base = ["submit-chain", "--dry-run", "--work-dir", str(shared_dir / "w"), *REHEARSAL]
    one = nvrx(*base, "-K", "1", "--train-tasks", "2", "--hot-spares", "1", "--cold-spares",
               "1", "--nodes-per-task", "1", cwd=shared_dir)  # fmt: skip
    assert one.returncode == 0, one.stderr
    assert ": 1 generation of " in one.stdout
    assert "(2 train + 1 hot spare running, 1 cold spare pending; 1 node per task)" in one.stdout
    assert "Drain poller: on (auto: 2 spare tasks can take a drained task's place" in one.stdout
    many = nvrx(*base, "-K", "2", "--train-tasks", "1", "--hot-spares", "0", "--cold-spares",
                "1", "--nodes-per-task", "2", cwd=shared_dir)  # fmt: skip
    assert many.returncode == 0, many.stderr
    assert ": 2 generations of " in many.stdout
    assert "(1 train + 0 hot spares running, 1 cold spare pending; 2 nodes per task)" in many.stdout
    assert "Drain poller: on (auto: 1 spare task can take a drained task's place" in many.stdout
    assert "(s)" not in one.stdout + many.stdout


def test_dry_run_json(shared_dir: Path) -> None:
    proc = nvrx(
        "submit-chain",
        "--dry-run",
        "--json",
        "--work-dir",
        str(shared_dir / "w"),
        *REHEARSAL,
        cwd=shared_dir,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["action"] == "dry-run" and doc["ok"] is True
    assert doc["shape"]["array"] == "0-4%2" and doc["shape"]["world_size"] == 4
    assert len(doc["planned_sbatch"]) == 4
    assert doc["job_name"].startswith("nvrx_singleton-")


def test_a_default_chain_prints_no_fault_warning_and_an_injecting_one_always_does(
    shared_dir: Path,
) -> None:
    base = ["submit-chain", "--dry-run", "--work-dir", str(shared_dir / "w"), *REHEARSAL]
    clean = nvrx(*base, cwd=shared_dir)
    assert clean.returncode == 0, clean.stderr
    assert "WARNING" not in clean.stdout + clean.stderr
    assert json.loads(nvrx(*base, "--json", cwd=shared_dir).stdout)["fault_warning"] is None

    faulty = [*base, "--set", "chain.fault_inject=true", "--set", "chain.inject_gpu_failure=1:0"]
    for extra in ([], ["--json"]):
        proc = nvrx(*faulty, *extra, cwd=shared_dir)
        assert proc.returncode == 0, proc.stderr
        (line,) = [ln for ln in proc.stderr.splitlines() if "WARNING" in ln]
        assert line.startswith("WARNING: this chain injects faults into itself: ")
        assert "(chain.fault_inject, cli --set chain.fault_inject)" in line
        assert "GPU failures at cycle:rank 1:0" in line
    assert json.loads(proc.stdout)["fault_warning"] == line

    # The rehearsal example opts in to upstream's no-restart demo, and says so.
    rehearsal = Path(__file__).parents[1] / "examples" / "rehearsal" / "nvrx.yaml"
    demo = nvrx(*base, "--config", str(rehearsal), cwd=shared_dir)
    assert "the no-restart demo (chain.no_restart_demo, file " in demo.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--work-dir", "/tmp/x"], "work dir /tmp/x looks node-local"),
        (["--train-tasks", "0"], "chain.train_tasks: '0'"),
        (["-K", "0"], "chain.depth: '0'"),
        (["--job-name", "my chain"], "chain.job_name: 'my chain'"),
        (["--time-limit", "soon"], "chain.time_limit: 'soon'"),
        (
            ["--set", "chain.segment=3", "--train-tasks", "2"],
            "segment 3 does not divide the 2 training nodes",
        ),
        (["--dry-run", "--extend"], "choose one of"),
        (["--time-limit", "0"], "zero (write UNLIMITED for none)"),
        (["--launcher", 'a "b'], "chain.launcher"),
        (
            ["--set", 'chain.extra_env={"NVRX_CHAIN_ID": "x"}'],
            "extra_env may not set NVRX_CHAIN_ID",
        ),
        (["--work-dir", "/etc/passwd/run"], "/etc/passwd"),
    ],
)
def test_bad_input_is_one_line_naming_the_value(
    shared_dir: Path, args: list[str], message: str
) -> None:
    proc = nvrx("submit-chain", "--dry-run", *REHEARSAL, *args, cwd=shared_dir)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert message in proc.stderr


def test_a_missing_megatron_on_bare_metal_is_refused_but_a_dry_run_still_previews(
    shared_dir: Path,
) -> None:
    # A login node often has no Megatron checkout: the dry run shows its plan with a note.
    base = ["submit-chain", "--work-dir", str(shared_dir / "w"), "--launcher", "/bin/true"]
    missing = ["--set", "chain.megatron_path=/nowhere"]
    preview = nvrx(*base, "--dry-run", *missing, cwd=shared_dir)
    assert preview.returncode == 0, preview.stderr
    assert "nvrx: note: bare metal run but /nowhere/pretrain_gpt.py not found" in preview.stderr
    assert "(a submission refuses this)" in preview.stderr
    assert "[dry-run] " in preview.stdout
    proc = nvrx(*base, *missing, cwd=shared_dir)
    assert proc.returncode == 2
    assert proc.stderr.startswith("nvrx: error: bare metal run but /nowhere/pretrain_gpt.py")
    assert not (shared_dir / "w").exists()


def test_extend_without_a_manifest_says_so(shared_dir: Path) -> None:
    proc = nvrx("submit-chain", "--extend", "--work-dir", str(shared_dir), cwd=shared_dir)
    assert proc.returncode == 2
    assert f"no chain manifest at {shared_dir}/chain.json" in proc.stderr


def manifest(work: Path) -> ChainManifest:
    return ChainManifest(
        chain_id="abcabcabc0",
        job_name="n",
        work_dir=str(work),
        script=str(work / "s"),
        script_sha256="0" * 64,
        depth=2,
        shape={},
        submit_options={},
        settings={},
        submitter=Submitter(user="u", host="h", nvrx_version="0", argv=["nvrx"], cwd="/"),
    )


def test_the_manifest_round_trips_and_is_replaced_atomically(shared_dir: Path) -> None:
    path = shared_dir / "chain.json"
    m = manifest(shared_dir)
    write_manifest(m, path)
    from nvrx.chain.manifest import utcnow

    m.generations.append(GenerationRecord(index=0, job_id="11", comment="c", submitted_at=utcnow()))
    write_manifest(m, path)
    again = read_manifest(path)
    assert again.job_ids == ["11"] and again.next_index() == 1
    assert sorted(p.name for p in shared_dir.iterdir()) == ["chain.json"]  # no temp files left


def test_a_broken_manifest_is_a_clear_error(shared_dir: Path) -> None:
    path = shared_dir / "chain.json"
    path.write_text('{"chain_id": 1}')
    with pytest.raises(ChainError, match="chain manifest .* is invalid at"):
        read_manifest(path)
    path.write_text("{")
    with pytest.raises(ChainError, match="cannot read chain manifest"):
        read_manifest(path)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("chain_id", "../../etc"),  # would move the watcher's state and the retired manifest
        ("job_name", "a b;rm"),
        ("depth", 0),
    ],
)
def test_a_manifest_with_a_value_nvrx_never_writes_is_refused(
    shared_dir: Path, field: str, value: object
) -> None:
    path = shared_dir / "chain.json"
    doc = json.loads(manifest(shared_dir).model_dump_json())
    doc[field] = value
    path.write_text(json.dumps(doc))
    with pytest.raises(ChainError, match=f"chain manifest .* is invalid at {field}"):
        read_manifest(path)
    doc = json.loads(manifest(shared_dir).model_dump_json())
    doc["generations"] = [
        {"index": 0, "job_id": "7;x", "comment": "c", "submitted_at": "2026-01-01T00:00:00Z"}
    ]
    path.write_text(json.dumps(doc))
    with pytest.raises(ChainError, match="is invalid at generations.0.job_id"):
        read_manifest(path)
    # A time without a zone cannot be compared with Slurm's end times (watch would crash).
    doc["generations"] = [
        {"index": 0, "job_id": "7", "comment": "c", "submitted_at": "2026-01-01T00:00:00"}
    ]
    path.write_text(json.dumps(doc))
    with pytest.raises(ChainError, match="is invalid at generations.0.submitted_at"):
        read_manifest(path)


def test_reconcile_adopts_a_generation_the_manifest_lost(shared_dir: Path) -> None:
    from nvrx.chain.submit import reconcile
    from tests.test_slurm_replay import Replay, slurm_for

    m = manifest(shared_dir)
    from nvrx.chain.manifest import utcnow

    m.generations.append(
        GenerationRecord(index=0, job_id="100", comment="c", submitted_at=utcnow())
    )
    listing = (
        "100|N/A|100|PENDING|Dependency|u|1||main|n|nvrx-chain=abcabcabc0 gen=0 nvrx-submit=x\n"
        "101|0|101|PENDING|Dependency|u|1||main|n|nvrx-chain=abcabcabc0 gen=1 nvrx-submit=y\n"
        "101|1|102|PENDING|Dependency|u|1||main|n|nvrx-chain=abcabcabc0 gen=1 nvrx-submit=y\n"
        "103|N/A|103|PENDING|Dependency|u|1||main|n|nvrx-chain=abcabcabc01 gen=1 nvrx-submit=z\n"
        "104|N/A|104|RUNNING|None|u|1|n1|main|n|(null)\n"
    )
    replay = Replay({"squeue": [(0, listing, "")]})
    notes: list[str] = []
    reconcile(m, slurm_for(replay), notes)
    assert [(g.index, g.job_id) for g in m.generations] == [(0, "100"), (1, "101")]
    assert [g.adopted for g in m.generations] == [False, True]
    # Its time is when it was adopted, not when Slurm got it: watch gives it no --extend pass.
    from nvrx.watch.resolve import from_manifest

    assert dict(from_manifest(m).chain.manifest_submitted).keys() == {"100"}
    assert notes == ["adopted generation 1 (job 101) found in the queue"]
    assert "--user=u" in replay.argvs[0] and "all" in replay.argvs[0]


def test_upstream_nvrx_dry_run_means_dry_run(shared_dir: Path) -> None:
    work = shared_dir / "w"
    env_proc = subprocess.run(
        [sys.executable, "-m", "nvrx.cli", "submit-chain", "--work-dir", str(work), *REHEARSAL],
        capture_output=True,
        text=True,
        cwd=shared_dir,
        check=False,
        env={
            **{k: v for k, v in os.environ.items() if k not in ENV_NAMES},
            "NVRX_DRY_RUN": "1",
            "HOME": str(shared_dir),
            **slurm_settings(shared_dir),
        },
    )
    assert env_proc.returncode == 0, env_proc.stderr
    assert f"[dry-run] {sbatch(shared_dir)} " in env_proc.stdout
    assert not work.exists()


@pytest.mark.parametrize("mode", ["--extend", "--cancel"])
def test_extend_and_cancel_refuse_settings_they_would_ignore(shared_dir: Path, mode: str) -> None:
    proc = nvrx(
        "submit-chain",
        mode,
        "--work-dir",
        str(shared_dir),
        "--train-tasks",
        "9",
        "--",
        "-A",
        "x",
        cwd=shared_dir,
    )
    assert proc.returncode == 2
    assert f"{mode} does not take --train-tasks, -- ARGS" in proc.stderr


def test_a_dry_run_asks_a_silent_controller_once_per_check_and_says_what_it_skipped(
    shared_dir: Path,
) -> None:
    # The controller does not answer (the clients say so, as transient errors): a rehearsal's
    # checks are advisory, so each is one attempt and a note, not the retry deadline's wait.
    bin_dir = shared_dir / "slurm-down"
    bin_dir.mkdir()
    calls = shared_dir / "calls"
    for name in ("scontrol", "squeue"):
        stub = bin_dir / name
        stub.write_text(
            "#!/bin/sh\n"
            f'echo {name} >> "{calls}"\n'
            f'echo "{name}: error: Unable to contact slurm controller (connect failure)" >&2\n'
            "exit 1\n"
        )
        stub.chmod(0o755)
    env = clean_environ({"HOME": str(shared_dir), "NVRX_SLURM_BIN_DIR": str(bin_dir)})
    proc = nvrx_in_process(
        "submit-chain", "--dry-run", "--work-dir", str(shared_dir / "chain"), "-K", "2",
        *REHEARSAL, "--set", "slurm.retry_deadline=6", env=env, cwd=shared_dir,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert sorted(calls.read_text().split()) == ["scontrol", "squeue"]  # one attempt each
    assert "MaxArraySize not checked" in proc.stdout + proc.stderr
    assert "could not check for live jobs named" in proc.stdout + proc.stderr


def test_a_shared_environment_name_blocks_a_chain_only_where_the_chain_reads_it(
    shared_dir: Path,
) -> None:
    # GNU time's TIME=%e is upstream's inject.time_limit, which a chain never reads: it neither
    # blocks submit-chain nor draws a warning. PARTITION is slurm.partition, which every
    # generation is submitted with: as strict as ever.
    base = ["submit-chain", "--dry-run", "--work-dir", str(shared_dir / "w"), *REHEARSAL]
    env = clean_environ({"HOME": str(shared_dir), **slurm_settings(shared_dir), "TIME": "%e"})
    chain = nvrx_in_process(*base, env=env, cwd=shared_dir)
    assert chain.returncode == 0, chain.stderr
    assert "TIME" not in chain.stderr
    bad = nvrx_in_process(*base, env={**env, "PARTITION": "a b"}, cwd=shared_dir)
    assert bad.returncode == 2
    assert "bad value for slurm.partition: 'a b' (from env PARTITION)" in bad.stderr


def test_a_fault_aimed_outside_the_world_is_refused_before_anything_runs(
    shared_dir: Path,
) -> None:
    # One training task of one node with 2 GPUs: ranks 0-1. Rank 2 would never fault, and
    # the warning would say the chain stops after one cycle while it trains on.
    base = ["submit-chain", "--dry-run", "--work-dir", str(shared_dir / "w"), *REHEARSAL]
    shape = ["--train-tasks", "1", "--set", "slurm.gpus_per_node=2"]
    demo = ["--set", "chain.no_restart_demo=true"]
    proc = nvrx(*base, *shape, *demo, "--set", "chain.fault_ranks=2", cwd=shared_dir)
    assert proc.returncode == 2
    assert "chain.fault_ranks names rank 2, but the world has ranks 0-1" in proc.stderr
    assert "[dry-run]" not in proc.stdout
    assert (
        nvrx(*base, *shape, *demo, "--set", "chain.fault_ranks=1", cwd=shared_dir).returncode == 0
    )
    # A fault that is off aims at nothing: its rank is not checked.
    assert nvrx(*base, *shape, "--set", "chain.fault_ranks=9", cwd=shared_dir).returncode == 0
    gpu = nvrx(*base, *shape, "--set", "chain.inject_gpu_failure=1:0,2:1", cwd=shared_dir)
    assert gpu.returncode == 2
    assert "chain.inject_gpu_failure '2:1' names infra rank 1" in gpu.stderr
    bad = nvrx(*base, "--set", "chain.fault_ranks=two", cwd=shared_dir)
    assert bad.returncode == 2 and "bad value for chain.fault_ranks: 'two'" in bad.stderr


def test_every_shape_of_the_rehearsal_demo_can_fault() -> None:
    # The README's demo chain: its fault rank exists in the smallest world it can have.
    import yaml

    rehearsal = yaml.safe_load((REPO / "examples" / "rehearsal" / "nvrx.yaml").read_text())
    ranks = [int(r) for r in str(rehearsal["chain"]["fault_ranks"]).split(",")]
    assert max(ranks) < rehearsal["slurm"]["gpus_per_node"]  # one training node's ranks


def faulty_config(where: Path) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    path = where / "nvrx.yaml"
    path.write_text(
        "chain:\n  launcher: [/bin/true]\n  train_command: [/bin/true]\n"
        "  no_restart_demo: true\n  fault_ranks: '0'\n"
    )
    return path


def test_faults_from_a_config_file_nobody_named_are_never_submitted(shared_dir: Path) -> None:
    # `cd examples/rehearsal && nvrx submit-chain ...` picks up ./nvrx.yaml: its demo is no
    # choice of the user's. Named on the first line, refused for a real submission.
    here = shared_dir / "example"
    found = faulty_config(here)
    work = ["--work-dir", str(shared_dir / "w")]
    proc = nvrx("submit-chain", *work, cwd=here)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines[0] == (
        f"nvrx: note: reading settings from {found}, found by the search (not named by "
        "--config or NVRX_CONFIG)"
    )
    assert lines[1].startswith("WARNING: this chain injects faults into itself: the no-restart")
    assert lines[2] == (
        f"nvrx: error: chain.no_restart_demo turns fault injection on from {found}, a config "
        "file found in the search, not named: name it with --config, or pass --allow-faults to "
        "submit a chain that faults itself"
    )
    assert not (shared_dir / "w").exists()
    # A dry run shows what it would do (with both lines first); nothing is submitted anyway.
    preview = nvrx("submit-chain", *work, "--dry-run", cwd=here)
    assert preview.returncode == 0, preview.stderr
    assert preview.stderr.splitlines()[0].startswith("nvrx: note: reading settings from ")
    # Only a command that submits says where its settings came from.
    shown = nvrx("config", "show", cwd=here)
    assert shown.returncode == 0 and "reading settings" not in shown.stderr


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_the_fault_warning_is_the_first_line_whatever_comes_after(
    shared_dir: Path, extra: list[str]
) -> None:
    named = faulty_config(shared_dir / "cfg")
    proc = nvrx(
        "submit-chain", "--dry-run", "--config", str(named), "--work-dir", str(shared_dir / "w"),
        *extra, cwd=shared_dir,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith("WARNING: this chain injects faults into itself: ")


def test_a_dry_run_writes_the_script_it_would_submit_where_asked(shared_dir: Path) -> None:
    preview = shared_dir / "preview.sbatch"
    base = ["submit-chain", "--dry-run", "--work-dir", str(shared_dir / "w"), *REHEARSAL]
    proc = nvrx(*base, "--write-script", str(preview), cwd=shared_dir)
    assert proc.returncode == 0, proc.stderr
    text = preview.read_text()
    assert text.startswith("#!/bin/bash\n") and "NVRX_CHAIN_ID=" in text
    assert f"nvrx: note: wrote {preview}" in proc.stderr
    assert f"script (not written here; its text is in {preview}): " in proc.stdout
    assert not (shared_dir / "w").exists()
    doc = json.loads(nvrx(*base, "--json", cwd=shared_dir).stdout)
    assert len(doc["script_sha256"]) == 64 and doc["script_copy"] is None
    doc = json.loads(nvrx(*base, "--json", "--write-script", "copy.sbatch", cwd=shared_dir).stdout)
    assert doc["script_copy"] == str(shared_dir / "copy.sbatch")
    # Only a rehearsal writes it there (a submission writes it into the work dir), and never
    # over one of the command's inputs.
    real = nvrx("submit-chain", *REHEARSAL, "--write-script", str(preview), cwd=shared_dir)
    assert real.returncode == 2 and "--write-script writes the script a --dry-run" in real.stderr
    config = faulty_config(shared_dir / "cfg")
    before = config.read_text()
    over = nvrx(*base, "--config", str(config), "--write-script", str(config), cwd=shared_dir)
    assert over.returncode == 2 and str(config) in over.stderr
    assert config.read_text() == before


def test_the_summary_and_manifest_say_whether_the_drain_poller_runs(shared_dir: Path) -> None:
    base = ["submit-chain", "--dry-run", "--work-dir", str(shared_dir / "w"), *REHEARSAL]
    spares = nvrx(*base, cwd=shared_dir)
    assert (
        "Drain poller: on (auto: 4 spare tasks can take a drained task's place, sinfo every "
        "300 s)" in spares.stdout
    )
    alone = nvrx(*base, "--hot-spares", "0", "--cold-spares", "0", "--json", cwd=shared_dir)
    assert json.loads(alone.stdout)["drain_poller"] == (
        "off (auto: no spare task to take a drained task's place)"
    )
    forced = nvrx(*base, "--set", "chain.drain_poll=off", cwd=shared_dir)
    assert "Drain poller: off (chain.drain_poll=off)" in forced.stdout


def test_the_help_says_a_chain_with_spares_leaves_drained_nodes(shared_dir: Path) -> None:
    text = " ".join(nvrx("submit-chain", "--help", cwd=shared_dir).stdout.split())
    assert "drain poller" in text and "chain.drain_poll" in text
