"""Reading the pods' in-flight counts (controller/kube/inflight.py) from real HTTP servers on 127.0.0.1: what counts
as an answer, which pods are read, and that a failure names the pod and port and never repeats what it answered."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from controller.kube.inflight import Marking, PodCount, controller_of, parse_count, port_of, read_counts, ready
from controller.model.rule import InFlightEndpoint
from tests.loopback import LoopbackServer, Recorded, Reply, always

ENDPOINT = InFlightEndpoint(port="in-flight")


def pod(name: str, port: int | None = None, *, phase: str = "Running", is_ready: bool = True,
        ip: str = "127.0.0.1", deleting: bool = False) -> dict[str, Any]:
    ports = [] if port is None else [{"name": "in-flight", "containerPort": port}]
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-03T10:00:00Z"
    return {"metadata": meta,
            "spec": {"containers": [{"name": "sidecar", "ports": [{"name": "http", "containerPort": 80}]},
                                    {"name": "worker", "ports": ports}]},
            "status": {"phase": phase, "podIP": ip,
                       "conditions": [{"type": "Ready", "status": "True" if is_ready else "False"}]}}


def port(server: LoopbackServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


@pytest.mark.parametrize(("answer", "count"), [
    (b"3", 3), (b"0\n", 0), (b"  12 \r\n", 12), (b"-1", None), (b"3.5", None), (b"two", None), (b"", None),
    (b"1 2", None), (b"99999999999", None), (b"4294967296", 2**31 - 1),
])
def test_a_count_is_digits_and_nothing_else(answer: bytes, count: int | None) -> None:
    assert parse_count(answer) == count


def test_only_running_ready_pods_with_an_ip_are_ranked_by_their_count() -> None:
    assert ready(pod("a"))
    assert not ready(pod("b", phase="Pending"))
    assert not ready(pod("c", is_ready=False))
    assert not ready(pod("d", ip=""))
    assert not ready(pod("e", deleting=True))
    assert port_of(pod("a", 9102), "in-flight") == 9102
    assert port_of(pod("a", 9102), "http") == 80
    assert port_of(pod("a"), "in-flight") is None


def test_every_pod_is_asked_at_its_own_port_and_path() -> None:
    counts = {"/in-flight": b"4\n"}

    def script(request: Recorded) -> Reply:
        return Reply(body=counts.get(request.route, b""), status=200 if request.route in counts else 404)

    with LoopbackServer(script) as busy, LoopbackServer(always(Reply(body=b"0"))) as idle:
        answers = asyncio.run(read_counts([pod("busy", port(busy)), pod("idle", port(idle))], ENDPOINT))
        assert answers == [4, 0]
        assert [r.route for r in busy.requests] == ["/in-flight"]
        assert [r.method for r in idle.requests] == ["GET"]
        other = asyncio.run(read_counts([pod("busy", port(busy))], InFlightEndpoint("in-flight", "/work")))
        assert other == ["pod busy answered HTTP 404 on port 'in-flight'"]


def test_a_failure_names_the_pod_and_port_and_never_repeats_the_answer() -> None:
    secret = b"token=hunter2"
    with LoopbackServer(always(Reply(body=secret))) as leaky, \
            LoopbackServer(always(Reply(status=500, body=b"boom"))) as failing:
        answers = asyncio.run(read_counts([pod("leaky", port(leaky)), pod("failing", port(failing)),
                                           pod("portless")], ENDPOINT))
    assert answers == ["pod leaky answered something that is not a count on port 'in-flight'/in-flight",
                       "pod failing answered HTTP 500 on port 'in-flight'",
                       "pod portless has no container port named 'in-flight'"]
    assert not any("hunter2" in str(a) for a in answers)


def test_a_pod_that_does_not_answer_in_time_is_a_failure_and_the_others_are_not_held_up() -> None:
    def slow(_request: Recorded) -> Reply:
        time.sleep(1.5)
        return Reply(body=b"1")

    with LoopbackServer(slow) as stuck, LoopbackServer(always(Reply(body=b"2"))) as quick:
        started = time.monotonic()
        answers = asyncio.run(read_counts([pod("stuck", port(stuck)), pod("quick", port(quick))], ENDPOINT,
                                          timeout=0.3))
        took = time.monotonic() - started
    assert answers == ["pod stuck did not answer within 0.3s on port 'in-flight'", 2]
    assert took < 1.2, took  # the timeout, not the slow answer, ended the wait


def test_a_pod_nobody_listens_on_is_a_failure() -> None:
    with LoopbackServer(always(Reply(body=b"0"))) as gone:
        number = port(gone)
    answers = asyncio.run(read_counts([pod("gone", number)], ENDPOINT))
    assert answers == ["pod gone could not be reached on port 'in-flight' (ConnectError)"]


def test_the_event_says_what_the_least_busy_pods_hold() -> None:
    marking = Marking(counts=(PodCount("a", 4, None), PodCount("b", 0, None), PodCount("c", 2, "2"),
                              PodCount("d", 1, None)), written=3)
    assert marking.words(4, 2) == ("the 2 least busy of 4 ready pods go, holding 1 of the 7 messages in flight "
                                   "(counts written to controller.kubernetes.io/pod-deletion-cost of 3)")
    # Six replicas asked, four ready: the two not ready go first, then one of the ready ones.
    assert marking.words(6, 3).startswith("the 1 least busy of 4 ready pods go, holding 0 of the 7")
    assert Marking(problem="pod a has no container port named 'x'").words(4, 2) == (
        "pods removed as the ReplicaSet chooses: pod a has no container port named 'x'")


def test_pods_of_several_replicasets_are_not_called_the_least_busy_of_all() -> None:
    # A rollout: the Deployment controller splits the scale-in between its ReplicaSets (pkg/controller/deployment
    # sync.go, `scale`), each removing its own least busy; one controller's pods keep the plain words.
    old, new = "ReplicaSet renders-6d4cf56db6", "ReplicaSet renders-7b8d9c5f4"
    marking = Marking(counts=(PodCount("a", 4, None, new), PodCount("b", 0, None, old), PodCount("c", 2, None, new),
                              PodCount("d", 1, None, old)), written=4)
    assert marking.words(4, 2) == (
        f"the ready pods belong to 2 controllers (2 of {old}, 2 of {new}), as in a rollout: the Deployment "
        "controller decides how many each loses and each removes its own least busy, so those that go may hold "
        "more than the 1 of the 7 messages in flight the 2 least busy of 4 ready pods hold (counts written to "
        "controller.kubernetes.io/pod-deletion-cost of 4)")
    same = Marking(counts=tuple(PodCount(c.name, c.in_flight, None, new) for c in marking.counts), written=4)
    assert same.words(4, 2).startswith("the 2 least busy of 4 ready pods go, holding 1 of the 7")
    # What the account of stops is told (ScaleState.removal_blind): only one controller's pods, costs written, go
    # as the least busy of all.
    assert (same.least_busy_of_all, marking.least_busy_of_all) == (True, False)
    assert not Marking(problem="pod a answered HTTP 503 on port 'x'").least_busy_of_all
    assert controller_of({"metadata": {"ownerReferences": [
        {"kind": "Deployment", "name": "x", "controller": False},
        {"kind": "ReplicaSet", "name": "renders-7b8d9c5f4", "controller": True}]}}) == new
    assert controller_of({"metadata": {"name": "bare"}}) is None
