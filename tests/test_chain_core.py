"""submit-chain's pure core: the array shape, the pre-flight checks and the rendered script."""

import hashlib
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from nvrx.chain.script import FaultKnobs, effective_faults, fault_warning, render_script
from nvrx.chain.shape import PROFILES, ArrayShape, ChainError, batch_sizes, check_work_dir
from nvrx.config import ChainSettings, ConfigError, load_config


def test_the_default_shape_is_the_upstream_one() -> None:
    shape = ArrayShape(
        train_tasks=1, hot_spares=1, cold_spares=3, nodes_per_task=1, gpus_per_node=4
    )
    assert (shape.active, shape.total, shape.array_spec) == (2, 5, "0-4%2")
    assert (shape.nnodes, shape.world_size) == ("1:2", 4)


def test_the_reference_example() -> None:
    # 32 training tasks, 2 hot, 8 cold, 1 node per task, 4 GPUs: --array=0-41%34, 32:34, 128 GPUs
    shape = ArrayShape(32, 2, 8, 1, 4)
    assert (shape.array_spec, shape.nnodes, shape.world_size) == ("0-41%34", "32:34", 128)


def test_hot_spares_never_enlarge_the_world_and_nodes_per_task_scale_the_range() -> None:
    shape = ArrayShape(
        train_tasks=2, hot_spares=3, cold_spares=0, nodes_per_task=2, gpus_per_node=8
    )
    assert (shape.min_nodes, shape.max_nodes, shape.world_size) == (4, 10, 32)
    assert shape.array_spec == "0-4%5"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"train_tasks": 0}, "train tasks must be at least 1, got 0"),
        ({"cold_spares": -1}, "cold spares must be >= 0, got -1"),
        ({"nodes_per_task": 0}, "nodes per task must be at least 1, got 0"),
    ],
)
def test_bad_shapes_name_the_value(kwargs: dict[str, int], match: str) -> None:
    base = {
        "train_tasks": 1,
        "hot_spares": 1,
        "cold_spares": 3,
        "nodes_per_task": 1,
        "gpus_per_node": 4,
    }
    with pytest.raises(ChainError, match=match):
        ArrayShape(**{**base, **kwargs})


def test_max_array_size_bounds_the_pool() -> None:
    shape = ArrayShape(4, 1, 10, 1, 4)
    shape.check_max_array_size(15)
    with pytest.raises(ChainError, match="15 array tasks exceed the cluster's MaxArraySize 14"):
        shape.check_max_array_size(14)


def test_segment_must_divide_the_training_nodes() -> None:
    shape = ArrayShape(6, 0, 0, 1, 4)
    shape.check_segment(3)
    shape.check_segment(None)
    with pytest.raises(ChainError, match="segment 4 does not divide the 6 training nodes"):
        shape.check_segment(4)


def test_global_batch_divisibility_by_micro_times_data_parallel() -> None:
    assert batch_sizes(PROFILES["small"], 8, None, None) == (1, 8)
    assert batch_sizes(PROFILES["8b"], 8, None, None) == (1, 16)  # 2 x world, as upstream
    with pytest.raises(ChainError, match="global batch size 6 is not divisible by micro batch 4"):
        batch_sizes(PROFILES["small"], 8, 4, 6)
    tp2 = replace(PROFILES["8b"], tensor_parallel=2)
    with pytest.raises(ChainError, match="world size 5 is not a multiple of tensor × pipeline"):
        batch_sizes(tp2, 5, None, None)


@pytest.mark.parametrize("place", ["/tmp/run", "/var/tmp/run", "/dev/shm/run"])
def test_node_local_work_dirs_are_refused(place: str) -> None:
    with pytest.raises(ChainError, match=f"work dir {place} looks node-local"):
        check_work_dir(Path(place))


def test_a_link_into_a_node_local_dir_is_refused_too(tmp_path: Path, shared_dir: Path) -> None:
    link = shared_dir / "run"
    link.symlink_to(tmp_path)
    with pytest.raises(ChainError, match="looks node-local"):
        check_work_dir(link)
    assert check_work_dir(shared_dir / "real") == shared_dir / "real"


def render(**overrides: object) -> str:
    chain = load_config(
        environ={}, cli={f"chain.{k}": (v, "t") for k, v in overrides.items()}
    ).config.chain
    return render_script(
        chain,
        ArrayShape(2, 1, 1, 1, 4),
        chain_id="c0ffee1234",
        work_dir="/shared/it's here",
        job_name="nvrx_singleton-c0ffee1234",
        nvrx_version="0.1.0",
    )


