"""The targets watched, end to end: `queuescale run` in a subprocess, a real Azurite and the fake API server.

The operator lists and watches Deployments and StatefulSets (controller/kube/workloads.py) instead of reading each
target's /scale: READY and status.readyReplicas are filled, a scale made by another client is seen by the next
tick with no GET of the Scale, the start-up time of a scale-up is measured, a forbidden watch falls back to /scale
reads, and a dropped or expired watch relists. Requests are counted from the fake's own log (`/_fake/requests`),
by the operator's User-Agent.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client as kube_client

from controller.kube.workloads import WorkloadCache
from controller.targets.base import StartupMeter
from tests.azurite import Azurite
from tests.fakekube.server import FakeKube
from tests.operator_harness import (
    NS,
    ROOT,
    Operator,
    condition,
    events,
    make_queue,
    queue_name,
    replicas,
    rule,
    secret,
    setup_rule,
    status,
    wait_for,
)

OPERATOR_ACCOUNT = ("queuescale-system", "queuescale-operator")


def requests_made(kube: FakeKube) -> list[dict[str, Any]]:
    """Every request the fake has answered, oldest first, as `GET /_fake/requests` lists them."""
    answer = httpx.get(f"{kube.url}/_fake/requests", timeout=5, verify=kube.client_ssl_context())
    answer.raise_for_status()
    found: list[dict[str, Any]] = answer.json()["requests"]
    return found


def by_operator(records: list[dict[str, Any]], method: str, path: str) -> list[dict[str, Any]]:
    """The operator's requests (by User-Agent) with this method and a path matching the regex."""
    return [r for r in records if r["user_agent"].startswith("queuescale/") and r["method"] == method
            and re.search(path, r["path"])]


def scaled_by_someone_else(api: kube_client.ApiClient, name: str, to: int) -> None:
    """What `kubectl scale deployment NAME --replicas=N` sends: a PUT of the Scale, without a resourceVersion."""
    kube_client.AppsV1Api(api).replace_namespaced_deployment_scale(
        name, NS, {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": name, "namespace": NS},
                   "spec": {"replicas": to}})


def seen_at(kube: FakeKube, name: str, replicas_now: int) -> bool:
    """The rule's tick used `replicas_now`: its status says so, or it scaled away from it (policy permitting)."""
    return status(kube, name).get("currentReplicas") == replicas_now or any(
        e["reason"] in ("ScaledDown", "ScaledUp") and e["message"].startswith(f"{replicas_now} -> ")
        for e in events(kube, name))


def ready_with(kube: FakeKube, name: str, count: int) -> bool:
    current = status(kube, name)
    return bool(condition(kube, name, "Ready").get("status") == "True" and current.get("currentReplicas") == count
                and current.get("readyReplicas") == count)


# ---------------------------------------------------------------------------------------------- the fake's Scale


def test_a_scale_carries_its_deployments_resource_version_as_kube_apiserver_does(
        kube: FakeKube, api: kube_client.ApiClient) -> None:
    """kubernetes/kubernetes pkg/registry/apps/deployment/storage/storage.go: `scaleFromDeployment` copies the
    Deployment's ResourceVersion into the Scale, and `scaleUpdatedObjectInfo.UpdatedObject` moves the Scale's back
    as the write's precondition. So a version seen on a Deployment watch is the one to PUT a Scale with."""
    setup_rule_free_deployment(api, "versions", 2)
    kube.set_ready_delay(None)  # no status write by the fake's workload controller in between
    apps = kube_client.AppsV1Api(api)
    deployment = apps.read_namespaced_deployment("versions", NS)
    scale = apps.read_namespaced_deployment_scale("versions", NS)
    assert scale.metadata.resource_version == deployment.metadata.resource_version
    assert scale.metadata.uid == deployment.metadata.uid
    written = apps.replace_namespaced_deployment_scale("versions", NS, {
        "metadata": {"name": "versions", "resourceVersion": deployment.metadata.resource_version},
        "spec": {"replicas": 3}})
    after = kube.get("apps/v1", "Deployment", "versions", NS)
    assert written.metadata.resource_version == after["metadata"]["resourceVersion"]
    with pytest.raises(kube_client.ApiException) as stale:
        apps.replace_namespaced_deployment_scale("versions", NS, {
            "metadata": {"name": "versions", "resourceVersion": deployment.metadata.resource_version},
            "spec": {"replicas": 4}})
    assert stale.value.status == 409


