"""Rendering the generation script: a header of concrete settings on a fixed body.

The body (templates/generation.sh) never changes with the settings; the header assigns every
knob as a shell-quoted value, so the materialised copy in the work dir is self-contained and its
path is what Slurm shows as each generation's command.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from importlib import resources

from nvrx.chain.shape import PROFILES, ArrayShape, ChainError, batch_sizes
from nvrx.config import ChainSettings

SCRIPT_NAME = "nvrx_singleton_array.sbatch"
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Fixed sbatch directives of every generation (reference §4); nvrx also passes them on the
# command line, these keep a hand-resubmitted copy of the script a singleton generation too.
_DIRECTIVES = (
    "--ntasks-per-node=1",
    "--exclusive",
    "--mem=0",
    "--dependency=singleton",
    "--no-requeue",
)

# Megatron model sizes of nvrx's profiles (the parallel layout is in shape.PROFILES).
_MODEL_SIZES = {"small": (4, 1024, 16), "8b": (32, 4096, 32)}  # layers, hidden, heads


@dataclass(frozen=True)
class FaultKnobs:
    """The fault-injection knobs after the demo mode is applied (reference §7)."""

    fault_inject: bool
    inject_gpu_failure: str
    max_no_progress_cycles: int | None


def effective_faults(chain: ChainSettings) -> FaultKnobs:
    """The no-restart demo forces a workload fault, no infrastructure fault, and one cycle
    without progress as the limit."""
    if chain.no_restart_demo:
        return FaultKnobs(True, "", 1)
    return FaultKnobs(chain.fault_inject, chain.inject_gpu_failure, chain.max_no_progress_cycles)


def _q(value: object) -> str:
    if value is None:
        return "''"
    if isinstance(value, bool):
        return "1" if value else "0"
    return shlex.quote(str(value))


def _array(values: Sequence[str]) -> str:
    return "(" + " ".join(shlex.quote(v) for v in values) + ")"


def render_script(
    chain: ChainSettings,
    shape: ArrayShape,
    *,
    chain_id: str,
    work_dir: str,
    job_name: str,
    nvrx_version: str,
) -> str:
    """The complete generation script for these settings."""
    faults = effective_faults(chain)
    model = model_layout(chain, shape)
    layers, hidden, heads = _MODEL_SIZES[chain.model_profile]

    settings: list[tuple[str, object]] = [
        ("NVRX_CHAIN_ID", chain_id),
        ("NVRX_WORK_DIR", work_dir),
        ("NVRX_TRAIN_TASKS", shape.train_tasks),
        ("NVRX_ACTIVE_TASKS", shape.active),
        ("GPUS_PER_NODE", shape.gpus_per_node),
        ("RDZV_PORT", chain.rdzv_port),
        ("NVRX_JOIN_TIMEOUT", chain.join_timeout),
        ("NVRX_STORE_CONNECT_WAIT", chain.store_connect_wait),
        ("NVRX_RDZV_HOST_WAIT", chain.rdzv_host_wait),
        ("NVRX_MAX_RESTARTS", chain.max_restarts),
        ("NVRX_HEALTH_CHECK_ENDPOINT", chain.health_check_endpoint),
        ("NVRX_SEGMENT", chain.segment),
        ("NVRX_MAX_NO_PROGRESS_CYCLES", faults.max_no_progress_cycles),
        ("NVRX_NO_RESTART_EXIT_CODE", chain.no_restart_exit_code),
        ("NVRX_NO_RESTART_DEMO", chain.no_restart_demo),
        ("NVRX_GPUS_PER_NUMA", chain.gpus_per_numa),
        ("NVRX_LOG_DEBUG", "true" if chain.log_debug else "false"),
        ("NVRX_CONTAINER_IMAGE", chain.container_image),
        ("NVRX_CONTAINER_MOUNTS", chain.container_mounts),
        ("NVRX_FAULT_INJECT", faults.fault_inject),
        ("NVRX_FAULT_RANKS", chain.fault_ranks),
        ("NVRX_FAULT_DELAY", chain.fault_delay),
        ("NVRX_FAULT_TYPES", chain.fault_types),
        ("NVRX_INJECT_GPU_FAILURE", faults.inject_gpu_failure),
        ("MEGATRON_PATH", chain.megatron_path),
        ("TENSOR_PARALLEL", model.tensor_parallel),
        ("PIPELINE_PARALLEL", model.pipeline_parallel),
        ("NUM_LAYERS", layers),
        ("HIDDEN_SIZE", hidden),
        ("NUM_ATTENTION_HEADS", heads),
        ("MICRO_BATCH_SIZE", model.micro_batch_size),
        ("GLOBAL_BATCH_SIZE", model.global_batch_size),
        ("SAVE_INTERVAL", chain.save_interval),
        ("SAVE_RETAIN_INTERVAL", chain.save_retain_interval),
        ("TRAIN_SAMPLES", chain.train_samples),
        ("LR_DECAY_SAMPLES", chain.lr_decay_samples),
        ("EXIT_DURATION_IN_MINS", chain.exit_duration_in_mins),
    ]
    reserved = {name for name, _ in settings} | {"NVRX_LAUNCHER", "NVRX_TRAIN_COMMAND"}
    for name in chain.extra_env:
        if not _ENV_NAME_RE.match(name):
            raise ChainError(f"invalid extra_env variable name {name!r}")
        if name in reserved or name.startswith(("NVRX_", "SLURM_")):
            # The script's own settings (the chain id above all) must not be overridden.
            raise ChainError(f"extra_env may not set {name}: nvrx or Slurm sets it")

    lines = [
        "#!/bin/bash",
        f"# nvrx singleton job-array generation, chain {chain_id} ({job_name}),",
        f"# rendered by nvrx {nvrx_version} submit-chain. Slurm shows this file as each",
        "# generation's Command=; change the nvrx config and resubmit rather than editing it.",
        "# shellcheck disable=SC2089,SC2090 # settings are literal values, quotes included",
        *(f"#SBATCH {d}" for d in _DIRECTIVES),
        "",
        "# --- settings -------------------------------------------------------------------------",
        *(f"{name}={_q(value)}" for name, value in settings),
        f"NVRX_LAUNCHER={_array(chain.launcher)}",
        f"NVRX_TRAIN_COMMAND={_array(chain.train_command)}",
        *(f"export {name}={_q(value)}" for name, value in sorted(chain.extra_env.items())),
        "",
    ]
    return "\n".join(lines) + _body()


@dataclass(frozen=True)
class ModelLayout:
    """The parallel layout and batch sizes a generation trains with."""

    tensor_parallel: int
    pipeline_parallel: int
    micro_batch_size: int
    global_batch_size: int


def model_layout(chain: ChainSettings, shape: ArrayShape) -> ModelLayout:
    """The profile's layout with the settings' overrides; checked for Megatron (with a custom
    train command nvrx cannot know what the batch sizes must divide)."""
    profile = PROFILES[chain.model_profile]
    tp = chain.tensor_parallel or profile.tensor_parallel
    pp = chain.pipeline_parallel or profile.pipeline_parallel
    if chain.train_command:
        micro = chain.micro_batch_size or profile.micro_batch_size
        return ModelLayout(tp, pp, micro, chain.global_batch_size or shape.world_size)
    micro, global_ = batch_sizes(
        replace(profile, tensor_parallel=tp, pipeline_parallel=pp),
        shape.world_size,
        chain.micro_batch_size,
        chain.global_batch_size,
    )
    return ModelLayout(tp, pp, micro, global_)


def _body() -> str:
    return resources.files("nvrx.chain").joinpath("templates/generation.sh").read_text("utf-8")


def script_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
