"""The live run's outage proxy (controller/demo/outages.py) between the operator's azure-queue source and a real
Azurite: Azure's error during a window, no answer during a timeout window, the answer as it came outside them."""

from __future__ import annotations

import asyncio
import uuid
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from azure.storage.queue import QueueClient, QueueServiceClient

from controller.demo.harness import DemoSecrets
from controller.demo.live import InputError, ScenarioDemoOptions, load_inputs
from controller.demo.outages import OutageProxy
from controller.model.fields import SecretKeyRef
from controller.model.readings import SourceReading
from controller.model.sources.azure_queue import AzureQueueSource
from controller.net.http import polling_client
from controller.simulator.scenario import Outage
from controller.sources import build_source
from controller.sources.base import SourceContext
from tests.azurite import ROOT, Azurite


class Clock:
    """The proxy's clock, moved by the test: seconds since the scenario's time 0."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def queue(azurite: Azurite) -> QueueClient:
    """A queue of the session's Azurite holding three messages."""
    service = QueueServiceClient.from_connection_string(azurite.connection_string, retry_total=0)
    client = service.create_queue(f"outage-{uuid.uuid4().hex[:12]}")
    for n in range(3):
        client.send_message(f"job {n}")
    return client


@pytest.fixture
async def proxy(azurite: Azurite) -> AsyncIterator[tuple[OutageProxy, Clock]]:
    clock = Clock()
    outages = [Outage(start=10.0, end=20.0, code="ServerBusy"), Outage(start=30.0, end=40.0, failure="timeout")]
    server = OutageProxy(f"http://127.0.0.1:{azurite.port}", outages, clock=clock)
    await server.start()
    server.begin(0.0)
    try:
        yield server, clock
    finally:
        await server.stop()


async def poll_through(proxy: OutageProxy, azurite: Azurite, queue: str, budget: float = 2.0) -> SourceReading:
    """One poll by the operator's own azure-queue source, its connection string pointed at the proxy."""
    spec = AzureQueueSource(type="azure-queue", queue_name=queue, connection_secret_ref=SecretKeyRef("demo-queue",
                                                                                                     "connection-string"))
    connection = azurite.connection_string_via(f"{proxy.url}/{azurite.account}")
    async with polling_client(timeout=budget) as http:
        source = build_source(spec, SourceContext(http=http, secrets=DemoSecrets(connection), namespace="demo"))
        try:
            return await source.poll(budget)
        finally:
            await source.aclose()


async def test_the_proxy_answers_server_busy_during_an_outage_and_forwards_outside_it(
        proxy: tuple[OutageProxy, Clock], azurite: Azurite, queue: QueueClient) -> None:
    server, clock = proxy
    clock.t = 5.0
    before = await poll_through(server, azurite, queue.queue_name)
    assert before.error is None and before.count == 3, "before the window the count comes from Azurite"

    clock.t = 10.0
    during = await poll_through(server, azurite, queue.queue_name)
    assert during.count is None and during.error is not None
    assert during.error.code == "ServerBusy" and during.error.retryable, during.error
    assert "HTTP 503 ServerBusy" in during.error.message

    clock.t = 19.9
    async with httpx.AsyncClient() as client:
        answer = await client.get(f"{server.url}/{azurite.account}/{queue.queue_name}?comp=metadata")
    assert (answer.status_code, answer.reason_phrase) == (503, "The server is busy.")
    assert answer.headers["x-ms-error-code"] == "ServerBusy" and answer.headers["x-ms-request-id"]
    assert answer.headers["content-type"] == "application/xml"
    error = ET.fromstring(answer.content)
    assert error.tag == "Error" and error.findtext("Code") == "ServerBusy"
    message = error.findtext("Message") or ""
    assert message.startswith("The server is busy.\nRequestId:") and "\nTime:" in message

    clock.t = 20.0  # the window is [start, end)
    after = await poll_through(server, azurite, queue.queue_name)
    assert after.error is None and after.count == 3
    assert server.counts.errors >= 2 and server.counts.forwarded >= 2


