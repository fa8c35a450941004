"""The watch's memory between passes: one atomic JSON file per watched chain.

Losing it is harmless (only cooldowns and first-seen times reset), so a corrupt file starts
fresh instead of stopping observation.
"""

from __future__ import annotations

import errno
import itertools
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from nvrx.files import InputError, read_bounded, write_atomic
from nvrx.slurm.states import ExitStatus, JobState
from nvrx.watch.model import CounterDrop, CycleInfo, Cycles, GenerationSpan, SaveSeen

SCHEMA = 1
_ADVANCES_KEPT = 12
# Goodput's memory: the saves passes saw, and generations' spans after the churn window let go
# of them. Bounded: a chain of a thousand generations saving every few minutes for weeks.
_SAVES_KEPT = 5000
_SPANS_KEPT = 2000


# The ranges a value of the state may take (anything else is left out: the state is a cache,
# and a 400-digit counter or a time in year 1 would overflow the arithmetic that uses it).
_EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
_LATEST = datetime(2200, 1, 1, tzinfo=UTC)
_MAX_COUNT = 1 << 63


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None or not _EARLIEST <= parsed < _LATEST:
        return None
    return parsed


def _count(value: Any) -> bool:
    """A counter the state may hold: an int (not a bool) in [0, 2**63)."""
    return type(value) is int and 0 <= value < _MAX_COUNT


