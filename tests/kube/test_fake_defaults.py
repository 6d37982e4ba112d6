"""The fake defaults built-in workloads, pods and containers as kube-apiserver 1.33 does, on create and on update.

The rows are transcribed from k8s.io/kubernetes: `pkg/apis/apps/v1/defaults_test.go` (TestSetDefaultDeployment,
TestDefaultDeploymentAvailability, TestSetDefaultStatefulSet, TestSetDefaultReplicaSetReplicas,
TestDefaultRequestIsNotSetForReplicaSet), `pkg/apis/core/v1/defaults_test.go` (TestPodDefaults and
TestWorkloadDefaults for the fields these defaults cover, TestSetDefaultReplicationControllerInitContainers' pull
policy and port rows, TestSetDefaultEnableServiceLinks, TestSetDefaultSchedulerName, TestSetDefaultPodSpecHostNetwork,
TestSetDefaultRequestsPod) and `pkg/util/parsers/parsers_test.go` (TestParseImageName, read as the pull policy
SetDefaults_Container gives each reference). Each row is written through the fake's REST API and read back; then the
real kubectl shows the defaults and finds nothing to change on a second apply, as against a real cluster.
"""

from __future__ import annotations

import copy
import json
import ssl
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakekube import FakeKube
from tests.fakekube import deployments as fd
from tests.fakekube.server import TOKEN
from tests.kube.test_fake_deployments import wait_for
from tests.kube.test_fake_pods import kubectl, needs_kubectl

NS = "shop"  # the namespace of tests/kube/test_fake_pods.py, whose kubectl helper writes its kubeconfig
DIGEST = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

# The defaultTemplate of upstream's apps tables: SetDefaults_PodSpec's five fields, and nothing of a Pod's own.
TEMPLATE_SPEC_DEFAULTS = {"dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "securityContext": {},
                          "terminationGracePeriodSeconds": 30, "schedulerName": "default-scheduler"}
