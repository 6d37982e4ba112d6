"""The fake API server's write path behaves like kube-apiserver's where a bug can hide, through the official client:
dry runs, server-side apply with field ownership, Secrets' stringData, metadata.generation after defaulting, and
the wording of validation errors. Each test names the upstream code or document that says what the real server
does (kubernetes/kubernetes, its staging repositories k8s.io/apiserver, k8s.io/apimachinery,
k8s.io/apiextensions-apiserver, and k8s.io/kube-openapi; Kubernetes 1.33)."""

from __future__ import annotations

import base64
import copy
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.fakekube import FakeKube
from tests.fakekube.apply import now_rfc3339
from tests.fakekube.server import TOKEN
from tests.kube_helpers import status_of

GROUP, VERSION, PLURAL = "queuescale.io", "v1alpha1", "queuescalers"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
CRD = yaml.safe_load((Path(__file__).parents[2] / "manifests" / "crd.yaml").read_text())


def deployment(name: str = "worker", replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "main", "image": "worker:1"}]}}},
    }


def rule(name: str = "orders", **spec: Any) -> dict[str, Any]:
    """A QueueScaler as a user writes it: without the fields the CRD defaults."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "QueueScaler", "metadata": {"name": name},
        "spec": {"scaleTargetRef": {"name": "worker"}, "maxReplicas": 10,
                 "sources": [{"type": "azure-queue", "queueName": "orders", "identity": "workload",
                              "accountName": "store"}], **spec},
    }


def refused(call: Any, *args: Any, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(ApiException) as caught:
        call(*args, **kwargs)
    return caught.value.status, status_of(caught.value)


@pytest.fixture
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    client.ApiextensionsV1Api(api).create_custom_resource_definition(CRD)
    return client.CustomObjectsApi(api)


def apply_deployment(apps: client.AppsV1Api, body: dict[str, Any], manager: str, **kwargs: Any) -> Any:
    return apps.patch_namespaced_deployment(body["metadata"]["name"], "default", body, field_manager=manager,
                                            _content_type=APPLY, **kwargs)


def apply_rule(custom: client.CustomObjectsApi, body: dict[str, Any], manager: str, **kwargs: Any) -> Any:
    name = body["metadata"]["name"]
    answered = custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name, body,
                                                     field_manager=manager, _content_type=APPLY, **kwargs)
    # The client maps only a 200 answer to PATCH to a body; an apply that creates answers 201.
    return answered if answered is not None else custom.get_namespaced_custom_object(GROUP, VERSION, "default",
                                                                                     PLURAL, name)


def managers(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f'{e["manager"]}/{e["operation"]}/{e.get("subresource", "")}': e
            for e in obj["metadata"].get("managedFields") or []}


# ----------------------------------------------------------------------------------------------------------------
# dryRun=All: everything but storing. The API concepts document, "Dry-run": "the request is still processed as
# usual (defaulting, validation, admission) ... but the final write to storage is skipped"; implemented by
# k8s.io/apiserver pkg/registry/generic/registry/dryrun.go (DryRunnableStorage).

def test_dry_run_create_answers_the_defaulted_object_and_stores_nothing_as_kube_apiserver_does(
        fake_kube: FakeKube, custom: client.CustomObjectsApi) -> None:
    revision, history = fake_kube.store.revision, len(fake_kube.store.history)
    answered = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, rule(), dry_run="All")
    assert answered["spec"]["policy"]["tolerance"] == 0.1  # defaulted from the CRD, as a real create would be
    assert answered["metadata"]["uid"] and answered["metadata"]["generation"] == 1
    assert "resourceVersion" not in answered["metadata"]  # DryRunnableStorage.Create never reaches etcd
    assert custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)["items"] == []
    assert (fake_kube.store.revision, len(fake_kube.store.history)) == (revision, history)  # no event for watches


def test_dry_run_create_still_runs_validation_cel_and_the_name_check_as_kube_apiserver_does(
        custom: client.CustomObjectsApi) -> None:
    code, status = refused(custom.create_namespaced_custom_object, GROUP, VERSION, "default", PLURAL,
                           rule(minReplicas=5, maxReplicas=2), dry_run="All")
    assert (code, status["message"]) == (422, 'QueueScaler.queuescale.io "orders" is invalid: spec.maxReplicas: '
                                              'Invalid value: "object": maxReplicas must be >= minReplicas')
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, rule())
    code, status = refused(custom.create_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, rule(),
                           dry_run="All")
    assert (code, status["reason"]) == (409, "AlreadyExists")  # DryRunnableStorage.Create: NewKeyExistsError


def test_dry_run_put_and_every_patch_type_answer_the_change_but_store_nothing_as_kube_apiserver_does(
        fake_kube: FakeKube, apps: client.AppsV1Api) -> None:
    apps.create_namespaced_deployment("default", deployment(replicas=2))
    changed = apps.read_namespaced_deployment("worker", "default")  # after the workload controller's status write
    version = changed.metadata.resource_version
    revision = fake_kube.store.revision
    changed.spec.replicas = 7
    answered = [
        apps.replace_namespaced_deployment("worker", "default", changed, dry_run="All"),
        apps.patch_namespaced_deployment("worker", "default", {"spec": {"replicas": 7}}, dry_run="All"),
        apps.patch_namespaced_deployment("worker", "default", {"spec": {"replicas": 7}}, dry_run="All",
                                         _content_type=MERGE),
        apps.patch_namespaced_deployment("worker", "default", [{"op": "replace", "path": "/spec/replicas",
                                                                "value": 7}], dry_run="All"),
        apply_deployment(apps, deployment(replicas=7), "ci", dry_run="All", force=True),
        apps.patch_namespaced_deployment_scale("worker", "default", {"spec": {"replicas": 7}}, dry_run="All"),
    ]
    for result in answered[:-1]:
        # GuaranteedUpdate under dry run answers the updated object with the live resourceVersion.
        assert (result.spec.replicas, result.metadata.generation) == (7, 2)
        assert result.metadata.resource_version == version
    assert answered[-1].spec.replicas == 7
    stored = apps.read_namespaced_deployment("worker", "default")
    assert (stored.spec.replicas, stored.metadata.generation, stored.metadata.resource_version) == (2, 1, version)
    assert fake_kube.store.revision == revision


def test_dry_run_keeps_optimistic_concurrency_as_kube_apiserver_does(apps: client.AppsV1Api) -> None:
    apps.create_namespaced_deployment("default", deployment())
    stale = apps.read_namespaced_deployment("worker", "default")
    apps.patch_namespaced_deployment("worker", "default", {"spec": {"replicas": 3}})
    stale.spec.replicas = 9
    code, status = refused(apps.replace_namespaced_deployment, "worker", "default", stale, dry_run="All")
    assert (code, status["reason"]) == (409, "Conflict")


def test_dry_run_delete_checks_preconditions_and_keeps_the_object_as_kube_apiserver_does(
        fake_kube: FakeKube, core: client.CoreV1Api) -> None:
    secret = core.create_namespaced_secret("default", {"metadata": {"name": "s"}, "data": {"k": "dg=="}})
    revision = fake_kube.store.revision
    core.delete_namespaced_secret("s", "default", dry_run="All")
    code, _ = refused(core.delete_namespaced_secret, "s", "default", dry_run="All",
                      body=client.V1DeleteOptions(preconditions=client.V1Preconditions(resource_version="1")))
    assert code == 409
    assert core.read_namespaced_secret("s", "default").metadata.uid == secret.metadata.uid
    assert fake_kube.store.revision == revision


def test_dry_run_sent_in_the_delete_options_body_is_honoured_as_kube_apiserver_does(
        custom: client.CustomObjectsApi) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, rule())
    # kubectl delete --dry-run=server sends DeleteOptions{dryRun: [All]} in the body.
    custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "orders",
                                           body={"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["All"]})
    assert custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "orders")


@pytest.mark.parametrize(("method", "kind"), [("create", "CreateOptions"), ("replace", "UpdateOptions"),
                                              ("patch", "PatchOptions"), ("delete", "DeleteOptions")])
def test_an_unknown_dry_run_value_is_refused_with_the_real_422(apps: client.AppsV1Api, method: str,
                                                               kind: str) -> None:
    """k8s.io/apimachinery pkg/apis/meta/v1/validation/validation.go ValidateDryRun (field.NotSupported of the
    whole []string), wrapped by handlers/{create,update,patch,delete}.go as errors.NewInvalid(<Kind>Options)."""
    apps.create_namespaced_deployment("default", deployment())
    calls = {
        "create": lambda: apps.create_namespaced_deployment("default", deployment("other"), dry_run="Foo"),
        "replace": lambda: apps.replace_namespaced_deployment("worker", "default", deployment(), dry_run="Foo"),
        "patch": lambda: apps.patch_namespaced_deployment("worker", "default", {"spec": {"replicas": 1}},
                                                          dry_run="Foo"),
        "delete": lambda: apps.delete_namespaced_deployment("worker", "default", dry_run="Foo"),
    }
    code, status = refused(calls[method])
    assert code == 422
    assert status["message"] == (f'{kind}.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{{"Foo"}}: '
                                 'supported values: "All"')
    assert status["details"]["causes"] == [{"reason": "FieldValueNotSupported", "field": "dryRun",
                                            "message": 'Unsupported value: []string{"Foo"}: supported values: "All"'}]
    assert apps.read_namespaced_deployment("worker", "default").spec.replicas == 2


# ----------------------------------------------------------------------------------------------------------------
# Server-side apply. Documented in "Server-Side Apply" (kubernetes.io/docs/reference/using-api/server-side-apply/);
# implemented by k8s.io/apimachinery pkg/util/managedfields/internal/ (structuredmerge.go, managedfieldsupdater.go,
# conflict.go) over sigs.k8s.io/structured-merge-diff.

def test_apply_creates_an_absent_object_owned_by_its_manager_as_kube_apiserver_does(
        api: client.ApiClient, apps: client.AppsV1Api) -> None:
    created = apply_deployment(apps, deployment(replicas=3), "ci")
    assert created.spec.replicas == 3
    (entry,) = api.sanitize_for_serialization(created)["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"], entry["apiVersion"], entry["fieldsType"]) == \
        ("ci", "Apply", "apps/v1", "FieldsV1")
    fields = entry["fieldsV1"]
    assert fields["f:spec"]["f:replicas"] == {}
    assert fields["f:metadata"] == {"f:labels": {"f:app": {}}}  # name and namespace are the server's
    container = fields["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"main"}']
    assert container == {".": {}, "f:image": {}, "f:name": {}}


def test_apply_answers_201_when_it_creates_and_200_when_it_updates_as_kube_apiserver_does(
        fake_kube: FakeKube) -> None:
    """handlers/patch.go: an apply may create (forceAllowCreate) and then answers 201 Created."""
    url = f"{fake_kube.url}/apis/apps/v1/namespaces/default/deployments/worker?fieldManager=ci"
    for expected in (201, 200):
        request = urllib.request.Request(url, data=yaml.safe_dump(deployment()).encode(), method="PATCH",
                                         headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": APPLY})
        with urllib.request.urlopen(request, timeout=5, context=fake_kube.client_ssl_context()) as answer:
            assert answer.status == expected


def test_reapplying_the_same_manifest_is_a_no_op_as_kube_apiserver_does(
        fake_kube: FakeKube, custom: client.CustomObjectsApi) -> None:
    """The rule's sources are an atomic list: the merge takes the applied item without the weight the CRD
    defaults, so the apply changes the entry's time, and defaulting gives the weight back. equality.go
    IgnoreManagedFieldsTimestampsTransformer keeps the old time where that is the only change: a no-op in any
    second (until 2026-11-28 the fake stored it when the wall clock's second had moved: 1 run in 12)."""
    first = apply_rule(custom, rule(), "ci")
    revision = fake_kube.store.revision
    applied = first["metadata"]["managedFields"][0]["time"]
    while now_rfc3339() == applied:  # the next second, at most one away
        time.sleep(0.05)
    again = apply_rule(custom, rule(), "ci")
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert again["metadata"]["generation"] == 1
    assert again["metadata"]["managedFields"] == first["metadata"]["managedFields"]  # not even a new time
    assert fake_kube.store.revision == revision


def test_two_appliers_setting_one_field_differently_conflict_with_the_real_message(apps: client.AppsV1Api) -> None:
    """conflict.go getConflictMessage/printManager: an applier is named by its manager only; the cause type is
    FieldManagerConflict and the field a fieldpath.Path string."""
    apply_deployment(apps, deployment(replicas=2), "team-a")
    code, status = refused(apply_deployment, apps, deployment(replicas=3), "team-b")
    assert (code, status["reason"]) == (409, "Conflict")
    assert status["message"] == 'Apply failed with 1 conflict: conflict with "team-a": .spec.replicas'
    assert status["details"]["causes"] == [{"reason": "FieldManagerConflict", "message": 'conflict with "team-a"',
                                            "field": ".spec.replicas"}]
    assert apps.read_namespaced_deployment("worker", "default").spec.replicas == 2


def test_an_apply_conflicts_with_an_update_manager_named_with_its_api_version(apps: client.AppsV1Api) -> None:
    """printManager: an Update manager is `"name" using <apiVersion>`; one through a subresource says so."""
    apps.create_namespaced_deployment("default", deployment(replicas=2), field_manager="mgr")
    code, status = refused(apply_deployment, apps, deployment(replicas=5), "kubectl")
    assert code == 409
    assert status["message"] == 'Apply failed with 1 conflict: conflict with "mgr" using apps/v1: .spec.replicas'
    apps.patch_namespaced_deployment_scale("worker", "default", {"spec": {"replicas": 4}}, field_manager="queuescale")
    code, status = refused(apply_deployment, apps, deployment(replicas=5), "kubectl")
    assert status["message"] == ('Apply failed with 1 conflict: conflict with "queuescale" with subresource "scale" '
                                 "using apps/v1: .spec.replicas")


def test_several_conflicts_are_listed_by_manager(apps: client.AppsV1Api) -> None:
    apps.create_namespaced_deployment("default", deployment(replicas=2), field_manager="mgr")
    changed = deployment(replicas=5)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "worker:2"
    code, status = refused(apply_deployment, apps, changed, "kubectl")
    assert code == 409
    assert status["message"] == ('Apply failed with 2 conflicts: conflicts with "mgr" using apps/v1:\n'
                                 "- .spec.replicas\n"
                                 '- .spec.template.spec.containers[name="main"].image')


def test_force_takes_ownership_of_the_conflicting_fields_as_kube_apiserver_does(
        api: client.ApiClient, apps: client.AppsV1Api) -> None:
    apply_deployment(apps, deployment(replicas=2), "team-a")
    forced = api.sanitize_for_serialization(apply_deployment(apps, deployment(replicas=3), "team-b", force=True))
    assert forced["spec"]["replicas"] == 3
    owners = managers(forced)
    assert "f:replicas" in owners["team-b/Apply/"]["fieldsV1"]["f:spec"]
    assert "f:replicas" not in owners["team-a/Apply/"]["fieldsV1"]["f:spec"]


def test_appliers_agreeing_on_a_value_share_it_without_conflict(apps: client.AppsV1Api) -> None:
    apply_deployment(apps, deployment(replicas=2), "team-a")
    apply_deployment(apps, deployment(replicas=2), "team-b")
    assert apps.read_namespaced_deployment("worker", "default").spec.replicas == 2


def test_a_field_left_out_of_the_applied_config_is_removed_unless_another_manager_owns_it(
        custom: client.CustomObjectsApi) -> None:
    with_labels = rule()
    with_labels["metadata"]["labels"] = {"team": "shop", "tier": "web"}
    apply_rule(custom, with_labels, "team-a")
    # team-b applies only the label: applying the same sources would conflict, since the live list carries the
    # CRD's defaults (weight) and an atomic list is compared whole, before defaulting.
    shared = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "QueueScaler",
              "metadata": {"name": "orders", "labels": {"tier": "web"}}}
    apply_rule(custom, shared, "team-b")
    without = rule()
    without["metadata"]["labels"] = {}
    after = apply_rule(custom, without, "team-a")
    assert after["metadata"]["labels"] == {"tier": "web"}  # team's label is gone, tier is team-b's too
    defaulted = custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "orders")["spec"]["fallback"]
    with_fallback = rule(fallback={"mode": "fixed", "replicas": 2})
    apply_rule(custom, with_fallback, "team-a")
    dropped = apply_rule(custom, rule(), "team-a")
    assert dropped["spec"]["fallback"] == defaulted  # removed, then defaulted again as on a create
    assert dropped["metadata"]["generation"] == 3


