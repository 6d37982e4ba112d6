"""End to end: `queuescale run` in a subprocess, a real Azurite, and the fake API server.

Each test enqueues with the Azure SDK (one also with redis-cli), lets the operator poll and scale through the
scale subresource, and checks what a user would see: the Deployment's replicas, the rule's status and conditions,
events, /metrics, and the printer columns.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import yaml
from kubernetes import client as kube_client

from controller.model.rule import API_GROUP, API_VERSION
from tests.azurite import Azurite
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
    setup_rule,
    status,
    wait_for,
    writes_outside_the_lease,
)
from tests.servers import RedisServer

# ---------------------------------------------------------------------------------------------- the story


def test_burst_scales_up_then_drains_to_zero_and_everything_tells_the_same_story(
    azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator]
) -> None:
    # Tolerance 0: a poll may land mid-burst, and the last count must decide exactly.
    queue = setup_rule(api, azurite, "orders", messages=0, policy={
        "targetPerReplica": 10, "tolerance": 0, "scaleDown": {"stabilizationWindow": 0, "delay": 0},
        "scaleToZeroDelay": "2s"})
    operator = operators()
    wait_for("the rule to be Ready", lambda: condition(kube, "orders", "Ready").get("status") == "True")
    assert replicas(kube, "orders") == 0

    for i in range(95):
        queue.send_message(f"burst {i}")
    sent = time.monotonic()
    wait_for("10 replicas for 95 messages at 10 per replica", lambda: replicas(kube, "orders") == 10, timeout=10,
             describe=lambda: f"replicas {replicas(kube, 'orders')}, {status(kube, 'orders').get('lastDecision')}")
    assert time.monotonic() - sent < 4.0  # one 1 s polling interval, plus start-up of the HTTP pools

    # Counts alone are written at most every --status-interval (1 s here): wait for the last one.
    wait_for("status to show the scale", lambda: status(kube, "orders").get("desiredReplicas") == 10
             and status(kube, "orders").get("queueLength") == 95, describe=lambda: str(status(kube, "orders")))
    current = status(kube, "orders")
    assert current["currentReplicas"] == 10
    assert current["sources"][0]["count"] == 95
    active = condition(kube, "orders", "Active")
    assert active["status"] == "True"
    assert active["reason"] in ("ActivatedFromZero", "ScaledUp", "WithinTolerance", "Steady")
    # A poll may land mid-burst (a loaded machine sends slowly): the first step wakes from zero, the last is 10.
    scaled = [e["message"] for e in events(kube, "orders") if e["reason"] == "ScaledUp"]
    assert scaled[0].startswith("0 -> ") and "ActivatedFromZero" in scaled[0]
    assert scaled[-1].split(":")[0].endswith("-> 10")
    metrics = operator.metrics()
    assert 'queuescale_desired_replicas{namespace="shop",rule="orders"} 10.0' in metrics
    ups = float(len(scaled))  # one scale-up, or two when a poll landed mid-burst: the metric counts what the events say
    assert f'queuescale_scale_operations_total{{direction="up",namespace="shop",result="success",rule="orders"}} {ups}' in metrics
    assert "queuescale_leader 1.0" in metrics
    table = kube.table("qs", NS)
    assert "orders" in table.splitlines()[1] and " 10 " in table.splitlines()[1]

    queue.clear_messages()
    wait_for("scale-in to 1 once drained", lambda: replicas(kube, "orders") == 1, timeout=10)
    wait_for("scale to zero after the 2 s delay", lambda: replicas(kube, "orders") == 0, timeout=10)
    downs = wait_for("two ScaledDown events", lambda: [e["message"] for e in events(kube, "orders")
                                                      if e["reason"] == "ScaledDown"][1:] and
                     [e["message"] for e in events(kube, "orders") if e["reason"] == "ScaledDown"])
    assert downs[0].startswith("10 -> 1: ") and downs[1].startswith("1 -> 0: ScaledToZero")
    wait_for("status at zero", lambda: status(kube, "orders").get("currentReplicas") == 0)
    assert condition(kube, "orders", "Active")["status"] == "False"
    assert operator.stop() == 0


def test_bad_rules_get_ready_false_with_a_reason_and_leave_the_others_alone(
    azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator]
) -> None:
    good = setup_rule(api, azurite, "good")
    # A rule whose Secret does not exist.
    make_queue(azurite, "lonely")
    deployment(api, "no-secret", 2)
    rule(api, "no-secret", "lonely", "missing-secret")
    # A rule with a wrong account key.
    wrong = azurite.connection_string.replace(azurite.key, base64.b64encode(b"x" * 64).decode())
    deployment(api, "wrong-key", 2)
    secret(api, "wrong-key-queue", {"connection": wrong})
    rule(api, "wrong-key", "lonely", "wrong-key-queue")
    # A rule the API server accepts (a CRD cannot check time zones) but our validation rejects.
    deployment(api, "invalid", 2)
    custom(api).create_namespaced_custom_object(API_GROUP, API_VERSION, NS, "queuescalers", {
        "apiVersion": RULES_API, "kind": "QueueScaler", "metadata": {"name": "invalid"},
        "spec": {"scaleTargetRef": {"name": "invalid"}, "maxReplicas": 2,
                 "sources": [{"type": "azure-queue", "queueName": "lonely",
                              "connectionSecretRef": {"name": "x", "key": "y"}}],
                 "schedules": [{"name": "office", "start": "08:00", "end": "18:00", "minReplicas": 1,
                                "timeZone": "Mars/Olympus"}]}})
    operator = operators()
    for i in range(30):
        good.send_message(str(i))
    wait_for("the good rule to scale", lambda: replicas(kube, "good") == 3)

    no_secret = wait_for("SecretNotFound", lambda: condition(kube, "no-secret", "Ready").get("reason") == "SecretNotFound"
                         and condition(kube, "no-secret", "Ready"))
    assert no_secret["status"] == "False"
    assert "Secret 'missing-secret' not found in namespace 'shop'" in no_secret["message"]
    wrong_key = wait_for("AuthenticationFailed",
                         lambda: condition(kube, "wrong-key", "Ready").get("reason") == "AuthenticationFailed"
                         and condition(kube, "wrong-key", "Ready"))
    assert wrong_key["status"] == "False"
    invalid = wait_for("InvalidSpec", lambda: condition(kube, "invalid", "Ready").get("reason") == "InvalidSpec"
                       and condition(kube, "invalid", "Ready"))
    assert 'spec.schedules[0].timeZone: must be an IANA time zone such as "Europe/Paris", got "Mars/Olympus"' in (
        invalid["message"])
    # The rules gauge, counted when scraped: the good one ready, two not ready, one invalid.
    scraped = operator.metrics()
    for state, count in (("ready", 1), ("not_ready", 2), ("invalid", 1), ("paused", 0)):
        assert f'queuescale_rules{{state="{state}"}} {count}.0' in scraped, state
    # A failed poll never scales down; an invalid rule is not acted on.
    time.sleep(2)
    assert replicas(kube, "no-secret") == 2 and replicas(kube, "wrong-key") == 2 and replicas(kube, "invalid") == 2
    warnings = {e["reason"] for e in kube.events(NS) if e["type"] == "Warning"}
    assert {"SecretNotFound", "AuthenticationFailed", "InvalidSpec"} <= warnings
    # Rate-limited: a broken rule ticking every second for seconds says each thing once.
    assert sum(1 for e in events(kube, "no-secret") if e["reason"] == "SecretNotFound") == 1
    # The key never appears in what the operator wrote.
    everything = yaml.safe_dump([kube.list_objects(RULES_API, "QueueScaler", NS), kube.events(NS)])
    assert azurite.key not in everything and base64.b64encode(b"x" * 64).decode() not in everything


def test_spec_change_pause_and_delete(
    azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator]
) -> None:
    queue = setup_rule(api, azurite, "thumbs", messages=40)
    operators()
    wait_for("4 replicas", lambda: replicas(kube, "thumbs") == 4)
    patch = {"spec": {"policy": {"targetPerReplica": 5}}}
    custom(api).patch_namespaced_custom_object(API_GROUP, API_VERSION, NS, "queuescalers", "thumbs", patch)
    wait_for("8 replicas after the spec change", lambda: replicas(kube, "thumbs") == 8)
    wait_for("observedGeneration 2", lambda: status(kube, "thumbs").get("observedGeneration") == 2)

    pause = {"metadata": {"annotations": {"queuescale.io/paused": "true"}}}
    custom(api).patch_namespaced_custom_object(API_GROUP, API_VERSION, NS, "queuescalers", "thumbs", pause)
    wait_for("Paused=True", lambda: condition(kube, "thumbs", "Paused").get("status") == "True")
    assert condition(kube, "thumbs", "Paused")["reason"] == "PausedByAnnotation"
    queue.clear_messages()
    time.sleep(2.5)
    assert replicas(kube, "thumbs") == 8

    # Deleted: nothing may scale its Deployment any more, however long the queue grows.
    custom(api).delete_namespaced_custom_object(API_GROUP, API_VERSION, NS, "queuescalers", "thumbs")
    for i in range(200):
        queue.send_message(str(i))
    time.sleep(2.5)
    assert replicas(kube, "thumbs") == 8


def test_restart_mid_cooldown_does_not_scale_down_early(
    azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator]
) -> None:
    queue = setup_rule(api, azurite, "jobs", messages=50, policy={
        "targetPerReplica": 10, "scaleDown": {"cooldown": "8s", "stabilizationWindow": 0, "delay": 0}, "scaleToZeroDelay": 0})
    first = operators()
    wait_for("5 replicas", lambda: replicas(kube, "jobs") == 5)
    scaled_at = time.monotonic()
    wait_for("the scale to be in the stored memory",
             lambda: (status(kube, "jobs").get("memory") or {}).get("lastScaleUp") is not None)
    assert first.stop(signal.SIGKILL) != 0
    queue.clear_messages()
    operators()
    time.sleep(max(0.0, 8.0 - (time.monotonic() - scaled_at) - 1.5))
    assert replicas(kube, "jobs") == 5, "scaled down inside the cooldown after a restart"
    wait_for("the scale-down once the cooldown is over", lambda: replicas(kube, "jobs") == 0, timeout=15)
    # By the operator's own clock (our observation of the scale-up lags it by up to a poll): at least 8 s apart.
    memory = wait_for("the scale-down in the stored memory",
                      lambda: (m := status(kube, "jobs").get("memory") or {}).get("lastScaleDown") and m)
    assert memory["lastScaleDown"] - memory["lastScaleUp"] >= 8.0


def test_two_operators_with_leader_election_never_write_together(
    azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator]
) -> None:
    queue = setup_rule(api, azurite, "video", messages=20)
    lease = ("--leader-elect", "--lease-namespace", NS, "--lease-duration", "3s", "--renew-deadline", "2s",
             "--retry-period", "0.5s")
    a = operators(*lease, "--identity", "op-a")
    b = operators(*lease, "--identity", "op-b")
    wait_for("2 replicas", lambda: replicas(kube, "video") == 2)
    holder = kube.get("coordination.k8s.io/v1", "Lease", "queuescale-operator", NS)["spec"]["holderIdentity"]
    leader, follower = (a, b) if holder == "op-a" else (b, a)
    assert "queuescale_leader 1.0" in leader.metrics() and "queuescale_leader 0.0" in follower.metrics()

    outside, handovers = writes_outside_the_lease(kube)
    assert not outside, f"writes while the lease named another replica: {outside[:5]}; hand-overs: {handovers}"
    assert any(r.user_agent == f"queuescale/0.1.0 ({holder})" and "/scale" in r.path for r in list(kube.requests))

    leader.stop(signal.SIGKILL)
    killed = time.monotonic()
    for i in range(40):
        queue.send_message(str(i))
    wait_for("the follower to take over and scale", lambda: replicas(kube, "video") == 6, timeout=15)
    assert time.monotonic() - killed < 3.0 + 2.0 + 2.0  # lease duration, a retry, a poll
    new_holder = kube.get("coordination.k8s.io/v1", "Lease", "queuescale-operator", NS)["spec"]["holderIdentity"]
    assert new_holder != holder

    # A clean stop releases the lease at once.
    assert follower.stop() == 0
    released = kube.get("coordination.k8s.io/v1", "Lease", "queuescale-operator", NS)["spec"]
    assert released["holderIdentity"] in ("", None)


def test_operator_survives_a_dropped_watch_and_api_faults(
    azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator]
) -> None:
    queue = setup_rule(api, azurite, "flaky", messages=10)
    operators()
    wait_for("1 replica", lambda: replicas(kube, "flaky") == 1)
    kube.drop_watches()
    kube.compact()  # the watch resumes from a version that is gone: 410, relist
    kube.add_fault(path=r"/scale", method="PUT|PATCH", status=429, retry_after=1, times=2)
    for i in range(60):
        queue.send_message(str(i))
    wait_for("7 replicas despite 429s", lambda: replicas(kube, "flaky") == 7, timeout=15)
    rule(api, "late", "lonely-late", "late-queue")  # a rule created after the relist is seen
    wait_for("the new rule to get a status", lambda: condition(kube, "late", "Ready").get("status") == "False")


def test_run_without_a_cluster_is_a_clear_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    result = subprocess.run(
        [sys.executable, "-m", "controller", "run", "--kubeconfig", str(tmp_path / "missing"), "--metrics-port", "0",
         "--health-port", "0", "--bind-address", "127.0.0.1"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, env=env,
    )
    assert result.returncode == 2
    assert "cannot load a Kubernetes configuration" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_rule_summing_an_azure_queue_and_a_redis_list_scales_on_both(
    azurite: Azurite, redis_server: RedisServer, kube: FakeKube, api: kube_client.ApiClient,
    operators: Callable[..., Operator]
) -> None:
    queue = make_queue(azurite, queue_name(), messages=25)
    jobs = f"jobs:{uuid.uuid4().hex[:8]}"
    redis_server.cli("RPUSH", jobs, *[str(i) for i in range(17)])
    deployment(api, "mixed", 0)
    secret(api, "mixed-queue", {"connection": azurite.connection_string})
    secret(api, "mixed-redis", {"password": redis_server.password})
    rule(api, "mixed", queue.queue_name, "mixed-queue", sources=[
        {"type": "azure-queue", "queueName": queue.queue_name,
         "connectionSecretRef": {"name": "mixed-queue", "key": "connection"}},
        {"type": "redis-list", "listName": jobs, "host": "127.0.0.1", "port": redis_server.port,
         "passwordSecretRef": {"name": "mixed-redis", "key": "password"}},
    ], policy={"targetPerReplica": 10, "tolerance": 0, "scaleDown": {"stabilizationWindow": 0, "delay": 0},
               "scaleToZeroDelay": "2s"})
    operators()

    wait_for("5 replicas for 25 + 17 messages at 10 per replica", lambda: replicas(kube, "mixed") == 5,
             describe=lambda: f"replicas {replicas(kube, 'mixed')}, {status(kube, 'mixed').get('sources')}")
    wait_for("status to show both sources", lambda: status(kube, "mixed").get("queueLength") == 42)
    assert [s["count"] for s in status(kube, "mixed")["sources"]] == [25, 17]

    queue.clear_messages()  # the Redis list alone now: 17 -> 2 replicas
    wait_for("2 replicas for the list alone", lambda: replicas(kube, "mixed") == 2,
             describe=lambda: f"replicas {replicas(kube, 'mixed')}, {status(kube, 'mixed').get('sources')}")
    redis_server.cli("DEL", jobs)
    wait_for("zero once both are empty", lambda: replicas(kube, "mixed") == 0, timeout=15)
    everything = yaml.safe_dump([kube.list_objects(RULES_API, "QueueScaler", NS), kube.events(NS)])
    assert redis_server.password not in everything
