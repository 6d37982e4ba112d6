"""Fixtures of the tests that drive the fake API server through the kubernetes client."""

from __future__ import annotations

import pytest
from kubernetes import client


@pytest.fixture
def apps(api: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api)


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)
