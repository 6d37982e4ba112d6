"""The fake API server's Pods (`FakeKube(pods=True)`): they follow a Deployment's or ReplicaSet's replicas, a
scale-down removes the ones the ReplicaSet controller would (pod-deletion-cost first), the registry refuses a cost
that is not an int32 in its own words, kubectl prints them with the real columns, and RBAC guards them. The ranking
is checked against the rows of upstream's own test table."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from tests.fakekube import FakeKube
from tests.fakekube.pods import DELETION_COST, delete_before, pods_to_delete
from tests.fakekube.server import TOKEN, WorkloadControllerError

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = ROOT / ".tools" / "kubectl" / "kubectl"
NS = "shop"
SAFE = "[bcdfghjklmnpqrstvwxz2456789]"  # k8s.io/apimachinery pkg/util/rand: the characters of generated names
needs_kubectl = pytest.mark.skipif(not KUBECTL.exists(), reason=f"kubectl is not installed at {KUBECTL}: run "
                                   "scripts/bootstrap, which installs it")


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    """A fake API server whose workloads have pods, with the namespace the tests use."""
    server = FakeKube(pods=True, bookmark_interval=0.2).start()
    try:
        server.ensure_namespace(NS)
        yield server
    finally:
        server.stop()


def worker(replicas: int, name: str = "worker", kind: str = "Deployment") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name, "tier": "queue"}},
                                  "spec": {"containers": [{"name": "worker", "image": "worker:1", "ports": [
                                      {"name": "in-flight", "containerPort": 9102}]}]}}}}


def call(fake: FakeKube, path: str, *, method: str = "GET", body: Any = None,
         content_type: str = "application/json") -> tuple[int, Any]:
    """One request with the admin token: (status, decoded JSON body)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{fake.url}{path}", data=data, method=method, headers={
        "Authorization": f"Bearer {TOKEN}", "Accept": "application/json", "Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=10, context=fake.client_ssl_context()) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read() or b"null")


def scale(fake: FakeKube, replicas: int, name: str = "worker", plural: str = "deployments") -> None:
    status, answer = call(fake, f"/apis/apps/v1/namespaces/{NS}/{plural}/{name}/scale", method="PATCH",
                          body={"spec": {"replicas": replicas}}, content_type="application/merge-patch+json")
    assert status == 200, answer


def names(fake: FakeKube, name: str = "worker", kind: str = "Deployment") -> list[str]:
    return [pod["metadata"]["name"] for pod in fake.workload_pods(name, NS, kind)]


