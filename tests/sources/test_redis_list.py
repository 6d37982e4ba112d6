"""redis-list: spec validation, and polls against a real redis-server on 127.0.0.1 (tests/servers.py)."""

from __future__ import annotations

import logging
import sys
import time
import uuid
from typing import Any

import pytest

from controller.model.fields import SecretKeyRef, SpecError
from controller.model.readings import SourceReading
from controller.model.rule import parse_queuescaler
from controller.model.sources.redis_list import RedisListSource
from controller.sources.base import SourceContext
from controller.sources.redis_list import RedisListPoller, parse_url
from controller.sources.retries import RetryPolicy
from tests.helpers import DictSecrets
from tests.servers import REDIS_PASSWORD, RedisServer
from tests.transports import http_client

FAST = RetryPolicy(request_timeout=0.5, first_delay=0.02, max_delay=0.1, max_attempts=10)
PASSWORD = SecretKeyRef("redis", "password")


def key(prefix: str = "jobs") -> str:
    return f"{prefix}:{uuid.uuid4().hex[:12]}"


def rule(**source: Any) -> dict[str, Any]:
    return {"apiVersion": "queuescale.io/v1alpha1", "kind": "QueueScaler", "metadata": {"name": "r"},
            "spec": {"scaleTargetRef": {"name": "w"}, "maxReplicas": 5, "sources": [{"type": "redis-list", **source}]}}


def errors_of(**source: Any) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_queuescaler(rule(**source))
    return [str(e) for e in info.value.errors]


def list_source(server: RedisServer, list_name: str, **fields: Any) -> RedisListSource:
    return RedisListSource(type="redis-list", list_name=list_name, host="127.0.0.1", port=server.port,
                           password_secret_ref=PASSWORD, **fields)


def secrets(password: str = REDIS_PASSWORD, **more: str) -> DictSecrets:
    values = {("redis", "password"): password}
    values.update({(name, "value"): value for name, value in more.items()})
    return DictSecrets(values)


async def poll(spec: RedisListSource, secret_values: DictSecrets, *, budget: float = 3.0,
               retry: RetryPolicy = FAST) -> tuple[SourceReading, RedisListPoller]:
    async with http_client() as http:
        poller = RedisListPoller(spec, SourceContext(http=http, secrets=secret_values), retry=retry)
        try:
            return await poller.poll(budget), poller
        finally:
            await poller.aclose()


# ---------------------------------------------------------------------------------------------- the spec


def test_a_list_rule_parses_with_its_defaults() -> None:
    source = parse_queuescaler(rule(listName="jobs", host="redis.shop.svc", passwordSecretRef={
        "name": "redis", "key": "password"})).spec.sources[0]
    assert source == RedisListSource(type="redis-list", list_name="jobs", host="redis.shop.svc",
                                     password_secret_ref=PASSWORD)
    assert (source.port, source.db, source.tls, source.queue_label) == (6379, 0, False, "jobs")


def test_bad_fields_are_named_by_their_path() -> None:
    assert errors_of(host="h") == ["spec.sources[0]: must set listName or streamName"]
    assert errors_of(listName="a", streamName="s", consumerGroup="g", host="h") == [
        "spec.sources[0].streamName: cannot be combined with listName: a source counts one list or one stream"]
    assert errors_of(streamName="s", host="h") == ["spec.sources[0].consumerGroup: is required with streamName"]
    assert errors_of(listName="a", consumerGroup="g", host="h") == [
        "spec.sources[0].consumerGroup: applies only with streamName"]
    assert errors_of(listName="a") == ["spec.sources[0]: must set host or urlSecretRef"]
    assert errors_of(listName="a", host="h", port=70000, db=16) == [
        "spec.sources[0].port: must be <= 65535, got 70000", "spec.sources[0].db: must be <= 15, got 16"]
    assert errors_of(listName="a", urlSecretRef={"name": "r", "key": "url"}, host="h", tls=True) == [
        "spec.sources[0].host: comes from the URL when urlSecretRef is set (rediss:// for TLS)",
        "spec.sources[0].tls: comes from the URL when urlSecretRef is set (rediss:// for TLS)"]
    assert errors_of(listName="a", host="bad host") == [
        'spec.sources[0].host: must be a host name or IP address, got "bad host"']
    assert errors_of(listName="a", host="h", passwordSecretRef={"name": "R"}) == [
        'spec.sources[0].passwordSecretRef.name: must be a Secret name (DNS subdomain), got "R"',
        "spec.sources[0].passwordSecretRef.key: is required"]
    assert errors_of(listName="", host="h", stream="x") == [
        "spec.sources[0].listName: must not be empty", "spec.sources[0].stream: unknown field"]


