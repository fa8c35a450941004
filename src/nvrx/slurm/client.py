"""The Slurm adapter: the only code in nvrx that runs Slurm commands.

One method per question, one command per call (a set of jobs is one `squeue` or one `sacct`,
never a loop of per-job calls). A failed query raises; it never turns into an empty answer.

One module because it is the one adapter: every command, its argv validation and its error
classification in one place, so no second way to call Slurm can grow elsewhere.
"""

from __future__ import annotations

import os
import pwd
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol, TypeVar

from nvrx.retry import RetryPolicy
from nvrx.slurm.errors import (
    ErrorKind,
    JobForgotten,
    SlurmError,
    SlurmParseError,
    SlurmUnavailable,
    SlurmValueError,
)
from nvrx.slurm.options import (
    SubmitOptions,
    check_job_ids,
    check_name,
    check_node_name,
    check_query_name,
    check_signal,
    check_text,
    check_user,
)
from nvrx.slurm.parse import (
    DRAINED_FORMAT,
    SACCT_FORMAT,
    SINFO_FORMAT,
    SQUEUE_FORMAT,
    AccountingRow,
    DrainedNode,
    PartitionNodes,
    QueueRow,
    Submission,
    TestOnlyAnswer,
    parse_drained_nodes,
    parse_node_names,
    parse_sacct,
    parse_sbatch_parsable,
    parse_scontrol_records,
    parse_show_config,
    parse_sinfo,
    parse_squeue,
    parse_test_only,
)
from nvrx.slurm.runner import (
    CommandExecutor,
    CommandResult,
    Runner,
    error_from,
    kind_of,
    run_process,
)
from nvrx.slurm.states import ExitStatus, JobState


class AdapterSettings(Protocol):
    """What the adapter reads of its settings: the `slurm` section of the configuration
    (`nvrx.config.SlurmSettings`) is one; the adapter imports nothing above it."""

    @property
    def command_timeout(self) -> float: ...
    @property
    def retry_deadline(self) -> float: ...
    @property
    def retry_initial_backoff(self) -> float: ...
    @property
    def retry_max_backoff(self) -> float: ...
    @property
    def poll_interval(self) -> float: ...
    @property
    def accounting_window(self) -> float: ...
    @property
    def bin_dir(self) -> Path | None: ...


T = TypeVar("T")

# Every submission's comment ends with this token, so a lost sbatch answer can be looked up.
SUBMIT_TOKEN = "nvrx-submit="


@dataclass(frozen=True)
class JobInfo:
    """One record of `scontrol show job -o` (one per task for an array)."""

    fields: Mapping[str, str]

    def get(self, key: str, default: str = "") -> str:
        value = self.fields.get(key, default)
        return default if value == "(null)" else value

    @property
    def job_id(self) -> str:
        return self.get("JobId")

    @property
    def array_job_id(self) -> str:
        return self.get("ArrayJobId") or self.job_id

    @property
    def array_task_id(self) -> int | None:
        value = self.get("ArrayTaskId")
        return int(value) if value.isdigit() else None

    @property
    def name(self) -> str:
        return self.get("JobName")

    @property
    def user(self) -> str:
        """`UserId=alice(1000)` → `alice`."""
        return self.get("UserId").split("(", 1)[0]

    @property
    def uid(self) -> int | None:
        value = self.get("UserId")
        if "(" in value and value.endswith(")"):
            inner = value[value.index("(") + 1 : -1]
            return int(inner) if inner.isdigit() else None
        return None

    @property
    def state(self) -> JobState:
        return JobState.parse(self.get("JobState", "UNKNOWN"))

    @property
    def command(self) -> str:
        return self.get("Command")

    @property
    def work_dir(self) -> str:
        return self.get("WorkDir")

    @property
    def comment(self) -> str:
        return self.get("Comment")

    @property
    def array_task_throttle(self) -> int | None:
        """The live `%` throttle of an array (0 or absent: unthrottled)."""
        value = self.get("ArrayTaskThrottle")
        return int(value) if value.isdigit() and int(value) > 0 else None

    @property
    def exit(self) -> ExitStatus | None:
        return ExitStatus.parse(self.get("ExitCode"))


