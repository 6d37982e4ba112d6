"""The fake's StatefulSet controller (with `pods=True`) against upstream's documented behaviour: pods named by
ordinal; with OrderedReady (the default) one at a time, each once the one below it is Running and Ready; with
Parallel all at once; a scale-down removes the highest ordinals first; a deleted pod comes back under its name.
Upstream: pkg/controller/statefulset/stateful_set_control.go `updateStatefulSet` (read in the v1.28 tree), and the
"Pod Management Policies" of the StatefulSet concept page. The real kubectl scales it and lists the pods.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakekube import FakeKube
from tests.kube.test_fake_pods import kubectl, needs_kubectl

NS = "shop"  # the namespace of tests/kube/test_fake_pods.py, whose kubectl helper writes its kubeconfig
START = 0.4  # seconds a pod takes to turn ready


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    server = FakeKube(pods=True, ready_delay=START).start()
    try:
        server.ensure_namespace(NS)
        yield server
    finally:
        server.stop()


def stateful_set(replicas: int, policy: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": replicas, "serviceName": "web", "selector": {"matchLabels": {"app": "web"}},
                            "template": {"metadata": {"labels": {"app": "web"}},
                                         "spec": {"containers": [{"name": "web", "image": "web:1"}]}}}
    if policy is not None:
        spec["podManagementPolicy"] = policy
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web", "namespace": NS},
            "spec": spec}


def pods(fake: FakeKube) -> list[tuple[str, bool]]:
    """Each pod of the StatefulSet by name, and whether it is ready."""
    return [(p["metadata"]["name"], any(c["type"] == "Ready" and c["status"] == "True"
                                        for c in p["status"].get("conditions") or []))
            for p in fake.workload_pods("web", NS, kind="StatefulSet")]


def watch_pods(fake: FakeKube, until: Any, timeout: float = 15.0) -> list[list[tuple[str, bool]]]:
    """Every distinct state of the pods seen, polling every 20 ms, until `until(state)`."""
    seen: list[list[tuple[str, bool]]] = []
    deadline = time.monotonic() + timeout
    while True:
        state = sorted(pods(fake))
        if not seen or seen[-1] != state:
            seen.append(state)
        if until(state):
            return seen
        assert time.monotonic() < deadline, f"timed out; seen {seen}"
        time.sleep(0.02)


def test_ordered_ready_makes_each_pod_once_the_one_below_it_is_ready(fake: FakeKube) -> None:
    started = time.monotonic()
    fake.create(stateful_set(3))
    seen = watch_pods(fake, lambda state: state == [("web-0", True), ("web-1", True), ("web-2", True)])
    took = time.monotonic() - started
    # Never a pod whose lower neighbour is not ready: web-1 only after web-0 is, web-2 only after web-1 is.
    for state in seen:
        names = [name for name, _ in state]
        assert names == [f"web-{i}" for i in range(len(names))], seen
        assert all(ready for _, ready in state[:-1]), seen
    assert took >= 3 * START, took  # three start-ups, one after the other
    status = fake.get("apps/v1", "StatefulSet", "web", NS)["status"]
    assert (status["replicas"], status["readyReplicas"], status["currentReplicas"]) == (3, 3, 3)
    pod = fake.get("v1", "Pod", "web-1", NS)
    assert pod["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == "web-1"
    assert pod["metadata"]["labels"]["apps.kubernetes.io/pod-index"] == "1"
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("web-1", "web")
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "StatefulSet"


def test_parallel_makes_every_pod_at_once(fake: FakeKube) -> None:
    fake.create(stateful_set(3, "Parallel"))
    seen = watch_pods(fake, lambda state: len(state) == 3 and all(ready for _, ready in state))
    assert [name for name, _ in seen[0]] == ["web-0", "web-1", "web-2"], seen  # all three before any is ready
    assert not any(ready for _, ready in seen[0]), seen


@needs_kubectl
def test_a_scale_down_removes_the_highest_ordinals_and_a_deleted_pod_comes_back_under_its_name(
    fake: FakeKube, tmp_path: Path
) -> None:
    fake.create(stateful_set(3, "Parallel"))
    watch_pods(fake, lambda state: len(state) == 3 and all(ready for _, ready in state))
    kubectl(fake, tmp_path, "scale", "statefulset/web", "--replicas=1")
    watch_pods(fake, lambda state: [name for name, _ in state] == ["web-0"])
    shown = kubectl(fake, tmp_path, "get", "pods", "-n", NS, "-o", "name").stdout.split()
    assert shown == ["pod/web-0"]
    uid = fake.get("v1", "Pod", "web-0", NS)["metadata"]["uid"]
    kubectl(fake, tmp_path, "delete", "pod", "web-0", "-n", NS)
    watch_pods(fake, lambda state: state == [("web-0", True)])
    assert fake.get("v1", "Pod", "web-0", NS)["metadata"]["uid"] != uid


def test_pods_ready_at_once_still_come_one_after_the_other_to_the_full_count() -> None:
    # With no ready delay each pod is ready when made; the next ordinal must still come (a pass per pod).
    server = FakeKube(pods=True).start()
    try:
        server.ensure_namespace(NS)
        server.create(stateful_set(3))
        watch_pods(server, lambda state: state == [("web-0", True), ("web-1", True), ("web-2", True)])
    finally:
        server.stop()
