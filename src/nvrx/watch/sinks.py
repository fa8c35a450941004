"""Where findings go besides the terminal: the log file, the payloads of the generic webhook and
PagerDuty, a Prometheus textfile. Observation and paging must not share fate: a failing sink is
logged and the pass goes on. The HTTP calls themselves are in `http_sinks`, imported only by a
pass that has a URL to call."""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import stat
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from nvrx.display import printable
from nvrx.files import open_append, system_path, write_atomic
from nvrx.watch.goodput import CATEGORIES, Goodput
from nvrx.watch.model import Finding, Severity, Snapshot

WEBHOOK = "webhook"
PAGERDUTY = "pagerduty"


class _OneLineFormatter(logging.Formatter):
    """Each record is one line of the log, whatever the names and messages in it hold (a cycle
    file named with a newline must not forge a record)."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


class SinkError(Exception):
    """A webhook, PagerDuty or heartbeat call that failed; the message never holds the URL
    (webhook and heartbeat URLs carry tokens)."""


class SinkBudget:
    """The time a pass (a fleet pass: all its chains) may spend calling out, every exchange
    together: each exchange has `watch.http_timeout`, but a pass with twenty findings and a
    webhook that drips its answer would otherwise take twenty of them. Started at the first
    exchange; what it cannot send is a sink error, retried by the next pass."""

    def __init__(self, total: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        self.clock = clock
        self.until: float | None = None

    def seconds(self, timeout: float) -> float:
        """How long the next exchange may take (at most `timeout`); SinkError when none is
        left."""
        now = self.clock()
        if self.until is None:
            self.until = now + self.total
        left = self.until - now
        if left <= 0:
            raise SinkError(
                f"not sent: this pass's {self.total:g} s for every sink together "
                "(watch.sinks_timeout) are spent; the next pass retries"
            )
        return min(timeout, left)


def quiet_logger() -> logging.Logger:
    """A logger that writes nowhere: a dry run's."""
    logger = logging.getLogger("nvrx.watch.quiet")
    if not logger.handlers:
        logger.propagate = False
        logger.addHandler(logging.NullHandler())
    return logger


def file_logger(path: Path) -> logging.Logger:
    """`<time> LEVEL message` lines in the chain's watch.log (upstream's format, without the
    `[DRY]` lines: a dry run writes nothing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger(f"nvrx.watch.{path}")
    if not logger.handlers:
        logger.propagate = False
        # Once: setLevel clears every logger's level cache, and a fleet has a logger per chain.
        logger.setLevel(logging.INFO)
        # Appended through files.open_append: never through a link, never blocking on a FIFO.
        stream = os.fdopen(open_append(path, "watch log"), "a", encoding="utf-8")
        handler = logging.StreamHandler(stream)
        handler.setFormatter(_OneLineFormatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
    return logger


def log_findings(logger: logging.Logger, findings: list[Finding]) -> None:
    for f in findings:
        level = {Severity.CRITICAL: logging.ERROR, Severity.WARNING: logging.WARNING}.get(
            f.severity, logging.INFO
        )
        logger.log(level, "[%s] %s %s", f.severity.value.upper(), f.key, f.summary)
        if f.detail:
            logger.log(level, "    %s", f.detail)


def webhook_payload(f: Finding, snap: Snapshot) -> dict[str, object]:
    finding = {k: v for k, v in f.to_json().items() if k != "evidence"}  # pagers want it short
    return {
        **finding,
        "text": f"[{f.severity.value.upper()}] {f.summary}",
        "chain": snap.chain.name,
        "chain_id": snap.chain.chain_id,
        "host": snap.host,
        "observed_at": snap.observed_at.isoformat(),
    }


def pagerduty_dedup_key(finding_key: str, snap: Snapshot) -> str:
    """The incident key of one finding of one chain: the same on every login node that watches
    the chain (no host, no time in it), so PagerDuty opens one incident, not one per watcher.
    At most 255 characters (the API's limit): a longer one keeps its start and a digest."""
    chain = snap.chain.chain_id or snap.chain.name or snap.chain.work_dir or "chain"
    key = f"nvrx-watch/{chain}/{finding_key}"
    if len(key) <= 255:
        return key
    return f"{key[:190]}/{hashlib.sha256(key.encode()).hexdigest()}"


def pagerduty_trigger(f: Finding, snap: Snapshot, routing_key: str) -> dict[str, object]:
    """An Events v2 `trigger` for one finding."""
    return {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": pagerduty_dedup_key(f.key, snap),
        "payload": {
            "summary": f"[{f.severity.value.upper()}] {f.summary}"[:1024],
            "source": snap.host,
            "severity": f.severity.value,  # PagerDuty's critical, warning and info
            "component": "nvrx-watch",
            "group": snap.chain.name or "",
            "class": f.detector,
            "timestamp": snap.observed_at.isoformat(),
            "custom_details": {
                "key": f.key,
                "detail": f.detail,
                "runbook": f.runbook,
                "command": list(f.command),
                "chain_id": snap.chain.chain_id,
                "work_dir": snap.chain.work_dir,
            },
        },
    }


def pagerduty_resolve(finding_key: str, snap: Snapshot, routing_key: str) -> dict[str, object]:
    """An Events v2 `resolve` of a finding's incident."""
    return {
        "routing_key": routing_key,
        "event_action": "resolve",
        "dedup_key": pagerduty_dedup_key(finding_key, snap),
    }


def _label(value: str | None) -> str:
    text = value or ""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


@dataclass(frozen=True)
class ChainMetrics:
    """One chain's pass, as the textfile shows it."""

    snap: Snapshot
    findings: list[Finding]
    degraded: bool
    last_success: datetime | None
    goodput: Goodput | None = None


def prometheus_text(chains: Sequence[ChainMetrics], detectors: list[str]) -> str:
    """Metrics in the node-exporter textfile format, one `chain` label per chain (a fleet pass
    writes every chain into one file, each metric's HELP and TYPE once). Every detector and
    severity has a series (0 when silent), so alerts on them do not see series appear and
    vanish."""
    series: dict[str, tuple[str, list[tuple[str, float]]]] = {}

    def metric(name: str, help_: str, samples: list[tuple[str, float]]) -> None:
        series.setdefault(name, (help_, []))[1].extend(samples)

    for part in chains:
        _chain_metrics(part, detectors, metric)
    lines: list[str] = []
    for name, (help_, samples) in series.items():
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} gauge")
        lines += [f"{name}{{{labels}}} {value:g}" for labels, value in samples]
    return "\n".join(lines) + "\n"


