"""Shared fixtures: a real Azurite (tests/azurite.py), real Redis, PostgreSQL and RabbitMQ (tests/servers.py),
and the fake API server reached by the official client."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.aio import client as aio_client
from kubernetes.aio import config as aio_config

from tests.azurite import azurite, own_azurite
from tests.fakekube import FakeKube
from tests.faults import queues
from tests.operator_harness import kube, operators
from tests.servers import postgres_server, rabbitmq_server, redis_server
from tests.stop_on_term import pytest_configure, pytest_runtest_setup

__all__ = [
    "azurite", "kube", "operators", "own_azurite", "postgres_server", "pytest_configure", "pytest_runtest_setup",
    "queues", "rabbitmq_server", "redis_server",
]


def _server_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate()
            if t.name.startswith("fakekube") or "process_request_thread" in t.name]


@pytest.fixture
def fake_kube() -> Iterator[FakeKube]:
    """A fake API server on 127.0.0.1 (a thread), stopped after the test with every thread it started."""
    before = set(_server_threads())
    fake = FakeKube(bookmark_interval=0.2).start()
    try:
        yield fake
    finally:
        fake.stop()
    leaked = [t.name for t in _server_threads() if t not in before and t.is_alive()]
    assert not leaked, f"the fake API server left threads running: {leaked}"


@pytest.fixture
def kubeconfig(fake_kube: FakeKube, tmp_path: Path) -> Path:
    return fake_kube.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def api(kubeconfig: Path) -> Iterator[client.ApiClient]:
    """The official sync client, configured from the kubeconfig the fake wrote."""
    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        yield api_client
    finally:
        api_client.close()


@pytest.fixture
async def aio_api(kubeconfig: Path) -> AsyncIterator[aio_client.ApiClient]:
    """The official asyncio client (`kubernetes.aio`), configured from the same kubeconfig."""
    configuration = aio_client.Configuration()
    await aio_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    api_client = aio_client.ApiClient(configuration=configuration)
    try:
        yield api_client
    finally:
        await api_client.close()