def test_associative_lists_merge_by_key_and_atomic_lists_are_owned_whole(
        apps: client.AppsV1Api, custom: client.CustomObjectsApi) -> None:
    """Built-in kinds: containers are a list map keyed by name (k8s.io/api core/v1 types.go, listType=map); a
    CRD list without x-kubernetes-list-type is atomic (the QueueScaler's sources)."""
    apply_deployment(apps, deployment(), "team-a")
    sidecar = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "worker"},
               "spec": {"template": {"spec": {"containers": [{"name": "proxy", "image": "envoy:1"}]}}}}
    merged = apply_deployment(apps, sidecar, "team-b")
    assert [c.name for c in merged.spec.template.spec.containers] == ["main", "proxy"]
    apply_rule(custom, rule(), "team-a")
    other = rule(sources=[{"type": "redis-list", "listName": "jobs", "host": "redis"}])
    code, status = refused(apply_rule, custom, other, "team-b")
    assert code == 409
    assert status["message"] == 'Apply failed with 1 conflict: conflict with "team-a": .spec.sources'


def test_a_crd_list_map_merges_by_its_declared_keys(fake_kube: FakeKube, api: client.ApiClient) -> None:
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "widgets.example.com"},
           "spec": {"group": "example.com", "scope": "Namespaced",
                    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                        "type": "object", "properties": {"spec": {"type": "object", "properties": {
                            "ports": {"type": "array", "x-kubernetes-list-type": "map",
                                      "x-kubernetes-list-map-keys": ["port"],
                                      "items": {"type": "object", "required": ["port"], "properties": {
                                          "port": {"type": "integer"}, "name": {"type": "string"}}}},
                            "tags": {"type": "array", "x-kubernetes-list-type": "set",
                                     "items": {"type": "string"}}}}}}}}]}}
    client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
    widgets = client.CustomObjectsApi(api)

    def apply_widget(spec: dict[str, Any], manager: str) -> Any:
        body = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec}
        return widgets.patch_namespaced_custom_object("example.com", "v1", "default", "widgets", "w", body,
                                                      field_manager=manager, _content_type=APPLY)

    apply_widget({"ports": [{"port": 80, "name": "http"}], "tags": ["a"]}, "team-a")
    merged = apply_widget({"ports": [{"port": 443, "name": "https"}], "tags": ["b"]}, "team-b")
    assert merged["spec"] == {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}],
                              "tags": ["a", "b"]}
    code, status = refused(apply_widget, {"ports": [{"port": 80, "name": "web"}]}, "team-b")
    assert code == 409
    assert status["message"] == 'Apply failed with 1 conflict: conflict with "team-a": .spec.ports[port=80].name'
    code, status = refused(widgets.create_namespaced_custom_object, "example.com", "v1", "default", "widgets",
                           {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "dup"},
                            "spec": {"tags": ["x", "x"]}})
    assert code == 422
    assert status["message"] == 'Widget.example.com "dup" is invalid: spec.tags[1]: Duplicate value: "x"'


