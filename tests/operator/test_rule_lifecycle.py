"""End to end (`queuescale run` in a subprocess, the fake API server, Azurite): the ends of things.

A graceful stop while scrapers hold connections, rules that go away with their CRD or namespace, and a rule
watch that meets what it cannot read.
"""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client as kube_client

from controller.model.rule import API_GROUP, API_VERSION
from tests.azurite import Azurite
from tests.fakekube.server import FakeKube
from tests.kube_helpers import custom, not_served
from tests.operator_harness import (
    NS,
    RULES_API,
    Operator,
    deployment,
    make_queue,
    queue_name,
    replicas,
    secret,
    setup_rule,
    wait_for,
)

# ---------------------------------------------------------------------------------------------- graceful stop


@pytest.fixture
def scraper_connections() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for connection in opened:
        connection.close()


def keep_alive_request(port: int, path: str, opened: list[socket.socket]) -> socket.socket:
    """A GET as Prometheus or the kubelet sends it, answered, with the connection then kept open and idle."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=5)
    opened.append(connection)
    connection.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n".encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += connection.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    return connection


def test_a_graceful_stop_with_scrapers_holding_keep_alive_connections_is_quiet(
    azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator],
    scraper_connections: list[socket.socket],
) -> None:
    """SIGTERM (a rollout) while Prometheus holds a keep-alive connection to /metrics and the kubelet to /healthz
    (and one client is half-way through sending a request): exit code 0, and nothing at ERROR, no traceback."""
    setup_rule(api, azurite, "quiet", messages=15)
    operator = operators("--log-format", "text")
    wait_for("2 replicas", lambda: replicas(kube, "quiet") == 2)
    keep_alive_request(operator.metrics_port, "/metrics", scraper_connections)
    keep_alive_request(operator.health_port, "/healthz", scraper_connections)
    keep_alive_request(operator.health_port, "/readyz", scraper_connections)
    half = socket.create_connection(("127.0.0.1", operator.metrics_port), timeout=5)
    scraper_connections.append(half)
    half.sendall(b"GET /metrics HTTP/1.1\r\nHost:")
    time.sleep(0.2)

    started = time.monotonic()
    assert operator.stop(signal.SIGTERM) == 0
    assert time.monotonic() - started < 10
    log = operator.log_path.read_text()
    assert "stopped" in log.splitlines()[-1]
    assert " ERROR " not in log and "Traceback" not in log and "CancelledError" not in log, log[-3000:]
    for connection in scraper_connections:  # the server closed each of them on its way out
        assert connection.recv(65536) == b""


# ---------------------------------------------------------------------------------------------- rules going away


def rule_with_annotations(api: kube_client.ApiClient, name: str, queue: str, annotations: dict[str, str]) -> None:
    """A rule as tests.operator_harness.rule makes it, with annotations."""
    custom(api).create_namespaced_custom_object(API_GROUP, API_VERSION, NS, "queuescalers", {
        "apiVersion": RULES_API, "kind": "QueueScaler",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"scaleTargetRef": {"name": name}, "minReplicas": 0, "maxReplicas": 20, "pollingInterval": "1s",
                 "sources": [{"type": "azure-queue", "queueName": queue,
                              "connectionSecretRef": {"name": f"{name}-queue", "key": "connection"}}],
                 "policy": {"targetPerReplica": 10}},
    })


def scale_requests(kube: FakeKube) -> int:
    """Requests the operator made to any Deployment's scale subresource so far."""
    return sum(n for request, n in kube.operator_requests.items() if "deployments/scale" in request)