def wait_for(what: str, check: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def kubectl(fake: FakeKube, folder: Path, *args: str, check: bool = True,
            kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The real kubectl against the fake, with a private HOME and discovery cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    env.update(KUBECONFIG=str(kubeconfig or fake.write_kubeconfig(folder / "admin.kubeconfig", NS)),
               HOME=str(folder), KUBECACHEDIR=str(folder / "cache"))
    result = subprocess.run([str(KUBECTL), *args], env=env, capture_output=True, text=True, timeout=60)
    if check:
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stdout}{result.stderr}"
    return result


# ----------------------------------------------------------------------------------------------------------------
# Pods follow replicas


def test_a_deployments_pods_appear_and_go_with_its_replicas(fake: FakeKube) -> None:
    created = fake.create(worker(3))
    pods = fake.workload_pods("worker", NS)
    assert len(pods) == 3
    pod = pods[0]
    pod_hash = pod["metadata"]["labels"]["pod-template-hash"]
    assert re.fullmatch(f"worker-{re.escape(pod_hash)}-{SAFE}{{5}}", pod["metadata"]["name"])
    assert re.fullmatch(f"{SAFE}{{1,10}}", pod_hash)
    assert pod["metadata"]["labels"] == {"app": "worker", "tier": "queue", "pod-template-hash": pod_hash}
    assert pod["spec"]["containers"] == created["spec"]["template"]["spec"]["containers"]
    # Owned through a ReplicaSet `<deployment>-<hash>`, as the Deployment controller makes one (sync.go
    # getNewReplicaSet): the template's labels and the selector with pod-template-hash, the Deployment its owner.
    (replica_set,) = fake.list_objects("apps/v1", "ReplicaSet", NS)
    assert replica_set["metadata"]["name"] == f"worker-{pod_hash}"
    assert replica_set["metadata"]["ownerReferences"] == [{
        "apiVersion": "apps/v1", "kind": "Deployment", "name": "worker", "uid": created["metadata"]["uid"],
        "controller": True, "blockOwnerDeletion": True}]
    assert replica_set["spec"]["selector"] == {"matchLabels": {"app": "worker", "pod-template-hash": pod_hash}}
    assert replica_set["metadata"]["annotations"] == {"deployment.kubernetes.io/revision": "1",
                                                      "deployment.kubernetes.io/desired-replicas": "3",
                                                      "deployment.kubernetes.io/max-replicas": "4"}
    assert pod["metadata"]["ownerReferences"] == [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                   "name": f"worker-{pod_hash}",
                                                   "uid": replica_set["metadata"]["uid"], "controller": True,
                                                   "blockOwnerDeletion": True}]
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["podIP"] == "127.0.0.1"
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"
    assert fake.get("apps/v1", "Deployment", "worker", NS)["status"]["readyReplicas"] == 3

    scale(fake, 5)
    assert len(names(fake)) == 5
    scale(fake, 1)
    assert len(names(fake)) == 1
    assert [p["metadata"]["name"] for p in fake.list_objects("v1", "Pod", NS)] == names(fake)
    status = fake.get("apps/v1", "Deployment", "worker", NS)["status"]
    assert (status["replicas"], status["readyReplicas"]) == (1, 1)
    scale(fake, 0)
    assert names(fake) == []
    assert "readyReplicas" not in fake.get("apps/v1", "Deployment", "worker", NS)["status"]


def test_a_replicasets_pods_are_named_after_it_without_a_template_hash(fake: FakeKube) -> None:
    fake.create(worker(2, "batch", "ReplicaSet"))
    pods = fake.workload_pods("batch", NS, "ReplicaSet")
    assert [bool(re.fullmatch(f"batch-{SAFE}{{5}}", p["metadata"]["name"])) for p in pods] == [True, True]
    assert pods[0]["metadata"]["labels"] == {"app": "batch", "tier": "queue"}
    scale(fake, 1, "batch", "replicasets")
    assert len(names(fake, "batch", "ReplicaSet")) == 1


def test_pods_turn_ready_after_the_ready_delay_and_ready_replicas_count_them() -> None:
    with FakeKube(pods=True, ready_delay=0.4) as fake:
        fake.create(worker(2))
        pods = fake.workload_pods("worker", NS)
        assert [p["status"]["phase"] for p in pods] == ["Running", "Running"]
        assert [{c["type"]: c["status"] for c in p["status"]["conditions"]}["Ready"] for p in pods] == ["False"] * 2
        status = fake.get("apps/v1", "Deployment", "worker", NS)["status"]
        assert (status["replicas"], status.get("readyReplicas")) == (2, None)
        assert fake.table("pods", NS).splitlines()[1].split()[1:3] == ["0/1", "Running"]
        wait_for("ready replicas", lambda: fake.get("apps/v1", "Deployment", "worker", NS)["status"].get(
            "readyReplicas") == 2)
        assert all({c["type"]: c["status"] for c in p["status"]["conditions"]}["Ready"] == "True"
                   for p in fake.workload_pods("worker", NS))


def test_a_pod_deleted_by_someone_else_is_replaced(fake: FakeKube) -> None:
    fake.create(worker(2))
    gone, kept = names(fake)
    status, _ = call(fake, f"/api/v1/namespaces/{NS}/pods/{gone}", method="DELETE")
    assert status == 200
    wait_for("a replacement pod", lambda: len(names(fake)) == 2)
    assert gone not in names(fake) and kept in names(fake)


