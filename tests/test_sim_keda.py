"""The KEDA + HPA baseline, number for number."""

from __future__ import annotations

from typing import Any, cast

import pytest

from controller.simulator.keda import KedaAutoscaler, ScaledObject, parse_scaled_object
from controller.simulator.run import Contender, simulate
from controller.simulator.world import World
from controller.spec import SpecError
from tests.sim_helpers import scenario


def scaled_object(spec: dict[str, Any] | None = None, metadata: dict[str, Any] | None = None) -> ScaledObject:
    trigger = {"type": "azure-queue", "metadata": {"queueName": "orders", **(metadata or {})}}
    return parse_scaled_object({
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "orders"},
        "spec": {"scaleTargetRef": {"name": "orders-worker"}, "triggers": [trigger], **(spec or {})},
    })


class FakeWorld:
    """Just the counts and the replica count a KEDA emulation reads and writes."""

    def __init__(self, count: int, desired: int) -> None:
        self.visible_count = count
        self.approximate_count = count
        self.desired = desired
        self.ready = desired  # pods are ready at once here
        self.changes: list[tuple[int, int]] = []

    def set_count(self, count: int) -> None:
        self.visible_count = self.approximate_count = count

    def set_desired(self, replicas: int, t: int) -> None:
        self.desired = self.ready = replicas
        self.changes.append((t, replicas))


async def drive(keda: KedaAutoscaler, world: FakeWorld, until: int, counts: dict[int, int]) -> None:
    for t in range(until):
        if t in counts:
            world.set_count(counts[t])
        if t >= keda.next_at:
            await keda.act(t)


def burst_of_1000_from_one_replica(spec: dict[str, Any]) -> list[tuple[int, int]]:
    sc = scenario(
        duration=200,
        queue={"visibilityTimeout": 7200},
        workers={"startupDelay": 36000, "serviceTime": 3600, "initialReplicas": 1, "maxReplicas": 300},
        arrivals=[{"type": "burst", "at": 1, "messages": 1000, "over": 1}],
    )
    so = scaled_object({"minReplicaCount": 1, "maxReplicaCount": 300, **spec}, {"queueLength": "5"})
    result = simulate(sc, [Contender("keda", lambda w: KedaAutoscaler("keda", so, w))])[0]
    return [(t, to) for t, _, to in result.scale_actions]


def test_a_plain_scaled_object_doubles_per_sync_on_the_hpa_legacy_path() -> None:
    # KEDA leaves the HPA's behavior nil (controllers/keda/hpa.go), so horizontal.go normalizeDesiredReplicas
    # applies: at most max(2 x current, 4) per sync (calculateScaleUpLimit).
    assert burst_of_1000_from_one_replica({}) == [
        (15, 4), (30, 8), (45, 16), (60, 32), (75, 64), (90, 128), (105, 200),
    ]


def test_a_behavior_block_ramps_with_the_behavior_defaults() -> None:
    # With any behavior, the defaults (autoscaling/v2 defaults.go) allow max(+4 pods, +100 %) per 15 s.
    behavior = {"advanced": {"horizontalPodAutoscalerConfig": {"behavior": {"scaleDown": {
        "stabilizationWindowSeconds": 300}}}}}
    assert burst_of_1000_from_one_replica(behavior) == [
        (15, 5), (30, 10), (45, 20), (60, 40), (75, 80), (90, 160), (105, 200),
    ]


async def test_scale_down_waits_for_the_300_second_stabilization_window() -> None:
    world = FakeWorld(count=100, desired=20)
    keda = KedaAutoscaler("keda", scaled_object({"minReplicaCount": 1}, {"queueLength": "5"}), cast(World, world))
    await drive(keda, world, 600, {100: 25})
    # The last sync that recommended 20 ran at t=90; it leaves the 300 s window at t=390.
    assert world.changes == [(390, 5)]


async def test_custom_behavior_limits_scale_down_per_period() -> None:
    behavior = {"scaleDown": {"stabilizationWindowSeconds": 0,
                              "policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}]}}
    so = scaled_object({"minReplicaCount": 1, "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior}}},
                       {"queueLength": "5"})
    world = FakeWorld(count=100, desired=20)
    keda = KedaAutoscaler("keda", so, cast(World, world))
    await drive(keda, world, 200, {1: 5})
    assert world.changes == [(15, 18), (75, 16), (135, 14), (195, 12)]


async def test_activation_wakes_from_zero_only_above_activation_queue_length() -> None:
    so = scaled_object({"pollingInterval": 30}, {"queueLength": "100", "activationQueueLength": "10"})
    world = FakeWorld(count=10, desired=0)
    keda = KedaAutoscaler("keda", so, cast(World, world))
    await drive(keda, world, 100, {45: 11})
    # 10 is not above activationQueueLength 10 (polls at 0 and 30); 11 is, at the next poll.
    assert world.changes == [(60, 1)]


async def test_cooldown_goes_straight_to_zero_after_the_last_active_poll() -> None:
    so = scaled_object({"pollingInterval": 30, "cooldownPeriod": 300}, {"queueLength": "2"})
    world = FakeWorld(count=11, desired=0)
    keda = KedaAutoscaler("keda", so, cast(World, world))
    await drive(keda, world, 600, {100: 0})
    # Active at the polls up to t=90. KEDA stores lastActiveTime to the whole second and compares it a few
    # milliseconds after its tick, so lastActiveTime + 300 = 390 has passed at the t=390 poll.
    assert world.changes[0] == (0, 1)
    assert world.changes[-1] == (390, 0)
    assert all(replicas > 0 for t, replicas in world.changes if t < 390)


def test_scaled_object_errors_name_the_field() -> None:
    with pytest.raises(SpecError) as caught:
        scaled_object({"maxReplicaCount": "many", "triggers": [
            {"type": "azure-queue", "metadata": {"queueName": "q", "queueLength": "five", "queueLenght": "5"}},
            {"type": "kafka", "metadata": {}},
        ]})
    paths = {e.path for e in caught.value.errors}
    assert {"spec.maxReplicaCount", "spec.triggers[0].metadata.queueLength",
            "spec.triggers[0].metadata.queueLenght", "spec.triggers[1].type"} <= paths


def test_the_shipped_example_parses() -> None:
    from controller.simulator.keda import load_scaled_objects

    [so] = load_scaled_objects("examples/keda/orders-scaledobject.yaml")
    assert so.triggers[0].queue_length == 20
    assert so.behavior is not None
    assert so.behavior.scale_down.stabilization_window == 120
    assert so.behavior.scale_up.policies[0].value == 4  # the default scale-up behavior, since only scaleDown is set