def test_apply_without_a_field_manager_is_refused_as_kube_apiserver_does(api: client.ApiClient) -> None:
    """ValidatePatchOptions: fieldManager is required for apply; force is forbidden for any other patch."""
    apps = client.AppsV1Api(api)
    code, status = refused(apps.patch_namespaced_deployment, "worker", "default", deployment(), _content_type=APPLY)
    assert (code, status["message"]) == (422, 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required '
                                              'value: is required for apply patch')
    apps.create_namespaced_deployment("default", deployment())
    code, status = refused(apps.patch_namespaced_deployment, "worker", "default", {"spec": {"replicas": 1}},
                           force=True)
    assert (code, status["message"]) == (422, 'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not '
                                              "be specified for non-apply patch")


def test_an_applied_configuration_of_another_kind_or_with_managed_fields_is_refused(apps: client.AppsV1Api) -> None:
    """managedfields internal/versioncheck.go and structuredmerge.go Apply: 400 BadRequest."""
    wrong = {**deployment(), "apiVersion": "apps/v1beta2"}
    code, status = refused(apply_deployment, apps, wrong, "ci")
    assert (code, status["message"]) == (400, "invalid object type: apps/v1beta2, Kind=Deployment")
    owned = deployment()
    owned["metadata"]["managedFields"] = [{"manager": "me", "operation": "Apply"}]
    code, status = refused(apply_deployment, apps, owned, "ci")
    assert (code, status["message"]) == (400, "metadata.managedFields must be nil")


