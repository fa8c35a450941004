"""The settings model: one section per subcommand, plus `slurm` and `limits`. Validation only:
which layer set a value is `nvrx.config.load`'s business.

A plain pydantic model, not pydantic-settings' BaseSettings: the loader layers the sources itself
so that it can say which layer set each value (`nvrx config show`), which BaseSettings' sources
cannot, and so a watch pass does not pay for importing them.

Every section in one module: `FIELDS`, the environment names and the settings table of the
docs are walked from this one class tree, and a setting is found by reading one file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
)
from pydantic.fields import FieldInfo

from nvrx.config.values import (
    MAX_SECONDS,
    CommandWords,
    ExpandedPath,
    OptionalInt,
    OptionalPath,
    OptionalSlurmName,
    OptionalStr,
    OptionalUrl,
    PositiveSeconds,
    Seconds,
    Secret,
    SlurmName,
    SlurmTime,
    StrList,
    StrMap,
)
from nvrx.limits import DEFAULT_INPUT_LIMIT


class _Section(BaseModel):
    # No inf/nan: `command_timeout: inf` would pass here and crash every Slurm call later.
    model_config = ConfigDict(
        extra="forbid", validate_default=True, frozen=True, allow_inf_nan=False
    )


# --- sections ----------------------------------------------------------------------------------


class SlurmSettings(_Section):
    """The Slurm adapter, shared by every subcommand."""

    account: OptionalSlurmName = Field(None, description="sbatch --account (None: default)")
    partition: OptionalSlurmName = Field(None, description="sbatch --partition (None: default)")
    gpus_per_node: int = Field(4, ge=1, description="GPUs per node (GB200 tray: 4, HGX: 8)")
    command_timeout: PositiveSeconds = Field(30.0, description="timeout of one Slurm command (s)")
    retry_deadline: Seconds = Field(
        120.0, description="keep retrying transient Slurm errors this long (s)"
    )
    retry_initial_backoff: PositiveSeconds = Field(1.0, description="first retry delay (s)")
    retry_max_backoff: PositiveSeconds = Field(30.0, description="longest retry delay (s)")
    poll_interval: Seconds = Field(
        30.0, description="minimum time between two poll passes (s); site rules may ask more"
    )
    accounting_window: PositiveSeconds = Field(
        7 * 86400.0, description="how far back sacct searches by name or user (s)"
    )
    bin_dir: OptionalPath = Field(None, description="directory of the Slurm commands (None: PATH)")

    # A field validator, not a model one, so the error names retry_max_backoff and its source.
    @field_validator("retry_max_backoff")
    @classmethod
    def _backoff_order(cls, value: float, info: ValidationInfo) -> float:
        initial = info.data.get("retry_initial_backoff")
        if initial is not None and value < initial:
            raise ValueError(f"below retry_initial_backoff ({initial:g})")
        return value

    @field_validator("bin_dir")
    @classmethod
    def _absolute_bin_dir(cls, value: Path | None) -> Path | None:
        # A relative one would pick the Slurm commands by the directory nvrx happens to run in.
        if value is not None and not value.is_absolute():
            raise ValueError("must be an absolute path")
        return value


MAX_ARRAY_TASKS = 100_000
# A one-host rehearsal's generation takes a pair of ports (rendezvous, log server) in the range
# chain.rdzv_port .. + ONE_HOST_PORTS - 1, picked by its array job id, so chains (and the
# generations of one chain) sharing the host never share a port.
ONE_HOST_PORTS = 1000
MAX_CHAIN_DEPTH = 1_000


class ChainSettings(_Section):
    """`nvrx submit-chain`: shape, launcher and workload of a singleton job-array chain."""

    # Upper limits: Slurm's own (MaxArraySize is at most 4,000,001; MaxJobCount defaults to
    # 10,000); past them a number is a typo, and nvrx would build that many commands first.
    train_tasks: int = Field(1, ge=1, le=MAX_ARRAY_TASKS, description="array tasks that train")
    hot_spares: int = Field(
        1, ge=0, le=MAX_ARRAY_TASKS, description="running spares in rendezvous standby"
    )
    cold_spares: int = Field(
        3, ge=0, le=MAX_ARRAY_TASKS, description="pending spares beyond the array throttle"
    )
    nodes_per_task: int = Field(1, ge=1, le=MAX_ARRAY_TASKS, description="nodes per array task")
    depth: int = Field(4, ge=1, le=MAX_CHAIN_DEPTH, description="generations enqueued (K)")
    time_limit: SlurmTime = Field("00:25:00", description="time limit per generation")
    job_name: SlurmName = Field("nvrx_singleton", description="the singleton key of the chain")
    work_dir: ExpandedPath = Field(Path("nvrx-run"), description="shared run directory")
    launcher: CommandWords = Field(
        default_factory=lambda: ["ft_launcher"],
        min_length=1,
        description="launcher command (and leading args) run by srun on every node",
        json_schema_extra={"command": True},
    )
    train_command: CommandWords = Field(
        default_factory=list,
        description="training script and args for the launcher; empty: Megatron pretrain_gpt.py",
        json_schema_extra={"command": True},
    )
    megatron_path: str = Field("/workspace/megatron-lm", description="Megatron-LM checkout")
    model_profile: Literal["small", "8b"] = Field("small", description="workload profile")
    container_image: str = Field("", description="pyxis image; empty = bare metal")
    container_mounts: str = Field("/lustre:/lustre", description="pyxis mounts; empty = none")
    tensor_parallel: OptionalInt = Field(None, ge=1, description="None: the profile's value")
    pipeline_parallel: OptionalInt = Field(None, ge=1, description="None: the profile's value")
    micro_batch_size: OptionalInt = Field(None, ge=1, description="None: the profile's value")
    global_batch_size: OptionalInt = Field(None, ge=1, description="None: from the world size")
    save_interval: int = Field(20, ge=1, description="iterations between checkpoints")
    save_retain_interval: int = Field(10000, ge=1, description="Megatron --save-retain-interval")
    train_samples: int = Field(10485760, ge=1, description="Megatron --train-samples")
    lr_decay_samples: int = Field(1038336, ge=1, description="Megatron --lr-decay-samples")
    exit_duration_in_mins: int = Field(110, ge=1, description="Megatron --exit-duration-in-mins")
    dry_run: bool = Field(False, description="upstream NVRX_DRY_RUN: submit-chain only prints")
    max_restarts: int = Field(7, ge=0, description="ft_launcher --max-restarts")
    join_timeout: int = Field(1200, ge=1, description="rendezvous join_timeout (s)")
    store_connect_wait: int = Field(300, ge=1, description="store_connect_wait_seconds (s)")
    rdzv_host_wait: int = Field(300, ge=1, description="peer gate timeout for the host file (s)")
    # Before rdzv_port, whose check reads it. A real cluster never needs it: one launcher per
    # node is what NVRx checks for (docs/submit-chain.md, "Rehearsing with NVRx's own launcher").
    one_host_rehearsal: bool = Field(
        False,
        description="let several launchers share one host, as on deploy/local-slurm's cluster "
        "(a rehearsal; a real cluster needs none of it)",
    )
    rdzv_port: int = Field(29400, ge=1, le=65535, description="rendezvous endpoint port")

    @field_validator("rdzv_port")
    @classmethod
    def _room_for_one_host_ports(cls, value: int, info: ValidationInfo) -> int:
        # On one host each generation takes its own pair of ports at or above this one.
        if info.data.get("one_host_rehearsal") and value + ONE_HOST_PORTS - 1 > 65535:
            raise ValueError(
                f"with chain.one_host_rehearsal a generation may take ports up to "
                f"{value + ONE_HOST_PORTS - 1}, past 65535; use at most {65536 - ONE_HOST_PORTS}"
            )
        return value

    health_check_endpoint: str = Field("", description="--ft-node-health-check-endpoint; empty=off")
    segment: OptionalInt = Field(1, ge=1, description="--ft-segment; empty disables (H100)")
    drain_poll: Literal["auto", "on", "off"] = Field(
        "auto", description="drain poller on task 0 (auto: on when the chain has spares)"
    )
    drain_poll_interval: int = Field(
        300, ge=1, le=86400, description="seconds between the drain poller's passes"
    )
    # Ends up in `sinfo -t`: lower-case state names only, comma-separated.
    drain_states: str = Field(
        "drain", pattern=r"^[a-z_]+(,[a-z_]+)*$", description="sinfo -t states that drain a task"
    )
    drain_command_timeout: int = Field(
        30, ge=1, le=3600, description="cap on each sinfo/squeue of the drain poller (s)"
    )
    gpus_per_numa: int = Field(2, ge=1, description="NVRX_GPUS_PER_NUMA for NUMA binding")
    log_debug: bool = Field(True, description="NVRX_LOG_DEBUG")
    no_restart_exit_code: int = Field(93, ge=1, le=255, description="the no-restart verdict")
    max_no_progress_cycles: OptionalInt = Field(
        None, ge=1, description="--ft-max-no-progress-cycles (None: off)"
    )
    # Off by default, unlike upstream's scripts: a chain submitted with the defaults must never
    # fault itself (docs/submit-chain.md, "Fault injection is opt-in").
    no_restart_demo: bool = Field(
        False, description="the no-restart demo: a fault, then exit 93 after one cycle"
    )
    fault_inject: bool = Field(False, description="workload fault injection on/off")
    fault_ranks: str = Field(
        "2",
        # Checked here: Megatron's fault injector reads a comma-separated list of global ranks.
        pattern=r"^\s*(\d+(\s*,\s*\d+)*)?\s*$",
        description="rank(s) that get the workload fault (comma-separated)",
    )
    fault_delay: int = Field(60, ge=0, description="seconds before the workload fault")
    fault_types: str = Field("async_exc", description="workload fault types")
    inject_gpu_failure: str = Field(
        "",
        # Checked here: a malformed list would crash the launcher of every generation.
        pattern=r"^\s*(\d+:\d+(\s*,\s*\d+:\d+)*)?\s*$",
        description="cycle:infra_rank list; empty = off",
    )
    extra_env: StrMap = Field(default_factory=dict, description="extra env for every task")


class WatchSettings(_Section):
    """`nvrx watch`: detector thresholds and sinks (upstream nvrx-watch defaults)."""

    platform: Literal["slurm", "none"] = Field("slurm", description="slurm, or cycle files only")
    user: str = Field("", description="owner filter (empty: every user of the name)")
    state_dir: ExpandedPath = Field(Path("~/.nvrx_watch"), description="state, cache and log")
    expect_file: ExpandedPath = Field(
        Path("~/.nvrx_watch_expect_chain"), description="upstream expect-chain marker"
    )
    alert_cooldown: Seconds = Field(3600.0, description="per finding and sink (s)")
    grace: Seconds = Field(120.0, description="orphaned_generation grace after task 0 ends")
    churn_window: PositiveSeconds = Field(21600.0, description="generation_churn window (s)")
    max_generations_per_window: int = Field(3, ge=1, description="generation_churn threshold")
    storm_cycles: int = Field(5, ge=1, description="restart_storm: cycles in the window")
    storm_window: PositiveSeconds = Field(1800.0, description="restart_storm window (s)")
    healthy_cycle_seconds: Seconds = Field(
        600.0, description="a cycle this long resets the storm count (0: never)"
    )
    stall_cycles: int = Field(3, ge=1, description="stalled_progress: completed cycles")
    stall_seconds: PositiveSeconds = Field(3600.0, description="cycle_stalled threshold (s)")
    short_cycle_seconds: PositiveSeconds = Field(600.0, description="suspect_node short cycle (s)")
    suspect_cycles: int = Field(3, ge=1, description="suspect_node trailing short cycles")
    budget_fraction: float = Field(0.8, gt=0, le=1, description="restart_budget_low fraction")
    fleet_window: PositiveSeconds = Field(
        21600.0, description="fleet_suspect_node: failures within this window (s)"
    )
    fleet_depth: int = Field(
        3, ge=0, le=16, description="--fleet: how deep below a PATH chain work dirs are sought"
    )
    disable: StrList = Field(default_factory=list, description="detectors to switch off")
    webhook_url: OptionalUrl = Field(None, description="generic JSON webhook")
    pd_routing_key: Secret = Field(None, description="PagerDuty Events v2 key (never printed)")
    pd_routing_key_file: OptionalPath = Field(None, description="file holding that key")
    pd_url: OptionalUrl = Field(
        "https://events.pagerduty.com/v2/enqueue", description="PagerDuty Events API v2 endpoint"
    )
    heartbeat_url: OptionalUrl = Field(None, description="GET after every non-degraded pass")
    http_timeout: PositiveSeconds = Field(20.0, description="sink and heartbeat timeout (s)")
    sinks_timeout: PositiveSeconds = Field(
        30.0,
        description="every webhook, PagerDuty and heartbeat exchange of a pass together, a "
        "fleet pass's of all its chains (s)",
    )
    prom_file: OptionalPath = Field(None, description="Prometheus textfile to write")
    interval: OptionalInt = Field(
        None, ge=1, le=int(MAX_SECONDS), description="loop every N s (None: one pass)"
    )
    max_restarts: OptionalInt = Field(
        None, ge=0, description="launcher --max-restarts (None: the chain manifest's)"
    )
    # Off by default: detect is not act. Even on, only with --act, and only for a finding that
    # names one node that is not drained yet and is not every node of the job.
    drain_suspects: bool = Field(
        False, description="--act drains the one node a suspect_node finding names"
    )
    # For cron wrappers written for upstream's watcher (2: critical); nvrx's are the contract's.
    exit_codes: Literal["nvrx", "upstream"] = Field(
        "nvrx",
        description="a pass's exit codes: nvrx (1 critical, 3 blind) or upstream "
        "(1 blind, 2 critical)",
    )


# The scoring dimensions (nvrx.score.model.DIMENSIONS, which tests hold equal to these).
Dimension = Literal[
    "restart_correct", "rank_primary", "rank_any", "fault_described", "fr_rank_correct"
]
STOP_DIMENSIONS: tuple[Dimension, ...] = (
    "restart_correct",
    "rank_primary",
    "rank_any",
    "fault_described",
)


class InjectSettings(_Section):
    """`nvrx inject-loop`: the fault-injection campaign and the workload's site variables."""

    workload: str = Field("llama4_scout", description="workload registry entry")
    workloads_file: OptionalPath = Field(
        None, description="extra workloads registry (YAML, same shape as the shipped one)"
    )
    # Not OptionalStr: an empty pool (`--pool ''`, `POOL=`) is a mistake, not "the default".
    pool: str | None = Field(None, description="pool entries, file or name (None: workload's)")

    @field_validator("pool")
    @classmethod
    def _pool_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("the pool is empty (unset it for the workload's pool)")
        return value

    # The campaign's stop rule: every experiment passes these dimensions in two consecutive
    # sessions. FR rank is reported beside it, not counted: a cell whose FR answer is `node` or
    # `no_dumps` is not an attribution failure of the text.
    stop_dimensions: list[Dimension] = Field(
        default_factory=lambda: list(STOP_DIMENSIONS),
        description="dimensions the stop condition counts (comma-separated)",
    )

    @field_validator("stop_dimensions", mode="before")
    @classmethod
    def _dimension_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, list) and not value:
            raise ValueError("name at least one dimension")
        if isinstance(value, list) and len(set(map(str, value))) != len(value):
            raise ValueError("a dimension is named twice")
        return value

    iters: list[Annotated[int, Field(ge=0, le=999_999_999)]] | None = Field(
        None, description="run each pool entry at these injection iterations (comma-separated)"
    )

    @field_validator("iters", mode="before")
    @classmethod
    def _iteration_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            if not value.strip():
                return None  # unset: the pool's own iterations
            parts = [part.strip() for part in value.split(",")]
            if "" in parts:  # `,` or `2,,10`: a number left out is a typo, not nothing
                raise ValueError(f"an empty item in {value.strip()[:40]!r}")
            if not all(p.isascii() and p.isdigit() for p in parts):  # not `١` nor `1_000`
                raise ValueError("iterations are whole numbers written in ASCII digits")
            value = parts
        return value

    batch_size: int = Field(2, ge=1, le=10_000, description="jobs of the session in Slurm at once")
    window: Literal["node-aware", "strict", "barrier"] = Field(
        "node-aware",
        description="which experiment goes next: a later one that fits the idle nodes when the "
        "next needs more (node-aware), pool order (strict), upstream's batches (barrier)",
    )
    look_ahead: int = Field(
        8,
        ge=1,
        le=10_000,
        description="node-aware: how far down the pool a job that fits is sought",
    )
    time_limit: SlurmTime = Field("00:30:00", description="per-job wall clock")
    base_experiments_dir: ExpandedPath = Field(
        Path("~/nvrx-attr-experiments"), description="sessions live under <this>/fault_injection"
    )
    sbatch_script: OptionalPath = Field(None, description="overrides the workload's script")
    fault_delay: OptionalInt = Field(None, ge=0, description="FAULT_DELAY (None: workload's 15)")
    experiment_timeout: OptionalInt = Field(
        None, ge=1, description="wall-clock cap per experiment (s); None: the time limit"
    )
    megatron_repo_host_path: ExpandedPath = Field(Path("~/megatron-lm-main"))
    container_image: str = Field("nvcr.io/nvidia/nemo:26.04")
    shared_tmp_base_dir: ExpandedPath = Field(Path("~/tmp"))
    workspace_host_path: ExpandedPath = Field(Path("~/tmp"))
    enable_nfs_cache_staging: bool = Field(True)
    nfs_triton_cache: OptionalStr = Field(None)
    nfs_inductor_cache: OptionalStr = Field(None)
    fr_pattern: str = Field("_dump_*", description="flight-recorder dump file pattern")
    log_analyzer: Literal["builtin", "logsage"] = Field(
        "builtin", description="builtin rules, or logsage (the PyPI package, or upstream's script)"
    )
    logsage_python: OptionalPath = Field(
        None, description="a Python that has the logsage package (None: nvrx's own)"
    )
    fr_analyzer: Literal["builtin", "nvrx-fr"] = Field(
        "builtin", description="builtin torch-free analyzer, or upstream's FR module (installed)"
    )
    analysis_workers: int = Field(2, ge=1, le=64, description="experiments analysed at once")
    analysis_timeout: PositiveSeconds = Field(900.0, description="one external analyzer run (s)")
    llm_model: str = Field("nvidia/nemotron-3-super-120b-a12b", description="log-analysis model")
    llm_base_url: str = Field("https://integrate.api.nvidia.com/v1")
    llm_api_key: Secret = Field(None, description="log-analysis API key (never printed)")
    llm_api_key_file: OptionalPath = Field(None, description="file holding that key")
    log_analysis_model: OptionalStr = Field(None, description="None: llm_model")
    log_analysis_base_url: OptionalStr = Field(None, description="None: llm_base_url")
    llm_retries: int = Field(3, ge=0)
    llm_initial_backoff: PositiveSeconds = Field(1.0)
    llm_max_backoff: PositiveSeconds = Field(8.0)
    llm_jitter: float = Field(0.25, ge=0)


