"""Fixtures of the tests that drive the fake API server through the kubernetes client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes import client

from controller.kube.api import KubeApi, load_configuration
from tests.fakekube import FakeKube
from tests.operator_harness import NS


@pytest.fixture
def apps(api: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api)


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
async def kube_api(fake_kube: FakeKube, kubeconfig: Path) -> AsyncIterator[KubeApi]:
    """Our own client on the fake API server, with the test namespace there."""
    fake_kube.ensure_namespace(NS)
    api = KubeApi(await load_configuration(str(kubeconfig)))
    try:
        yield api
    finally:
        await api.close()