CONTAINER_DEFAULTS = {"terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}


def rest(fake: FakeKube, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """One request to the fake's API as a client sends it (JSON over HTTPS, the admin token)."""
    request = urllib.request.Request(f"{fake.url}{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {TOKEN}",
                                              "Content-Type": "application/json"})
    context: ssl.SSLContext = fake.client_ssl_context()
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        found: dict[str, Any] = json.loads(answer.read())
    return found


def created(fake: FakeKube, plural: str, spec: dict[str, Any], *, name: str = "x") -> dict[str, Any]:
    """POST a `plural` named `name` with `spec` (and the selector and labels a workload needs), then GET it."""
    fake.ensure_namespace(NS)
    group = "/api/v1" if plural == "pods" else "/apis/apps/v1"
    kind = {"pods": "Pod", "deployments": "Deployment", "statefulsets": "StatefulSet",
            "replicasets": "ReplicaSet"}[plural]
    body: dict[str, Any] = {"apiVersion": "v1" if plural == "pods" else "apps/v1", "kind": kind,
                            "metadata": {"name": name}, "spec": copy.deepcopy(spec)}
    if plural != "pods":
        body["spec"].setdefault("selector", {"matchLabels": {"foo": "bar"}})
        body["spec"].setdefault("template", {}).setdefault("metadata", {"labels": {"foo": "bar"}})
    rest(fake, "POST", f"{group}/namespaces/{NS}/{plural}", body)
    return rest(fake, "GET", f"{group}/namespaces/{NS}/{plural}/{name}")


def workload_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """A workload's spec without the selector and template the harness adds (compared on their own)."""
    return {k: v for k, v in obj["spec"].items() if k not in ("selector", "template")}


# ----------------------------------------------------------------------------------------------------------------
# TestSetDefaultDeployment: (sent spec, expected spec); the template is upstream's defaultTemplate in every row.

ROLLING_25 = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}
DEPLOYMENT_ROWS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({}, {"replicas": 1, "strategy": ROLLING_25, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600}),
    ({"replicas": 5, "strategy": {"rollingUpdate": {"maxSurge": 5}}},
     {"replicas": 5, "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 5, "maxUnavailable": "25%"}},
      "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600}),
    ({"replicas": 3, "strategy": {"type": "RollingUpdate", "rollingUpdate": None}},
     {"replicas": 3, "strategy": ROLLING_25, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600}),
    ({"replicas": 5, "strategy": {"type": "Recreate"}, "revisionHistoryLimit": 0},
     {"replicas": 5, "strategy": {"type": "Recreate"}, "revisionHistoryLimit": 0, "progressDeadlineSeconds": 600}),
    ({"replicas": 5, "strategy": {"type": "Recreate"}, "progressDeadlineSeconds": 30, "revisionHistoryLimit": 2},
     {"replicas": 5, "strategy": {"type": "Recreate"}, "progressDeadlineSeconds": 30, "revisionHistoryLimit": 2}),
]


@pytest.mark.parametrize(("sent", "expected"), DEPLOYMENT_ROWS)
def test_a_deployment_is_defaulted_as_upstreams_testsetdefaultdeployment(
    fake_kube: FakeKube, sent: dict[str, Any], expected: dict[str, Any],
) -> None:
    stored = created(fake_kube, "deployments", sent)
    assert workload_fields(stored) == expected
    assert stored["spec"]["template"]["spec"] == TEMPLATE_SPEC_DEFAULTS


def test_the_default_strategy_keeps_a_replica_available_as_upstreams_testdefaultdeploymentavailability(
    fake_kube: FakeKube,
) -> None:
    stored = created(fake_kube, "deployments", {})
    assert fd.replicas(stored) - fd.max_unavailable(stored) > 0
    # The fake's Deployment controller reads what the server stored: 25 % of 10, rounded up and down.
    ten = created(fake_kube, "deployments", {"replicas": 10}, name="ten")
    assert (fd.max_surge(ten), fd.max_unavailable(ten)) == (3, 2)


def test_a_put_without_the_defaults_gets_them_again_and_keeps_its_generation(fake_kube: FakeKube) -> None:
    """Decoding defaults every write, not only a create; and generation compares the defaulted specs, so a
    replacement that leaves the defaults out changes nothing (a PUT without replicas is 1 replica, as upstream)."""
    stored = created(fake_kube, "deployments", {"replicas": 3})
    sent = copy.deepcopy(stored)
    for field in ("strategy", "revisionHistoryLimit", "progressDeadlineSeconds"):
        del sent["spec"][field]
    del sent["spec"]["template"]["spec"]["dnsPolicy"]
    written = rest(fake_kube, "PUT", f"/apis/apps/v1/namespaces/{NS}/deployments/x", sent)
    assert written["spec"] == stored["spec"]
    assert written["metadata"]["generation"] == 1
    assert written["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]  # a no-op write
    del sent["spec"]["replicas"]
    assert rest(fake_kube, "PUT", f"/apis/apps/v1/namespaces/{NS}/deployments/x", sent)["spec"]["replicas"] == 1


# ----------------------------------------------------------------------------------------------------------------
# TestSetDefaultStatefulSet, with 1.33's feature gates: StatefulSetAutoDeletePVC is GA and locked on (so the rows
# upstream ran with it off get Retain/Retain too), MaxUnavailableStatefulSet is alpha and off (its "enabled" rows
# are left out).

RETAIN = {"whenDeleted": "Retain", "whenScaled": "Retain"}


def stateful(update: dict[str, Any] | None = None, policy: str = "OrderedReady",
             retention: dict[str, str] | None = None) -> dict[str, Any]:
    return {"replicas": 1, "podManagementPolicy": policy,
            "updateStrategy": update or {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "persistentVolumeClaimRetentionPolicy": retention or RETAIN, "revisionHistoryLimit": 10}


STATEFULSET_ROWS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("labels and default update strategy", {}, stateful()),
    ("Alternate update strategy", {"updateStrategy": {"type": "OnDelete"}}, stateful({"type": "OnDelete"})),
    ("Parallel pod management policy", {"podManagementPolicy": "Parallel"}, stateful(policy="Parallel")),
    ("UpdateStrategy.RollingUpdate.Partition is not lost when UpdateStrategy.Type is not set",
     {"updateStrategy": {"rollingUpdate": {"partition": 42}}},
     stateful({"type": "RollingUpdate", "rollingUpdate": {"partition": 42}})),
    ("PVC delete policy enabled, no policy specified", {}, stateful()),
    ("PVC delete policy enabled, with scaledown policy specified",
     {"persistentVolumeClaimRetentionPolicy": {"whenScaled": "Delete"}},
     stateful(retention={"whenDeleted": "Retain", "whenScaled": "Delete"})),
    ("PVC delete policy disabled, with set deletion policy specified",  # upstream's name; the gate is on in the row
     {"persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete"}},
     stateful(retention={"whenDeleted": "Delete", "whenScaled": "Retain"})),
    ("MaxUnavailable disabled, with maxUnavailable not specified", {}, stateful()),
    ("MaxUnavailable disabled, with default maxUnavailable specified",
     {"updateStrategy": {"rollingUpdate": {"partition": 0, "maxUnavailable": 1}}},
     stateful({"type": "RollingUpdate", "rollingUpdate": {"partition": 0, "maxUnavailable": 1}})),
    ("MaxUnavailable disabled, with non default maxUnavailable specified",
     {"updateStrategy": {"rollingUpdate": {"partition": 42, "maxUnavailable": 3}}},
     stateful({"type": "RollingUpdate", "rollingUpdate": {"partition": 42, "maxUnavailable": 3}})),
    # Not a row upstream, read from SetDefaults_StatefulSet: rollingUpdate is only made while the type is unset.
    ("a RollingUpdate sent without rollingUpdate keeps none, so no partition",
     {"updateStrategy": {"type": "RollingUpdate"}}, stateful({"type": "RollingUpdate"})),
]


@pytest.mark.parametrize(("name", "sent", "expected"), STATEFULSET_ROWS, ids=[row[0] for row in STATEFULSET_ROWS])
def test_a_stateful_set_is_defaulted_as_upstreams_testsetdefaultstatefulset(
    fake_kube: FakeKube, name: str, sent: dict[str, Any], expected: dict[str, Any],
) -> None:
    stored = created(fake_kube, "statefulsets", sent)
    assert workload_fields(stored) == expected, name
    assert stored["spec"]["template"]["spec"] == TEMPLATE_SPEC_DEFAULTS


@pytest.mark.parametrize(("sent", "expected"), [({}, 1), ({"replicas": 0}, 0), ({"replicas": 3}, 3)])
def test_a_replica_set_is_defaulted_as_upstreams_testsetdefaultreplicasetreplicas(
    fake_kube: FakeKube, sent: dict[str, Any], expected: int,
) -> None:
    stored = created(fake_kube, "replicasets", sent)
    assert workload_fields(stored) == {"replicas": expected}
    assert stored["spec"]["template"]["spec"] == TEMPLATE_SPEC_DEFAULTS


@pytest.mark.parametrize("plural", ["replicasets", "deployments"])
def test_a_templates_limits_are_not_its_requests_as_upstreams_testdefaultrequestisnotsetforreplicaset(
    fake_kube: FakeKube, plural: str,
) -> None:
    """SetDefaults_Pod's requests-from-limits is a Pod's only: a template keeps what it was sent."""
    container = {"name": "c", "image": "worker:1", "resources": {"limits": {"cpu": "100m"}}}
    stored = created(fake_kube, plural, {"template": {"spec": {"containers": [container]}}})
    assert stored["spec"]["template"]["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "100m"}}


# ----------------------------------------------------------------------------------------------------------------
# Pods and containers

EVERY_CONTAINER = {"name": "c", "ports": [{"containerPort": 80}]}  # no image: TestPodDefaults' zero container
DEFAULTED_CONTAINER = {**EVERY_CONTAINER, "imagePullPolicy": "IfNotPresent", **CONTAINER_DEFAULTS,
                       "ports": [{"containerPort": 80, "protocol": "TCP"}]}


def test_a_pod_and_its_containers_are_defaulted_as_upstreams_testpoddefaults(fake_kube: FakeKube) -> None:
    """The PodSpec's defaults, the Pod's own (`enableServiceLinks`, TestSetDefaultEnableServiceLinks), the
    ServiceAccount admission's `serviceAccountName`, and each container's, init containers' too."""
    stored = created(fake_kube, "pods", {"containers": [EVERY_CONTAINER], "initContainers": [EVERY_CONTAINER]})
    assert stored["spec"] == {**TEMPLATE_SPEC_DEFAULTS, "enableServiceLinks": True, "serviceAccountName": "default",
                              "containers": [DEFAULTED_CONTAINER], "initContainers": [DEFAULTED_CONTAINER]}


def test_an_empty_pod_gets_the_default_scheduler_and_service_links(fake_kube: FakeKube) -> None:
    """TestSetDefaultSchedulerName and TestSetDefaultEnableServiceLinks: a Pod sent with no spec at all."""
    stored = created(fake_kube, "pods", {})
    assert (stored["spec"]["schedulerName"], stored["spec"]["enableServiceLinks"]) == ("default-scheduler", True)


@pytest.mark.parametrize("plural", ["deployments", "statefulsets", "replicasets"])
def test_a_templates_containers_are_defaulted_as_upstreams_testworkloaddefaults(
    fake_kube: FakeKube, plural: str,
) -> None:
    """A template gets the PodSpec's and the containers' defaults, none of a Pod's own."""
    stored = created(fake_kube, plural, {"template": {"spec": {"containers": [EVERY_CONTAINER],
                                                               "initContainers": [EVERY_CONTAINER]}}})
    assert stored["spec"]["template"]["spec"] == {**TEMPLATE_SPEC_DEFAULTS, "containers": [DEFAULTED_CONTAINER],
                                                  "initContainers": [DEFAULTED_CONTAINER]}


def test_init_containers_of_a_template_as_upstreams_testsetdefaultreplicationcontrollerinitcontainers(
    fake_kube: FakeKube,
) -> None:
    """Its "imagePullIPolicy" row (busybox, no tag: Always) and "ContainerPort" row (a port named default: TCP),
    through a Deployment's template (the fake serves no ReplicationControllers)."""
    init = [{"name": "install", "image": "busybox"}, {"name": "fun", "image": "alpine", "ports": [{"name": "default"}]}]
    stored = created(fake_kube, "deployments", {"template": {"spec": {"containers": [EVERY_CONTAINER],
                                                                      "initContainers": init}}})
    install, fun = stored["spec"]["template"]["spec"]["initContainers"]
    assert install["imagePullPolicy"] == "Always"
    assert fun["ports"] == [{"name": "default", "protocol": "TCP"}]


def test_what_is_sent_is_kept(fake_kube: FakeKube) -> None:
    """A default fills only what is unset: a policy, path, protocol or pod field sent stays as sent."""
    container = {"name": "c", "image": "worker:latest", "imagePullPolicy": "Never",
                 "terminationMessagePath": "/tmp/end", "terminationMessagePolicy": "FallbackToLogsOnError",
                 "ports": [{"containerPort": 53, "protocol": "UDP"}]}
    sent = {"containers": [container], "dnsPolicy": "Default", "restartPolicy": "Never", "schedulerName": "mine",
            "terminationGracePeriodSeconds": 0, "securityContext": {"runAsNonRoot": True},
            "enableServiceLinks": False, "serviceAccountName": "worker"}
    assert created(fake_kube, "pods", sent)["spec"] == sent


def test_a_host_network_pods_ports_are_host_ports_as_upstreams_testsetdefaultpodspechostnetwork(
    fake_kube: FakeKube,
) -> None:
    ports = [{"containerPort": 8080}]
    stored = created(fake_kube, "pods", {"hostNetwork": True, "containers": [{"name": "c", "ports": ports}],
                                         "initContainers": [{"name": "i", "ports": ports}]})
    for key in ("containers", "initContainers"):
        assert stored["spec"][key][0]["ports"] == [{"containerPort": 8080, "hostPort": 8080, "protocol": "TCP"}]
    template = created(fake_kube, "deployments", {"template": {"spec": {
        "hostNetwork": True, "containers": [{"name": "c", "ports": ports}]}}})
    # Since 1.28 (DefaultHostNetworkHostPortsInPodTemplates off) a template's ports are left alone.
    assert template["spec"]["template"]["spec"]["containers"][0]["ports"] == [{"containerPort": 8080,
                                                                               "protocol": "TCP"}]


def test_a_pods_limits_are_its_missing_requests_as_upstreams_testsetdefaultrequestspod(fake_kube: FakeKube) -> None:
    """A limit without a request becomes the request; a request of 0 sent stays; no limits, no requests."""
    resources = {"requests": {"memory": "0"}, "limits": {"cpu": "100m", "memory": "1Gi"}}
    stored = created(fake_kube, "pods", {"containers": [{"name": "c", "resources": resources}],
                                         "initContainers": [{"name": "i", "resources": resources}]})
    for key in ("containers", "initContainers"):
        assert stored["spec"][key][0]["resources"]["requests"] == {"memory": "0", "cpu": "100m"}
    bare = created(fake_kube, "pods", {"containers": [{"name": "c"}], "initContainers": [{"name": "i"}]}, name="y")
    assert "resources" not in bare["spec"]["containers"][0] and "resources" not in bare["spec"]["initContainers"][0]


# TestParseImageName's inputs, each with the policy SetDefaults_Container gives its tag ("latest": Always); an
# input ParseImageName refuses has no tag, so IfNotPresent.
PULL_POLICY_ROWS = [
    ("root", "Always"),
    ("root:tag", "IfNotPresent"),
    (f"root@{DIGEST}", "IfNotPresent"),
    ("user/repo", "Always"),
    ("user/repo:tag", "IfNotPresent"),
    (f"user/repo@{DIGEST}", "IfNotPresent"),
    ("url:5000/repo", "Always"),
    ("url:5000/repo:tag", "IfNotPresent"),
    (f"url:5000/repo@{DIGEST}", "IfNotPresent"),
    (f"url:5000/repo:latest@{DIGEST}", "Always"),
    ("ROOT", "IfNotPresent"),  # must be lowercase
    ("http://root", "IfNotPresent"),  # invalid reference format
    (DIGEST.removeprefix("sha256:"), "IfNotPresent"),  # cannot specify 64-byte hexadecimal strings
    ("", "IfNotPresent"),  # TestPodDefaults' container has no image
    ("nginx:latest", "Always"),
]


def test_the_pull_policy_follows_the_images_tag_as_parseimagename_reads_it(fake_kube: FakeKube) -> None:
    containers = [{"name": f"c{i}", "image": image} for i, (image, _) in enumerate(PULL_POLICY_ROWS)]
    stored = created(fake_kube, "pods", {"containers": containers})
    assert [(c["image"], c["imagePullPolicy"]) for c in stored["spec"]["containers"]] == PULL_POLICY_ROWS


# ----------------------------------------------------------------------------------------------------------------
# The real kubectl

MANIFEST: dict[str, Any] = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": NS},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx",
                                                           "ports": [{"containerPort": 80}]}]}}}}