def test_a_scale_naming_another_uid_is_a_conflict_as_kube_apiserver_does(
        kube: FakeKube, api: kube_client.ApiClient) -> None:
    """Same file, `scaleUpdatedObjectInfo.UpdatedObject`: "Precondition failed: UID in precondition" is a 409, so a
    target deleted and created again under its name is not scaled on a decision made for the old one."""
    setup_rule_free_deployment(api, "reborn", 2)
    apps = kube_client.AppsV1Api(api)
    with pytest.raises(kube_client.ApiException) as caught:
        apps.replace_namespaced_deployment_scale("reborn", NS, {
            "metadata": {"name": "reborn", "uid": "00000000-0000-0000-0000-000000000000"}, "spec": {"replicas": 5}})
    assert caught.value.status == 409
    assert "Precondition failed: UID in precondition" in json.loads(caught.value.body)["message"]
    assert replicas(kube, "reborn") == 2


def setup_rule_free_deployment(api: kube_client.ApiClient, name: str, count: int) -> None:
    kube_client.AppsV1Api(api).create_namespaced_deployment(NS, {
        "metadata": {"name": name}, "spec": {"replicas": count, "selector": {"matchLabels": {"app": name}},
                                             "template": {"metadata": {"labels": {"app": name}},
                                                          "spec": {"containers": [{"name": "w", "image": "w:1"}]}}}})


# ---------------------------------------------------------------------------------------------- end to end


def test_ready_column_and_status_ready_replicas_are_filled_from_the_watch(
        azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator]) -> None:
    setup_rule(api, azurite, "ready", messages=25)
    operators()
    wait_for("3 replicas, all ready, in the status", lambda: ready_with(kube, "ready", 3),
             describe=lambda: str(status(kube, "ready")))
    header, row = kube.table("qs", NS).splitlines()[:2]
    columns = dict(zip(header.split(), row.split(), strict=False))
    assert (columns["CURRENT"], columns["READY"]) == ("3", "3"), kube.table("qs", NS)


def test_a_statefulset_target_is_watched_too(
        azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator]) -> None:
    make_queue(azurite, queue := queue_name(), 15)
    secret(api, "sts-queue", {"connection": azurite.connection_string})
    kube_client.AppsV1Api(api).create_namespaced_stateful_set(NS, {
        "metadata": {"name": "sts"}, "spec": {
            "replicas": 0, "serviceName": "sts", "selector": {"matchLabels": {"app": "sts"}},
            "template": {"metadata": {"labels": {"app": "sts"}},
                         "spec": {"containers": [{"name": "w", "image": "w:1"}]}}}})
    rule(api, "sts", queue, "sts-queue", scaleTargetRef={"apiVersion": "apps/v1", "kind": "StatefulSet",
                                                          "name": "sts"})
    operators()
    wait_for("2 ready replicas of the StatefulSet", lambda: ready_with(kube, "sts", 2),
             describe=lambda: str(status(kube, "sts")))
    made = requests_made(kube)
    assert by_operator(made, "GET", r"^/apis/apps/v1/statefulsets$")
    assert by_operator(made, "GET", r"/statefulsets/sts/scale$") == []


@pytest.mark.parametrize("scope", [(), ("--namespace", NS)], ids=["all-namespaces", "one-namespace"])
def test_steady_state_reads_no_scale_of_a_deployment(
        azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator],
        scope: tuple[str, ...]) -> None:
    setup_rule(api, azurite, "steady", messages=25)
    operators(*scope)
    wait_for("3 ready replicas", lambda: ready_with(kube, "steady", 3))
    before = len(requests_made(kube))
    time.sleep(3.5)  # three ticks at pollingInterval 1s
    made = requests_made(kube)[before:]
    assert by_operator(made, "GET", r"/scale$") == []
    assert by_operator(made, "PUT", r"/scale$") == []
    # Since start: the Deployment was read from the watch only (a list, then a watch), never by its name, in the
    # scope the rules are watched in.
    everything = requests_made(kube)
    assert by_operator(everything, "GET", r"/deployments/steady") == []
    listed = f"^/apis/apps/v1/namespaces/{NS}/deployments$" if scope else "^/apis/apps/v1/deployments$"
    assert by_operator(everything, "GET", listed)
    assert len(by_operator(everything, "GET", "/deployments$")) == len(by_operator(everything, "GET", listed))


