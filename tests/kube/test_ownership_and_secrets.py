"""End to end: one autoscaler per target, and Secrets used only by the rules their owner allows.

`queuescale run` in a subprocess against the fake API server (and Azurite): two rules on one Deployment, an HPA
on a rule's target, and rules naming Secrets with and without the `queuescale.io/allowed-rules` annotation. For
Secrets, a loopback HTTP listener plays a RabbitMQ management API and records every request it gets, so "nothing
was sent" is a fact about the wire, not about the operator's own account of itself.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as kube_client

from controller.kube.ownership import HpaIndex, Ownership, TargetClaims, TargetKey
from controller.kube.secrets import ALLOWED_RULES_ANNOTATION, ALLOWED_SOURCES_ANNOTATION, SecretCache
from controller.model.rule import API_GROUP, API_VERSION
from controller.model.secrets import SecretUnavailable
from tests.azurite import Azurite
from tests.chart import helm, normalised, render
from tests.fakekube.server import FakeKube
from tests.kube_helpers import custom
from tests.operator_harness import (
    NS,
    ROOT,
    RULES_API,
    Operator,
    condition,
    deployment,
    events,
    make_queue,
    queue_name,
    replicas,
    rule,
    secret,
    status,
    wait_for,
)

# ---------------------------------------------------------------------------------------------- helpers


def ready(kube: FakeKube, name: str) -> dict[str, Any]:
    return condition(kube, name, "Ready")


def ready_with(kube: FakeKube, name: str, reason: str, timeout: float = 20.0) -> dict[str, Any]:
    found: dict[str, Any] = wait_for(
        f"rule {name} to be Ready with reason {reason}",
        lambda: ready(kube, name).get("reason") == reason and ready(kube, name), timeout=timeout,
        describe=lambda: str(ready(kube, name)))
    return found


def wait_ready(kube: FakeKube, name: str) -> None:
    wait_for(f"rule {name} Ready", lambda: ready(kube, name).get("status") == "True",
             describe=lambda: str(ready(kube, name)))


def hpa(api: kube_client.ApiClient, name: str, target: str) -> None:
    """An autoscaling/v2 HorizontalPodAutoscaler on Deployment `target`."""
    kube_client.AutoscalingV2Api(api).create_namespaced_horizontal_pod_autoscaler(NS, {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": name},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                 "minReplicas": 1, "maxReplicas": 10,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                     "type": "Utilization", "averageUtilization": 80}}}]}})


class Recorded:
    """One request the listener got: its path and its Authorization header, decoded when Basic."""

    def __init__(self, path: str, authorization: str | None) -> None:
        self.path = path
        self.authorization = authorization

    @property
    def basic(self) -> str | None:
        if not self.authorization or not self.authorization.startswith("Basic "):
            return None
        return base64.b64decode(self.authorization[6:]).decode()


class ManagementApi:
    """A RabbitMQ management API stand-in on 127.0.0.1 that answers every queue with 7 ready messages and keeps
    every request, as the host a rule author names would."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                listener.requests.append(Recorded(self.path, self.headers.get("Authorization")))
                body = json.dumps({"messages_ready": 7, "messages_unacknowledged": 0}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="management-api", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def to_queue(self, queue: str) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith(f"/{queue}")]


@pytest.fixture
def management_api() -> Iterator[ManagementApi]:
    listener = ManagementApi()
    listener.thread.start()
    try:
        yield listener
    finally:
        listener.server.shutdown()
        listener.server.server_close()
        listener.thread.join(timeout=5)


def rabbit_rule(api: kube_client.ApiClient, name: str, url: str, secret_name: str, key: str) -> None:
    """A rule with one rabbitmq source on `url` (queue = the rule's name) whose password comes from a Secret."""
    deployment(api, name, 0)
    rule(api, name, "unused", secret_name, sources=[
        {"type": "rabbitmq", "queue": name, "managementURL": url,
         "passwordSecretRef": {"name": secret_name, "key": key}}])


# ---------------------------------------------------------------------------------------------- one owner per target