class ScoreSettings(_Section):
    """`nvrx score`: the attribution judge."""

    judge: Literal["auto", "rules", "llm"] = Field(
        "auto", description="auto: llm when base_url is set, else rules (offline)"
    )
    model: str = Field("qwen/qwen3.5-397b-a17b", description="LLM judge model")
    base_url: OptionalUrl = Field(
        None, description="OpenAI-compatible endpoint (None: inject.llm_base_url for --judge llm)"
    )
    api_key: Secret = Field(None, description="judge API key (never printed)")
    api_key_file: OptionalPath = Field(None, description="file holding the judge API key")
    segment_size: int = Field(32, ge=1, description="FR segment size")
    max_tokens: int = Field(1024, ge=16, description="judge answer token limit")
    max_reply_bytes: int = Field(
        1 << 20, ge=1024, le=1 << 30, description="largest judge reply read (bytes)"
    )
    temperature: float = Field(0.0, ge=0)
    concurrency: int = Field(4, ge=1, le=256, description="judge requests in flight")
    request_timeout: PositiveSeconds = Field(120.0, description="one judge request (s)")
    max_retries: int = Field(6, ge=0, description="retries of 429/5xx/timeouts per request")
    retry_deadline: Seconds = Field(600.0, description="retry 429/5xx this long at most (s)")
    retry_initial_backoff: PositiveSeconds = Field(1.0, description="first retry delay (s)")
    retry_max_backoff: PositiveSeconds = Field(30.0, description="longest retry delay (s)")
    cache: bool = Field(True, description="reuse verdicts of identical questions")
    cache_dir: ExpandedPath = Field(Path("~/.cache/nvrx/judge"), description="verdict cache")


