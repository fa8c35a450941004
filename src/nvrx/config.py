"""The one nvrx configuration: a pydantic-settings model with a section per subcommand.

Layers, lowest first; each later layer overrides single keys of the earlier ones:

1. built-in defaults (the upstream defaults; README, "Configuration"),
2. a YAML file: `--config PATH`, else `$NVRX_CONFIG`, else `./nvrx.yaml`, else
   `~/.config/nvrx/config.yaml`,
3. a `user.env`-style `KEY=VALUE` file when one is given (`--env-file`, `$NVRX_ENV_FILE`),
4. the environment: `NVRX_<SECTION>_<FIELD>` for every field, plus the upstream variable names
   of `ENV_ALIASES` (one table, documented in the README),
5. command-line flags.

Every effective value remembers the layer it came from (`LoadedConfig.origins`), which is what
`nvrx config show` prints. Errors are one line: an unknown key names the key and the file, a bad
value names key, value and source.

One module because the sections, the layer loader and the upstream names share one table of
fields; the shell-words expander and the redaction are to move to modules of their own
(DESIGN.md, "Modules").
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from nvrx.display import printable
from nvrx.files import (
    CONFIG_FILE_LIMIT,
    DEFAULT_INPUT_LIMIT,
    InputError,
    read_bounded,
    read_key_file,
)
from nvrx.slurm.errors import SlurmValueError
from nvrx.slurm.options import check_name, check_time_limit


class ConfigError(Exception):
    """A configuration problem, reported to the user as one line."""


# --- value helpers -----------------------------------------------------------------------------


def _empty_to_none(value: Any) -> Any:
    """`""` from a file or the environment means "not set" for optional values."""
    if isinstance(value, str) and value.strip() == "":
        return None
    return value


def _comma_list(value: Any) -> Any:
    """A list may be written as `a,b,c` in env files and the environment."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


def _json_mapping(value: Any) -> Any:
    """A mapping may be written as a JSON object in env files and the environment."""
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return {}
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"expected a JSON object: {exc.msg}") from exc
    return value


def _expand_path(value: Any) -> Any:
    if isinstance(value, str) and value.startswith("~"):
        return os.path.expanduser(value)
    if isinstance(value, Path) and str(value).startswith("~"):
        return value.expanduser()
    return value


OptionalStr = Annotated[str | None, BeforeValidator(_empty_to_none)]
OptionalInt = Annotated[int | None, BeforeValidator(_empty_to_none)]
OptionalPath = Annotated[
    Path | None, BeforeValidator(_empty_to_none), BeforeValidator(_expand_path)
]
ExpandedPath = Annotated[Path, BeforeValidator(_expand_path)]
StrList = Annotated[list[str], BeforeValidator(_comma_list)]
StrMap = Annotated[dict[str, str], BeforeValidator(_json_mapping)]


def _command_words(value: Any) -> Any:
    """A command may be written as one shell-like string in env files and the environment."""
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot split into words: {exc}") from None
    return value


CommandWords = Annotated[list[str], BeforeValidator(_command_words)]
# A year: longer durations are typos, and would overflow subprocess and datetime arithmetic.
MAX_SECONDS = 366 * 86400.0
PositiveSeconds = Annotated[float, Field(gt=0, le=MAX_SECONDS)]
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS)]


