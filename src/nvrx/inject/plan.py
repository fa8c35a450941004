"""From the shared config to a campaign: the workload, its pool and the jobs' sbatch shape."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvrx.campaign.errors import SessionError
from nvrx.campaign.pool import Pool, at_iterations, build_pool
from nvrx.campaign.poolfile import pool_entries
from nvrx.campaign.session import Record, Session, SessionState
from nvrx.config import LoadedConfig
from nvrx.inject.driver import SITE_VARIABLES, CampaignSpec, experiment_options, record_session
from nvrx.inject.window import Window, WindowMode
from nvrx.inject.workloads import Workload, WorkloadError, find_workload, load_registry
from nvrx.slurm import Slurm


@dataclass(frozen=True)
class Plan:
    workload: Workload
    spec: CampaignSpec
    pool: Pool
    pool_source: str


def gpus_per_node(loaded: LoadedConfig, workload: Workload) -> int:
    """The workload's ranks per node unless GPUS_PER_NODE (or the config) said otherwise."""
    if loaded.origins["slurm.gpus_per_node"].layer != "default" or workload.gpus_per_node is None:
        return loaded.config.slurm.gpus_per_node
    return workload.gpus_per_node


@dataclass(frozen=True)
class PoolPlan:
    """The resolved pool of a campaign and what it was checked against: all `--list-pool`
    needs (no sbatch script: a pool can be listed before the workload's script exists)."""

    workload: Workload
    pool: Pool
    source: str
    gpus_per_node: int


def plan_pool(loaded: LoadedConfig, *, allow_duplicates: bool = False) -> PoolPlan:
    cfg = loaded.config.inject
    workload = find_workload(cfg.workload, load_registry(cfg.workloads_file))
    gpn = gpus_per_node(loaded, workload)
    source = cfg.pool or workload.pool or "default"
    pools_dir = workload.script_dir / "pools" if workload.script_dir is not None else None
    entries = pool_entries(source, pools_dir)
    if cfg.iters:
        entries = at_iterations(entries, cfg.iters)
        source = f"{source} at iterations {','.join(map(str, cfg.iters))}"
    pool = build_pool(
        entries,
        gpus_per_node=gpn,
        min_nodes=workload.min_nodes,
        workload=workload.name,
        allow_duplicates=allow_duplicates,
    )
    return PoolPlan(workload, pool, source, gpn)


def make_plan(
    loaded: LoadedConfig, *, allow_duplicates: bool = False, extra_args: Sequence[str] = ()
) -> Plan:
    cfg = loaded.config.inject
    resolved = plan_pool(loaded, allow_duplicates=allow_duplicates)
    workload, gpn = resolved.workload, resolved.gpus_per_node
    script = cfg.sbatch_script or workload.script
    if script is None:
        raise WorkloadError(
            f"workload {workload.name} has no sbatch script: point inject.workloads_file at "
            "upstream's scripts/workloads.conf, or set inject.sbatch_script (--sbatch-script, "
            "SBATCH_SCRIPT)"
        )
    script = Path(script).expanduser().resolve()
    if not script.is_file():
        raise WorkloadError(f"sbatch script {script} not found (workload {workload.name})")
    # What upstream's driver exports to every job, set or empty, and the cache-staging
    # variables only when set here (upstream's workload scripts read those from user.env).
    site = {
        name: "" if value is None else str(value)
        for name, value in (
            ("MEGATRON_REPO_HOST_PATH", cfg.megatron_repo_host_path),
            ("CONTAINER_IMAGE", cfg.container_image),
            ("SHARED_TMP_BASE_DIR", cfg.shared_tmp_base_dir),
            ("WORKSPACE_HOST_PATH", cfg.workspace_host_path),
        )
    }
    for name, key, value in (
        ("ENABLE_NFS_CACHE_STAGING", "enable_nfs_cache_staging",
         "1" if cfg.enable_nfs_cache_staging else "0"),
        ("NFS_TRITON_CACHE", "nfs_triton_cache", cfg.nfs_triton_cache),
        ("NFS_INDUCTOR_CACHE", "nfs_inductor_cache", cfg.nfs_inductor_cache),
    ):  # fmt: skip
        if loaded.origins[f"inject.{key}"].layer != "default" and value is not None:
            site[name] = value
    site["NVRX_ATTR_SCRIPT_DIR"] = str(workload.script_dir or script.parent)
    assert set(site) <= set(SITE_VARIABLES)
    spec = CampaignSpec(
        workload=workload.name,
        script=str(script),
        gpus_per_node=gpn,
        time_limit=workload.time
        if loaded.origins["inject.time_limit"].layer == "default" and workload.time
        else cfg.time_limit,
        partition=loaded.config.slurm.partition,
        account=loaded.config.slurm.account,
        fault_delay=cfg.fault_delay,
        exports={**site, **workload.env},
        extra_args=tuple(extra_args),
    )
    return Plan(workload, spec, resolved.pool, resolved.source)


