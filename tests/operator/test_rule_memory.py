"""A deleted rule's state is freed at once, by reference counting, even after the heap was frozen.

After its first sync the operator calls `gc.freeze()` (`_settle_the_heap`), and the cyclic collector never looks at
frozen objects again: anything of a rule that sits in a reference cycle then lives for as long as the process.
Before this was fixed each rule's RuleState, Reconciler and RuleReporter formed such a cycle; a churn soak that
deleted 500 of 1,000 rules kept all 1,000 alive (about 12.7 KB a rule). Rules created after the freeze were freed
only by a full collection, so RSS climbed in steps.

The operator runs in-process here (its watch, rule tasks, real sources and targets), against the fake API server
and Azurite; rules are created and deleted through the API server, as a user would.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import gc
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as kube_client

from controller.kube.api import KubeApi, load_configuration
from controller.kube.rules import RuleWatcher
from controller.model.rule import API_GROUP, API_VERSION
from controller.net.http import polling_client
from controller.operator.options import OperatorOptions
from controller.operator.runner import Operator
from controller.operator.state import RuleState
from controller.report.reporter import RuleReporter
from tests.azurite import Azurite
from tests.fakekube import FakeKube
from tests.operator_harness import ROOT, RULES_API, make_queue, queue_name

NS = "churn"
KEPT = 5  # rules that live through the whole test
CHURNED = 15  # rules created and deleted one after the other, after the freeze


@pytest.fixture
def collector_restored() -> Iterator[None]:
    """The operator freezes the heap and changes the collector's thresholds process-wide: undo both."""
    thresholds = gc.get_threshold()
    enabled = gc.isenabled()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        if enabled:
            gc.enable()


class Tracked:
    """Weak references to every RuleState, Reconciler and RuleReporter the operator ever held."""

    def __init__(self, operator: Operator) -> None:
        self.operator = operator
        self.refs: dict[str, list[weakref.ref[Any]]] = {"state": [], "reconciler": [], "reporter": []}
        self._seen: set[int] = set()

    def note(self) -> None:
        for state in self.operator.rules.values():
            if id(state) in self._seen or state.reconciler is None:
                continue
            self._seen.add(id(state))
            self.refs["state"].append(weakref.ref(state))
            self.refs["reconciler"].append(weakref.ref(state.reconciler))
            assert isinstance(state.reconciler.reporter, RuleReporter)
            self.refs["reporter"].append(weakref.ref(state.reconciler.reporter))

    def alive(self) -> dict[str, int]:
        return {kind: sum(1 for ref in refs if ref() is not None) for kind, refs in self.refs.items()}


def manifest(name: str, queue: str) -> dict[str, Any]:
    return {
        "apiVersion": RULES_API, "kind": "QueueScaler", "metadata": {"name": name, "namespace": NS},
        "spec": {"scaleTargetRef": {"name": name}, "minReplicas": 0, "maxReplicas": 5, "pollingInterval": "1s",
                 "sources": [{"type": "azure-queue", "queueName": queue,
                              "connectionSecretRef": {"name": "queue", "key": "connection"}}],
                 "policy": {"targetPerReplica": 10}},
    }


def deployment(name: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "w", "image": "w:1"}]}}}}


async def until(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.fixture
async def running(fake_kube: FakeKube, kubeconfig: Path, azurite: Azurite,
                  collector_restored: None) -> AsyncIterator[tuple[Operator, Tracked, str]]:
    """The operator (no leader election) watching every namespace, with KEPT rules synced and ticking."""
    fake_kube.create(yaml.safe_load((ROOT / "manifests" / "crd.yaml").read_text()))
    fake_kube.ensure_namespace(NS)
    fake_kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "queue", "namespace": NS,
                                                                   "annotations": {"queuescale.io/allowed-rules": "*"}},
                      "data": {"connection": base64.b64encode(azurite.connection_string.encode()).decode()}})
    queue = queue_name()
    make_queue(azurite, queue, messages=15)
    for i in range(KEPT):
        fake_kube.create(deployment(f"kept-{i}"))
        fake_kube.create(manifest(f"kept-{i}", queue))
    api = KubeApi(await load_configuration(str(kubeconfig)))
    http = polling_client(timeout=5.0)
    operator = Operator(api, http, OperatorOptions(status_interval=0.5))
    tracked = Tracked(operator)
    watch = asyncio.create_task(RuleWatcher(api, operator).run())
    try:
        await asyncio.wait_for(operator.ready.wait(), 20)
        tracked.note()
        await until("every kept rule to scale its Deployment", lambda: all(
            fake_kube.get("apps/v1", "Deployment", f"kept-{i}", NS)["spec"]["replicas"] == 2 for i in range(KEPT)))
        yield operator, tracked, queue
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        await operator.shutdown()
        await http.aclose()
        await api.close()