def test_every_write_records_its_manager_as_an_update_as_kube_apiserver_does(
        api: client.ApiClient, apps: client.AppsV1Api) -> None:
    """managedFieldsUpdater.Update: a write's manager (fieldManager, else the User-Agent up to its first "/")
    takes the fields it changed; a status write is recorded against the status subresource."""
    apps.create_namespaced_deployment("default", deployment())
    apps.patch_namespaced_deployment("worker", "default", {"spec": {"replicas": 4}}, field_manager="hpa")
    stored = api.sanitize_for_serialization(apps.read_namespaced_deployment("worker", "default"))
    owners = managers(stored)
    assert "f:replicas" in owners["hpa/Update/"]["fieldsV1"]["f:spec"]
    assert "f:replicas" not in owners["OpenAPI-Generator/Update/"]["fieldsV1"]["f:spec"]  # the python client
    assert "kube-controller-manager/Update/status" in owners  # the fake's workload controller wrote status
    assert "f:status" in owners["kube-controller-manager/Update/status"]["fieldsV1"]


# ----------------------------------------------------------------------------------------------------------------
# Secrets: stringData is write-only, merged into data (k8s.io/kubernetes pkg/apis/core/v1/conversion.go,
# Convert_v1_Secret_To_core_Secret, "StringData overwrites Data"); the Secret API reference: "stringData ... is
# never output when reading from the API".

