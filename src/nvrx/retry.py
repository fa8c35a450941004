"""Retrying transient failures: jittered exponential backoff, bounded by a deadline and, when
set, a number of retries. One policy for the Slurm adapter (blocking) and the LLM judge (async).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    deadline: float = 120.0
    initial_backoff: float = 1.0
    max_backoff: float = 30.0
    max_retries: int | None = None  # None: the deadline alone bounds the retries

    def backoff(self, failures: int, uniform: Callable[[float, float], float]) -> float:
        """The delay before retry number `failures` (from 1). Equal jitter, half fixed and half
        random: many clients (login-node crons, concurrent judge requests) do not retry in step."""
        # The exponent is capped: 2.0**1024 overflows, and a long outage reaches it.
        cap = min(self.max_backoff, self.initial_backoff * 2.0 ** min(failures - 1, 64))
        return uniform(cap / 2, cap)

    def exhausted(self, failures: int) -> bool:
        return self.max_retries is not None and failures > self.max_retries

    def budget(
        self, clock: Callable[[], float], sleep: Callable[[float], None], rng: random.Random
    ) -> RetryBudget:
        return RetryBudget(self, clock, sleep, rng, clock())


@dataclass
class RetryBudget:
    """The retries left for one blocking operation. No new attempt starts after the deadline;
    one attempt may still be running when it passes (overrun: at most one command timeout)."""

    policy: RetryPolicy
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    rng: random.Random
    start: float
    attempts: int = 0

    def wait(self) -> bool:
        """Back off before the next attempt; False when no attempt is left."""
        self.attempts += 1
        remaining = self.policy.deadline - (self.clock() - self.start)
        if remaining <= 0 or self.policy.exhausted(self.attempts):
            return False
        # Capped at the deadline: the last attempt lands there rather than giving up before it.
        self.sleep(min(self.policy.backoff(self.attempts, self.rng.uniform), remaining))
        return True
