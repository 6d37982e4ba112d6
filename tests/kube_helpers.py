"""Helpers shared by tests of several folders that drive the fake API server."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client as kube_client
from kubernetes.client.rest import ApiException

from controller.model.rule import API_GROUP, API_VERSION


def not_served(api: kube_client.ApiClient) -> bool:
    """Whether listing QueueScalers answers 404, as it does once their CRD is gone."""
    try:
        custom(api).list_cluster_custom_object(API_GROUP, API_VERSION, "queuescalers")
    except kube_client.ApiException as error:
        return bool(error.status == 404)
    return False


def deployment(name: str = "worker", replicas: int = 2, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "main", "image": "worker:1"}]}}},
    }


def custom(api: kube_client.ApiClient) -> kube_client.CustomObjectsApi:
    return kube_client.CustomObjectsApi(api)


def status_of(error: ApiException) -> dict[str, Any]:
    body = json.loads(error.body)
    assert isinstance(body, dict)
    return body
