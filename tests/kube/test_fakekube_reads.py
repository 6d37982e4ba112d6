"""The fake API server reads and deletes the way kube-apiserver does: OpenAPI documents, Tables, field selectors,
kinds served only while their CRD exists, and cascading deletion. Each test names the upstream code it follows."""

from __future__ import annotations

import copy
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.fakekube import FakeKube
from tests.fakekube.printer import render
from tests.fakekube.server import TOKEN

ROOT = Path(__file__).resolve().parents[2]
CRD: dict[str, Any] = yaml.safe_load((ROOT / "manifests" / "crd.yaml").read_text())
GROUP, VERSION, PLURAL = "queuescale.io", "v1alpha1", "queuescalers"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
NOT_FOUND = "the server could not find the requested resource"


def open_url(fake: FakeKube, request: urllib.request.Request) -> Any:
    """urllib against the fake, trusting its CA if it serves HTTPS."""
    trust = getattr(fake, "client_ssl_context", None)
    return urllib.request.urlopen(request, timeout=10, context=trust() if trust is not None else None)


def call(fake: FakeKube, path: str, *, method: str = "GET", body: Any = None, accept: str = "application/json",
         content_type: str = "application/json") -> tuple[int, Any]:
    """One raw request with the admin token: (status, decoded JSON body)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{fake.url}{path}", data=data, method=method, headers={
        "Authorization": f"Bearer {TOKEN}", "Accept": accept, "Content-Type": content_type})
    try:
        with open_url(fake, request) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read() or b"null")


def rule(name: str = "orders", namespace: str = "default", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "QueueScaler", "metadata": {"name": name, "namespace": namespace},
            "spec": {"scaleTargetRef": {"name": "worker"}, "minReplicas": 1, "maxReplicas": 10,
                     "sources": [{"type": "azure-queue", "queueName": "orders",
                                  "connectionSecretRef": {"name": "queue", "key": "connection"}}], **spec}}


def worker(name: str = "worker", namespace: str = "default", replicas: int = 2) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "main", "image": "worker:1"}]}}}}


@pytest.fixture
def kube(fake_kube: FakeKube) -> FakeKube:
    fake_kube.create(copy.deepcopy(CRD))
    return fake_kube


# ------------------------------------------------------------------------------------------------------------------
# A kind is served only while its CRD exists


def test_a_custom_kind_is_not_served_before_its_crd_exists_as_kube_apiserver_does(fake_kube: FakeKube) -> None:
    # apiextensions-apiserver pkg/apiserver/customresource_handler.go crdHandler.ServeHTTP: no CRD, so the
    # request falls through to the not-found handler (k8s.io/apiserver pkg/util/notfoundhandler).
    status, body = call(fake_kube, f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}")
    assert (status, body["reason"], body["message"], body["details"]) == (404, "NotFound", NOT_FOUND, {})
    assert GROUP not in [g["name"] for g in call(fake_kube, "/apis")[1]["groups"]]
    assert call(fake_kube, f"/apis/{GROUP}")[0] == 404
    assert call(fake_kube, f"/apis/{GROUP}/{VERSION}")[0] == 404

    fake_kube.create(copy.deepcopy(CRD))
    assert call(fake_kube, f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}")[0] == 200
    assert GROUP in [g["name"] for g in call(fake_kube, "/apis")[1]["groups"]]
    resources = call(fake_kube, f"/apis/{GROUP}/{VERSION}")[1]["resources"]
    assert [r["name"] for r in resources] == [PLURAL, f"{PLURAL}/status"]


AGGREGATED = ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
              "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json")


def discovered(fake: FakeKube, path: str) -> tuple[str, dict[str, Any]]:
    request = urllib.request.Request(f"{fake.url}{path}", headers={"Authorization": f"Bearer {TOKEN}",
                                                                   "Accept": AGGREGATED})
    with open_url(fake, request) as response:
        return response.headers["Content-Type"], json.loads(response.read())


def test_aggregated_discovery_lists_a_custom_kind_only_while_its_crd_exists(fake_kube: FakeKube) -> None:
    # k8s.io/apiserver pkg/endpoints/discovery/aggregated; client-go discovery_client.go uses the answer when its
    # Content-Type names APIGroupDiscoveryList (what kubectl 1.33 asks for first), else the legacy documents.
    content_type, body = discovered(fake_kube, "/apis")
    assert content_type == "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    assert body["kind"] == "APIGroupDiscoveryList" and body["apiVersion"] == "apidiscovery.k8s.io/v2"
    assert GROUP not in [g["metadata"].get("name") for g in body["items"]]
    apps = next(g for g in body["items"] if g["metadata"].get("name") == "apps")
    deployments = next(r for r in apps["versions"][0]["resources"] if r["resource"] == "deployments")
    assert deployments["responseKind"] == {"group": "apps", "version": "v1", "kind": "Deployment"}
    assert {s["subresource"] for s in deployments["subresources"]} == {"scale", "status"}
    core = discovered(fake_kube, "/api")[1]["items"]
    assert [v["version"] for v in core[0]["versions"]] == ["v1"] and "name" not in core[0]["metadata"]

    fake_kube.create(copy.deepcopy(CRD))
    groups = {g["metadata"].get("name"): g for g in discovered(fake_kube, "/apis")[1]["items"]}
    [resource] = groups[GROUP]["versions"][0]["resources"]
    assert (resource["resource"], resource["scope"], resource["shortNames"], resource["categories"]) == (
        PLURAL, "Namespaced", ["qs"], ["all"])
    fake_kube.store.delete(fake_kube.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition"), "",
                           f"{PLURAL}.{GROUP}")
    assert GROUP not in [g["metadata"].get("name") for g in discovered(fake_kube, "/apis")[1]["items"]]


def test_a_created_crd_is_established_as_the_apiextensions_controllers_mark_it(kube: FakeKube) -> None:
    # apiextensions-apiserver pkg/controller/establish/establishing_controller.go and status/naming_controller.go:
    # `kubectl wait --for=condition=Established crd/...` waits for these conditions.
    crd = kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", f"{PLURAL}.{GROUP}")
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    assert crd["status"]["acceptedNames"]["kind"] == "QueueScaler"
    assert crd["status"]["storedVersions"] == [VERSION]


def test_a_crd_created_by_server_side_apply_is_established_too(fake_kube: FakeKube) -> None:
    # The controllers above watch CRDs, not requests: `kubectl apply --server-side -f crd.yaml` then `kubectl wait
    # --for=condition=Established` (the install of docs/operations.md) must not wait for ever.
    status, applied = call(fake_kube, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{PLURAL}.{GROUP}"
                           "?fieldManager=kubectl", method="PATCH", body=CRD,
                           content_type="application/apply-patch+yaml")
    assert status == 201
    conditions = {c["type"]: c["status"] for c in applied["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    stored = fake_kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", f"{PLURAL}.{GROUP}")
    assert stored["status"]["conditions"] == applied["status"]["conditions"]


def test_deleting_a_crd_deletes_its_resources_then_ends_watches_as_kube_apiserver_does(kube: FakeKube) -> None:
    # apiextensions-apiserver pkg/controller/finalizer/crd_finalizer.go deletes every custom resource (watchers get
    # DELETED), then the CRD goes and its storage with it: open watches end, later requests are 404.
    kube.create(rule("a"))
    kube.create(rule("b"))
    seen: list[tuple[str, str]] = []
    request = urllib.request.Request(
        f"{kube.url}/apis/{GROUP}/{VERSION}/{PLURAL}?watch=true&resourceVersion="
        f"{kube.get(f'{GROUP}/{VERSION}', 'QueueScaler', 'b')['metadata']['resourceVersion']}",
        headers={"Authorization": f"Bearer {TOKEN}"})
    stream = open_url(kube, request)  # open (headers received) before the CRD goes

    def follow() -> None:
        with stream:
            for line in stream:  # ends when the server ends the stream
                event = json.loads(line)
                seen.append((event["type"], event["object"]["metadata"]["name"]))

    watcher = threading.Thread(target=follow)
    watcher.start()
    status, _ = call(kube, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{PLURAL}.{GROUP}",
                     method="DELETE")
    assert status == 200
    watcher.join(timeout=10)
    assert not watcher.is_alive(), "the watch did not end when its CRD was deleted"
    assert sorted(seen) == [("DELETED", "a"), ("DELETED", "b")]
    status, body = call(kube, f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}/a")
    assert (status, body["message"]) == (404, NOT_FOUND)
    assert GROUP not in [g["name"] for g in call(kube, "/apis")[1]["groups"]]

    kube.create(copy.deepcopy(CRD))  # the same kind again starts empty
    assert kube.list_objects(f"{GROUP}/{VERSION}", "QueueScaler") == []


# ------------------------------------------------------------------------------------------------------------------
# Cascading deletion


def test_deleting_a_namespace_deletes_everything_in_it_as_the_namespace_controller_does(kube: FakeKube) -> None:
    # pkg/controller/namespace/deletion/namespaced_resources_deleter.go: the namespace turns Terminating, its content
    # is deleted, then the namespace. The fake finishes before it answers; the answer is the Terminating namespace.
    kube.ensure_namespace("shop")
    kube.create(rule("orders", "shop"))
    kube.create(worker(namespace="shop"))
    kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "queue", "namespace": "shop"}})
    kube.create(rule("kept", "default"))
    assert kube.get("v1", "Namespace", "shop")["status"]["phase"] == "Active"

    status, answer = call(kube, "/api/v1/namespaces/shop", method="DELETE")
    assert status == 200
    assert answer["kind"] == "Namespace" and answer["status"]["phase"] == "Terminating"
    assert answer["metadata"]["deletionTimestamp"]
    for api_version, kind in (("queuescale.io/v1alpha1", "QueueScaler"), ("apps/v1", "Deployment"), ("v1", "Secret")):
        assert kube.list_objects(api_version, kind, "shop") == []
    assert [r["metadata"]["name"] for r in kube.list_objects(f"{GROUP}/{VERSION}", "QueueScaler")] == ["kept"]
    assert call(kube, "/api/v1/namespaces/shop")[0] == 404


def test_a_terminating_namespace_refuses_new_content_until_its_controller_empties_it() -> None:
    # The real DELETE answers while the namespace is Terminating; until the namespace controller has emptied it, the
    # NamespaceLifecycle admission plugin refuses creates (plugin/pkg/admission/namespace/lifecycle/admission.go).
    with FakeKube(namespace_termination_delay=0.5) as fake:
        fake.create(copy.deepcopy(CRD))
        fake.ensure_namespace("shop")
        fake.create(rule("orders", "shop"))
        status, answer = call(fake, "/api/v1/namespaces/shop", method="DELETE")
        assert (status, answer["status"]["phase"]) == (200, "Terminating")
        assert [r["metadata"]["name"] for r in fake.list_objects(f"{GROUP}/{VERSION}", "QueueScaler", "shop")] == [
            "orders"]
        event = core_event("orders.1", "orders")
        event["metadata"]["namespace"] = event["involvedObject"]["namespace"] = "shop"
        status, refused = call(fake, "/api/v1/namespaces/shop/events", method="POST", body=event)
        assert (status, refused["reason"]) == (403, "Forbidden")
        assert refused["message"] == ('events "orders.1" is forbidden: unable to create new content in namespace '
                                      "shop because it is being terminated")
        assert refused["details"]["causes"][0]["reason"] == "NamespaceTerminating"
        assert call(fake, f"/apis/{GROUP}/{VERSION}/namespaces/shop/{PLURAL}/orders", method="PATCH",
                    body={"metadata": {"labels": {"still": "writable"}}},
                    content_type="application/merge-patch+json")[0] == 200  # only creates are refused
        assert call(fake, "/api/v1/namespaces/shop", method="DELETE")[0] == 200  # deleting again changes nothing
        deadline = time.monotonic() + 5
        while call(fake, "/api/v1/namespaces/shop")[0] != 404:
            assert time.monotonic() < deadline, "the namespace was never emptied"
            time.sleep(0.05)
        assert fake.list_objects(f"{GROUP}/{VERSION}", "QueueScaler", "shop") == []


def owned_replicaset(name: str, owners: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "ownerReferences": [
        {"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["metadata"]["name"], "uid": o["metadata"]["uid"],
         "controller": True, "blockOwnerDeletion": True} for o in owners]},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "w"}}}}


@pytest.mark.parametrize("policy", [None, "Background", "Foreground"])
def test_deleting_an_owner_deletes_its_dependents_as_the_garbage_collector_does(
        fake_kube: FakeKube, policy: str | None) -> None:
    # pkg/controller/garbagecollector/garbagecollector.go: Background (the default) and Foreground delete the
    # dependents whose ownerReferences name the owner's uid.
    owner = fake_kube.create(worker())
    fake_kube.create(owned_replicaset("worker-1", [owner]))
    options = {"propagationPolicy": policy} if policy else None
    assert call(fake_kube, "/apis/apps/v1/namespaces/default/deployments/worker", method="DELETE",
                body=options)[0] == 200
    assert fake_kube.list_objects("apps/v1", "ReplicaSet") == []


def test_orphan_deletion_keeps_dependents_without_the_owner_reference_as_the_garbage_collector_does(
        fake_kube: FakeKube) -> None:
    # garbagecollector.go orphanDependents: the reference to the deleted owner is removed, the dependent stays.
    owner = fake_kube.create(worker())
    fake_kube.create(owned_replicaset("worker-1", [owner]))
    call(fake_kube, "/apis/apps/v1/namespaces/default/deployments/worker?propagationPolicy=Orphan", method="DELETE")
    kept = fake_kube.get("apps/v1", "ReplicaSet", "worker-1")
    assert "ownerReferences" not in kept["metadata"]


def test_a_dependent_with_another_live_owner_only_loses_the_dangling_reference(fake_kube: FakeKube) -> None:
    # garbagecollector.go attemptToDeleteItem: with a "solid" owner left, the dangling references are removed.
    first, second = fake_kube.create(worker("first")), fake_kube.create(worker("second"))
    fake_kube.create(owned_replicaset("shared", [first, second]))
    call(fake_kube, "/apis/apps/v1/namespaces/default/deployments/first", method="DELETE")
    kept = fake_kube.get("apps/v1", "ReplicaSet", "shared")
    assert [r["name"] for r in kept["metadata"]["ownerReferences"]] == ["second"]


def test_an_unknown_propagation_policy_is_invalid(fake_kube: FakeKube) -> None:
    # k8s.io/apiserver pkg/apis/... ValidateDeleteOptions: propagationPolicy must be Foreground, Background or Orphan.
    fake_kube.create(worker())
    status, body = call(fake_kube, "/apis/apps/v1/namespaces/default/deployments/worker", method="DELETE",
                        body={"propagationPolicy": "Sideways"})
    assert status == 422 and "propagationPolicy" in body["message"]


# ------------------------------------------------------------------------------------------------------------------
# Field selectors


def core_event(name: str, involved: str, *, kind: str = "QueueScaler", reason: str = "ScaledUp",
               type_: str = "Normal", uid: str = "uid-1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": "default"},
            "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "name": involved,
                               "namespace": "default", "uid": uid},
            "reason": reason, "type": type_, "message": "0 -> 3", "source": {"component": "queuescale"}}


def names(fake: FakeKube, path: str) -> list[str]:
    status, body = call(fake, path)
    assert status == 200, body
    return [item["metadata"]["name"] for item in body["items"]]


@pytest.mark.parametrize(("selector", "expected"), [
    ("involvedObject.name=orders", ["e1", "e2"]),
    ("involvedObject.kind=QueueScaler,involvedObject.name=orders,involvedObject.namespace=default", ["e1", "e2"]),
    ("involvedObject.uid=uid-2", ["e3"]),
    ("involvedObject.apiVersion=queuescale.io/v1alpha1,reason=ScaledDown", ["e2"]),
    ("type=Warning", ["e3"]),
    ("type!=Warning", ["e1", "e2"]),
    ("source=queuescale,involvedObject.kind=Deployment", ["e3"]),
    ("involvedObject.fieldPath=,involvedObject.resourceVersion=", ["e1", "e2", "e3"]),
    ("metadata.name=e2", ["e2"]),
])
def test_core_events_are_selected_by_the_fields_the_event_registry_exposes(
        fake_kube: FakeKube, selector: str, expected: list[str]) -> None:
    # pkg/registry/core/event/strategy.go ToSelectableFields; `kubectl describe` lists events with
    # involvedObject.{uid,name,namespace,kind}.
    fake_kube.create(core_event("e1", "orders"))
    fake_kube.create(core_event("e2", "orders", reason="ScaledDown"))
    fake_kube.create(core_event("e3", "worker", kind="Deployment", type_="Warning", uid="uid-2"))
    assert names(fake_kube, f"/api/v1/namespaces/default/events?fieldSelector={selector}") == expected


def test_events_k8s_io_selects_by_regarding_and_refuses_the_core_spellings(fake_kube: FakeKube) -> None:
    # pkg/apis/events/v1/conversion.go AddFieldLabelConversionsForEvent maps regarding.* onto the core fields; a
    # label outside the mapping is "field label not supported".
    for name, involved in (("n1", "orders"), ("n2", "other")):
        fake_kube.create({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                          "metadata": {"name": name, "namespace": "default"}, "eventTime": "2026-01-01T00:00:00.000000Z",
                          "reportingController": "queuescale.io/operator", "reportingInstance": "pod-1",
                          "action": "Scale", "reason": "ScaledUp", "type": "Normal",
                          "regarding": {"kind": "QueueScaler", "name": involved, "namespace": "default"}})
    base = "/apis/events.k8s.io/v1/namespaces/default/events?fieldSelector="
    assert names(fake_kube, base + "regarding.name=orders,regarding.kind=QueueScaler") == ["n1"]
    assert names(fake_kube, base + "reportingController=queuescale.io/operator") == ["n1", "n2"]
    status, body = call(fake_kube, base + "involvedObject.name=orders")
    assert (status, body["reason"], body["message"]) == (400, "BadRequest",
                                                         "field label not supported: involvedObject.name")


def test_an_unsupported_field_label_is_a_400_naming_it_as_kube_apiserver_says(kube: FakeKube) -> None:
    # runtime.Scheme field label conversion: fmt.Errorf("field label not supported: %s", label) -> 400.
    status, body = call(kube, f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}?fieldSelector=spec.maxReplicas=3")
    assert (status, body["message"]) == (400, "field label not supported: spec.maxReplicas")
    status, body = call(kube, "/api/v1/namespaces/default/events?fieldSelector=message=hello")
    assert (status, body["message"]) == (400, "field label not supported: message")


def test_a_crds_selectable_fields_select_its_resources(fake_kube: FakeKube) -> None:
    # apiextensions-apiserver customresource_handler.go: a version's selectableFields (GA in 1.32) become field labels.
    crd = copy.deepcopy(CRD)
    crd["spec"]["versions"][0]["selectableFields"] = [{"jsonPath": ".spec.scaleTargetRef.name"}]
    fake_kube.create(crd)
    fake_kube.create(rule("a"))
    fake_kube.create(rule("b", scaleTargetRef={"name": "other"}))
    path = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}?fieldSelector=spec.scaleTargetRef.name=other"
    assert names(fake_kube, path) == ["b"]


def test_a_field_selected_watch_sees_only_matching_events(fake_kube: FakeKube, api: client.ApiClient) -> None:
    fake_kube.create(core_event("e1", "orders"))
    fake_kube.create(core_event("e2", "worker", kind="Deployment"))
    events = client.CoreV1Api(api).list_namespaced_event(
        "default", field_selector="involvedObject.kind=Deployment", watch=False)
    assert [e.metadata.name for e in events.items] == ["e2"]


# ------------------------------------------------------------------------------------------------------------------
# Tables


def test_custom_resource_table_evaluates_the_printer_columns_as_the_crd_tableconvertor_does(kube: FakeKube) -> None:
    # apiextensions-apiserver pkg/registry/customresource/tableconvertor/tableconvertor.go: Name, then each column's
    # JSONPath typed by the column (integer, number, date as an age); a missing value is a null cell.
    kube.create(rule("orders"))
    kube.store.update(kube.resource(f"{GROUP}/{VERSION}", "QueueScaler"), "default", "orders",
                      {"metadata": {"name": "orders"}, "status": {
                          "queueLength": 57, "desiredReplicas": 3,
                          "conditions": [{"type": t, "status": v, "reason": "Test", "message": "",
                                          "lastTransitionTime": "2026-11-24T00:00:00Z"}
                                         for t, v in (("Ready", "True"), ("Active", "True"), ("Fallback", "False"))]}},
                      subresource="status")
    status, table = call(kube, f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}", accept=TABLE)
    assert status == 200
    assert (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    assert table["metadata"]["resourceVersion"]
    columns = [(c["name"], c["type"]) for c in table["columnDefinitions"]]
    assert columns == [("Name", "string"), ("Target", "string"), ("Min", "integer"), ("Max", "integer"),
                       ("Queue", "number"), ("Desired", "integer"), ("Current", "integer"), ("Ready", "integer"),
                       ("Active", "string"), ("Fallback", "string"), ("Paused", "string"), ("Age", "date")]
    [row] = table["rows"]
    # The condition columns are JSONPath filters ([?(@.type=="Active")]): a condition that is absent is a null cell.
    assert row["cells"][:11] == ["orders", "worker", 1, 10, 57.0, 3, None, None, "True", "False", None]
    assert row["cells"][11] in ("0s", "1s", "2s")
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert row["object"]["apiVersion"] == "meta.k8s.io/v1"
    assert row["object"]["metadata"]["name"] == "orders" and "spec" not in row["object"]


def test_table_rows_carry_the_object_asked_for_with_include_object(kube: FakeKube) -> None:
    # k8s.io/apiserver pkg/endpoints/handlers/response.go asTable: includeObject=None|Metadata(default)|Object.
    kube.create(rule("orders"))
    base = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}"
    assert call(kube, base + "?includeObject=None", accept=TABLE)[1]["rows"][0]["object"] is None
    full = call(kube, base + "?includeObject=Object", accept=TABLE)[1]["rows"][0]["object"]
    assert full["kind"] == "QueueScaler" and full["spec"]["maxReplicas"] == 10
    one = call(kube, base + "/orders", accept=TABLE)[1]
    assert [r["cells"][0] for r in one["rows"]] == ["orders"]
    beta = call(kube, base, accept="application/json;as=Table;v=v1beta1;g=meta.k8s.io")[1]
    assert beta["apiVersion"] == "meta.k8s.io/v1beta1"
    assert call(kube, base)[1]["kind"] == "QueueScalerList"  # plain JSON unless a Table is asked for


def test_a_watch_asking_for_tables_gets_one_row_tables_with_columns_first_as_kubectl_get_w_needs(
        kube: FakeKube) -> None:
    # k8s.io/apiserver pkg/endpoints/handlers/watch.go: each event's object is a Table; headers on the first only.
    kube.create(rule("orders"))
    request = urllib.request.Request(
        f"{kube.url}/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}?watch=true&timeoutSeconds=1",
        headers={"Authorization": f"Bearer {TOKEN}", "Accept": TABLE})
    with open_url(kube, request) as stream:
        first = json.loads(stream.readline())
        kube.store.delete(kube.resource(f"{GROUP}/{VERSION}", "QueueScaler"), "default", "orders")
        second = json.loads(stream.readline())
    assert (first["type"], first["object"]["kind"]) == ("ADDED", "Table")
    assert first["object"]["columnDefinitions"][1]["name"] == "Target"
    assert first["object"]["rows"][0]["cells"][:2] == ["orders", "worker"]
    assert (second["type"], second["object"]["columnDefinitions"]) == ("DELETED", None)
    assert second["object"]["rows"][0]["cells"][0] == "orders"


def test_a_crd_without_printer_columns_gets_the_age_column(fake_kube: FakeKube) -> None:
    # apiextensions-apiserver customresource_handler.go serves an Age column when a version declares none.
    crd = copy.deepcopy(CRD)
    del crd["spec"]["versions"][0]["additionalPrinterColumns"]
    fake_kube.create(crd)
    fake_kube.create(rule())
    table = call(fake_kube, f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}", accept=TABLE)[1]
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Age"]


def test_builtin_tables_have_the_server_printers_columns(fake_kube: FakeKube) -> None:
    # pkg/printers/internalversion/printers.go, printed with Wide: true (priority 1 columns sent, hidden by kubectl).
    fake_kube.create(worker(replicas=2))
    deployments = call(fake_kube, "/apis/apps/v1/namespaces/default/deployments", accept=TABLE)[1]
    assert [(c["name"], c["priority"]) for c in deployments["columnDefinitions"]] == [
        ("Name", 0), ("Ready", 0), ("Up-to-date", 0), ("Available", 0), ("Age", 0), ("Containers", 1),
        ("Images", 1), ("Selector", 1)]
    assert deployments["rows"][0]["cells"][:4] == ["worker", "2/2", 2, 2]
    assert deployments["rows"][0]["cells"][5:] == ["main", "worker:1", "app=worker"]

    namespaces = call(fake_kube, "/api/v1/namespaces/default", accept=TABLE)[1]
    assert [c["name"] for c in namespaces["columnDefinitions"]] == ["Name", "Status", "Age"]
    assert namespaces["rows"][0]["cells"][:2] == ["default", "Active"]

    fake_kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "queue"}, "type": "Opaque",
                      "data": {"a": "eA==", "b": "eQ=="}})
    secrets = call(fake_kube, "/api/v1/namespaces/default/secrets", accept=TABLE)[1]
    assert [c["name"] for c in secrets["columnDefinitions"]] == ["Name", "Type", "Data", "Age"]
    assert secrets["rows"][0]["cells"][:3] == ["queue", "Opaque", 2]

    event = core_event("orders.1", "orders")
    event.update(firstTimestamp="2026-01-01T00:00:00Z", lastTimestamp="2026-01-01T00:00:00Z", count=3)
    fake_kube.create(event)
    events = call(fake_kube, "/api/v1/namespaces/default/events", accept=TABLE)[1]
    assert [c["name"] for c in events["columnDefinitions"] if c["priority"] == 0] == [
        "Last Seen", "Type", "Reason", "Object", "Message"]
    cells = events["rows"][0]["cells"]
    assert cells[1:7] == ["Normal", "ScaledUp", "queuescaler/orders", "", "queuescale", "0 -> 3"]
    assert cells[8:] == [3, "orders.1"]

    crds = call(fake_kube, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", accept=TABLE)[1]
    assert [c["name"] for c in crds["columnDefinitions"]] == ["Name", "Created At"]  # rest.DefaultTableConvertor


def test_kubectl_text_is_rendered_from_the_servers_table(kube: FakeKube) -> None:
    # k8s.io/cli-runtime pkg/printers/tableprinter.go printTable: priority>0 only with -o wide, a null cell prints
    # as nothing, NAMESPACE first with -A.
    kube.create(rule("orders"))
    table = call(kube, f"/apis/{GROUP}/{VERSION}/{PLURAL}", accept=TABLE)[1]
    text = render(table, all_namespaces=True).splitlines()
    assert text[0].split() == ["NAMESPACE", "NAME", "TARGET", "MIN", "MAX", "QUEUE", "DESIRED", "CURRENT", "READY",
                               "ACTIVE", "FALLBACK", "PAUSED", "AGE"]
    assert text[1].split()[:5] == ["default", "orders", "worker", "1", "10"]
    assert text[1][text[0].index("QUEUE"):text[0].index("AGE")].strip() == ""
    assert kube.table("qs", "default").splitlines()[1].split()[:4] == ["orders", "worker", "1", "10"]
    deployments = {"columnDefinitions": [{"name": "Name", "priority": 0}, {"name": "Images", "priority": 1}],
                   "rows": [{"cells": ["w", "img"], "object": None}]}
    assert render(deployments).split() == ["NAME", "w"]
    assert render(deployments, wide=True).split() == ["NAME", "IMAGES", "w", "img"]


# ------------------------------------------------------------------------------------------------------------------
# OpenAPI


def test_openapi_v3_lists_a_document_per_served_group_version_as_kube_apiserver_does(fake_kube: FakeKube) -> None:
    # k8s.io/kube-openapi pkg/handler3: GET /openapi/v3 -> {"paths": {"apis/apps/v1": {"serverRelativeURL": ...}}}
    # (client-go openapi/client.go reads it); a CRD's group version appears once the CRD exists.
    index = call(fake_kube, "/openapi/v3")[1]["paths"]
    assert {"api/v1", "apis/apps/v1", "apis/rbac.authorization.k8s.io/v1", "apis/events.k8s.io/v1",
            "apis/apiextensions.k8s.io/v1"} <= set(index)
    assert f"apis/{GROUP}/{VERSION}" not in index
    fake_kube.create(copy.deepcopy(CRD))
    url = call(fake_kube, "/openapi/v3")[1]["paths"][f"apis/{GROUP}/{VERSION}"]["serverRelativeURL"]
    assert url.startswith(f"/openapi/v3/apis/{GROUP}/{VERSION}?hash=")
    status, document = call(fake_kube, url)
    assert status == 200 and document["openapi"].startswith("3.")


def test_the_crd_schema_is_published_under_its_reversed_group_name(kube: FakeKube) -> None:
    # apiextensions-apiserver pkg/controller/openapi/builder/builder.go: definition io.queuescale.v1alpha1.QueueScaler
    # with the version's schema, metadata a reference to ObjectMeta, and x-kubernetes-group-version-kind.
    schemas = call(kube, f"/openapi/v3/apis/{GROUP}/{VERSION}")[1]["components"]["schemas"]
    published = schemas["io.queuescale.v1alpha1.QueueScaler"]
    assert published["x-kubernetes-group-version-kind"] == [{"group": GROUP, "version": VERSION,
                                                             "kind": "QueueScaler"}]
    crd_schema = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert published["properties"]["spec"] == crd_schema["properties"]["spec"]
    assert published["properties"]["metadata"]["$ref"] == (
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in schemas
    listed = schemas["io.queuescale.v1alpha1.QueueScalerList"]
    assert listed["properties"]["items"]["items"]["$ref"] == "#/components/schemas/io.queuescale.v1alpha1.QueueScaler"


def patch_declares_field_validation(document: dict[str, Any], group: str, version: str, kind: str) -> bool:
    """k8s.io/cli-runtime pkg/resource/query_param_verifier_v3.go supportsQueryParamV3, transcribed: the kind's
    PATCH operation carries the `fieldValidation` query parameter."""
    for item in document["paths"].values():
        operation = item.get("patch")
        if operation and operation.get("x-kubernetes-group-version-kind") == {"group": group, "version": version,
                                                                               "kind": kind}:
            return any(p.get("name") == "fieldValidation" and p.get("in") == "query"
                       for p in operation.get("parameters", []))
    return False


@pytest.mark.parametrize(("path", "group", "kind"), [
    (f"apis/{GROUP}/{VERSION}", GROUP, "QueueScaler"), ("apis/apps/v1", "apps", "Deployment"),
    ("api/v1", "", "Secret"), ("api/v1", "", "Namespace"), ("api/v1", "", "ServiceAccount"),
    ("api/v1", "", "ConfigMap"), ("api/v1", "", "Event"), ("apis/events.k8s.io/v1", "events.k8s.io", "Event"),
    ("apis/rbac.authorization.k8s.io/v1", "rbac.authorization.k8s.io", "ClusterRole"),
    ("apis/rbac.authorization.k8s.io/v1", "rbac.authorization.k8s.io", "RoleBinding"),
])
def test_every_kind_declares_server_side_field_validation_so_kubectl_validates_strictly_on_the_server(
        kube: FakeKube, path: str, group: str, kind: str) -> None:
    document = call(kube, f"/openapi/v3/{path}")[1]
    version = path.rsplit("/", 1)[-1]
    assert patch_declares_field_validation(document, group, version, kind)
    schemas = document["components"]["schemas"]
    assert any({"group": group, "version": version, "kind": kind} in (s.get("x-kubernetes-group-version-kind") or [])
               for s in schemas.values()), f"no schema for {kind}"


def test_builtin_schemas_are_the_upstream_ones(kube: FakeKube) -> None:
    # The Kubernetes 1.33 definitions (via kubernetes-validate), in OpenAPI form: refs with a description are
    # wrapped in allOf in v3, as kube-openapi's v3 builder does.
    schemas = call(kube, "/openapi/v3/apis/apps/v1")[1]["components"]["schemas"]
    spec = schemas["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]
    assert spec["replicas"]["type"] == "integer"
    assert spec["template"]["allOf"] == [{"$ref": "#/components/schemas/io.k8s.api.core.v1.PodTemplateSpec"}]
    assert "enum" not in schemas["io.k8s.api.apps.v1.Deployment"]["properties"]["kind"]
    assert schemas["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["oneOf"] == [{"type": "integer"},
                                                                                   {"type": "string"}]


def test_openapi_v2_is_served_as_json_and_refused_to_protobuf_only_clients(kube: FakeKube) -> None:
    # /openapi/v2 (k8s.io/kube-openapi pkg/handler): JSON Swagger 2.0 with #/definitions refs; client-go asks for
    # protobuf, which the fake does not speak: 406 rather than a body it cannot decode.
    status, document = call(kube, "/openapi/v2")
    assert status == 200 and document["swagger"] == "2.0"
    assert "io.queuescale.v1alpha1.QueueScaler" in document["definitions"]
    template = document["definitions"]["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["template"]
    assert template["$ref"] == "#/definitions/io.k8s.api.core.v1.PodTemplateSpec"
    intstr = document["definitions"]["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]
    assert (intstr["type"], intstr["format"]) == ("string", "int-or-string")
    assert call(kube, "/openapi/v2", accept="application/com.github.proto-openapi.spec.v2@v1.0+protobuf")[0] == 406


def test_strict_field_validation_refuses_unknown_fields_of_builtin_kinds_as_kube_apiserver_does(
        fake_kube: FakeKube) -> None:
    # k8s.io/apiserver pkg/endpoints/handlers/create.go with fieldValidation=Strict: strict decoding errors are a 400
    # "<Kind> in version "<v>" cannot be handled as a <Kind>: strict decoding error: unknown field ...".
    bad = worker()
    bad["spec"]["replicaz"] = 3
    status, body = call(fake_kube, "/apis/apps/v1/namespaces/default/deployments?fieldValidation=Strict",
                        method="POST", body=bad)
    assert (status, body["reason"]) == (400, "BadRequest")
    assert body["message"] == ('Deployment in version "v1" cannot be handled as a Deployment: strict decoding '
                               'error: unknown field "spec.replicaz"')
    good = worker()
    good["metadata"]["labels"] = {"app": "worker"}
    assert call(fake_kube, "/apis/apps/v1/namespaces/default/deployments?fieldValidation=Strict", method="POST",
                body=good)[0] == 201
