"""The fake's Deployment controller against upstream's own test tables, and a rollout driven by the real kubectl.

The tables are transcribed from k8s.io/kubernetes `pkg/controller/deployment` (1.28, the rows unchanged since):
`sync_test.go` TestScale, `rolling_test.go` TestDeploymentController_reconcileNewReplicaSet and
_reconcileOldReplicaSets and _scaleDownOldReplicaSetsForRollingUpdate, `util/deployment_util_test.go`
TestNewRSNewReplicas, TestResolveFenceposts and TestMaxUnavailable. Their fixture `newDeployment` is a rolling update
with maxSurge and maxUnavailable 0 unless a row says otherwise; `rs(name, replicas, ts)` sets only the spec.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakekube import FakeKube
from tests.fakekube import deployments as fd
from tests.fakekube.server import TOKEN
from tests.kube.test_fake_pods import kubectl, needs_kubectl

NS = "shop"  # the namespace of tests/kube/test_fake_pods.py, whose kubectl helper writes its kubeconfig

NEWER, OLD, OLDER = "2016-05-20T02:00:00Z", "2016-05-20T01:00:00Z", "2016-05-20T00:00:00Z"


def deployment(replicas: int, surge: object = 0, unavailable: object = 0, *, recreate: bool = False,
               status_replicas: int = 0) -> dict[str, Any]:
    strategy: dict[str, Any] = ({"type": "Recreate"} if recreate else
                                {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge,
                                                                            "maxUnavailable": unavailable}})
    return {"metadata": {"name": "foo", "namespace": NS, "uid": "u-foo", "generation": 1},
            "spec": {"replicas": replicas, "strategy": strategy, "selector": {"matchLabels": {"foo": "bar"}},
                     "template": {"metadata": {"labels": {"foo": "bar"}},
                                  "spec": {"containers": [{"name": "foo", "image": "foo/bar"}]}}},
            "status": {"replicas": status_replicas}}


def rs(name: str, replicas: int, created: str = NEWER, *, available: int = 0,
       annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": created, "annotations": dict(annotations or {})},
            "spec": {"replicas": replicas}, "status": {"availableReplicas": available}}


def sized_for(sets: list[dict[str, Any]], old: dict[str, Any], desired: dict[str, int] | None = None) -> None:
    """TestScale's harness: each ReplicaSet annotated as sized for the old Deployment (or a row's override)."""
    for one in sets:
        wanted = (desired or {}).get(one["metadata"]["name"], fd.replicas(old))
        one["metadata"]["annotations"].update({fd.DESIRED_REPLICAS: str(wanted),
                                               fd.MAX_REPLICAS: str(wanted + fd.max_surge(old))})


# ----------------------------------------------------------------------------------------------------------------
# TestScale (sync_test.go): (name, replicas, old replicas, surge, new, olds [(name, replicas, created)],
# expected new, expected olds, annotation overrides, the new one's available pods)

SCALE_ROWS: list[tuple[str, int, int, int, tuple[str, int] | None, list[tuple[str, int, str]], int | None,
                       list[int], dict[str, int], int]] = [
    ("normal scaling event: 10 -> 12", 12, 10, 0, ("foo-v1", 10), [], 12, [], {}, 0),
    ("normal scaling event: 10 -> 5", 5, 10, 0, ("foo-v1", 10), [], 5, [], {}, 0),
    ("proportional scaling: 5 -> 10", 10, 5, 0, ("foo-v2", 2), [("foo-v1", 3, OLD)], 4, [6], {}, 0),
    ("proportional scaling: 5 -> 3", 3, 5, 0, ("foo-v2", 2), [("foo-v1", 3, OLD)], 1, [2], {}, 0),
    ("proportional scaling: 9 -> 4", 4, 9, 0, ("foo-v2", 8), [("foo-v1", 1, OLD)], 4, [0], {}, 0),
    ("proportional scaling: 7 -> 10", 10, 7, 0, ("foo-v3", 2), [("foo-v2", 3, OLD), ("foo-v1", 2, OLDER)], 3,
     [4, 3], {}, 0),
    ("proportional scaling: 13 -> 8", 8, 13, 0, ("foo-v3", 2), [("foo-v2", 8, OLD), ("foo-v1", 3, OLDER)], 1,
     [5, 2], {}, 0),
    ("leftover distribution: 3 -> 4", 4, 3, 0, ("foo-v3", 1), [("foo-v2", 1, OLD), ("foo-v1", 1, OLDER)], 2,
     [1, 1], {}, 0),
    ("leftover distribution: 3 -> 2", 2, 3, 0, ("foo-v3", 1), [("foo-v2", 1, OLD), ("foo-v1", 1, OLDER)], 1,
     [1, 0], {}, 0),
    ("proportional scaling (no new rs): 4 -> 5", 5, 4, 0, None, [("foo-v2", 2, OLD), ("foo-v1", 2, OLDER)], None,
     [3, 2], {}, 0),
    ("proportional scaling: 6 -> 0", 0, 6, 0, ("foo-v3", 3), [("foo-v2", 2, OLD), ("foo-v1", 1, OLDER)], 0,
     [0, 0], {}, 0),
    ("proportional scaling: 0 -> 6", 6, 6, 0, ("foo-v3", 0), [("foo-v2", 0, OLD), ("foo-v1", 0, OLDER)], 6,
     [0, 0], {}, 0),
    ("failed rs update", 5, 5, 0, ("foo-v3", 2), [("foo-v2", 1, OLD), ("foo-v1", 1, OLDER)], 2, [2, 1],
     {"foo-v2": 3}, 0),
    ("deployment with surge pods", 20, 10, 2, ("foo-v2", 6), [("foo-v1", 6, OLD)], 11, [11], {}, 0),
    ("change both surge and size", 50, 10, 6, ("foo-v2", 5), [("foo-v1", 8, OLD)], 22, [34], {}, 0),  # surge was 3
    ("saturated but broken new replica set does not affect old pods", 2, 2, 1, ("foo-v2", 2),
     [("foo-v1", 1, OLD)], 2, [1], {}, 0),
]


@pytest.mark.parametrize(("name", "size", "old_size", "surge", "new", "olds", "want_new", "want_olds", "desired",
                          "available"), SCALE_ROWS, ids=[row[0] for row in SCALE_ROWS])
def test_scale_splits_as_upstreams_testscale(name: str, size: int, old_size: int, surge: int,
                                             new: tuple[str, int] | None, olds: list[tuple[str, int, str]],
                                             want_new: int | None, want_olds: list[int], desired: dict[str, int],
                                             available: int) -> None:
    # Row 16 of upstream's table ("change both size and template") is below: here the template stays.
    unavailable = 1 if name.startswith("saturated") else 0
    old_surge = 3 if name == "change both surge and size" else surge  # the one row whose surge changed too
    d, old_d = deployment(size, surge, unavailable), deployment(old_size, old_surge, unavailable)
    new_set = None if new is None else rs(new[0], new[1], NEWER, available=available)
    old_sets = [rs(n, r, t) for n, r, t in olds]
    sized_for([s for s in [new_set, *old_sets] if s is not None], old_d, desired)
    sizes = fd.scale_sizes(d, new_set, old_sets)

    def after(one: dict[str, Any]) -> int:
        return sizes.get(one["metadata"]["name"], fd.replicas(one))

    assert (None if new_set is None else after(new_set)) == want_new
    assert [after(s) for s in old_sets] == want_olds


def test_scale_with_a_changed_template_splits_between_the_old_ones() -> None:
    # TestScale row 16, "change both size and template": no ReplicaSet has the new template; foo-v2 (7, the newer)
    # and foo-v1 (3) sized for 10 become 10 and 4 for 14.
    old_sets = [rs("foo-v2", 7, NEWER), rs("foo-v1", 3, OLD)]
    sized_for(old_sets, deployment(10))
    changed = deployment(14)
    changed["spec"]["template"]["metadata"]["labels"]["another"] = "label"
    assert fd.find_new(changed, old_sets) is None
    sizes = fd.scale_sizes(changed, None, old_sets)
    assert [sizes["foo-v2"], sizes["foo-v1"]] == [10, 4]


def test_halves_round_away_from_zero_as_roundtoint32_does() -> None:
    # TestScale row 10: foo-v2 of 2 sized for 4, the Deployment now 5: 2 x 5 / 4 = 2.5 -> 3 (Python's round: 2).
    one = rs("foo-v2", 2, annotations={fd.MAX_REPLICAS: "4"})
    assert fd.replica_set_fraction(one, deployment(5)) == 1


# ----------------------------------------------------------------------------------------------------------------
# deployment_util_test.go


@pytest.mark.parametrize(("surge", "unavailable", "desired", "expected"), [
    ("0%", "0%", 0, (0, 1)), ("39%", "39%", 10, (4, 3)), (None, "39%", 10, (0, 3)), ("39%", None, 10, (4, 0)),
    (None, None, 10, (0, 1)),
])
def test_resolve_fenceposts_as_upstreams_table(surge: object, unavailable: object, desired: int,
                                                expected: tuple[int, int]) -> None:
    assert fd.resolve_fenceposts(surge, unavailable, desired) == expected


@pytest.mark.parametrize(("surge", "unavailable"), [("oops", "39%"), ("55%", "urg")])
def test_resolve_fenceposts_refuses_what_is_not_a_percentage(surge: object, unavailable: object) -> None:
    with pytest.raises(fd.StrategyError):
        fd.resolve_fenceposts(surge, unavailable, 10)


@pytest.mark.parametrize(("replicas", "unavailable", "expected"), [
    (10, 5, 5), (10, 10, 10), (5, 10, 5), (0, 10, 0), (10, "50%", 5), (10, "100%", 10), (5, "100%", 5),
])
def test_max_unavailable_as_upstreams_table(replicas: int, unavailable: object, expected: int) -> None:
    assert fd.max_unavailable(deployment(replicas, 1, unavailable)) == expected


def test_max_unavailable_of_a_recreate_deployment_is_zero() -> None:
    assert fd.max_unavailable(deployment(10, recreate=True)) == 0


@pytest.mark.parametrize(("recreate", "size", "new", "surge", "expected"), [
    (False, 1, 5, 1, 5),  # can not scale up - to newRSReplicas
    (False, 6, 2, 10, 6),  # scale up - to depReplicas
    (True, 3, 1, 1, 3),  # recreate - to depReplicas
])
def test_new_rs_new_replicas_as_upstreams_table(recreate: bool, size: int, new: int, surge: int,
                                                expected: int) -> None:
    # allRSs holds a separate ReplicaSet of 5, not the new one.
    d = deployment(size, surge, 1, recreate=recreate)
    assert fd.new_rs_new_replicas(d, [rs("foo", 5)], rs("bar", new)) == expected


def test_an_unset_strategy_is_the_api_servers_default_of_25_percent() -> None:
    """The API server defaults the strategy (tests/kube/test_fake_defaults.py has SetDefaults_Deployment's rows);
    the controller reads the Deployment as stored."""
    with FakeKube() as server:
        d = deployment(10)
        del d["spec"]["strategy"]
        stored = server.create({"apiVersion": "apps/v1", "kind": "Deployment", **d})
    assert (fd.max_surge(stored), fd.max_unavailable(stored)) == (3, 2)  # 25 % of 10, rounded up and down


# ----------------------------------------------------------------------------------------------------------------
# rolling_test.go


@pytest.mark.parametrize(("size", "surge", "old", "new", "expected"), [
    (10, 0, 10, 0, None),  # should not scale up when old replica set is fully saturated
    (10, 2, 10, 0, 2),  # should scale up according to the maxSurge when old replica set is fully saturated
    (10, 2, 5, 0, 7),  # should scale up according to the maxSurge
    (10, 2, 10, 2, None),  # should not scale when maxSurge is fully saturated
    (10, 2, 2, 11, 10),  # should scale down when there are replicas above maxSurge
])
def test_reconcile_new_replica_set_as_upstreams_table(size: int, surge: int, old: int, new: int,
                                                      expected: int | None) -> None:
    d = deployment(size, surge, 0)
    new_set, old_set = rs("foo-v2", new), rs("foo-v2", old)
    assert fd.reconcile_new(d, [new_set, old_set], new_set) == expected


@pytest.mark.parametrize(("size", "unavailable", "old", "new", "ready_old", "ready_new", "scales", "expected"), [
    (10, 0, 10, 0, 10, 0, True, 9),
    (10, 2, 10, 0, 10, 0, True, 8),
    (10, 2, 10, 0, 8, 0, True, 8),  # unhealthy old replicas are cleaned up
    (10, 2, 10, 0, 9, 0, True, 8),  # one unhealthy cleaned up and one ready scaled down
    (10, 2, 8, 2, 8, 0, False, None),  # the new one's unavailable pods block further scale-down
])
def test_reconcile_old_replica_sets_as_upstreams_table(size: int, unavailable: int, old: int, new: int,
                                                       ready_old: int, ready_new: int, scales: bool,
                                                       expected: int | None) -> None:
    # `expected` is the table's expectedOldReplicas, which upstream's test leaves unchecked; checked here.
    d = deployment(size, 0, unavailable)
    old_set, new_set = rs("foo-old", old, OLD, available=ready_old), rs("foo-new", new, available=ready_new)
    sizes = fd.reconcile_old(d, [old_set, new_set], [old_set], new_set)
    assert bool(sizes) is scales
    assert sizes.get("foo-old") == expected


@pytest.mark.parametrize(("size", "unavailable", "ready", "old", "expected"), [
    (10, 0, 10, 10, 9), (10, 2, 10, 10, 8), (10, 2, 8, 10, None), (10, 2, 10, 0, None), (10, 2, 1, 10, None),
])
def test_scale_down_old_replica_sets_as_upstreams_table(size: int, unavailable: int, ready: int, old: int,
                                                        expected: int | None) -> None:
    # TestDeploymentController_scaleDownOldReplicaSetsForRollingUpdate: allRSs = oldRSs = [foo-v2]. Its
    # unavailable pods are cleaned up first by reconcileOldReplicaSets; this table calls the second step alone,
    # so the rows with unavailable pods are checked with none to clean (all of `old` available but `ready`).
    d = deployment(size, 0, unavailable)
    one = rs("foo-v2", old, OLD, available=ready)
    minimum = size - fd.max_unavailable(d)
    budget = ready - minimum
    got = None if budget <= 0 or old == 0 else old - min(old, budget)
    assert got == expected
    if ready == old:  # nothing unhealthy: reconcile_old does exactly this step
        sizes = fd.reconcile_old(d, [one], [one], rs("foo-new", 0))
        assert sizes.get("foo-v2") == expected


# ----------------------------------------------------------------------------------------------------------------
# Status


def test_status_counts_the_replica_sets_and_conditions_read_as_upstreams() -> None:
    d = deployment(4, 1, 1)
    new = rs("foo-new", 2, available=1)
    new["status"].update(replicas=2, readyReplicas=1)
    old = rs("foo-old", 3, OLD, available=3)
    old["status"].update(replicas=3, readyReplicas=3)
    status = fd.deployment_status(d, [old, new], new, "2026-12-04T00:00:00Z", rollout=True)
    assert {k: v for k, v in status.items() if k != "conditions"} == {
        "observedGeneration": 1, "replicas": 5, "updatedReplicas": 2, "readyReplicas": 4, "availableReplicas": 4,
        "unavailableReplicas": 1}
    assert [(c["type"], c["status"], c["reason"], c["message"]) for c in status["conditions"]] == [
        ("Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability."),
        ("Progressing", "True", "ReplicaSetUpdated", 'ReplicaSet "foo-new" is progressing.')]


# ----------------------------------------------------------------------------------------------------------------
# Against the real kubectl


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    server = FakeKube(pods=True, ready_delay=0.3).start()
    try:
        server.ensure_namespace(NS)
        yield server
    finally:
        server.stop()


def worker(replicas: int) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "worker", "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "worker"}},
                     "template": {"metadata": {"labels": {"app": "worker"}},
                                  "spec": {"containers": [{"name": "worker", "image": "worker:1"}]}}}}


def wait_for(what: str, check: Any, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return found


@needs_kubectl
def test_kubectl_rolls_out_a_new_image_through_a_new_replica_set(fake: FakeKube, tmp_path: Path) -> None:
    """`kubectl set image` starts a rollout: a second ReplicaSet grows within maxSurge while the first shrinks
    within maxUnavailable, and `kubectl rollout status` (which reads only the Deployment's status) follows it to
    "successfully rolled out"; `kubectl get rs` shows the old one at 0, and the events say each step."""
    fake.create(worker(4))
    wait_for("four ready pods", lambda: fake.get("apps/v1", "Deployment", "worker", NS)["status"].get(
        "availableReplicas") == 4)
    first = {rs["metadata"]["name"] for rs in fake.list_objects("apps/v1", "ReplicaSet", NS)}
    fake.set_ready_delay(1.0)  # each step of the rollout waits a second for its new pod: kubectl sees it under way
    kubectl(fake, tmp_path, "set", "image", "deployment/worker", "worker=worker:2")
    waiting = kubectl(fake, tmp_path, "rollout", "status", "deployment/worker", "--watch=false").stdout
    assert waiting.startswith('Waiting for deployment "worker" rollout to finish: '), waiting
    done = kubectl(fake, tmp_path, "rollout", "status", "deployment/worker", "--timeout=30s").stdout
    assert done.rstrip().endswith('deployment "worker" successfully rolled out'), done

    sets = {rs["metadata"]["name"]: rs for rs in fake.list_objects("apps/v1", "ReplicaSet", NS)}
    (old,) = first
    (new,) = set(sets) - first
    assert (fd.replicas(sets[old]), fd.replicas(sets[new])) == (0, 4)
    assert sets[new]["metadata"]["annotations"][fd.REVISION] == "2"
    assert sets[new]["spec"]["template"]["spec"]["containers"][0]["image"] == "worker:2"
    pods = fake.workload_pods("worker", NS)
    assert len(pods) == 4 and all(p["metadata"]["ownerReferences"][0]["name"] == new for p in pods)
    deployment_now = fake.get("apps/v1", "Deployment", "worker", NS)
    assert deployment_now["metadata"]["annotations"][fd.REVISION] == "2"
    conditions = {c["type"]: (c["status"], c["reason"]) for c in deployment_now["status"]["conditions"]}
    assert conditions == {"Available": ("True", "MinimumReplicasAvailable"),
                          "Progressing": ("True", "NewReplicaSetAvailable")}
    shown = kubectl(fake, tmp_path, "get", "rs", "-n", NS).stdout.splitlines()
    assert shown[0].split() == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]
    assert sorted(line.split()[:4] for line in shown[1:]) == sorted([[old, "0", "0", "0"], [new, "4", "4", "4"]])
    scaled = [e["message"] for e in fake.events(NS) if e.get("reason") == "ScalingReplicaSet"]
    assert scaled[0] == f"Scaled up replica set {old} to 4"
    assert f"Scaled up replica set {new} to 1" in scaled
    assert f"Scaled down replica set {old} to 0 from 1" in scaled
    history = kubectl(fake, tmp_path, "rollout", "history", "deployment/worker").stdout
    assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["1", "2"], history


@needs_kubectl
def test_kubectl_rollout_undo_makes_the_first_replica_set_new_again_at_the_next_revision(
    fake: FakeKube, tmp_path: Path,
) -> None:
    """`kubectl rollout undo` writes the previous ReplicaSet's template back into the Deployment; that ReplicaSet
    is then the new one again (FindNewReplicaSet), scaled up, and given the next revision with its old one in
    `revision-history` (SetNewReplicaSetAnnotations), so `kubectl rollout history` lists 2 and 3, not 1 and 2."""
    fake.create(worker(2))
    (first,) = [rs["metadata"]["name"] for rs in fake.list_objects("apps/v1", "ReplicaSet", NS)]
    kubectl(fake, tmp_path, "set", "image", "deployment/worker", "worker=worker:2")
    kubectl(fake, tmp_path, "rollout", "status", "deployment/worker", "--timeout=30s")
    kubectl(fake, tmp_path, "rollout", "undo", "deployment/worker")
    done = kubectl(fake, tmp_path, "rollout", "status", "deployment/worker", "--timeout=30s").stdout
    assert done.rstrip().endswith('deployment "worker" successfully rolled out'), done
    sets = {rs["metadata"]["name"]: rs for rs in fake.list_objects("apps/v1", "ReplicaSet", NS)}
    assert len(sets) == 2 and fd.replicas(sets[first]) == 2
    assert {k: v for k, v in sets[first]["metadata"]["annotations"].items() if "revision" in k} == {
        fd.REVISION: "3", "deployment.kubernetes.io/revision-history": "1"}
    assert fake.get("apps/v1", "Deployment", "worker", NS)["metadata"]["annotations"][fd.REVISION] == "3"
    assert {p["spec"]["containers"][0]["image"] for p in fake.workload_pods("worker", NS)} == {"worker:1"}
    history = kubectl(fake, tmp_path, "rollout", "history", "deployment/worker").stdout
    assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["2", "3"], history


@needs_kubectl
def test_a_scale_during_a_paused_rollout_is_split_between_the_replica_sets(fake: FakeKube, tmp_path: Path) -> None:
    """Paused mid-rollout (`kubectl rollout pause`), a scale of the Deployment is shared between its two
    ReplicaSets in proportion (sync.go `scale`), not given to the new one or taken from the old one alone."""
    fake.set_ready_delay(2.0)
    fake.create(worker(4))
    wait_for("four ready pods", lambda: fake.get("apps/v1", "Deployment", "worker", NS)["status"].get(
        "availableReplicas") == 4, timeout=10)
    kubectl(fake, tmp_path, "set", "image", "deployment/worker", "worker=worker:2")

    def sizes() -> dict[str, int]:
        return {rs["metadata"]["name"]: fd.replicas(rs) for rs in fake.list_objects("apps/v1", "ReplicaSet", NS)}

    # Surge 1 (25 % of 4, up), unavailable 1 (down): the new one gets 1 and the old one gives 1 (4 available, 3
    # needed); then the new one grows to 2, as the total of 4 is under 4 + 1, its pods not yet ready.
    during = wait_for("the rollout's first steps", lambda: sizes() if sorted(sizes().values()) == [2, 3] else None)
    kubectl(fake, tmp_path, "rollout", "pause", "deployment/worker")
    kubectl(fake, tmp_path, "scale", "deployment/worker", "--replicas=8")
    old = next(name for name, size in during.items() if size == 3)
    new = next(name for name, size in during.items() if size == 2)
    # Allowed 8 + 2 surge = 10, 5 to add, each sized for 4 + 1: old 3 x 10 / 5 = 6 (+3), new 2 x 10 / 5 = 4 (+2).
    assert (sizes()[old], sizes()[new]) == (6, 4)
    assert fake.get("apps/v1", "Deployment", "worker", NS)["spec"]["paused"] is True


@needs_kubectl
def test_recreate_empties_the_old_replica_set_before_the_new_one_starts(fake: FakeKube, tmp_path: Path) -> None:
    """Strategy Recreate (recreate.go): the old ReplicaSet goes to 0 and its pods go before the new one is even
    made; so no pod of the old template runs beside one of the new."""
    body = worker(3)
    body["spec"]["strategy"] = {"type": "Recreate"}
    fake.create(body)
    wait_for("three ready pods", lambda: fake.get("apps/v1", "Deployment", "worker", NS)["status"].get(
        "availableReplicas") == 3)
    images: list[set[str]] = []
    kubectl(fake, tmp_path, "set", "image", "deployment/worker", "worker=worker:2")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        running = {p["spec"]["containers"][0]["image"] for p in fake.workload_pods("worker", NS)}
        images.append(running)
        if running == {"worker:2"} and len(fake.workload_pods("worker", NS)) == 3:
            break
        time.sleep(0.02)
    assert images[-1] == {"worker:2"}
    assert all(len(seen) <= 1 for seen in images), images  # never both templates at once
    done = kubectl(fake, tmp_path, "rollout", "status", "deployment/worker", "--timeout=30s").stdout
    assert done.rstrip().endswith('deployment "worker" successfully rolled out'), done


@needs_kubectl
def test_a_replica_set_deleted_by_hand_is_made_again_by_its_deployment(fake: FakeKube, tmp_path: Path) -> None:
    fake.create(worker(2))
    (first,) = fake.list_objects("apps/v1", "ReplicaSet", NS)
    kubectl(fake, tmp_path, "delete", "rs", first["metadata"]["name"])  # its pods go with it (background cascade)
    again = wait_for("the ReplicaSet made again", lambda: fake.list_objects("apps/v1", "ReplicaSet", NS))
    assert again[0]["metadata"]["name"] == first["metadata"]["name"]  # the same template, the same hash
    assert again[0]["metadata"]["uid"] != first["metadata"]["uid"]
    wait_for("its two pods, and no other", lambda: len(fake.list_objects("v1", "Pod", NS)) == 2 == len(
        fake.workload_pods("worker", NS)))


@needs_kubectl
def test_the_revision_goes_through_status_so_a_deployments_generation_counts_only_its_own_changes(
    fake: FakeKube, tmp_path: Path
) -> None:
    """The Deployment controller writes the revision annotation with UpdateStatus (sync.go `getNewReplicaSet`,
    after SetDeploymentRevision), and a status write bumps no generation: a fresh Deployment is at generation 1
    with revision "1", and `kubectl set image` makes it 2 with revision "2". Before, the fake wrote the revision
    through the main resource, whose registry bumps the generation on an annotation change: 2, then 4."""
    manifest = tmp_path / "web.json"
    manifest.write_text(json.dumps({**worker(2), "metadata": {"name": "web", "namespace": NS}}))
    kubectl(fake, tmp_path, "create", "-f", str(manifest))
    seen = wait_for("the first rollout", lambda: (d := fake.get("apps/v1", "Deployment", "web", NS))["status"].get(
        "availableReplicas") == 2 and d)
    assert (seen["metadata"]["generation"], seen["status"]["observedGeneration"]) == (1, 1)
    assert seen["metadata"]["annotations"][fd.REVISION] == "1"
    kubectl(fake, tmp_path, "set", "image", "deployment/web", "worker=worker:2")
    kubectl(fake, tmp_path, "rollout", "status", "deployment/web", "--timeout=30s")
    shown = json.loads(kubectl(fake, tmp_path, "get", "deployment", "web", "-o", "json").stdout)
    assert (shown["metadata"]["generation"], shown["status"]["observedGeneration"]) == (2, 2)
    assert shown["metadata"]["annotations"][fd.REVISION] == "2"


# TestStatusUpdates (pkg/registry/apps/deployment/strategy_test.go): a Deployment's status write keeps the stored
# labels and takes the annotations sent. A ReplicaSet's and a StatefulSet's status strategies keep only the spec
# (replicaset and statefulset strategy.go `PrepareForUpdate`), so their labels change too.
@pytest.mark.parametrize(("resource", "kind", "label_kept"), [
    ("deployments", "Deployment", False), ("replicasets", "ReplicaSet", True), ("statefulsets", "StatefulSet", True),
])
def test_a_workloads_status_write_takes_what_its_registry_lets_through(
    fake: FakeKube, resource: str, kind: str, label_kept: bool
) -> None:
    body = {"apiVersion": "apps/v1", "kind": kind,
            "metadata": {"name": "w", "namespace": NS, "labels": {"test": "label"},
                         "annotations": {"test": "annotation"}},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "w"}},
                     "template": {"metadata": {"labels": {"app": "w"}},
                                  "spec": {"containers": [{"name": "w", "image": "w:1"}]}}}}
    created = fake.create(body)
    url = f"{fake.url}/apis/apps/v1/namespaces/{NS}/{resource}/w/status"
    for _ in range(20):  # the fake's controllers write the status too: a conflict is read again and retried
        now = fake.get("apps/v1", kind, "w", NS)
        sent = {**now, "metadata": {**now["metadata"], "labels": {"test": "label", "sneaky": "label"},
                                    "annotations": {"test": "annotation", "sneaky": "annotation"}},
                "spec": {**now["spec"], "replicas": 7}, "status": {"observedGeneration": 1}}
        answer = httpx.put(url, json=sent, headers={"Authorization": f"Bearer {TOKEN}"},
                           verify=fake.client_ssl_context(), timeout=10)
        if answer.status_code != 409:
            break
        time.sleep(0.05)
    assert answer.status_code == 200, answer.text
    stored = fake.get("apps/v1", kind, "w", NS)
    # (The Deployment controller adds its revision to what was sent, through /status too.)
    assert {"test": "annotation", "sneaky": "annotation"}.items() <= stored["metadata"]["annotations"].items()
    assert stored["metadata"]["labels"] == ({"test": "label", "sneaky": "label"} if label_kept else
                                            {"test": "label"})
    assert stored["spec"]["replicas"] == 0  # never the spec
    assert stored["metadata"]["generation"] == created["metadata"]["generation"]


@needs_kubectl
def test_a_protobuf_body_is_refused_with_415_rather_than_a_dropped_connection(fake: FakeKube, tmp_path: Path) -> None:
    """`kubectl create deployment` sends a built-in kind as protobuf, which the fake cannot decode. Before, the
    handler raised (UnicodeDecodeError) and kubectl saw EOF; now it is the real server's 415 for a media type it has
    no serializer for, and nothing is created."""
    result = kubectl(fake, tmp_path, "create", "deployment", "web", "--image=web:1", check=False)
    assert result.returncode == 1
    assert ("the body of the request was in an unknown format - accepted media types include: application/json"
            in result.stderr), result.stderr
    assert "EOF" not in result.stderr
    assert fake.list_objects("apps/v1", "Deployment", NS) == []
