"""The Azure poller on the operator's own HTTP client (`polling_client`): it reads and fails as the queue service
says against a real Azurite, and it goes through a proxy from the environment wherever one applies."""

from __future__ import annotations

import pytest

from controller import __version__
from controller.model.fields import SecretKeyRef
from controller.model.readings import SourceReading
from controller.model.secrets import SecretResolver
from controller.model.sources.azure_queue import AzureQueueSource
from controller.net.http import polling_client
from controller.sources.azure_queue import AzureQueuePoller
from controller.sources.base import SourceContext
from tests.azurite import Azurite
from tests.helpers import DictSecrets, add_traffic, key_secrets, key_source, new_queue, unique_queue
from tests.loopback import LoopbackServer, Reply, always

OTHER_KEY = "b3RoZXIta2V5LW5vdC10aGUtcmlnaHQtb25lLWF0LWFsbC0wMTIzNDU2Nzg5YWJjZGVm"
COUNT_5 = Reply(200, {"x-ms-approximate-messages-count": "5"})


async def poll(spec: AzureQueueSource, secrets: SecretResolver) -> SourceReading:
    """One poll through the client the operator builds."""
    async with polling_client(timeout=5.0) as http:
        return await AzureQueuePoller(spec, SourceContext(http, secrets)).poll(5.0)


@pytest.mark.parametrize("strategy", ["approximate", "visible"])
async def test_the_operators_client_counts_what_the_queue_holds(azurite: Azurite, strategy: str) -> None:
    queue = new_queue(azurite)
    add_traffic(queue, visible=3, dequeued=2)
    spec = key_source(azurite, queue.queue_name, count_strategy=strategy)
    assert await poll(spec, key_secrets(azurite)) == SourceReading.of(5 if strategy == "approximate" else 3)


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
    with LoopbackServer(always(COUNT_5)) as proxy, LoopbackServer(always(COUNT_5)) as queue_service:
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
    assert proxied == direct == SourceReading.of(5)
    [through_proxy] = proxy.requests
    assert through_proxy.path.startswith(f"{queue_service.url}/acct/orders?comp=metadata&sv=")  # absolute form
    [straight] = queue_service.requests
    assert straight.path.startswith("/acct/orders?comp=metadata&sv=")
    for request in (through_proxy, straight):
        # The poller's headers and its User-Agent; nothing signed is added (no Content-Type, no Content-Length).
        assert {"host", "x-ms-date", "x-ms-version", "user-agent"} <= set(request.headers)
        assert not {"content-type", "content-length", "authorization"} & set(request.headers)
        assert request.headers["user-agent"] == f"queuescale/{__version__}"