def rules_api(api: kube_client.ApiClient) -> kube_client.CustomObjectsApi:
    return kube_client.CustomObjectsApi(api)


async def churn(fake_kube: FakeKube, api: kube_client.ApiClient, operator: Operator, tracked: Tracked, queue: str,
                names: list[str]) -> None:
    """Create each rule, let it tick (poll, scale, write status and events), delete it."""
    for name in names:
        kube_client.AppsV1Api(api).create_namespaced_deployment(NS, deployment(name))
        rules_api(api).create_namespaced_custom_object(API_GROUP, API_VERSION, NS, "queuescalers",
                                                       manifest(name, queue))
        await until(f"{name} to scale", lambda name=name: fake_kube.get(  # type: ignore[misc]
            "apps/v1", "Deployment", name, NS)["spec"]["replicas"] == 2)
        tracked.note()
        rules_api(api).delete_namespaced_custom_object(API_GROUP, API_VERSION, NS, "queuescalers", name)
        await until(f"{name} to be dropped", lambda name=name: f"{NS}/{name}" not in operator.rules)  # type: ignore[misc]


def cyclic_garbage() -> collections.Counter[str]:
    """Run the cyclic collector and count, by class, the operator's own objects that only it could free."""
    gc.set_debug(gc.DEBUG_SAVEALL)  # keep what it finds in gc.garbage instead of freeing it
    try:
        gc.collect()
        return collections.Counter(type(o).__qualname__ for o in gc.garbage
                                   if type(o).__module__.startswith("controller."))
    finally:
        gc.garbage.clear()
        gc.set_debug(0)


async def test_deleted_rules_are_freed_by_reference_counting_even_after_the_heap_was_frozen(
    fake_kube: FakeKube, api: kube_client.ApiClient, running: tuple[Operator, Tracked, str]
) -> None:
    operator, tracked, queue = running
    assert gc.get_freeze_count() > 0, "the first sync froze the heap, as in production"
    # No collection at all from here on: whatever is freed is freed by reference counting alone.
    gc.disable()
    await churn(fake_kube, api, operator, tracked, queue, [f"churned-{i}" for i in range(CHURNED)])
    # A status write in flight for a rule just deleted holds it until the write is answered.
    await until("the deleted rules freed", lambda: tracked.alive()["state"] == KEPT, timeout=5)
    assert tracked.alive() == {"state": KEPT, "reconciler": KEPT, "reporter": KEPT}
    assert cyclic_garbage() == collections.Counter(), "deleted rules left cycles for the collector"

    # The rules that were there at the freeze are frozen themselves: deleting them must free them too.
    for i in range(2):
        rules_api(api).delete_namespaced_custom_object(API_GROUP, API_VERSION, NS, "queuescalers", f"kept-{i}")
    await until("two kept rules to be dropped", lambda: len(operator.rules) == KEPT - 2)
    gc.collect()  # collects nothing frozen: only reference counting can have freed them
    await until("the deleted rules freed", lambda: tracked.alive()["state"] == KEPT - 2, timeout=5)
    assert tracked.alive() == {"state": KEPT - 2, "reconciler": KEPT - 2, "reporter": KEPT - 2}


async def test_without_a_freeze_deleted_rules_need_no_collection_either(
    fake_kube: FakeKube, api: kube_client.ApiClient, running: tuple[Operator, Tracked, str]
) -> None:
    operator, tracked, queue = running
    gc.unfreeze()
    gc.collect()
    gc.disable()
    await churn(fake_kube, api, operator, tracked, queue, [f"churned-{i}" for i in range(CHURNED)])
    await until("the deleted rules freed", lambda: tracked.alive()["state"] == KEPT, timeout=5)
    assert tracked.alive() == {"state": KEPT, "reconciler": KEPT, "reporter": KEPT}
    assert sum(isinstance(o, RuleState) for o in gc.get_objects()) == KEPT == len(operator.rules)
    assert cyclic_garbage() == collections.Counter(), "deleted rules left cycles for the collector"