def test_urls_give_host_port_db_tls_and_credentials() -> None:
    conn = parse_url("rediss://scaler:p%40ss@redis.example:6380/3", "Secret 'r' key 'url'")
    assert (conn.host, conn.port, conn.db, conn.tls, conn.username, conn.password) == (
        "redis.example", 6380, 3, True, "scaler", "p@ss")
    assert "p@ss" not in repr(conn)


# ---------------------------------------------------------------------------------------------- real Redis


async def test_the_count_is_the_lists_length_and_follows_pushes_and_pops(redis_server: RedisServer) -> None:
    name = key()
    spec = list_source(redis_server, name)
    assert (await poll(spec, secrets()))[0] == SourceReading.of(0)  # a missing key is an empty list
    redis_server.cli("RPUSH", name, *[f"job-{i}" for i in range(7)])
    assert (await poll(spec, secrets()))[0] == SourceReading.of(7)
    redis_server.cli("LPOP", name, "3")
    assert (await poll(spec, secrets()))[0] == SourceReading.of(4)


async def test_a_stream_counts_pending_entries_and_optionally_the_lag(redis_server: RedisServer) -> None:
    stream = key("events")
    redis_server.cli("XGROUP", "CREATE", stream, "workers", "$", "MKSTREAM")
    for i in range(10):
        redis_server.cli("XADD", stream, "*", "n", str(i))
    redis_server.cli("XREADGROUP", "GROUP", "workers", "w1", "COUNT", "4", "STREAMS", stream, ">")
    pending = RedisListSource(type="redis-list", stream_name=stream, consumer_group="workers", host="127.0.0.1",
                              port=redis_server.port, password_secret_ref=PASSWORD)
    assert (await poll(pending, secrets()))[0] == SourceReading.of(4)
    both = RedisListSource(type="redis-list", stream_name=stream, consumer_group="workers", host="127.0.0.1",
                           port=redis_server.port, password_secret_ref=PASSWORD, stream_count="pendingAndLag")
    assert (await poll(both, secrets()))[0] == SourceReading.of(10)  # 4 pending + 6 never delivered
    missing = RedisListSource(type="redis-list", stream_name=stream, consumer_group="nobody", host="127.0.0.1",
                              port=redis_server.port, password_secret_ref=PASSWORD)
    reading, poller = await poll(missing, secrets())
    assert reading.error is not None
    assert (reading.error.code, reading.error.retryable, poller.attempts) == ("NoSuchGroup", False, 1)
    assert "consumer group 'nobody'" in reading.error.message


async def test_a_url_secret_carries_the_connection(redis_server: RedisServer) -> None:
    name = key()
    redis_server.cli("RPUSH", name, "a", "b")
    spec = RedisListSource(type="redis-list", list_name=name, url_secret_ref=SecretKeyRef("url", "value"))
    assert (await poll(spec, secrets(url=redis_server.url)))[0] == SourceReading.of(2)
    reading, _ = await poll(spec, secrets(url=f"http://:{REDIS_PASSWORD}@127.0.0.1/0"))
    assert reading.error is not None
    assert reading.error.code == "InvalidURL"
    assert reading.error.message == "Secret 'url' key 'value' must be a redis:// or rediss:// URL"


async def test_a_wrong_password_fails_at_once_and_names_the_secret(redis_server: RedisServer) -> None:
    reading, poller = await poll(list_source(redis_server, key()), secrets("not-the-password"))
    assert reading.error is not None
    assert (reading.error.code, reading.error.retryable, poller.attempts) == ("AuthenticationFailed", False, 1)
    assert reading.error.message == (f"Redis at 127.0.0.1:{redis_server.port} rejected the password of the "
                                     "default user: check the Secret 'redis' key 'password'")


async def test_a_key_of_another_type_is_wrong_type(redis_server: RedisServer) -> None:
    name = key()
    redis_server.cli("SET", name, "not a list")
    reading, _ = await poll(list_source(redis_server, name), secrets())
    assert reading.error is not None
    assert (reading.error.code, reading.error.retryable) == ("WrongType", False)
    assert f"key '{name}'" in reading.error.message and "fix listName" in reading.error.message


