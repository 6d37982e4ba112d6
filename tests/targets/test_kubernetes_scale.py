"""The Kubernetes scale target reads and writes the scale subresource, and turns API errors into TargetErrors."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.aio import client as aio_client

from controller.kube.api import KubeApi, load_configuration
from controller.kube.ratelimit import TokenBucket
from controller.kube.workloads import WorkloadCache, WorkloadWatch
from controller.model.readings import SourceReading
from controller.model.rule import QueueScaler, ScaleTargetRef, parse_queuescaler
from controller.model.sources.base import SourceSpec
from controller.reconciler import Reconciler
from controller.targets.base import ScaleState, TargetConflict, TargetError
from controller.targets.kubernetes_scale import KubernetesScaleTarget, TargetThrottled
from tests.fakekube import FakeKube
from tests.kube_helpers import deployment

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def worker(fake_kube: FakeKube) -> None:
    fake_kube.create(deployment("worker", replicas=2))


@pytest.fixture
async def kube_api(kubeconfig: Path) -> AsyncIterator[KubeApi]:
    """The operator's client, configured for the fake API server."""
    api = KubeApi(await load_configuration(str(kubeconfig)))
    try:
        yield api
    finally:
        await api.close()


def target(api: KubeApi, name: str = "worker", kind: str = "Deployment",
           api_version: str = "apps/v1") -> KubernetesScaleTarget:
    return KubernetesScaleTarget(api, ScaleTargetRef(name=name, api_version=api_version, kind=kind), "default")


@pytest.mark.usefixtures("worker")
async def test_read_returns_replicas_and_the_version_to_write_against(fake_kube: FakeKube,
                                                                      kube_api: KubeApi) -> None:
    state = await target(kube_api).read()
    assert state.replicas == 2
    assert state.version == fake_kube.get("apps/v1", "Deployment", "worker")["metadata"]["resourceVersion"]


@pytest.mark.usefixtures("worker")
async def test_reads_wait_for_the_first_list_a_bounded_while_then_read_scale(fake_kube: FakeKube,
                                                                             kube_api: KubeApi) -> None:
    """A watch that never lists (here: expected, never run) holds the first reads for `list_wait` over all reads,
    not each read for as long: then they read /scale as an unwatched kind does."""
    cache = WorkloadCache(list_wait=0.3)
    cache.expect("Deployment", None)
    worker = KubernetesScaleTarget(kube_api, ScaleTargetRef(name="worker"), "default", workloads=cache)
    started = asyncio.get_running_loop().time()
    state = await worker.read()
    assert 0.25 <= asyncio.get_running_loop().time() - started < 2.0
    assert (state.replicas, state.ready_replicas, state.watched) == (2, None, False)
    started = asyncio.get_running_loop().time()
    await worker.read()  # the wait is spent: at once
    assert asyncio.get_running_loop().time() - started < 0.2


@pytest.mark.usefixtures("worker")
async def test_a_watched_deployment_is_read_from_the_watch_with_its_ready_replicas(
        fake_kube: FakeKube, kubeconfig: Path) -> None:
    api = KubeApi(await load_configuration(str(kubeconfig)))
    cache = WorkloadCache()
    watch = asyncio.create_task(WorkloadWatch(api, cache, "Deployment").run())
    try:
        worker = KubernetesScaleTarget(api, ScaleTargetRef(name="worker"), "default", workloads=cache)
        before = len(fake_kube.requests)
        # Not listed yet: the read waits for the first list (as a controller-runtime cache's readers wait for
        # WaitForCacheSync) instead of reading /scale, which would be a GET per rule at start-up.
        assert (await worker.read()).ready_replicas == 2
        assert not [r for r in fake_kube.requests[before:] if r.path.endswith("/scale")]
        assert cache.watches("Deployment", "default")
        before = len(fake_kube.requests)
        state = await worker.read()
        assert (state.replicas, state.ready_replicas, state.watched) == (2, 2, True)
        assert state.version == fake_kube.get("apps/v1", "Deployment", "worker")["metadata"]["resourceVersion"]
        fake_kube.set_ready_delay(None)  # pods never come
        await worker.scale(5, state)
        await _until(lambda: (cache.get("Deployment", "default", "worker") or state).replicas == 5)
        state = await worker.read()
        assert (state.replicas, state.ready_replicas) == (5, 2)
        # (The watch that follows the list may be logged meanwhile: the fake logs a watch when it starts answering.)
        assert [(r.method, r.path) for r in fake_kube.requests[before:] if "watch=true" not in r.query] == [
            ("PUT", "/apis/apps/v1/namespaces/default/deployments/worker/scale")]
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        await api.close()


