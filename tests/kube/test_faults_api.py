"""Fault injection on the Kubernetes API side, end to end: `queuescale run` against the fake API server (faults,
latency, dropped watches) and Azurite. Each case checks that the Deployment ends where the queue says and was
never written with a stale decision.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kubernetes import client as kube_client

from tests.azurite import Azurite
from tests.fakekube.server import FakeKube
from tests.operator_harness import NS, Operator, condition, replicas, setup_rule, status, wait_for


def scale_writes(kube: FakeKube, name: str) -> list[int]:
    """The status codes of every PUT/PATCH of the Deployment's scale, in order."""
    return [r.status for r in list(kube.requests)
            if r.method in ("PUT", "PATCH") and r.path.endswith(f"/deployments/{name}/scale")]


def test_kubectl_scale_between_our_read_and_write_gets_409_and_we_decide_again(
    azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator]
) -> None:
    queue = setup_rule(api, azurite, "race", messages=0, replicas=0)
    operators()
    wait_for("Ready", lambda: condition(kube, "race", "Ready").get("status") == "True")
    # Hold our next scale write for 1 s; meanwhile someone runs `kubectl scale --replicas=7`.
    kube.add_fault(path=r"/deployments/race/scale$", method="PUT", latency=1.0, times=1)
    for i in range(30):
        queue.send_message(str(i))
    wait_for("our write to be in flight", lambda: ("PUT", f"/apis/apps/v1/namespaces/{NS}/deployments/race/scale")
             in list(kube.arrived), timeout=10)
    apps = kube_client.AppsV1Api(api)
    apps.patch_namespaced_deployment_scale("race", NS, {"spec": {"replicas": 7}})
    wait_for("the 409 on our stale write", lambda: 409 in scale_writes(kube, "race"), timeout=10)
    # Decided again from the fresh read (7): 30 messages at 10 per replica want 3; scale-down waits for the
    # cooldown/stabilization the rule sets, so the only write allowed after the 409 is towards 3.
    wait_for("the decision made again from the fresh read", lambda: replicas(kube, "race") == 3, timeout=15)
    writes = scale_writes(kube, "race")
    assert writes.count(409) == 1, writes
    assert status(kube, "race").get("currentReplicas") in (3, None) or replicas(kube, "race") == 3


def test_429_with_retry_after_and_500s_on_status_and_scale_still_end_at_the_right_count(
    azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator]
) -> None:
    queue = setup_rule(api, azurite, "throttled", messages=10, replicas=1)
    operator = operators()
    wait_for("Ready", lambda: condition(kube, "throttled", "Ready").get("status") == "True")
    kube.add_fault(path=r"/throttled/scale$", method="PUT", status=429, retry_after=1, times=2)
    kube.add_fault(path=r"/throttled/status$", method="PATCH", status=500, times=3)
    kube.add_fault(path=r"/throttled/scale$", method="GET", status=500, times=2)
    for i in range(40):
        queue.send_message(str(i))
    wait_for("5 replicas for 50 messages despite 429s and 500s", lambda: replicas(kube, "throttled") == 5,
             timeout=20)
    wait_for("the status to catch up", lambda: status(kube, "throttled").get("currentReplicas") == 5, timeout=20)
    writes = scale_writes(kube, "throttled")
    assert writes.count(429) == 2 and all(code in (200, 429) for code in writes), writes
    assert "queuescale_scale_operations_total" in operator.metrics()


def test_a_slow_api_server_and_dropped_watches_with_410_lose_no_rule(
    azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator]
) -> None:
    queue = setup_rule(api, azurite, "steady", messages=20, replicas=0)
    operators()
    wait_for("2 replicas", lambda: replicas(kube, "steady") == 2)
    kube.add_fault(path=".*", method=".*", latency=0.3, times=None)  # every call 300 ms late
    stop = threading.Event()

    def disrupt() -> None:
        while not stop.wait(1.0):
            kube.drop_watches()
            kube.compact()

    disruptor = threading.Thread(target=disrupt, daemon=True)
    disruptor.start()
    try:
        for i in range(40):
            queue.send_message(str(i))
        wait_for("6 replicas through a slow API server", lambda: replicas(kube, "steady") == 6, timeout=25)
        setup_rule(api, azurite, "newcomer", messages=10, replicas=0)
        wait_for("a rule created while watches break to be picked up", lambda: replicas(kube, "newcomer") == 1,
                 timeout=25)
    finally:
        stop.set()
        disruptor.join(timeout=5)
        kube.clear_faults()