def test_deleting_the_deployment_deletes_its_pods(fake: FakeKube) -> None:
    fake.create(worker(2))
    status, _ = call(fake, f"/apis/apps/v1/namespaces/{NS}/deployments/worker", method="DELETE")
    assert status == 200
    time.sleep(0.2)  # the controller would have replaced a pod by now
    assert fake.list_objects("v1", "Pod", NS) == []


def test_the_pod_hook_gives_each_pod_its_own_port_on_loopback(fake: FakeKube) -> None:
    ports = iter(range(41000, 41010))

    def own_port(pod: dict[str, Any]) -> None:
        for container in pod["spec"]["containers"]:
            for port in container.get("ports") or []:
                if port.get("name") == "in-flight":
                    port["containerPort"] = next(ports)

    fake.set_pod_hook(own_port)
    fake.create(worker(3))
    given = sorted(p["spec"]["containers"][0]["ports"][0]["containerPort"] for p in fake.workload_pods("worker", NS))
    assert given == [41000, 41001, 41002]


@needs_kubectl
def test_a_pod_hook_that_raises_is_a_failed_create_and_fails_the_test_at_stop(tmp_path: Path) -> None:
    """A test's hook that raises used to kill the controller's thread, and the test then waited for pods that never
    came. Now it is what a failed pod create is to the ReplicaSet controller: no pod, a Warning FailedCreate event
    "Error creating: ..." on the ReplicaSet (kubectl shows it), the next pods still made once the hook is fixed, and
    the error raised by FakeKube.stop so the test fails saying why."""
    server = FakeKube(pods=True).start()
    try:
        server.ensure_namespace(NS)
        made: list[str] = []

        def second_fails(pod: dict[str, Any]) -> None:
            made.append(pod["metadata"]["name"])
            if len(made) == 2:
                raise RuntimeError("no port left for pod two")

        server.set_pod_hook(second_fails)
        server.create(worker(1))
        scale(server, 3)  # the create of pod two fails; the scale itself is accepted, as the controller is async
        wait_for("the FailedCreate event", lambda: any(e.get("reason") == "FailedCreate" for e in server.events(NS)))
        event = next(e for e in server.events(NS) if e.get("reason") == "FailedCreate")
        assert event["type"] == "Warning"
        assert event["message"] == "Error creating: the pod hook raised RuntimeError: no port left for pod two"
        assert event["involvedObject"]["kind"] == "ReplicaSet"  # the ReplicaSet controller's, on its ReplicaSet
        assert event["involvedObject"]["name"].startswith("worker-")
        assert len(names(server)) == 1
        shown = kubectl(server, tmp_path, "get", "events", "-n", NS, "--field-selector", "reason=FailedCreate").stdout
        assert "FailedCreate" in shown and "Error creating: the pod hook raised RuntimeError" in shown, shown

        server.set_pod_hook(None)
        gone = names(server)[0]  # a pod deleted by someone else: the controller's thread replaces it, and syncs
        status, _ = call(server, f"/api/v1/namespaces/{NS}/pods/{gone}", method="DELETE")
        assert status == 200
        wait_for("the three pods, made by a thread the hook did not kill", lambda: len(names(server)) == 3)
    except BaseException:
        with contextlib.suppress(WorkloadControllerError):
            server.stop()
        raise
    with pytest.raises(WorkloadControllerError, match=r"ReplicaSet shop/worker-[a-z0-9]+: the pod hook raised "
                       "RuntimeError: no port left for pod two"):
        server.stop()


# ----------------------------------------------------------------------------------------------------------------
# The deletion ranking, checked against upstream's TestSortingActivePodsWithRanks
# (k8s.io/kubernetes pkg/controller/controller_utils_test.go), row by row.

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)  # metav1.Time is written to the second


def _stamp(when: dt.datetime | None) -> str | None:
    return None if when is None else when.strftime("%Y-%m-%dT%H:%M:%SZ")


