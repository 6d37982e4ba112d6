"""Retries: transient answers are retried with back-off inside the budget; permanent ones fail at once. The peek for
the oldest message's age is retried the same way, and never fails the count."""

from __future__ import annotations

import threading

from controller.model.fields import SecretKeyRef
from controller.model.sources.azure_queue import AzureQueueSource
from controller.sources.retries import RetryPolicy
from tests.azure_answers import error, is_peek, metadata, queue_of
from tests.helpers import DictSecrets, poll_once, timed_poll
from tests.loopback import LoopbackServer, Recorded, Reply, always

FAST = RetryPolicy(request_timeout=1.0, first_delay=0.02, max_delay=0.1, max_attempts=10)
SAS = DictSecrets({("sas", "token"): "sv=2025-11-05&sp=r&sig=c2lnbmF0dXJl"})
BUSY = Reply(503, {"x-ms-error-code": "ServerBusy"},
             b"<?xml version='1.0'?><Error><Code>ServerBusy</Code><Message>Busy.</Message></Error>")
COUNT_7 = Reply(200, {"x-ms-approximate-messages-count": "7"})


def source(server: LoopbackServer) -> AzureQueueSource:
    return AzureQueueSource(type="azure-queue", queue_name="orders", account_name="acct",
                            sas_secret_ref=SecretKeyRef("sas", "token"), endpoint=f"{server.url}/acct")


class FailFirst:
    """Answers `reply` `times` times, then as a queue of 7 whose front message waited 5 s."""

    def __init__(self, times: int, reply: Reply) -> None:
        self.left = times
        self.reply = reply
        self.lock = threading.Lock()
        self.queue = queue_of(7, waited=5.0)

    def __call__(self, request: Recorded) -> Reply:
        with self.lock:
            if self.left > 0:
                self.left -= 1
                return self.reply
        return self.queue(request)


async def test_server_busy_three_times_then_the_count() -> None:
    with LoopbackServer(FailFirst(3, BUSY)) as server:
        reading = await poll_once(source(server), SAS, retry=FAST)
    assert (reading.count, reading.error) == (7, None)
    assert [is_peek(r) for r in server.requests] == [False] * 4 + [True]  # 3 busy, the count, then the age's peek
    assert all("sig=c2lnbmF0dXJl" in r.path for r in server.requests)


async def test_internal_error_code_comes_from_the_xml_body_and_is_retried() -> None:
    body = b"<?xml version='1.0'?><Error><Code>InternalError</Code><Message>Oops.</Message></Error>"
    with LoopbackServer(FailFirst(2, Reply(500, {}, body))) as server:
        reading = await poll_once(source(server), SAS, retry=FAST)
    assert reading.count == 7
    assert len([r for r in server.requests if not is_peek(r)]) == 3


async def test_the_budget_caps_a_poll_that_keeps_getting_server_busy() -> None:
    slow = RetryPolicy(request_timeout=1.0, first_delay=0.1, max_delay=0.4, max_attempts=100)
    with LoopbackServer(always(BUSY)) as server:
        reading, elapsed = await timed_poll(source(server), SAS, budget=1.0, retry=slow)
    assert elapsed <= 1.0
    assert reading.error is not None
    assert reading.error.code == "ServerBusy"
    assert reading.error.retryable
    attempts = len(server.requests)
    assert 3 <= attempts <= 10  # 0.1, 0.2, 0.4 s back-off steps (with jitter) fit a few times in one second
    assert f"gave up after {attempts} attempts" in reading.error.message
    assert "sig=" not in reading.error.message


async def test_attempts_stop_at_the_policy_maximum() -> None:
    with LoopbackServer(always(BUSY)) as server:
        reading = await poll_once(source(server), SAS, retry=RetryPolicy(first_delay=0.01, max_attempts=3))
    assert reading.error is not None
    assert len(server.requests) == 3


async def test_a_hanging_server_times_out_within_the_budget() -> None:
    release = threading.Event()

    def hang(_request: Recorded) -> Reply:
        release.wait(2.0)
        return COUNT_7

    with LoopbackServer(hang) as server:
        reading, elapsed = await timed_poll(source(server), SAS, budget=0.8, retry=RetryPolicy(request_timeout=0.3))
        release.set()
    assert elapsed <= 0.8
    assert reading.error is not None
    assert reading.error.code == "Timeout"
    assert reading.error.retryable
    assert len(server.requests) >= 2