def test_string_data_is_merged_into_data_and_never_returned_as_kube_apiserver_does(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_secret("default", {
        "metadata": {"name": "s"}, "data": {"k": base64.b64encode(b"old").decode(), "keep": "a2VlcA=="},
        "stringData": {"k": "new", "plain": "text"}})
    assert created.string_data is None and created.type == "Opaque"
    assert {k: base64.b64decode(v).decode() for k, v in created.data.items()} == \
        {"k": "new", "keep": "keep", "plain": "text"}
    patched = core.patch_namespaced_secret("s", "default", {"stringData": {"keep": "changed"}})
    assert base64.b64decode(patched.data["keep"]) == b"changed" and patched.string_data is None
    assert core.read_namespaced_secret("s", "default").string_data is None


# ----------------------------------------------------------------------------------------------------------------
# metadata.generation: the registries' PrepareForUpdate compare decoded, hence defaulted, objects
# (apiextensions-apiserver pkg/registry/customresource/strategy.go; k8s.io/kubernetes
# pkg/registry/apps/deployment/strategy.go also bumps on annotation changes).

def test_rewriting_an_unchanged_rule_without_its_defaults_keeps_generation_as_kube_apiserver_does(
        fake_kube: FakeKube, custom: client.CustomObjectsApi) -> None:
    created = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, rule())
    revision = fake_kube.store.revision
    again = copy.deepcopy(rule())
    again["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    replaced = custom.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "orders", again)
    patched = custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "orders",
                                                    {"spec": rule()["spec"]})
    for result in (replaced, patched):
        assert result["metadata"]["generation"] == 1
        assert result["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert fake_kube.store.revision == revision


def test_status_and_metadata_changes_keep_generation_and_spec_changes_bump_it(
        custom: client.CustomObjectsApi, apps: client.AppsV1Api) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, rule())
    custom.patch_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL, "orders",
                                                 {"status": {"desiredReplicas": 3}})
    labelled = custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "orders",
                                                     {"metadata": {"labels": {"a": "b"},
                                                                   "annotations": {"c": "d"}}})
    assert labelled["metadata"]["generation"] == 1
    bumped = custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "orders",
                                                   {"spec": {"maxReplicas": 11}})
    assert bumped["metadata"]["generation"] == 2
    apps.create_namespaced_deployment("default", deployment())
    annotated = apps.patch_namespaced_deployment("worker", "default", {"metadata": {"annotations": {"a": "b"}}})
    assert annotated.metadata.generation == 2  # the Deployment registry's own rule