def upstream_pod(name: str, node: str, phase: str, ready: bool, restarts: int, ready_since: dt.datetime | None,
                 created: dt.datetime | None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """The test's `pod(...)` helper: a Ready condition (since `ready_since`) and one container's restarts only for
    a ready pod; no uid."""
    status: dict[str, Any] = {"phase": phase}
    if ready:
        condition: dict[str, Any] = {"type": "Ready", "status": "True"}
        if ready_since is not None:
            condition["lastTransitionTime"] = _stamp(ready_since)
        status.update(conditions=[condition], containerStatuses=[{"restartCount": restarts}])
    meta: dict[str, Any] = {"name": name}
    if created is not None:
        meta["creationTimestamp"] = _stamp(created)
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"nodeName": node}, "status": status}


MONTH = NOW - dt.timedelta(days=30)  # now.AddDate(0, -1, 0): the same power-of-two age bucket
HOURS_2, HOURS_5, HOURS_8 = (NOW - dt.timedelta(hours=h) for h in (2, 5, 8))
UNSCHEDULED = upstream_pod("unscheduled", "", "Pending", False, 0, None, None)
PENDING = upstream_pod("pending", "node", "Pending", False, 0, None, None)
UNKNOWN = upstream_pod("unknown-phase", "node", "Unknown", False, 0, None, None)
NOT_READY = upstream_pod("not-ready", "node", "Running", False, 0, None, None)
READY_NO_TIME = upstream_pod("ready-no-last-transition-time", "node", "Running", True, 0, None, None)
READY_NOW = upstream_pod("ready-now", "node", "Running", True, 0, NOW, NOW)
READY_THEN = upstream_pod("ready-then", "node", "Running", True, 0, MONTH, MONTH)
READY_HIGH_RESTARTS = upstream_pod("ready-high-restarts", "node", "Running", True, 9001, NOW, NOW)
READY_NOW_CREATED_THEN = upstream_pod("ready-now-created-then", "node", "Running", True, 0, NOW, MONTH)
LOW_COST = upstream_pod("low-deletion-cost", "node", "Running", True, 0, NOW, MONTH, {DELETION_COST: "10"})
HIGH_COST = upstream_pod("high-deletion-cost", "node", "Running", True, 0, NOW, MONTH, {DELETION_COST: "100"})
UNSCHEDULED_5_HOURS = upstream_pod("unscheduled-5-hours", "", "Pending", False, 0, HOURS_5, HOURS_5)
UNSCHEDULED_8_HOURS = upstream_pod("unscheduled-10-hours", "", "Pending", False, 0, HOURS_8, HOURS_8)
READY_2_HOURS = upstream_pod("ready-2-hours", "", "Running", True, 0, HOURS_2, MONTH)
READY_5_HOURS = upstream_pod("ready-5-hours", "", "Running", True, 0, HOURS_5, MONTH)
READY_8_HOURS = upstream_pod("ready-10-hours", "", "Running", True, 0, HOURS_8, MONTH)

# equalityTests (rank 1 for both; p2 defaults to p1).
EQUAL = [(UNSCHEDULED, UNSCHEDULED), (PENDING, PENDING), (UNKNOWN, UNKNOWN), (NOT_READY, NOT_READY),
         (READY_NOW_CREATED_THEN, READY_NOW_CREATED_THEN), (READY_NOW, READY_NOW), (READY_THEN, READY_THEN),
         (READY_HIGH_RESTARTS, READY_HIGH_RESTARTS), (READY_NOW_CREATED_THEN, READY_NOW_CREATED_THEN),
         (UNSCHEDULED_5_HOURS, UNSCHEDULED_8_HOURS), (READY_5_HOURS, READY_8_HOURS)]