def test_the_oldest_rule_owns_a_shared_deployment_and_the_next_takes_over_when_it_is_deleted(
    azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator]
) -> None:
    """Two rules on one Deployment used to take turns (10 -> 40 -> 20 -> 40). The older (by creationTimestamp,
    which the API server sets once, at create: k8s.io/apimachinery ObjectMeta) keeps it even when its name sorts
    after the newer's, the newer is refused with TargetConflict, and takes over once the older is deleted."""
    deployment(api, "shared", 0)
    secret(api, "shared-queue", {"connection": azurite.connection_string})
    older_queue, newer_queue = make_queue(azurite, queue_name(), 50), make_queue(azurite, queue_name(), 150)
    rule(api, "z-older", older_queue.queue_name, "shared-queue", scaleTargetRef={"name": "shared"})
    time.sleep(1.1)  # creationTimestamp has one-second resolution: make the order the times', not the names'
    rule(api, "a-newer", newer_queue.queue_name, "shared-queue", scaleTargetRef={"name": "shared"})
    operators()

    wait_for("the older rule's 5 replicas", lambda: replicas(kube, "shared") == 5)
    refused = ready_with(kube, "a-newer", "TargetConflict")
    assert refused["status"] == "False"
    assert "Deployment 'shared': already scaled by rule 'z-older' (the oldest rule on it, created " in (
        refused["message"])
    # The owner's status is written after its scale, not with it: on a loaded machine the newer rule's refusal can
    # be written first (a CI run found z-older still without conditions here).
    wait_ready(kube, "z-older")
    assert condition(kube, "a-newer", "Active")["reason"] == "TargetConflict"
    warning = wait_for("a TargetConflict event", lambda: [e for e in events(kube, "a-newer")
                                                          if e["reason"] == "TargetConflict"])
    assert warning[0]["type"] == "Warning" and "rule 'z-older'" in warning[0]["message"]
    # The newer still polls: its count is in its status, for whoever looks, and for a warm handover.
    wait_for("the newer rule's count", lambda: [s.get("count") for s in status(kube, "a-newer").get("sources", [])]
             == [150])
    time.sleep(3)  # three of the newer rule's ticks: it must not touch the Deployment
    assert replicas(kube, "shared") == 5
    scale_writes = [r for r in kube.requests if r.method in ("PUT", "PATCH") and r.path.endswith("/shared/scale")]
    assert len(scale_writes) == 1, "only the owner's one scale-up may write the Deployment's scale"

    custom(api).delete_namespaced_custom_object(API_GROUP, API_VERSION, NS, "queuescalers", "z-older")
    deleted = time.monotonic()
    wait_for("the newer rule to take over and scale to 15", lambda: replicas(kube, "shared") == 15, timeout=10)
    assert time.monotonic() - deleted < 1.0 + 3.0  # one polling interval, plus the watch and a loaded machine
    wait_for("the newer rule Ready", lambda: ready(kube, "a-newer").get("status") == "True")


def test_a_rule_pointed_at_another_target_releases_the_shared_one(
    azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator]
) -> None:
    deployment(api, "shared", 0)
    deployment(api, "own", 0)
    secret(api, "q", {"connection": azurite.connection_string})
    first, second = make_queue(azurite, queue_name(), 30), make_queue(azurite, queue_name(), 70)
    rule(api, "first", first.queue_name, "q", scaleTargetRef={"name": "shared"})
    time.sleep(1.1)
    rule(api, "second", second.queue_name, "q", scaleTargetRef={"name": "shared"})
    operators()
    ready_with(kube, "second", "TargetConflict")
    wait_for("the first rule's 3 replicas", lambda: replicas(kube, "shared") == 3)
    custom(api).patch_namespaced_custom_object(API_GROUP, API_VERSION, NS, "queuescalers", "first",
                                               {"spec": {"scaleTargetRef": {"name": "own"}}})
    wait_for("the second rule to own 'shared'", lambda: replicas(kube, "shared") == 7, timeout=10)
    wait_for("the first rule to scale its own target", lambda: replicas(kube, "own") == 3, timeout=10)


