"""The environment names of every setting: `NVRX_<SECTION>_<FIELD>`, then the upstream
variable names (one table, documented in docs/configuration.md)."""

from __future__ import annotations

from nvrx.config.model import FIELDS


def canonical_env_name(key: str) -> str:
    """`slurm.command_timeout` → `NVRX_SLURM_COMMAND_TIMEOUT`."""
    return "NVRX_" + key.replace(".", "_").upper()


# Upstream variable names (from the reference scripts) → config keys. For one key, the canonical
# NVRX_<SECTION>_<FIELD> name wins over these, and an earlier row wins over a later one.
ENV_ALIASES: tuple[tuple[str, str], ...] = (
    # Slurm / cluster
    ("ACCOUNT", "slurm.account"),
    ("PARTITION", "slurm.partition"),
    ("GPUS_PER_NODE", "slurm.gpus_per_node"),
    ("POLL_INTERVAL", "slurm.poll_interval"),
    ("SLURM_CMD_TIMEOUT", "slurm.command_timeout"),
    # submit-chain (examples/fault_tolerance/deployment/slurm)
    ("NVRX_TRAIN_TASKS", "chain.train_tasks"),
    ("NVRX_HOT_SPARES", "chain.hot_spares"),
    ("NVRX_COLD_SPARES", "chain.cold_spares"),
    ("NODES_PER_TASK", "chain.nodes_per_task"),
    ("NVRX_CHAIN_DEPTH", "chain.depth"),
    ("NVRX_TIME_LIMIT", "chain.time_limit"),
    ("NVRX_JOB_NAME", "chain.job_name"),
    ("NVRX_WORK_DIR", "chain.work_dir"),
    ("MEGATRON_PATH", "chain.megatron_path"),
    ("NVRX_MODEL_PROFILE", "chain.model_profile"),
    ("NVRX_CONTAINER_IMAGE", "chain.container_image"),
    ("NVRX_CONTAINER_MOUNTS", "chain.container_mounts"),
    ("TENSOR_PARALLEL", "chain.tensor_parallel"),
    ("PIPELINE_PARALLEL", "chain.pipeline_parallel"),
    ("MICRO_BATCH_SIZE", "chain.micro_batch_size"),
    ("GLOBAL_BATCH_SIZE", "chain.global_batch_size"),
    ("SAVE_INTERVAL", "chain.save_interval"),
    ("SAVE_RETAIN_INTERVAL", "chain.save_retain_interval"),
    ("TRAIN_SAMPLES", "chain.train_samples"),
    ("LR_DECAY_SAMPLES", "chain.lr_decay_samples"),
    ("EXIT_DURATION_IN_MINS", "chain.exit_duration_in_mins"),
    ("NVRX_DRY_RUN", "chain.dry_run"),
    ("NVRX_MAX_RESTARTS", "chain.max_restarts"),
    ("NVRX_JOIN_TIMEOUT", "chain.join_timeout"),
    ("NVRX_STORE_CONNECT_WAIT", "chain.store_connect_wait"),
    ("NVRX_RDZV_HOST_WAIT", "chain.rdzv_host_wait"),
    ("RDZV_PORT", "chain.rdzv_port"),
    ("NVRX_HEALTH_CHECK_ENDPOINT", "chain.health_check_endpoint"),
    ("NVRX_SEGMENT", "chain.segment"),
    ("NVRX_GPUS_PER_NUMA", "chain.gpus_per_numa"),
    ("NVRX_LOG_DEBUG", "chain.log_debug"),
    ("NVRX_NO_RESTART_EXIT_CODE", "chain.no_restart_exit_code"),
    ("NVRX_MAX_NO_PROGRESS_CYCLES", "chain.max_no_progress_cycles"),
    ("NVRX_NO_RESTART_DEMO", "chain.no_restart_demo"),
    ("NVRX_FAULT_INJECT", "chain.fault_inject"),
    ("NVRX_FAULT_RANKS", "chain.fault_ranks"),
    ("NVRX_FAULT_DELAY", "chain.fault_delay"),
    ("NVRX_FAULT_TYPES", "chain.fault_types"),
    ("NVRX_INJECT_GPU_FAILURE", "chain.inject_gpu_failure"),
    # inject-loop (skills/nvrx-attr/scripts)
    ("WORKLOAD", "inject.workload"),
    ("POOL", "inject.pool"),
    ("BATCH_SIZE", "inject.batch_size"),
    ("TIME", "inject.time_limit"),
    ("BASE_EXPERIMENTS_DIR", "inject.base_experiments_dir"),
    ("SBATCH_SCRIPT", "inject.sbatch_script"),
    ("FAULT_DELAY", "inject.fault_delay"),
    ("MEGATRON_REPO_HOST_PATH", "inject.megatron_repo_host_path"),
    ("CONTAINER_IMAGE", "inject.container_image"),
    ("SHARED_TMP_BASE_DIR", "inject.shared_tmp_base_dir"),
    ("WORKSPACE_HOST_PATH", "inject.workspace_host_path"),
    ("ENABLE_NFS_CACHE_STAGING", "inject.enable_nfs_cache_staging"),
    ("NFS_TRITON_CACHE", "inject.nfs_triton_cache"),
    ("NFS_INDUCTOR_CACHE", "inject.nfs_inductor_cache"),
    ("FR_PATTERN", "inject.fr_pattern"),
    ("NVRX_LLM_MODEL", "inject.llm_model"),
    ("NVRX_LLM_BASE_URL", "inject.llm_base_url"),
    ("LLM_API_KEY", "inject.llm_api_key"),
    ("LLM_API_KEY_FILE", "inject.llm_api_key_file"),
    ("LOG_ANALYSIS_MODEL", "inject.log_analysis_model"),
    ("LOG_ANALYSIS_BASE_URL", "inject.log_analysis_base_url"),
    ("NVRX_LOG_ANALYSIS_LLM_RETRIES", "inject.llm_retries"),
    ("NVRX_LOG_ANALYSIS_LLM_INITIAL_BACKOFF_SEC", "inject.llm_initial_backoff"),
    ("NVRX_LOG_ANALYSIS_LLM_MAX_BACKOFF_SEC", "inject.llm_max_backoff"),
    ("NVRX_LOG_ANALYSIS_LLM_JITTER_SEC", "inject.llm_jitter"),
    # score (score_attribution.py)
    ("JUDGE_MODEL", "score.model"),
    ("JUDGE_API_KEY", "score.api_key"),
    ("JUDGE_API_KEY_FILE", "score.api_key_file"),
    ("JUDGE_BASE_URL", "score.base_url"),
    ("FR_SEGMENT_SIZE", "score.segment_size"),
    ("FR_RACK_SIZE", "score.segment_size"),  # deprecated upstream alias
)


def _env_names() -> dict[str, str]:
    """Every accepted environment name → its key (canonical names and upstream aliases)."""
    names = {canonical_env_name(key): key for key in FIELDS}
    for name, key in ENV_ALIASES:
        names.setdefault(name, key)
    return names


ENV_NAMES: dict[str, str] = _env_names()


def env_names_for(key: str) -> list[str]:
    """The environment names of one key, highest precedence first."""
    names = [canonical_env_name(key)] + [n for n, k in ENV_ALIASES if k == key]
    return list(dict.fromkeys(names))
