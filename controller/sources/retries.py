"""Retries within a poll's budget, for the kinds that do not speak HTTP through azure-queue's own loop.

The same behaviour as azure-queue: exponential back-off with jitter for transient failures, permanent ones fail at
once, and the poll's budget caps everything (a retry is made only if the wait leaves time for a useful attempt).
"""

from __future__ import annotations

import asyncio
import importlib
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from controller.model.readings import SourceError, SourceReading
from controller.model.secrets import SecretUnavailable
from controller.model.textfmt import duration

T = TypeVar("T")
C = TypeVar("C")


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential back-off with jitter for transient failures; the poll's budget caps it all."""

    request_timeout: float = 5.0  # one attempt, at most
    first_delay: float = 0.1
    max_delay: float = 2.0
    max_attempts: int = 6

    def delay(self, retry: int, rng: random.Random) -> float:
        """Wait before retry number `retry` (0-based): half the exponential step fixed, half random."""
        step = min(self.max_delay, self.first_delay * 2.0**retry)
        return step / 2 + rng.uniform(0, step / 2)


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """What the attempts came to: a value, or the error that ended them, and how many attempts were made."""

    value: T | None
    error: SourceError | None
    attempts: int


def deadline_for(budget: float) -> float:
    """A monotonic deadline a little before the budget, so the caller's own timeout never has to cut a poll off."""
    return time.monotonic() + max(0.0, budget - min(0.25, budget * 0.1))


async def with_retries(
    attempt: Callable[[float], Awaitable[T | SourceError]],
    deadline: float,
    policy: RetryPolicy,
    rng: random.Random,
) -> Outcome[T]:
    """Run `attempt(timeout)` until it returns a value, a permanent error, or the budget or attempts run out.

    An attempt that overruns its timeout becomes a retryable `Timeout` error. A retryable error that ended after
    more than one attempt says how many were made.
    """
    attempts = 0
    last: SourceError | None = None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        attempts += 1
        timeout = min(policy.request_timeout, remaining)
        try:
            async with asyncio.timeout(timeout):
                result = await attempt(timeout)
        except TimeoutError:
            result = SourceError("Timeout", f"no answer within {duration(timeout)}")
        if not isinstance(result, SourceError):
            return Outcome(result, None, attempts)
        # A last attempt the budget cut short says less than the full attempt before it (say, ConnectionFailed).
        cut_short = timeout < policy.request_timeout and result.code == "Timeout"
        if not (cut_short and last is not None):
            last = result
        if not result.retryable or attempts >= policy.max_attempts:
            break
        wait = policy.delay(attempts - 1, rng)
        if time.monotonic() + wait + min(0.05, policy.request_timeout) >= deadline:
            break
        await asyncio.sleep(wait)
    if last is None:
        return Outcome(None, SourceError("Timeout", "the poll's time budget was spent before any request"), 0)
    if last.retryable and attempts > 1:
        last = SourceError(last.code, f"{last.message} (gave up after {attempts} attempts)", last.retryable)
    return Outcome(None, last, attempts)


async def prepare_with_driver(
    *,
    driver: str,
    kind: str,
    install_hint: str,
    settings: Callable[[], Awaitable[C]],
    invalid: type[Exception],
    invalid_code: str,
) -> C | SourceReading:
    """What a poll of a kind with an optional driver does before its attempts: the driver is installed, the
    Secrets resolve and the settings are valid, else a permanent error reading naming the cause."""
    try:
        importlib.import_module(driver)
    except ImportError:
        return SourceReading.failed(
            "DriverNotInstalled",
            f"the {kind} kind needs the {driver.split('.')[0]} package, which is not installed: {install_hint}",
            retryable=False,
        )
    try:
        return await settings()
    except SecretUnavailable as exc:
        return SourceReading.failed(exc.code, exc.message, retryable=False)
    except invalid as exc:
        return SourceReading.failed(invalid_code, str(exc), retryable=False)