def test_an_hpa_on_the_target_stops_the_rule_as_keda_refuses_a_scaledobject(
    azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator]
) -> None:
    """KEDA's admission webhook refuses a ScaledObject whose target an HPA it does not own already scales
    (kedacore/keda apis/keda/v1alpha1/scaledobject_webhook.go, verifyHpas). The operator refuses at every tick:
    HPAConflict, an event naming the HPA, no scaling; deleting the HPA hands the target back."""
    deployment(api, "web", 1)
    hpa(api, "web-cpu", "web")
    secret(api, "web-queue", {"connection": azurite.connection_string})
    queue = make_queue(azurite, queue_name(), 100)
    rule(api, "web", queue.queue_name, "web-queue")
    operators()

    refused = ready_with(kube, "web", "HPAConflict")
    assert refused["status"] == "False"
    assert "Deployment 'web': already scaled by the HorizontalPodAutoscaler 'web-cpu'" in refused["message"]
    assert "kubectl delete hpa web-cpu -n shop" in refused["message"]
    warning = wait_for("an HPAConflict event", lambda: [e for e in events(kube, "web") if e["reason"] == "HPAConflict"])
    assert "'web-cpu'" in warning[0]["message"]
    time.sleep(2.5)
    assert replicas(kube, "web") == 1

    # An HPA on another Deployment is no conflict; and with this one gone, the rule scales on its next tick.
    hpa(api, "other-cpu", "other")
    kube_client.AutoscalingV2Api(api).delete_namespaced_horizontal_pod_autoscaler("web-cpu", NS)
    wait_for("10 replicas once the HPA is gone", lambda: replicas(kube, "web") == 10, timeout=10)
    wait_for("Ready again", lambda: ready(kube, "web").get("status") == "True")


def test_an_hpa_created_later_stops_a_scaling_rule_at_its_next_tick(
    azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator]
) -> None:
    """A rule that trusts the scale it last read does not read its target every tick; the HPA watch makes it
    read again, so the conflict shows within a polling interval, not after --target-refresh."""
    deployment(api, "api", 0)
    secret(api, "api-queue", {"connection": azurite.connection_string})
    queue = make_queue(azurite, queue_name(), 20)
    rule(api, "api", queue.queue_name, "api-queue")
    operators()
    wait_for("2 replicas", lambda: replicas(kube, "api") == 2)
    wait_for("Ready", lambda: ready(kube, "api").get("status") == "True")
    hpa(api, "api-cpu", "api")
    created = time.monotonic()
    ready_with(kube, "api", "HPAConflict", timeout=10)
    assert time.monotonic() - created < 5.0
    for i in range(60):
        queue.send_message(str(i))
    time.sleep(2.5)
    assert replicas(kube, "api") == 2


# ---------------------------------------------------------------------------------------------- Secrets


def test_a_secret_is_used_only_by_the_rules_its_annotation_names(
    azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator],
    management_api: ManagementApi,
) -> None:
    """The leak of the issue: a rabbitmq source whose managementURL is the author's listener, its
    passwordSecretRef naming the Azure connection string another team's Secret holds for its own rule. The
    operator read any key of any Secret of the namespace for any field of any rule; now the Secret's owner says
    which rules may use it."""
    connection = azurite.connection_string
    # The Azure team's Secret, for its own rule only; a Secret with no annotation; one for `*`.
    secret(api, "orders-queue", {"connection": connection}, allowed_rules="orders-worker")
    secret(api, "plain", {"password": "plain-password"}, allowed_rules=None)
    secret(api, "shared-rabbit", {"password": "shared-password"}, allowed_rules="*")
    secret(api, "named-rabbit", {"password": "named-password"}, allowed_rules=" billing , reader ")
    url = management_api.url
    rabbit_rule(api, "sneaky", url, "orders-queue", "connection")
    rabbit_rule(api, "unannotated", url, "plain", "password")
    rabbit_rule(api, "anyone", url, "shared-rabbit", "password")
    rabbit_rule(api, "reader", url, "named-rabbit", "password")
    operator = operators()

    refused = ready_with(kube, "sneaky", "SecretNotAllowed")
    assert refused["status"] == "False"
    assert ("kubectl annotate secret orders-queue -n shop --overwrite "
            "queuescale.io/allowed-rules=orders-worker,sneaky") in refused["message"]
    assert "does not allow rule 'sneaky'" in refused["message"]
    bare = ready_with(kube, "unannotated", "SecretNotAllowed")
    assert "kubectl annotate secret plain -n shop queuescale.io/allowed-rules=unannotated" in bare["message"]
    assert [s["error"]["code"] for s in status(kube, "sneaky")["sources"]] == ["SecretNotAllowed"]
    assert any(e["reason"] == "SecretNotAllowed" for e in events(kube, "sneaky"))

    for name, password in (("anyone", "shared-password"), ("reader", "named-password")):
        wait_ready(kube, name)
        sent = management_api.to_queue(name)
        assert sent and {r.basic for r in sent} == {f"guest:{password}"}
    assert [s["count"] for s in status(kube, "anyone")["sources"]] == [7]

    time.sleep(1.5)  # more ticks of the refused rules
    assert management_api.to_queue("sneaky") == [] and management_api.to_queue("unannotated") == []
    for recorded in management_api.requests:
        assert connection not in (recorded.basic or "") and "plain-password" not in (recorded.basic or "")
    written = yaml.safe_dump([kube.list_objects(RULES_API, "QueueScaler", NS), kube.events(NS)])
    logged = operator.log_path.read_text()
    for value in (connection, azurite.key, "plain-password", "shared-password", "named-password"):
        assert value not in written and value not in logged and value not in operator.metrics()