def test_a_scale_by_another_client_is_used_by_the_next_tick_without_a_get_of_the_scale(
        azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator]) -> None:
    setup_rule(api, azurite, "outside", messages=25)
    operators()
    wait_for("3 ready replicas", lambda: ready_with(kube, "outside", 3))
    before = len(requests_made(kube))
    changed = time.monotonic()
    scaled_by_someone_else(api, "outside", 7)
    wait_for("the operator to see 7 replicas", lambda: seen_at(kube, "outside", 7), timeout=10,
             describe=lambda: f"{status(kube, 'outside')}, {[e['message'] for e in events(kube, 'outside')]}")
    # One polling interval (1 s) and the status write or event; with --target-refresh (1m) it took up to a minute.
    assert time.monotonic() - changed < 4.0
    made = requests_made(kube)[before:]
    assert by_operator(made, "GET", r"/scale$") == []
    # The tick decided from 7 and wrote against the version the watch gave: no 409 on the way.
    assert [r["status"] for r in by_operator(made, "PUT", r"/deployments/outside/scale$")] in ([], [200])


def test_start_up_time_is_measured_from_our_scale_up_to_its_ready_replicas(
        azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator]) -> None:
    queue = setup_rule(api, azurite, "startup", messages=0)
    operator = operators()
    wait_for("the rule to be Ready", lambda: condition(kube, "startup", "Ready").get("status") == "True")
    httpx.post(f"{kube.url}/_fake/ready-delay", json={"seconds": 2}, timeout=5,
               verify=kube.client_ssl_context()).raise_for_status()
    for i in range(25):
        queue.send_message(f"m{i}")
    wait_for("3 replicas asked", lambda: replicas(kube, "startup") == 3)
    measured = wait_for("status.startupSeconds", lambda: status(kube, "startup").get("startupSeconds"), timeout=10,
                        describe=lambda: str(status(kube, "startup")))
    # The fake's workload controller makes the pods ready 2 s after it sees the spec; the watch adds little (the
    # bound leaves room for a loaded machine).
    assert 2.0 <= measured <= 3.5, measured
    assert status(kube, "startup")["readyReplicas"] == 3
    gauge = wait_for("the start-up gauge", lambda: re.search(
        r'queuescale_target_startup_seconds\{namespace="shop",rule="startup"\} ([0-9.]+)', operator.metrics()))
    assert float(gauge.group(1)) == pytest.approx(measured, abs=0.06)


def test_a_dropped_or_expired_watch_relists_and_still_sees_changes(
        azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator]) -> None:
    setup_rule(api, azurite, "relist", messages=25)
    operators()
    wait_for("3 ready replicas", lambda: ready_with(kube, "relist", 3))
    lists = len(by_operator(requests_made(kube), "GET", r"^/apis/apps/v1/deployments$"))
    before = len(requests_made(kube))
    kube.compact()  # the watch's version is gone: its next watch gets 410 Expired
    kube.drop_watches()
    wait_for("a new list of Deployments after the 410", lambda: len(by_operator(
        requests_made(kube), "GET", r"^/apis/apps/v1/deployments$")) > lists, timeout=10)
    scaled_by_someone_else(api, "relist", 6)
    wait_for("the operator to see 6 replicas", lambda: seen_at(kube, "relist", 6), timeout=10,
             describe=lambda: str(status(kube, "relist")))
    assert by_operator(requests_made(kube)[before:], "GET", r"/scale$") == []


def test_a_forbidden_watch_falls_back_to_reading_the_scale_and_keeps_scaling(
        azurite: Azurite, kube: FakeKube, api: kube_client.ApiClient, tmp_path: Path) -> None:
    """The shipped RBAC less its list/watch on workloads (as the fake enforces RBAC for a ServiceAccount token):
    the operator logs once, reads /scale, scales, and leaves READY unknown."""
    for doc in yaml.safe_load_all((ROOT / "manifests" / "rbac.yaml").read_text()):
        if doc["kind"] == "ClusterRole":
            kept = [r for r in doc["rules"] if set(r["resources"]) != {"deployments", "statefulsets"}]
            assert len(kept) == len(doc["rules"]) - 1
            doc["rules"] = kept
        kube.create(doc)
    setup_rule(api, azurite, "fallback", messages=25)
    kubeconfig = kube.write_kubeconfig(tmp_path / "operator-kubeconfig", service_account=OPERATOR_ACCOUNT)
    operator = Operator(kubeconfig, tmp_path / "operator.log").start()
    try:
        wait_for("3 replicas and Ready", lambda: replicas(kube, "fallback") == 3
                 and condition(kube, "fallback", "Ready").get("status") == "True"
                 and status(kube, "fallback").get("currentReplicas") == 3,
                 describe=lambda: str(status(kube, "fallback")))
        time.sleep(1.5)  # a tick or two more
        assert "readyReplicas" not in status(kube, "fallback")
        made = requests_made(kube)
        assert [r["status"] for r in by_operator(made, "GET", r"^/apis/apps/v1/deployments$")][:1] == [403]
        assert by_operator(made, "GET", r"/deployments/fallback/scale$")
    finally:
        assert operator.stop() == 0
    lines = [json.loads(line) for line in (tmp_path / "operator.log").read_text().splitlines() if line.startswith("{")]
    warned = [line for line in lines if "not watching deployments" in str(line.get("message"))]
    assert len(warned) == 1, warned
    assert "list and watch on deployments" in warned[0]["message"]
    assert not [line for line in lines if line.get("level") == "ERROR"]