# inequalityTests: (lesser, its rank, greater, its rank). Upstream's row with PodDeletionCost disabled is left out:
# the gate is on by default in 1.33 and the fake has no feature gates.
LESS = [(UNSCHEDULED, 1, PENDING, 2), (UNSCHEDULED, 2, PENDING, 1), (PENDING, 1, UNKNOWN, 2),
        (UNKNOWN, 1, NOT_READY, 2), (NOT_READY, 1, READY_NO_TIME, 1), (READY_NO_TIME, 1, READY_NOW, 1),
        (READY_NOW, 2, READY_NO_TIME, 1), (READY_NOW, 1, READY_THEN, 1), (READY_NOW, 2, READY_THEN, 1),
        (READY_HIGH_RESTARTS, 1, READY_NOW, 1), (READY_NOW, 2, READY_HIGH_RESTARTS, 1),
        (READY_NOW, 1, READY_NOW_CREATED_THEN, 1), (READY_NOW_CREATED_THEN, 2, READY_NOW, 1),
        (LOW_COST, 2, HIGH_COST, 1), (READY_2_HOURS, 1, READY_5_HOURS, 1)]


@pytest.mark.parametrize(("first", "second"), EQUAL,
                         ids=[f"{a['metadata']['name']}={b['metadata']['name']}" for a, b in EQUAL])
def test_sorting_active_pods_with_ranks_equality_as_upstream(first: dict[str, Any], second: dict[str, Any]) -> None:
    assert not delete_before(first, 1, second, 1, NOW)
    assert not delete_before(second, 1, first, 1, NOW)


@pytest.mark.parametrize(("lesser", "lesser_rank", "greater", "greater_rank"), LESS,
                         ids=[f"{a['metadata']['name']}/{r}<{b['metadata']['name']}/{s}" for a, r, b, s in LESS])
def test_sorting_active_pods_with_ranks_inequality_as_upstream(lesser: dict[str, Any], lesser_rank: int,
                                                               greater: dict[str, Any], greater_rank: int) -> None:
    assert delete_before(lesser, lesser_rank, greater, greater_rank, NOW)
    assert not delete_before(greater, greater_rank, lesser, lesser_rank, NOW)


def test_an_unparsable_deletion_cost_counts_as_zero_as_upstream_reads_it() -> None:
    # GetDeletionCostFromPodAnnotations answers 0 with its error; Less ignores the error.
    def costed(value: str) -> dict[str, Any]:
        return upstream_pod(f"cost-{value}", "node", "Running", True, 0, NOW, MONTH, {DELETION_COST: value})

    for unparsable in ("abc", "+5", "007", "2147483648", ""):
        assert delete_before(costed("-1"), 1, costed(unparsable), 1, NOW), unparsable
        assert delete_before(costed(unparsable), 1, costed("1"), 1, NOW), unparsable
    assert delete_before(costed("-2147483648"), 1, costed("-0"), 1, NOW)


def test_sidecar_restarts_break_a_tie_of_container_restarts_as_compare_max_container_restarts_does() -> None:
    # Not a row of the upstream table: 1.33's compareMaxContainerRestarts (controller_utils.go) itself.
    def with_sidecar(name: str, restarts: int) -> dict[str, Any]:
        pod = upstream_pod(name, "node", "Running", True, 2, NOW, NOW)
        pod["spec"]["initContainers"] = [{"name": "proxy", "restartPolicy": "Always"}]
        pod["status"]["initContainerStatuses"] = [{"name": "proxy", "restartCount": restarts}]
        return pod

    assert delete_before(with_sidecar("flaky-sidecar", 5), 1, with_sidecar("steady-sidecar", 0), 1, NOW)
    assert not delete_before(with_sidecar("steady-sidecar", 0), 1, with_sidecar("flaky-sidecar", 5), 1, NOW)


def test_pods_doubled_up_on_a_node_go_first_as_get_pods_ranked_by_related_pods_on_same_node_ranks_them() -> None:
    crowded = [upstream_pod(f"crowded-{i}", "node-a", "Running", True, 0, MONTH, MONTH) for i in range(3)]
    alone = upstream_pod("alone", "node-b", "Running", True, 0, MONTH, MONTH)
    chosen = pods_to_delete([alone, *crowded], [alone, *crowded], 2, NOW)
    assert [p["metadata"]["name"] for p in chosen] == ["crowded-0", "crowded-1"]
    assert pods_to_delete([alone, *crowded], [], 4, NOW) == [alone, *crowded]  # all go: no sorting