def _slurm_time(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return check_time_limit(value)
        except SlurmValueError as exc:
            raise ValueError(str(exc)) from None
    return value


SlurmTime = Annotated[str, BeforeValidator(_slurm_time)]


def _slurm_name(value: Any) -> Any:
    if isinstance(value, str) and value.strip():
        try:
            return check_name(value.strip(), "name")
        except SlurmValueError as exc:
            raise ValueError(str(exc)) from None
    return value


# A job, account or partition name: checked when the config loads, not first at submit time.
SlurmName = Annotated[str, BeforeValidator(_slurm_name)]
OptionalSlurmName = Annotated[
    str | None, BeforeValidator(_empty_to_none), BeforeValidator(_slurm_name)
]
Secret = Annotated[SecretStr | None, BeforeValidator(_empty_to_none)]


def _http_url(value: Any) -> Any:
    if isinstance(value, str) and value.strip():
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("expected an http:// or https:// URL")
        try:
            _ = parts.port
        except ValueError as exc:
            raise ValueError(f"bad URL: {exc}") from None
        return value.strip()
    return value


# A URL a sink calls: checked when the config loads, not first when a finding is sent.
OptionalUrl = Annotated[str | None, BeforeValidator(_empty_to_none), BeforeValidator(_http_url)]


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
    rdzv_port: int = Field(29400, ge=1, le=65535, description="rendezvous endpoint port")
    health_check_endpoint: str = Field("", description="--ft-node-health-check-endpoint; empty=off")
    segment: OptionalInt = Field(1, ge=1, description="--ft-segment; empty disables (H100)")
    gpus_per_numa: int = Field(2, ge=1, description="NVRX_GPUS_PER_NUMA for NUMA binding")
    log_debug: bool = Field(True, description="NVRX_LOG_DEBUG")
    no_restart_exit_code: int = Field(93, ge=1, le=255, description="the no-restart verdict")
    max_no_progress_cycles: OptionalInt = Field(
        None, ge=1, description="--ft-max-no-progress-cycles (None: off)"
    )
    no_restart_demo: bool = Field(True, description="run the no-restart demo")
    fault_inject: bool = Field(True, description="workload fault injection on/off")
    fault_ranks: str = Field("2", description="rank(s) that get the workload fault")
    fault_delay: int = Field(60, ge=0, description="seconds before the workload fault")
    fault_types: str = Field("async_exc", description="workload fault types")
    inject_gpu_failure: str = Field(
        "1:0,2:0",
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
    disable: StrList = Field(default_factory=list, description="detectors to switch off")
    webhook_url: OptionalUrl = Field(None, description="generic JSON webhook")
    pd_routing_key: Secret = Field(None, description="PagerDuty Events v2 key (never printed)")
    pd_routing_key_file: OptionalPath = Field(None, description="file holding that key")
    pd_url: OptionalUrl = Field(
        "https://events.pagerduty.com/v2/enqueue", description="PagerDuty Events API v2 endpoint"
    )
    heartbeat_url: OptionalUrl = Field(None, description="GET after every non-degraded pass")
    http_timeout: PositiveSeconds = Field(20.0, description="sink and heartbeat timeout (s)")
    prom_file: OptionalPath = Field(None, description="Prometheus textfile to write")
    interval: OptionalInt = Field(
        None, ge=1, le=int(MAX_SECONDS), description="loop every N s (None: one pass)"
    )
    max_restarts: OptionalInt = Field(
        None, ge=0, description="launcher --max-restarts (None: the chain manifest's)"
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
            value = [part.strip() for part in value.split(",") if part.strip()] or None
        return value

    batch_size: int = Field(2, ge=1, le=10_000, description="jobs of the session in Slurm at once")
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
    """Caps on what any subcommand reads (README, "Reliability")."""

    max_input_bytes: int = Field(
        DEFAULT_INPUT_LIMIT,
        ge=1024,
        le=1 << 40,
        description="largest file or text input read (logs, journals, dumps, pools); bytes",
    )


class NvrxConfig(BaseSettings):
    """Every nvrx setting. Build it with `load_config`, which records where each value came from."""

    model_config = SettingsConfigDict(extra="forbid", frozen=True, validate_default=True)

    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    chain: ChainSettings = Field(default_factory=ChainSettings)
    watch: WatchSettings = Field(default_factory=WatchSettings)
    inject: InjectSettings = Field(default_factory=InjectSettings)
    score: ScoreSettings = Field(default_factory=ScoreSettings)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # load_config merges the layers itself so that it can say which layer set each value;
        # the model only validates what it is given.
        return (init_settings,)


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


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line fit for a manifest or journal: the value of every secret setting given
    as `KEY=VALUE` (after `--set`, or as `--set=KEY=VALUE`) is replaced by HIDDEN, and so is
    the password of every URL (`--base-url https://user:pw@host`)."""
    secret_keys = {key for key, info in FIELDS.items() if is_secret(info)}
    out: list[str] = []
    for arg in argv:
        flag, eq, assignment = arg.partition("=") if arg.startswith("--") else ("", "", arg)
        key, sep, _ = assignment.partition("=")
        if sep and key.strip() in secret_keys:
            arg = f"{flag}{eq}{key}={HIDDEN}"
        out.append(redact_urls(arg))
    return out


# `scheme://user:password@`: bounded, so a long line without `@` costs one pass. Then the
# query parameters that carry credentials by convention.
_URL_PASSWORD = re.compile(r"(://[^\s/@:]{0,256}:)[^\s/@]{1,1024}@")
_URL_TOKEN = re.compile(
    r"([?&](?:api[_-]?key|apikey|key|token|access_token|auth|secret|password|sig|signature)=)"
    r"[^&#\s]{1,2048}",
    re.IGNORECASE,
)


def redact_urls(text: str) -> str:
    """`text` with the password of every URL in it, and credential query parameters
    (`?token=...`), replaced by HIDDEN."""
    if "://" not in text and "=" not in text:
        return text
    text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{HIDDEN}@", text)
    return _URL_TOKEN.sub(lambda m: f"{m.group(1)}{HIDDEN}", text)


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret in it, and every URL password, replaced by HIDDEN: servers,
    models and analysers may echo what they were given. Values under 4 characters are left:
    masking them would blank ordinary words, and they protect nothing. Longer secrets are
    masked first, so one that contains another is masked whole."""
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= 4:
            text = text.replace(secret, HIDDEN)
    return redact_urls(text)


# Environment variables whose values are credentials by their name's convention: masked in
# whatever nvrx writes, though no setting reads them (an analyser or server may echo them).
_SECRET_ENV_SUFFIXES = ("API_KEY", "_TOKEN", "_SECRET", "PASSWORD")


def secret_env_values(environ: Mapping[str, str]) -> list[str]:
    """The values of credential-named environment variables (`*API_KEY`, `*_TOKEN`, ...)."""
    return [
        value
        for name, value in environ.items()
        if name.upper().endswith(_SECRET_ENV_SUFFIXES) and value.strip()
    ]


def known_secrets(config: NvrxConfig, environ: Mapping[str, str]) -> list[str]:
    """Every secret this run knows: the secret settings, the keys in the key files they name,
    the passwords of URL settings, and credential-named environment variables."""
    out = secret_env_values(environ)
    for key, info in FIELDS.items():
        section, name = key.split(".", 1)
        value = getattr(getattr(config, section), name)
        if is_secret(info) and value is not None:
            out.append(value.get_secret_value())
        elif name.endswith("key_file") and value is not None:  # API and routing key files
            with contextlib.suppress(InputError):
                out.append(read_key_file(value, "key file")[0])
        elif isinstance(value, str) and "://" in value:
            password = urlsplit(value).password
            if password:
                out.append(password)
    return out


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


# --- origins and the loaded result -------------------------------------------------------------

Layer = Literal["default", "file", "env-file", "env", "cli"]


@dataclass(frozen=True, slots=True)
class Origin:
    """Where an effective value came from."""

    layer: Layer
    where: str = ""  # file path, variable name or flag

    def __str__(self) -> str:
        return self.layer if not self.where else f"{self.layer} {self.where}"


@dataclass(frozen=True)
class LoadedConfig:
    """The validated config plus, for each dotted key, the layer that set it."""

    config: NvrxConfig
    origins: Mapping[str, Origin]
    config_file: Path | None = None
    env_file: Path | None = None

    def value(self, key: str) -> Any:
        section, name = key.split(".", 1)
        return getattr(getattr(self.config, section), name)

    def rows(self) -> list[tuple[str, Any, Origin]]:
        """(key, JSON-ready value, origin) for every setting, in model order. A secret that is
        set shows as `<hidden>`, never its value."""
        dumped = self.config.model_dump(mode="json")
        rows: list[tuple[str, Any, Origin]] = []
        for key, info in FIELDS.items():
            section, name = key.split(".", 1)
            value = dumped[section][name]
            if is_secret(info) and value is not None:
                value = HIDDEN
            elif isinstance(value, str):
                value = redact_urls(value)
            rows.append((key, value, self.origins[key]))
        return rows


# --- layer readers -----------------------------------------------------------------------------

# dotted key → (value, origin), for the layers read so far.
Layered = dict[str, tuple[Any, Origin]]


def find_config_file(
    explicit: Path | None, environ: Mapping[str, str], cwd: Path, home: Path
) -> Path | None:
    """The YAML file to read, by the documented search order; None when there is none."""
    if explicit is not None:
        if not explicit.is_file():
            raise ConfigError(f"config file not found: {explicit}")
        return explicit
    from_env = environ.get("NVRX_CONFIG", "").strip()
    if from_env:
        path = Path(os.path.expanduser(from_env))
        if not path.is_file():
            raise ConfigError(f"config file not found: {path} (from NVRX_CONFIG)")
        return path
    for candidate in (cwd / "nvrx.yaml", home / ".config" / "nvrx" / "config.yaml"):
        if candidate.is_file():
            return candidate
    return None


def _read_text(path: Path, what: str) -> str:
    try:
        data, _ = read_bounded(path, what, limit=CONFIG_FILE_LIMIT, setting=None)
        return data.decode("utf-8")
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path} is not UTF-8 text (byte {exc.start})") from exc


class _YamlLoader(yaml.SafeLoader):
    """SafeLoader without YAML 1.1 number guessing: `time_limit: 1:30:00` stays the text
    1:30:00 (not the base-60 integer 5400) and `account: 012` stays 012. Numbers arrive as
    text; pydantic reads them as numbers where a setting is numeric.

    Without aliases, too: nested aliases make a few hundred bytes stand for billions of nodes
    (every later step, down to the error message, would walk them all), and a settings file
    has nothing to share."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not supported in nvrx config files", mark
            )
        return super().compose_node(parent, index)


_YamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if not tag.endswith((":int", ":float"))]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _is_path_field(info: FieldInfo) -> bool:
    ann = info.annotation
    return ann is Path or (hasattr(ann, "__args__") and Path in getattr(ann, "__args__", ()))


def _is_command_field(info: FieldInfo) -> bool:
    extra = info.json_schema_extra
    return isinstance(extra, dict) and extra.get("command") is True


def _resolve_command(value: Any, base: Path) -> Any:
    """In a file, command words written `./x` or `../x` are relative to that file; a bare name
    (`ft_launcher`) is left for PATH."""

    def one(word: Any) -> Any:
        if isinstance(word, str) and word.startswith(("./", "../")):
            return str((base / word).resolve())
        return word

    if isinstance(value, str):
        value = _command_words(value)  # split first, so a resolved path may contain spaces
    return [one(w) for w in value] if isinstance(value, list) else value


def parse_yaml(text: str, what: str) -> Any:
    """nvrx's one YAML reader (config and workloads files): numbers stay text, no aliases.
    ConfigError names `what` and the line."""
    try:
        return yaml.load(text, Loader=_YamlLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None)
        why = f": {problem}" if problem else ""
        raise ConfigError(f"{what}{where} is not valid YAML{why}") from None
    except RecursionError:
        raise ConfigError(f"{what} is nested too deeply") from None


def read_yaml_file(path: Path) -> dict[str, Any]:
    """Flatten a YAML config file to dotted keys; unknown keys are an error naming the file."""
    data = parse_yaml(_read_text(path, "config file"), f"config file {path}")
    if data is None:
        return {}
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise ConfigError(f"config file {path} must be a mapping of sections, not {kind}")
    flat: dict[str, Any] = {}
    for section, body in data.items():
        if section not in SECTIONS:
            known = ", ".join(SECTIONS)
            raise ConfigError(f"unknown key {section!r} in {path} (sections: {known})")
        if body is None:
            continue
        if not isinstance(body, dict):
            raise ConfigError(f"section {section!r} in {path} must be a mapping")
        for name, value in body.items():
            key = f"{section}.{name}"
            if key not in FIELDS:
                raise ConfigError(f"unknown key {key!r} in {path}")
            # A relative path in a file is relative to that file, so cron and login shells agree.
            if isinstance(value, str) and _is_path_field(FIELDS[key]) and value:
                expanded = os.path.expanduser(value)
                if not os.path.isabs(expanded):
                    value = str((path.parent / expanded).resolve())
            elif _is_command_field(FIELDS[key]):
                value = _resolve_command(value, path.parent)
            flat[key] = value
    return flat


# --- the user.env shell subset -----------------------------------------------------------------

_ASSIGN_RE = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
# Limits of the shell subset (README, "Reliability"): no real site file comes near them.
MAX_ENV_NESTING = 32
MAX_ENV_VALUE = 64 << 10
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class EnvFile:
    """A parsed user.env file: its assignments in order, and every name an expansion read."""

    assignments: list[tuple[str, str, int]]  # (name, value, line number)
    referenced: frozenset[str]

    def as_dict(self) -> dict[str, str]:
        return {name: value for name, value, _ in self.assignments}


class _Expander:
    """Expands one line's value like a POSIX shell would, for the forms a site file uses.

    Supported: '...' (literal), "..." (with `\\ \\$ \\" \\``), bare words, `$VAR`, `${VAR}`,
    `${VAR-default}` and `${VAR:-default}` (the default itself expanded). Anything else that a
    shell would evaluate (command substitution, `${VAR:=x}`, `${#VAR}`, `$'...'`, `$1`) is an
    error rather than a silent literal.
    """

    def __init__(self, lookup: Callable[[str], str | None], where: str) -> None:
        self.lookup = lookup
        self.where = where
        self.depth = 0  # ${VAR:-${VAR:-...}} nesting
        self.expanded = 0  # characters that variables contributed to this value

    def variable(self, out: list[str], value: str | None) -> None:
        """Append a variable's value; a value that would outgrow MAX_ENV_VALUE is an error
        (`A=$A$A` on line after line doubles it each time)."""
        self.expanded += len(value or "")
        if self.expanded > MAX_ENV_VALUE:
            self.fail(f"the value expands to more than {MAX_ENV_VALUE} characters")
        out.append(value or "")

    def fail(self, message: str) -> NoReturn:
        raise ConfigError(f"{self.where}: {message}")

    def value(self, text: str) -> str:
        out: list[str] = []
        i = 0
        while i < len(text):
            ch = text[i]
            if ch == "'":
                end = text.find("'", i + 1)
                if end < 0:
                    self.fail("unterminated single quote")
                out.append(text[i + 1 : end])
                i = end + 1
            elif ch == '"':
                i = self.expand(text, i + 1, out, mode="quoted")
            elif ch.isspace():
                tail = text[i:].strip()
                if tail and not tail.startswith("#"):
                    self.fail("unquoted space in value (quote it)")
                break
            else:
                i = self.expand(text, i, out, mode="bare")
        return "".join(out)

    def expand(self, text: str, i: int, out: list[str], mode: str) -> int:
        """Expand from text[i] to the end of the quoted, bare or default word; return where
        scanning goes on (after a closing double quote)."""
        while i < len(text):
            ch = text[i]
            if mode == "quoted" and ch == '"':
                return i + 1
            if mode == "bare" and (ch.isspace() or ch in "'\""):
                return i
            if ch == "\\":
                nxt = text[i + 1 : i + 2]
                if mode == "bare" or nxt in ('"', "\\", "$", "`"):
                    out.append(nxt)
                else:
                    out.append(ch + nxt)
                i += 2
            elif ch == "`":
                self.fail("command substitution is not supported (nvrx runs no commands)")
            elif ch == "$":
                i = self.dollar(text, i, out)
            else:
                out.append(ch)
                i += 1
        if mode == "quoted":
            self.fail("unterminated double quote")
        return i

    def dollar(self, text: str, i: int, out: list[str]) -> int:
        nxt = text[i + 1 : i + 2]
        if nxt == "(":
            self.fail("command substitution is not supported (nvrx runs no commands)")
        if nxt == "{":
            close = self.closing_brace(text, i + 1)
            body = text[i + 2 : close]
            m = _NAME_RE.match(body)
            if m is None:
                self.fail(f"unsupported expansion ${{{body}}}")
            value = self.lookup(m.group())
            op = body[m.end() :]
            if op == "":
                self.variable(out, value)
            elif op.startswith((":-", "-")):
                default = op[2:] if op.startswith(":-") else op[1:]
                unset = value is None if op.startswith("-") else not value
                if unset:
                    self.depth += 1
                    if self.depth > MAX_ENV_NESTING:
                        self.fail(f"expansions nested more than {MAX_ENV_NESTING} deep")
                    self.expand(default, 0, out, mode="default")
                    self.depth -= 1
                else:
                    self.variable(out, value)
            else:
                self.fail(f"unsupported expansion ${{{body}}} (only ${{VAR-x}} and ${{VAR:-x}})")
            return close + 1
        m = _NAME_RE.match(text, i + 1)
        if m is not None:
            self.variable(out, self.lookup(m.group()))
            return m.end()
        if nxt and (nxt.isdigit() or nxt in "'?$!#@*-"):
            self.fail(f"unsupported expansion ${nxt}")
        out.append("$")
        return i + 1

    def closing_brace(self, text: str, open_at: int) -> int:
        depth = 0
        i = open_at + 1
        while i < len(text):
            if text.startswith("${", i):
                depth += 1
                i += 2
                continue
            if text[i] == "}":
                if depth == 0:
                    return i
                depth -= 1
            i += 1
        self.fail("unterminated ${")


def expand_shell_value(text: str, lookup: Callable[[str], str | None], where: str) -> str:
    """The value of a shell assignment's right-hand side (quotes and expansions; no commands).
    Raises ConfigError for what a shell would execute or nvrx does not support."""
    return _Expander(lookup, where).value(text)


def expand_shell_word(word: str, lookup: Callable[[str], str | None], where: str) -> str:
    """Expand `$VAR`/`${VAR...}` in a word whose quotes were already removed."""
    out: list[str] = []
    _Expander(lookup, where).expand(word, 0, out, mode="default")
    return "".join(out)


SHELL_ASSIGNMENT_RE = _ASSIGN_RE


def parse_env_file(text: str, environ: Mapping[str, str], source: str = "<env file>") -> EnvFile:
    """Parse a `user.env`-style file (see _Expander for the shell subset). Values expand from
    earlier assignments in the file, then the environment; nothing is executed."""
    assigned: dict[str, str] = {}
    referenced: set[str] = set()
    out: list[tuple[str, str, int]] = []

    def lookup(name: str) -> str | None:
        referenced.add(name)
        return assigned[name] if name in assigned else environ.get(name)

    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source} line {lineno}"
        m = _ASSIGN_RE.match(line)
        if m is None:
            # The name only: a malformed line may well hold a key (`JUDGE_API_KEY = sk-...`).
            raise ConfigError(f"{where}: expected KEY=VALUE, got {_short(line.split('=')[0], 40)}")
        name = m.group(1)
        value = _Expander(lookup, where).value(m.group(2))
        assigned[name] = value
        out.append((name, value, lineno))
    return EnvFile(out, frozenset(referenced))


def read_env_file(path: Path, environ: Mapping[str, str]) -> list[tuple[str, str, Origin]]:
    """Settings from a user.env file: at most one (the highest-precedence name) per key.

    A name that is no setting is an error naming the file and line, unless another line
    expands it (a helper variable such as `BASE=/lustre/me` used as `$BASE/exp`).
    """
    parsed = parse_env_file(_read_text(path, "env file"), environ, str(path))
    latest: dict[str, tuple[str, int]] = {}
    for name, value, lineno in parsed.assignments:
        if name not in ENV_NAMES and name not in parsed.referenced:
            raise ConfigError(f"unknown key {name!r} in {path} line {lineno}")
        latest[name] = (value, lineno)
    return _by_precedence(latest, lambda name, line: Origin("env-file", f"{path}:{line} {name}"))


def read_environment(environ: Mapping[str, str]) -> list[tuple[str, str, Origin]]:
    """Settings from the environment, at most one (the highest-precedence name) per key."""
    present = {name: (environ[name], 0) for name in ENV_NAMES if name in environ}
    return _by_precedence(present, lambda name, _line: Origin("env", name))


def _by_precedence(
    present: Mapping[str, tuple[str, int]], origin: Callable[[str, int], Origin]
) -> list[tuple[str, str, Origin]]:
    """For each key, the value of its highest-precedence name among `present`."""
    out: list[tuple[str, str, Origin]] = []
    for key in FIELDS:
        for name in env_names_for(key):
            if name in present:
                value, line = present[name]
                out.append((key, value, origin(name, line)))
                break
    return out


# --- loading -----------------------------------------------------------------------------------


def load_config(
    *,
    config_file: Path | None = None,
    env_file: Path | None = None,
    cli: Mapping[str, tuple[Any, str]] | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    home: Path | None = None,
) -> LoadedConfig:
    """Build the effective config from every layer; `cli` maps key → (value, flag)."""
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    home = Path(os.path.expanduser("~")) if home is None else home

    layered: Layered = {}
    yaml_path = find_config_file(config_file, environ, cwd, home)
    if yaml_path is not None:
        for key, value in read_yaml_file(yaml_path).items():
            layered[key] = (value, Origin("file", str(yaml_path)))

    if env_file is None and environ.get("NVRX_ENV_FILE", "").strip():
        env_file = Path(os.path.expanduser(environ["NVRX_ENV_FILE"].strip()))
    if env_file is not None:
        if not env_file.is_file():
            raise ConfigError(f"env file not found: {env_file}")
        for key, value, origin in read_env_file(env_file, environ):
            layered[key] = (value, origin)

    for key, value, origin in read_environment(environ):
        layered[key] = (value, origin)

    for key, (value, flag) in (cli or {}).items():
        if key not in FIELDS:
            raise ConfigError(f"unknown key {key!r} (from {flag})")
        layered[key] = (value, Origin("cli", flag))

    nested: dict[str, dict[str, Any]] = {}
    for key, (value, _origin) in layered.items():
        section, name = key.split(".", 1)
        nested.setdefault(section, {})[name] = value

    try:
        config = NvrxConfig.model_validate(nested)
    except ValidationError as exc:
        raise ConfigError(_describe_validation_error(exc, layered)) from None

    origins = {key: layered[key][1] if key in layered else Origin("default") for key in FIELDS}
    return LoadedConfig(config, origins, yaml_path, env_file)


def _describe_validation_error(exc: ValidationError, layered: Layered) -> str:
    err = exc.errors()[0]
    loc = [str(part) for part in err["loc"]]
    key = ".".join(loc[:2])
    if key in FIELDS and is_secret(FIELDS[key]):
        shown, source = HIDDEN, str(layered[key][1]) if key in layered else "default"
    elif key in layered:
        value, origin = layered[key]
        shown = _short(value if isinstance(value, str) else json.dumps(value, default=str))
        source = str(origin)
    else:
        shown, source = "(default)", "default"
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    return f"bad value for {key}: {shown} (from {source}): {_cut(printable(msg), 200)}"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(text: str, limit: int = 80) -> str:
    """A value for a one-line message: quoted, URL passwords hidden, control characters
    escaped, and cut."""
    return f"'{_cut(printable(redact_urls(text)), limit - 2)}'"


def parse_assignments(items: Sequence[str], flag: str = "--set") -> dict[str, tuple[str, str]]:
    """`section.key=value` strings from the command line → the `cli` mapping of load_config."""
    out: dict[str, tuple[str, str]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{flag} expects SECTION.KEY=VALUE, got {_short(item)}")
        if key not in FIELDS:
            # Not the value: a mistyped secret key (`score.apikey=...`) must not print the secret.
            raise ConfigError(f"unknown key {key[:80]!r} (from {flag})")
        out[key] = (value, f"{flag} {key}")
    return out
