"""The azure-queue poller against a real Azurite: counts, the oldest message's age, every way to authenticate,
errors, an outage."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from urllib.parse import urlsplit

from azure.storage.queue import (
    AccountSasPermissions,
    QueueSasPermissions,
    ResourceTypes,
    generate_account_sas,
    generate_queue_sas,
)

from controller.model.fields import SecretKeyRef
from controller.model.readings import SourceReading
from controller.model.secrets import SecretResolver
from controller.model.sources.azure_queue import AzureQueueSource
from controller.net.http import Answer, Fetch
from controller.sources import build_source
from controller.sources.azure_queue import VISIBLE_UNKNOWN_NOTE, AzureQueuePoller
from controller.sources.base import SourceContext
from controller.sources.retries import RetryPolicy
from tests.azurite import Azurite
from tests.helpers import (
    DictSecrets,
    add_traffic,
    in_one_hour,
    key_secrets,
    key_source,
    new_queue,
    poll_once,
    unique_queue,
)
from tests.transports import http_client

OTHER_KEY = "b3RoZXIta2V5LW5vdC10aGUtcmlnaHQtb25lLWF0LWFsbC0wMTIzNDU2Nzg5YWJjZGVm"


def connection_source(queue: str, **fields: object) -> AzureQueueSource:
    return AzureQueueSource(
        type="azure-queue", queue_name=queue, connection_secret_ref=SecretKeyRef("conn", "connection-string"),
        **fields,  # type: ignore[arg-type]
    )


def sas_source(azurite: Azurite, queue: str, **fields: object) -> AzureQueueSource:
    return AzureQueueSource(
        type="azure-queue", queue_name=queue, account_name=azurite.account, endpoint=azurite.endpoint,
        sas_secret_ref=SecretKeyRef("sas", "token"), **fields,  # type: ignore[arg-type]
    )


class CountingFetch:
    """The test's real HTTP client, with a record of the paths it was asked for (not the query: it holds the SAS)."""

    def __init__(self, http: Fetch) -> None:
        self.http = http
        self.paths: list[str] = []

    async def fetch(self, method: str, url: str, *, headers: Mapping[str, str] | None = None,
                    body: bytes | None = None, timeout: float | None = None) -> Answer:
        self.paths.append(urlsplit(url).path.rsplit("/", 1)[-1])  # "messages" for a peek, else the queue
        return await self.http.fetch(method, url, headers=headers, body=body, timeout=timeout)


async def poll_counting(spec: AzureQueueSource, secrets: SecretResolver) -> tuple[SourceReading, list[str]]:
    """One poll, and the calls it made: the queue's name for Get Queue Metadata, "messages" for Peek Messages."""
    async with http_client() as http:
        counting = CountingFetch(http)
        reading = await AzureQueuePoller(spec, SourceContext(counting, secrets)).poll(5.0)
    return reading, counting.paths


# --------------------------------------------------------------------------------------------------------------
# Counts