def test_a_secret_for_azure_queue_sources_is_never_sent_as_another_kinds_password(
    azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator],
    management_api: ManagementApi,
) -> None:
    """Allowing a rule is trusting whoever edits it: they could add a rabbitmq source to it and name the Azure
    connection string as its password. The owner's queuescale.io/allowed-sources: azure-queue keeps the string
    where docs/azure-queue.md says it goes (signed requests to the endpoint it names), rule allowed or not."""
    connection = azurite.connection_string
    kube_client.CoreV1Api(api).create_namespaced_secret(NS, {
        "metadata": {"name": "orders-queue", "annotations": {"queuescale.io/allowed-rules": "orders-worker",
                                                              "queuescale.io/allowed-sources": "azure-queue"}},
        "data": {"connection": base64.b64encode(connection.encode()).decode()}})
    queue = make_queue(azurite, queue_name(), 12)
    deployment(api, "orders-worker", 0)
    rule(api, "orders-worker", queue.queue_name, "orders-queue", sources=[
        {"type": "azure-queue", "queueName": queue.queue_name,
         "connectionSecretRef": {"name": "orders-queue", "key": "connection"}},
        {"type": "rabbitmq", "queue": "orders-worker", "managementURL": management_api.url,
         "passwordSecretRef": {"name": "orders-queue", "key": "connection"}}])
    operator = operators()
    refused = ready_with(kube, "orders-worker", "SecretNotAllowed")
    assert "is for azure-queue sources only (annotation queuescale.io/allowed-sources), not rabbitmq" in (
        refused["message"])
    sources = wait_for("the azure-queue source's count", lambda: (s := status(kube, "orders-worker").get("sources"))
                       and s[0].get("count") == 12 and s)
    assert sources[1]["error"]["code"] == "SecretNotAllowed"
    time.sleep(1.5)
    assert management_api.requests == []
    assert connection not in operator.log_path.read_text()


def test_annotating_the_secret_lets_the_rule_use_it_without_a_restart(
    kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator], management_api: ManagementApi,
) -> None:
    secret(api, "later", {"password": "later-password"}, allowed_rules=None)
    rabbit_rule(api, "patient", management_api.url, "later", "password")
    operators("--secret-ttl", "1s")
    message = ready_with(kube, "patient", "SecretNotAllowed")["message"]
    command = message.split("allow it with: ", 1)[1]
    assert command == "kubectl annotate secret later -n shop queuescale.io/allowed-rules=patient"
    name, annotation = command.split(" ")[-1].split("=")[0], command.split("=")[1]
    kube_client.CoreV1Api(api).patch_namespaced_secret("later", NS, {"metadata": {"annotations": {name: annotation}}})
    wait_for("Ready once annotated", lambda: ready(kube, "patient").get("status") == "True", timeout=10)
    assert {r.basic for r in management_api.to_queue("patient")} == {"guest:later-password"}


