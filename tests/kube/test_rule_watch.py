"""The rule watch (controller/kube/rules.py) against the fake API server, through the official asyncio client.

What a real API server can send it, and what it must survive without dying: events longer than aiohttp's line
limit, a kind that stops being served (its CRD deleted: 404), errors and throttling on the watch, streams that
break off, and a handler that fails. Each failure ends in a back-off, a log line and a count, then a watch or a
relist; never in a dead task.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as kube_client

from controller.kube.api import KubeApi, load_configuration
from controller.kube.errors import KubeError
from controller.kube.rules import RuleWatcher
from controller.model.rule import API_GROUP, API_VERSION
from tests.fakekube import FakeKube
from tests.kube_helpers import custom, not_served
from tests.operator_harness import ROOT, RULES_API

NS = "shop"
CRD: dict[str, Any] = yaml.safe_load((ROOT / "manifests" / "crd.yaml").read_text())
# The API server refuses metadata.annotations over 256 KiB in total (k8s.io/apimachinery/pkg/api/validation/
# objectmeta.go, TotalAnnotationSizeLimitB): 200 KiB is allowed, and longer than aiohttp's default readline limit,
# twice its 64 KiB read buffer (aiohttp/streams.py, StreamReader.readuntil raising LineTooLong).
BIG_ANNOTATION = 200 * 1024


class Rules:
    """A RuleHandler that keeps what it was told, as the operator does, and counts the calls."""

    def __init__(self) -> None:
        self.rules: dict[str, dict[str, Any]] = {}
        self.calls: collections.Counter[str] = collections.Counter()
        self.synced: list[tuple[str | None, list[str]]] = []
        self.fail_next_upsert: Exception | None = None

    async def sync(self, scope: str | None, objects: list[dict[str, Any]]) -> None:
        self.calls["sync"] += 1
        names = [_key(o) for o in objects]
        self.synced.append((scope, names))
        for key in [k for k in self.rules if scope is None or k.startswith(f"{scope}/")]:
            if key not in names:
                del self.rules[key]
        for obj in objects:
            self.rules[_key(obj)] = obj

    async def upsert(self, obj: dict[str, Any]) -> None:
        self.calls["upsert"] += 1
        if self.fail_next_upsert is not None:
            failure, self.fail_next_upsert = self.fail_next_upsert, None
            raise failure
        self.rules[_key(obj)] = obj

    async def delete(self, obj: dict[str, Any]) -> None:
        self.calls["delete"] += 1
        self.rules.pop(_key(obj), None)


def _key(obj: dict[str, Any]) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def rule(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": RULES_API, "kind": "QueueScaler",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations or {}},
        "spec": {"scaleTargetRef": {"name": name}, "maxReplicas": 3,
                 "sources": [{"type": "azure-queue", "queueName": "orders",
                              "connectionSecretRef": {"name": "s", "key": "k"}}]},
    }




def create(api: kube_client.ApiClient, body: dict[str, Any]) -> None:
    custom(api).create_namespaced_custom_object(API_GROUP, API_VERSION, NS, "queuescalers", body)


def delete(api: kube_client.ApiClient, name: str) -> None:
    custom(api).delete_namespaced_custom_object(API_GROUP, API_VERSION, NS, "queuescalers", name)




async def until(what: str, check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


class Watching:
    """A RuleWatcher running on its own task, with the reasons it reported."""

    def __init__(self, api: KubeApi, **options: Any) -> None:
        self.handler = Rules()
        self.errors: list[str] = []
        self.watcher = RuleWatcher(api, self.handler, on_error=self.errors.append, max_backoff=1.0, **options)
        self.task: asyncio.Task[None] | None = None

    def start(self) -> Watching:
        self.task = asyncio.create_task(self.watcher.run())
        return self

    @property
    def rules(self) -> dict[str, dict[str, Any]]:
        return self.handler.rules

    def alive(self) -> bool:
        return self.task is not None and not self.task.done()


@pytest.fixture(autouse=True)
def crd(fake_kube: FakeKube) -> None:
    fake_kube.create(CRD)


@pytest.fixture
async def watching(kube_api: KubeApi) -> AsyncIterator[Callable[..., Watching]]:
    started: list[Watching] = []

    def start(api: KubeApi = kube_api, **options: Any) -> Watching:
        running = Watching(api, **options).start()
        started.append(running)
        return running

    try:
        yield start
    finally:
        for running in started:
            assert running.task is not None
            assert not running.task.done(), "the watch task ended by itself"
            running.task.cancel()
            await asyncio.gather(running.task, return_exceptions=True)


# ---------------------------------------------------------------------------------------------- long events


async def test_a_watch_event_longer_than_aiohttps_line_limit_arrives_whole_as_the_api_server_sends_it(
    kube_api: KubeApi, api: kube_client.ApiClient, fake_kube: FakeKube, watching: Callable[..., Watching]
) -> None:
    """A rule with a 200 KiB annotation (within the API server's 256 KiB; `kubectl apply` writes the whole object
    into `last-applied-configuration`) is one watch line of over 200 KiB: read whole, whatever aiohttp's own line
    limit (twice the session's read buffer) happens to be."""
    running = watching()
    await until("the first sync", lambda: running.handler.calls["sync"] == 1)
    big = "x" * BIG_ANNOTATION
    create(api, rule("big", {"kubectl.kubernetes.io/last-applied-configuration": big}))
    create(api, rule("after"))
    await until("both rules through the watch", lambda: {"shop/big", "shop/after"} <= set(running.rules))
    assert running.rules["shop/big"]["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] \
        == big
    assert running.errors == [] and running.handler.calls["sync"] == 1  # no relist was needed


async def test_an_event_over_the_bound_is_counted_and_relisted_after_a_back_off_and_the_watch_goes_on(
    fake_kube: FakeKube, kubeconfig: Path, kube_api: KubeApi, api: kube_client.ApiClient,
    watching: Callable[..., Watching], caplog: pytest.LogCaptureFixture,
) -> None:
    small = KubeApi(await load_configuration(str(kubeconfig)), max_watch_event=64 * 1024)
    try:
        running = watching(small)
        await until("the first sync", lambda: running.handler.calls["sync"] == 1)
        create(api, rule("big", {"note": "x" * 100_000}))
        await until("the relist that brings the rule", lambda: "shop/big" in running.rules)
        assert running.errors == ["WatchEventTooLarge"]
        assert running.handler.calls["sync"] == 2
        assert "WatchEventTooLarge" in caplog.text and "relisting in" in caplog.text
        create(api, rule("later"))  # the watch after the relist goes on from there
        await until("a later rule", lambda: "shop/later" in running.rules)
    finally:
        await small.close()


# ---------------------------------------------------------------------------------------------- rules going away


async def test_a_kind_no_longer_served_404_means_no_rules_as_after_a_crd_deletion(
    fake_kube: FakeKube, api: kube_client.ApiClient, watching: Callable[..., Watching],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Deleting a CRD removes its objects first (each with a DELETED event: the `customresourcecleanup` finalizer,
    apiextensions-apiserver pkg/controller/finalizer/crd_finalizer.go), then stops serving the kind: lists and
    watches answer 404 (pkg/apiserver/customresource_handler.go, crdHandler.ServeHTTP). A watcher that missed the
    DELETED events (its stream was down) must not keep the rules it cached: a 404 list is an empty scope."""
    create(api, rule("a"))
    create(api, rule("b"))
    running = watching()
    await until("two rules", lambda: len(running.rules) == 2)
    kube_client.ApiextensionsV1Api(api).delete_custom_resource_definition(CRD["metadata"]["name"])
    await until("the kind no longer served", lambda: not_served(api))
    # The real server ends open watches when it tears the kind's storage down (crdHandler.tearDown): drop them as it
    # would. The fake deletes the objects first, with DELETED events, so the rules may be gone before the relist:
    # wait for the relist's empty sync itself (a CI run read `synced` between the two).
    fake_kube.drop_watches()
    await until("the 404 relist's empty sync", lambda: running.handler.synced[-1] == (None, []))
    assert running.rules == {}
    await until("the 404 counted", lambda: "NotFound" in running.errors)
    assert "QueueScalers are not served in all namespaces" in caplog.text
    assert set(running.errors) <= {"NotFound", "Disconnected"}

    # Installed again: the next relist (at most max_backoff later) finds the rules again.
    fake_kube.create(CRD)
    create(api, rule("c"))
    await until("the rule of the re-installed CRD", lambda: "shop/c" in running.rules, timeout=10)


async def test_an_injected_404_on_the_rules_list_empties_the_scope_and_listing_goes_on_with_back_off(
    fake_kube: FakeKube, api: kube_client.ApiClient, watching: Callable[..., Watching],
) -> None:
    create(api, rule("a"))
    running = watching(namespace=NS)
    await until("the rule", lambda: list(running.rules) == ["shop/a"])
    fake_kube.add_fault(path=r"/namespaces/shop/queuescalers", method="GET", status=404, times=None)
    fake_kube.drop_watches()
    await until("the scope emptied", lambda: running.rules == {})
    assert running.handler.synced[-1] == (NS, [])
    await asyncio.sleep(2.5)
    attempts = [r for r in fake_kube.requests if r.path.endswith("/namespaces/shop/queuescalers")
                and r.status == 404]
    # Backing off (0.5 s doubling to the 1 s cap here, with jitter): a handful of attempts, not a hot loop.
    assert 2 <= len(attempts) <= 10, len(attempts)
    fake_kube.clear_faults()
    await until("the rule back after the fault", lambda: list(running.rules) == ["shop/a"], timeout=5)


async def test_rules_of_a_deleted_namespace_go_with_their_deleted_events_or_with_the_next_relist(
    fake_kube: FakeKube, api: kube_client.ApiClient, watching: Callable[..., Watching],
) -> None:
    """The namespace controller deletes every object of a namespace being deleted, each a DELETED event
    (kubernetes pkg/controller/namespace/deletion/namespaced_resources_deleter.go, deleteAllContent), before the
    namespace goes; a list in a namespace that no longer exists is empty, not an error."""
    for name in ("a", "b"):
        create(api, rule(name))
    running = watching(namespace=NS)
    await until("two rules", lambda: len(running.rules) == 2)
    delete(api, "a")  # as the namespace controller does, with the watch open
    await until("a gone by its DELETED event", lambda: list(running.rules) == ["shop/b"])
    assert running.handler.calls["delete"] == 1

    # The watch is down while b and the namespace go, and the history is compacted: the watch resumes from a
    # version that is gone, relists, and b is not there any more.
    fake_kube.add_fault(path=r"watch=", method="GET", latency=1.5, times=None)
    fake_kube.drop_watches()
    await asyncio.sleep(0.3)
    delete(api, "b")
    kube_client.CoreV1Api(api).delete_namespace(NS)
    fake_kube.compact()
    await until("b gone with the relist", lambda: running.rules == {})
    assert running.handler.synced[-1] == (NS, [])
    assert running.handler.calls["delete"] == 1  # b went with the relist, not with an event


# ---------------------------------------------------------------------------------------------- faults


async def test_throttled_or_unreachable_watches_resume_from_their_version_and_errors_relist(
    fake_kube: FakeKube, api: kube_client.ApiClient, watching: Callable[..., Watching],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As client-go's Reflector (tools/cache/reflector.go, isWatchErrorRetriable): a 429, or a stream that broke
    off, is watched again from the last version after a back-off, without a relist; a 500 relists."""
    caplog.set_level(logging.INFO)
    running = watching()
    await until("the first sync", lambda: running.handler.calls["sync"] == 1)
    # The watch after the list must be open before it is broken off: under load it may not be yet, and then
    # its first request meets the 429s instead (no Disconnected).
    await until("the watch to be open", lambda: fake_kube.open_watches >= 1)
    fake_kube.add_fault(path=r"watch=", method="GET", status=429, retry_after=1, times=2)
    fake_kube.drop_watches()  # abruptly: the stream breaks off
    create(api, rule("a"))
    await until("a, through a resumed watch", lambda: "shop/a" in running.rules)
    assert running.handler.calls["sync"] == 1
    assert running.errors == ["Disconnected", "TooManyRequests", "TooManyRequests"]
    assert "watching again from version" in caplog.text

    fake_kube.add_fault(path=r"watch=", method="GET", status=500, times=1)
    fake_kube.drop_watches(graceful=True)  # a clean end: resumed at once, no error
    create(api, rule("b"))
    await until("b, after a relist", lambda: "shop/b" in running.rules)
    assert running.handler.calls["sync"] == 2
    assert running.errors[3:] == ["InternalError"]


async def test_a_failing_handler_does_not_kill_the_watch(
    api: kube_client.ApiClient, watching: Callable[..., Watching], caplog: pytest.LogCaptureFixture,
) -> None:
    """Any error in the loop, not only the API's: it is counted by its class, logged, and ends in a relist."""
    running = watching()
    await until("the first sync", lambda: running.handler.calls["sync"] == 1)
    running.handler.fail_next_upsert = ValueError("Line is too long")  # what aiohttp < 3.9 raised on a long line
    create(api, rule("a"))
    await until("a, through the relist", lambda: "shop/a" in running.rules)
    assert running.errors == ["ValueError"]
    assert "failed unexpectedly (ValueError: Line is too long); relisting in" in caplog.text
    assert running.alive()


async def test_an_event_whose_handling_failed_is_sent_again_by_the_next_watch(
    api: kube_client.ApiClient, watching: Callable[..., Watching],
) -> None:
    """The version to watch from moves past an event only once it was handled: a handler that could not reach
    the API server (KubeError 0, watched again from the same version) gets the same event again, not the next."""
    running = watching()
    await until("the first sync", lambda: running.handler.calls["sync"] == 1)
    running.handler.fail_next_upsert = KubeError(0, "Unreachable", "no answer from the API server")
    create(api, rule("a"))
    await until("a, through the watch started again", lambda: "shop/a" in running.rules)
    assert running.errors == ["Unreachable"]
    assert running.handler.calls["sync"] == 1 and running.handler.calls["upsert"] == 2
