"""Rendering the generation script: a header of concrete settings on a fixed body.

The body (templates/generation.sh) never changes with the settings, but for the one-host
rehearsal's marked blocks, kept only when chain.one_host_rehearsal is on; the header assigns
every knob as a shell-quoted value, so the materialised copy in the work dir is self-contained
and its path is what Slurm shows as each generation's command.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any

from nvrx.chain.shape import PROFILES, ArrayShape, ChainError, batch_sizes, drain_poll_on
from nvrx.config import ONE_HOST_PORTS, ChainSettings
from nvrx.display import counted

SCRIPT_NAME = "nvrx_singleton_array.sbatch"
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Fixed sbatch directives of every generation; nvrx also passes them on the
# command line, these keep a hand-resubmitted copy of the script a singleton generation too.
_DIRECTIVES = (
    "--ntasks-per-node=1",
    "--exclusive",
    "--mem=0",
    "--dependency=singleton",
    "--no-requeue",
)

# The Megatron-LM recipe of upstream's generation script (docs/upstream-parity.md): public
# Megatron with mock data (NullTokenizer: nothing to download), torch_dist checkpoints saved
# asynchronously and fully in parallel, the distributed optimizer, straggler logging. The
# values nvrx settings decide (parallel layout, batch sizes, samples, checkpoint cadence, exit
# duration, paths) are added by the script itself.
MEGATRON_ARGS: tuple[str, ...] = (
    "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "131072",
    "--no-create-attention-mask-in-dataloader", "--num-workers", "1",
    "--use-mcore-models", "--distributed-timeout-minutes", "10",
    "--untie-embeddings-and-output-weights", "--disable-bias-linear",
    "--position-embedding-type", "rope", "--rotary-percent", "1.0", "--normalization", "RMSNorm",
    "--attention-dropout", "0.0", "--hidden-dropout", "0.0",
    "--lr-warmup-samples", "10240", "--lr", "6e-4", "--min-lr", "6e-6",
    "--lr-decay-style", "cosine", "--weight-decay", "0.1", "--clip-grad", "1.0",
    "--adam-beta1", "0.9", "--adam-beta2", "0.95", "--bf16",
    "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
    "--manual-gc", "--eval-iters", "14", "--eval-interval", "2000",
    "--log-interval", "20", "--log-progress", "--log-throughput", "--log-energy",
    "--log-params-norm", "--log-num-zeros-in-grad", "--timing-log-option", "minmax",
    "--log-straggler", "--disable-straggler-on-startup", "--straggler-minmax-count", "16",
    "--check-weight-hash-across-dp-replicas-interval", "20000",
    "--ckpt-format", "torch_dist", "--ckpt-fully-parallel-save", "--ckpt-fully-parallel-load",
    "--ckpt-assume-constant-structure", "--async-save", "--use-persistent-ckpt-worker",
)  # fmt: skip
# The model of each profile (the parallel layout and batch sizes are in shape.PROFILES).
MODEL_ARGS: dict[str, tuple[str, ...]] = {
    # Small enough to reach a step and a checkpoint on a couple of GPUs.
    "small": (
        "--num-layers", "8", "--hidden-size", "1024", "--ffn-hidden-size", "4096",
        "--num-attention-heads", "16", "--swiglu", "--init-method-std", "0.02",
        "--seq-length", "1024", "--max-position-embeddings", "1024",
    ),
    # 8B dense.
    "8b": (
        "--num-layers", "32", "--hidden-size", "4096", "--ffn-hidden-size", "21504",
        "--num-attention-heads", "32", "--group-query-attention", "--num-query-groups", "8",
        "--kv-channels", "128", "--squared-relu", "--init-method-std", "0.014",
        "--rotary-base", "1000000", "--seq-length", "8192", "--max-position-embeddings", "8192",
        "--recompute-granularity", "selective",
    ),
}  # fmt: skip


@dataclass(frozen=True)
class FaultKnobs:
    """The fault-injection knobs after the demo mode is applied."""

    fault_inject: bool
    inject_gpu_failure: str
    max_no_progress_cycles: int | None


def effective_faults(chain: ChainSettings) -> FaultKnobs:
    """The no-restart demo forces a workload fault, no infrastructure fault, and one cycle
    without progress as the limit."""
    if chain.no_restart_demo:
        return FaultKnobs(True, "", 1)
    return FaultKnobs(chain.fault_inject, chain.inject_gpu_failure, chain.max_no_progress_cycles)


def fault_warning(settings: Mapping[str, Mapping[str, Any]]) -> str | None:
    """One line naming every fault a chain with these settings injects into itself, and the
    layer each came from; None for a chain that injects nothing. `settings` is a manifest's
    (key → {"value", "source"}), so a dry run, a submission and an extension say the same."""

    def value(key: str) -> Any:
        return (settings.get(key) or {}).get("value")

    def origin(key: str) -> str:
        return f"{key}, {(settings.get(key) or {}).get('source', 'unknown source')}"

    ranks = str(value("chain.fault_ranks"))
    rank_word = "rank" if len(ranks.replace(",", " ").split()) == 1 else "ranks"
    workload = (
        f"{value('chain.fault_types')} on {rank_word} {ranks} "
        f"{value('chain.fault_delay')} s into the cycle"
    )
    faults: list[str] = []
    if value("chain.no_restart_demo"):
        faults.append(
            f"the no-restart demo ({origin('chain.no_restart_demo')}): a workload fault "
            f"({workload}) and a progress file that never advances, so the launcher exits "
            f"{value('chain.no_restart_exit_code')} after one cycle and the chain stops"
        )
    else:
        if value("chain.fault_inject"):
            faults.append(f"a workload fault, {workload} ({origin('chain.fault_inject')})")
        if value("chain.inject_gpu_failure"):
            faults.append(
                f"GPU failures at cycle:rank {value('chain.inject_gpu_failure')} "
                f"({origin('chain.inject_gpu_failure')})"
            )
    if not faults:
        return None
    return "WARNING: this chain injects faults into itself: " + "; ".join(faults)


def _numbers(text: str) -> list[int]:
    return [int(word) for word in text.replace(",", " ").split()]


def check_fault_targets(chain: ChainSettings, shape: ArrayShape) -> None:
    """Every fault the chain injects must hit something that exists: a workload fault's ranks
    lie in the training world (0 .. world size - 1), a GPU failure's infra rank among the
    training nodes. A fault aimed past them never fires, and the chain trains on while its
    warning says it faults (the README's own demo once did)."""
    faults = effective_faults(chain)
    world = shape.world_size
    if faults.fault_inject:
        outside = [rank for rank in _numbers(chain.fault_ranks) if rank >= world]
        if outside:
            raise ChainError(
                f"chain.fault_ranks names rank {outside[0]}, but the world has ranks 0-{world - 1} "
                f"(world size {world}: {counted(shape.min_nodes, 'training node')} × "
                f"{counted(shape.gpus_per_node, 'GPU')}); the fault would never fire"
            )
    for pair in filter(None, (p.strip() for p in faults.inject_gpu_failure.split(","))):
        infra_rank = int(pair.split(":")[1])
        if infra_rank >= shape.min_nodes:
            raise ChainError(
                f"chain.inject_gpu_failure {pair!r} names infra rank {infra_rank}, but the chain "
                f"trains on {counted(shape.min_nodes, 'node')} "
                f"(infra ranks 0-{shape.min_nodes - 1}); the failure would never fire"
            )


def drain_poller_state(chain: ChainSettings, shape: ArrayShape) -> str:
    """`on` or `off`, and why, for the summary and the manifest (watch reads the first word)."""
    spares = shape.hot_spares + shape.cold_spares
    on = drain_poll_enabled(chain, shape)
    if chain.drain_poll != "auto":
        why = f"chain.drain_poll={chain.drain_poll}"
    elif on:
        why = f"auto: {counted(spares, 'spare task')} can take a drained task's place"
    else:
        why = "auto: no spare task to take a drained task's place"
    every = f", sinfo every {chain.drain_poll_interval} s" if on else ""
    return f"{'on' if on else 'off'} ({why}{every})"


def drain_poll_enabled(chain: ChainSettings, shape: ArrayShape) -> bool:
    """Whether the generation runs the drain poller (`shape.drain_poll_on`)."""
    return drain_poll_on(chain.drain_poll, shape.hot_spares + shape.cold_spares)


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
        ("NVRX_DRAIN_POLL", drain_poll_enabled(chain, shape)),
        ("NVRX_DRAIN_POLL_INTERVAL", chain.drain_poll_interval),
        ("NVRX_DRAIN_STATES", chain.drain_states),
        ("NVRX_DRAIN_TIMEOUT", chain.drain_command_timeout),
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
        ("MICRO_BATCH_SIZE", model.micro_batch_size),
        ("GLOBAL_BATCH_SIZE", model.global_batch_size),
        ("SAVE_INTERVAL", chain.save_interval),
        ("SAVE_RETAIN_INTERVAL", chain.save_retain_interval),
        ("TRAIN_SAMPLES", chain.train_samples),
        ("LR_DECAY_SAMPLES", chain.lr_decay_samples),
        ("EXIT_DURATION_IN_MINS", chain.exit_duration_in_mins),
    ]
    if chain.one_host_rehearsal:
        # The range the generation's two ports are picked from (above RDZV_PORT, by job id).
        settings.append(("NVRX_ONE_HOST_PORTS", ONE_HOST_PORTS))
    arrays = {
        "NVRX_LAUNCHER": chain.launcher,
        "NVRX_TRAIN_COMMAND": chain.train_command,
        "NVRX_MODEL_ARGS": MODEL_ARGS[chain.model_profile],
        "NVRX_MEGATRON_ARGS": MEGATRON_ARGS,
    }
    reserved = {name for name, _ in settings} | set(arrays)
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
        *(f"{name}={_array(values)}" for name, values in arrays.items()),
        *(f"export {name}={_q(value)}" for name, value in sorted(chain.extra_env.items())),
        "",
    ]
    return "\n".join(lines) + _body(one_host=chain.one_host_rehearsal)


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