def test_namespace_access_keeps_the_old_behaviour_for_clusters_that_want_it(
    kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator], management_api: ManagementApi,
) -> None:
    secret(api, "plain", {"password": "plain-password"}, allowed_rules=None)
    rabbit_rule(api, "trusted", management_api.url, "plain", "password")
    operators("--secret-access", "namespace")
    wait_for("Ready", lambda: ready(kube, "trusted").get("status") == "True",
             describe=lambda: str(ready(kube, "trusted")))
    assert {r.basic for r in management_api.to_queue("trusted")} == {"guest:plain-password"}


# ---------------------------------------------------------------------------------------------- RBAC


def test_the_chart_renders_a_secrets_role_per_namespace_instead_of_the_cluster_wide_get() -> None:
    docs = render("--set", "rbac.secrets.namespaces={shop,billing}", "--set", "rbac.secrets.resourceNames={orders-queue}",
                  "--set", "secretAccess=namespace")
    cluster_role = next(d for d in docs if d["kind"] == "ClusterRole")
    assert not any("secrets" in r["resources"] for r in cluster_role["rules"])
    roles = {d["metadata"]["namespace"]: d for d in docs if d["kind"] == "Role" and "secrets" in
             d["metadata"]["name"]}
    assert sorted(roles) == ["billing", "shop"]
    assert roles["shop"]["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["orders-queue"],
                                       "verbs": ["get"]}]
    bindings = {d["metadata"]["namespace"]: d for d in docs if d["kind"] == "RoleBinding"
                and "secrets" in d["metadata"]["name"]}
    assert sorted(bindings) == ["billing", "shop"]
    assert bindings["shop"]["subjects"] == [{"kind": "ServiceAccount", "name": "queuescale-operator",
                                             "namespace": "queuescale-system"}]
    args = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--secret-access=namespace" in args
    # Both grant HPAs read-only, for the HPAConflict check.
    assert {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ["list", "watch"]} in (
        cluster_role["rules"])
    assert "--secret-access" not in " ".join(
        next(d for d in render() if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"])


def test_the_optional_manifest_is_what_the_chart_renders_for_one_namespace() -> None:
    """manifests/optional/rbac-secrets-namespaced.yaml, for `shop`, is the chart's rbac.secrets.namespaces=[shop]."""
    plain = [d for d in yaml.safe_load_all((ROOT / "manifests" / "optional" / "rbac-secrets-namespaced.yaml")
                                           .read_text()) if d]
    chart = [normalised(d) for d in render("--set", "rbac.secrets.namespaces={shop}")
             if d["kind"] in ("Role", "RoleBinding") and "secrets" in d["metadata"]["name"]]
    assert chart == plain


def test_the_schema_refuses_a_bad_secret_access_or_namespace(tmp_path: Path) -> None:
    for values, field in (({"secretAccess": "everyone"}, "secretAccess"),
                          ({"rbac": {"secrets": {"namespaces": ["Shop_A"]}}}, "namespaces")):
        path = tmp_path / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        result = helm("template", "queuescale", str(ROOT / "charts" / "queuescale"), "--values", str(path))
        assert result.returncode != 0 and field in result.stderr


def install_rbac(kube: FakeKube, drop: str) -> None:
    """manifests/operator.yaml (but its Deployment) and rbac.yaml, with the ClusterRole's rules on `drop` removed."""
    for name in ("operator.yaml", "rbac.yaml"):
        for doc in yaml.safe_load_all((ROOT / "manifests" / name).read_text()):
            if doc["kind"] == "Deployment":
                continue
            if doc["kind"] == "ClusterRole":
                doc = copy.deepcopy(doc)
                doc["rules"] = [r for r in doc["rules"] if drop not in r["resources"]]
            kube.create(doc)


def start_as_service_account(kube: FakeKube, tmp_path: Path, *extra: str) -> Operator:
    account_config = kube.write_kubeconfig(tmp_path / "operator-kubeconfig", "queuescale-system",
                                           service_account=("queuescale-system", "queuescale-operator"))
    return Operator(account_config, tmp_path / "operator-rbac.log", *extra).start()


def test_an_operator_with_namespaced_secret_rbac_reads_only_where_it_is_granted(
    kube: FakeKube, tmp_path: Path, management_api: ManagementApi, api: kube_client.ApiClient,
    operators: Callable[..., Operator],
) -> None:
    """The shipped RBAC with the cluster-wide Secret rule swapped for the optional namespaced Role: the operator,
    as its ServiceAccount, reads the Secret in `shop` and gets 403 (SecretForbidden) in `billing`."""
    install_rbac(kube, drop="secrets")
    for doc in yaml.safe_load_all((ROOT / "manifests" / "optional" / "rbac-secrets-namespaced.yaml").read_text()):
        kube.create(doc)
    secret(api, "shop-rabbit", {"password": "p"})
    rabbit_rule(api, "granted", management_api.url, "shop-rabbit", "password")
    kube.ensure_namespace("billing")
    kube_client.CoreV1Api(api).create_namespaced_secret("billing", {
        "metadata": {"name": "billing-rabbit", "annotations": {"queuescale.io/allowed-rules": "*"}},
        "data": {"password": base64.b64encode(b"p").decode()}})
    kube_client.AppsV1Api(api).create_namespaced_deployment("billing", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ungranted"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "u"}},
                 "template": {"metadata": {"labels": {"app": "u"}}, "spec": {"containers": [{"name": "w",
                                                                                            "image": "w"}]}}}})
    custom(api).create_namespaced_custom_object(API_GROUP, API_VERSION, "billing", "queuescalers", {
        "apiVersion": RULES_API, "kind": "QueueScaler", "metadata": {"name": "ungranted"},
        "spec": {"scaleTargetRef": {"name": "ungranted"}, "maxReplicas": 3, "pollingInterval": "1s",
                 "sources": [{"type": "rabbitmq", "queue": "ungranted", "managementURL": management_api.url,
                              "passwordSecretRef": {"name": "billing-rabbit", "key": "password"}}]}})
    operator = start_as_service_account(kube, tmp_path)
    try:
        wait_for("the granted rule Ready", lambda: ready(kube, "granted").get("status") == "True",
                 describe=lambda: str(ready(kube, "granted")))
        forbidden = wait_for("SecretForbidden in billing", lambda: next(
            (c for c in (kube.get(RULES_API, "QueueScaler", "ungranted", "billing").get("status")
                         or {}).get("conditions", []) if c["type"] == "Ready" and c["reason"] == "SecretForbidden"),
            None))
        assert "Secret 'billing-rabbit' in namespace 'billing'" in forbidden["message"]
        assert management_api.to_queue("ungranted") == []
    finally:
        operator.stop()


