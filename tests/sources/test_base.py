"""What every kind shares (`controller.sources.base`): the guarded poll that check, record and the reconciler use,
and the poller skeleton: settings, attempts with retries, a reading, never an exception."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest

from controller.model.fields import SecretKeyRef
from controller.model.readings import SourceError, SourceReading
from controller.model.sources.base import SourceSpec
from controller.model.sources.rabbitmq import RabbitMqSource
from controller.sources.base import Poller, SourceContext, guarded_poll
from controller.sources.retries import RetryPolicy
from tests.helpers import DictSecrets
from tests.transports import http_client

SPEC = RabbitMqSource(type="rabbitmq", weight=1.0, queue="orders", management_url="http://127.0.0.1:9",
                      vhost="/", username="guest", password_secret_ref=SecretKeyRef("rabbit", "password"))
FAST = RetryPolicy(request_timeout=0.2, first_delay=0.01, max_delay=0.02, max_attempts=3)


class Scripted:
    """A source whose poll does what the test says: sleep, raise, or answer."""

    def __init__(self, *, sleep: float = 0.0, error: Exception | None = None, at_once: bool = False) -> None:
        self.sleep = sleep
        self.error = error
        self.answers_at_once = at_once

    @property
    def spec(self) -> SourceSpec:
        return SPEC

    async def poll(self, budget: float) -> SourceReading:
        await asyncio.sleep(self.sleep)
        if self.error is not None:
            raise self.error
        return SourceReading.of(4)

    async def aclose(self) -> None:
        return None


async def test_a_guarded_poll_that_outlasts_its_budget_is_a_timeout_reading() -> None:
    reading = await guarded_poll(Scripted(sleep=5.0), 0.05)
    assert reading.error is not None
    assert (reading.error.code, reading.error.retryable) == ("Timeout", True)
    assert "no answer from queue" in reading.error.message


async def test_a_source_that_raises_gives_an_internal_error_without_its_text(caplog: pytest.LogCaptureFixture) -> None:
    reading = await guarded_poll(Scripted(error=ValueError("https://acct/q?sig=SECRET")), 1.0)
    assert reading.error is not None and reading.error.code == "InternalError"
    assert "SECRET" not in reading.error.message and "SECRET" not in caplog.text
    assert "ValueError" in reading.error.message


async def test_a_source_that_answers_at_once_gets_no_timer() -> None:
    """The simulator's sources never wait on I/O: no timer, so even a zero budget lets them answer."""
    assert await guarded_poll(Scripted(at_once=True), 0.0) == SourceReading.of(4)
    timed = await guarded_poll(Scripted(), 0.0)
    assert timed.error is not None and timed.error.code == "Timeout"


class Counting(Poller[RabbitMqSource, str, int]):
    """A kind written on the skeleton, scripted: `prepare` and each attempt give what the lists say."""

    kind = "counting"

    def __init__(self, settings: str | SourceReading, attempts: list[int | SourceError | Exception]) -> None:
        super().__init__(SPEC, SourceContext(http=http_client(), secrets=DictSecrets()), retry=FAST,
                         rng=random.Random(1))
        self.settings = settings
        self.script = attempts
        self.closed = 0

    async def prepare(self, deadline: float) -> str | SourceReading:
        return self.settings

    async def attempt(self, settings: str, timeout: float) -> int | SourceError:
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    async def aclose(self) -> None:
        self.closed += 1


async def test_a_failed_preparation_ends_the_poll_without_an_attempt() -> None:
    poller = Counting(SourceReading.failed("SecretNotFound", "no Secret 'rabbit'", retryable=False), [7])
    reading = await poller.poll(1.0)
    assert reading.error is not None and reading.error.code == "SecretNotFound"
    assert (poller.attempts, poller.script) == (0, [7])


async def test_transient_errors_are_retried_and_a_connection_dropped_only_when_they_win() -> None:
    busy = SourceError("Busy", "busy")
    recovered = Counting("settings", [busy, 7])
    assert await recovered.poll(2.0) == SourceReading.of(7)
    assert (recovered.attempts, recovered.closed) == (2, 0)

    gave_up = Counting("settings", [busy, busy, busy])
    reading = await gave_up.poll(2.0)
    assert reading.error is not None and "gave up after 3 attempts" in reading.error.message
    assert (gave_up.attempts, gave_up.closed) == (3, 1)  # a half-broken connection: the next poll starts afresh

    refused = Counting("settings", [SourceError("NoPermission", "denied", retryable=False)])
    assert (await refused.poll(2.0)).error == SourceError("NoPermission", "denied", retryable=False)
    assert (refused.attempts, refused.closed) == (1, 0)


async def test_an_unexpected_exception_in_an_attempt_is_an_internal_error_reading(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    reading = await Counting("settings", [KeyError("password=hunter2")]).poll(1.0)
    assert reading.error is not None and reading.error.code == "InternalError"
    assert "hunter2" not in reading.error.message and "hunter2" not in caplog.text
    assert "counting orders: unexpected KeyError" in caplog.text