# ----------------------------------------------------------------------------------------------------------------
# Validation errors, worded as the real server words them. The table transcribes, for the QueueScaler CRD:
# kube-openapi pkg/validation/errors/schema.go (the "<path> in body ..." texts), apiextensions-apiserver
# pkg/apiserver/validation/validation.go kubeOpenAPIResultToFieldErrors (which field error each becomes),
# apimachinery pkg/util/validation/field/errors.go ErrorBody ("Invalid value: 0: ...", quoted strings,
# "Too long: may not be more than N bytes", "Too many: N: must have at most M items"), pkg/api/errors NewInvalid
# (the "[a, b]" aggregate) and apiextensions-apiserver pkg/registry/customresource/strategy.go hasBlockingErr (CEL
# rules do not run after a type, required, enum, maxLength or maxItems failure, and a note says so).

NOTE = ("<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; "
        "correct the existing errors to complete validation")
SOURCE = {"type": "azure-queue", "queueName": "orders", "identity": "workload", "accountName": "store"}
PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def _set(path: str, value: Any) -> Any:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if value is _DELETE:
            del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return change


_DELETE = object()

CASES: list[tuple[str, Any, list[tuple[str, str, str]]]] = [
    ("minimum", _set("spec.maxReplicas", 0), [
        ("FieldValueInvalid", "spec.maxReplicas",
         "Invalid value: 0: spec.maxReplicas in body should be greater than or equal to 1")]),
    ("required", _set("spec.maxReplicas", _DELETE), [
        ("FieldValueRequired", "spec.maxReplicas", "Required value")]),
    ("enum", _set("spec.sources.0.type", "kafka"), [
        ("FieldValueNotSupported", "spec.sources[0].type",
         'Unsupported value: "kafka": supported values: "azure-queue", "redis-list", "sql-table", "rabbitmq", '
         '"aws-sqs"')]),
    ("type", _set("spec.maxReplicas", "ten"), [
        ("FieldValueTypeInvalid", "spec.maxReplicas",
         'Invalid value: "string": spec.maxReplicas in body must be of type integer: "string"')]),
    ("type-and-enum", _set("spec.sources.0.type", 5), [
        ("FieldValueTypeInvalid", "spec.sources[0].type",
         'Invalid value: "integer": spec.sources[0].type in body must be of type string: "integer"'),
        ("FieldValueNotSupported", "spec.sources[0].type",
         'Unsupported value: 5: supported values: "azure-queue", "redis-list", "sql-table", "rabbitmq", "aws-sqs"')]),
    ("maxLength", _set("spec.scaleTargetRef.name", "w" * 254), [
        ("FieldValueTooLong", "spec.scaleTargetRef.name", "Too long: may not be more than 253 bytes")]),
    ("pattern", _set("spec.scaleTargetRef.name", "Bad_Name"), [
        ("FieldValueInvalid", "spec.scaleTargetRef.name",
         f"Invalid value: \"Bad_Name\": spec.scaleTargetRef.name in body should match '{PATTERN}'")]),
    ("minItems", _set("spec.sources", []), [
        ("FieldValueInvalid", "spec.sources", "Invalid value: 0: spec.sources in body should have at least 1 items")]),
    ("maxItems", _set("spec.sources", [SOURCE] * 17), [
        ("FieldValueTooMany", "spec.sources", "Too many: 17: must have at most 16 items")]),
    ("cel", _set("spec.minReplicas", 11), [
        ("FieldValueInvalid", "spec.maxReplicas", 'Invalid value: "object": maxReplicas must be >= minReplicas')]),
]