def test_without_rbac_on_hpas_the_check_is_skipped_and_said_once(
    kube: FakeKube, tmp_path: Path, management_api: ManagementApi, api: kube_client.ApiClient,
) -> None:
    """A cluster that does not grant list/watch on HPAs: the API server answers 403 (as it does for any verb a
    ServiceAccount's roles lack, k8s.io/apiserver pkg/endpoints/filters/authorization.go), the operator logs one
    warning and scales as before."""
    install_rbac(kube, drop="horizontalpodautoscalers")
    secret(api, "rabbit", {"password": "p"})
    rabbit_rule(api, "plain", management_api.url, "rabbit", "password")  # 7 messages, 10 a replica: 1 replica
    hpa(api, "ignored", "plain")
    operator = start_as_service_account(kube, tmp_path)
    try:
        wait_for("1 replica despite the HPA nobody may see", lambda: replicas(kube, "plain") == 1)
        time.sleep(2)
    finally:
        operator.stop()
    lines = [json.loads(line) for line in operator.log_path.read_text().splitlines() if line.startswith("{")]
    skipped = [line["message"] for line in lines if "HPA conflict check off" in line["message"]]
    assert len(skipped) == 1 and "may not list horizontalpodautoscalers (RBAC)" in skipped[0]


# ---------------------------------------------------------------------------------------------- the parts alone