def header_values(script: str, *names: str) -> dict[str, str]:
    """Run the rendered settings in bash and read the values back: quoting is checked by the
    shell itself."""
    header = script.split(
        "# -----------------------------------------------------------------------------------------",
        1,
    )[0]
    probe = header + "\n" + "\n".join(f'printf "%s=%s\\n" {n} "${{{n}[*]}}"' for n in names)
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def test_the_header_carries_every_value_exactly_through_the_shell() -> None:
    script = render(
        train_command=["./worker.py", "--note", "two words; $(not run) `no`"],
        launcher="/opt/rehearsal/ft_launcher.py --verbose",
        extra_env={"HF_HOME": "/cache/$USER dir"},
        health_check_endpoint="http://localhost:1234/h?x=1&y=2",
    )
    values = header_values(
        script,
        "NVRX_WORK_DIR",
        "NVRX_TRAIN_COMMAND",
        "NVRX_LAUNCHER",
        "HF_HOME",
        "NVRX_HEALTH_CHECK_ENDPOINT",
        "NVRX_ACTIVE_TASKS",
        "NVRX_TRAIN_TASKS",
        "NVRX_CHAIN_ID",
    )
    assert values["NVRX_WORK_DIR"] == "/shared/it's here"
    assert values["NVRX_TRAIN_COMMAND"] == "./worker.py --note two words; $(not run) `no`"
    assert values["NVRX_LAUNCHER"] == "/opt/rehearsal/ft_launcher.py --verbose"
    assert values["HF_HOME"] == "/cache/$USER dir"
    assert values["NVRX_HEALTH_CHECK_ENDPOINT"] == "http://localhost:1234/h?x=1&y=2"
    assert (values["NVRX_TRAIN_TASKS"], values["NVRX_ACTIVE_TASKS"]) == ("2", "3")
    assert values["NVRX_CHAIN_ID"] == "c0ffee1234"


def test_the_script_is_a_singleton_no_requeue_generation_with_the_trap_first() -> None:
    script = render()
    for directive in ("--dependency=singleton", "--no-requeue", "--exclusive", "--mem=0"):
        assert f"#SBATCH {directive}" in script
    body = script[script.index("set -uo pipefail") :]
    assert body.index("trap teardown EXIT") < body.index('nvrx_mkdir "$NVRX_CONTROL" "this task')
    assert body.index("trap teardown EXIT") < body.index('publish "$NVRX_CONTROL/rdzv_host"')
    gate = body[body.index("# The gate") :]
    assert gate.index("rdzv_closed") < gate.index("rdzv_host")
    # the generation cancels itself last, after the chain
    teardown = body[body.index("teardown() {") : body.index("# A signal to the batch shell")]
    assert teardown.index("cancel_chain") < teardown.index('scancel "$NVRX_JOB_ID"')


def test_the_demo_modes() -> None:
    assert effective_faults(ChainSettings()) == FaultKnobs(False, "", None)  # nothing by default
    demo = effective_faults(ChainSettings(no_restart_demo=True, inject_gpu_failure="1:0"))
    assert demo == FaultKnobs(True, "", 1)
    handoff = effective_faults(ChainSettings(fault_inject=True, inject_gpu_failure="1:0,2:0"))
    assert handoff == FaultKnobs(True, "1:0,2:0", None)


def test_the_fault_warning_names_each_fault_and_its_source() -> None:
    def settings(**values: object) -> dict[str, dict[str, object]]:
        rows = {f"chain.{k}": {"value": v, "source": "default"} for k, v in
                ChainSettings().model_dump(mode="json").items()}  # fmt: skip
        for key, value in values.items():
            rows[f"chain.{key}"] = {"value": value, "source": "file site.yaml"}
        return rows

    assert fault_warning(settings()) is None
    line = fault_warning(settings(fault_inject=True, inject_gpu_failure="1:0"))
    assert line is not None and "\n" not in line
    assert line.startswith("WARNING: this chain injects faults into itself: ")
    assert "a workload fault, async_exc on rank 2 60 s into the cycle" in line
    assert "(chain.fault_inject, file site.yaml)" in line
    assert "GPU failures at cycle:rank 1:0 (chain.inject_gpu_failure, file site.yaml)" in line
    demo = fault_warning(settings(no_restart_demo=True))
    assert (
        demo is not None and "the no-restart demo (chain.no_restart_demo, file site.yaml)" in demo
    )
    assert "exits 93 after one cycle" in demo
    # An old manifest without the demo's key still gets its faults named.
    old = settings(fault_inject=True)
    del old["chain.no_restart_demo"]
    assert "workload fault" in (fault_warning(old) or "")


def test_bad_extra_env_names_are_refused() -> None:
    with pytest.raises(ChainError, match="invalid extra_env variable name 'A-B'"):
        render(extra_env={"A-B": "x"})


def test_the_rendered_script_is_shellcheck_clean(tmp_path: Path) -> None:
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is required (apt-get install shellcheck; .ci/run installs it)")
    for overrides in (
        {},
        {"train_command": ["/x/worker.py"], "container_image": "nvcr.io/x:1"},
        {"train_command": ["/x/worker.py"], "one_host_rehearsal": True},
    ):
        path = tmp_path / "gen.sbatch"
        path.write_text(render(**overrides))
        proc = subprocess.run(
            ["shellcheck", "-s", "bash", str(path)], capture_output=True, text=True, check=False
        )
        assert proc.returncode == 0, proc.stdout


