"""Run `queuescale run` end to end in a subprocess against the fake API server (and Azurite): the helpers and
fixtures the end-to-end and fault-injection tests share."""

from __future__ import annotations

import base64
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from azure.storage.queue import QueueServiceClient
from kubernetes import client as kube_client

from controller.model.rule import API_GROUP, API_VERSION
from tests.azurite import Azurite, free_port
from tests.fakekube.server import FakeKube
from tests.kube_helpers import custom

ROOT = Path(__file__).resolve().parent.parent
NS = "shop"
RULES_API = f"{API_GROUP}/{API_VERSION}"  # a QueueScaler's apiVersion


def wait_for(
    what: str, check: Callable[[], Any], timeout: float = 20.0, every: float = 0.1,
    describe: Callable[[], str] | None = None,
) -> Any:
    """Poll `check` until it returns something truthy; fail with `what` (and `describe()`) after `timeout` s."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    seen = describe() if describe else repr(last)
    pytest.fail(f"timed out after {timeout:g}s waiting for {what} (last: {seen})")


class Operator:
    """`python -m controller run` against the fake API server, on loopback ports."""

    def __init__(self, kubeconfig: Path, log: Path, *extra: str) -> None:
        self.metrics_port, self.health_port = free_port(), free_port()
        self.log_path = log
        self.args = [
            sys.executable, "-m", "controller", "run", "--kubeconfig", str(kubeconfig), "--bind-address",
            "127.0.0.1", "--metrics-port", str(self.metrics_port), "--health-port", str(self.health_port),
            "--status-interval", "1s", "--log-format", "json", *extra,
        ]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Operator:
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(self.args, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT)
        wait_for("the operator to be ready", lambda: self.get("/readyz", self.health_port) == 200, timeout=30)
        return self

    def get(self, path: str, port: int) -> int | None:
        assert self.process is not None
        if self.process.poll() is not None:
            pytest.fail(f"operator exited with {self.process.returncode}: {self.log_path.read_text()[-3000:]}")
        try:
            return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2).status_code
        except httpx.HTTPError:
            return None

    def metrics(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text

    def stop(self, sig: int = signal.SIGTERM) -> int:
        process, self.process = self.process, None
        if process is None:
            return 0
        if process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        self._log.close()
        return process.returncode


def install_rules(fake: FakeKube) -> FakeKube:
    """The QueueScaler CRD installed in `fake`, and the test namespace."""
    fake.create(yaml.safe_load((ROOT / "manifests" / "crd.yaml").read_text()))
    fake.ensure_namespace(NS)
    return fake


@pytest.fixture
def kube(fake_kube: FakeKube) -> FakeKube:
    """The fake API server with the QueueScaler CRD installed and the test namespace."""
    return install_rules(fake_kube)


KUBECTL = ROOT / ".tools" / "kubectl" / "kubectl"


def kubectl_in(kubeconfig: Path, *args: str) -> None:
    """The real kubectl in NS, which must succeed."""
    subprocess.run([str(KUBECTL), "--kubeconfig", str(kubeconfig), "-n", NS, *args], check=True, timeout=60,
                   capture_output=True)


def replica_sets(kube: FakeKube) -> list[dict[str, Any]]:
    return kube.list_objects("apps/v1", "ReplicaSet", NS)


def start_rollout(kube: FakeKube, api: kube_client.ApiClient, kubeconfig: Path, name: str,
                  first_ready_after: float) -> None:
    """A Deployment `name` of four ready pods, then `kubectl set image` and its rollout's first step: surge 1 and
    unavailable 1 (25 % of 4), so a new ReplicaSet of 2 beside the old one at 3, whose new pods are ready
    `first_ready_after` seconds after they are made (with a cluster_with_pods fake)."""
    deployment(api, name, 4)
    wait_for("four ready pods", lambda: (kube.get("apps/v1", "Deployment", name, NS).get("status") or {}).get(
        "readyReplicas") == 4)
    kube.set_ready_delay(first_ready_after)
    kubectl_in(kubeconfig, "set", "image", f"deployment/{name}", "worker=worker:2")
    wait_for("the rollout's first step", lambda: sorted(int(rs["spec"]["replicas"]) for rs in replica_sets(kube))
             == [2, 3], timeout=20)


def cluster_with_pods(pod_hook: Callable[[Any], None] | None = None) -> Iterator[FakeKube]:
    """A fake API server whose workload controllers make pods (`pod_hook` sees each new one), with the rules
    installed; stopped when the generator is closed. For a fixture to yield from."""
    fake = FakeKube(bookmark_interval=0.2, pods=True, pod_hook=pod_hook).start()
    try:
        yield install_rules(fake)
    finally:
        fake.stop()


@pytest.fixture
def operators(kube: FakeKube, kubeconfig: Path, tmp_path: Path) -> Iterator[Callable[..., Operator]]:
    started: list[Operator] = []

    def start(*extra: str) -> Operator:
        operator = Operator(kubeconfig, tmp_path / f"operator-{len(started)}.log", *extra).start()
        started.append(operator)
        return operator

    try:
        yield start
    finally:
        for operator in started:
            operator.stop(signal.SIGKILL)


def queue_name() -> str:
    return f"q{uuid.uuid4().hex[:12]}"


def make_queue(azurite: Azurite, name: str, messages: int = 0) -> Any:
    service = QueueServiceClient.from_connection_string(azurite.connection_string)
    queue = service.create_queue(name)
    for i in range(messages):
        queue.send_message(f"m{i}")
    return queue


def deployment(api: kube_client.ApiClient, name: str, replicas: int) -> None:
    body = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "worker", "image": "worker:1"}]}}},
    }
    kube_client.AppsV1Api(api).create_namespaced_deployment(NS, body)


ALLOWED_RULES = "queuescale.io/allowed-rules"


def secret(api: kube_client.ApiClient, name: str, values: dict[str, str], allowed_rules: str | None = "*") -> None:
    """A Secret in NS; `allowed_rules`: its queuescale.io/allowed-rules annotation (None: none, so the operator
    refuses it to every rule unless run with --secret-access=namespace)."""
    data = {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}
    metadata: dict[str, Any] = {"name": name}
    if allowed_rules is not None:
        metadata["annotations"] = {ALLOWED_RULES: allowed_rules}
    kube_client.CoreV1Api(api).create_namespaced_secret(NS, {"metadata": metadata, "data": data})


def rule(api: kube_client.ApiClient, name: str, queue: str, secret_name: str, **spec: Any) -> None:
    body: dict[str, Any] = {
        "apiVersion": RULES_API, "kind": "QueueScaler",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "scaleTargetRef": {"name": name},
            "minReplicas": 0, "maxReplicas": 20, "pollingInterval": "1s",
            "sources": [{"type": "azure-queue", "queueName": queue,
                         "connectionSecretRef": {"name": secret_name, "key": "connection"}}],
            "policy": {"targetPerReplica": 10, "scaleDown": {"stabilizationWindow": 0, "delay": 0},
                       "scaleToZeroDelay": "2s"},
            **spec,
        },
    }
    custom(api).create_namespaced_custom_object(API_GROUP, API_VERSION, NS, "queuescalers", body)


def replicas(kube: FakeKube, name: str) -> int:
    return int(kube.get("apps/v1", "Deployment", name, NS)["spec"]["replicas"])


def status(kube: FakeKube, name: str) -> dict[str, Any]:
    return dict(kube.get(RULES_API, "QueueScaler", name, NS).get("status") or {})


def condition(kube: FakeKube, name: str, kind: str) -> dict[str, Any]:
    for c in status(kube, name).get("conditions") or []:
        if c["type"] == kind:
            return dict(c)
    return {}


def writes_outside_the_lease(kube: FakeKube, lease: str = "queuescale-operator") -> tuple[list[str], list[str]]:
    """The scale, status and event writes a replica made while the API server's lease named another holder (the last
    lease write the server accepted before it came from someone else), and the lease's hand-overs, both as lines
    to print. Judged by the server's record, not by who led when the test looked: under load the lease may
    legitimately change hands twice (a slow renewal), and a write by whoever holds it then is correct. Writes
    before the log's first lease write (the log keeps the last 5,000 requests) are not judged."""
    holder: str | None = None
    outside: list[str] = []
    handovers: list[str] = []
    for r in list(kube.requests):
        line = f"{r.at:.3f} {r.user_agent} {r.method} {r.path} -> {r.status}"
        if 200 <= r.status < 300 and ((r.method == "PUT" and r.path.endswith(f"/leases/{lease}"))
                                      or (r.method == "POST" and r.path.endswith("/leases"))):
            if r.user_agent != holder:
                handovers.append(line)
            holder = r.user_agent
        elif (holder is not None and r.method in ("PUT", "PATCH", "POST")
              and ("/scale" in r.path or "/status" in r.path or r.path.endswith("/events"))
              and r.user_agent != holder):
            outside.append(line)
    return outside, handovers


def events(kube: FakeKube, name: str) -> list[dict[str, Any]]:
    return [e for e in kube.events(NS) if e["involvedObject"]["name"] == name]


def setup_rule(api: kube_client.ApiClient, azurite: Azurite, name: str, messages: int = 0, replicas: int = 0,
               **spec: Any) -> Any:
    queue = queue_name()
    client = make_queue(azurite, queue, messages)
    deployment(api, name, replicas)
    secret(api, f"{name}-queue", {"connection": azurite.connection_string}, allowed_rules=name)
    rule(api, name, queue, f"{name}-queue", **spec)
    return client
