"""`inFlight` end to end: `queuescale run` in a subprocess, a real Azurite, the fake API server with pods that the
ReplicaSet ranking removes (tests/fakekube/pods.py), and each pod's count served over HTTP on 127.0.0.1.

Before a scale-in the operator writes each ready pod's in-flight count to its pod-deletion-cost, so the idle
pods go; the real kubectl reads the annotations back. As its ServiceAccount with the chart's RBAC, it can do that
only with `rbac.pods=true`; without it, the scale-in still happens and a Warning says why the pods were not chosen.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kube_client
from kubernetes import config

from controller import kills
from tests.azurite import Azurite
from tests.chart import render
from tests.fakekube.resources import Obj
from tests.fakekube.server import FakeKube
from tests.loopback import LoopbackServer, Reply, always
from tests.operator_harness import (
    KUBECTL,
    NS,
    Operator,
    cluster_with_pods,
    deployment,
    events,
    kubectl_in,
    make_queue,
    queue_name,
    replica_sets,
    replicas,
    rule,
    secret,
    start_rollout,
    status,
    wait_for,
)

COST = "controller.kubernetes.io/pod-deletion-cost"
REVISION = "deployment.kubernetes.io/revision"
COUNTS = [3, 0, 2, 0]  # what the pods made first, second, ... hold


class Pods:
    """Gives each pod the fake makes its own count server: the pods share 127.0.0.1, so each gets its own port."""

    def __init__(self, counts: list[int]) -> None:
        self.servers = [LoopbackServer(always(Reply(body=f"{n}\n".encode()))) for n in counts]
        self.counts = counts
        self.made = 0
        self.count_of_port: dict[int, int] = {}

    def __enter__(self) -> Pods:
        for server in self.servers:
            server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self.servers:
            server.__exit__(None, None, None)

    def hook(self, pod: Obj) -> None:
        server = self.servers[self.made % len(self.servers)]
        port = int(server.url.rsplit(":", 1)[1])
        self.count_of_port[port] = self.counts[self.made % len(self.counts)]
        self.made += 1
        pod["spec"]["containers"][0]["ports"] = [{"name": "in-flight", "containerPort": port}]


@pytest.fixture
def pods() -> Iterator[Pods]:
    with Pods(COUNTS) as made:
        yield made


@pytest.fixture
def cluster(pods: Pods) -> Iterator[FakeKube]:
    yield from cluster_with_pods(pods.hook)


# The harness's policy with a wait objective and 10 messages a pod, its workers killed on scale-in (the default):
# the rule keeps the account of what its scale-ins stop (controller/kills.py), in its status's memory.
ACCOUNTED = {"targetPerReplica": 10, "messagesPerReplica": 10, "serviceTime": "1s", "targetWaitSeconds": "5m",
             "scaleDown": {"stabilizationWindow": 0, "delay": 0}, "scaleToZeroDelay": "2s"}
# 15 in flight on 4 pods of 10 slots, 2 removed: their share is 15 x 2/4 = 7.5; the 2 least busy hold, in
# expectation, kills.least_busy_hold(15, 4, 10, 2), about 5.5.
SHARE = 7.5


def stopped(cluster: FakeKube, name: str) -> float:
    """What the rule's account says its scale-ins stopped, once its status carries it (the status is written
    after the scale-in's events)."""
    def account() -> float | None:
        pair = (status(cluster, name).get("memory") or {}).get("stopped")
        return None if pair is None else float(pair[1])
    found: float = wait_for("the account of stops in the status", account)
    return found


def setup(cluster: FakeKube, azurite: Azurite, tmp_path: Path, name: str, **spec: Any) -> kube_client.ApiClient:
    """Four worker pods; a queue whose 15 messages ask for 2 (10 a replica); a rule naming their counts."""
    api = config.new_client_from_config(config_file=str(cluster.write_kubeconfig(tmp_path / "admin")))
    queue = queue_name()
    make_queue(azurite, queue, 15)
    deployment(api, name, 4)
    wait_for("four ready pods", lambda: len([p for p in cluster.workload_pods(name, NS) if _ready(p)]) == 4)
    secret(api, f"{name}-queue", {"connection": azurite.connection_string}, allowed_rules=name)
    rule(api, name, queue, f"{name}-queue", inFlight={"port": "in-flight"}, **spec)
    return api