# ----------------------------------------------------------------------------------------------------------------
# Scale-down honours the pod-deletion-cost


def test_scale_down_removes_the_pod_with_the_lowest_deletion_cost_set_by_a_merge_patch(fake: FakeKube) -> None:
    fake.create(worker(4))
    costs = dict(zip(names(fake), ["7", "-3", "12", "5"], strict=True))
    for pod, cost in costs.items():
        status, answer = call(fake, f"/api/v1/namespaces/{NS}/pods/{pod}", method="PATCH",
                              body={"metadata": {"annotations": {DELETION_COST: cost}}},
                              content_type="application/merge-patch+json")
        assert status == 200, answer
        assert answer["metadata"]["annotations"][DELETION_COST] == cost
    scale(fake, 3)
    assert sorted(names(fake)) == sorted(p for p, c in costs.items() if c != "-3")
    scale(fake, 1)
    assert names(fake) == [next(p for p, c in costs.items() if c == "12")]


@needs_kubectl
def test_scale_down_removes_the_pod_kubectl_annotate_made_cheapest(fake: FakeKube, tmp_path: Path) -> None:
    fake.create(worker(3))
    cheap, *others = names(fake)
    for pod in others:
        kubectl(fake, tmp_path, "annotate", "pod", pod, f"{DELETION_COST}=3")
    result = kubectl(fake, tmp_path, "annotate", "pod", cheap, f"{DELETION_COST}=1")
    assert result.stdout.strip() == f"pod/{cheap} annotated"
    patches = [r for r in fake.requests if r.method == "PATCH" and r.path.endswith(f"/pods/{cheap}")]
    assert [(r.content_type, r.status) for r in patches] == [("application/merge-patch+json", 200)]
    assert fake.get("v1", "Pod", cheap, NS)["metadata"]["annotations"][DELETION_COST] == "1"
    kubectl(fake, tmp_path, "scale", "deployment", "worker", "--replicas=2")
    assert sorted(names(fake)) == sorted(others)


def test_a_strategic_merge_patch_of_the_cost_is_read_by_the_ranking(fake: FakeKube) -> None:
    fake.create(worker(2))
    first, second = names(fake)
    api = config.new_client_from_config_dict(fake.kubeconfig(NS))
    try:
        # The typed client sends a dict as a strategic merge patch.
        client.CoreV1Api(api).patch_namespaced_pod(second, NS, {"metadata": {"annotations": {DELETION_COST: "-1"}}})
    finally:
        api.close()
    assert any(r.content_type == "application/strategic-merge-patch+json" and r.status == 200
               for r in fake.requests if r.path.endswith(f"/pods/{second}"))
    scale(fake, 1)
    assert names(fake) == [first]


# ----------------------------------------------------------------------------------------------------------------
# The registry's validation of the cost (pkg/apis/core/validation/validation.go ValidatePodSpecificAnnotations)

UPSTREAM_WORDS = ('Pod "{name}" is invalid: metadata.annotations[controller.kubernetes.io/pod-deletion-cost]: '
                  'Invalid value: "{value}": must be a 32bit integer')


@pytest.mark.parametrize("value", ["abc", "2147483648", "+3", "007", "1.5"])
def test_a_cost_that_is_not_an_int32_is_refused_with_the_upstream_422(fake: FakeKube, value: str) -> None:
    fake.create(worker(1))
    (pod,) = names(fake)
    status, answer = call(fake, f"/api/v1/namespaces/{NS}/pods/{pod}", method="PATCH",
                          body={"metadata": {"annotations": {DELETION_COST: value}}},
                          content_type="application/strategic-merge-patch+json")
    assert status == 422
    assert answer["reason"] == "Invalid"
    assert answer["message"] == UPSTREAM_WORDS.format(name=pod, value=value)
    # An update reaches the check twice (validatePodMetadataAndSpec and ValidatePodSpecificAnnotationUpdates): the
    # message shows it once, the causes twice.
    cause = {"reason": "FieldValueInvalid", "message": f'Invalid value: "{value}": must be a 32bit integer',
             "field": f"metadata.annotations[{DELETION_COST}]"}
    assert answer["details"]["causes"] == [cause, cause]
    assert DELETION_COST not in (fake.get("v1", "Pod", pod, NS)["metadata"].get("annotations") or {})