# The functions first, the body that calls them last: how files are written and Slurm's clients
# run (both use them), the drain poller's, then the generation body.
TEMPLATES = ("safety.sh", "drain_poller.sh", "generation.sh")
# Lines between these two marker lines are the one-host rehearsal's (chain.one_host_rehearsal):
# rendered, markers included, only when it is on, so a chain that does not rehearse gets exactly
# the script it got before the setting existed.
ONE_HOST_BEGIN = "# >>> one-host rehearsal"
ONE_HOST_END = "# <<< one-host rehearsal"


def one_host_blocks(text: str, *, keep: bool) -> str:
    """`text` with the one-host rehearsal's blocks kept or cut out, markers and all."""
    out: list[str] = []
    inside = False
    for line in text.splitlines(keepends=True):
        marker = line.strip()
        if marker in (ONE_HOST_BEGIN, ONE_HOST_END):
            if inside != (marker == ONE_HOST_END):
                raise ValueError(f"unbalanced one-host rehearsal marker: {marker!r}")
            inside = not inside
        if keep or not (inside or marker == ONE_HOST_END):
            out.append(line)
    if inside:
        raise ValueError(f"{ONE_HOST_BEGIN!r} without {ONE_HOST_END!r}")
    return "".join(out)


def _body(*, one_host: bool) -> str:
    templates = resources.files("nvrx.chain").joinpath("templates")
    return "\n".join(
        one_host_blocks(templates.joinpath(name).read_text("utf-8"), keep=one_host)
        for name in TEMPLATES
    )


def script_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
