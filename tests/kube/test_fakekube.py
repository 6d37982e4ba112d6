"""The fake API server keeps the kube-apiserver semantics the operator relies on, seen through the official client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.aio import client as aio_client
from kubernetes.client.rest import ApiException

from tests.fakekube import FakeKube, Fault
from tests.fakekube.server import TOKEN
from tests.fakekube.tls import client_context_from_kubeconfig
from tests.kube_helpers import deployment, status_of

GROUP, VERSION, PLURAL = "queuescale.io", "v1alpha1", "queuescalers"
MERGE = "application/merge-patch+json"




def queuescaler(name: str = "orders", max_replicas: int = 10) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "QueueScaler", "metadata": {"name": name},
        "spec": {"scaleTargetRef": {"name": "worker"}, "maxReplicas": max_replicas,
                 "sources": [{"type": "azure-queue", "queueName": "orders", "identity": "workload",
                              "accountName": "store"}]},
    }


# The QueueScaler kind without a schema, so these tests see the registry's rules and nothing of the CRD's validation.
QUEUESCALER_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {"group": GROUP, "scope": "Namespaced",
             "names": {"plural": PLURAL, "singular": "queuescaler", "kind": "QueueScaler", "shortNames": ["qs"]},
             "versions": [{"name": VERSION, "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
}


@pytest.fixture(autouse=True)
def queuescaler_kind(request: pytest.FixtureRequest) -> None:
    """A kind is served only once its CRD exists: install the schemaless one wherever a test has a fake server."""
    if "fake_kube" in request.fixturenames:
        request.getfixturevalue("fake_kube").create(QUEUESCALER_CRD)


def admin_request(url: str) -> urllib.request.Request:
    return urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})


def test_a_request_without_credentials_is_401(fake_kube: FakeKube) -> None:
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{fake_kube.url}/api/v1/namespaces/default/secrets", timeout=5,
                               context=fake_kube.client_ssl_context())
    assert caught.value.code == 401
    caught.value.close()


@pytest.fixture
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


# ----------------------------------------------------------------------------------------------------------------
# Create, read, update, delete


def test_create_sets_uid_timestamp_generation_and_resource_version(apps: client.AppsV1Api) -> None:
    created = apps.create_namespaced_deployment("default", deployment())
    assert created.metadata.uid
    assert created.metadata.creation_timestamp is not None
    assert created.metadata.generation == 1
    assert int(created.metadata.resource_version) > 0


def test_every_write_takes_a_new_resource_version_from_one_counter(core: client.CoreV1Api,
                                                                   apps: client.AppsV1Api) -> None:
    secret = core.create_namespaced_secret("default", {"metadata": {"name": "s"}, "stringData": {"k": "v"}})
    created = apps.create_namespaced_deployment("default", deployment())
    assert int(created.metadata.resource_version) > int(secret.metadata.resource_version)


def test_create_of_an_existing_name_is_409_already_exists(apps: client.AppsV1Api) -> None:
    apps.create_namespaced_deployment("default", deployment())
    with pytest.raises(ApiException) as caught:
        apps.create_namespaced_deployment("default", deployment())
    assert caught.value.status == 409
    body = status_of(caught.value)
    assert body["reason"] == "AlreadyExists"
    assert body["message"] == 'deployments.apps "worker" already exists'
    assert body["details"] == {"name": "worker", "group": "apps", "kind": "deployments"}


def test_read_of_a_missing_object_is_404_with_a_status_body(apps: client.AppsV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        apps.read_namespaced_deployment("nope", "default")
    assert caught.value.status == 404
    body = status_of(caught.value)
    assert body["kind"] == "Status"
    assert body["status"] == "Failure"
    assert body["reason"] == "NotFound"
    assert body["code"] == 404
    assert body["message"] == 'deployments.apps "nope" not found'


def test_create_in_a_missing_namespace_is_404(apps: client.AppsV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        apps.create_namespaced_deployment("ghost", deployment())
    assert caught.value.status == 404
    assert status_of(caught.value)["message"] == 'namespaces "ghost" not found'


def test_update_with_a_stale_resource_version_is_409_conflict(apps: client.AppsV1Api) -> None:
    first = apps.create_namespaced_deployment("default", deployment())
    fresh = apps.read_namespaced_deployment("worker", "default")
    fresh.spec.replicas = 3
    apps.replace_namespaced_deployment("worker", "default", fresh)
    first.spec.replicas = 4
    with pytest.raises(ApiException) as caught:
        apps.replace_namespaced_deployment("worker", "default", first)
    assert caught.value.status == 409
    body = status_of(caught.value)
    assert body["reason"] == "Conflict"
    assert "the object has been modified" in body["message"]
    assert apps.read_namespaced_deployment("worker", "default").spec.replicas == 3


def test_update_without_a_resource_version_is_unconditional(custom: client.CustomObjectsApi) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, queuescaler())
    custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "orders", {"spec": {"maxReplicas": 3}})
    body = queuescaler(max_replicas=7)
    updated = custom.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "orders", body)
    assert updated["spec"]["maxReplicas"] == 7


def test_update_of_a_missing_object_is_404(custom: client.CustomObjectsApi) -> None:
    with pytest.raises(ApiException) as caught:
        custom.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "orders", queuescaler())
    assert caught.value.status == 404
    assert status_of(caught.value)["message"] == 'queuescalers.queuescale.io "orders" not found'


def test_delete_with_a_stale_precondition_is_409_and_then_deletes(core: client.CoreV1Api) -> None:
    secret = core.create_namespaced_secret("default", {"metadata": {"name": "s"}})
    core.patch_namespaced_secret("s", "default", {"metadata": {"labels": {"a": "b"}}},
                                 _content_type=MERGE)
    stale = client.V1DeleteOptions(preconditions=client.V1Preconditions(
        resource_version=secret.metadata.resource_version))
    with pytest.raises(ApiException) as caught:
        core.delete_namespaced_secret("s", "default", body=stale)
    assert caught.value.status == 409
    core.delete_namespaced_secret("s", "default")
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_secret("s", "default")
    assert gone.value.status == 404


# ----------------------------------------------------------------------------------------------------------------
# Generation and the status subresource


def test_generation_bumps_on_spec_changes_only(custom: client.CustomObjectsApi) -> None:
    created = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, queuescaler())
    assert created["metadata"]["generation"] == 1

    labelled = custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "orders",
                                                     {"metadata": {"labels": {"team": "shop"}}})
    assert labelled["metadata"]["generation"] == 1
    assert labelled["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]

    with_status = custom.patch_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL, "orders",
                                                               {"status": {"desiredReplicas": 3}})
    assert with_status["metadata"]["generation"] == 1

    respecced = custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "orders",
                                                      {"spec": {"maxReplicas": 20}})
    assert respecced["metadata"]["generation"] == 2


def test_a_no_op_write_keeps_the_resource_version(custom: client.CustomObjectsApi) -> None:
    created = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, queuescaler())
    same = custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "orders",
                                                 {"spec": {"maxReplicas": 10}})
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_status_subresource_changes_only_status(custom: client.CustomObjectsApi) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, queuescaler())
    patch = {"spec": {"maxReplicas": 99}, "metadata": {"labels": {"x": "y"}}, "status": {"desiredReplicas": 4}}
    written = custom.patch_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL, "orders", patch)
    assert written["status"] == {"desiredReplicas": 4}
    assert written["spec"]["maxReplicas"] == 10
    assert "labels" not in written["metadata"]


def test_main_resource_ignores_status(custom: client.CustomObjectsApi) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, queuescaler())
    custom.patch_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL, "orders",
                                                 {"status": {"desiredReplicas": 4}})
    written = custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "orders",
                                                    {"status": {"desiredReplicas": 9}})
    assert written["status"] == {"desiredReplicas": 4}


def test_create_drops_status(custom: client.CustomObjectsApi) -> None:
    body = queuescaler() | {"status": {"desiredReplicas": 4}}
    created = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)
    assert "status" not in created


def test_status_put_with_a_stale_resource_version_is_409(custom: client.CustomObjectsApi) -> None:
    created = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, queuescaler())
    custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "orders", {"spec": {"maxReplicas": 2}})
    stale = created | {"status": {"desiredReplicas": 1}}
    with pytest.raises(ApiException) as caught:
        custom.replace_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL, "orders", stale)
    assert caught.value.status == 409


# ----------------------------------------------------------------------------------------------------------------
# The scale subresource and the workload controller


def test_scale_subresource_reads_spec_and_status_replicas(apps: client.AppsV1Api) -> None:
    apps.create_namespaced_deployment("default", deployment(replicas=2))
    scale = apps.read_namespaced_deployment_scale("worker", "default")
    assert scale.kind == "Scale"
    assert scale.api_version == "autoscaling/v1"
    assert scale.spec.replicas == 2
    assert scale.status.replicas == 2
    assert scale.status.selector == "app=worker"


def test_scale_write_sets_replicas_and_bumps_generation(apps: client.AppsV1Api) -> None:
    apps.create_namespaced_deployment("default", deployment(replicas=2))
    scale = apps.read_namespaced_deployment_scale("worker", "default")
    scale.spec.replicas = 6
    written = apps.replace_namespaced_deployment_scale("worker", "default", scale)
    assert written.spec.replicas == 6
    after = apps.read_namespaced_deployment("worker", "default")
    assert after.spec.replicas == 6
    assert after.metadata.generation == 2


def test_scale_write_with_a_stale_resource_version_is_409(apps: client.AppsV1Api) -> None:
    apps.create_namespaced_deployment("default", deployment(replicas=2))
    scale = apps.read_namespaced_deployment_scale("worker", "default")
    apps.patch_namespaced_deployment_scale("worker", "default", {"spec": {"replicas": 3}}, _content_type=MERGE)
    scale.spec.replicas = 9
    with pytest.raises(ApiException) as caught:
        apps.replace_namespaced_deployment_scale("worker", "default", scale)
    assert caught.value.status == 409
    assert apps.read_namespaced_deployment_scale("worker", "default").spec.replicas == 3


def test_scale_of_a_missing_deployment_is_404(apps: client.AppsV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        apps.read_namespaced_deployment_scale("nope", "default")
    assert caught.value.status == 404


def test_statefulset_has_a_scale_subresource_too(apps: client.AppsV1Api) -> None:
    body = deployment("db") | {"kind": "StatefulSet"}
    apps.create_namespaced_stateful_set("default", body)
    apps.patch_namespaced_stateful_set_scale("db", "default", {"spec": {"replicas": 5}}, _content_type=MERGE)
    assert apps.read_namespaced_stateful_set("db", "default").spec.replicas == 5


def test_deployment_status_follows_replicas_at_once_by_default(apps: client.AppsV1Api) -> None:
    apps.create_namespaced_deployment("default", deployment(replicas=3))
    status = apps.read_namespaced_deployment_status("worker", "default").status
    assert (status.replicas, status.ready_replicas, status.observed_generation) == (3, 3, 1)


def test_deployment_status_follows_replicas_after_the_ready_delay(fake_kube: FakeKube,
                                                                   apps: client.AppsV1Api) -> None:
    fake_kube.set_ready_delay(0.3)
    apps.create_namespaced_deployment("default", deployment(replicas=3))
    assert apps.read_namespaced_deployment("worker", "default").status is None
    wait_for(lambda: apps.read_namespaced_deployment("worker", "default").status is not None)
    assert apps.read_namespaced_deployment("worker", "default").status.ready_replicas == 3


def test_scaled_to_zero_reports_no_ready_replicas(apps: client.AppsV1Api) -> None:
    apps.create_namespaced_deployment("default", deployment(replicas=3))
    apps.patch_namespaced_deployment_scale("worker", "default", {"spec": {"replicas": 0}}, _content_type=MERGE)
    status = apps.read_namespaced_deployment("worker", "default").status
    assert status.replicas == 0
    assert status.ready_replicas is None


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


# ----------------------------------------------------------------------------------------------------------------
# Patches


def test_merge_patch_deletes_nulls_and_replaces_lists(apps: client.AppsV1Api) -> None:
    apps.create_namespaced_deployment("default", deployment(labels={"app": "worker", "tier": "back"}))
    patch = {"metadata": {"labels": {"tier": None}},
             "spec": {"template": {"spec": {"containers": [{"name": "side", "image": "side:1"}]}}}}
    patched = apps.patch_namespaced_deployment("worker", "default", patch, _content_type=MERGE)
    assert patched.metadata.labels == {"app": "worker"}
    assert [c.name for c in patched.spec.template.spec.containers] == ["side"]


def test_strategic_merge_patch_merges_containers_by_name(apps: client.AppsV1Api) -> None:
    apps.create_namespaced_deployment("default", deployment())
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "side", "image": "side:1"}]}}}}
    patched = apps.patch_namespaced_deployment("worker", "default", patch,
                                               _content_type="application/strategic-merge-patch+json")
    assert [c.name for c in patched.spec.template.spec.containers] == ["main", "side"]


def test_strategic_merge_patch_orders_a_list_as_set_element_order_says(apps: client.AppsV1Api) -> None:
    # What `kubectl set image` sends: the changed container and the order of the whole list. Before, the directive
    # was refused ("unknown strategic merge patch directive $setElementOrder/containers") and set image failed.
    apps.create_namespaced_deployment("default", deployment())
    apps.patch_namespaced_deployment("worker", "default", {"spec": {"template": {"spec": {"containers": [
        {"name": "side", "image": "side:1"}]}}}}, _content_type="application/strategic-merge-patch+json")
    patch = {"spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "side"}, {"name": "main"}],
                                            "containers": [{"name": "side", "image": "side:2"}]}}}}
    patched = apps.patch_namespaced_deployment("worker", "default", patch,
                                               _content_type="application/strategic-merge-patch+json")
    assert [(c.name, c.image) for c in patched.spec.template.spec.containers] == [("side", "side:2"),
                                                                                  ("main", "worker:1")]


def test_json_patch_applies_operations(apps: client.AppsV1Api) -> None:
    apps.create_namespaced_deployment("default", deployment())
    ops = [{"op": "test", "path": "/spec/replicas", "value": 2}, {"op": "replace", "path": "/spec/replicas",
                                                                    "value": 4}]
    assert apps.patch_namespaced_deployment("worker", "default", ops).spec.replicas == 4
    with pytest.raises(ApiException) as caught:
        apps.patch_namespaced_deployment("worker", "default", ops)
    assert caught.value.status == 422


def test_typed_clients_send_a_dict_patch_as_strategic_merge_unless_told(fake_kube: FakeKube,
                                                                        apps: client.AppsV1Api) -> None:
    apps.create_namespaced_deployment("default", deployment())
    apps.patch_namespaced_deployment("worker", "default", {"spec": {"replicas": 3}})
    assert fake_kube.requests[-1].content_type == "application/strategic-merge-patch+json"
    apps.patch_namespaced_deployment("worker", "default", {"spec": {"replicas": 4}}, _content_type=MERGE)
    assert fake_kube.requests[-1].content_type == MERGE


def test_strategic_merge_patch_on_a_custom_resource_is_415(custom: client.CustomObjectsApi) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, queuescaler())
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "orders", {"spec": {}},
                                              _content_type="application/strategic-merge-patch+json")
    assert caught.value.status == 415
    assert status_of(caught.value)["reason"] == "UnsupportedMediaType"


def test_patch_carrying_a_stale_resource_version_is_409(custom: client.CustomObjectsApi) -> None:
    created = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, queuescaler())
    custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "orders", {"spec": {"maxReplicas": 2}})
    patch = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}, "status": {"a": 1}}
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL, "orders", patch)
    assert caught.value.status == 409


# ----------------------------------------------------------------------------------------------------------------
# Lists and selectors


def test_list_carries_the_current_resource_version(apps: client.AppsV1Api) -> None:
    created = apps.create_namespaced_deployment("default", deployment())
    listed = apps.list_namespaced_deployment("default")
    assert [d.metadata.name for d in listed.items] == ["worker"]
    # The controller wrote status after the create, so the list is newer than the created object.
    assert int(listed.metadata.resource_version) > int(created.metadata.resource_version)


@pytest.mark.parametrize(("selector", "expected"), [
    ("tier=back", ["a", "b"]),
    ("tier==back,app=a", ["a"]),
    ("tier!=back", ["c"]),
    ("app in (a, c)", ["a", "c"]),
    ("app notin (a)", ["b", "c"]),
    ("tier", ["a", "b"]),
    ("!tier", ["c"]),
])
def test_label_selectors(apps: client.AppsV1Api, selector: str, expected: list[str]) -> None:
    for name, labels in (("a", {"app": "a", "tier": "back"}), ("b", {"app": "b", "tier": "back"}),
                         ("c", {"app": "c"})):
        apps.create_namespaced_deployment("default", deployment(name, labels=labels))
    listed = apps.list_namespaced_deployment("default", label_selector=selector)
    assert [d.metadata.name for d in listed.items] == expected


def test_field_selector_and_all_namespaces(fake_kube: FakeKube, core: client.CoreV1Api) -> None:
    fake_kube.ensure_namespace("shop")
    core.create_namespaced_secret("default", {"metadata": {"name": "one"}})
    core.create_namespaced_secret("shop", {"metadata": {"name": "one"}})
    core.create_namespaced_secret("shop", {"metadata": {"name": "two"}})
    everywhere = core.list_secret_for_all_namespaces(field_selector="metadata.name=one")
    assert sorted(s.metadata.namespace for s in everywhere.items) == ["default", "shop"]
    with pytest.raises(ApiException) as caught:
        core.list_secret_for_all_namespaces(field_selector="spec.nope=1")
    assert caught.value.status == 400


# ----------------------------------------------------------------------------------------------------------------
# Watches


def collect(stream: Iterator[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    events = []
    for event in stream:
        events.append(event)
        if len(events) == count:
            break
    return events


def test_watch_replays_the_events_after_a_resource_version(custom: client.CustomObjectsApi) -> None:
    created = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, queuescaler())
    custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "orders", {"spec": {"maxReplicas": 2}})
    custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "orders")
    stream = watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL,
                                  resource_version=created["metadata"]["resourceVersion"], timeout_seconds=1)
    events = list(stream)
    assert [(e["type"], e["object"]["spec"]["maxReplicas"]) for e in events] == [("MODIFIED", 2), ("DELETED", 2)]


def test_watch_without_a_resource_version_starts_with_the_current_objects(
        custom: client.CustomObjectsApi) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, queuescaler())
    events = list(watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL,
                                       timeout_seconds=1))
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "orders")]


def test_watch_streams_changes_made_while_it_is_open(custom: client.CustomObjectsApi, apps: client.AppsV1Api) -> None:
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    watcher = watch.Watch()
    stream = watcher.stream(custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL,
                            resource_version=listed["metadata"]["resourceVersion"], timeout_seconds=5)
    writer = threading.Timer(0.2, lambda: custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, queuescaler()))
    writer.start()
    apps.create_namespaced_deployment("default", deployment())  # another kind: not in this watch
    try:
        events = collect(stream, 1)
    finally:
        watcher.stop()
        writer.join()
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "orders")]


def test_watch_from_a_compacted_resource_version_gets_a_410_error_event(fake_kube: FakeKube) -> None:
    fake_kube.create(queuescaler())
    fake_kube.compact()
    url = f"{fake_kube.url}/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}?watch=true&resourceVersion=2"
    with urllib.request.urlopen(admin_request(url), timeout=5, context=fake_kube.client_ssl_context()) as response:
        assert response.status == 200
        lines = response.read().decode().splitlines()
    assert [json.loads(line) for line in lines] == [{"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f"too old resource version: 2 ({fake_kube.store.compacted})", "reason": "Expired", "code": 410}}]


def test_sync_watch_raises_410_when_the_resource_version_is_too_old(fake_kube: FakeKube,
                                                                    custom: client.CustomObjectsApi) -> None:
    fake_kube.create(queuescaler())
    fake_kube.compact()
    with pytest.raises(ApiException) as caught:
        list(watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL,
                                  resource_version="2", timeout_seconds=1))
    assert caught.value.status == 410


def test_history_window_is_bounded() -> None:
    with FakeKube(history_limit=3) as fake:
        fake.create(QUEUESCALER_CRD)
        for index in range(5):
            fake.create(queuescaler(f"rule-{index}"))
        url = f"{fake.url}/apis/{GROUP}/{VERSION}/queuescalers?watch=true&resourceVersion=1&timeoutSeconds=1"
        with urllib.request.urlopen(admin_request(url), timeout=5, context=fake.client_ssl_context()) as response:
            event = json.loads(response.readline())
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410


def test_watch_sends_bookmarks_when_allowed(custom: client.CustomObjectsApi) -> None:
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    watcher = watch.Watch()
    stream = watcher.stream(custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL,
                            resource_version=listed["metadata"]["resourceVersion"], allow_watch_bookmarks=True,
                            timeout_seconds=3)
    try:
        events = collect(stream, 1)
    finally:
        watcher.stop()
    assert events[0]["type"] == "BOOKMARK"
    bookmark = events[0]["object"]
    assert bookmark["kind"] == "QueueScaler"
    assert int(bookmark["metadata"]["resourceVersion"]) >= int(listed["metadata"]["resourceVersion"])


def test_watch_sends_no_bookmarks_unless_asked(custom: client.CustomObjectsApi) -> None:
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    events = list(watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL,
                                       resource_version=listed["metadata"]["resourceVersion"], timeout_seconds=1))
    assert events == []


def test_watch_ends_after_timeout_seconds(custom: client.CustomObjectsApi) -> None:
    started = time.monotonic()
    list(watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL,
                              resource_version="1", timeout_seconds=1))
    assert 0.9 <= time.monotonic() - started < 3


def test_label_selected_watch_sees_an_object_leave_as_deleted(core: client.CoreV1Api) -> None:
    secret = core.create_namespaced_secret("default", {"metadata": {"name": "s", "labels": {"team": "a"}}})
    core.patch_namespaced_secret("s", "default", {"metadata": {"labels": {"team": "b"}}}, _content_type=MERGE)
    core.patch_namespaced_secret("s", "default", {"metadata": {"labels": {"team": "a"}}}, _content_type=MERGE)
    events = list(watch.Watch().stream(core.list_namespaced_secret, "default", label_selector="team=a",
                                       resource_version=secret.metadata.resource_version, timeout_seconds=1))
    assert [e["type"] for e in events] == ["DELETED", "ADDED"]


async def test_aio_client_reads_writes_and_watches(aio_api: aio_client.ApiClient) -> None:
    custom = aio_client.CustomObjectsApi(aio_api)
    created = await custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, queuescaler())
    await custom.patch_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL, "orders",
                                                       {"status": {"desiredReplicas": 2}}, _content_type=MERGE)
    # kubernetes.aio has no Watch helper: a watch is a list call with watch=True read line by line.
    response = await custom.list_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, watch=True, resource_version=created["metadata"]["resourceVersion"],
        timeout_seconds=1, _preload_content=False)
    lines = [json.loads(line) async for line in response.content if line.strip()]
    response.release()
    assert [(e["type"], e["object"]["status"]) for e in lines] == [("MODIFIED", {"desiredReplicas": 2})]


async def test_aio_custom_object_patch_without_a_content_type_is_sent_as_json_patch(
        fake_kube: FakeKube, aio_api: aio_client.ApiClient) -> None:
    # kubernetes.aio picks the first listed type, JSON patch, for a dict body: the server rejects it with 400.
    custom = aio_client.CustomObjectsApi(aio_api)
    await custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, queuescaler())
    with pytest.raises(aio_client.ApiException) as caught:
        await custom.patch_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL, "orders",
                                                           {"status": {"desiredReplicas": 2}})
    assert caught.value.status == 400
    assert fake_kube.requests[-1].content_type == "application/json-patch+json"


# ----------------------------------------------------------------------------------------------------------------
# Leases, events and discovery


def test_lease_renewal_with_a_stale_resource_version_loses_the_race(api: client.ApiClient) -> None:
    leases = client.CoordinationV1Api(api)
    lease = leases.create_namespaced_lease("default", {"metadata": {"name": "queuescale"}, "spec": {
        "holderIdentity": "a", "leaseDurationSeconds": 15}})
    taken = leases.read_namespaced_lease("queuescale", "default")
    taken.spec.holder_identity = "b"
    leases.replace_namespaced_lease("queuescale", "default", taken)
    lease.spec.renew_time = None
    with pytest.raises(ApiException) as caught:
        leases.replace_namespaced_lease("queuescale", "default", lease)
    assert caught.value.status == 409
    assert leases.read_namespaced_lease("queuescale", "default").spec.holder_identity == "b"
    assert leases.read_namespaced_lease("queuescale", "default").metadata.generation is None


def test_core_events_can_be_created_patched_and_listed(fake_kube: FakeKube, core: client.CoreV1Api) -> None:
    event = core.create_namespaced_event("default", {
        "metadata": {"generateName": "orders."},
        "involvedObject": {"kind": "QueueScaler", "name": "orders", "namespace": "default"},
        "reason": "Scaled", "message": "2 -> 4", "type": "Normal", "count": 1})
    assert event.metadata.name.startswith("orders.")
    core.patch_namespaced_event(event.metadata.name, "default", {"count": 2}, _content_type=MERGE)
    events = fake_kube.events("default")
    assert [(e["reason"], e["count"]) for e in events] == [("Scaled", 2)]


def test_core_event_must_be_in_its_objects_namespace(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_event("default", {
            "metadata": {"name": "orders.1"}, "reason": "Scaled",
            "involvedObject": {"kind": "QueueScaler", "name": "orders", "namespace": "shop"}})
    assert caught.value.status == 422


def test_discovery_lists_groups_and_subresources(api: client.ApiClient) -> None:
    groups = client.ApisApi(api).get_api_versions()
    assert {"apps", "coordination.k8s.io", "queuescale.io"} <= {g.name for g in groups.groups}
    resources = client.AppsV1Api(api).get_api_resources()
    assert {"deployments/scale", "statefulsets/scale"} <= {r.name for r in resources.resources}
    assert client.CoreV1Api(api).get_api_resources().group_version == "v1"


# ----------------------------------------------------------------------------------------------------------------
# Faults


async def test_throttling_fault_answers_429_with_retry_after_then_recovers(
        fake_kube: FakeKube, aio_api: aio_client.ApiClient) -> None:
    apps = aio_client.AppsV1Api(aio_api)
    await apps.create_namespaced_deployment("default", deployment())
    fake_kube.add_fault(method="GET", path=r"/deployments/worker/scale$", status=429, times=2, retry_after=3)
    for _ in range(2):
        with pytest.raises(aio_client.ApiException) as caught:
            await apps.read_namespaced_deployment_scale("worker", "default")
        assert caught.value.status == 429
        assert caught.value.headers["Retry-After"] == "3"
        body = json.loads(caught.value.body)
        assert body["reason"] == "TooManyRequests"
        assert body["details"] == {"retryAfterSeconds": 3}
    assert (await apps.read_namespaced_deployment_scale("worker", "default")).spec.replicas == 2


def test_sync_client_silently_retries_idempotent_requests_on_429(fake_kube: FakeKube,
                                                                 apps: client.AppsV1Api) -> None:
    # urllib3's default Retry honours Retry-After on 429/503 for GET and PUT, up to 3 times, before the
    # caller sees anything: the operator cannot count those throttles unless it sets Configuration.retries.
    apps.create_namespaced_deployment("default", deployment())
    fake_kube.add_fault(method="GET", path=r"/deployments/worker/scale$", status=429, times=2, retry_after=0)
    assert apps.read_namespaced_deployment_scale("worker", "default").spec.replicas == 2
    answered = [r.status for r in fake_kube.requests if r.path.endswith("/worker/scale")]
    assert answered == [429, 429, 200]


def test_server_error_fault_matches_only_its_method(fake_kube: FakeKube, apps: client.AppsV1Api) -> None:
    apps.create_namespaced_deployment("default", deployment())
    fake_kube.add_fault(Fault(method="PUT", path="/scale", status=500, times=None))
    scale = apps.read_namespaced_deployment_scale("worker", "default")
    with pytest.raises(ApiException) as caught:
        apps.replace_namespaced_deployment_scale("worker", "default", scale)
    assert caught.value.status == 500
    assert status_of(caught.value)["reason"] == "InternalError"
    fake_kube.clear_faults()
    apps.replace_namespaced_deployment_scale("worker", "default", scale)


def test_latency_fault_delays_the_answer(fake_kube: FakeKube, core: client.CoreV1Api) -> None:
    fake_kube.add_fault(path="/secrets", latency=0.3)
    started = time.monotonic()
    core.list_namespaced_secret("default")
    assert time.monotonic() - started >= 0.3


def test_dropped_watch_ends_the_stream(fake_kube: FakeKube, custom: client.CustomObjectsApi) -> None:
    outcome: list[str] = []

    def run() -> None:
        try:
            list(watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL,
                                      resource_version="1", timeout_seconds=30))
            outcome.append("ended")
        except Exception as error:  # the abrupt drop surfaces as a protocol error from urllib3
            outcome.append(type(error).__name__)

    reader = threading.Thread(target=run)
    reader.start()
    time.sleep(0.3)
    started = time.monotonic()
    fake_kube.drop_watches()
    reader.join(timeout=5)
    assert not reader.is_alive()
    assert time.monotonic() - started < 3
    assert len(outcome) == 1
    assert outcome[0] != "ended"


def test_graceful_drop_ends_the_stream_cleanly(fake_kube: FakeKube, custom: client.CustomObjectsApi) -> None:
    outcome: list[str] = []

    def run() -> None:
        list(watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL,
                                  resource_version="1", timeout_seconds=30))
        outcome.append("ended")

    reader = threading.Thread(target=run)
    reader.start()
    time.sleep(0.3)
    fake_kube.drop_watches(graceful=True)
    reader.join(timeout=5)
    assert outcome == ["ended"]


# ----------------------------------------------------------------------------------------------------------------
# Tables and the subprocess mode


def test_table_prints_name_and_age_without_printer_columns(fake_kube: FakeKube) -> None:
    fake_kube.create(queuescaler())
    lines = fake_kube.table("qs").splitlines()
    assert lines[0].split() == ["NAME", "AGE"]
    assert lines[1].split()[0] == "orders"


def test_runs_as_a_subprocess_with_admin_endpoints(tmp_path: Path) -> None:
    from kubernetes import config

    kubeconfig = tmp_path / "kubeconfig"
    root = Path(__file__).resolve().parents[2]
    process = subprocess.Popen([sys.executable, "-m", "tests.fakekube", "--port", "0", "--kubeconfig-out",
                                str(kubeconfig), "--crd", str(root / "manifests" / "crd.yaml")],
                               cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 15
        while not kubeconfig.exists():
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "the fake API server did not start"
            time.sleep(0.05)
        api_client = config.new_client_from_config(config_file=str(kubeconfig))
        server = api_client.configuration.host
        assert server.startswith("https://127.0.0.1:")
        trusted = client_context_from_kubeconfig(kubeconfig)
        try:
            core = client.CoreV1Api(api_client)
            request = urllib.request.Request(f"{server}/_fake/faults", method="POST", data=json.dumps(
                {"method": "GET", "path": "/secrets", "status": 503, "times": 1}).encode())
            urllib.request.urlopen(request, timeout=5, context=trusted).close()
            with pytest.raises(ApiException) as caught:
                core.list_namespaced_secret("default")
            assert caught.value.status == 503
            assert core.list_namespaced_secret("default").items == []
            client.CustomObjectsApi(api_client).create_namespaced_custom_object(
                GROUP, VERSION, "default", PLURAL, queuescaler())
            with urllib.request.urlopen(f"{server}/_fake/table?resource=qs&namespace=default", timeout=5,
                                        context=trusted) as table:
                lines = table.read().decode().splitlines()
            assert lines[0].split() == ["NAME", "TARGET", "MIN", "MAX", "QUEUE", "DESIRED", "CURRENT", "READY", "ACTIVE",
                                        "FALLBACK", "PAUSED", "AGE"]
            # A value the object lacks (status.queueLength) is a null cell, which kubectl prints as nothing.
            assert lines[1].split()[:4] == ["orders", "worker", "0", "10"]
            assert lines[1][lines[0].index("QUEUE"):lines[0].index("DESIRED")].strip() == ""
        finally:
            api_client.close()
    finally:
        process.terminate()
        assert process.wait(timeout=10) == 0
        if process.stdout:
            process.stdout.close()
        if process.stderr:
            process.stderr.close()


def test_cel_rules_ratchet_on_an_update_as_since_kubernetes_1_30() -> None:
    from tests.fakekube.schema import cel_errors

    schema = {"type": "object", "properties": {
        "spec": {"type": "object", "x-kubernetes-validations": [
            {"rule": "self.min <= self.max", "message": "min must not exceed max"}]},
        "status": {"type": "object"}}}
    bad = {"spec": {"min": 3, "max": 1}, "status": {"n": 1}}
    assert cel_errors(bad, schema) == [("spec", "min must not exceed max")]  # a create checks everything
    # An update that leaves the spec as it was (a status write) does not check the spec's rules again...
    assert cel_errors({**bad, "status": {"n": 2}}, schema, old=bad) == []
    # ...but one that changes it does.
    assert cel_errors({**bad, "spec": {"min": 4, "max": 1}}, schema, old=bad) == [("spec", "min must not exceed max")]