class LimitsSettings(_Section):
    """Caps on what any subcommand reads (docs/reliability.md)."""

    max_input_bytes: int = Field(
        DEFAULT_INPUT_LIMIT,
        ge=1024,
        le=1 << 40,
        description="largest file or text input read (logs, journals, dumps, pools); bytes",
    )
    allowed_roots: StrList = Field(
        default_factory=list,
        description="directories that symlinks in a session, chain work dir or pools folder "
        "may lead into (a checkpoint dir on scratch); anything else out of the dir is refused",
    )

    @field_validator("allowed_roots")
    @classmethod
    def _roots_are_absolute(cls, value: list[str]) -> list[str]:
        # A root is resolved where the command runs: '' or 'scratch' would admit the current
        # directory (run from $HOME, a page copies in a file of the home directory), '/' all.
        for root in value:
            expanded = os.path.expanduser(root.strip())
            if not os.path.isabs(expanded):
                raise ValueError(f"{root!r} is not an absolute directory (nor ~/...)")
            if os.path.realpath(expanded) == "/":
                raise ValueError(f"{root!r} admits every file: name the directories themselves")
        return value


class NvrxConfig(BaseModel):
    """Every nvrx setting. Build it with `load_config`, which records where each value came from."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    chain: ChainSettings = Field(default_factory=ChainSettings)
    watch: WatchSettings = Field(default_factory=WatchSettings)
    inject: InjectSettings = Field(default_factory=InjectSettings)
    score: ScoreSettings = Field(default_factory=ScoreSettings)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)


SECTIONS: dict[str, type[_Section]] = {
    name: info.annotation  # type: ignore[misc]
    for name, info in NvrxConfig.model_fields.items()
}


def _iter_fields() -> Iterator[tuple[str, FieldInfo]]:
    for section, model in SECTIONS.items():
        for name, info in model.model_fields.items():
            yield f"{section}.{name}", info


FIELDS: dict[str, FieldInfo] = dict(_iter_fields())


HIDDEN = "<hidden>"


def is_secret(info: FieldInfo) -> bool:
    return SecretStr in getattr(info.annotation, "__args__", ())
