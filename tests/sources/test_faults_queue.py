"""Fault injection on the queue side, end to end: `queuescale run` against the fake API server and a scripted Get
Queue Metadata server on loopback that answers like Azure (counts in `x-ms-approximate-messages-count`, errors
with `x-ms-error-code` and an XML body).

Each case checks what a user sees (conditions, events, metrics) and that the Deployment is never scaled on a
failure: the policy's fallback holds the current count.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from pathlib import Path

from kubernetes import client as kube_client

from tests.fakekube.server import FakeKube
from tests.faults import OLD_SIG, FakeQueueService, start_rule, watch_replicas
from tests.operator_harness import NS, Operator, condition, events, replicas, status, wait_for
from tests.transports import http_client

NEW_SIG = "newsig0after0rotation0BBBBBBBBBB"
SECRETS_USED = (OLD_SIG, NEW_SIG)












def metric(operator: Operator, prefix: str) -> float:
    total = 0.0
    for line in operator.metrics().splitlines():
        if line.startswith(prefix):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_storm_of_server_busy_holds_replicas_and_says_so(
    kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator], queues: FakeQueueService,
    tmp_path: Path,
) -> None:
    start_rule(api, queues, "busy", count=40, replicas_now=1)
    operator = operators()
    wait_for("4 replicas", lambda: replicas(kube, "busy") == 4)
    seen, stop = watch_replicas(kube, "busy")
    queues.set(mode="busy")
    wait_for("Ready=False ServerBusy", lambda: condition(kube, "busy", "Ready").get("reason") == "ServerBusy",
             timeout=20)
    wait_for("the fallback", lambda: condition(kube, "busy", "Fallback").get("status") == "True", timeout=20)
    stop()
    assert set(seen) == {4}, f"replicas moved during the 503 storm: {sorted(set(seen))}"
    assert "busy or failing" in condition(kube, "busy", "Ready")["message"]
    assert any(e["reason"] == "ServerBusy" for e in events(kube, "busy"))
    assert metric(operator, 'queuescale_poll_errors_total{namespace="shop",reason="ServerBusy",rule="busy"}') >= 1

    queues.set(mode="ok", counts={"busy": 0})
    wait_for("Ready again", lambda: condition(kube, "busy", "Ready").get("status") == "True", timeout=20)
    wait_for("scale-in once the queue answers empty", lambda: replicas(kube, "busy") == 0, timeout=20)


def test_a_busy_peek_leaves_the_count_to_scale_on_and_only_the_age_missing(
    kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator], queues: FakeQueueService,
) -> None:
    queues.set(peek_mode="busy", waited=7.0)  # Peek Messages alone answers 503 ServerBusy
    # Count mode, so the age is asked for explicitly (`auto` peeks only where the policy learns from it).
    start_rule(api, queues, "peeky", count=40, replicas_now=1, source={"oldestAge": "peek"})
    operator = operators()
    wait_for("4 replicas from the count alone", lambda: replicas(kube, "peeky") == 4)
    wait_for("Ready=True", lambda: condition(kube, "peeky", "Ready").get("status") == "True", timeout=10)
    [source] = status(kube, "peeky")["sources"]
    assert source["count"] == 40 and "error" not in source
    assert source["note"].startswith("oldest message's age unknown: Peek Messages failed (ServerBusy)")
    age = 'queuescale_oldest_message_age_seconds{namespace="shop",queue="peeky",rule="peeky"'
    assert age not in operator.metrics()

    queues.set(peek_mode="ok")
    wait_for("the age once the peek answers", lambda: age in operator.metrics(), timeout=20)
    assert 7.0 <= metric(operator, age) <= 9.0


def test_a_slow_queue_times_out_and_holds_replicas(
    kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator], queues: FakeQueueService,
) -> None:
    start_rule(api, queues, "slowq", count=30, replicas_now=3)
    operators()
    wait_for("Ready", lambda: condition(kube, "slowq", "Ready").get("status") == "True")
    seen, stop = watch_replicas(kube, "slowq")
    queues.set(mode="slow", slow_seconds=3.0, counts={"slowq": 0})  # an empty queue, but the answer is too late
    wait_for("Ready=False Timeout", lambda: condition(kube, "slowq", "Ready").get("reason") == "Timeout", timeout=20)
    stop()
    assert set(seen) == {3}, f"replicas moved while the queue did not answer: {sorted(set(seen))}"
    queues.set(mode="ok")
    wait_for("scale-in once it answers in time", lambda: replicas(kube, "slowq") == 0, timeout=20)


def test_a_rotated_key_fails_with_403_until_the_secret_is_updated_then_recovers(
    kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator], queues: FakeQueueService,
) -> None:
    start_rule(api, queues, "rotated", count=20, replicas_now=2)
    operator = operators("--secret-ttl", "3600")  # only the 403 may make the operator read the Secret again
    wait_for("Ready", lambda: condition(kube, "rotated", "Ready").get("status") == "True")
    seen, stop = watch_replicas(kube, "rotated")
    queues.set(accepted_sig=NEW_SIG, counts={"rotated": 60})  # the key was rotated in Azure, not yet in the Secret
    wait_for("Ready=False AuthenticationFailed",
             lambda: condition(kube, "rotated", "Ready").get("reason") == "AuthenticationFailed", timeout=20)
    assert any(e["reason"] == "AuthenticationFailed" for e in events(kube, "rotated"))
    stop()
    assert set(seen) == {2}, f"replicas moved on a 403: {sorted(set(seen))}"

    data = {"connection": base64.b64encode(queues.connection_string(NEW_SIG).encode()).decode()}
    kube_client.CoreV1Api(api).patch_namespaced_secret("rotated-conn", NS, {"data": data})
    wait_for("recovery once the Secret is updated", lambda: replicas(kube, "rotated") == 6, timeout=20)
    # The tick scales first and writes its status after: wait for that write.
    wait_for("Ready=True", lambda: condition(kube, "rotated", "Ready").get("status") == "True", timeout=10)
    assert metric(operator, 'queuescale_poll_errors_total{namespace="shop",reason="AuthenticationFailed"') >= 1


def test_a_deleted_queue_holds_replicas_and_a_recreated_one_is_polled_again(
    kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator], queues: FakeQueueService,
) -> None:
    start_rule(api, queues, "gone", count=50, replicas_now=5)
    operators()
    wait_for("Ready", lambda: condition(kube, "gone", "Ready").get("status") == "True")
    seen, stop = watch_replicas(kube, "gone")
    queues.set(mode="deleted")
    wait_for("Ready=False QueueNotFound", lambda: condition(kube, "gone", "Ready").get("reason") == "QueueNotFound",
             timeout=20)
    stop()
    assert set(seen) == {5}, f"replicas moved while the queue was missing: {sorted(set(seen))}"
    assert "gone" in condition(kube, "gone", "Ready")["message"]
    queues.set(mode="ok", counts={"gone": 10})
    wait_for("polled again and scaled to the new count", lambda: replicas(kube, "gone") == 1, timeout=20)
    wait_for("Ready=True", lambda: condition(kube, "gone", "Ready").get("status") == "True", timeout=10)


def test_no_key_or_sas_reaches_a_log_event_status_or_metric(
    kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator], queues: FakeQueueService,
) -> None:
    start_rule(api, queues, "leaky", count=20, replicas_now=0)
    operator = operators("--log-level", "debug")
    wait_for("2 replicas", lambda: replicas(kube, "leaky") == 2)
    queues.set(accepted_sig=NEW_SIG)  # 403s: the error paths are where a SAS URL would slip out
    wait_for("Ready=False", lambda: condition(kube, "leaky", "Ready").get("status") == "False", timeout=20)
    queues.set(mode="busy", accepted_sig=OLD_SIG)
    wait_for("Ready=False ServerBusy", lambda: condition(kube, "leaky", "Ready").get("reason") == "ServerBusy",
             timeout=20)
    produced = "\n".join([
        operator.log_path.read_text(errors="replace"),
        json.dumps(kube.events(NS)),
        json.dumps(kube.list_objects("queuescale.io/v1alpha1", "QueueScaler", NS)),
        operator.metrics(),
    ])
    for leaked in SECRETS_USED:
        assert leaked not in produced, "a SAS signature reached the operator's output"


async def test_polls_that_time_out_in_a_crowd_do_not_wedge_the_connection_pool(queues: FakeQueueService) -> None:
    """Regression: cancelling requests inside httpx left pooled connections CONNECTING for ever, after which every
    poll timed out. 300 polls at once through a pool of 10 with a 0.3 s budget must not break the next polls
    (tests/net/test_http.py cancels requests at the client itself)."""
    from controller.model.fields import SecretKeyRef
    from controller.model.sources.azure_queue import AzureQueueSource
    from controller.sources.azure_queue import AzureQueuePoller
    from controller.sources.base import SourceContext

    queues.counts["crowd"] = 7

    async def secrets(name: str, key: str) -> str:
        return queues.connection_string(OLD_SIG)

    async with http_client(max_connections=10) as http:
        spec = AzureQueueSource(type="azure-queue", weight=1.0, queue_name="crowd",
                                connection_secret_ref=SecretKeyRef("conn", "connection"))
        poller = AzureQueuePoller(spec, SourceContext(http=http, secrets=secrets))
        await asyncio.gather(*(poller.poll(0.3) for _ in range(300)))
        await asyncio.sleep(1.0)
        after = [await poller.poll(3.0) for _ in range(3)]
    assert [r.count for r in after] == [7, 7, 7], [r.error for r in after]