# --- the one-host rehearsal (docs/submit-chain.md, "Rehearsing with NVRx's own launcher") -----

# What nvrx rendered for these configs before chain.one_host_rehearsal existed (sha256 of the
# script). A chain that does not rehearse on one host must get exactly that script: a real
# cluster must not run a line of the rehearsal, and an operator who compared the script of
# the last release finds nothing new to read.
SCRIPTS_BEFORE_THE_REHEARSAL: dict[str, tuple[dict[str, object], ArrayShape, str]] = {
    "defaults": (
        {},
        ArrayShape(1, 1, 3, 1, 4),
        "a3a0679720f0118a4ae19f37881b1452c0108339f595261befef63014de37644",
    ),
    "the rehearsal example": (
        {
            "launcher": ["/repo/examples/rehearsal/ft_launcher.py"],
            "train_command": ["/repo/examples/rehearsal/worker.py", "--step-seconds", "0.2"],
            "no_restart_demo": True, "fault_ranks": "1", "fault_delay": 5, "save_interval": 5,
            "join_timeout": 120, "store_connect_wait": 60, "rdzv_host_wait": 60,
        },
        ArrayShape(2, 1, 1, 1, 2),
        "86cfde173075b37b10c7ba0d803d55b0a54b2e71d48224bb9662a93c5289931c",
    ),
    "a container, no spares": (
        {
            "container_image": "nvcr.io/x:1", "container_mounts": "/lustre:/lustre,/scratch",
            "model_profile": "8b", "segment": None,
        },
        ArrayShape(4, 0, 0, 2, 8),
        "5dfca39d95256086c1fe10a0f23be2010fcbf70f07af1a6b5fbbd439a0fd32dc",
    ),
    "every fault and knob": (
        {
            "fault_inject": True, "fault_ranks": "0,3", "inject_gpu_failure": "1:0,2:1",
            "max_no_progress_cycles": 2, "health_check_endpoint": "http://localhost:1234/h",
            "drain_poll": "on", "drain_poll_interval": 5, "extra_env": {"HF_HOME": "/cache/x"},
            "log_debug": False, "rdzv_port": 31000,
        },
        ArrayShape(2, 2, 4, 1, 4),
        "dc2277204c74c52e1bb18edde95eda92d3437e52f9c197113738e46fdc9ded3d",
    ),
}  # fmt: skip


def render_with(overrides: dict[str, object], shape: ArrayShape) -> str:
    chain = load_config(
        environ={}, cli={f"chain.{k}": (v, "t") for k, v in overrides.items()}
    ).config.chain
    return render_script(
        chain,
        shape,
        chain_id="c0ffee1234",
        work_dir="/shared/run",
        job_name="nvrx_singleton-c0ffee1234",
        nvrx_version="0.1.0",
    )


@pytest.mark.parametrize("case", sorted(SCRIPTS_BEFORE_THE_REHEARSAL))
def test_a_chain_that_does_not_rehearse_on_one_host_gets_the_script_it_got_before(
    case: str,
) -> None:
    overrides, shape, before = SCRIPTS_BEFORE_THE_REHEARSAL[case]
    script = render_with({**overrides, "one_host_rehearsal": False}, shape)
    assert hashlib.sha256(script.encode("utf-8")).hexdigest() == before
    assert "one-host" not in script and "127.0.0.1" not in script


def test_the_one_host_rehearsal_only_adds_its_own_marked_lines() -> None:
    overrides, shape, _ = SCRIPTS_BEFORE_THE_REHEARSAL["the rehearsal example"]
    off = render_with(overrides, shape)
    on = render_with({**overrides, "one_host_rehearsal": True}, shape)
    blocks = re.findall(r"^ *# >>> one-host rehearsal\n.*?^ *# <<< one-host rehearsal\n", on,
                        flags=re.MULTILINE | re.DOTALL)  # fmt: skip
    assert len(blocks) >= 5
    stripped = on.replace("NVRX_ONE_HOST_PORTS=1000\n", "", 1)
    for block in blocks:
        stripped = stripped.replace(block, "", 1)
    assert stripped == off
    prose = " ".join(line.strip(" #") for line in on.splitlines() if line.lstrip().startswith("#"))
    assert "A real cluster, one launcher per node, needs none of it." in prose
    assert "a real cluster needs none of this" in on  # the job log says it too


def test_the_one_host_rehearsal_needs_room_above_the_rendezvous_port() -> None:
    # Each generation takes two ports in rdzv_port .. rdzv_port + 999, by its job id.
    assert load_config(environ={}, cli={"chain.rdzv_port": (65000, "t")}).config.chain
    cli = {"chain.rdzv_port": (65000, "t"), "chain.one_host_rehearsal": (True, "t")}
    with pytest.raises(ConfigError, match=r"chain\.rdzv_port.*65000.*use at most 64536"):
        load_config(environ={}, cli=cli)
    cli["chain.rdzv_port"] = (64536, "t")
    assert load_config(environ={}, cli=cli).config.chain.one_host_rehearsal
