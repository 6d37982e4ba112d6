"""The Azure poller's fast path (`StreamTransport.fetch` under `polling_client`): it reads and fails exactly as the
httpx path does against a real Azurite, and it steps aside wherever a proxy applies."""

from __future__ import annotations

import httpx
import pytest

from controller import __version__
from controller.model.fields import SecretKeyRef
from controller.model.readings import SourceReading
from controller.model.secrets import SecretResolver
from controller.model.sources.azure_queue import AzureQueueSource
from controller.net.transport import StreamTransport, polling_client
from controller.sources.azure_queue import AzureQueuePoller
from controller.sources.base import SourceContext
from tests.azurite import Azurite
from tests.helpers import DictSecrets, add_traffic, key_secrets, key_source, new_queue, unique_queue
from tests.loopback import LoopbackServer, Reply, always

OTHER_KEY = "b3RoZXIta2V5LW5vdC10aGUtcmlnaHQtb25lLWF0LWFsbC0wMTIzNDU2Nzg5YWJjZGVm"
COUNT_5 = Reply(200, {"x-ms-approximate-messages-count": "5"})


async def poll_both(spec: AzureQueueSource, secrets: SecretResolver) -> tuple[SourceReading, SourceReading]:
    """The same poll through the fast path and through plain httpx (its default transport)."""
    async with polling_client(timeout=5.0) as fast, httpx.AsyncClient() as plain:
        assert isinstance(fast.direct(httpx.URL(f"{spec.endpoint}/{spec.queue_name}")), StreamTransport)
        via_fetch = await AzureQueuePoller(spec, SourceContext(fast, secrets)).poll(5.0)
        via_httpx = await AzureQueuePoller(spec, SourceContext(plain, secrets)).poll(5.0)
    return via_fetch, via_httpx


@pytest.mark.parametrize("strategy", ["approximate", "visible"])
async def test_the_fast_path_counts_what_httpx_counts(azurite: Azurite, strategy: str) -> None:
    queue = new_queue(azurite)
    add_traffic(queue, visible=3, dequeued=2)
    spec = key_source(azurite, queue.queue_name, count_strategy=strategy)
    via_fetch, via_httpx = await poll_both(spec, key_secrets(azurite))
    assert via_fetch == via_httpx == SourceReading.of(5 if strategy == "approximate" else 3)


async def test_a_rejected_key_fails_alike_on_both_paths(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    via_fetch, via_httpx = await poll_both(key_source(azurite, queue.queue_name), key_secrets(azurite, OTHER_KEY))
    assert via_fetch == via_httpx
    assert via_fetch.error is not None and via_fetch.error.code == "AuthenticationFailed"
    assert OTHER_KEY not in via_fetch.error.message


async def test_a_missing_queue_fails_alike_on_both_paths(azurite: Azurite) -> None:
    via_fetch, via_httpx = await poll_both(key_source(azurite, unique_queue()), key_secrets(azurite))
    assert via_fetch == via_httpx
    assert via_fetch.error is not None and via_fetch.error.code == "QueueNotFound"


def sas_spec(server: LoopbackServer) -> AzureQueueSource:
    return AzureQueueSource(type="azure-queue", queue_name="orders", account_name="acct",
                            sas_secret_ref=SecretKeyRef("sas", "token"), endpoint=f"{server.url}/acct")


SAS = DictSecrets({("sas", "token"): "sv=2025-11-05&sp=r&sig=c2lnbmF0dXJl"})


async def test_a_proxy_for_the_endpoint_takes_the_poll_through_httpx_and_no_proxy_takes_it_direct(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with LoopbackServer(always(COUNT_5)) as proxy, LoopbackServer(always(COUNT_5)) as queue_service:
        spec = sas_spec(queue_service)
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        async with polling_client(timeout=5.0) as http:
            assert http.direct(httpx.URL(f"{spec.endpoint}/orders")) is None
            proxied = await AzureQueuePoller(spec, SourceContext(http, SAS)).poll(5.0)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        async with polling_client(timeout=5.0) as http:
            assert http.direct(httpx.URL(f"{spec.endpoint}/orders")) is http._transport
            direct = await AzureQueuePoller(spec, SourceContext(http, SAS)).poll(5.0)
    assert proxied == direct == SourceReading.of(5)
    [through_proxy] = proxy.requests
    assert through_proxy.path.startswith(f"{queue_service.url}/acct/orders?comp=metadata&sv=")  # absolute form
    assert through_proxy.headers["user-agent"].startswith("python-httpx/")
    [straight] = queue_service.requests
    assert straight.path.startswith("/acct/orders?comp=metadata&sv=")
    # What fetch sends: Host, the poller's headers and its User-Agent, none of httpx's (no Accept-Encoding, so
    # nothing comes back compressed on a path that does not decompress).
    assert set(straight.headers) == {"host", "x-ms-date", "x-ms-version", "user-agent"}
    assert straight.headers["user-agent"] == f"queuescale/{__version__}"