# ---------------------------------------------------------------------------------------------- the measurement


class Clock:
    def __init__(self) -> None:
        self.time = 1000.0

    def now(self) -> float:
        return self.time


def deployment_seen(replicas_asked: int, ready: int, *, version: int, generation: int, observed: int,
                    uid: str = "u1", old: int = 0) -> dict[str, Any]:
    """A Deployment as a watch event carries it (only the fields the cache reads); `old`: pods of an older
    template beside the `ready` ones of the current (a rollout under way)."""
    counts = {"replicas": ready + old, "updatedReplicas": ready} if old else {}
    return {"metadata": {"name": "w", "namespace": NS, "uid": uid, "resourceVersion": str(version),
                         "generation": generation},
            "spec": {"replicas": replicas_asked},
            "status": {"observedGeneration": observed, **({"readyReplicas": ready + old} if ready + old else {}),
                       **counts}}


async def test_start_up_counts_from_our_ask_to_ready_once_the_controller_saw_the_new_spec() -> None:
    clock = Clock()
    cache = WorkloadCache(now=clock.now)
    handler = cache.handler("Deployment")
    await handler.sync(None, [deployment_seen(2, 2, version=10, generation=1, observed=1)])
    cache.asked("Deployment", NS, "w", 5, written_against="10")
    clock.time += 0.1
    # Scaling down still in progress elsewhere would show more ready than asked; the old generation does not count.
    await handler.upsert(deployment_seen(2, 6, version=10, generation=1, observed=1))
    await handler.upsert(deployment_seen(5, 6, version=11, generation=2, observed=1))
    assert cache.startup_seconds("Deployment", NS, "w") is None
    clock.time += 2.0
    await handler.upsert(deployment_seen(5, 3, version=12, generation=2, observed=2))
    assert cache.startup_seconds("Deployment", NS, "w") is None
    clock.time += 1.5
    await handler.upsert(deployment_seen(5, 5, version=13, generation=2, observed=2))
    assert cache.startup_seconds("Deployment", NS, "w") == pytest.approx(3.6)


async def test_a_scale_up_undone_before_its_pods_came_is_not_measured_and_a_new_uid_forgets_the_old() -> None:
    clock = Clock()
    cache = WorkloadCache(now=clock.now)
    handler = cache.handler("Deployment")
    await handler.sync(None, [deployment_seen(2, 2, version=10, generation=1, observed=1)])
    cache.asked("Deployment", NS, "w", 8, written_against="10")
    await handler.upsert(deployment_seen(8, 2, version=11, generation=2, observed=2))
    await handler.upsert(deployment_seen(3, 2, version=12, generation=3, observed=3))  # kubectl scale --replicas=3
    await handler.upsert(deployment_seen(3, 3, version=13, generation=3, observed=3))
    await handler.upsert(deployment_seen(8, 8, version=14, generation=4, observed=4))  # someone else's scale-up
    assert cache.startup_seconds("Deployment", NS, "w") is None
    cache.asked("Deployment", NS, "w", 9, written_against="14")
    clock.time += 1.0
    await handler.upsert(deployment_seen(9, 9, version=15, generation=5, observed=5))
    assert cache.startup_seconds("Deployment", NS, "w") == pytest.approx(1.0)
    await handler.upsert(deployment_seen(9, 9, version=20, generation=1, observed=1, uid="u2"))  # re-created
    assert cache.startup_seconds("Deployment", NS, "w") is None
    await handler.delete(deployment_seen(9, 9, version=21, generation=1, observed=1, uid="u2"))
    assert cache.get("Deployment", NS, "w") is None


