"""rabbitmq: spec validation, and polls of a real rabbitmq-server's management API (tests/servers.py)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from controller.model.fields import SecretKeyRef, SpecError
from controller.model.readings import SourceReading
from controller.model.rule import parse_queuescaler
from controller.model.sources.rabbitmq import RabbitMqSource
from controller.sources.base import SourceContext
from controller.sources.rabbitmq import RabbitMqPoller
from controller.sources.retries import RetryPolicy
from tests.helpers import DictSecrets
from tests.loopback import LoopbackServer, Reply, always
from tests.servers import RabbitMqServer
from tests.transports import http_client

FAST = RetryPolicy(request_timeout=2.0, first_delay=0.05, max_delay=0.3, max_attempts=20)
MONITOR_PASSWORD = "rabbit-monitor-password-2b8e"
PASSWORD = SecretKeyRef("rabbit", "password")


def rule(**source: Any) -> dict[str, Any]:
    return {"apiVersion": "queuescale.io/v1alpha1", "kind": "QueueScaler", "metadata": {"name": "r"},
            "spec": {"scaleTargetRef": {"name": "w"}, "maxReplicas": 5, "sources": [{"type": "rabbitmq", **source}]}}


def errors_of(**source: Any) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_queuescaler(rule(**source))
    return [str(e) for e in info.value.errors]


def test_fields_parse_and_bad_ones_are_named_by_their_path() -> None:
    source = parse_queuescaler(rule(queue="orders", managementURL="http://rabbitmq:15672/")).spec.sources[0]
    assert source == RabbitMqSource(type="rabbitmq", queue="orders", management_url="http://rabbitmq:15672")
    assert errors_of() == ["spec.sources[0].queue: is required", "spec.sources[0].managementURL: is required"]
    assert errors_of(queue="q", managementURL="http://guest:guest@rabbitmq:15672", count="all") == [
        "spec.sources[0].managementURL: must be an http(s) URL with no credentials or query, e.g. "
        'http://rabbitmq:15672, got "http://guest:guest@rabbitmq:15672"',
        'spec.sources[0].count: must be one of ready, readyAndUnacked, got "all"']


@pytest.fixture(scope="module")
def rabbit(rabbitmq_server: RabbitMqServer) -> RabbitMqServer:
    """The session's RabbitMQ with a least-privilege user: the monitoring tag and no permission to read messages."""
    assert rabbitmq_server.api("PUT", "users/scaler", {"password": MONITOR_PASSWORD, "tags": "monitoring"}) in (
        201, 204)
    assert rabbitmq_server.api("PUT", "permissions/%2F/scaler", {"configure": "", "write": "", "read": ""}) in (
        201, 204)
    return rabbitmq_server


@pytest.fixture
def queue(rabbit: RabbitMqServer) -> Iterator[str]:
    name = f"q-{uuid.uuid4().hex[:10]}"
    assert rabbit.api("PUT", f"queues/%2F/{name}", {"durable": False}) in (201, 204)
    yield name
    rabbit.api("DELETE", f"queues/%2F/{name}")


def publish(rabbit: RabbitMqServer, queue: str, n: int) -> None:
    for i in range(n):
        assert rabbit.api("POST", "exchanges/%2F/amq.default/publish", {
            "properties": {}, "routing_key": queue, "payload": f"m{i}", "payload_encoding": "string"}) == 200


def source(rabbit: RabbitMqServer, queue: str, **fields: Any) -> RabbitMqSource:
    values: dict[str, Any] = {"username": "scaler", "password_secret_ref": PASSWORD}
    values.update(fields)
    return RabbitMqSource(type="rabbitmq", queue=queue, management_url=rabbit.management_url, **values)


