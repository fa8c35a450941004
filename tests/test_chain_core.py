"""submit-chain's pure core: the array shape, the pre-flight checks and the rendered script."""

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from nvrx.chain.script import FaultKnobs, effective_faults, fault_warning, render_script
from nvrx.chain.shape import PROFILES, ArrayShape, ChainError, batch_sizes, check_work_dir
from nvrx.config import ChainSettings, load_config


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
    for overrides in ({}, {"train_command": ["/x/worker.py"], "container_image": "nvcr.io/x:1"}):
        path = tmp_path / "gen.sbatch"
        path.write_text(render(**overrides))
        proc = subprocess.run(
            ["shellcheck", "-s", "bash", str(path)], capture_output=True, text=True, check=False
        )
        assert proc.returncode == 0, proc.stdout