class Slurm:
    """Typed access to sbatch, squeue, sacct, sinfo, scancel and scontrol."""

    def __init__(
        self,
        settings: AdapterSettings,
        *,
        runner: Runner = run_process,
        executor: CommandExecutor | None = None,
    ) -> None:
        self.settings = settings
        self.executor = executor or CommandExecutor(
            timeout=settings.command_timeout,
            retry=RetryPolicy(
                deadline=settings.retry_deadline,
                initial_backoff=settings.retry_initial_backoff,
                max_backoff=settings.retry_max_backoff,
            ),
            runner=runner,
        )
        self._config: dict[str, str] | None = None

    # --- plumbing --------------------------------------------------------------------------

    def _cmd(self, name: str) -> str:
        if self.settings.bin_dir is not None:
            return str(Path(self.settings.bin_dir) / name)
        return name

    @property
    def calls(self) -> Mapping[str, int]:
        """How many times each Slurm command ran through this adapter."""
        return dict(self.executor.calls)

    @staticmethod
    def current_user() -> str:
        """The login name of this process's uid (not $USER, which anyone can set).

        A uid without a passwd entry (common in containers) is given as its number, which
        squeue, sacct and scancel accept as well."""
        try:
            return pwd.getpwuid(os.getuid()).pw_name
        except KeyError:
            return str(os.getuid())

    # --- sbatch ----------------------------------------------------------------------------

    def submit(
        self,
        options: SubmitOptions,
        *,
        script: Path | None = None,
        wrap: str | None = None,
        script_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> Submission:
        """Submit one batch job with `sbatch --parsable`; return its id and full comment.

        Every submission carries a unique `nvrx-submit=<token>` in its `--comment` (after the
        caller's comment, if any). When sbatch fails transiently without a clear "never reached
        the controller", the queue is searched for that token before anything is retried, so a
        retry can never enqueue the job twice. The job inherits the caller's environment plus
        `env` (sbatch's default `--export=ALL`), untouched by nvrx's query-only scrubbing.
        """
        if script is not None and not Path(script).is_file():
            raise SlurmValueError(f"batch script not found: {script}")
        token = f"{SUBMIT_TOKEN}{uuid.uuid4().hex[:12]}"
        comment = token if options.comment is None else f"{options.comment} {token}"
        argv = self.sbatch_argv(
            replace(options, comment=comment), script=script, wrap=wrap, script_args=script_args
        )
        job_env = {**os.environ, **(env or {})}

        def outcome_unknown(last: CommandResult | None) -> SlurmUnavailable:
            return SlurmUnavailable(
                f"sbatch's answer was lost and Slurm stayed unreachable for "
                f"{budget.policy.deadline:g}s: whether the job was created is unknown "
                f"(look for comment {comment!r})",
                argv=argv,
                returncode=None if last is None else last.returncode,
                stderr="" if last is None else last.stderr,
            )

        budget = self.executor.budget()
        unsure = False  # an earlier attempt may have created the job
        resubmitted = False  # sbatch ran again after such an attempt
        while True:
            if unsure:
                try:
                    found = self.find_by_comment(comment, retry=False)
                except SlurmError as exc:
                    if exc.kind is not ErrorKind.TRANSIENT:
                        raise
                    if budget.wait():
                        continue
                    raise outcome_unknown(None) from exc
                if found:
                    return Submission(found[0].array_job_id, comment=comment)
                resubmitted = True
            result = self.executor.once(argv, job_env)
            if result.returncode == 0:
                try:
                    sub = parse_sbatch_parsable(result.stdout)
                except SlurmParseError:
                    found = self.find_by_comment(comment)
                    if found:
                        return Submission(found[0].array_job_id, comment=comment)
                    raise SlurmError(
                        f"sbatch exited 0 but printed no job id, and no job carries {token}",
                        argv=argv,
                        returncode=0,
                        stderr=result.stderr,
                    ) from None
                if resubmitted:
                    self._drop_late_duplicates(comment, keep=sub.job_id)
                return Submission(sub.job_id, sub.cluster, comment)
            kind = kind_of(result)
            if kind is not ErrorKind.TRANSIENT:
                raise error_from(kind, result)
            # "connect failure": sbatch never reached the controller, so nothing was created.
            unsure = "connect failure" not in result.stderr.lower()
            if not budget.wait():
                raise outcome_unknown(result) if unsure else error_from(kind, result, budget)

    def _drop_late_duplicates(self, comment: str, keep: str) -> None:
        """A backlogged controller may process a timed-out sbatch after the queue showed no
        trace of it: then two jobs carry the token. Keep the one sbatch answered with."""
        try:
            extra = sorted({r.array_job_id for r in self.find_by_comment(comment)} - {keep})
            if extra:
                self.cancel(extra)
        except SlurmError:
            pass  # best effort: the chain's own reconciliation sees duplicates by comment too

    def sbatch_argv(
        self,
        options: SubmitOptions,
        *,
        script: Path | None = None,
        wrap: str | None = None,
        script_args: Sequence[str] = (),
        test_only: bool = False,
    ) -> list[str]:
        """The validated sbatch command line for a submission (what `submit` runs, less the
        token it adds to the comment)."""
        if (script is None) == (wrap is None):
            raise SlurmValueError("submit needs exactly one of script or wrap")
        mode = "--test-only" if test_only else "--parsable"
        argv = [self._cmd("sbatch"), mode, *options.to_argv()]
        if wrap is not None:
            if "\0" in wrap:
                raise SlurmValueError("invalid --wrap command: NUL byte")
            return [*argv, "--wrap", wrap]
        assert script is not None
        return [*argv, str(script), *script_args]

    def test_submit(self, options: SubmitOptions, *, script: Path) -> TestOnlyAnswer:
        """`sbatch --test-only`: whether and when Slurm would start the job; creates nothing.

        Returns when and where it would start; an infeasible request raises SlurmPolicyError
        ("Requested node configuration is not available").
        """
        result = self.executor.run(self.sbatch_argv(options, script=script, test_only=True))
        return parse_test_only(result.stderr + "\n" + result.stdout)

    # --- squeue ----------------------------------------------------------------------------

    def queue(
        self,
        job_ids: Sequence[str | int] = (),
        *,
        name: str | Sequence[str] | None = None,
        user: str | Sequence[str] | None = None,
        include_finished: bool = False,
        retry: bool = True,
    ) -> list[QueueRow]:
        """One `squeue` for a set of job ids, job names and/or users; one row per array task.

        `include_finished` adds jobs that ended recently but are still in the controller's
        memory (`-t all`, until MinJobAge). A job id the controller does not know simply has no
        rows; a failed query raises (after transient retries unless `retry` is False).
        """
        ids, flags = _selection("queue", job_ids, name, user)
        argv = [self._cmd("squeue"), "-h", "-r", "-o", SQUEUE_FORMAT, *flags]
        if include_finished:
            argv += ["-t", "all"]
        if ids:
            argv.append("--jobs=" + ",".join(ids))
        try:
            result = self.executor.run(argv, retry_transient=retry)
        except JobForgotten:
            # squeue with ONE id the controller does not know answers "Invalid job id specified"
            # (with several ids it silently drops the unknown ones): that id is not queued.
            return []
        return self._parse(parse_squeue, result)

    def find_by_comment(
        self, comment: str, user: str | None = None, *, retry: bool = True
    ) -> list[QueueRow]:
        """Queue rows (recently finished ones included) of `user`'s jobs with this comment.

        Matches the comment exactly, or followed by submit's own `nvrx-submit=` token, so a
        caller finds its jobs by the comment it passed to `submit`.
        """
        rows = self.queue(user=user or self.current_user(), include_finished=True, retry=retry)
        with_token = f"{comment} {SUBMIT_TOKEN}"
        return [r for r in rows if r.comment == comment or r.comment.startswith(with_token)]

    # --- sacct -----------------------------------------------------------------------------

    def accounting(
        self,
        job_ids: Sequence[str | int] = (),
        *,
        name: str | Sequence[str] | None = None,
        user: str | Sequence[str] | None = None,
        since: datetime | None = None,
    ) -> list[AccountingRow]:
        """One `sacct -X -n -P` call: allocations of the given jobs, or of names/users since a
        time.

        With job ids sacct searches from the epoch; by name or user it searches from `since`
        (default: `slurm.accounting_window` ago; sacct's own default, today 00:00, would miss
        older jobs). An empty answer means accounting does not know the jobs *yet* (slurmdbd
        lags); callers must read it as unknown, never as gone.
        """
        ids, flags = _selection("accounting", job_ids, name, user)
        argv = [self._cmd("sacct"), "-X", "-n", "-P", "-o", SACCT_FORMAT, *flags]
        if ids:
            argv.append("--jobs=" + ",".join(ids))
        else:
            if since is None:
                since = datetime.now(UTC) - timedelta(seconds=self.settings.accounting_window)
            argv += ["-S", _sacct_time(since), "-E", "now"]
            if not user:
                argv.append("--allusers")
        result = self.executor.run(argv)
        return self._parse(parse_sacct, result)

    # --- scancel ---------------------------------------------------------------------------

    def cancel(
        self,
        job_ids: Sequence[str | int] = (),
        *,
        name: str | None = None,
        user: str | None = None,
        state: JobState | str | None = None,
        signal: str | int | None = None,
        full: bool = False,
    ) -> list[str]:
        """Cancel (or signal) jobs by id, array id, or name + user; optionally only in `state`.

        Returns the argv that ran, for logs. A name-based cancel requires the user, so two users'
        chains of the same name can never cancel each other. Cancelling a job that already ended
        is not an error (idempotent: scancel answers rc 0). A `signal` other than KILL reaches
        only the job's steps unless `full` also sends it to the batch shell (`--full`).
        """
        if name is not None and user is None:
            raise SlurmValueError("cancel by name needs the user too")
        if not job_ids and name is None:
            # `scancel --user=U` alone would cancel every job U has.
            raise SlurmValueError("cancel needs job ids, or a job name and user")
        ids, flags = _selection("cancel", job_ids, name, user)
        argv = [self._cmd("scancel")]
        if state is not None:
            parsed = JobState.parse(str(state))
            if parsed not in _CANCEL_STATES:
                raise SlurmValueError(
                    f"invalid cancel state {state!r}: scancel filters PENDING, RUNNING or SUSPENDED"
                )
            argv.append(f"--state={parsed.value}")
        if signal is not None:
            argv.append(f"--signal={check_signal(signal)}")
        if full:
            argv.append("--full")
        argv += [*flags, *ids]
        self.executor.run(argv)
        return argv

    # --- sinfo -----------------------------------------------------------------------------

    def partition_nodes(self, partition: str | None = None) -> PartitionNodes:
        """One `sinfo`: how many nodes `partition` (None: the default partition) has, and how
        many a job can start on now. A partition sinfo does not list is a SlurmError."""
        argv = [self._cmd("sinfo"), "-h", "-o", SINFO_FORMAT]
        if partition is not None:
            argv += ["-p", check_name(partition, "partition")]
        result = self.executor.run(argv)
        nodes = self._parse(lambda text: parse_sinfo(text, partition), result)
        if nodes is None:
            raise SlurmError(
                f"sinfo lists no partition {partition!r}"
                if partition is not None
                else "sinfo lists no default partition",
                argv=result.argv,
                returncode=result.returncode,
                stderr=result.stderr,
            )
        return nodes

    def drained_nodes(self, states: Sequence[str] = ("drain",)) -> list[DrainedNode]:
        """One `sinfo`: every node in `states` (`drain` matches draining and drained nodes),
        with when and why it was drained."""
        for state in states:
            if not _NODE_STATE_RE.match(state):
                raise SlurmValueError(f"invalid node state {state!r}: lower-case letters only")
        argv = [self._cmd("sinfo"), "-h", "-N", "-a", "-t", ",".join(states), "-o", DRAINED_FORMAT]
        return self._parse(parse_drained_nodes, self.executor.run(argv))

    def node_names(self) -> frozenset[str]:
        """One `sinfo`: the name of every node Slurm knows, hidden partitions included (what an
        action that touches a node checks its name against)."""
        argv = [self._cmd("sinfo"), "-h", "-N", "-a", "-o", "%N"]
        return self._parse(parse_node_names, self.executor.run(argv))

    # --- scontrol --------------------------------------------------------------------------

    def drain_node(self, node: str, reason: str) -> list[str]:
        """`scontrol update nodename=NODE state=drain reason=REASON`: no new job starts on the
        node; the jobs on it run on. Draining a drained node again only renews its reason. One
        node only: a hostlist, a comma list or `ALL` is refused before anything runs."""
        argv = [
            self._cmd("scontrol"),
            "update",
            f"nodename={check_node_name(node)}",
            "state=drain",
            f"reason={check_text(reason, 'drain reason')}",
        ]
        self.executor.run(argv)
        return argv

    def show_job(self, job_id: str | int) -> list[JobInfo]:
        """`scontrol show job -o ID`: one JobInfo per record (per task for an array).

        Raises JobForgotten once the controller has purged the job (after MinJobAge): ask
        `accounting` then.
        """
        (checked,) = check_job_ids([job_id])
        result = self.executor.run([self._cmd("scontrol"), "show", "job", "-o", checked])
        return [JobInfo(r) for r in self._parse(parse_scontrol_records, result)]

    def show_config(self, *, retry: bool = True) -> dict[str, str]:
        """`scontrol show config`, cached for the life of this adapter (one attempt when not
        `retry`: an advisory check that must not wait out the retry deadline)."""
        if self._config is None:
            result = self.executor.run(
                [self._cmd("scontrol"), "show", "config"], retry_transient=retry
            )
            self._config = self._parse(parse_show_config, result)
        return dict(self._config)

    def max_array_size(self, *, retry: bool = True) -> int:
        value = self.show_config(retry=retry).get("MaxArraySize", "")
        if not value.isdigit():
            raise SlurmError(f"scontrol show config has no usable MaxArraySize ({value!r})")
        return int(value)

    # --- helpers ---------------------------------------------------------------------------

    @staticmethod
    def _parse(parser: Callable[[str], T], result: CommandResult) -> T:
        try:
            return parser(result.stdout)
        except SlurmParseError as exc:
            raise SlurmError(
                f"unexpected output: {exc}",
                argv=result.argv,
                returncode=result.returncode,
                stderr=result.stderr,
            ) from None


_NODE_STATE_RE = re.compile(r"^[a-z_]+$")
_CANCEL_STATES = frozenset({JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED})


def _selection(
    what: str,
    job_ids: Sequence[str | int],
    name: str | Sequence[str] | None,
    user: str | Sequence[str] | None,
) -> tuple[list[str], list[str]]:
    """Validated job ids, and the `--name`/`--user` flags (one value or several: one query for
    many chains); at least one selector is required."""
    ids = check_job_ids(job_ids)
    names = [name] if isinstance(name, str) else list(name or ())
    users = [user] if isinstance(user, str) else list(user or ())
    if not ids and not names and not users:
        raise SlurmValueError(f"{what} needs job ids, a job name or a user")
    flags = []
    if names:
        flags.append("--name=" + ",".join(check_query_name(n) for n in dict.fromkeys(names)))
    if users:
        flags.append("--user=" + ",".join(check_user(u) for u in dict.fromkeys(users)))
    return ids, flags


def _sacct_time(moment: datetime) -> str:
    """sacct -S takes local wall-clock time without a zone."""
    return moment.astimezone().strftime("%Y-%m-%dT%H:%M:%S")
