"""Poller behaviour that needs no server: secrets that hang or break, back-off steps, check's secret lookup, the
requests a poll sends and whose clock the oldest message's age is read on."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import email.utils
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import pytest

from controller.commands.check import NamespaceSecrets, SecretStore, secret_env_name
from controller.model.fields import SecretKeyRef
from controller.model.secrets import SecretUnavailable
from controller.model.sources.azure_queue import AzureQueueSource
from controller.net.http import Answer
from controller.sources.azure_queue import API_VERSION, AzureQueuePoller
from controller.sources.base import SourceContext
from controller.sources.retries import RetryPolicy
from tests.azure_answers import peek_body
from tests.helpers import DictSecrets, poll_once, timed_poll

Cloud = Literal["public", "china", "usgov"]
SPEC = AzureQueueSource(type="azure-queue", queue_name="orders", account_name="acme",
                        account_key_secret_ref=SecretKeyRef("storage", "account-key"))
KEY = DictSecrets({("storage", "account-key"): base64.b64encode(b"k" * 32).decode()})
SERVICE_NOW = 1_790_000_000.0
COUNT_3 = Answer(200, {"x-ms-approximate-messages-count": "3"}, b"")
PEEKED_42S_BEFORE_ITS_DATE = Answer(200, {"Date": email.utils.formatdate(SERVICE_NOW, usegmt=True)},
                                    peek_body(SERVICE_NOW - 42))


@dataclass(frozen=True)
class Sent:
    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes | None


class RecordingFetch:
    """A stand-in for the HTTP client (the sources take any object with its `fetch`): records each request and
    gives `answer`, or `peek_answer` to Peek Messages."""

    def __init__(self, answer: Answer, peek_answer: Answer | None = None) -> None:
        self.answer = answer
        self.peek_answer = peek_answer or answer
        self.requests: list[Sent] = []

    async def fetch(self, method: str, url: str, *, headers: Mapping[str, str] | None = None,
                    body: bytes | None = None, timeout: float | None = None) -> Answer:
        self.requests.append(Sent(method, url, dict(headers or {}), body))
        return self.peek_answer if "/messages?" in url else self.answer


class HangingSecrets:
    async def __call__(self, name: str, key: str) -> str:
        await asyncio.sleep(30)
        return f"{name}/{key}"


class BrokenSecrets:
    async def __call__(self, name: str, key: str) -> str:
        raise RuntimeError(f"boom with the value topsecret for {name}/{key}")


async def test_a_secret_read_that_hangs_ends_within_the_budget() -> None:
    reading, elapsed = await timed_poll(SPEC, HangingSecrets(), budget=0.5)
    assert elapsed <= 0.5
    assert reading.error is not None
    assert reading.error.code == "Timeout"


async def test_a_resolver_bug_is_an_internal_error_reading_not_an_exception() -> None:
    reading = await poll_once(SPEC, BrokenSecrets())
    assert reading.error is not None
    assert reading.error.code == "InternalError"
    assert "topsecret" not in reading.error.message


def test_back_off_doubles_with_jitter_up_to_the_cap() -> None:
    policy = RetryPolicy(first_delay=0.1, max_delay=0.5)
    rng = random.Random(7)
    for retry, step in [(0, 0.1), (1, 0.2), (2, 0.4), (3, 0.5), (9, 0.5)]:
        delays = [policy.delay(retry, rng) for _ in range(200)]
        assert min(delays) >= step / 2
        assert max(delays) <= step
        assert max(delays) - min(delays) > step / 4  # jittered, not fixed


def test_env_names_uppercase_and_replace_other_characters() -> None:
    assert secret_env_name("orders-queue", "connection-string") == "QUEUESCALE_SECRET_ORDERS_QUEUE_CONNECTION_STRING"
    assert secret_env_name("a.b", "key_1") == "QUEUESCALE_SECRET_A_B_KEY_1"


async def test_check_secrets_prefer_the_rules_namespace_then_unnamespaced_then_env() -> None:
    store = SecretStore(environ={"QUEUESCALE_SECRET_S_FROM_ENV": "env-value", "QUEUESCALE_SECRET_S_K": "env-k"})
    store.add_manifests([
        ("f", {"kind": "Secret", "metadata": {"name": "s", "namespace": "shop"}, "data": {"k": "c2hvcA=="},
               "stringData": {"plain": "text"}}),
        ("f", {"kind": "Secret", "metadata": {"name": "s"}, "stringData": {"k": "anywhere"}}),
        ("f", {"kind": "ConfigMap", "metadata": {"name": "s"}, "data": {"k": "ignored"}}),
    ])
    shop, media = NamespaceSecrets(store, "shop"), NamespaceSecrets(store, "media")
    assert await shop("s", "k") == "shop"
    assert await shop("s", "plain") == "text"
    assert await media("s", "k") == "anywhere"
    assert await media("s", "from-env") == "env-value"
    with pytest.raises(SecretUnavailable) as missing_key:
        await shop("s", "nope")
    assert missing_key.value.code == "KeyNotFound"
    with pytest.raises(SecretUnavailable) as missing_secret:
        await shop("other", "k")
    assert missing_secret.value.code == "SecretNotFound"
    assert "QUEUESCALE_SECRET_OTHER_K" in missing_secret.value.message


def test_string_data_wins_over_data() -> None:
    store = SecretStore()
    store.add_manifests([("f", {"kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "ZGF0YQ=="},
                                "stringData": {"k": "string"}})])
    assert store.secrets[(None, "s")] == {"k": "string"}


@pytest.mark.parametrize(
    ("cloud", "host"),
    [
        ("public", "acme.queue.core.windows.net"),
        ("china", "acme.queue.core.chinacloudapi.cn"),
        ("usgov", "acme.queue.core.usgovcloudapi.net"),
    ],
)
async def test_the_cloud_picks_the_endpoint_and_the_request_is_signed(cloud: Cloud, host: str) -> None:
    fetcher = RecordingFetch(COUNT_3, PEEKED_42S_BEFORE_ITS_DATE)
    spec = dataclasses.replace(SPEC, cloud=cloud)
    reading = await AzureQueuePoller(spec, SourceContext(fetcher, KEY)).poll(5.0)
    assert (reading.count, reading.oldest_age) == (3, 42.0)
    count, peek = fetcher.requests
    assert count.url == f"https://{host}/orders?comp=metadata"
    assert peek.url == f"https://{host}/orders/messages?peekonly=true&numofmessages=1"
    for request in (count, peek):
        assert request.method == "GET"
        assert request.headers["Authorization"].startswith("SharedKey acme:")
        assert request.headers["x-ms-version"] == API_VERSION
        assert request.headers["x-ms-date"].endswith(" GMT")
        assert request.body is None
    assert count.headers["Authorization"] != peek.headers["Authorization"]  # each signs its own path and query


async def test_the_age_is_read_on_the_services_clock_not_ours() -> None:
    # Our clock is a day ahead of the service's: the age still comes from the answer's Date.
    context = SourceContext(RecordingFetch(COUNT_3, PEEKED_42S_BEFORE_ITS_DATE), KEY, now=lambda: SERVICE_NOW + 86400)
    reading = await AzureQueuePoller(SPEC, context).poll(5.0)
    assert (reading.count, reading.oldest_age, reading.note) == (3, 42.0, "")


async def test_without_a_date_the_age_is_read_on_our_clock_and_never_below_zero() -> None:
    undated = Answer(200, {}, peek_body(SERVICE_NOW - 42))
    ours = [SERVICE_NOW + 8.5]
    context = SourceContext(RecordingFetch(COUNT_3, undated), KEY, now=lambda: ours[0])
    poller = AzureQueuePoller(SPEC, context)
    assert (await poller.poll(5.0)).oldest_age == 50.5
    ours[0] = SERVICE_NOW - 100  # our clock behind the service's: a message cannot have waited less than nothing
    assert (await poller.poll(5.0)).oldest_age == 0.0


async def test_oldest_age_off_makes_the_count_call_alone() -> None:
    fetcher = RecordingFetch(COUNT_3, PEEKED_42S_BEFORE_ITS_DATE)
    reading = await AzureQueuePoller(dataclasses.replace(SPEC, oldest_age="off"), SourceContext(fetcher, KEY)).poll(5.0)
    assert (reading.count, reading.oldest_age, reading.note) == (3, None, "")
    assert [request.url for request in fetcher.requests] == ["https://acme.queue.core.windows.net/orders?comp=metadata"]


async def test_a_peeked_message_without_a_readable_insertion_time_leaves_the_count_and_says_so() -> None:
    body = re.sub(rb"<InsertionTime>[^<]*</InsertionTime>", b"<InsertionTime>yesterday</InsertionTime>",
                  peek_body(SERVICE_NOW))
    unreadable = Answer(200, {}, body)
    reading = await AzureQueuePoller(SPEC, SourceContext(RecordingFetch(COUNT_3, unreadable), KEY)).poll(5.0)
    assert (reading.count, reading.error, reading.oldest_age) == (3, None, None)
    assert reading.note == ("oldest message's age unknown: Peek Messages on queue 'orders' in account 'acme' answered "
                            "without a readable InsertionTime (InvalidResponse)")