async def test_a_scale_up_asked_or_met_during_a_rollout_measures_no_start_up() -> None:
    # A rollout's ready count holds surge pods that started before the ask: a paused rollout with 3 ready of a spec
    # of 2 meets an ask for 3 at once. Neither that nor an ask met while old pods remain is a start-up; the first
    # ask once the rollout is complete is.
    clock = Clock()
    cache = WorkloadCache(now=clock.now)
    handler = cache.handler("Deployment")
    await handler.sync(None, [deployment_seen(2, 1, version=10, generation=2, observed=2, old=2)])
    cache.asked("Deployment", NS, "w", 3, written_against="10")
    clock.time += 0.2
    await handler.upsert(deployment_seen(3, 1, version=11, generation=3, observed=3, old=2))
    assert cache.startup_seconds("Deployment", NS, "w") is None
    # Asked once the old pods were gone from the count, met while a new rollout began: not measured either.
    await handler.upsert(deployment_seen(3, 3, version=12, generation=3, observed=3))
    cache.asked("Deployment", NS, "w", 4, written_against="12")
    clock.time += 2.0
    await handler.upsert(deployment_seen(4, 3, version=13, generation=4, observed=4, old=1))
    assert cache.startup_seconds("Deployment", NS, "w") is None
    await handler.upsert(deployment_seen(4, 4, version=14, generation=4, observed=4))
    cache.asked("Deployment", NS, "w", 6, written_against="14")
    clock.time += 2.5
    await handler.upsert(deployment_seen(6, 6, version=15, generation=5, observed=5))
    assert cache.startup_seconds("Deployment", NS, "w") == pytest.approx(2.5)
    # A StatefulSet replaces its pods in place, no surge: its updatedReplicas say nothing of the count.
    sets = cache.handler("StatefulSet")
    await sets.sync(None, [{**deployment_seen(2, 2, version=30, generation=1, observed=1, old=1)}])
    cache.asked("StatefulSet", NS, "w", 3, written_against="30")
    clock.time += 1.0
    await sets.upsert(deployment_seen(3, 2, version=31, generation=2, observed=2, old=1))
    assert cache.startup_seconds("StatefulSet", NS, "w") == pytest.approx(1.0)


async def test_one_scale_up_whose_pods_were_stuck_moves_the_assumed_start_up_only_with_two_more_like_it() -> None:
    # Start-ups of 2 s, then one whose pods were stuck for an hour (an image that could not be pulled until
    # someone fixed it). Assumed alone, that hour made a rate-mode rule with a rise of 0.1/s ask for three times
    # its replicas (5 -> 16, a 2-minute objective, 2 s jobs). The lower median of the last five keeps 2 s; a
    # target that really became slower moves it at its third slow start-up. The simulated and local targets'
    # StartupMeter keeps the same samples (StartupTimes).
    clock = Clock()
    cache = WorkloadCache(now=clock.now)
    handler = cache.handler("Deployment")
    version, generation = 10, 1
    await handler.sync(None, [deployment_seen(1, 1, version=version, generation=generation, observed=generation)])

    async def scale_up(to: int, takes: float) -> float | None:
        nonlocal version, generation
        cache.asked("Deployment", NS, "w", to, written_against=str(version))
        version, generation = version + 1, generation + 1
        await handler.upsert(deployment_seen(to, to - 1, version=version, generation=generation,
                                             observed=generation))
        clock.time += takes
        version += 1
        await handler.upsert(deployment_seen(to, to, version=version, generation=generation, observed=generation))
        return cache.startup_seconds("Deployment", NS, "w")

    assert await scale_up(2, 2.0) == pytest.approx(2.0)
    assert await scale_up(3, 2.0) == pytest.approx(2.0)
    assert await scale_up(4, 3600.0) == pytest.approx(2.0)  # before: 3600
    assert await scale_up(5, 2.0) == pytest.approx(2.0)
    assert await scale_up(6, 9.0) == pytest.approx(2.0)
    assert await scale_up(7, 9.0) == pytest.approx(9.0)  # the last five: 2, 3600, 2, 9, 9
    assert await scale_up(8, 9.0) == pytest.approx(9.0)


def test_the_simulated_and_local_targets_meter_assumes_the_same_lower_median() -> None:
    meter = StartupMeter()
    ready_at = {2: 12.0, 3: 3620.0, 4: 4002.0}  # asked at 10, 20, 4000: 2 s, 3600 s, 2 s
    for asked_at, asked in ((10.0, 2), (20.0, 3), (4000.0, 4)):
        meter.asked(asked_at, asked)
        assert meter.follow(asked, lambda n, since: ready_at[n] if ready_at[n] >= since else None) == (
            pytest.approx(2.0))
    assert meter.times.samples == [2.0, 3600.0, 2.0]