@pytest.mark.parametrize(("change", "expected"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_validation_errors_are_worded_as_kube_apiserver_words_them(
        custom: client.CustomObjectsApi, change: Any, expected: list[tuple[str, str, str]]) -> None:
    doc = rule("x")
    change(doc)
    code, status = refused(custom.create_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, doc)
    blocking = expected[0][0] in ("FieldValueRequired", "FieldValueNotSupported", "FieldValueTooLong",
                                  "FieldValueTooMany", "FieldValueTypeInvalid")
    lines = [f"{field}: {message}" for _, field, message in expected] + ([NOTE] if blocking else [])
    summary = lines[0] if len(lines) == 1 else "[" + ", ".join(lines) + "]"
    assert (code, status["reason"]) == (422, "Invalid")
    assert status["message"] == f'QueueScaler.queuescale.io "x" is invalid: {summary}'
    causes = [{"reason": r, "field": f, "message": m} for r, f, m in expected]
    if blocking:
        causes.append({"reason": "FieldValueInvalid", "field": "<nil>", "message": NOTE.removeprefix("<nil>: ")})
    assert status["details"] == {"name": "x", "group": GROUP, "kind": "QueueScaler", "causes": causes}


def test_a_rule_without_a_message_reports_the_rule_itself() -> None:
    """ruleMessageOrDefault: `failed rule: <rule>`; the value shown is the node's schema type."""
    from tests.fakekube.validation import cel_errors

    schema = {"type": "object", "properties": {"n": {"type": "integer",
                                                     "x-kubernetes-validations": [{"rule": "self > 1"}]}}}
    (error,) = cel_errors({"n": 0}, schema)
    assert str(error) == 'n: Invalid value: "integer": failed rule: self > 1'
