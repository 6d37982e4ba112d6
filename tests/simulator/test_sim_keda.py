"""The KEDA + HPA baseline, number for number."""

from __future__ import annotations

from typing import Any, cast

import pytest

from controller.model.fields import SpecError
from controller.simulator.keda import EmulatedScaledObject, KedaAutoscaler, parse_scaled_object
from controller.simulator.run import Contender, simulate
from controller.simulator.world import World
from tests.sim_helpers import FakeWorld, scenario


def scaled_object(spec: dict[str, Any] | None = None, metadata: dict[str, Any] | None = None) -> EmulatedScaledObject:
    trigger = {"type": "azure-queue", "metadata": {"queueName": "orders", **(metadata or {})}}
    return parse_scaled_object({
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "orders"},
        "spec": {"scaleTargetRef": {"name": "orders-worker"}, "triggers": [trigger], **(spec or {})},
    })


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


# ------------------------------------------------------------------------------------------------------------------
# One test per way the emulation used to differ from upstream (issue 17, section 1)


def keda_with(world: FakeWorld, spec: dict[str, Any] | None = None, metadata: dict[str, Any] | None = None,
              trigger: dict[str, Any] | None = None, annotations: dict[str, str] | None = None) -> KedaAutoscaler:
    so = parse_scaled_object({
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "orders", **({"annotations": annotations} if annotations else {})},
        "spec": {"scaleTargetRef": {"name": "orders-worker"}, **(spec or {}), "triggers": [{
            "type": "azure-queue", **(trigger or {}),
            "metadata": {"queueName": "orders", "queueLength": "5", **(metadata or {})}}]},
    })
    return KedaAutoscaler("keda", so, cast(World, world))


async def test_after_a_burst_drains_a_plain_scaled_object_keeps_climbing_to_the_5_minute_peak() -> None:
    # horizontal.go stabilizeRecommendation: the legacy path takes the max of 5 minutes of recommendations in
    # both directions, so the doubling goes on after the queue is empty.
    world = FakeWorld(count=1000, desired=1)
    keda = keda_with(world, {"minReplicaCount": 1, "maxReplicaCount": 300})
    await drive(keda, world, 120, {20: 0})
    assert world.changes == [(0, 4), (15, 8), (30, 16), (45, 32), (60, 64), (75, 128), (90, 200)]


async def test_a_new_hpa_remembers_its_starting_count_for_the_stabilization_window() -> None:
    # horizontal.go recordInitialRecommendation: the first sync records the current count, so an idle target at
    # 10 replicas stays there for 5 minutes before the HPA takes it to minReplicas.
    world = FakeWorld(count=0, desired=10)
    keda = keda_with(world, {"minReplicaCount": 1})
    await drive(keda, world, 400, {})
    assert world.changes == [(300, 1)]


async def test_initial_cooldown_applies_only_while_keda_never_saw_the_trigger_active() -> None:
    # scale_scaledobjects.go scaleToZeroOrIdle: initialCooldownPeriod when lastActiveTime is nil, else
    # cooldownPeriod alone.
    world = FakeWorld(count=11, desired=0)
    keda = keda_with(world, {"pollingInterval": 30, "cooldownPeriod": 60, "initialCooldownPeriod": 600})
    await drive(keda, world, 400, {100: 0})
    assert world.changes[0] == (0, 1)
    assert world.changes[-1] == (150, 0)  # last active at t=90, + 60

    never_active = FakeWorld(count=0, desired=3)
    keda = keda_with(never_active, {"pollingInterval": 30, "initialCooldownPeriod": 600})
    await drive(keda, never_active, 700, {})
    # the HPA holds its starting 3 for 5 minutes, then minReplicas; KEDA goes to 0 at initialCooldownPeriod
    assert never_active.changes == [(300, 1), (600, 0)]


async def test_a_value_target_scales_over_the_ready_pods_only() -> None:
    # replica_calculator.go GetExternalMetricReplicas: ceil(usage / target x readyPodCount).
    world = FakeWorld(count=20, desired=4)
    world.ready = 2  # two pods still starting
    keda = keda_with(world, {"minReplicaCount": 1}, trigger={"metricType": "Value"})
    keda.hpa_sync(0)
    assert world.changes == [(0, 8)]  # 20 / 5 = 4 x 2 ready pods, not x 4 replicas