@pytest.mark.usefixtures("worker")
async def test_ready_replicas_are_unknown_where_the_watch_is_forbidden(fake_kube: FakeKube, kubeconfig: Path) -> None:
    fake_kube.add_fault(method="GET", path="/deployments(\\?|$)", status=403, times=None)
    api = KubeApi(await load_configuration(str(kubeconfig)))
    cache = WorkloadCache()
    watch = asyncio.create_task(WorkloadWatch(api, cache, "Deployment").run())
    try:
        await _until(lambda: any(r.path.endswith("/deployments") for r in fake_kube.requests))
        worker = KubernetesScaleTarget(api, ScaleTargetRef(name="worker"), "default", workloads=cache)
        state = await worker.read()
        assert (state.replicas, state.ready_replicas, state.watched) == (2, None, False)
        assert fake_kube.requests[-1].path.endswith("/deployments/worker/scale")
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        await api.close()


async def _until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


@pytest.mark.usefixtures("worker")
async def test_scale_sets_spec_replicas(fake_kube: FakeKube, kube_api: KubeApi) -> None:
    worker = target(kube_api)
    written = await worker.scale(5, await worker.read())
    assert written.replicas == 5
    assert fake_kube.get("apps/v1", "Deployment", "worker")["spec"]["replicas"] == 5
    assert fake_kube.requests[-1].method == "PUT"
    assert fake_kube.requests[-1].path == "/apis/apps/v1/namespaces/default/deployments/worker/scale"


@pytest.mark.usefixtures("worker")
async def test_scale_after_someone_else_changed_the_target_is_a_conflict(fake_kube: FakeKube,
                                                                         kube_api: KubeApi) -> None:
    worker = target(kube_api)
    read = await worker.read()
    await worker.scale(3, await worker.read())
    with pytest.raises(TargetConflict) as caught:
        await worker.scale(7, read)
    assert caught.value.retryable
    assert "Deployment default/worker (apps/v1)" in caught.value.message
    assert fake_kube.get("apps/v1", "Deployment", "worker")["spec"]["replicas"] == 3


async def test_a_missing_target_is_not_found_and_named(kube_api: KubeApi) -> None:
    with pytest.raises(TargetError) as caught:
        await target(kube_api, "nope").read()
    assert caught.value.code == "NotFound"
    assert not caught.value.retryable
    assert caught.value.message.startswith("Deployment default/nope (apps/v1) not found")


@pytest.mark.usefixtures("worker")
async def test_a_scale_write_takes_its_token_at_once_and_the_next_read_waits_for_it(kubeconfig: Path) -> None:
    limiter = TokenBucket(rate=20.0, burst=1)
    api = KubeApi(await load_configuration(str(kubeconfig)), limiter=limiter)
    try:
        worker = target(api)
        read = await worker.read()  # the burst's one token
        await worker.scale(3, read)  # none left: made at once all the same, in debt
        assert limiter.waited == 0
        await worker.read()  # pays the debt
        assert limiter.waited == 1
    finally:
        await api.close()


@pytest.mark.usefixtures("worker")
async def test_forbidden_is_not_retryable_and_says_what_to_grant(fake_kube: FakeKube,
                                                                 kube_api: KubeApi) -> None:
    fake_kube.add_fault(method="PUT", path="/scale$", status=403)
    worker = target(kube_api)
    with pytest.raises(TargetError) as caught:
        await worker.scale(3, await worker.read())
    assert caught.value.code == "Forbidden"
    assert not caught.value.retryable
    assert "RBAC" in caught.value.message


@pytest.mark.usefixtures("worker")
async def test_throttling_is_retryable_after_the_servers_delay(fake_kube: FakeKube,
                                                               kube_api: KubeApi) -> None:
    fake_kube.add_fault(method="GET", path="/scale$", status=429, retry_after=7)
    with pytest.raises(TargetThrottled) as caught:
        await target(kube_api).read()
    assert caught.value.code == "TooManyRequests"
    assert caught.value.retryable
    assert caught.value.retry_after == 7


@pytest.mark.usefixtures("worker")
async def test_server_errors_are_retryable(fake_kube: FakeKube, kube_api: KubeApi) -> None:
    fake_kube.add_fault(method="GET", path="/scale$", status=500)
    with pytest.raises(TargetError) as caught:
        await target(kube_api).read()
    assert caught.value.code == "InternalError"
    assert caught.value.retryable
    assert (await target(kube_api).read()).replicas == 2