def held(kube: FakeKube, names: dict[str, int], seconds: float) -> None:
    """The Deployments keep these replicas for `seconds`, sampled every 50 ms."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert {name: replicas(kube, name) for name in names} == names
        time.sleep(0.05)


def test_a_deleted_crd_stops_every_rule_and_a_big_rule_arrives_through_the_watch(
    azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator],
) -> None:
    """A rule created while the operator runs, with a 200 KiB annotation (a watch line longer than aiohttp's
    default line limit), is read and scales. Then the CRD is deleted: every rule stops within a polling interval
    and a back-off, however long the queues grow."""
    small = setup_rule(api, azurite, "small", messages=15)
    operator = operators()
    wait_for("small at 2 replicas", lambda: replicas(kube, "small") == 2)
    queue = queue_name()
    big_queue = make_queue(azurite, queue, 25)
    deployment(api, "big", 0)
    secret(api, "big-queue", {"connection": azurite.connection_string})
    rule_with_annotations(api, "big", queue, {"kubectl.kubernetes.io/last-applied-configuration": "x" * 200 * 1024})
    wait_for("big at 3 replicas", lambda: replicas(kube, "big") == 3)
    assert "queuescale_watch_errors_total{" not in operator.metrics()

    deleted = time.monotonic()
    kube_client.ApiextensionsV1Api(api).delete_custom_resource_definition("queuescalers.queuescale.io")
    wait_for("the kind no longer served", lambda: not_served(api))
    # The real server deletes the objects first (DELETED events) and ends the kind's watches when it tears its
    # storage down; today's fake does neither, so end the watches as it would: the operator's next watch and list
    # then answer 404.
    kube.drop_watches()
    wait_for("both rules stopped", lambda: operator.log_path.read_text().count("deleted: stopped") == 2, timeout=10)
    assert time.monotonic() - deleted < 1.0 + 2.0  # a polling interval (1 s), slack for a loaded machine
    for i in range(100):
        small.send_message(f"s{i}")
        big_queue.send_message(f"b{i}")
    held(kube, {"small": 2, "big": 3}, 3.0)
    metrics = operator.metrics()
    assert 'queuescale_watch_errors_total{reason="NotFound",resource="queuescalers"}' in metrics
    assert 'rule="small"' not in metrics and 'rule="big"' not in metrics  # their series went with them
    assert "QueueScalers are not served in all namespaces" in operator.log_path.read_text()
    assert operator.stop() == 0


def test_rules_of_a_deleted_namespace_stop_by_event_and_after_a_missed_event_by_the_relist(
    azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator],
) -> None:
    """Deleting a namespace deletes its objects first, each with a DELETED event (kubernetes
    pkg/controller/namespace/deletion/namespaced_resources_deleter.go, deleteAllContent). One rule goes by its
    event; the other while the operator's watch is down and the history compacted, so it goes by the relist."""
    first = setup_rule(api, azurite, "first", messages=15)
    second = setup_rule(api, azurite, "second", messages=15)
    operator = operators("--namespace", NS)
    wait_for("both at 2 replicas", lambda: replicas(kube, "first") == 2 and replicas(kube, "second") == 2)

    custom(api).delete_namespaced_custom_object(API_GROUP, API_VERSION, NS, "queuescalers", "first")
    wait_for("first stopped by its event", lambda: "rule shop/first deleted: stopped" in operator.log_path.read_text())

    kube.add_fault(path=r"watch=", method="GET", latency=2.0, times=None)  # the watch is down for a while
    kube.drop_watches()
    time.sleep(0.3)
    custom(api).delete_namespaced_custom_object(API_GROUP, API_VERSION, NS, "queuescalers", "second")
    # Today's fake keeps a deleted namespace's objects; the namespace controller deletes them (above) first.
    kube_client.CoreV1Api(api).delete_namespace(NS)
    kube.compact()
    wait_for("second stopped by the relist", lambda: "rule shop/second deleted: stopped"
             in operator.log_path.read_text(), timeout=10)
    kube.clear_faults()
    before = scale_requests(kube)
    for i in range(100):
        first.send_message(f"f{i}")
        second.send_message(f"s{i}")
    # Not read from the Deployments: a fake that deletes a namespace's objects with it (as the real one does) would
    # have deleted them.
    time.sleep(2.5)
    assert scale_requests(kube) == before
    assert operator.stop() == 0