@dataclass
class WatchState:
    last_pass: datetime | None = None
    # Per host: a login node that stays blind must not borrow another node's success.
    last_success: dict[str, datetime] = field(default_factory=dict)
    checkpoint_value: int | None = None
    checkpoint_first_seen: datetime | None = None
    # (value, file mtime) each time the value changed: the observed checkpoint save interval.
    checkpoint_advances: list[tuple[int, datetime]] = field(default_factory=list)
    # The highest values seen (a drop below them is a finding until they are reached again).
    checkpoint_high: int | None = None
    cycle_high: dict[str, int] = field(default_factory=dict)  # "<job>.<attempt>" → cycle
    findings: dict[str, datetime] = field(default_factory=dict)  # key → first seen
    alerts: dict[str, datetime] = field(default_factory=dict)  # "key\0sink" → last sent
    note: str | None = None  # why the previous file was not used
    # The checkpoint file's text when it last held no integer, and since when (a file caught
    # mid-write changes; one that keeps `release` or junk does not, and is reported).
    checkpoint_text: str | None = None
    checkpoint_text_since: datetime | None = None
    saves: list[SaveSeen] = field(default_factory=list)  # oldest first
    # The last pass that found no checkpoint file yet: nothing had been saved until then.
    unsaved_until: datetime | None = None
    spans: dict[str, GenerationSpan] = field(default_factory=dict)  # by generation
    # Goodput's share of each closed, unchanged cycle directory, with what it was computed from
    # (`goodput.Shares`): a warm pass need not decode their columns again.
    goodput_shares: dict[str, list[Any]] = field(default_factory=dict)

    def see_save(self, value: int, mtime: datetime, now: datetime) -> None:
        """The file holds `value` saved at `mtime`, as this pass at `now` saw it."""
        last = self.saves[-1] if self.saves else None
        if last is not None and last.iteration == value and last.at == mtime:
            self.saves[-1] = SaveSeen(value, mtime, max(now, last.seen_until))
            return
        self.saves.append(SaveSeen(value, mtime, now))
        del self.saves[:-_SAVES_KEPT]

    def see_spans(self, spans: Sequence[GenerationSpan]) -> list[GenerationSpan]:
        """Merge this pass's generation spans into those remembered; all of them, by start. A
        no-restart verdict once seen stays (a flag file cleaned up later does not undo it)."""
        for span in spans:
            known = self.spans.get(span.job_id)
            if known is not None and known.no_restart and not span.no_restart:
                span = replace(span, no_restart=True)
            self.spans[span.job_id] = span
        if len(self.spans) > _SPANS_KEPT:
            keep = sorted(self.spans.values(), key=_span_order)[-_SPANS_KEPT:]
            self.spans = {s.job_id: s for s in keep}
        return sorted(self.spans.values(), key=_span_order)

    def see_checkpoint(self, value: int | None, mtime: datetime | None, now: datetime) -> None:
        if value is None:
            return
        if mtime is not None:
            self.see_save(value, mtime, now)
        if value != self.checkpoint_value:
            if self.checkpoint_value is not None and mtime is not None:
                self.checkpoint_advances.append((value, mtime))
                del self.checkpoint_advances[:-_ADVANCES_KEPT]
            self.checkpoint_value = value
            # The value has been there since the file was written, not since this watcher
            # first looked (the first pass after a restart of the watcher must not reset it).
            self.checkpoint_first_seen = min(mtime, now) if mtime is not None else now

    def see_checkpoint_text(self, text: str | None, now: datetime) -> datetime | None:
        """Remember a checkpoint file that holds no integer (`text`; None: it holds one again).
        The time it has held this same text since, when a pass before this one saw it too."""
        if text is None or text != self.checkpoint_text:
            self.checkpoint_text = text
            self.checkpoint_text_since = now if text is not None else None
            return None
        return self.checkpoint_text_since

    def see_counters(
        self, checkpoint: int | None, cycles: Sequence[CycleInfo]
    ) -> list[CounterDrop]:
        """Compare the checkpoint iteration and each generation attempt's highest cycle number
        with the highest ever seen; remember the new highs. A generation attempt with no cycle
        file left is forgotten (its directory was cleaned up)."""
        drops: list[CounterDrop] = []
        if checkpoint is not None:
            high = self.checkpoint_high
            if high is not None and checkpoint < high:
                drops.append(CounterDrop("checkpoint", "iteration", high, checkpoint))
            else:
                self.checkpoint_high = checkpoint
        latest = (cycles if isinstance(cycles, Cycles) else Cycles.of(cycles)).highs()
        for scope, number in sorted(latest.items()):
            high = self.cycle_high.get(scope)
            if high is not None and number < high:
                drops.append(CounterDrop("cycle", scope, high, number))
                latest[scope] = high
        self.cycle_high = latest
        return drops

    def save_interval_seconds(self, save_every: int | None = None) -> float | None:
        """Seconds between two checkpoints, from the advances the watcher saw.

        The watcher samples the file every pass, so the time between two seen advances is the
        pass period, not the save interval: the rate (seconds per iteration between samples)
        times the iterations per save is. Iterations per save come from the chain (Megatron's
        --save-interval) or, failing that, the greatest common divisor of the observed steps.
        """
        steps = [
            (v2 - v1, (t2 - t1).total_seconds())
            for (v1, t1), (v2, t2) in itertools.pairwise(self.checkpoint_advances)
            if v2 > v1 and t2 > t1
        ]
        if not steps:
            return None
        every = save_every or math.gcd(*(dv for dv, _ in steps))
        return statistics.median(dt / dv for dv, dt in steps) * every

    def first_seen(self, key: str, now: datetime) -> datetime:
        return self.findings.setdefault(key, now)

    def forget_findings_except(self, keys: set[str]) -> None:
        """A finding that cleared starts over if it comes back."""
        self.findings = {k: v for k, v in self.findings.items() if k in keys}

    def may_alert(self, key: str, sink: str, now: datetime, cooldown: float) -> bool:
        last = self.alerts.get(f"{key}\0{sink}")
        return last is None or (now - last).total_seconds() >= cooldown

    def alerted(self, key: str, sink: str, now: datetime, cooldown: float) -> None:
        self.alerts[f"{key}\0{sink}"] = now
        horizon = now - timedelta(seconds=max(4 * cooldown, 86400))
        self.alerts = {k: v for k, v in self.alerts.items() if v >= horizon}

    def alerted_keys(self, sink: str) -> list[str]:
        """The finding keys this watcher has alerted `sink` about and not forgotten."""
        return sorted(k.split("\0", 1)[0] for k in self.alerts if k.endswith(f"\0{sink}"))

    def forget_alert(self, key: str, sink: str) -> None:
        self.alerts.pop(f"{key}\0{sink}", None)

    def keep_shares(self, idents: set[str]) -> None:
        """Forget the goodput shares of directories this pass did not find unchanged."""
        self.goodput_shares = {k: v for k, v in self.goodput_shares.items() if k in idents}

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "last_pass": self.last_pass.isoformat() if self.last_pass else None,
            "last_success": {h: t.isoformat() for h, t in self.last_success.items()},
            "checkpoint": {
                "value": self.checkpoint_value,
                "first_seen": self.checkpoint_first_seen.isoformat()
                if self.checkpoint_first_seen
                else None,
                "advances": [[v, t.isoformat()] for v, t in self.checkpoint_advances],
                "high": self.checkpoint_high,
                "text": self.checkpoint_text,
                "text_since": self.checkpoint_text_since.isoformat()
                if self.checkpoint_text_since
                else None,
            },
            "cycle_high": self.cycle_high,
            "unsaved_until": self.unsaved_until.isoformat() if self.unsaved_until else None,
            "saves": [
                [s.iteration, s.at.isoformat(), s.seen_until.isoformat()] for s in self.saves
            ],
            "spans": [
                [
                    s.job_id,
                    s.start.isoformat() if s.start else None,
                    s.end.isoformat() if s.end else None,
                    s.state.value if s.state else None,
                    str(s.exit) if s.exit else None,
                    s.no_restart,
                ]
                for s in self.spans.values()
            ],
            "findings": {k: v.isoformat() for k, v in self.findings.items()},
            "alerts": {k: v.isoformat() for k, v in self.alerts.items()},
            "goodput_shares": self.goodput_shares,
        }


