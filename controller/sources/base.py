"""The interface every queue kind implements, the skeleton they share, and the guarded poll their callers use."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Generic, Protocol, TypeVar

from controller.model.fields import SecretKeyRef
from controller.model.readings import SourceError, SourceReading
from controller.model.secrets import SecretResolver
from controller.model.sources.base import SourceSpec
from controller.model.textfmt import duration
from controller.net.http import Fetch
from controller.sources.retries import RetryPolicy, deadline_for, with_retries

log = logging.getLogger(__name__)

SpecT = TypeVar("SpecT", bound=SourceSpec)
SettingsT = TypeVar("SettingsT")
ValueT = TypeVar("ValueT")

# Back-off jitter needs no generator per queue (a random.Random holds 2.5 KB of state).
JITTER = random.Random()


@dataclass(frozen=True)
class SourceContext:
    """What a source needs from its caller: the shared HTTP client, secrets, the rule's namespace, a clock."""

    http: Fetch
    secrets: SecretResolver
    namespace: str = "default"
    now: Callable[[], float] | None = None  # wall-clock seconds; for caching tokens (None: time.time)


class Source(Protocol):
    """One queue of one rule."""

    @property
    def spec(self) -> SourceSpec: ...

    async def poll(self, budget: float) -> SourceReading:
        """The queue's count, or an error; retries transient failures within `budget` seconds. Never raises."""
        ...

    async def aclose(self) -> None:
        """Release what the source holds (tokens, connections; not the shared HTTP client)."""
        ...


class Poller(ABC, Generic[SpecT, SettingsT, ValueT]):
    """What every kind's poller does the same way: a poll reads its settings (Secrets included, on every poll so a
    rotated one takes effect at once), then makes attempts with retries within the budget, and turns what they came
    to into a reading; anything unexpected becomes an `InternalError` reading, never an exception.

    A kind says how to get its settings (`prepare`), what one attempt is (`attempt`), and optionally how a value
    reads (`reading`) and what to do after the attempts failed (`after_failure`).
    """

    kind: ClassVar[str]  # the spec's `type`, for log lines

    def __init__(self, spec: SpecT, context: SourceContext, *, retry: RetryPolicy | None = None,
                 rng: random.Random | None = None) -> None:
        self._spec = spec
        self._context = context
        self._retry = retry or RetryPolicy()
        self._rng = rng or JITTER
        self.attempts = 0  # attempts made by the last poll (for tests)

    @property
    def spec(self) -> SpecT:
        return self._spec

    async def aclose(self) -> None:
        return None

    async def secret(self, ref: SecretKeyRef | None) -> str | None:
        """The value of the Secret key `ref` names (read on every poll), or None when the rule names none."""
        return None if ref is None else await self._context.secrets(ref.name, ref.key)

    def _wall_clock(self) -> float:
        return self._context.now() if self._context.now is not None else time.time()

    async def poll(self, budget: float) -> SourceReading:
        """The queue's count, or an error reading; retries transient failures within `budget` seconds."""
        deadline = deadline_for(budget)
        self.attempts = 0
        try:
            settings = await self.prepare(deadline)
            if isinstance(settings, SourceReading):
                return settings
            outcome = await with_retries(lambda timeout: self.attempt(settings, timeout), deadline, self._retry,
                                         self._rng)
            self.attempts = outcome.attempts
            if outcome.error is not None:
                await self.after_failure(outcome.error)
                return SourceReading(count=None, error=outcome.error)
            assert outcome.value is not None
            return await self.reading(settings, outcome.value, deadline)
        except Exception as exc:  # never raise out of a poll; a library's text may hold a URL or a password
            log.error("%s %s: unexpected %s", self.kind, self._spec.queue_label, type(exc).__name__)
            return SourceReading.failed("InternalError", f"unexpected {type(exc).__name__} while polling")

    @abstractmethod
    async def prepare(self, deadline: float) -> SettingsT | SourceReading:
        """What the attempts need (credentials, connection settings), or a failed reading that ends the poll."""

    @abstractmethod
    async def attempt(self, settings: SettingsT, timeout: float) -> ValueT | SourceError:
        """One try within `timeout` seconds: the value, or an error saying whether another try may succeed."""

    async def reading(self, settings: SettingsT, value: ValueT, deadline: float) -> SourceReading:  # noqa: ARG002
        """The reading a value makes (a count by default)."""
        assert isinstance(value, int)
        return SourceReading.of(value)

    async def after_failure(self, error: SourceError) -> None:
        """Called when the attempts came to `error`; a kind with a connection drops it after a transient one, so
        the next poll starts afresh."""
        if error.retryable:
            await self.aclose()


async def guarded_poll(source: Source, budget: float) -> SourceReading:
    """`source.poll(budget)` bounded by `budget` seconds, any exception a failed reading: it never raises.

    A source that never waits on I/O (the simulator's: `answers_at_once`) gets no timer, so a simulated tick stays
    cheap.
    """
    try:
        if getattr(source, "answers_at_once", False):
            return await source.poll(budget)
        async with asyncio.timeout(budget):
            return await source.poll(budget)
    except TimeoutError:
        return SourceReading.failed("Timeout",
                                    f"no answer from queue '{source.spec.queue_label}' within {duration(budget)}")
    except Exception as exc:  # a bug in a source must not stop the rule; its text may hold a URL with a SAS
        log.error("source %s failed unexpectedly: %s", source.spec.queue_label, type(exc).__name__)
        return SourceReading.failed("InternalError", f"unexpected {type(exc).__name__} while polling")