async def poll(spec: RabbitMqSource, password: str = MONITOR_PASSWORD, *, budget: float = 5.0,
               retry: RetryPolicy = FAST) -> tuple[SourceReading, RabbitMqPoller]:
    async with http_client() as http:
        poller = RabbitMqPoller(spec, SourceContext(http=http, secrets=DictSecrets({("rabbit", "password"): password})),
                                retry=retry)
        return await poller.poll(budget), poller


async def settled(spec: RabbitMqSource, expected: int, timeout: float = 10.0) -> SourceReading:
    """Poll until the count is `expected`: the management figures are sampled (every 0.5 s in the tests)."""
    deadline = time.monotonic() + timeout
    while True:
        reading, _ = await poll(spec)
        if reading.count == expected or time.monotonic() > deadline:
            return reading
        await asyncio.sleep(0.2)


async def test_ready_and_unacknowledged_messages(rabbit: RabbitMqServer, queue: str) -> None:
    publish(rabbit, queue, 9)
    assert await settled(source(rabbit, queue), 9) == SourceReading.of(9)

    # A consumer takes 4 and holds them unacknowledged.
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", rabbit.amqp_port))
    try:
        channel = connection.channel()
        held = [channel.basic_get(queue, auto_ack=False) for _ in range(4)]
        assert all(method is not None for method, _, _ in held)
        assert await settled(source(rabbit, queue), 5) == SourceReading.of(5)
        both = source(rabbit, queue, count="readyAndUnacked")
        assert await settled(both, 9) == SourceReading.of(9)
    finally:
        connection.close()
    assert await settled(source(rabbit, queue), 9) == SourceReading.of(9)  # the broker requeued them


async def test_a_missing_queue_and_a_wrong_password_fail_at_once(rabbit: RabbitMqServer) -> None:
    reading, poller = await poll(source(rabbit, "no-such-queue"))
    assert reading.error is not None
    assert (reading.error.code, reading.error.retryable, poller.attempts) == ("QueueNotFound", False, 1)
    reading, poller = await poll(source(rabbit, "no-such-queue"), password="wrong")
    assert reading.error is not None
    assert (reading.error.code, reading.error.retryable, poller.attempts) == ("AuthenticationFailed", False, 1)
    assert "check the Secret 'rabbit' key 'password'" in reading.error.message


async def test_a_user_without_access_to_the_vhost_is_not_authorised(rabbit: RabbitMqServer, queue: str) -> None:
    assert rabbit.api("PUT", "users/outsider", {"password": MONITOR_PASSWORD, "tags": ""}) in (201, 204)
    reading, _ = await poll(source(rabbit, queue, username="outsider"))
    assert reading.error is not None
    assert reading.error.code in ("AuthenticationFailed", "NotAuthorised")  # 3.10 answers 401 for a missing tag
    assert not reading.error.retryable


async def test_a_busy_api_is_retried_within_the_budget() -> None:
    with LoopbackServer(always(Reply(503, {}, b"busy"))) as server:
        spec = RabbitMqSource(type="rabbitmq", queue="q", management_url=server.url)
        started = time.monotonic()
        reading, poller = await poll(spec, budget=1.0,
                                     retry=RetryPolicy(request_timeout=0.5, first_delay=0.1, max_delay=0.4))
    assert time.monotonic() - started <= 1.2
    assert reading.error is not None
    assert (reading.error.code, reading.error.retryable) == ("HTTP503", True)
    assert poller.attempts >= 3 and len(server.requests) == poller.attempts


async def test_no_password_in_readings_reprs_or_logs(
    rabbit: RabbitMqServer, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    texts: list[str] = []
    for password in (MONITOR_PASSWORD + "x", MONITOR_PASSWORD):
        reading, poller = await poll(source(rabbit, "missing" if password == MONITOR_PASSWORD else queue), password)
        assert reading.error is not None
        texts += [repr(reading), repr(poller), reading.error.message]
    texts += [r.getMessage() for r in caplog.records] + [caplog.text]
    for text in texts:
        assert MONITOR_PASSWORD not in text
