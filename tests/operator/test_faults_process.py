"""Fault injection on the operator process itself: SIGKILL in the middle of a burst, and a leader frozen (SIGSTOP)
under load while a follower takes over. Queues come from a scripted Get Queue Metadata server on loopback.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

from kubernetes import client as kube_client

from tests.fakekube.server import FakeKube
from tests.faults import FakeQueueService, start_rule, watch_replicas
from tests.operator_harness import NS, Operator, replicas, status, wait_for, writes_outside_the_lease


def _changes(seen: list[int]) -> list[int]:
    """The sequence of distinct values, in order (1,1,8,8,0 -> 1,8,0)."""
    out: list[int] = []
    for value in seen:
        if not out or out[-1] != value:
            out.append(value)
    return out


def test_sigkill_mid_burst_then_restart_keeps_the_cooldown_and_does_not_flap(
    kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator], queues: FakeQueueService,
) -> None:
    start_rule(api, queues, "burst", count=0, replicas_now=0,
               scaleDown={"cooldown": "6s", "stabilizationWindow": 0, "delay": 0}, scaleToZeroDelay=0)
    first = operators()
    wait_for("Ready", lambda: status(kube, "burst").get("memory") is not None)
    seen, stop = watch_replicas(kube, "burst")
    queues.set(counts={"burst": 80})
    wait_for("8 replicas", lambda: replicas(kube, "burst") == 8)
    scaled_at = time.monotonic()
    wait_for("the scale in the stored memory",
             lambda: (status(kube, "burst").get("memory") or {}).get("lastScaleUp") is not None)
    assert first.stop(signal.SIGKILL) != 0
    queues.set(counts={"burst": 0})  # the burst is drained while no operator runs
    operators()
    wait_for("the scale-down once the cooldown is over", lambda: replicas(kube, "burst") == 0, timeout=20)
    down_at = time.monotonic()
    stop()
    seen.append(replicas(kube, "burst"))  # the sampler may have stopped before it saw the last value
    assert down_at - scaled_at >= 6.0 - 0.5, "scaled down inside the cooldown after a restart"
    assert _changes(seen) == [0, 8, 0], f"replicas flapped: {_changes(seen)}"


def test_a_frozen_leader_is_replaced_within_the_lease_and_never_writes_after_the_new_leader(
    kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator], queues: FakeQueueService,
) -> None:
    names = [f"load{i}" for i in range(12)]
    for name in names:
        start_rule(api, queues, name, count=20, replicas_now=0)
    lease = ("--leader-elect", "--lease-namespace", NS, "--lease-duration", "3s", "--renew-deadline", "2s",
             "--retry-period", "0.5s")
    a = operators(*lease, "--identity", "op-a")
    b = operators(*lease, "--identity", "op-b")
    wait_for("every rule scaled to 2", lambda: all(replicas(kube, n) == 2 for n in names), timeout=20)
    holder = kube.get("coordination.k8s.io/v1", "Lease", "queuescale-operator", NS)["spec"]["holderIdentity"]
    leader, follower = (a, b) if holder == "op-a" else (b, a)
    assert leader.process is not None

    leader.process.send_signal(signal.SIGSTOP)  # a long GC pause, a frozen node: it cannot renew
    frozen = time.monotonic()
    try:
        queues.set(counts=dict.fromkeys(names, 50))
        wait_for("the follower to take over and scale", lambda: all(replicas(kube, n) == 5 for n in names),
                 timeout=20)
        took_over = time.monotonic() - frozen
        new_holder = kube.get("coordination.k8s.io/v1", "Lease", "queuescale-operator", NS)["spec"]["holderIdentity"]
        assert new_holder != holder
        # The counts change just before the wake-up: the old leader's overdue ticks then find something to scale
        # at once, before the new leader's next poll does, and must not write it.
        queues.set(counts=dict.fromkeys(names, 30))
    finally:
        leader.process.send_signal(signal.SIGCONT)
    wait_for("every rule at 3 after the wake-up", lambda: all(replicas(kube, n) == 3 for n in names), timeout=20)
    time.sleep(2.0)
    # Every write came from the replica the server's lease named at that moment: woken, the old leader wrote
    # nothing while the new one held the lease (if the new one's renewals stalled under load and the old one
    # took the lease back, its writes after that are the leader's, and correct).
    outside, handovers = writes_outside_the_lease(kube)
    assert not outside, (f"{len(outside)} writes by a replica that did not hold the lease, first {outside[:5]}; "
                         f"the lease changed hands at {handovers}")
    new_agent = f"queuescale/0.1.0 ({new_holder})"
    assert any(r.user_agent == new_agent and "/scale" in r.path and r.method in ("PUT", "PATCH")
               for r in list(kube.requests)), "the new leader never scaled"
    assert took_over < 3.0 + 2.0 + 2.0  # lease duration, a few retry periods, a poll
    assert "queuescale_leader 1.0" in follower.metrics()
    wait_for("the old leader to report it follows", lambda: "queuescale_leader 0.0" in leader.metrics(), timeout=10)