async def test_a_least_privilege_acl_user_can_poll_and_nothing_more(redis_server: RedisServer) -> None:
    # The ACL the docs recommend: LLEN on the scaled keys only.
    user = f"scaler-{uuid.uuid4().hex[:6]}"
    redis_server.cli("ACL", "SETUSER", user, "on", ">scaler-pass-91", "resetkeys", "~jobs:*", "-@all", "+llen")
    name = key("jobs")
    redis_server.cli("RPUSH", name, "x")
    spec = list_source(redis_server, name, username=user)
    assert (await poll(spec, secrets("scaler-pass-91")))[0] == SourceReading.of(1)
    other = list_source(redis_server, key("private"), username=user)
    reading, _ = await poll(other, secrets("scaler-pass-91"))
    assert reading.error is not None
    assert (reading.error.code, reading.error.retryable) == ("NoPermission", False)
    assert "grant it '+llen ~private:" in reading.error.message


async def test_a_server_that_is_down_is_retried_within_the_budget() -> None:
    server = RedisServer()  # never started: nothing listens on its port
    slow = RetryPolicy(request_timeout=0.5, first_delay=0.1, max_delay=0.4, max_attempts=100)
    started = time.monotonic()
    reading, poller = await poll(list_source(server, key()), secrets(), budget=1.0, retry=slow)
    elapsed = time.monotonic() - started
    assert elapsed <= 1.2
    assert reading.error is not None
    assert (reading.error.code, reading.error.retryable) == ("ConnectionFailed", True)
    assert 3 <= poller.attempts <= 10
    assert f"gave up after {poller.attempts} attempts" in reading.error.message


async def test_a_poll_recovers_when_the_server_comes_back() -> None:
    server = RedisServer().start()
    try:
        name = key()
        server.cli("RPUSH", name, "a", "b", "c")
        async with http_client() as http:
            poller = RedisListPoller(list_source(server, name), SourceContext(http=http, secrets=secrets()),
                                     retry=FAST)
            assert await poller.poll(2.0) == SourceReading.of(3)
            server.stop()
            down = await poller.poll(0.5)
            assert down.error is not None and down.error.code == "ConnectionFailed"
            port = server.port
            server = RedisServer()
            server.port = port
            server.start()
            server.cli("RPUSH", name, "d")
            assert await poller.poll(2.0) == SourceReading.of(1)  # a new, empty server on the same port
            await poller.aclose()
    finally:
        server.close()


async def test_a_rotated_password_takes_effect_on_the_next_poll(redis_server: RedisServer) -> None:
    name = key()
    values = secrets("wrong")
    async with http_client() as http:
        poller = RedisListPoller(list_source(redis_server, name), SourceContext(http=http, secrets=values),
                                 retry=FAST)
        assert (await poller.poll(2.0)).error is not None
        values.values[("redis", "password")] = REDIS_PASSWORD
        assert await poller.poll(2.0) == SourceReading.of(0)
        await poller.aclose()


async def test_without_the_driver_a_poll_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis.asyncio", None)  # makes `import redis.asyncio` raise ImportError
    spec = RedisListSource(type="redis-list", list_name="jobs", host="127.0.0.1")
    reading, _ = await poll(spec, secrets())
    assert reading.error is not None
    assert (reading.error.code, reading.error.retryable) == ("DriverNotInstalled", False)
    assert "pip install 'queuescale[redis]'" in reading.error.message


async def test_no_password_or_url_in_readings_reprs_or_logs(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    name = key()
    redis_server.cli("SET", name, "x")
    url_ref = SecretKeyRef("url", "value")
    cases = [
        (list_source(redis_server, name), secrets("wrong-" + REDIS_PASSWORD)),  # AuthenticationFailed
        (list_source(redis_server, name), secrets()),  # WrongType
        (RedisListSource(type="redis-list", list_name=name, url_secret_ref=url_ref),
         secrets(url=redis_server.url.replace("redis://", "redis-x://"))),  # InvalidURL
        (RedisListSource(type="redis-list", list_name=name, url_secret_ref=url_ref),
         secrets(url=redis_server.url.replace(str(redis_server.port), "9"))),  # refused
    ]
    texts: list[str] = []
    for spec, values in cases:
        reading, poller = await poll(spec, values, budget=1.0)
        assert reading.error is not None
        texts += [repr(reading), repr(poller), repr(spec), str(reading.error.message)]
    texts += [r.getMessage() for r in caplog.records] + [caplog.text]
    for text in texts:
        assert REDIS_PASSWORD not in text
        assert redis_server.url not in text