async def test_approximate_count_includes_dequeued_and_delayed_messages(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    add_traffic(queue, visible=5, dequeued=3, delayed=2)
    reading = await poll_once(key_source(azurite, queue.queue_name), key_secrets(azurite))
    assert reading.error is None
    assert reading.count == 10
    assert reading.note == ""


async def test_visible_count_leaves_out_dequeued_and_delayed_messages(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    add_traffic(queue, visible=5, dequeued=3, delayed=2)
    reading = await poll_once(key_source(azurite, queue.queue_name, count_strategy="visible"), key_secrets(azurite))
    assert reading.error is None
    assert reading.count == 5
    assert reading.note == ""


async def test_visible_count_is_exact_up_to_31(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    add_traffic(queue, visible=31, delayed=4)
    reading = await poll_once(key_source(azurite, queue.queue_name, count_strategy="visible"), key_secrets(azurite))
    assert (reading.count, reading.note) == (31, "")


async def test_visible_count_of_32_or_more_falls_back_to_the_approximate_count_with_a_note(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    add_traffic(queue, visible=40, dequeued=2, delayed=3)
    visible = await poll_once(key_source(azurite, queue.queue_name, count_strategy="visible"), key_secrets(azurite))
    approximate = await poll_once(key_source(azurite, queue.queue_name), key_secrets(azurite))
    assert visible.count == approximate.count == 45
    assert visible.note == VISIBLE_UNKNOWN_NOTE
    assert visible.oldest_age is not None and approximate.oldest_age is not None
    assert "32 or more" in visible.note


async def test_an_empty_queue_counts_zero_both_ways(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    for strategy in ("approximate", "visible"):
        reading = await poll_once(key_source(azurite, queue.queue_name, count_strategy=strategy), key_secrets(azurite))
        assert (reading.count, reading.error) == (0, None)


async def test_the_registry_builds_the_azure_poller(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    add_traffic(queue, visible=2)
    async with http_client() as http:
        source = build_source(key_source(azurite, queue.queue_name), SourceContext(http, key_secrets(azurite)))
        assert isinstance(source, AzureQueuePoller)
        assert (await source.poll(5.0)).count == 2
        await source.aclose()


# --------------------------------------------------------------------------------------------------------------
# The oldest message's age


async def test_the_front_messages_age_is_how_long_it_has_waited(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    put = time.time()
    queue.send_message("the oldest")
    await asyncio.sleep(2.0)
    queue.send_message("a newer one")
    reading, calls = await poll_counting(key_source(azurite, queue.queue_name), key_secrets(azurite))
    waited = time.time() - put
    assert (reading.count, reading.error, reading.note) == (2, None, "")
    assert reading.oldest_age is not None and 1.0 <= reading.oldest_age <= waited + 1.0  # HTTP dates: whole seconds
    assert calls == [queue.queue_name, "messages"]


async def test_visible_count_reads_the_age_from_its_own_peek(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    put = time.time()
    add_traffic(queue, visible=3, dequeued=1)
    await asyncio.sleep(2.0)
    reading, calls = await poll_counting(key_source(azurite, queue.queue_name, count_strategy="visible"),
                                         key_secrets(azurite))
    assert (reading.count, reading.error, reading.note) == (3, None, "")
    assert reading.oldest_age is not None and 1.0 <= reading.oldest_age <= time.time() - put + 1.0
    assert calls == ["messages"]


async def test_an_empty_queue_has_waited_nothing_and_is_not_peeked(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    reading, calls = await poll_counting(key_source(azurite, queue.queue_name), key_secrets(azurite))
    assert (reading.count, reading.oldest_age, reading.note) == (0, 0.0, "")
    assert calls == [queue.queue_name]


async def test_messages_all_in_flight_or_delayed_have_no_waiting_front_message(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    add_traffic(queue, dequeued=3, delayed=2)
    reading, calls = await poll_counting(key_source(azurite, queue.queue_name), key_secrets(azurite))
    assert (reading.count, reading.oldest_age, reading.note) == (5, 0.0, "")
    assert calls == [queue.queue_name, "messages"]  # the peek found none visible


async def test_a_front_message_delivered_before_gives_no_age(azurite: Azurite) -> None:
    # Received with a one-second visibility timeout and never deleted (a worker that failed): it is back at the
    # front with DequeueCount 1, and its age would count the worker's time as a wait.
    queue = new_queue(azurite)
    queue.send_message("failed once")
    received = next(iter(queue.receive_messages(visibility_timeout=1)))
    assert received.dequeue_count == 1
    await asyncio.sleep(2.0)
    reading, calls = await poll_counting(key_source(azurite, queue.queue_name), key_secrets(azurite))
    assert (reading.count, reading.error, reading.oldest_age, reading.note) == (1, None, None, "")
    assert calls == [queue.queue_name, "messages"]
    queue.send_message("never delivered")
    reading = await poll_once(key_source(azurite, queue.queue_name, count_strategy="visible"), key_secrets(azurite))
    # Its own peek of up to 32 sees the second one, which has only waited.
    assert reading.count == 2 and reading.oldest_age is not None and reading.oldest_age < 2.0


async def test_oldest_age_off_counts_with_one_call_and_says_no_age(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    add_traffic(queue, visible=2)
    for strategy in ("approximate", "visible"):
        spec = key_source(azurite, queue.queue_name, count_strategy=strategy, oldest_age="off")
        reading, calls = await poll_counting(spec, key_secrets(azurite))
        assert (reading.count, reading.oldest_age, reading.note) == (2, None, "")
        assert len(calls) == 1


async def test_an_account_sas_without_object_access_counts_and_says_why_there_is_no_age(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    add_traffic(queue, visible=4)
    container_only = generate_account_sas(azurite.account, azurite.key, resource_types=ResourceTypes(container=True),
                                          permission=AccountSasPermissions(read=True), expiry=in_one_hour())
    reading = await poll_once(sas_source(azurite, queue.queue_name), DictSecrets({("sas", "token"): container_only}))
    assert (reading.count, reading.error, reading.oldest_age) == (4, None, None)
    assert reading.note == (
        "oldest message's age unknown: the account SAS for 'devstoreaccount1' may count but not peek at messages "
        "(AuthorizationResourceTypeMismatch): the age needs object access, so issue it with srt=co (o to peek, c to "
        "count), or set oldestAge: off: check the Secret 'sas' key 'token'")
    with_objects = generate_account_sas(azurite.account, azurite.key,
                                        resource_types=ResourceTypes(container=True, object=True),
                                        permission=AccountSasPermissions(read=True), expiry=in_one_hour())
    reading = await poll_once(sas_source(azurite, queue.queue_name), DictSecrets({("sas", "token"): with_objects}))
    assert (reading.count, reading.note) == (4, "")
    assert reading.oldest_age is not None


# --------------------------------------------------------------------------------------------------------------
# Ways to authenticate


async def test_connection_string_with_account_key(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    add_traffic(queue, visible=3)
    secrets = DictSecrets({("conn", "connection-string"): azurite.connection_string})
    assert (await poll_once(connection_source(queue.queue_name), secrets)).count == 3


async def test_use_development_storage_pointed_at_the_test_port(azurite: Azurite) -> None:
    # The well-known port 10001 may be taken: QueueEndpoint next to UseDevelopmentStorage moves it.
    queue = new_queue(azurite)
    add_traffic(queue, visible=4)
    text = f"UseDevelopmentStorage=true;QueueEndpoint={azurite.endpoint}"
    secrets = DictSecrets({("conn", "connection-string"): text})
    reading = await poll_once(connection_source(queue.queue_name), secrets)
    assert (reading.count, reading.error) == (4, None)


async def test_connection_string_with_a_sas(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    add_traffic(queue, visible=2)
    sas = generate_queue_sas(azurite.account, queue.queue_name, azurite.key,
                             permission=QueueSasPermissions(read=True), expiry=in_one_hour())
    secrets = DictSecrets({("conn", "connection-string"):
                           f"QueueEndpoint={azurite.endpoint};SharedAccessSignature={sas}"})
    assert (await poll_once(connection_source(queue.queue_name), secrets)).count == 2


async def test_account_key(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    add_traffic(queue, visible=1)
    assert (await poll_once(key_source(azurite, queue.queue_name), key_secrets(azurite))).count == 1


async def test_account_sas_with_container_resource_type(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    add_traffic(queue, visible=6)
    sas = generate_account_sas(azurite.account, azurite.key, resource_types=ResourceTypes(container=True),
                               permission=AccountSasPermissions(read=True), expiry=in_one_hour())
    reading = await poll_once(sas_source(azurite, queue.queue_name), DictSecrets({("sas", "token"): sas}))
    assert (reading.count, reading.error) == (6, None)


async def test_account_sas_without_container_resource_type_is_refused_with_its_code(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    sas = generate_account_sas(azurite.account, azurite.key, resource_types=ResourceTypes(object=True),
                               permission=AccountSasPermissions(read=True), expiry=in_one_hour())
    reading = await poll_once(sas_source(azurite, queue.queue_name), DictSecrets({("sas", "token"): sas}))
    assert reading.error is not None
    assert reading.error.code == "AuthorizationResourceTypeMismatch"
    assert "srt=c" in reading.error.message
    assert not reading.error.retryable


async def test_service_sas_with_read_permission_counts_both_ways(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    add_traffic(queue, visible=3, delayed=1)
    sas = generate_queue_sas(azurite.account, queue.queue_name, azurite.key,
                             permission=QueueSasPermissions(read=True), expiry=in_one_hour())
    secrets = DictSecrets({("sas", "token"): sas})
    assert (await poll_once(sas_source(azurite, queue.queue_name), secrets)).count == 4
    assert (await poll_once(sas_source(azurite, queue.queue_name, count_strategy="visible"), secrets)).count == 3


async def test_service_sas_without_read_permission_is_refused_with_its_code(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    sas = generate_queue_sas(azurite.account, queue.queue_name, azurite.key,
                             permission=QueueSasPermissions(add=True, process=True), expiry=in_one_hour())
    reading = await poll_once(sas_source(azurite, queue.queue_name), DictSecrets({("sas", "token"): sas}))
    assert reading.error is not None
    assert reading.error.code == "AuthorizationPermissionMismatch"
    assert "r permission" in reading.error.message
    assert "Secret 'sas' key 'token'" in reading.error.message


# --------------------------------------------------------------------------------------------------------------
# Errors


async def test_a_wrong_account_key_is_rejected_with_authentication_failed(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    started = time.monotonic()
    reading = await poll_once(key_source(azurite, queue.queue_name), key_secrets(azurite, OTHER_KEY))
    assert reading.count is None
    assert reading.error is not None
    assert reading.error.code == "AuthenticationFailed"
    assert not reading.error.retryable
    assert reading.error.message.startswith(
        "the account key for 'devstoreaccount1' was rejected (AuthenticationFailed): "
        "check the Secret 'storage' key 'account-key'"
    )
    assert time.monotonic() - started < 2.0  # permanent: no retries


async def test_a_rotated_key_takes_effect_on_the_next_poll(azurite: Azurite) -> None:
    queue = new_queue(azurite)
    secrets = key_secrets(azurite, OTHER_KEY)
    async with http_client() as http:
        poller = AzureQueuePoller(key_source(azurite, queue.queue_name), SourceContext(http, secrets))
        assert (await poller.poll(5.0)).error is not None
        secrets.values[("storage", "account-key")] = azurite.key
        assert (await poller.poll(5.0)).count == 0
    assert secrets.reads == 2


async def test_a_missing_queue_is_queue_not_found(azurite: Azurite) -> None:
    name = unique_queue()
    reading = await poll_once(key_source(azurite, name), key_secrets(azurite))
    assert reading.error is not None
    assert reading.error.code == "QueueNotFound"
    assert reading.error.message.startswith(f"queue '{name}' not found in account 'devstoreaccount1'")
    assert not reading.error.retryable


async def test_an_invalid_queue_name_is_refused_with_its_code(azurite: Azurite) -> None:
    # The spec parser refuses such a name; built directly, the service's own answer must come through.
    reading = await poll_once(key_source(azurite, "Bad_Name"), key_secrets(azurite))
    assert reading.error is not None
    assert reading.error.code == "InvalidResourceName"
    assert "queue name 'Bad_Name' is not valid" in reading.error.message
    assert not reading.error.retryable


async def test_a_missing_secret_is_an_error_reading_with_the_resolver_code(azurite: Azurite) -> None:
    reading = await poll_once(key_source(azurite, unique_queue()), DictSecrets())
    assert reading.error is not None
    assert reading.error.code == "SecretNotFound"
    assert "Secret 'storage' key 'account-key'" in reading.error.message


async def test_a_key_that_is_not_base64_is_an_invalid_credential(azurite: Azurite) -> None:
    reading = await poll_once(key_source(azurite, unique_queue()), key_secrets(azurite, "not base64!"))
    assert reading.error is not None
    assert reading.error.code == "InvalidCredential"
    assert "not base64!" not in reading.error.message


async def test_an_outage_is_a_retryable_error_then_counts_again_once_azurite_is_back(own_azurite: Azurite) -> None:
    queue_name = new_queue(own_azurite).queue_name
    retry = RetryPolicy(request_timeout=0.5, first_delay=0.05, max_delay=0.2)
    spec = key_source(own_azurite, queue_name)
    secrets = key_secrets(own_azurite)
    async with http_client() as http:
        poller = AzureQueuePoller(spec, SourceContext(http, secrets), retry=retry)
        assert (await poller.poll(3.0)).count == 0

        own_azurite.stop()
        started = time.monotonic()
        down = await poller.poll(1.0)
        assert time.monotonic() - started <= 1.0
        assert down.error is not None
        assert down.error.code == "ConnectionFailed"
        assert down.error.retryable
        assert poller.attempts >= 2
        assert "gave up after" in down.error.message
        assert f"127.0.0.1:{own_azurite.port}" in down.error.message

        own_azurite.start()  # same port; in-memory, so the queue must be made again
        add_traffic(new_queue(own_azurite, queue_name), visible=2)
        back = await poller.poll(3.0)
        assert (back.count, back.error) == (2, None)
