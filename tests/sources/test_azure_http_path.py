"""The Azure poller on the operator's own HTTP client (`polling_client`): it reads and fails as the queue service
says against a real Azurite and the capacity benchmark's queue server, and it goes through a proxy from the
environment wherever one applies."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.capacity import queue_server
from controller import __version__
from controller.model.fields import SecretKeyRef
from controller.model.readings import SourceReading
from controller.model.secrets import SecretResolver
from controller.model.sources.azure_queue import AzureQueueSource
from controller.net.http import polling_client
from controller.sources.azure_queue import AzureQueuePoller
from controller.sources.base import SourceContext
from tests.azure_answers import queue_of
from tests.azurite import Azurite
from tests.helpers import DictSecrets, add_traffic, key_secrets, key_source, new_queue, unique_queue
from tests.loopback import LoopbackServer

OTHER_KEY = "b3RoZXIta2V5LW5vdC10aGUtcmlnaHQtb25lLWF0LWFsbC0wMTIzNDU2Nzg5YWJjZGVm"


async def poll(spec: AzureQueueSource, secrets: SecretResolver) -> SourceReading:
    """One poll through the client the operator builds."""
    async with polling_client(timeout=5.0) as http:
        return await AzureQueuePoller(spec, SourceContext(http, secrets)).poll(5.0)


@pytest.mark.parametrize("strategy", ["approximate", "visible"])
async def test_the_operators_client_counts_what_the_queue_holds(azurite: Azurite, strategy: str) -> None:
    queue = new_queue(azurite)
    add_traffic(queue, visible=3, dequeued=2)
    spec = key_source(azurite, queue.queue_name, count_strategy=strategy)
    reading = await poll(spec, key_secrets(azurite))
    assert (reading.count, reading.error, reading.note) == (5 if strategy == "approximate" else 3, None, "")
    assert reading.oldest_age is not None and 0.0 <= reading.oldest_age < 5.0  # put just now


async def test_a_rejected_key_fails_with_azures_code_and_without_the_key(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    reading = await poll(key_source(azurite, queue.queue_name), key_secrets(azurite, OTHER_KEY))
    assert reading.error is not None and reading.error.code == "AuthenticationFailed"
    assert OTHER_KEY not in reading.error.message


async def test_a_missing_queue_fails_with_azures_code(azurite: Azurite) -> None:
    reading = await poll(key_source(azurite, unique_queue()), key_secrets(azurite))
    assert reading.error is not None and reading.error.code == "QueueNotFound"


def sas_spec(server: LoopbackServer) -> AzureQueueSource:
    return AzureQueueSource(type="azure-queue", queue_name="orders", account_name="acct",
                            sas_secret_ref=SecretKeyRef("sas", "token"), endpoint=f"{server.url}/acct")


SAS = DictSecrets({("sas", "token"): "sv=2025-11-05&sp=r&sig=c2lnbmF0dXJl"})


async def test_a_proxy_for_the_endpoint_takes_the_poll_and_no_proxy_takes_it_direct(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with LoopbackServer(queue_of(5, waited=4.0)) as proxy, LoopbackServer(queue_of(5, waited=4.0)) as queue_service:
        spec = sas_spec(queue_service)
        for name in ("http_proxy", "https_proxy", "no_proxy", "NO_PROXY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        async with polling_client(timeout=5.0) as http:
            proxied = await AzureQueuePoller(spec, SourceContext(http, SAS)).poll(5.0)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        async with polling_client(timeout=5.0) as http:
            direct = await AzureQueuePoller(spec, SourceContext(http, SAS)).poll(5.0)
    for reading in (proxied, direct):
        assert (reading.count, reading.error, reading.note) == (5, None, "")
        assert reading.oldest_age is not None and 3.0 <= reading.oldest_age <= 6.0
    [through_proxy, peek_through_proxy] = proxy.requests
    assert through_proxy.path.startswith(f"{queue_service.url}/acct/orders?comp=metadata&sv=")  # absolute form
    assert peek_through_proxy.path.startswith(
        f"{queue_service.url}/acct/orders/messages?peekonly=true&numofmessages=1&sv=")
    [straight, peek] = queue_service.requests
    assert straight.path.startswith("/acct/orders?comp=metadata&sv=")
    assert peek.path.startswith("/acct/orders/messages?peekonly=true&numofmessages=1&sv=")
    for request in (through_proxy, straight, peek):
        # The poller's headers and its User-Agent; nothing signed is added (no Content-Type, no Content-Length).
        assert {"host", "x-ms-date", "x-ms-version", "user-agent"} <= set(request.headers)
        assert not {"content-type", "content-length", "authorization"} & set(request.headers)
        assert request.headers["user-agent"] == f"queuescale/{__version__}"


@pytest.fixture
def capacity_queue(tmp_path: Path) -> Iterator[str]:
    with queue_server(tmp_path) as url:
        yield url


async def test_the_capacity_benchmarks_queue_server_answers_the_default_poll_count_and_peek(
        capacity_queue: str) -> None:
    # The benchmark measures what the operator really sends by default: the count, then the front message's peek.
    from benchmarks.capacity import DEV_KEY, FRONT_MESSAGE_WAITED, STEADY_COUNT

    spec = AzureQueueSource(type="azure-queue", queue_name="q00000", account_name="devstoreaccount1",
                            endpoint=f"{capacity_queue}/devstoreaccount1",
                            account_key_secret_ref=SecretKeyRef("storage", "account-key"))
    reading = await poll(spec, DictSecrets({("storage", "account-key"): DEV_KEY}))
    assert (reading.count, reading.error, reading.note) == (STEADY_COUNT, None, "")
    assert reading.oldest_age is not None
    assert FRONT_MESSAGE_WAITED <= reading.oldest_age <= FRONT_MESSAGE_WAITED + 1  # whole seconds of HTTP dates