def _ready(pod: Obj) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def kubectl_costs(kubeconfig: Path) -> dict[int, str | None]:
    """Each remaining pod's deletion cost by its count port, as the real kubectl reads them."""
    out = subprocess.run([str(KUBECTL), "--kubeconfig", str(kubeconfig), "get", "pods", "-n", NS, "-o", "json"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    found = {}
    for pod in json.loads(out)["items"]:
        port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
        found[port] = (pod["metadata"].get("annotations") or {}).get(COST)
    return found


def scaled_down(cluster: FakeKube, name: str) -> list[dict[str, Any]]:
    return [e for e in events(cluster, name) if e["reason"] == "ScaledDown"]


def test_the_idle_pods_go_and_the_busy_keep_their_work(
    cluster: FakeKube, pods: Pods, azurite: Azurite, tmp_path: Path
) -> None:
    setup(cluster, azurite, tmp_path, "renders", policy=ACCOUNTED)
    operator = Operator(cluster.write_kubeconfig(tmp_path / "operator"), tmp_path / "operator.log").start()
    try:
        wait_for("the scale-in to 2", lambda: replicas(cluster, "renders") == 2 and
                 len(cluster.workload_pods("renders", NS)) == 2, timeout=30)
        # The least busy of all went: the account counts what they hold in expectation, not their share.
        assert stopped(cluster, "renders") == pytest.approx(
            kills.least_busy_hold(15.0, 4, 10, 2), rel=0.01)
        kept = kubectl_costs(cluster.write_kubeconfig(tmp_path / "kubectl"))
        assert sorted(pods.count_of_port[port] for port in kept) == [2, 3]  # the two holding nothing went
        assert {pods.count_of_port[port]: cost for port, cost in kept.items()} == {3: "3", 2: "2"}
        (event,) = wait_for("the ScaledDown event", lambda: scaled_down(cluster, "renders"))
        assert event["message"].startswith("4 -> 2: ")
        assert event["message"].endswith(
            "; the 2 least busy of 4 ready pods go, holding 0 of the 5 messages in flight (counts written to "
            f"{COST} of 4)")
        assert not [e for e in events(cluster, "renders") if e["reason"] == "InFlightUnread"]
    finally:
        operator.stop()


def install_chart_rbac(cluster: FakeKube, *options: str) -> None:
    """The chart's ServiceAccount, ClusterRole and bindings (the fake serves no admission policies)."""
    cluster.ensure_namespace("queuescale-system")
    for doc in render(*options):
        if doc["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
            cluster.create(doc)


def test_a_scale_in_during_a_rollout_does_not_call_its_pods_the_least_busy_of_all(
    cluster: FakeKube, pods: Pods, azurite: Azurite, tmp_path: Path
) -> None:
    """A rollout under way (`kubectl set image`, then `kubectl rollout pause` once pods of both ReplicaSets are
    ready): the Deployment controller splits a scale-in between its ReplicaSets in proportion to their sizes
    (kubernetes pkg/controller/deployment/sync.go, `scale`) and each removes its own least busy, so the event must
    not say the least busy of all went. Before, it said "the 1 least busy of 3 ready pods go"."""
    api = config.new_client_from_config(config_file=str(cluster.write_kubeconfig(tmp_path / "admin")))
    admin = cluster.write_kubeconfig(tmp_path / "kubectl")
    queue = queue_name()
    make_queue(azurite, queue, 15)
    start_rollout(cluster, api, admin, "renders", 3.0)  # the new pods take 3 s: the rollout moves a step at a time

    def sets() -> list[Obj]:
        return replica_sets(cluster)

    # New 2 and old 3, then once those 2 are ready old 1 and new 4 (2 of them ready). The second step's pods take
    # long enough that the pause comes before they are ready, however slow the machine.
    cluster.set_ready_delay(30.0)
    wait_for("ready pods in both ReplicaSets", lambda: sorted(
        (int(rs["spec"]["replicas"]), int(rs["status"].get("readyReplicas") or 0)) for rs in sets()) == [
        (1, 1), (4, 2)], timeout=20)
    kubectl_in(admin, "rollout", "pause", "deployment/renders")
    secret(api, "renders-queue", {"connection": azurite.connection_string}, allowed_rules="renders")
    rule(api, "renders", queue, "renders-queue", inFlight={"port": "in-flight"}, policy=ACCOUNTED)
    operator = Operator(cluster.write_kubeconfig(tmp_path / "operator"), tmp_path / "operator.log").start()
    try:
        wait_for("the scale-in to 2", lambda: replicas(cluster, "renders") == 2, timeout=30)
        (event,) = wait_for("the ScaledDown event", lambda: scaled_down(cluster, "renders"))
        assert event["message"].startswith("4 -> 2: ")
        assert re.search(
            r"; the ready pods belong to 2 controllers \(\d of ReplicaSet renders-\w+, \d of ReplicaSet "
            r"renders-\w+\), as in a rollout: the Deployment controller decides how many each loses and each "
            r"removes its own least busy, so those that go may hold more than the \d+ of the \d+ messages in flight "
            rf"the \d least busy of \d ready pods hold \(counts written to {re.escape(COST)} of \d\)$",
            event["message"]), event["message"]
        assert "ready pods go" not in event["message"]
        # Nor does the account of stops count what the least busy of all would hold: it counts the pods' share.
        # Before, it counted kills.least_busy_hold(15, 4, 10, 2), about 5.5.
        assert stopped(cluster, "renders") == pytest.approx(SHARE, rel=0.01)
        # The split is the Deployment controller's (sync.go `scale`): the new ReplicaSet, the larger, gives 2 (its
        # two pods not yet ready); with its 2 left available it is saturated, so the old one's ready pod goes too,
        # whatever its count.
        (old,) = [rs["metadata"]["name"] for rs in sets() if rs["metadata"]["annotations"][REVISION] == "1"]
        (new,) = [rs["metadata"]["name"] for rs in sets() if rs["metadata"]["annotations"][REVISION] == "2"]
        assert {rs["metadata"]["name"]: int(rs["spec"]["replicas"]) for rs in sets()} == {old: 0, new: 2}
        scaled = [e["message"] for e in cluster.events(NS) if e.get("reason") == "ScalingReplicaSet"]
        assert scaled[-2:] == [f"Scaled down replica set {new} to 2 from 4", f"Scaled down replica set {old} to 0 from 1"]
    finally:
        operator.stop()


@pytest.mark.parametrize("granted", [True, False], ids=["rbac.pods", "no pods grant"])
def test_the_chart_grants_pods_only_with_rbac_pods_and_the_scale_in_happens_either_way(
    cluster: FakeKube, pods: Pods, azurite: Azurite, tmp_path: Path, granted: bool
) -> None:
    install_chart_rbac(cluster, *(["--set", "rbac.pods=true"] if granted else []))
    setup(cluster, azurite, tmp_path, "renders")
    account = cluster.write_kubeconfig(tmp_path / "operator", "queuescale-system",
                                       service_account=("queuescale-system", "queuescale-operator"))
    operator = Operator(account, tmp_path / "operator.log").start()
    try:
        wait_for("the scale-in to 2", lambda: replicas(cluster, "renders") == 2 and
                 len(cluster.workload_pods("renders", NS)) == 2, timeout=30)
        kept = sorted(pods.count_of_port[p["spec"]["containers"][0]["ports"][0]["containerPort"]]
                      for p in cluster.workload_pods("renders", NS))
        (event,) = wait_for("the ScaledDown event", lambda: scaled_down(cluster, "renders"))
        # The Warning is written just after the ScaledDown event: waited for where it is expected.
        unread = [e for e in events(cluster, "renders") if e["reason"] == "InFlightUnread"] if granted else wait_for(
            "the InFlightUnread warning",
            lambda: [e for e in events(cluster, "renders") if e["reason"] == "InFlightUnread"])
        if granted:
            assert kept == [2, 3]
            assert "the 2 least busy of 4 ready pods go, holding 0 of the 5" in event["message"]
            assert unread == []
        else:
            # Without the grant the ReplicaSet chose (the newest first, all costs equal), and the user is told why.
            assert [e["message"] for e in unread] == [
                "pods removed as the ReplicaSet chooses: the operator may not list pods in shop (install the "
                "chart with rbac.pods=true, which grants get, list and patch on pods)"]
            assert event["message"].endswith("; " + unread[0]["message"])
            assert all(COST not in (p["metadata"].get("annotations") or {})
                       for p in cluster.workload_pods("renders", NS))
    finally:
        operator.stop()


def test_a_pod_that_cannot_be_read_leaves_every_cost_alone(
    cluster: FakeKube, pods: Pods, azurite: Azurite, tmp_path: Path
) -> None:
    pods.servers[1].script = always(Reply(status=503, body=b"starting"))  # the second pod made answers 503
    setup(cluster, azurite, tmp_path, "renders", policy=ACCOUNTED)
    operator = Operator(cluster.write_kubeconfig(tmp_path / "operator"), tmp_path / "operator.log").start()
    try:
        wait_for("the scale-in to 2", lambda: replicas(cluster, "renders") == 2, timeout=30)
        (unread,) = wait_for("the InFlightUnread warning", lambda: [
            e for e in events(cluster, "renders") if e["reason"] == "InFlightUnread"])
        assert unread["type"] == "Warning"
        assert unread["message"].startswith("pods removed as the ReplicaSet chooses: pod renders-")
        assert unread["message"].endswith(" answered HTTP 503 on port 'in-flight'")
        assert "starting" not in unread["message"]
        assert all(COST not in (p["metadata"].get("annotations") or {})
                   for p in cluster.workload_pods("renders", NS))
        # The ReplicaSet chose blind, so the account counts the removed pods' share of what is in flight.
        assert stopped(cluster, "renders") == pytest.approx(SHARE, rel=0.01)
    finally:
        operator.stop()