def load_state(path: Path) -> WatchState:
    try:
        data = json.loads(read_bounded(path, "state file", limit=16 << 20, remember=False)[0])
    except InputError as exc:
        if getattr(exc, "errno", None) == errno.ENOENT:
            return WatchState()
        return WatchState(note=f"{exc}; starting fresh")
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return WatchState(note=f"state file {path} unreadable ({exc}); starting fresh")
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return WatchState(note=f"state file {path} has another schema; starting fresh")
    raw_ckpt = data.get("checkpoint")
    ckpt: dict[str, Any] = raw_ckpt if isinstance(raw_ckpt, dict) else {}
    advances: list[tuple[int, datetime]] = []
    for item in ckpt.get("advances") or []:
        if isinstance(item, list) and len(item) == 2 and _count(item[0]):
            when = _time(item[1])
            if when is not None:
                advances.append((item[0], when))
    value = ckpt.get("value")

    def times(mapping: Any) -> dict[str, datetime]:
        out: dict[str, datetime] = {}
        if isinstance(mapping, dict):
            for k, v in mapping.items():
                when = _time(v)
                if isinstance(k, str) and when is not None:
                    out[k] = when
        return out

    high = ckpt.get("high")
    raw_cycles = data.get("cycle_high")
    cycle_high = {
        k: v
        for k, v in (raw_cycles.items() if isinstance(raw_cycles, dict) else ())
        if isinstance(k, str) and _count(v)
    }
    return WatchState(
        checkpoint_high=high if _count(high) else None,
        cycle_high=cycle_high,
        last_pass=_time(data.get("last_pass")),
        last_success=times(data.get("last_success")),
        checkpoint_value=value if _count(value) else None,
        checkpoint_first_seen=_time(ckpt.get("first_seen")),
        checkpoint_advances=advances,
        checkpoint_text=text if isinstance(text := ckpt.get("text"), str) else None,
        checkpoint_text_since=_time(ckpt.get("text_since")),
        findings=times(data.get("findings")),
        alerts=times(data.get("alerts")),
        saves=_saves(data.get("saves")),
        unsaved_until=_time(data.get("unsaved_until")),
        spans=_spans(data.get("spans")),
        goodput_shares=_shares(data.get("goodput_shares")),
    )


def _span_order(span: GenerationSpan) -> tuple[float, str]:
    return (span.start.timestamp() if span.start else float("inf"), span.job_id)


def _saves(raw: Any) -> list[SaveSeen]:
    """The remembered saves; an item that is not one is left out (the state is a cache)."""
    out = []
    for item in raw if isinstance(raw, list) else ():
        if isinstance(item, list) and len(item) == 3 and _count(item[0]):
            at, until = _time(item[1]), _time(item[2])
            if at is not None and until is not None:
                out.append(SaveSeen(item[0], at, until))
    return out[-_SAVES_KEPT:]


def _spans(raw: Any) -> dict[str, GenerationSpan]:
    out: dict[str, GenerationSpan] = {}
    for item in raw if isinstance(raw, list) else ():
        # Five items: a state written before the no-restart verdict was remembered.
        if not (isinstance(item, list) and len(item) in (5, 6) and isinstance(item[0], str)):
            continue
        try:
            state = JobState(item[3]) if isinstance(item[3], str) else None
            code = ExitStatus.parse(item[4]) if isinstance(item[4], str) else None
        except ValueError:
            state = code = None
        verdict = len(item) == 6 and item[5] is True
        out[item[0]] = GenerationSpan(
            item[0], _time(item[1]), _time(item[2]), state, code, no_restart=verdict
        )
    return out


def _shares(raw: Any) -> dict[str, list[Any]]:
    """Remembered goodput shares; one that is not [fingerprint, five integers] is left out (it
    is computed again)."""
    out: dict[str, list[Any]] = {}
    for key, value in raw.items() if isinstance(raw, dict) else ():
        if (
            isinstance(key, str)
            and isinstance(value, list)
            and len(value) == 2
            and isinstance(value[1], list)
            and len(value[1]) == 5
            and all(_count(n) for n in value[1])
        ):
            out[key] = value
    return out


def save_state(state: WatchState, path: Path) -> None:
    """Atomically: every login node may run the watch at once."""
    # Compact: json's C encoder does not indent, and the state is written on every pass.
    write_atomic(path, json.dumps(state.to_json(), separators=(",", ":")) + "\n", mode=0o600)