async def test_statefulsets_scale_through_the_same_path(fake_kube: FakeKube, kube_api: KubeApi) -> None:
    fake_kube.create(deployment("db") | {"kind": "StatefulSet"})
    db = target(kube_api, "db", kind="StatefulSet")
    await db.scale(4, await db.read())
    assert fake_kube.get("apps/v1", "StatefulSet", "db")["spec"]["replicas"] == 4


async def test_an_unknown_kind_is_found_by_discovery_or_refused(kube_api: KubeApi) -> None:
    with pytest.raises(TargetError) as unknown:
        await target(kube_api, kind="Rollout").read()
    assert unknown.value.code == "UnknownKind"
    assert not unknown.value.retryable
    with pytest.raises(TargetError) as not_scalable:
        await target(kube_api, "s", kind="Secret", api_version="v1").read()
    assert not_scalable.value.code == "NotScalable"


async def test_a_custom_kind_with_a_scale_subresource_is_discovered(fake_kube: FakeKube,
                                                                    kube_api: KubeApi) -> None:
    fake_kube.create({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "rollouts.example.io"},
        "spec": {"group": "example.io", "scope": "Namespaced",
                 "names": {"plural": "rollouts", "singular": "rollout", "kind": "Rollout"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "subresources": {"scale": {"specReplicasPath": ".spec.replicas",
                                                          "statusReplicasPath": ".status.replicas"}},
                               "schema": {"openAPIV3Schema": {"type": "object",
                                                                "x-kubernetes-preserve-unknown-fields": True}}}]},
    })
    fake_kube.create({"apiVersion": "example.io/v1", "kind": "Rollout", "metadata": {"name": "r"},
                      "spec": {"replicas": 1}})
    rollout = target(kube_api, "r", kind="Rollout", api_version="example.io/v1")
    assert await rollout.scale(3, await rollout.read()) == ScaleState(replicas=3, version=rollout_version(fake_kube))


def rollout_version(fake_kube: FakeKube) -> str:
    return str(fake_kube.get("example.io/v1", "Rollout", "r")["metadata"]["resourceVersion"])


async def test_an_unreachable_api_server_is_retryable() -> None:
    configuration = aio_client.Configuration(host="http://127.0.0.1:9")  # the discard port: nothing listens
    api = KubeApi(configuration)
    try:
        with pytest.raises(TargetError) as caught:
            await target(api).read()
    finally:
        await api.close()
    assert caught.value.code == "Unavailable"
    assert caught.value.retryable


# ----------------------------------------------------------------------------------------------------------------
# With the reconciler the operator runs


class QueueOf:
    """A source that always sees `count` messages."""

    def __init__(self, spec: SourceSpec, count: int) -> None:
        self._spec = spec
        self.count = count

    @property
    def spec(self) -> SourceSpec:
        return self._spec

    async def poll(self, budget: float) -> SourceReading:
        del budget
        return SourceReading.of(self.count)

    async def aclose(self) -> None:
        return None


class StillClock:
    def now(self) -> float:
        return 1_800_000_000.0

    async def sleep(self, seconds: float) -> None:
        del seconds


