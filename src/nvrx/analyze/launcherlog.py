"""What NVRx's own `ft_launcher` says in its log about each restart cycle: how the cycle ended
(the launcher restarted the worker group, or gave its no-restart verdict), which node holds which
group rank, which node left and why, and which worker a `failed (exitcode: N)` line is about.

The log is the launcher's `--ft-nvrx-logfile` (every launcher's lines, sent through its log
server: each line carries its launcher's infra rank, `[workload:?(?) infra:1(?)]`, and launchers'
lines come in chunks, not in time order) or a launcher's console. The families read, each by a
pattern of its own (docs/log-attribution-policy.md, NVRx's launcher log):

    Family       A line of it (the launcher's own words)
    -----------  ------------------------------------------------------------------------------
    restart      `[default] Worker group FAILED. 3/3 attempts left; will restart worker group`
                 (UNHEALTHY too); a follower's `Joining cluster restart (group_rank=0)`;
                 torch's `Detected 1 new nodes from group_rank=0; will restart worker group`
    stop         `EARLY TERMINATION: 1 consecutive training cycles without progress
                 (threshold: 1) ...`; `... No more restarts will be attempted.`; `Another
                 launcher reported a no-restart decision (no_progress)`; `Attribution
                 recommended stopping the job`; `Agent .run() raised exception,
                 e=NoRestartRequested(...)`
    exhausted    `Agent .run() ended with terminal worker-group failure`; torch elastic's
                 `...errors.ChildFailedError:` report (no restart left; it changes no decision)
    leave        `Storage path health check failed for node N: <why>` (any `<check> failed for
                 node N:`), `Unexpected error during <check> for node N: <why>`, `Agent .run()
                 raised UnhealthyNodeException: <why>`, `Node N is excluded from the training`
    rendezvous   `The node 'N' attempts to join the next round of the rendezvous 'ID'.`, `The
                 node 'N' has joined the rendezvous 'ID' as rank R in a world of size W.`
    worker exit  torch's `failed (exitcode: 1) local_rank: 0 (pid: 6662) of binary: ...` behind
                 its `E1208 00:03:38.890000 6640 ...]` prefix, 6640 being the launcher's pid,
                 which NVRx's node names carry (`localhost_6640_0`)
    shape        `Using nproc_per_node=N.`
    app log      `Updated reader thread with 1 workers for cycle, writing to /path/app_cycle0.log
                 (gRPC mode)` (or `local file mode`): the cycle's application log, where its
                 workers' tracebacks are

A worker's global rank is its node's group rank times the workers per node plus its local rank
(torch elastic's homogeneous assignment); when the log does not say the workers per node, the
rank stays unknown rather than guessed.

Cost: one search per family on the lines the keyword gate lets through, memory bounded by the
nodes (`MAX_RANKS`) and a few cited lines per cycle, never by the lines.

One module: the launcher's wordings, the keyword gate that must let them through and the account
they make change together (a new NVRx wording is a pattern, a gate word and a field at once).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any, Literal

from nvrx.limits import MAX_RANKS, as_rank, small_int

# The lower-case words one of which every line read here holds (the gate of `feed_blocks`).
KEYWORDS = (
    "worker group", "cluster restart", "new nodes from", "early termination",
    "no more restarts", "no-restart decision", "recommended stopping", "norestartrequested",
    "terminal worker-group", "failed for node", "unexpected error during",
    "unhealthynodeexception", "excluded from the training", "joined the rendezvous",
    "join the next round", "exitcode",
    "nproc_per_node", "updated reader thread", "childfailederror",
)  # fmt: skip

# restart: the worker group restarted; stop: the launcher's no-restart verdict (the job must not
# be restarted); exhausted: it had no restart left (a restart of the job may still cure it).
Verdict = Literal["restart", "exhausted", "stop"]
_STRENGTH = {"restart": 0, "exhausted": 1, "stop": 2}

_TAG = re.compile(r"\[workload:[^\]\s]{0,40} infra:(\d{1,9})\([^)\s]{0,20}\)\]")
_RESTART = re.compile(
    r"\bWorker group (FAILED|UNHEALTHY)\. (\d{1,9})/(\d{1,9}) attempts left; will restart"
    r" worker group"
    r"|\bJoining cluster restart \(group_rank=(\d{1,9})\)"
    r"|\bDetected (\d{1,9}) new nodes from group_rank=\d{1,9}; will restart worker group"
)
_EARLY = re.compile(
    r"\bEARLY TERMINATION: (\d{1,9}) consecutive training cycles without progress"
    r"(?: \(threshold: (\d{1,9})\))?"
)
_STOP = re.compile(
    r"\bNo more restarts will be attempted\b"
    r"|\bAnother launcher reported a no-restart decision \((\w{1,40})\)"
    r"|\bAttribution recommended stopping the job\b"
    r"|\bAgent \.run\(\) raised exception, e=NoRestartRequested\("
)
# No restart left: NVRx's own words when no worker's failure is at hand, and torch elastic's
# failure report (`torch.distributed.elastic.multiprocessing.errors.ChildFailedError:`), which
# the agent raises once its restarts are used up.
_EXHAUSTED = re.compile(
    r"\bAgent \.run\(\) ended with terminal worker-group failure\b|\bChildFailedError:\s*$"
)
_HEALTH = re.compile(
    r"\b([A-Z][\w ]{0,40}? health check) failed for node (\S{1,200}): (.{0,300})"
    r"|\bUnexpected error during ([\w ]{1,40}) for node (\S{1,200}): (.{0,300})"
    r"|\bNode (\S{1,200}) is excluded from the training\b"
)
_UNHEALTHY = re.compile(r"\bAgent \.run\(\) raised UnhealthyNodeException: (.{0,300})")
_JOINED = re.compile(
    r"\bThe node '([^'\s]{1,200})' has joined the rendezvous '[^']{0,200}' as rank (\d{1,9})"
    r" in a world of size (\d{1,9})"
)
_JOINING = re.compile(
    r"\bThe node '([^'\s]{1,200})' attempts to join the next round of the rendezvous"
)
_EXIT = re.compile(
    r"(?<!\w)[EWIF]\d{4} [\d:.]{8,20} ++(\d{1,9}) [^\]]{0,200}\] failed \(exitcode: (-?\d{1,9})\)"
    r" local_rank: (\d{1,9}) \(pid: \d{1,9}\)"
)
_NPROC = re.compile(r"\bUsing nproc_per_node=(\d{1,9})\.")
_APPLOG = re.compile(
    r"\bUpdated reader thread with \d{1,9} workers for cycle, writing to (\S{1,1000})"
    r" \((?:gRPC|local file) mode\)"
)
# torch's own line (glog's form: level, date, time, pid), behind srun's label when it has one.
_GLOG_PID = re.compile(r"(?: {0,8}\d{1,9}: )?[EWIF]\d{4} [\d:.]{8,20} ++(\d{1,9}) ")
# NVRx names a node `<host>_<pid>_<local id>`: the pid ties torch's own lines to the node.
_NODE_PID = re.compile(r"_(\d{1,9})_\d{1,9}$")

MAX_CITED = 4  # lines of each kind an account keeps (the first ones), with how many more
MAX_NODES = MAX_RANKS


@dataclass(frozen=True, slots=True)
class Cited:
    """A launcher line an account cites: where it is, whose it is (its infra rank), its text."""

    line: int
    launcher: int | None
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "launcher": self.launcher, "text": self.text}


@dataclass(frozen=True, slots=True)
class Departure:
    """A node that left the job: the launcher's line saying why, and the node's name."""

    node: str | None
    why: Cited
    also: tuple[int, ...] = ()  # the launcher's further lines about it (`UnhealthyNodeException`)

    def lines(self) -> str:
        return (
            "lines " + ", ".join(map(str, (self.why.line, *self.also)))
            if self.also
            else (f"line {self.why.line}")
        )

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, **self.why.to_json(), "also": list(self.also)}


@dataclass
class Shape:
    """What holds across the log's cycles: the workers per node, each launcher pid's node, and
    each node's latest group rank. Shared by the cycles' readers (like srun's task budget)."""

    nproc: int | None = None
    node_of_pid: dict[int, str] = field(default_factory=dict)
    group_rank: dict[str, int] = field(default_factory=dict)
    node_of_launcher: dict[int, str] = field(default_factory=dict)
    launcher_of_pid: dict[int, int] = field(default_factory=dict)

    def note_node(self, node: str, launcher: int | None) -> None:
        pid = None
        if (m := _NODE_PID.search(node)) is not None and len(self.node_of_pid) < MAX_NODES:
            pid = small_int(m.group(1))
            if pid is not None:
                self.node_of_pid.setdefault(pid, node)
        if launcher is not None and len(self.node_of_launcher) < MAX_NODES:
            self.node_of_launcher.setdefault(launcher, node)
            if pid is not None:
                self.launcher_of_pid.setdefault(pid, launcher)

    def launcher(self, text: str) -> int | None:
        """The launcher a line is from: its log-server tag (`infra:1(?)`), else, for torch's
        own lines (`E1208 00:03:38.890000 6640 ...]`), the launcher whose node has that pid."""
        tag = launcher_of(text)
        if tag is None and (m := _GLOG_PID.match(text)) is not None:
            pid = small_int(m.group(1))
            return self.launcher_of_pid.get(pid) if pid is not None else None
        return tag

    def rank_of(self, pid: int, local_rank: int) -> int | None:
        """The global rank of the worker `local_rank` of the launcher of `pid`, if known."""
        node = self.node_of_pid.get(pid)
        group = self.group_rank.get(node) if node is not None else None
        if group is None or self.nproc is None:
            return None
        return as_rank(str(group * self.nproc + local_rank))


@dataclass(frozen=True)
class LauncherAccount:
    """One cycle as the launcher tells it (all empty for a log without launcher lines)."""

    verdict: Verdict | None = None
    verdict_line: Cited | None = None  # the first line of the verdict, the leader's when given
    reason: str = ""
    joined: tuple[tuple[str, int], ...] = ()  # (node, group rank) that joined this cycle
    attempted: tuple[str, ...] = ()  # nodes that tried to join (the spares too)
    departures: tuple[Departure, ...] = ()
    departures_more: int = 0
    app_logs: tuple[str, ...] = ()  # the cycle's application logs' names, as the launcher says
    finished: bool = False  # a worker group finished successfully

    @property
    def tells(self) -> bool:
        """Whether the account has something to explain (a verdict, a node that left)."""
        return self.verdict_line is not None or bool(self.departures)

    @property
    def said(self) -> bool:
        return bool(
            self.verdict or self.joined or self.attempted or self.departures or self.app_logs
        )

    def explain(self, previous: LauncherAccount | None = None) -> str:
        """The launcher's account in a sentence or two (no rank numbers: the ranks an answer
        names are the failure's, docs/file-contracts.md)."""
        parts = []
        if self.verdict == "restart" and self.verdict_line is not None:
            parts.append(
                f"The launcher restarted the worker group ({self.reason}, line "
                f"{self.verdict_line.line})"
            )
        elif self.verdict == "stop" and self.verdict_line is not None:
            parts.append(
                f"The launcher gave its no-restart verdict ({self.reason}, line "
                f"{self.verdict_line.line})"
            )
        elif self.verdict == "exhausted" and self.verdict_line is not None:
            parts.append(
                f"The launcher had no restart left ({self.reason}, line {self.verdict_line.line})"
            )
        if self.departures:
            left = [self._departure(d, previous) for d in self.departures]
            more = f" (and {self.departures_more} more)" if self.departures_more else ""
            parts.append("Membership: " + "; ".join(left) + more)
        return ". ".join(parts) + ("." if parts else "")

    def _departure(self, d: Departure, previous: LauncherAccount | None) -> str:
        who = f"node {d.node}" if d.node else "a node"
        if d.why.launcher is not None:
            who += f" (launcher {d.why.launcher})"
        if previous is not None and d.node:
            if d.node in dict(previous.joined):
                who += ", which trained in the cycle before,"
            elif d.node in previous.attempted:
                who += ", a spare in the cycle before,"
        return f"{who} left the job: {d.why.text[:200]} ({d.lines()})"

    def to_json(self) -> dict[str, Any]:
        return {
            "decision": self.verdict,
            "reason": self.reason,
            "line": self.verdict_line.to_json() if self.verdict_line else None,
            "joined": [{"node": n, "group_rank": r} for n, r in self.joined],
            "attempted": list(self.attempted),
            "departures": [d.to_json() for d in self.departures],
            "departures_more": self.departures_more,
            "app_logs": list(self.app_logs),
            "finished": self.finished,
        }


def launcher_of(text: str) -> int | None:
    """The infra rank of the launcher a log-server line is from (`infra:1(?)`), else None."""
    m = _TAG.search(text[:400])
    return small_int(m.group(1)) if m is not None else None


def _message(text: str, start: int) -> str:
    return " ".join(text[start:].split())[:300]


class LauncherReader:
    """One cycle's launcher lines, fed a line at a time; `account()` is what they said."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.verdict: Verdict | None = None
        self.verdict_line: Cited | None = None
        self.reason = ""
        self.joined: dict[str, int] = {}
        self.attempted: dict[str, None] = {}
        self.departures: list[Departure] = []
        self.departed: set[str] = set()
        self.departures_more = 0
        self.app_logs: dict[str, None] = {}
        self.finished = False
        self._leader = False  # the verdict held is a leader's own (not a follower's echo)

    def feed(self, no: int, text: str) -> tuple[str, int | None] | None:
        """Read one line. Returns what it was to the launcher: `("verdict" | "exhausted" |
        "leave" | "rendezvous" | "shape" | "app_log", None)`, `("exit", rank)` for a worker's
        exit (its global rank, None if unknown), or None for a line of none of these families."""
        if (m := _EXIT.search(text)) is not None:
            pid, local = small_int(m.group(1)), small_int(m.group(3))
            rank = self.shape.rank_of(pid, local) if pid is not None and local is not None else None
            return "exit", rank
        launcher = launcher_of(text)
        if (m := _RESTART.search(text)) is not None:
            if m.group(1):
                self._verdict("restart", no, launcher, text, m, f"{m.group(2)}/{m.group(3)} "
                              "attempts left", leader=True)  # fmt: skip
            elif m.group(4) is not None:
                self._verdict("restart", no, launcher, text, m, "cluster restart", leader=False)
            else:
                self._verdict("restart", no, launcher, text, m, "new nodes joined", leader=True)
            return "verdict", None
        if (m := _EARLY.search(text)) is not None:
            self._verdict("stop", no, launcher, text, m, m.group(0), leader=True)
            return "verdict", None
        if (m := _STOP.search(text)) is not None:
            reason = f"no-restart decision ({m.group(1)})" if m.group(1) else "no restart"
            self._verdict("stop", no, launcher, text, m, reason, leader=False)
            return "verdict", None
        if (m := _EXHAUSTED.search(text)) is not None:
            reason = "torch elastic's failure report" if "Child" in m.group(0) else m.group(0)
            self._verdict("exhausted", no, launcher, text, m, reason, leader=True)
            return "exhausted", None  # still read by the rules (torch's report follows it)
        if (m := _HEALTH.search(text)) is not None or (m := _UNHEALTHY.search(text)) is not None:
            self._leave(no, launcher, text, m)
            return "leave", None
        if (m := _JOINED.search(text)) is not None:
            node, group = m.group(1), as_rank(m.group(2))
            self.shape.note_node(node, launcher)
            if group is not None and len(self.joined) < MAX_NODES:
                self.joined[node] = group
                if len(self.shape.group_rank) < MAX_NODES or node in self.shape.group_rank:
                    self.shape.group_rank[node] = group
            return "rendezvous", None
        if (m := _JOINING.search(text)) is not None:
            self.shape.note_node(m.group(1), launcher)
            if len(self.attempted) < MAX_NODES:
                self.attempted[m.group(1)] = None
            return "rendezvous", None
        if (m := _NPROC.search(text)) is not None:
            self.shape.nproc = self.shape.nproc or small_int(m.group(1)) or None
            return "shape", None
        if (m := _APPLOG.search(text)) is not None:
            name = PurePosixPath(m.group(1)).name
            if len(self.app_logs) < MAX_CITED:
                self.app_logs[name] = None
            return "app_log", None
        if "worker group successfully finished" in text:
            self.finished = True
        return None

    def _verdict(
        self,
        verdict: Verdict,
        no: int,
        launcher: int | None,
        text: str,
        m: re.Match[str],
        reason: str,
        *,
        leader: bool,
    ) -> None:
        # A stop outranks no restart left, which outranks a restart (what ended the job); a
        # leader's own words outrank a follower's echo (`Joining cluster restart` repeats a
        # decision another launcher made).
        rank = (_STRENGTH[verdict], leader)
        if self.verdict is not None:
            held = (_STRENGTH[self.verdict], self._leader)
            if rank <= held:
                return
        self.verdict, self.reason, self._leader = verdict, reason, leader
        self.verdict_line = Cited(no, launcher, _message(text, m.start()))

    def _leave(self, no: int, launcher: int | None, text: str, m: re.Match[str]) -> None:
        node = (m.group(2) or m.group(5) or m.group(7)) if m.re is _HEALTH else None
        if node is None and launcher is not None:
            node = self.shape.node_of_launcher.get(launcher)
        key = node or f"launcher {launcher}"
        for i, d in enumerate(self.departures):
            if (d.node or f"launcher {d.why.launcher}") == key:
                # The same node's next line about its departure: cited with the first.
                if len(d.also) < MAX_CITED:
                    self.departures[i] = replace(d, also=(*d.also, no))
                return
        if key in self.departed:
            return  # one of the departures past MAX_CITED, already counted
        if len(self.departed) < MAX_NODES:
            self.departed.add(key)
        if len(self.departures) >= MAX_CITED:
            self.departures_more += 1
            return
        self.departures.append(Departure(node, Cited(no, launcher, _message(text, m.start()))))

    def account(self) -> LauncherAccount:
        return LauncherAccount(
            verdict=self.verdict,
            verdict_line=self.verdict_line,
            reason=self.reason,
            joined=tuple(sorted(self.joined.items(), key=lambda item: item[1])),
            attempted=tuple(self.attempted),
            departures=tuple(self.departures),
            departures_more=self.departures_more,
            app_logs=tuple(self.app_logs),
            finished=self.finished,
        )
