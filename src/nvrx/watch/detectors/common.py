"""What the detector families share: the finding helpers (ages, durations, labels) and the
queue gates (a detector that needs the queue stays silent when squeue failed)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from nvrx.config import WatchSettings
from nvrx.display import printable
from nvrx.slurm.hostlist import compress
from nvrx.watch.model import ChainRef, CycleInfo, Finding, Platform, Snapshot

Detector = Callable[[Snapshot, WatchSettings], list[Finding]]

# Float thresholds (max_restarts × budget_fraction) are compared with this slack, so that
# 25 × 0.28 = 7.000000000000001 still counts cycle 7.
EPS = 1e-9


# --- helpers -----------------------------------------------------------------------------------


def seconds_since(now: datetime, then: datetime) -> float:
    """Seconds from `then` to `now` (negative when `then` is in the future)."""
    return (now - then).total_seconds()


FUTURE_SLACK = 5.0  # seconds: a time this far after the pass started is "now", not the future


def age_seconds(now: datetime, then: datetime | None) -> float | None:
    return None if then is None else round((now - then).total_seconds(), 1)


def ago(seconds: float | None) -> str:
    """`3.2h ago`, `40s ago`: an age on a screen line (`?` unknown)."""
    if seconds is None:
        return "?"
    if seconds < -FUTURE_SLACK:
        return "in the future"
    seconds = max(seconds, 0.0)  # a file written while the pass ran, not a clock ahead
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit} ago"
    return f"{seconds:.0f}s ago"


def iso_time(t: datetime | None) -> str | None:
    """A time in a finding's evidence (for programs): ISO 8601."""
    return t.isoformat() if t is not None else None


def utc_text(t: datetime | None) -> str | None:
    """A time in a finding's text (for people): UTC to the second, as every screen and page."""
    return f"{t.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if t is not None else None


def human_seconds(seconds: float) -> str:
    """`95 s`, `12.5 min`, `3.2 h`: short enough for a one-line summary."""
    if abs(seconds) < 120:
        return f"{seconds:.0f} s"
    if abs(seconds) < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


# A cycle's `cycle_log_file` comes from a file anyone who can write the work dir can write:
# shown escaped and cut to this many characters, never opened.
MAX_LOG_PATH_CHARS = 400
MAX_PATH_CHARS = 4096  # PATH_MAX: in evidence, longer is no path (a 1 MiB cycle file could be one)


def cycle_log(cycle: CycleInfo) -> str:
    """The cycle's own log (`cycle_log_file`) as text to show: control characters escaped,
    cut; "" when the launcher wrote none."""
    text = printable(cycle.log_file[: MAX_LOG_PATH_CHARS + 1])  # escapes only lengthen it
    return text if len(text) <= MAX_LOG_PATH_CHARS else text[: MAX_LOG_PATH_CHARS - 3] + "..."


def cycle_log_file(cycle: CycleInfo | None) -> str | None:
    """A cycle's `cycle_log_file` for evidence and `--json`: as the file has it (JSON escapes
    it), None when there is none."""
    if cycle is None or not cycle.log_file:
        return None
    path = cycle.log_file
    return path if len(path) <= MAX_PATH_CHARS else path[: MAX_PATH_CHARS - 3] + "..."


def cycle_log_note(cycle: CycleInfo | None) -> str:
    """`; cycle log of <key>: <path>`, to end a finding's detail with ("" without one)."""
    shown = cycle_log(cycle) if cycle is not None else ""
    return f"; cycle log of {cycle.key}: {shown}" if cycle is not None and shown else ""


def cycle_seconds(cycle: CycleInfo) -> float:
    """Seconds a completed cycle ran."""
    assert cycle.end is not None
    return (cycle.end - cycle.start).total_seconds()


def seconds_running(cycle: CycleInfo, now: datetime) -> float:
    return (now - cycle.start).total_seconds()


def chain_label(chain: ChainRef) -> str:
    """The chain's name for keys and messages (the name is what Slurm knows it by)."""
    return chain.name or chain.chain_id or "unnamed"


def queue_read(snap: Snapshot) -> Platform | None:
    """The platform when the queue was read this pass; None with `--platform none` or when blind."""
    platform = snap.platform
    if platform is None or not platform.queue_ok:
        return None
    return platform


def queue_gate(snap: Snapshot, job: str) -> bool:
    """The anomaly detectors' platform gate: does `job` still have a live task?

    True with `--platform none` (cycle files only, no gate). False when the queue could not be
    read: a blind watcher cannot tell a live run from a dead one, so it does not claim either.
    """
    platform = snap.platform
    if platform is None:
        return True
    if not platform.queue_ok:
        return False
    generation = platform.generation(job)
    return generation is not None and generation.live


def cancel_chain_hint(chain: ChainRef) -> str:
    if chain.work_dir:
        return f"nvrx submit-chain --cancel --work-dir {chain.work_dir}"
    hint = f"scancel --state=PENDING --name={chain_label(chain)}"
    if chain.user:
        hint += f" --user={chain.user}"
    return hint


def degraded(snap: Snapshot) -> bool:
    """The pass is blind (squeue, sinfo or sacct failed, the cycle-info files' location could
    not be read, or Slurm knows no job of the chain its cycle files are current for): exit 3
    (`watch.exit_codes`), no heartbeat (a blind watcher must not look healthy)."""
    platform = snap.platform
    return (
        snap.cycles_blind is not None
        or (
            platform is not None
            and not (platform.queue_ok and platform.accounting_ok and platform.drained is not None)
        )
        or unseen_job(snap) is not None
    )


def drain_state(snap: Snapshot, nodes: Sequence[str]) -> tuple[str, list[str] | None]:
    """Whether these nodes are drained yet, for a finding's text, and the drained ones (None:
    unknown, sinfo failed or no platform)."""
    platform = snap.platform
    if platform is None or platform.drained is None:
        return "drain state unknown", None
    drained = [n for n in nodes if platform.drained_node(n) is not None]
    if not drained:
        return "not drained", []
    if len(drained) == len(nodes):
        return ("drained" if len(nodes) == 1 else "all drained"), drained
    return f"drained: {compress(drained)}", drained


def unseen_job(snap: Snapshot) -> str | None:
    """The job of the latest cycle when Slurm should know it and does not: squeue and sacct
    both answered, neither lists it, and the cycle opened (or ended) within the accounting
    window the pass asked sacct about. A mistyped job name or user looks exactly so: every
    chain detector is silent because it sees no job, while the cycle files go on."""
    platform, latest = snap.platform, snap.latest
    if platform is None or not (platform.queue_ok and platform.accounting_ok) or latest is None:
        return None
    job = latest.job_id
    ids = snap.chain.manifest_job_ids
    if snap.chain.chain_id is not None and job not in ids:
        return None  # an nvrx chain's queries go by its ids: these are another chain's files
    if platform.generation(job) is not None or platform.ending(job) is not None:
        return None
    if any(s.job_id == job for s in platform.spans):
        return None
    window = platform.accounting_window
    last_sign = latest.end or latest.start
    return (
        job if window is not None and seconds_since(snap.observed_at, last_sign) <= window else None
    )


def current_live(snap: Snapshot) -> bool:
    """The current generation still runs (always true without a platform: cycles only).
    Findings about a generation's spares or restart budget stand down once it has ended."""
    job = snap.current_job
    return job is not None and (snap.platform is None or queue_gate(snap, job))