async def test_a_permanent_error_is_not_retried() -> None:
    with LoopbackServer(always(Reply(403, {"x-ms-error-code": "AuthenticationFailed"}))) as server:
        reading = await poll_once(source(server), SAS, retry=FAST)
    assert reading.error is not None
    assert reading.error.code == "AuthenticationFailed"
    assert not reading.error.retryable
    assert len(server.requests) == 1


async def test_an_answer_without_a_count_is_an_invalid_response() -> None:
    with LoopbackServer(always(Reply(200, {"x-ms-approximate-messages-count": "many"}))) as server:
        reading = await poll_once(source(server), SAS, retry=FAST)
    assert reading.error is not None
    assert reading.error.code == "InvalidResponse"


async def test_a_count_beyond_32_bits_is_kept_whole() -> None:
    with LoopbackServer(always(Reply(200, {"x-ms-approximate-messages-count": "5000000000"}))) as server:
        reading = await poll_once(source(server), SAS, retry=FAST)
    assert reading.count == 5_000_000_000


async def test_an_unsupported_service_version_fails_at_once_and_says_so() -> None:
    body = (b"<?xml version='1.0'?><Error><Code>InvalidHeaderValue</Code>"
            b"<Message>The value for one of the HTTP headers is not in the correct format.\nRequestId:1</Message>"
            b"</Error>")
    with LoopbackServer(always(Reply(400, {}, body))) as server:
        reading = await poll_once(source(server), SAS, retry=FAST)
    assert reading.error is not None
    assert reading.error.code == "InvalidHeaderValue"
    assert not reading.error.retryable
    assert "service version 2025-11-05" in reading.error.message
    assert "not in the correct format." in reading.error.message
    assert "RequestId" not in reading.error.message
    assert len(server.requests) == 1


class BusyPeeks:
    """A queue of 7 whose Peek Messages answers 503 `times` times (every time: None), then its front message."""

    def __init__(self, times: int | None) -> None:
        self.left = times
        self.lock = threading.Lock()
        self.queue = queue_of(7, waited=5.0)

    def __call__(self, request: Recorded) -> Reply:
        if not is_peek(request):
            return metadata(7)
        with self.lock:
            if self.left is None or self.left > 0:
                self.left = None if self.left is None else self.left - 1
                return error(503, "ServerBusy", "The server is busy.")
        return self.queue(request)


async def test_a_peek_answered_busy_is_retried_and_gives_the_age() -> None:
    with LoopbackServer(BusyPeeks(2)) as server:
        reading = await poll_once(source(server), SAS, retry=FAST)
    assert (reading.count, reading.error, reading.note) == (7, None, "")
    assert reading.oldest_age is not None and 4.0 <= reading.oldest_age <= 7.0
    assert [is_peek(r) for r in server.requests] == [False, True, True, True]
    assert all("numofmessages=1&" in r.path for r in server.requests if is_peek(r))  # never 32 just for an age


async def test_a_peek_that_keeps_failing_leaves_the_count_and_keeps_to_the_budget() -> None:
    slow = RetryPolicy(request_timeout=1.0, first_delay=0.1, max_delay=0.4, max_attempts=100)
    with LoopbackServer(BusyPeeks(None)) as server:
        reading, elapsed = await timed_poll(source(server), SAS, budget=1.0, retry=slow)
    assert elapsed <= 1.0
    assert (reading.count, reading.error, reading.oldest_age) == (7, None, None)
    peeks = sum(is_peek(r) for r in server.requests)
    assert peeks >= 2
    assert reading.note.startswith("oldest message's age unknown: Peek Messages failed (ServerBusy): ")
    assert f"gave up after {peeks} attempts" in reading.note
    assert "sig=" not in reading.note


async def test_a_peek_without_a_message_list_leaves_the_count_and_says_so() -> None:
    def answer(request: Recorded) -> Reply:
        return Reply(200, {}, b"<html>a captive portal</html>") if is_peek(request) else metadata(7)

    with LoopbackServer(answer) as server:
        reading = await poll_once(source(server), SAS, retry=FAST)
    assert (reading.count, reading.error, reading.oldest_age) == (7, None, None)
    assert reading.note == ("oldest message's age unknown: Peek Messages on queue 'orders' in account 'acct' "
                            "answered with no message list (InvalidResponse)")
    assert len(server.requests) == 2  # a 200 is not retried