async def test_below_min_the_hpa_goes_to_min_without_metrics_and_keda_lifts_an_active_idle_target() -> None:
    # horizontal.go reconcileAutoscaler: currentReplicas < minReplicas -> minReplicas, no metrics read and no
    # recommendation recorded. scale_scaledobjects.go: active with idleReplicaCount below minReplicaCount -> min.
    world = FakeWorld(count=0, desired=1)
    keda = keda_with(world, {"minReplicaCount": 3, "idleReplicaCount": 1})
    keda.hpa_sync(0)
    assert world.changes == [(0, 3)] and keda.recommendations == [(0, 1)]
    keda.keda_poll(30)  # inactive, above idle, never active: KEDA takes it back to idle (upstream's flapping)
    assert world.changes[-1] == (30, 1)

    active = FakeWorld(count=10, desired=1)
    keda = keda_with(active, {"minReplicaCount": 3, "idleReplicaCount": 1})
    keda.keda_poll(0)
    assert active.changes == [(0, 3)]


async def test_a_ratio_exactly_at_the_tolerance_edge_is_within_from_kubernetes_1_33() -> None:
    # kubernetes/kubernetes#130797 (1.33): Tolerances.isWithin compares 1.1 <= 1.0 + 0.1, where
    # math.Abs(1.0 - 1.1) = 0.10000000000000009 > 0.1 used to scale.
    for version, expected in (("1.35", []), ("1.33", []), ("1.32", [(0, 3)])):
        world = FakeWorld(count=11, desired=2)  # 11 / (5 x 2) = 1.1
        keda = keda_with(world, {"minReplicaCount": 1},
                         annotations={"simulator.queuescale.io/kubernetes-version": version})
        keda.hpa_sync(0)
        assert world.changes == expected, version


async def test_a_behavior_tolerance_counts_from_kubernetes_1_34() -> None:
    # HPAConfigurableTolerance: alpha and off by default in 1.33, beta and on from 1.34.
    behavior = {"advanced": {"horizontalPodAutoscalerConfig": {"behavior": {"scaleUp": {"tolerance": "0.05"}}}}}
    for version, expected in (("1.34", [(0, 3)]), ("1.33", [])):
        world = FakeWorld(count=11, desired=2)
        keda = keda_with(world, {"minReplicaCount": 1, **behavior},
                         annotations={"simulator.queuescale.io/kubernetes-version": version})
        keda.hpa_sync(0)
        assert world.changes == expected, version


@pytest.mark.parametrize(("metadata", "field"), [
    ({"queueLength": "2.5"}, "queueLength"),  # an int64 in KEDA's azureQueueMetadata
    ({"queueLength": "1e3"}, "queueLength"),
    ({"queueLength": 5}, "queueLength"),  # the CRD types metadata values as strings
    ({"queueLength": "0"}, "queueLength"),  # the HPA's target must be positive
    ({"queueLengthStrategy": "VisibleOnly"}, "queueLengthStrategy"),  # KEDA's enum check is case-sensitive
    ({"activationQueueLength": "1.5"}, "activationQueueLength"),
])
def test_metadata_keda_refuses_is_refused(metadata: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as caught:
        scaled_object(metadata=metadata)
    assert {e.path for e in caught.value.errors} == {f"spec.triggers[0].metadata.{field}"}


def test_metadata_keda_accepts_is_accepted() -> None:
    so = scaled_object({"minReplicaCount": 0, "idleReplicaCount": 0},
                       {"queueLength": " 7 ", "activationQueueLength": "-1", "queueLengthStrategy": ""})
    assert so.triggers[0].queue_length == 7 and so.triggers[0].activation_queue_length == -1
    assert so.triggers[0].strategy == "all" and so.idle_replicas == 0 and so.behavior is None


def test_the_kubernetes_version_annotation_is_checked() -> None:
    with pytest.raises(SpecError) as caught:
        parse_scaled_object({
            "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": {"name": "x", "annotations": {"simulator.queuescale.io/kubernetes-version": "1.12"}},
            "spec": {"scaleTargetRef": {"name": "w"},
                     "triggers": [{"type": "azure-queue", "metadata": {"queueName": "q"}}]},
        })
    assert [e.path for e in caught.value.errors] == [
        "metadata.annotations.simulator.queuescale.io/kubernetes-version"]
    assert scaled_object().kubernetes_version == (1, 35)


@pytest.mark.parametrize(("spec", "path"), [
    ({"fallback": {"failureThreshold": 3, "replicas": 2, "behavior": "scalingModifiers"}}, "spec.fallback.behavior"),
    ({"advanced": {"scalingModifiers": {"formula": "a + b", "target": "10"}}}, "spec.advanced.scalingModifiers"),
])
def test_what_keda_accepts_and_the_emulation_cannot_run_is_refused_by_path(spec: dict[str, Any], path: str) -> None:
    """The model (controller/keda/model.py) accepts both, as KEDA does; the emulation has no formula to run."""
    with pytest.raises(SpecError) as caught:
        scaled_object(spec)
    assert [(e.path, "not supported by the simulator" in e.message) for e in caught.value.errors] == [(path, True)]