@needs_kubectl
def test_kubectl_shows_the_defaults_and_a_second_apply_or_a_diff_finds_nothing_to_change(
    fake_kube: FakeKube, tmp_path: Path,
) -> None:
    """`kubectl apply -f` of a minimal Deployment, then `kubectl get -o json` shows what the API server filled in;
    applying the same file again is "unchanged" and `kubectl diff` (a server-side dry run compared with the live
    object) exits 0 with no output: the defaults are not a difference, as against a real cluster."""
    fake_kube.ensure_namespace(NS)
    manifest = tmp_path / "web.yaml"
    manifest.write_text(yaml.safe_dump(MANIFEST))
    assert kubectl(fake_kube, tmp_path, "apply", "-f", str(manifest)).stdout.strip() == "deployment.apps/web created"
    shown = json.loads(kubectl(fake_kube, tmp_path, "get", "deployment", "web", "-o", "json").stdout)
    spec = shown["spec"]
    assert workload_fields(shown) == {"replicas": 1, "strategy": ROLLING_25, "revisionHistoryLimit": 10,
                                      "progressDeadlineSeconds": 600}
    assert spec["template"]["spec"] == {
        **TEMPLATE_SPEC_DEFAULTS,
        "containers": [{"name": "web", "image": "nginx", "imagePullPolicy": "Always", **CONTAINER_DEFAULTS,
                        "ports": [{"containerPort": 80, "protocol": "TCP"}]}]}
    before = shown["metadata"]["resourceVersion"]

    again = kubectl(fake_kube, tmp_path, "apply", "-f", str(manifest)).stdout.strip()
    assert again == "deployment.apps/web unchanged"
    diff = kubectl(fake_kube, tmp_path, "diff", "-f", str(manifest), check=False)
    assert (diff.returncode, diff.stdout, diff.stderr) == (0, "", "")
    after = fake_kube.get("apps/v1", "Deployment", "web", NS)["metadata"]
    assert (after["resourceVersion"], after["generation"]) == (before, 1)


