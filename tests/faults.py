"""A scripted queue service (Get Queue Metadata, and Peek Messages for the oldest message's age) and the operator run
against it: shared by the fault tests of several folders."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as kube_client

from tests.azure_answers import error, is_peek, metadata, peeked
from tests.fakekube.server import FakeKube
from tests.loopback import LoopbackServer, Recorded, Reply
from tests.operator_harness import deployment, replicas, rule, secret


class FakeQueueService:
    """A queue service whose answers a test changes while the operator polls it."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.mode = "ok"  # ok | busy | slow | deleted
        self.peek_mode = "ok"  # ok | busy: Peek Messages alone answers 503, Get Queue Metadata as `mode` says
        self.waited = 3.0  # seconds the front message of a queue that is not empty has waited
        self.accepted_sig = OLD_SIG
        self.slow_seconds = 0.0
        self._lock = threading.Lock()
        self.server = LoopbackServer(self._answer)

    def _answer(self, request: Recorded) -> Reply:
        with self._lock:
            mode, peek_mode, sig, slow, waited = (self.mode, self.peek_mode, self.accepted_sig, self.slow_seconds,
                                                  self.waited)
        peek = is_peek(request)
        queue = request.route.removesuffix("/messages").rsplit("/", 1)[-1]
        if f"sig={sig}" not in request.path:
            return error(403, "AuthenticationFailed", "Server failed to authenticate the request.")
        if mode == "busy" or (peek and peek_mode == "busy"):
            return error(503, "ServerBusy", "The server is busy.")
        if mode == "slow":
            time.sleep(slow)
        if mode == "deleted" or queue not in self.counts:
            return error(404, "QueueNotFound", "The specified queue does not exist.")
        count = self.counts[queue]
        if peek:
            return peeked(*([time.time() - waited] if count else []))
        return metadata(count)

    def set(self, **changes: Any) -> None:
        with self._lock:
            for name, value in changes.items():
                setattr(self, name, value)

    def connection_string(self, sig: str) -> str:
        return f"QueueEndpoint={self.server.url}/acct;SharedAccessSignature=sv=2025-11-05&sp=r&sig={sig}"


@pytest.fixture
def queues() -> Iterator[FakeQueueService]:
    service = FakeQueueService()
    with service.server:
        yield service


def start_rule(api: kube_client.ApiClient, queues: FakeQueueService, name: str, count: int, replicas_now: int,
               *, source: dict[str, Any] | None = None, **policy: Any) -> None:
    """A count-mode rule over the fake queue `name`; `source`: more fields of its azure-queue source."""
    queues.counts[name] = count
    deployment(api, name, replicas_now)
    secret(api, f"{name}-conn", {"connection": queues.connection_string(OLD_SIG)})
    sources = [{"type": "azure-queue", "queueName": name,
                "connectionSecretRef": {"name": f"{name}-conn", "key": "connection"}, **(source or {})}]
    rule(api, name, name, f"{name}-conn", sources=sources, policy={
        "targetPerReplica": 10, "tolerance": 0, "scaleDown": {"stabilizationWindow": 0, "delay": 0}, "scaleToZeroDelay": "2s",
        **policy})


def watch_replicas(kube: FakeKube, name: str) -> tuple[list[int], Callable[[], None]]:
    """Sample the Deployment's replicas every 50 ms in a thread; the returned stopper joins it."""
    seen: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            seen.append(replicas(kube, name))
            stop.wait(0.05)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()

    def stopper() -> None:
        stop.set()
        thread.join(timeout=5)

    return seen, stopper


OLD_SIG = "oldsig0rotated0by0the0test0AAAA"

