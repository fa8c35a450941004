"""One watch pass, end to end: observe, detect, (maybe) act, report to the sinks, remember.

Detect ≠ act: the actions (cancelling an orphaned generation's pending tasks; with
`watch.drain_suspects`, draining a suspect node) run only with --act; observe-only prints the
command the owner should run. --dry-run suppresses the
action, alerts, heartbeat and state writes.

One module because a pass is one transaction under the state lock: what it observed, the
alerts it sent and the state it saves must come from the same pass (a damaged cycle cache
makes the pass again, whole).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from nvrx.chain.manifest import manifest_path, read_manifest
from nvrx.chain.shape import ChainError
from nvrx.config import WatchSettings
from nvrx.contract import FOUND, OK, UNJUDGED
from nvrx.files import InputError, read_key_file
from nvrx.slurm import JobState, Slurm, SlurmError, SlurmValueError
from nvrx.watch.cyclecache import CycleCache, CycleCacheDamaged
from nvrx.watch.cycles import CycleRead, read_cycles
from nvrx.watch.detectors import COUNTED, run_detectors
from nvrx.watch.detectors import degraded as is_degraded
from nvrx.watch.detectors.anomaly import last_progress
from nvrx.watch.detectors.observer import refuse_actions
from nvrx.watch.goodput import Goodput, goodput
from nvrx.watch.model import (
    CancelPending,
    DrainNode,
    Finding,
    Platform,
    Severity,
    Snapshot,
)
from nvrx.watch.observe import observe
from nvrx.watch.resolve import Target, from_manifest, refuse_input
from nvrx.watch.sinks import (
    PAGERDUTY,
    WEBHOOK,
    ChainMetrics,
    SinkBudget,
    SinkError,
    file_logger,
    log_findings,
    pagerduty_resolve,
    pagerduty_trigger,
    prometheus_text,
    quiet_logger,
    webhook_payload,
    write_textfile,
)
from nvrx.watch.state import WatchState, load_state, save_state

if TYPE_CHECKING:
    from nvrx.watch.http_sinks import HttpSinks


# Whose exit codes a pass exits with (watch.exit_codes; docs/output-contract.md has the table).
ExitCodes = Literal["nvrx", "upstream"]
UPSTREAM_BLIND, UPSTREAM_CRITICAL = 1, 2


def pass_exit_code(*, critical: bool, blind: bool, codes: ExitCodes = "nvrx") -> int:
    """A pass's exit code (or a fleet pass's: any chain critical, any blind). nvrx's contract:
    3 blind, which wins (an answer over what was not all seen is not complete), 1 critical, 0.
    Upstream's watcher, for cron wrappers written for it: 2 at least one critical finding (so
    in a blind pass too: such a wrapper pages on 2), 1 blind, 0. Bad input is 2 under both."""
    if codes == "upstream":
        return UPSTREAM_CRITICAL if critical else UPSTREAM_BLIND if blind else OK
    return UNJUDGED if blind else FOUND if critical else OK


@dataclass
class PassResult:
    snapshot: Snapshot
    findings: list[Finding]
    degraded: bool
    actions: list[str] = field(default_factory=list)
    sink_errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    last_success: datetime | None = None  # this host's last pass that saw (the state's)
    goodput: Goodput | None = None
    exit_codes: ExitCodes = "nvrx"  # watch.exit_codes: whose codes `exit_code` is in
    drain_suspects: bool = False  # watch.drain_suspects: a suspect node may be drained...
    acting: bool = False  # ... by this pass (--act, not a dry run)

    @property
    def critical(self) -> bool:
        return any(f.severity is Severity.CRITICAL for f in self.findings)

    @property
    def exit_code(self) -> int:
        return pass_exit_code(critical=self.critical, blind=self.degraded, codes=self.exit_codes)

    @property
    def state(self) -> str:
        """One word for the pass, never better than its worst finding: `blind` (the pass could
        not see), `critical`, `warning`, `info` or `ok`."""
        return pass_state(self.findings, self.degraded)


# Worst first, as the exit codes rank them (nvrx.contract: 3, blind, wins over 1, critical).
STATE_ORDER = ("blind", "critical", "warning", "info", "ok")


def worst_state(states: Iterable[str]) -> str:
    """The worst of `states` (words of STATE_ORDER, or finding severities); `ok` for none."""
    present = set(states)
    return next((s for s in STATE_ORDER if s in present), "ok")


def pass_state(findings: list[Finding], degraded: bool) -> str:
    return worst_state([*(f.severity.value for f in findings), *(["blind"] * degraded)])


@dataclass
class Watcher:
    target: Target
    settings: WatchSettings
    slurm: Slurm | None
    host: str
    act: bool = False
    dry_run: bool = False
    http: HttpSinks | None = None
    write_prom: bool = True  # a fleet pass writes one textfile for all its chains instead
    # The target was resolved (its manifest read) just before the first pass: a cron pass of a
    # fleet of 100 chains need not read every manifest twice.
    fresh: bool = field(default=True, repr=False)
    # The cycle files this pass read ahead (`read_ahead`), with the cache it read them with.
    _ahead: tuple[CycleCache, CycleRead] | None = field(default=None, repr=False)

    _dir: tuple[str, Path] | None = field(default=None, repr=False)
    # The time this pass (or the fleet pass it is part of) may still spend on its sinks.
    _budget: SinkBudget | None = field(default=None, repr=False)
    # Slurm's node list as this pass read it for a drain (or why it could not be read).
    _nodes: frozenset[str] | SlurmError | None = field(default=None, repr=False)

    @property
    def dir(self) -> Path:
        """The chain's state directory (built once per target: a pass asks for it often)."""
        key = self.target.state_key
        if self._dir is None or self._dir[0] != key:
            self._dir = (key, Path(self.settings.state_dir) / key)
        return self._dir[1]

    def refresh_target(self) -> None:
        """An nvrx chain's manifest changes as it is extended or cancelled: reread it (not for
        the first pass, whose target was just resolved from it)."""
        if self.fresh:
            self.fresh = False
            return
        chain = self.target.chain
        if chain.resolved_from != "manifest" or chain.work_dir is None:
            return
        try:
            fresh = from_manifest(read_manifest(manifest_path(Path(chain.work_dir))))
        except ChainError:
            return
        self.target = replace(
            self.target,
            chain=replace(
                fresh.chain,
                user=chain.user,
                name=chain.name,
                max_restarts=chain.max_restarts,
            ),
        )

    def read_ahead(self) -> None:
        """Read the cycle files for the next pass now (a fleet pass does, while Slurm answers).
        The cache is saved by the pass, under the chain's lock, if it is the state's owner."""
        try:
            cache = CycleCache(self.dir / "cycles-cache.json", read_only=True)
            self._ahead = (cache, read_cycles(list(self.target.cycle_globs), cache, save=False))
        except OSError:
            self._ahead = None  # the pass reads them itself, and says what broke

    def run_pass(
        self,
        now: datetime | None = None,
        platform: Platform | None = None,
        budget: SinkBudget | None = None,
    ) -> PassResult:
        """One pass; `platform` when a fleet pass already asked Slurm for every chain (and
        refreshed the target to ask it), `budget` the fleet pass's time for all its sinks."""
        now = now or datetime.now(UTC)
        self._budget = budget or SinkBudget(self.settings.sinks_timeout)
        if platform is None:
            self.refresh_target()
        if self.dry_run:  # reads the state if there is one; creates nothing, not even the lock
            return self._checked_pass(now, platform, writes=False, owner=True)
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "a+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                owner = True
            except BlockingIOError:
                owner = False  # another login node's pass holds the state: observe only
            try:
                writes = owner and not self.dry_run
                return self._checked_pass(now, platform, writes=writes, owner=owner)
            finally:
                if owner:
                    fcntl.flock(lock, fcntl.LOCK_UN)

    def _checked_pass(
        self, now: datetime, platform: Platform | None, *, writes: bool, owner: bool
    ) -> PassResult:
        """A pass whose cycle cache turns out damaged (a record the crc accepted that does not
        decode: tampering) is made again from the files themselves, the cache set aside as
        `cycles-cache.json.damaged` when the pass may write (it is derived data: nothing is
        lost), and the pass says so."""
        try:
            return self._pass(now, platform, writes=writes, owner=owner)
        except CycleCacheDamaged as exc:
            self._ahead = None
            cache = self.dir / "cycles-cache.json"
            if writes:
                with contextlib.suppress(OSError):
                    os.replace(cache, cache.with_name(cache.name + ".damaged"))
            result = self._pass(now, platform, writes=writes, owner=owner, use_cache=False)
            result.notes.append(f"{exc}: set aside, the cycle files read again")
            return result

    def _pass(
        self,
        now: datetime,
        platform: Platform | None,
        *,
        writes: bool,
        owner: bool,
        use_cache: bool = True,
    ) -> PassResult:
        state = load_state(self.dir / "state.json")
        read: CycleRead | None = None
        if self._ahead is not None:
            (cache, read), self._ahead = self._ahead, None
            cache.read_only = not writes
        else:
            cache = CycleCache(self.dir / "cycles-cache.json", read_only=not writes, load=use_cache)
        snap = observe(
            self.target,
            self.slurm,
            self.settings,
            state,
            cache,
            host=self.host,
            now=now,
            platform=platform,
            read=read,
        )
        detected = run_detectors(snap, self.settings)
        findings = [
            replace(f, first_seen=state.first_seen(f.key, now))
            for f in refuse_actions(detected, self._node_names(detected))
        ]
        result = PassResult(
            snap,
            findings,
            is_degraded(snap),
            exit_codes=self.settings.exit_codes,
            drain_suspects=self.settings.drain_suspects,
            acting=self.act and not self.dry_run,
        )
        spans = state.see_spans(snap.platform.spans if snap.platform is not None else ())
        hung = any(f.detector == "cycle_stalled" for f in findings)
        result.goodput = goodput(
            snap.cycles,
            spans,
            state.saves,
            now,
            state.unsaved_until,
            state.goodput_shares,
            stalled_since=last_progress(snap) if hung else None,
            accounting=snap.platform is not None and snap.platform.accounting_ok,
            verdicts=snap.no_restart_flags,
        )
        state.keep_shares({b.ident for b in snap.cycles.blocks if b.ident is not None})
        if not result.degraded:
            # A blind pass silences the queue-based detectors; their findings are not over.
            state.forget_findings_except({f.key for f in findings})
        if state.note:
            result.notes.append(state.note)
        result.notes += [*snap.notes, *(f"skipped {s.path}: {s.reason}" for s in snap.skipped)]
        if not owner:
            result.notes.append(
                "another watch pass holds this chain's state: no alerts, state or cache writes"
            )

        # A dry run (and --goodput, a report) leaves no trace: not even a log line.
        logger = quiet_logger() if self.dry_run else file_logger(self.dir / "watch.log")
        log_findings(logger, findings)
        for note in result.notes:
            logger.info("note: %s", note)
        self._act(result, logger)
        if writes:
            self._alert(result, state, now, logger)
        if not result.degraded:
            state.last_success[self.host] = now
        result.last_success = state.last_success.get(self.host)
        if self.settings.prom_file is not None and writes and self.write_prom:
            cycles = tuple(c.path for c in snap.cycles)
            refuse_input(Path(self.settings.prom_file), self.target, self.dir, "prom_file", cycles)
            try:
                write_textfile(
                    Path(self.settings.prom_file),
                    prometheus_text(
                        [
                            ChainMetrics(
                                snap,
                                findings,
                                result.degraded,
                                state.last_success.get(self.host),
                                result.goodput,
                            )
                        ],
                        list(COUNTED),
                    ),
                )
            except OSError as exc:
                self._sink_failed(result, logger, f"prom file: {exc}")
        if not result.degraded and not self.dry_run and self.settings.heartbeat_url:
            # A dead-man switch: it must stop when the watcher cannot see (a blind pass).
            try:
                self._client().get(self.settings.heartbeat_url)
            except SinkError as exc:
                self._sink_failed(result, logger, f"heartbeat: {exc}")
        state.last_pass = now
        if writes:
            try:
                save_state(state, self.dir / "state.json")
            except OSError as exc:
                result.notes.append(f"state not saved: {exc}")
        return result

    def _node_names(self, findings: list[Finding]) -> frozenset[str] | None:
        """Slurm's node list, asked (one sinfo) only by a pass that may drain: --act, and a
        finding that offers to. A drain runs on nothing but a name in it; None when it was not
        asked, or could not be read (`_drain` then runs nothing: the next pass asks again)."""
        self._nodes = None
        if not self.act or self.dry_run or self.slurm is None:
            return None
        if not any(isinstance(f.action, DrainNode) for f in findings):
            return None
        try:
            self._nodes = self.slurm.node_names()
        except SlurmError as exc:
            self._nodes = exc
            return None
        return self._nodes

    def _client(self) -> HttpSinks:
        if self.http is None:
            from nvrx.watch.http_sinks import HttpSinks  # httpx only for a pass that calls out

            self.http = HttpSinks(self.settings.http_timeout)
        self.http.budget = self._budget
        return self.http

    def _sink_failed(self, result: PassResult, logger: logging.Logger, message: str) -> None:
        result.sink_errors.append(message)
        logger.warning("sink failed: %s", message)

    def _act(self, result: PassResult, logger: logging.Logger) -> None:
        for f in result.findings:
            if f.action is None:
                continue
            command = shlex.join(f.action.argv)
            if self.dry_run:
                line = f"[dry-run] would run: {command}"
            elif not self.act:
                line = f"[observe-only] not acting; owner should run: {command}"
            elif isinstance(f.action, DrainNode):
                line = self._drain(f.action)
            elif self.target.chain.chain_id is None:
                # Without a chain id nothing proves the generation belongs to the watched run
                # (another chain may share the name): never cancel on a guess.
                line = (
                    "[observe-only] --act needs an nvrx chain (a manifest with a chain id); "
                    f"owner should run: {command}"
                )
            else:
                line = self._cancel_pending(f.action)
            result.actions.append(line)
            logger.info("%s", line)

    def _drain(self, action: DrainNode) -> str:
        """Drain a suspect node (offered only with `watch.drain_suspects`, for a node not
        drained yet; draining it again would only renew its reason)."""
        assert self.slurm is not None
        if not isinstance(self._nodes, frozenset):
            why = f"Slurm's node list could not be read: {self._nodes}"
            return f"[act] FAILED: {shlex.join(action.argv)}: {why} (next pass retries)"
        try:
            argv = self.slurm.drain_node(action.node, action.reason)
        except (SlurmError, SlurmValueError) as exc:
            return f"[act] FAILED: {shlex.join(action.argv)}: {exc} (next pass retries)"
        return f"[act] ran: {shlex.join(argv)}"

    def _cancel_pending(self, action: CancelPending) -> str:
        """The one action: cancel an orphaned generation's pending tasks (idempotent; a failure
        is retried on the next pass)."""
        assert self.slurm is not None
        try:
            argv = self.slurm.cancel([action.generation], state=JobState.PENDING)
        except SlurmError as exc:
            return f"[act] FAILED: {shlex.join(action.argv)}: {exc} (next pass retries)"
        return f"[act] ran: {shlex.join(argv)}"

    def _alert(
        self, result: PassResult, state: WatchState, now: datetime, logger: logging.Logger
    ) -> None:
        self._webhook(result, state, now, logger)
        self._pagerduty(result, state, now, logger)

    def _pagerduty(
        self, result: PassResult, state: WatchState, now: datetime, logger: logging.Logger
    ) -> None:
        """Trigger an incident per finding (cooled down like the webhook), and resolve the
        incidents this watcher opened whose finding is gone, after a pass that saw (a blind
        pass proves nothing cleared)."""
        url = self.settings.pd_url
        key = self._routing_key(result, logger)
        if key is None or not url:
            return
        self._send_each(
            result, state, now, logger, PAGERDUTY, url,
            lambda f: pagerduty_trigger(f, result.snapshot, key),
        )  # fmt: skip
        if result.degraded:
            return
        current = {f.key for f in result.findings}
        for gone in state.alerted_keys(PAGERDUTY):
            if gone in current:
                continue
            try:
                self._client().post(url, pagerduty_resolve(gone, result.snapshot, key))
            except SinkError as exc:
                self._sink_failed(result, logger, f"pagerduty resolve {gone}: {exc}")
                continue  # kept: the next pass resolves it
            state.forget_alert(gone, PAGERDUTY)
            logger.info("resolved: %s", gone)

    def _routing_key(self, result: PassResult, logger: logging.Logger) -> str | None:
        """The PagerDuty routing key (setting, else its file); None when there is none. A file
        that cannot be read is a sink failure naming the file, never its contents."""
        s = self.settings
        if s.pd_routing_key is not None:
            return s.pd_routing_key.get_secret_value()
        if s.pd_routing_key_file is None:
            return None
        try:
            return read_key_file(s.pd_routing_key_file, "PagerDuty key file")[0]
        except InputError as exc:
            self._sink_failed(result, logger, f"pagerduty: {exc}")
            return None

    def _webhook(
        self, result: PassResult, state: WatchState, now: datetime, logger: logging.Logger
    ) -> None:
        url = self.settings.webhook_url
        if url:
            self._send_each(
                result, state, now, logger, WEBHOOK, url,
                lambda f: webhook_payload(f, result.snapshot),
            )  # fmt: skip

    def _send_each(
        self,
        result: PassResult,
        state: WatchState,
        now: datetime,
        logger: logging.Logger,
        sink: str,
        url: str,
        payload: Callable[[Finding], dict[str, object]],
    ) -> None:
        """POST each finding to one sink, at most once per finding and cooldown; one that fails
        is a sink error and is not marked as sent (the next pass retries it)."""
        cooldown = self.settings.alert_cooldown
        for f in result.findings:
            if not state.may_alert(f.key, sink, now, cooldown):
                continue
            try:
                self._client().post(url, payload(f))
            except SinkError as exc:
                self._sink_failed(result, logger, f"{sink} for {f.key}: {exc}")
                continue
            state.alerted(f.key, sink, now, cooldown)