def test_the_owner_is_the_oldest_claim_then_the_first_name() -> None:
    claims = TargetClaims()
    target = TargetKey.of("shop", "apps/v1", "Deployment", "w")

    def obj(name: str, created: str | None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name}
        if created is not None:
            meta["creationTimestamp"] = created
        return {"metadata": meta}

    claims.claim("shop/undated", target, obj("undated", None))  # never from a real server: ranks last
    claims.claim("shop/b", target, obj("b", "2026-01-01T00:00:05Z"))
    claims.claim("shop/c", target, obj("c", "2026-01-01T00:00:05Z"))
    claims.claim("shop/z", target, obj("z", "2026-01-01T00:00:01Z"))
    owner = claims.owner(target)
    assert owner is not None and owner.rule == "z"
    claims.release("shop/z")
    owner = claims.owner(target)
    assert owner is not None and owner.rule == "b"  # same second: by name
    # apps/v1beta2 names the same object as apps/v1: one target.
    assert TargetKey.of("shop", "apps/v1beta2", "Deployment", "w") == target
    assert TargetKey.of("shop", "v1", "ReplicationController", "w").group == ""


async def test_a_relist_forgets_deleted_hpas_and_says_which_targets_changed() -> None:
    changed: list[TargetKey] = []
    index = HpaIndex(changed.append)
    web = {"metadata": {"name": "web", "namespace": "shop"},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}}
    await index.sync(None, [web])
    target = TargetKey.of("shop", "apps/v1", "Deployment", "web")
    assert index.on(target) == ["web"] and changed == [target]
    await index.sync(None, [web])  # nothing new: nobody told
    assert changed == [target]
    await index.sync(None, [])
    assert index.on(target) == [] and changed == [target, target]


async def test_a_failing_hpa_list_holds_the_first_ticks_once_not_every_tick() -> None:
    ownership = Ownership(hpa_wait=0.3)
    ownership.hpas.expect(None)  # a list that never comes
    started = time.monotonic()
    await ownership.await_hpas()
    await asyncio.gather(*(ownership.await_hpas() for _ in range(50)))
    assert 0.25 <= time.monotonic() - started < 0.6


async def test_the_secret_cache_checks_the_annotation_at_every_resolution() -> None:
    annotations: dict[str, str] = {}

    async def read(namespace: str, name: str) -> dict[str, Any]:
        return {"metadata": {"annotations": dict(annotations)},
                "data": {"password": base64.b64encode(b"s3cret-value").decode()}}

    cache = SecretCache(read, ttl=0.0)
    with pytest.raises(SecretUnavailable) as refused:
        await cache.resolver("shop", "orders")("rabbit", "password")
    assert refused.value.code == "SecretNotAllowed"
    assert refused.value.message.endswith(
        "kubectl annotate secret rabbit -n shop queuescale.io/allowed-rules=orders")
    annotations[ALLOWED_RULES_ANNOTATION] = "billing, orders"
    assert await cache.resolver("shop", "orders")("rabbit", "password") == "s3cret-value"
    annotations[ALLOWED_RULES_ANNOTATION] = "billing"  # revoked: the next resolution refuses
    with pytest.raises(SecretUnavailable) as revoked:
        await cache.resolver("shop", "orders")("rabbit", "password")
    assert "--overwrite queuescale.io/allowed-rules=billing,orders" in revoked.value.message
    assert "s3cret-value" not in revoked.value.message
    annotations[ALLOWED_RULES_ANNOTATION] = "*"
    assert await cache.resolver("shop", "anyone")("rabbit", "password") == "s3cret-value"
    annotations[ALLOWED_SOURCES_ANNOTATION] = "redis-list , rabbitmq"  # and only for these kinds
    assert await cache.resolver("shop", "anyone", "rabbitmq")("rabbit", "password") == "s3cret-value"
    with pytest.raises(SecretUnavailable) as other_kind:
        await cache.resolver("shop", "anyone", "sql-table")("rabbit", "password")
    assert other_kind.value.message.endswith(
        "--overwrite queuescale.io/allowed-sources=rabbitmq,redis-list,sql-table")
    annotations.clear()
    assert await SecretCache(read, access="namespace").resolver("shop", "x")("rabbit", "password") == "s3cret-value"
    annotations[ALLOWED_SOURCES_ANNOTATION] = "azure-queue"  # the owner's word on kinds holds in namespace mode too
    with pytest.raises(SecretUnavailable):
        await SecretCache(read, access="namespace").resolver("shop", "x", "rabbitmq")("rabbit", "password")
    with pytest.raises(ValueError, match="annotated, namespace"):
        SecretCache(read, access="everyone")  # type: ignore[arg-type]
