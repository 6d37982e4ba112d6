"""The operator's writes and Secret reads through KubeApi (controller/kube/status.py, events.py, secrets.py),
against the fake API server: what lands on the server is what the report built."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml

from controller.kube.api import KubeApi
from controller.kube.errors import KubeError
from controller.kube.events import EventRecorder, ObjectRef, event_sender
from controller.kube.secrets import secret_reader
from controller.kube.status import write_status
from controller.model.rule import KIND
from tests.fakekube import FakeKube
from tests.operator_harness import ROOT, RULES_API

NS = "shop"


def orders_rule(fake_kube: FakeKube) -> None:
    fake_kube.create(yaml.safe_load((ROOT / "manifests" / "crd.yaml").read_text()))
    fake_kube.create({"apiVersion": RULES_API, "kind": KIND, "metadata": {"name": "orders", "namespace": NS},
                      "spec": {"scaleTargetRef": {"name": "orders"}, "maxReplicas": 3,
                               "sources": [{"type": "azure-queue", "queueName": "orders",
                                            "connectionSecretRef": {"name": "s", "key": "k"}}]}})


def status_of(fake_kube: FakeKube) -> dict[str, Any]:
    return dict(fake_kube.get(RULES_API, KIND, "orders", NS).get("status") or {})


async def test_a_status_write_removes_what_the_new_status_no_longer_says(fake_kube: FakeKube,
                                                                         kube_api: KubeApi) -> None:
    orders_rule(fake_kube)
    first = {"queueLength": 5, "desiredReplicas": 1}
    await write_status(kube_api, NS, "orders", first, None)
    assert status_of(fake_kube) == first
    # A merge patch keeps every key it does not name: without the null, queueLength would stay for ever.
    await write_status(kube_api, NS, "orders", {"desiredReplicas": 2}, first)
    assert status_of(fake_kube) == {"desiredReplicas": 2}
    assert fake_kube.requests[-1].method == "PATCH" and fake_kube.requests[-1].path.endswith("/orders/status")


async def test_a_status_write_is_retried_a_little_then_raises(fake_kube: FakeKube, kube_api: KubeApi) -> None:
    orders_rule(fake_kube)
    fake_kube.add_fault(method="PATCH", path="/status$", status=500, times=2)
    await write_status(kube_api, NS, "orders", {"desiredReplicas": 1}, None)
    assert status_of(fake_kube) == {"desiredReplicas": 1}
    fake_kube.add_fault(method="PATCH", path="/status$", status=500, times=3)
    with pytest.raises(KubeError) as failed:
        await write_status(kube_api, NS, "orders", {"desiredReplicas": 2}, None)
    assert failed.value.status == 500 and status_of(fake_kube) == {"desiredReplicas": 1}


async def test_events_are_created_in_the_rules_namespace(fake_kube: FakeKube, kube_api: KubeApi) -> None:
    recorder = EventRecorder(event_sender(kube_api), "replica-a")
    ref = ObjectRef(RULES_API, KIND, "orders", NS, "uid-1")
    assert await recorder.record(ref, "Warning", "QueueNotFound", "queue 'orders' not found", 1_800_000_000.0)
    (event,) = fake_kube.events(NS)
    assert (event["reason"], event["involvedObject"]["name"], event["reportingInstance"]) == (
        "QueueNotFound", "orders", "replica-a")


async def test_a_secret_is_read_by_name_and_its_absence_is_a_404(fake_kube: FakeKube, kube_api: KubeApi) -> None:
    fake_kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "azure", "namespace": NS},
                      "data": {"k": base64.b64encode(b"text").decode()}})
    read = secret_reader(kube_api)
    assert (await read(NS, "azure"))["data"] == {"k": base64.b64encode(b"text").decode()}
    assert fake_kube.requests[-1].path == f"/api/v1/namespaces/{NS}/secrets/azure"
    with pytest.raises(KubeError) as missing:
        await read(NS, "nope")
    assert missing.value.status == 404