def test_a_created_pod_with_a_bad_cost_is_refused_once(fake: FakeKube) -> None:
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": "lone", "annotations": {DELETION_COST: "x"}},
           "spec": {"containers": [{"name": "c", "image": "i"}]}}
    status, answer = call(fake, f"/api/v1/namespaces/{NS}/pods", method="POST", body=pod)
    assert status == 422
    assert answer["message"] == UPSTREAM_WORDS.format(name="lone", value="x")
    assert len(answer["details"]["causes"]) == 1
    pod["metadata"]["annotations"] = {DELETION_COST: "-2147483648"}
    status, answer = call(fake, f"/api/v1/namespaces/{NS}/pods", method="POST", body=pod)
    assert status == 201, answer
    assert answer["status"] == {"phase": "Pending"}  # PrepareForCreate; nothing schedules a pod made by hand
    assert answer["spec"]["restartPolicy"] == "Always"


@needs_kubectl
def test_kubectl_annotate_with_a_bad_cost_fails_with_the_upstream_words(fake: FakeKube, tmp_path: Path) -> None:
    fake.create(worker(1))
    (pod,) = names(fake)
    result = kubectl(fake, tmp_path, "annotate", "pod", pod, f"{DELETION_COST}=lots", check=False)
    assert result.returncode == 1
    assert UPSTREAM_WORDS.format(name=pod, value="lots") in result.stderr


# ----------------------------------------------------------------------------------------------------------------
# kubectl get pods, field selectors


@needs_kubectl
def test_kubectl_get_pods_prints_the_real_columns(fake: FakeKube, tmp_path: Path) -> None:
    fake.create(worker(2))
    plain = kubectl(fake, tmp_path, "get", "pods").stdout.splitlines()
    assert plain[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert [line.split()[:4] for line in plain[1:]] == [[name, "1/1", "Running", "0"] for name in names(fake)]
    wide = kubectl(fake, tmp_path, "get", "pods", "-o", "wide").stdout.splitlines()
    assert re.split(r"\s{2,}", wide[0].strip()) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE",
                                                    "NOMINATED NODE", "READINESS GATES"]
    assert [line.split()[5:] for line in wide[1:]] == [["127.0.0.1", "fakekube-node", "<none>", "<none>"]] * 2
    assert wide[0] == fake.table("pods", NS, wide=True).splitlines()[0]  # the helper renders the same Table
    by_short_name = kubectl(fake, tmp_path, "get", "po", "-l", "app=worker", "-o", "name").stdout.split()
    assert by_short_name == [f"pod/{name}" for name in names(fake)]


@needs_kubectl
def test_kubectl_get_all_lists_pods_in_the_all_category(fake: FakeKube, tmp_path: Path) -> None:
    fake.create(worker(1))
    listed = kubectl(fake, tmp_path, "get", "all", "-o", "name").stdout.split()
    assert f"pod/{names(fake)[0]}" in listed and "deployment.apps/worker" in listed


