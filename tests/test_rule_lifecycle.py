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

from tests.azurite import Azurite
from tests.fakekube.server import FakeKube
from tests.operator_harness import Operator, replicas, setup_rule, wait_for

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