def planned_commands(plan: Plan, slurm: Slurm, base: Path) -> list[list[str]]:
    """Every experiment's sbatch command line, validated, before anything is written (the
    session directory's name is a placeholder)."""
    probe = Session(base / "fault_injection" / "SESSION")
    return [
        slurm.sbatch_argv(
            experiment_options(plan.spec, probe, Record(i, e, probe.dir / e.dir_name)),
            script=Path(plan.spec.script),
        )
        for i, e in enumerate(plan.pool.experiments)
    ]


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def campaign_window(loaded: LoadedConfig, recorded: Mapping[str, Any] | None = None) -> Window:
    """The window, by one precedence rule for each of its settings: a value given on this
    command line (`--batch-size`, `--window`, `--set inject.look_ahead=`) wins; else the one the
    session being resumed or re-run recorded; else the config's from the other layers."""
    cfg = loaded.config.inject

    def pick(key: str, configured: Any, valid: Any) -> Any:
        if loaded.origins[f"inject.{key}"].layer == "cli" or recorded is None:
            return configured
        value = recorded.get(key)
        return value if valid(value) else configured

    modes = {m.value for m in WindowMode}
    mode = WindowMode(pick("window", cfg.window, lambda v: v in modes))
    # Recorded before the window had modes, a session ran in pool order: it goes on so, unless
    # this command line asks otherwise.
    if (
        recorded is not None
        and "window" not in recorded
        and loaded.origins["inject.window"].layer != "cli"
    ):
        mode = WindowMode.STRICT
    return Window(
        size=pick("batch_size", cfg.batch_size, _positive),
        mode=mode,
        look_ahead=pick("look_ahead", cfg.look_ahead, _positive),
    )


def start_session(
    plan: Plan,
    loaded: LoadedConfig,
    argv: Sequence[str],
    base: Path | None = None,
    window: Window | None = None,
) -> Session:
    """A new session directory (under `base`, default inject.base_experiments_dir) with the
    campaign, its window (default `campaign_window(loaded)`) and its experiments journalled."""
    cfg = loaded.config.inject
    if base is None:
        default = loaded.origins["inject.base_experiments_dir"].layer == "default"
        base = Path(
            plan.workload.base_experiments_dir
            if default and plan.workload.base_experiments_dir is not None
            else cfg.base_experiments_dir
        ).expanduser()
    session = Session.create(base)
    record_session(
        session,
        plan.spec,
        plan.pool.experiments,
        pool_source=plan.pool_source,
        settings={k: {"value": v, "source": str(o)} for k, v, o in loaded.rows()},
        argv=argv,
        window=window or campaign_window(loaded),
    )
    return session


def rerun_plan(old: Path, state: SessionState, entries: Sequence[str]) -> Plan:
    """A plan of `entries` with the OLD session's recorded campaign (`state`, its journal): the
    same workload, script, shape, time limit and exports (a re-run that changed them would not
    compare)."""
    try:
        spec = CampaignSpec.from_json(state.info.get("spec"))
    except SessionError as exc:
        raise SessionError(f"{old}: {exc}") from None
    workload = Workload(
        name=spec.workload, script=Path(spec.script), gpus_per_node=spec.gpus_per_node
    )
    pool = build_pool(
        entries,
        gpus_per_node=spec.gpus_per_node,
        min_nodes=1,
        workload=spec.workload,
        allow_duplicates=True,
    )
    return Plan(workload, spec, pool, f"rerun-failing {old}")