def test_pods_are_selected_by_the_fields_the_pod_registry_exposes(fake: FakeKube) -> None:
    fake.create(worker(2))
    pending = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "by-hand", "namespace": NS},
               "spec": {"containers": [{"name": "c", "image": "i"}], "hostNetwork": True}}
    fake.create(pending)
    running = names(fake)

    def selected(selector: str) -> list[str]:
        status, answer = call(fake, f"/api/v1/namespaces/{NS}/pods?fieldSelector={selector}")
        assert status == 200, answer
        return [item["metadata"]["name"] for item in answer["items"]]

    assert selected("status.phase=Running") == running
    assert selected("status.phase!=Running") == ["by-hand"]
    assert selected("status.podIP=127.0.0.1") == running
    assert selected("spec.nodeName=fakekube-node") == running
    assert selected("spec.host=fakekube-node") == running  # the old v1 spelling
    assert selected("spec.hostNetwork=true") == ["by-hand"]
    assert selected(f"spec.restartPolicy=Always,metadata.name={running[0]}") == running[:1]
    assert selected("spec.schedulerName=default-scheduler,spec.serviceAccountName=default") == ["by-hand", *running]
    assert selected("status.nominatedNodeName=") == ["by-hand", *running]
    assert selected("status.podIPs=127.0.0.1") == []  # accepted, but not a selectable field upstream
    assert call(fake, f"/api/v1/namespaces/{NS}/pods?fieldSelector=spec.containers=x") == (400, {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "field label not supported: spec.containers", "reason": "BadRequest", "code": 400})


def test_a_field_selected_watch_sees_pods_as_they_come(fake: FakeKube) -> None:
    fake.create(worker(1))
    status, listed = call(fake, f"/api/v1/namespaces/{NS}/pods?fieldSelector=status.phase=Running")
    assert status == 200 and len(listed["items"]) == 1
    version = listed["metadata"]["resourceVersion"]
    scale(fake, 2)
    request = urllib.request.Request(
        f"{fake.url}/api/v1/namespaces/{NS}/pods?watch=true&fieldSelector=status.phase%3DRunning"
        f"&resourceVersion={version}&timeoutSeconds=1", headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10, context=fake.client_ssl_context()) as response:
        events = [json.loads(line) for line in response.read().splitlines() if line]
    # The pod is created Pending (not selected), then reported Running: it enters the selection as ADDED.
    assert [(e["type"], e["object"]["status"]["phase"]) for e in events] == [("ADDED", "Running")]


# ----------------------------------------------------------------------------------------------------------------
# RBAC


def test_rbac_forbids_pods_to_an_account_without_rights_and_allows_them_to_one_with(fake: FakeKube,
                                                                                 tmp_path: Path) -> None:
    fake.create(worker(1))
    (pod,) = names(fake)
    fake.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                 "metadata": {"name": "pod-marker", "namespace": NS},
                 "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]}]})
    fake.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": "pod-marker", "namespace": NS},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-marker"},
                 "subjects": [{"kind": "ServiceAccount", "name": "marker", "namespace": NS}]})
    body = {"metadata": {"annotations": {DELETION_COST: "4"}}}
    for account, allowed in (("stranger", False), ("marker", True)):
        api = config.new_client_from_config_dict(fake.kubeconfig(NS, service_account=(NS, account)))
        core = client.CoreV1Api(api)
        try:
            if allowed:
                assert [p.metadata.name for p in core.list_namespaced_pod(NS).items] == [pod]
                assert core.patch_namespaced_pod(pod, NS, body).metadata.annotations[DELETION_COST] == "4"
                with pytest.raises(client.ApiException) as refused:
                    core.delete_namespaced_pod(pod, NS)
                assert refused.value.status == 403
                assert json.loads(refused.value.body)["message"] == (
                    f'pods "{pod}" is forbidden: User "system:serviceaccount:{NS}:marker" cannot delete resource '
                    f'"pods" in API group "" in the namespace "{NS}"')
            else:
                with pytest.raises(client.ApiException) as refused:
                    core.list_namespaced_pod(NS)
                assert refused.value.status == 403
                assert json.loads(refused.value.body)["message"] == (
                    f'pods is forbidden: User "system:serviceaccount:{NS}:stranger" cannot list resource "pods" in '
                    f'API group "" in the namespace "{NS}"')
                with pytest.raises(client.ApiException) as refused:
                    core.patch_namespaced_pod(pod, NS, body)
                assert refused.value.status == 403
        finally:
            api.close()