async def test_outside_a_window_the_answer_is_azurites_as_it_came(
        proxy: tuple[OutageProxy, Clock], azurite: Azurite, queue: QueueClient) -> None:
    server, _ = proxy
    through = QueueClient.from_connection_string(
        azurite.connection_string_via(f"{server.url}/{azurite.account}"), queue.queue_name, retry_total=0)
    direct_peek, through_peek = await asyncio.gather(asyncio.to_thread(queue.peek_messages, 32),
                                                     asyncio.to_thread(through.peek_messages, 32))
    assert [(m.id, m.content, m.inserted_on) for m in through_peek] == \
        [(m.id, m.content, m.inserted_on) for m in direct_peek]
    assert len(through_peek) == 3, "a signed Peek Messages goes through as signed"
    assert (await asyncio.to_thread(through.get_queue_properties)).approximate_message_count == 3
    # Azurite's own errors pass through as they came: they are not the proxy's.
    path = f"/{azurite.account}/{queue.queue_name}?comp=metadata"
    async with httpx.AsyncClient() as client:
        direct = await client.get(f"http://127.0.0.1:{azurite.port}{path}")  # unsigned: refused
        proxied = await client.get(f"{server.url}{path}")
    assert proxied.status_code == direct.status_code == 403
    assert proxied.headers["x-ms-error-code"] == direct.headers["x-ms-error-code"] == "AuthenticationFailed"
    assert proxied.reason_phrase == direct.reason_phrase
    assert ET.fromstring(proxied.content).findtext("Code") == "AuthenticationFailed"
    assert server.counts.errors == 0 and server.counts.forwarded == 3


async def test_a_timeout_outage_leaves_the_poll_unanswered_until_the_source_gives_up(
        proxy: tuple[OutageProxy, Clock], azurite: Azurite, queue: QueueClient) -> None:
    server, clock = proxy
    clock.t = 30.0
    started = asyncio.get_running_loop().time()
    during = await poll_through(server, azurite, queue.queue_name, budget=1.0)
    waited = asyncio.get_running_loop().time() - started
    assert during.count is None and during.error is not None and during.error.code == "Timeout", during.error
    assert 0.5 <= waited < 3.0, "the source's own timeout ended the poll, not an answer"
    assert server.counts.held >= 1 and server.counts.errors == 0

    clock.t = 40.0
    after = await poll_through(server, azurite, queue.queue_name)
    assert after.error is None and after.count == 3


async def test_stop_ends_the_requests_still_held_and_the_port(azurite: Azurite) -> None:
    clock = Clock()
    server = OutageProxy(f"http://127.0.0.1:{azurite.port}", [Outage(0.0, 600.0, failure="timeout")], clock=clock)
    await server.start()
    server.begin(0.0)
    url = f"{server.url}/{azurite.account}/any?comp=metadata"
    async with httpx.AsyncClient(timeout=30.0) as client:
        held = asyncio.create_task(client.get(url))
        await asyncio.sleep(0.3)
        assert not held.done()
        started = asyncio.get_running_loop().time()
        await server.stop()
        assert asyncio.get_running_loop().time() - started < 3.0, "stop() does not wait out the window"
        with pytest.raises(httpx.HTTPError):
            await held
        with pytest.raises(httpx.ConnectError):
            await client.get(url)
    await server.stop()  # idempotent


def test_an_error_code_azure_does_not_send_is_refused() -> None:
    with pytest.raises(ValueError, match="NoSuchCode"):
        OutageProxy("http://127.0.0.1:1", [Outage(1.0, 2.0, code="NoSuchCode")])


def test_a_live_run_refuses_what_it_cannot_honour_naming_the_field(tmp_path: Path) -> None:
    rule = str(ROOT / "benchmarks" / "scenarios" / "fidelity" / "rule.yaml")
    # checkout-outage has two queues (and outages on both): one queue on Azurite would take all their arrivals
    # under a rule of one source, and what ran would not be what is simulated beside it.
    checkout = str(ROOT / "controller" / "simulator" / "scenarios" / "checkout-outage.yaml")
    with pytest.raises(InputError, match=r"checkout-outage.yaml: queues: a live run sends to one queue .* has 2 "
                                         r"\(orders, refunds\)"):
        load_inputs(ScenarioDemoOptions(scenario=checkout, policy=rule))
    # Without its outages too: until 2026-12-04 their arrivals went to one queue without a word.
    calm = tmp_path / "calm.yaml"
    calm.write_text("\n".join(line for line in Path(checkout).read_text().splitlines()
                              if "outages:" not in line and "{start:" not in line))
    with pytest.raises(InputError, match=r"calm.yaml: queues: .* has 2 \(orders, refunds\): simulate it"):
        load_inputs(ScenarioDemoOptions(scenario=str(calm), policy=rule))
    text = (ROOT / "benchmarks" / "scenarios" / "fidelity" / "fidelity-outage.yaml").read_text()
    odd = tmp_path / "odd.yaml"
    odd.write_text(text.replace("code: ServerBusy", "code: Throttled"))
    with pytest.raises(InputError, match=r"outages\[\]\.code: .* no answer for Throttled"):
        load_inputs(ScenarioDemoOptions(scenario=str(odd), policy=rule))
    fidelity = ROOT / "benchmarks" / "scenarios" / "fidelity" / "fidelity-outage.yaml"
    scenario, _ = load_inputs(ScenarioDemoOptions(scenario=str(fidelity), policy=rule))
    assert [o.code for _, o in scenario.outages] == ["ServerBusy"]