@needs_kubectl
def test_kubectl_create_of_a_stateful_set_shows_its_defaults(fake_kube: FakeKube, tmp_path: Path) -> None:
    """`kubectl create --save-config` (so that `kubectl diff` has a last-applied configuration to compare, as
    `kubectl apply` leaves one), then `kubectl get -o json` shows SetDefaults_StatefulSet's fields and `kubectl
    diff` finds nothing to change."""
    fake_kube.ensure_namespace(NS)
    manifest = tmp_path / "db.yaml"
    manifest.write_text(yaml.safe_dump({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": NS},
        "spec": {"serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}},
                              "spec": {"containers": [{"name": "db", "image": "postgres:16"}]}}}}))
    kubectl(fake_kube, tmp_path, "create", "--save-config", "-f", str(manifest))
    shown = json.loads(kubectl(fake_kube, tmp_path, "get", "statefulset", "db", "-o", "json").stdout)
    assert {k: v for k, v in workload_fields(shown).items() if k != "serviceName"} == stateful()
    assert shown["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    diff = kubectl(fake_kube, tmp_path, "diff", "-f", str(manifest), check=False)
    assert (diff.returncode, diff.stdout) == (0, ""), diff.stdout


@needs_kubectl
def test_applying_the_defaults_spelled_out_makes_no_new_replica_set(tmp_path: Path) -> None:
    """The pod-template-hash is taken over the defaulted template: a manifest that writes out every default the
    server fills in is the same template, so the Deployment keeps its one ReplicaSet (no rollout)."""
    with FakeKube(pods=True) as fake:
        fake.ensure_namespace(NS)
        manifest = tmp_path / "web.yaml"
        manifest.write_text(yaml.safe_dump(MANIFEST))
        kubectl(fake, tmp_path, "apply", "-f", str(manifest))
        first = wait_for("the first ReplicaSet", lambda: [
            rs["metadata"]["name"] for rs in fake.list_objects("apps/v1", "ReplicaSet", NS)])
        spelled = copy.deepcopy(MANIFEST)
        spelled["spec"].update({"replicas": 1, "strategy": ROLLING_25, "revisionHistoryLimit": 10,
                                "progressDeadlineSeconds": 600})
        pod_spec = spelled["spec"]["template"]["spec"]
        pod_spec.update(TEMPLATE_SPEC_DEFAULTS)
        pod_spec["containers"][0].update({"imagePullPolicy": "Always", **CONTAINER_DEFAULTS,
                                          "ports": [{"containerPort": 80, "protocol": "TCP"}]})
        manifest.write_text(yaml.safe_dump(spelled))
        kubectl(fake, tmp_path, "apply", "-f", str(manifest))
        # The new last-applied annotation is a new generation (the Deployment registry counts annotations): once
        # the controller has observed it, it has made whatever ReplicaSet the template called for.
        generation = fake.get("apps/v1", "Deployment", "web", NS)["metadata"]["generation"]
        wait_for("the controller to observe the apply", lambda: fake.get(
            "apps/v1", "Deployment", "web", NS).get("status", {}).get("observedGeneration", 0) >= generation)
        assert len(first) == 1
        assert [rs["metadata"]["name"] for rs in fake.list_objects("apps/v1", "ReplicaSet", NS)] == first
