"""Small helpers shared by the azure-queue tests: secrets in a dict, queues with known traffic, one poll, a rule file."""

from __future__ import annotations

import base64
import datetime as dt
import time
import uuid
from collections.abc import Mapping
from typing import Any

from azure.storage.queue import QueueClient, QueueServiceClient

from controller.model.fields import SecretKeyRef
from controller.model.readings import SourceReading
from controller.model.secrets import SecretResolver, SecretUnavailable
from controller.model.sources.azure_queue import AzureQueueSource
from controller.sources.azure_queue import AzureQueuePoller
from controller.sources.base import SourceContext
from controller.sources.retries import RetryPolicy
from tests.azurite import Azurite
from tests.transports import http_client

WRONG_KEY = base64.b64encode(b"this is not the account key at all, sorry!").decode()  # an account key that fails


class DictSecrets:
    """A SecretResolver over `{(name, key): value}`; counts reads so tests can see secrets are re-read."""

    def __init__(self, values: Mapping[tuple[str, str], str] | None = None) -> None:
        self.values = dict(values or {})
        self.reads = 0

    async def __call__(self, name: str, key: str) -> str:
        self.reads += 1
        if (name, key) not in self.values:
            raise SecretUnavailable("SecretNotFound", f"Secret '{name}' key '{key}' not found")
        return self.values[(name, key)]


def unique_queue() -> str:
    return f"q-{uuid.uuid4().hex[:16]}"


def in_one_hour() -> dt.datetime:
    return dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)


def new_queue(azurite: Azurite, name: str | None = None) -> QueueClient:
    service = QueueServiceClient.from_connection_string(azurite.connection_string)
    client: QueueClient = service.create_queue(name or unique_queue())
    return client


def add_traffic(queue: QueueClient, *, visible: int = 0, dequeued: int = 0, delayed: int = 0) -> None:
    """`visible` + `dequeued` messages put, `dequeued` of them received (invisible for 5 min), `delayed` put hidden."""
    for index in range(visible + dequeued):
        queue.send_message(f"message {index}")
    if dequeued:
        received = list(queue.receive_messages(messages_per_page=dequeued, max_messages=dequeued,
                                               visibility_timeout=300))
        assert len(received) == dequeued
    for index in range(delayed):
        queue.send_message(f"delayed {index}", visibility_timeout=300)


def key_source(azurite: Azurite, queue: str, **fields: Any) -> AzureQueueSource:
    return AzureQueueSource(
        type="azure-queue", queue_name=queue, account_name=azurite.account, endpoint=azurite.endpoint,
        account_key_secret_ref=SecretKeyRef("storage", "account-key"), **fields,
    )


def key_secrets(azurite: Azurite, key: str | None = None) -> DictSecrets:
    return DictSecrets({("storage", "account-key"): key or azurite.key})


async def timed_poll(
    spec: AzureQueueSource, secrets: SecretResolver, *, budget: float, retry: RetryPolicy | None = None
) -> tuple[SourceReading, float]:
    """One poll and how long the poll alone took (not the client's setup and teardown)."""
    async with http_client() as http:
        poller = AzureQueuePoller(spec, SourceContext(http=http, secrets=secrets), retry=retry)
        started = time.monotonic()
        reading = await poller.poll(budget)
        return reading, time.monotonic() - started


async def poll_once(
    spec: AzureQueueSource,
    secrets: SecretResolver,
    *,
    budget: float = 5.0,
    retry: RetryPolicy | None = None,
    environ: Mapping[str, str] | None = None,
) -> SourceReading:
    async with http_client() as http:
        poller = AzureQueuePoller(spec, SourceContext(http=http, secrets=secrets), retry=retry, environ=environ)
        return await poller.poll(budget)


def rule_yaml(azurite: Azurite, queue: str) -> str:
    """A rule file for `queuescale record` and `check`: one rule polling `queue` on Azurite every second, and the
    Secret with the account key it reads."""
    return f"""
apiVersion: queuescale.io/v1alpha1
kind: QueueScaler
metadata: {{name: orders-worker, namespace: shop}}
spec:
  scaleTargetRef: {{name: orders-worker}}
  maxReplicas: 12
  pollingInterval: 1s
  sources:
    - type: azure-queue
      queueName: {queue}
      accountName: {azurite.account}
      endpoint: {azurite.endpoint}
      accountKeySecretRef: {{name: storage, key: account-key}}
---
apiVersion: v1
kind: Secret
metadata: {{name: storage, namespace: shop}}
data:
  account-key: {base64.b64encode(azurite.key.encode()).decode()}
"""