class RacedTarget(KubernetesScaleTarget):
    """Someone else writes the Deployment right after our first read: our write must lose and be redone."""

    def __init__(self, fake: FakeKube, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fake = fake
        self.raced = False

    async def read(self) -> ScaleState:
        state = await super().read()
        if not self.raced:
            self.raced = True
            rt = self.fake.resource("apps/v1", "Deployment")
            self.fake.store.patch(rt, "shop", "orders-worker", "application/merge-patch+json",
                                  {"metadata": {"annotations": {"deployed-by": "ci"}}})
        return state


def orders_rule() -> QueueScaler:
    (doc,) = list(yaml.safe_load_all((ROOT / "examples" / "orders-worker.yaml").read_text()))
    return parse_queuescaler(doc)


async def test_the_reconciler_scales_a_deployment_and_redoes_a_raced_write(fake_kube: FakeKube,
                                                                           kube_api: KubeApi) -> None:
    fake_kube.ensure_namespace("shop")
    fake_kube.create({**deployment("orders-worker", replicas=1), "metadata": {"name": "orders-worker",
                                                                              "namespace": "shop"}})
    rule = orders_rule()
    target = RacedTarget(fake_kube, kube_api, rule.spec.scale_target_ref, rule.namespace)
    reconciler = Reconciler(rule, [QueueOf(rule.spec.sources[0], 100)], target, StillClock())
    result = await reconciler.tick()
    assert result.target_error is None
    assert result.decision is not None
    assert result.decision.desired == 5  # 100 messages / 20 per replica
    assert fake_kube.get("apps/v1", "Deployment", "orders-worker", "shop")["spec"]["replicas"] == 5
    writes = [r.status for r in fake_kube.requests if r.method == "PUT" and r.path.endswith("/scale")]
    assert writes == [409, 200]


@pytest.mark.usefixtures("worker")
async def test_after_a_409_the_next_read_asks_the_api_server_until_the_watch_catches_up(
        fake_kube: FakeKube, kube_api: KubeApi) -> None:
    """A watch can lag behind a change (here it is not running at all): the write made on the version it showed
    gets 409, and the read that follows goes to the Scale instead of deciding on the same stale version again."""
    cache = WorkloadCache()
    handler = cache.handler("Deployment")
    await handler.sync(None, fake_kube.list_objects("apps/v1", "Deployment"))
    worker = KubernetesScaleTarget(kube_api, ScaleTargetRef(name="worker"), "default", workloads=cache)
    stale = await worker.read()
    assert stale.watched and stale.replicas == 2
    fake_kube.store.update_scale(fake_kube.resource("apps/v1", "Deployment"), "default", "worker",
                                 {"metadata": {"name": "worker"}, "spec": {"replicas": 7}})  # kubectl scale
    with pytest.raises(TargetConflict):
        await worker.scale(4, stale)
    fresh = await worker.read()
    assert (fresh.replicas, fresh.watched) == (7, False)
    assert fake_kube.requests[-1].path.endswith("/deployments/worker/scale")
    await handler.upsert(fake_kube.get("apps/v1", "Deployment", "worker"))  # the watch catches up
    caught_up = await worker.read()
    assert (caught_up.replicas, caught_up.watched, caught_up.ready_replicas) == (7, True, 7)


@pytest.mark.usefixtures("worker")
async def test_a_write_after_a_409_is_not_undone_by_a_watch_that_is_still_behind(
        fake_kube: FakeKube, kube_api: KubeApi) -> None:
    """After the 409 the tick reads the Scale and writes on its version; the cache still shows the version from
    before both changes, and must not be taken for the target's state on the next tick."""
    cache = WorkloadCache()
    await cache.handler("Deployment").sync(None, fake_kube.list_objects("apps/v1", "Deployment"))
    worker = KubernetesScaleTarget(kube_api, ScaleTargetRef(name="worker"), "default", workloads=cache)
    stale = await worker.read()
    fake_kube.store.update_scale(fake_kube.resource("apps/v1", "Deployment"), "default", "worker",
                                 {"metadata": {"name": "worker"}, "spec": {"replicas": 7}})
    with pytest.raises(TargetConflict):
        await worker.scale(4, stale)
    written = await worker.scale(4, await worker.read())
    again = await worker.read()
    assert (again.replicas, again.version) == (4, written.version)
    assert fake_kube.get("apps/v1", "Deployment", "worker")["spec"]["replicas"] == 4


@pytest.mark.usefixtures("worker")
async def test_a_watch_forbidden_while_running_stops_being_trusted(fake_kube: FakeKube, kubeconfig: Path) -> None:
    """RBAC taken away mid-run: the cache would never change again, so the target goes back to its /scale."""
    api = KubeApi(await load_configuration(str(kubeconfig)))
    cache = WorkloadCache()
    errors: list[str] = []
    watch = asyncio.create_task(WorkloadWatch(api, cache, "Deployment", on_error=errors.append).run())
    try:
        await _until(lambda: cache.watches("Deployment", "default"))
        fake_kube.add_fault(method="GET", path="/deployments(\\?|$)", status=403, times=None)
        fake_kube.drop_watches()
        await _until(lambda: not cache.watches("Deployment", "default"))
        assert "Forbidden" in errors
        worker = KubernetesScaleTarget(api, ScaleTargetRef(name="worker"), "default", workloads=cache)
        assert (await worker.read()).watched is False
        fake_kube.clear_faults()  # granted again: the relist after the back-off trusts the watch again
        await _until(lambda: cache.watches("Deployment", "default"), timeout=10)
        assert (await worker.read()).watched is True
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        await api.close()