def _chain_metrics(
    part: ChainMetrics,
    detectors: list[str],
    metric: Callable[[str, str, list[tuple[str, float]]], None],
) -> None:
    snap, findings, degraded, last_success = (
        part.snap, part.findings, part.degraded, part.last_success
    )  # fmt: skip
    chain = f'chain="{_label(snap.chain.label)}"'

    current = snap.current_job
    metric(
        "nvrx_watch_degraded",
        "1 when the last pass could not read Slurm",
        [(chain, 1 if degraded else 0)],
    )
    metric(
        "nvrx_watch_last_pass_timestamp_seconds",
        "time of the last pass",
        [(chain, snap.observed_at.timestamp())],
    )
    if last_success is not None:
        metric(
            "nvrx_watch_last_success_timestamp_seconds",
            "time of the last non-degraded pass",
            [(chain, last_success.timestamp())],
        )
    if current is not None:
        count = snap.cycles.count_of(current)
        job = f'{chain},job="{_label(current)}"'
        metric("nvrx_watch_cycles", "cycles of the current generation", [(job, count)])
        metric(
            "nvrx_watch_restarts",
            "in-job restarts of the current generation",
            [(job, max(count - 1, 0))],
        )
    platform = snap.platform
    if platform is not None and platform.queue_ok and platform.drained is not None:
        # Absent when sinfo failed (nvrx_watch_degraded says so): never a false 0.
        metric(
            "nvrx_watch_drained_nodes_in_use",
            "drained nodes the chain's running tasks hold",
            [(chain, len({d.name for _, _, d in platform.drained_in_use()}))],
        )
    ckpt = snap.checkpoint
    if ckpt.value is not None:
        metric(
            "nvrx_watch_checkpoint_iteration", "last checkpointed iteration", [(chain, ckpt.value)]
        )
    if ckpt.mtime is not None:
        age = (snap.observed_at - ckpt.mtime).total_seconds()
        metric(
            "nvrx_watch_checkpoint_age_seconds",
            "age of the checkpoint iteration file",
            [(chain, max(age, 0.0))],
        )
    good = part.goodput
    if good is not None and good.fraction is not None:
        metric(
            "nvrx_watch_goodput_ratio",
            "productive training time over wall time (docs/goodput.md)",
            [(chain, good.fraction)],
        )
        metric(
            "nvrx_watch_goodput_seconds",
            "the chain's wall time by category (docs/goodput.md)",
            [(f'{chain},category="{k}"', good.seconds.get(k, 0.0)) for k in CATEGORIES],
        )
    counts = Counter(f.detector for f in findings)
    metric(
        "nvrx_watch_findings",
        "findings of the last pass by detector",
        [(f'{chain},detector="{d}"', counts.get(d, 0)) for d in detectors],
    )
    by_severity = Counter(f.severity.value for f in findings)
    metric(
        "nvrx_watch_findings_total",
        "findings of the last pass by severity",
        [(f'{chain},severity="{s.value}"', by_severity.get(s.value, 0)) for s in Severity],
    )


def write_textfile(path: Path, text: str) -> None:
    """Atomic, as node_exporter's textfile collector requires: so a regular file, or none yet.
    A FIFO, a device or a link of the system's there is refused (OSError), never renamed over:
    node_exporter would not read it, and its reader would wait for ever."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    if system_path(path) or (st is not None and not stat.S_ISREG(st.st_mode)):
        raise OSError(errno.EINVAL, f"{path} is not a regular file: refusing to replace it")
    write_atomic(path, text, mode=0o644)
