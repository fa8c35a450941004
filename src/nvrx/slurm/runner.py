"""Running one Slurm command: argv only, a timeout, stderr kept, transient errors retried.

The `Runner` seam is how tests and benchmarks observe what nvrx asks of Slurm; the default runs
real processes (tests run them against the local cluster, never a fake).
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from nvrx.retry import RetryBudget, RetryPolicy
from nvrx.slurm.errors import ErrorKind, SlurmError, SlurmUnavailable, classify, error_for


@dataclass(frozen=True, slots=True)
class CommandResult:
    """One finished invocation. `returncode` is None when the command timed out."""

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float


class Runner(Protocol):
    def __call__(
        self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str]
    ) -> CommandResult: ...


def run_process(argv: Sequence[str], *, timeout: float, env: Mapping[str, str]) -> CommandResult:
    """Run argv (never through a shell) and capture its output."""
    start = time.monotonic()
    try:
        proc = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        return CommandResult(
            tuple(argv), None, "", f"{err}\ntimed out after {timeout:g}s", time.monotonic() - start
        )
    return CommandResult(
        tuple(argv), proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start
    )


# Environment variables that silently change what Slurm clients print or ask: a user's
# SQUEUE_STATES=RUNNING would make a queue query lie, SCANCEL_INTERACTIVE would make scancel
# prompt. They are removed for nvrx's own calls; SBATCH_* stay (sbatch honours them on purpose).
_SCRUBBED_PREFIXES = ("SQUEUE_", "SACCT_", "SCANCEL_", "SINFO_", "SCONTROL_")
_SCRUBBED = frozenset({"SLURM_TIME_FORMAT"})


def slurm_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for Slurm commands: the caller's, minus output-changing variables."""
    env = {
        k: v
        for k, v in (os.environ if base is None else base).items()
        if k not in _SCRUBBED and not k.startswith(_SCRUBBED_PREFIXES)
    }
    # Timestamps as epoch seconds: unambiguous across time zones and DST.
    env["SLURM_TIME_FORMAT"] = "%s"
    return env


@dataclass
class CommandExecutor:
    """Runs Slurm commands with a timeout and the retry policy, and counts them."""

    timeout: float = 30.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    runner: Runner = run_process
    env: Mapping[str, str] = field(default_factory=slurm_environment)
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    rng: random.Random = field(default_factory=random.Random)
    calls: Counter[str] = field(default_factory=Counter)

    def budget(self) -> RetryBudget:
        return self.retry.budget(self.clock, self.sleep, self.rng)

    def once(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> CommandResult:
        """One invocation, counted, no retry."""
        self.calls[os.path.basename(argv[0])] += 1
        try:
            return self.runner(argv, timeout=self.timeout, env=self.env if env is None else env)
        except FileNotFoundError:
            raise SlurmError(
                f"{argv[0]} not found (is Slurm installed and on PATH?)", argv=argv, ran=False
            ) from None
        except PermissionError:
            raise SlurmError(f"{argv[0]} is not executable", argv=argv, ran=False) from None
        except (OSError, ValueError) as exc:
            # E2BIG for an argv too long, ValueError for a NUL byte in an argument: the command
            # did not run, and the caller gets the typed error it handles, not a traceback.
            raise SlurmError(f"cannot run {argv[0]}: {exc}", argv=argv, ran=False) from None

    def run(self, argv: Sequence[str], *, retry_transient: bool = True) -> CommandResult:
        """Run argv; return its result on success (rc 0), else raise.

        Transient failures (and timeouts) are retried until the policy's deadline, then raise
        SlurmUnavailable. Other failures raise the SlurmError subclass of their kind at once.
        """
        budget = self.budget()
        while True:
            result = self.once(argv)
            if result.returncode == 0:
                return result
            kind = kind_of(result)
            if kind is not ErrorKind.TRANSIENT or not retry_transient:
                raise error_from(kind, result)
            if not budget.wait():
                raise error_from(kind, result, budget=budget)


def kind_of(result: CommandResult) -> ErrorKind:
    """How a failed command failed; a timeout is transient (an overloaded controller)."""
    if result.returncode is None:
        return ErrorKind.TRANSIENT
    return classify(result.stderr + "\n" + result.stdout)


def error_from(
    kind: ErrorKind, result: CommandResult, budget: RetryBudget | None = None
) -> SlurmError:
    """The exception for a failed command; with `budget`, the retries ran out."""
    name = os.path.basename(result.argv[0]) if result.argv else "slurm"
    if budget is not None:
        message = (
            f"{name} kept failing for {budget.policy.deadline:g}s ({budget.attempts} attempts); "
            "Slurm state is unknown"
        )
        cls: type[SlurmError] = SlurmUnavailable
    else:
        message = f"{name} failed"
        if kind is ErrorKind.TRANSIENT:
            message += " transiently; Slurm state is unknown"
        cls = error_for(kind)
    return cls(message, argv=result.argv, returncode=result.returncode, stderr=result.stderr)
