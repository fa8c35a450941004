"""`nvrx watch --fleet PATH... | --mine`: every chain of a team in one pass.

Each chain keeps what a single-chain watch has (its state dir, detectors, thresholds,
cooldowns, sinks and `--act` rules); the fleet adds one Slurm query for all of them
(`observe_platforms`), one Prometheus textfile with a `chain` label, the fleet detectors
(`detectors.fleet`), and one summary. A chain that cannot be resolved or read is shown blind,
never healthy, and never hides the others; the exit code is the worst chain's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from nvrx.chain.manifest import manifest_path
from nvrx.config import WatchSettings
from nvrx.slurm import Slurm, SlurmError, SlurmValueError
from nvrx.watch.detectors import COUNTED
from nvrx.watch.detectors.fleet import failed_cycles, run_fleet_detectors
from nvrx.watch.model import Finding, Platform, Severity
from nvrx.watch.observe import observe_platforms
from nvrx.watch.resolve import (
    Overrides,
    Target,
    WatchError,
    not_a_directory,
    refuse_input,
    resolve,
)
from nvrx.watch.sinks import ChainMetrics, SinkBudget, prometheus_text, write_textfile
from nvrx.watch.watcher import ExitCodes, PassResult, Watcher, pass_exit_code

# A fleet is a team's chains, not a file system: past these a PATH is a mistake.
MAX_FLEET_CHAINS = 1000
MAX_SCANNED_DIRS = 100_000


class FleetError(WatchError):
    """A fleet that cannot be assembled as asked (a PATH that is no directory, too many)."""


def is_chain_dir(path: Path) -> bool:
    """A chain work dir: it has a chain manifest, or NVRx cycle-info dirs (`nvrx/*/cycle_infos`)."""
    if manifest_path(path).is_file():
        return True
    nvrx = path / "nvrx"
    try:
        with os.scandir(nvrx) as entries:
            return any((Path(e.path) / "cycle_infos").is_dir() for e in entries if e.is_dir())
    except OSError:
        return False


def discover(paths: Sequence[Path], depth: int) -> list[Path]:
    """The chain work dirs of `paths`: a PATH that is one, else those found below it, at most
    `depth` directory levels down. Symlinked directories are not followed (no loops), a chain's
    own directories are not searched (a chain holds no chains), hidden ones neither. Sorted,
    each once; FleetError for a PATH that is not a directory or a search past the bounds."""
    found: dict[Path, None] = {}
    scanned = 0
    for root in paths:
        missing = not_a_directory(root.expanduser())
        if missing is not None:
            raise FleetError(f"--fleet {root}: {missing}")
        root = Path(os.path.realpath(root.expanduser()))
        level = [root]
        for _ in range(depth + 1):
            below: list[Path] = []
            for d in level:
                if is_chain_dir(d):
                    found[d] = None
                    if len(found) > MAX_FLEET_CHAINS:
                        raise FleetError(f"--fleet: more than {MAX_FLEET_CHAINS} chains")
                    continue
                try:
                    with os.scandir(d) as entries:
                        for e in entries:
                            scanned += 1
                            if scanned > MAX_SCANNED_DIRS:
                                raise FleetError(
                                    f"--fleet {root}: more than {MAX_SCANNED_DIRS} entries "
                                    "searched; point it nearer the chains or lower fleet_depth"
                                )
                            if not e.name.startswith(".") and e.is_dir(follow_symlinks=False):
                                below.append(Path(e.path))
                except OSError:
                    continue  # an unreadable directory below a PATH is no chain
            level = sorted(below)
    return sorted(found)


@dataclass
class ChainPass:
    """One chain of a fleet pass: its result, or why it could not be watched (blind)."""

    label: str
    work_dir: str | None
    result: PassResult | None = None
    error: str | None = None
    failed: int | None = None  # cycles that ended in a failure within the fleet window

    @property
    def blind(self) -> bool:
        return self.result is None or self.result.degraded


@dataclass
class FleetResult:
    observed_at: datetime
    chains: list[ChainPass]
    findings: list[Finding] = field(default_factory=list)  # the fleet detectors'
    slurm_commands: int = 0
    notes: list[str] = field(default_factory=list)
    sink_errors: list[str] = field(default_factory=list)  # the fleet's own (its textfile)
    exit_codes: ExitCodes = "nvrx"  # watch.exit_codes

    def all_sink_errors(self) -> list[str]:
        """Every sink that failed this pass: the fleet's, then each chain's, by its label."""
        return [
            *self.sink_errors,
            *(f"{c.label}: {e}" for c in self.chains if c.result for e in c.result.sink_errors),
        ]

    def all_notes(self) -> list[str]:
        """Every note of this pass: the fleet's, then each chain's, by its label."""
        return [
            *self.notes,
            *(f"{c.label}: {n}" for c in self.chains if c.result for n in c.result.notes),
        ]

    @property
    def exit_code(self) -> int:
        """The worst chain's, as one pass's (`pass_exit_code`): under nvrx's codes one chain
        the pass could not see makes the answer incomplete, and that wins over a critical
        finding elsewhere."""
        critical = any(f.severity is Severity.CRITICAL for f in self.findings) or any(
            c.result is not None and c.result.critical for c in self.chains
        )
        blind = any(c.blind for c in self.chains)
        return pass_exit_code(critical=critical, blind=blind, codes=self.exit_codes)


@dataclass(frozen=True)
class Member:
    """One chain of a fleet: its Watcher, or why it has none (then every pass shows it blind)."""

    label: str
    work_dir: str | None
    watcher: Watcher | None = None
    error: str | None = None


@dataclass
class Fleet:
    """The watchers of a fleet, in the order the chains were found."""

    members: Sequence[Member]
    settings: WatchSettings
    slurm: Slurm | None

    def run_pass(self, now: datetime | None = None) -> FleetResult:
        now = now or datetime.now(UTC)
        before = sum(self.slurm.calls.values()) if self.slurm is not None else 0
        watched = [m.watcher for m in self.members if m.watcher is not None]
        platforms: dict[int, Platform] = {}
        if self.slurm is not None and watched:
            for w in watched:
                w.refresh_target()
            # Slurm is asked in a thread while this one reads every chain's cycle files: the
            # two waits (slurmctld and slurmdbd, the filesystem) overlap instead of adding up.
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="nvrx-slurm") as pool:
                asked = pool.submit(
                    observe_platforms, [w.target for w in watched], self.slurm, self.settings, now
                )
                for w in watched:
                    w.read_ahead()
                observed = asked.result()
            platforms = {id(w): p for w, p in zip(watched, observed, strict=True)}
        chains: list[ChainPass] = []
        budget = SinkBudget(self.settings.sinks_timeout)  # one for every chain's sinks
        for m in self.members:
            label, work, watcher = m.label, m.work_dir, m.watcher
            if watcher is None:
                chains.append(ChainPass(label, work, error=m.error))
                continue
            try:
                result = watcher.run_pass(now, platforms.get(id(watcher)), budget)
            except OSError as exc:
                chains.append(ChainPass(label, work, error=f"pass failed: {exc}"))
                continue
            chains.append(ChainPass(watcher.target.chain.label, work, result))
        seen = [c for c in chains if c.result is not None]
        snaps = [c.result.snapshot for c in seen if c.result is not None]
        # Each chain's failed cycles, read once: for the fleet detectors and the summary's count.
        failed = [failed_cycles(s, self.settings.fleet_window) for s in snaps]
        for chain, cycles in zip(seen, failed, strict=True):
            chain.failed = len(cycles)
        fleet = FleetResult(
            now,
            chains,
            run_fleet_detectors(snaps, failed, self.settings),
            exit_codes=self.settings.exit_codes,
        )
        if self.slurm is not None:
            fleet.slurm_commands = sum(self.slurm.calls.values()) - before
        self._write_prom(fleet)
        return fleet

    def _write_prom(self, fleet: FleetResult) -> None:
        path = self.settings.prom_file
        if path is None:
            return
        parts = [
            ChainMetrics(r.snapshot, r.findings, r.degraded, r.last_success, r.goodput)
            for c in fleet.chains
            if (r := c.result) is not None
        ]
        # One textfile for all the chains: over none of their inputs (a pass has one chain per
        # member, in order).
        for m, c in zip(self.members, fleet.chains, strict=True):
            if m.watcher is not None:
                cycles = tuple(x.path for x in c.result.snapshot.cycles) if c.result else ()
                refuse_input(Path(path), m.watcher.target, m.watcher.dir, "prom_file", cycles)
        try:
            write_textfile(Path(path), prometheus_text(parts, list(COUNTED)))
        except OSError as exc:
            fleet.sink_errors.append(f"prom file: {exc}")


def build_fleet(
    work_dirs: Sequence[Path],
    job_ids: Sequence[str],
    settings: WatchSettings,
    slurm: Slurm | None,
    *,
    host: str,
    act: bool,
    dry_run: bool,
    no_restart_exit_code: int,
) -> Fleet:
    """One Watcher per chain (work dirs, and chains found by one of their job ids, as `watch
    JOB_ID` resolves them), each chain once; one that cannot be resolved is a blind member."""
    members: list[Member] = []
    seen: set[str] = set()
    requests = [Overrides(work_dir=d, platform=settings.platform) for d in work_dirs] + [
        Overrides(job_id=j, platform=settings.platform) for j in job_ids
    ]
    for over in requests:
        label = str(over.work_dir) if over.work_dir is not None else f"job {over.job_id}"
        over = replace(over, no_restart_exit_code=no_restart_exit_code)
        try:
            target: Target = resolve(over, slurm, settings, dry_run=dry_run)
        except WatchError as exc:
            work = str(over.work_dir) if over.work_dir else None
            members.append(Member(label, work, error=str(exc)))
            continue
        if target.state_key in seen:
            continue  # the same chain reached twice (a work dir and one of its jobs)
        seen.add(target.state_key)
        watcher = Watcher(
            target, settings, slurm, host=host, act=act, dry_run=dry_run, write_prom=False
        )
        members.append(Member(target.chain.label, target.chain.work_dir, watcher))
    return Fleet(members, settings, slurm)


def my_chains(slurm: Slurm) -> list[str]:
    """One job id per chain of the current user that the queue knows (one squeue): the first
    job of each job name, to resolve as `watch JOB_ID` does."""
    try:
        rows = slurm.queue(user=Slurm.current_user())
    except (SlurmError, SlurmValueError) as exc:
        raise FleetError(f"--mine: cannot list your jobs: {exc}") from None
    first: dict[str, str] = {}
    for row in sorted(rows, key=lambda r: (len(r.array_job_id), r.array_job_id)):
        first.setdefault(row.name, row.array_job_id)
    return list(first.values())
