"""Upstream's own test tables, transcribed onto the KEDA + HPA emulation (controller/simulator/keda.py).

Each case names the upstream file, test function and case it comes from. Sources read:
- kubernetes/kubernetes pkg/controller/podautoscaler/horizontal_test.go and replica_calculator_test.go as on
  master after #139061 (May 2026, the table-driven replica calculator tests; read from the omerap12/kubernetes
  mirror of master, commits 060da168 and a769d588);
- kedacore/keda 8b4f083 (Aug 2026): pkg/scalers/azure_queue_scaler_test.go, pkg/scaling/executor/
  scale_scaledobjects_test.go, and pkg/scalers/scalersconfig/typed_config.go for how metadata is decoded.

Times: upstream writes `time.Now().Add(-2 * time.Minute)`; here NOW - 120. Upstream's horizontal_test.go sets
scaleUpLimitFactor = 8 in init(); the production factor is 2 and is what the emulation uses, so the one case that
depends on it (calculateScaleUpLimit(3)) is computed with 2.

Left out, and why: CPU/resource cases (groupPods, requests, hot-CPU readiness) and Pods/Object metrics, which a
KEDA azure-queue trigger never produces; TestStoreScaleEvents' slot reuse (the emulation prunes old events
instead; only the per-period sums it checks matter and are transcribed); azure-queue metadata rows about
connections and pod identity (the simulated queue has no connection).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

import pytest

from controller.keda.model import DEFAULT_DOWN, DEFAULT_UP, INT32_MAX, HpaBehavior, HpaDirection
from controller.model.fields import SpecError
from controller.model.rule import StepPolicy
from controller.simulator.keda import (
    INT64_MAX,
    KedaAutoscaler,
    Tolerances,
    calculate_scale_down_limit_with_behaviors,
    calculate_scale_up_limit,
    calculate_scale_up_limit_with_scaling_rules,
    convert_desired_replicas_with_behavior_rate,
    convert_desired_replicas_with_rules,
    external_metric_replicas,
    external_per_pod_metric_replicas,
    parse_scaled_object,
    replicas_change_per_period,
    stabilize_recommendation,
    stabilize_recommendation_with_behaviors,
)
from controller.simulator.world import World
from tests.sim_helpers import FakeWorld

NOW = 100_000.0
HORIZONTAL = "horizontal_test.go"
CALCULATOR = "replica_calculator_test.go"


def rules(pods: int, pods_period: int, percent: int, percent_period: int, window: int,
          select: str = "Max") -> HpaDirection:
    """horizontal_test.go generateScalingRules."""
    policies = []
    if pods:
        policies.append(StepPolicy("Pods", pods, pods_period))
    if percent:
        policies.append(StepPolicy("Percent", percent, percent_period))
    return HpaDirection(window, tuple(policies), select)  # type: ignore[arg-type]


def uniform_events(changes: list[int], period: int) -> list[tuple[float, int]]:
    """horizontal_test.go generateEventsUniformDistribution: each event in the middle of its share of the period."""
    segment = period / len(changes)
    return [(NOW - (period - segment * (i + 1) + segment / 2), change) for i, change in enumerate(changes)]


# ------------------------------------------------------------------------------------------------------------------
# horizontal_test.go TestNormalizeDesiredReplicas (the legacy path's stabilizeRecommendation, 5-minute window)

@pytest.mark.parametrize(("case", "recommendations", "desired", "stabilized", "log_length"), [
    ("empty log", [], 5, 5, 1),
    ("stabilize", [(NOW - 120, 4), (NOW - 60, 5)], 3, 5, 3),
    ("no stabilize", [(NOW - 120, 1), (NOW - 60, 2)], 3, 3, 3),
    ("no stabilize - old recommendations", [(NOW - 600, 10), (NOW - 540, 9)], 3, 3, 2),
    ("stabilize - old recommendations", [(NOW - 600, 10), (NOW - 60, 4), (NOW - 120, 5), (NOW - 540, 9)], 3, 5, 4),
])
def test_normalize_desired_replicas(case: str, recommendations: list[tuple[float, int]], desired: int,
                                    stabilized: int, log_length: int) -> None:
    """horizontal_test.go TestNormalizeDesiredReplicas, case `case`."""
    got, log = stabilize_recommendation(recommendations, NOW, 300, desired)
    assert (got, len(log)) == (stabilized, log_length), case


# ------------------------------------------------------------------------------------------------------------------
# horizontal_test.go TestNormalizeDesiredReplicasWithBehavior (stabilizeRecommendationWithBehaviors)

@pytest.mark.parametrize(
    ("case", "recommendations", "current", "desired", "stabilized", "stored", "up_window", "down_window"), [
        ("empty recommendations for scaling down", [], 100, 5, 5, [5], 0, 0),
        ("simple scale down stabilization", [(NOW - 120, 4), (NOW - 60, 5)], 100, 3, 5, [4, 5, 3], 0, 180),
        ("simple scale up stabilization", [(NOW - 120, 4), (NOW - 60, 5)], 1, 7, 4, [4, 5, 7], 300, 0),
        ("no scale down stabilization", [(NOW - 120, 1), (NOW - 60, 2)], 100, 3, 3, [1, 2, 3], 300, 0),
        ("no scale up stabilization", [(NOW - 120, 4), (NOW - 60, 5)], 1, 3, 3, [4, 5, 3], 0, 300),
        ("no scale down stabilization, reuse recommendation element", [(NOW - 600, 10), (NOW - 540, 9)], 100, 3,
         3, [10, 3], 0, 0),
        ("no scale up stabilization, reuse recommendation element", [(NOW - 600, 10), (NOW - 540, 9)], 1, 100,
         100, [10, 100], 0, 0),
        ("scale down stabilization, reuse one of obsolete recommendation element",
         [(NOW - 600, 10), (NOW - 60, 4), (NOW - 120, 5), (NOW - 540, 9)], 100, 3, 5, [10, 4, 5, 3], 0, 180),
        ("scale up stabilization, reuse one of obsolete recommendation element",
         [(NOW - 6000, 10), (NOW - 60, 6), (NOW - 120, 5), (NOW - 180, 9)], 1, 100, 5, [100, 6, 5, 9], 300, 0),
        ("scale up and down stabilization, do not scale up when prenormalized rec goes down",
         [(NOW - 6000, 2), (NOW - 180, 3)], 2, 1, 2, None, 300, 300),
        ("scale up and down stabilization, do not scale down when prenormalized rec goes up",
         [(NOW - 6000, 2), (NOW - 180, 1)], 2, 3, 2, None, 300, 300),
    ])
def test_normalize_desired_replicas_with_behavior(
    case: str, recommendations: list[tuple[float, int]], current: int, desired: int, stabilized: int,
    stored: list[int] | None, up_window: int, down_window: int,
) -> None:
    """horizontal_test.go TestNormalizeDesiredReplicasWithBehavior, case `case`."""
    got, log = stabilize_recommendation_with_behaviors(recommendations, NOW, current, desired, up_window,
                                                       down_window)
    assert got == stabilized, case
    if stored is not None:
        assert [r for _, r in log] == stored, case


# ------------------------------------------------------------------------------------------------------------------
# horizontal_test.go TestConvertDesiredReplicasWithRules (the legacy path's bounds and max(2 x current, 4))

@pytest.mark.parametrize(("annotation", "current", "desired", "minimum", "maximum", "converted", "condition"), [
    ("prenormalized desired replicas within range", 5, 7, 3, 8, 7, "DesiredWithinRange"),
    ("prenormalized desired replicas < minReplicas", 3, 1, 2, 8, 2, "TooFewReplicas"),
    ("prenormalized desired zeroed replicas within range", 1, 0, 0, 10, 0, "DesiredWithinRange"),
    ("maxReplicas is the limit because maxReplicas < scaleUpLimit", 20, 1000, 1, 10, 10, "TooManyReplicas"),
    ("scaleUpLimit is the limit because scaleUpLimit < maxReplicas", 3, 1000, 1, 2000, calculate_scale_up_limit(3),
     "ScaleUpLimit"),
])
def test_convert_desired_replicas_with_rules(annotation: str, current: int, desired: int, minimum: int,
                                             maximum: int, converted: int, condition: str) -> None:
    """horizontal_test.go TestConvertDesiredReplicasWithRules, case `annotation`."""
    assert convert_desired_replicas_with_rules(current, desired, minimum, maximum) == (converted, condition)


def test_calculate_scale_up_limit_is_twice_current_or_four() -> None:
    """horizontal.go calculateScaleUpLimit with the production scaleUpLimitFactor 2 and scaleUpLimitMinimum 4."""
    assert [calculate_scale_up_limit(n) for n in (1, 2, 3, 4, 100)] == [4, 4, 6, 8, 200]


# ------------------------------------------------------------------------------------------------------------------
# horizontal_test.go TestCalculateScaleUpLimitWithScalingRules, TestCalculateScaleDownLimitWithBehaviors

def test_calculate_scale_up_limit_with_scaling_rules() -> None:
    """horizontal_test.go TestCalculateScaleUpLimitWithScalingRules: Min of {+2 pods, +50 %} from 1 is 2."""
    min_rules = rules(2, 60, 50, 60, 300, select="Min")
    assert calculate_scale_up_limit_with_scaling_rules(1, [], [], min_rules, NOW) == 2


def test_calculate_scale_down_limit_with_behaviors() -> None:
    """horizontal_test.go TestCalculateScaleDownLimitWithBehaviors: Min of {-2 pods, -50 %} from 5 is 3."""
    min_rules = rules(2, 60, 50, 60, 300, select="Min")
    assert calculate_scale_down_limit_with_behaviors(5, [], [], min_rules, NOW) == 3


# ------------------------------------------------------------------------------------------------------------------
# horizontal_test.go TestScalingWithRules (convertDesiredReplicasWithBehaviorRate); rules None: the v2 defaults

E159 = [1, 5, 9]
E8129 = [8, 12, 9, 11]
SCALING_WITH_RULES: list[tuple[Any, ...]] = [
    # name, up events, down events, min, max, scaleUp rules, scaleDown rules, current, desired, replicas, condition
    ("prenormalized desired replicas within range", None, None, 3, 8, None, None, 5, 7, 7, "DesiredWithinRange"),
    ("prenormalized desired replicas < minReplicas", None, None, 2, 8, None, None, 3, 1, 2, "TooFewReplicas"),
    ("prenormalized desired replicas within range when minReplicas is 0", None, None, 0, 10, None, None, 1, 0, 0,
     "DesiredWithinRange"),
    ("maxReplicas is the limit because maxReplicas < scaleUpLimit", None, None, 1, 10, None, None, 20, 1000, 10,
     "TooManyReplicas"),
    ("desired replica count is more than the maximum replica count", None, None, 100, 150, None, None, 100, 1000,
     150, "TooManyReplicas"),
    ("scaleUpLimit is the limit because scaleUpLimit < maxReplicas with user policies", None, None, 1, 2000,
     rules(0, 0, 1, 60, 0), None, 3, 1000, 4, "ScaleUpLimit"),
    ("scaleUp with default behavior", None, None, 1, 1000, None, None, 10, 50, 20, "ScaleUpLimit"),
    ("scaleUp with pods policy larger than percent policy", None, None, 1, 1000, rules(100, 60, 100, 60, 0), None,
     10, 500, 110, "ScaleUpLimit"),
    ("scaleUp with percent policy larger than pods policy", None, None, 1, 1000, rules(2, 60, 100, 60, 0), None,
     10, 500, 20, "ScaleUpLimit"),
    ("scaleUp with spec MaxReplicas limitation with large pod policy", None, None, 1, 1000,
     rules(100, 60, 0, 0, 0), None, 10, 50, 50, "DesiredWithinRange"),
    ("scaleUp with spec MaxReplicas limitation with large percent policy", None, None, 1, 1000,
     rules(10000, 60, 0, 0, 0), None, 10, 50, 50, "DesiredWithinRange"),
    ("scaleUp with pod policy limitation", None, None, 1, 1000, rules(30, 60, 0, 0, 0), None, 10, 50, 40,
     "ScaleUpLimit"),
    ("scaleUp with percent policy limitation", None, None, 1, 1000, rules(0, 0, 200, 60, 0), None, 10, 50, 30,
     "ScaleUpLimit"),
    ("scaleDown with percent policy larger than pod policy", None, None, 1, 1000, None, rules(20, 60, 1, 60, 300),
     100, 2, 80, "ScaleDownLimit"),
    ("scaleDown with pod policy larger than percent policy", None, None, 1, 1000, None, rules(2, 60, 1, 60, 300),
     100, 2, 98, "ScaleDownLimit"),
    ("scaleDown with spec MinReplicas limitation with large pod policy", None, None, 1, 1000, None,
     rules(100, 60, 0, 0, 300), 10, 0, 1, "TooFewReplicas"),
    ("scaleDown with spec MinReplicas limitation with large percent policy", None, None, 5, 1000, None,
     rules(0, 0, 100, 60, 300), 10, 2, 5, "TooFewReplicas"),
    ("scaleDown with pod policy limitation", None, None, 1, 1000, None, rules(5, 60, 0, 0, 300), 10, 2, 5,
     "ScaleDownLimit"),
    ("scaleDown with percent policy limitation", None, None, 1, 1000, None, rules(0, 0, 50, 60, 300), 10, 5, 5,
     "DesiredWithinRange"),
    ("scaleUp with spec MaxReplicas limitation with large pod policy and events", E159, None, 1, 200,
     rules(300, 60, 0, 0, 0), None, 100, 500, 200, "TooManyReplicas"),
    ("scaleUp with spec MaxReplicas limitation with large percent policy and events", E159, None, 1, 200,
     rules(0, 0, 10000, 60, 0), None, 100, 500, 200, "TooManyReplicas"),
    ("scaleUp with currentReplicas limitation with rate.PeriodSeconds with a lot of recent scale up events", E159,
     None, 1, 1000, rules(5, 120, 0, 0, 0), None, 100, 500, 100, "ScaleUpLimit"),
    ("scaleUp with pod policy and previous scale up events", E159, None, 1, 1000, rules(150, 120, 0, 0, 0), None,
     100, 500, 235, "ScaleUpLimit"),
    ("scaleUp with percent policy and previous scale up events", E159, None, 1, 1000, rules(0, 0, 200, 120, 0),
     None, 100, 500, 255, "ScaleUpLimit"),
    ("scaleUp with percent policy and previous scale up and down events", [4], [2], 1, 1000,
     rules(0, 0, 300, 300, 0), None, 6, 24, 16, "ScaleUpLimit"),
    ("scaleDown with default policy and previous events", None, E159, 1, 1000, None, None, 10, 5, 5,
     "DesiredWithinRange"),
    ("scaleDown with spec MinReplicas=nil limitation with large pod policy and previous events", None, E159, 1,
     1000, None, rules(115, 120, 0, 0, 300), 100, 0, 1, "TooFewReplicas"),
    ("scaleDown with spec MinReplicas limitation with large pod policy and previous events", None, E159, 5, 1000,
     None, rules(130, 120, 0, 0, 300), 100, 0, 5, "TooFewReplicas"),
    ("scaleDown with spec MinReplicas limitation with large percent policy and previous events", None, E159, 5,
     1000, None, rules(0, 0, 100, 120, 300), 100, 2, 5, "TooFewReplicas"),
    ("scaleDown with pod policy limitation and previous events", None, E159, 1, 1000, None,
     rules(5, 120, 0, 0, 300), 100, 2, 100, "ScaleDownLimit"),
    ("scaleDown with percent policy limitation and previous events", None, [2, 4, 6], 1, 1000, None,
     rules(0, 0, 50, 120, 300), 100, 0, 56, "ScaleDownLimit"),
    ("scaleDown with percent policy and previous scale up and down events", [2], [4], 1, 1000, None,
     rules(0, 0, 50, 180, 0), 10, 1, 6, "ScaleDownLimit"),
    ("scaleDown with previous events preventing further scale down", None, [10, 10, 10], 1, 1000, None,
     rules(0, 0, 10, 120, 300), 100, 0, 100, "ScaleDownLimit"),
    ("scaleDown with with previous events still allowing more scale down", None, [10, 10, 10], 1, 1000, None,
     rules(0, 0, 1000, 120, 300), 10, 5, 5, "DesiredWithinRange"),
    ("check 'outdated' flag for events for one behavior for up", E8129, None, 1, 1000, rules(1000, 60, 0, 0, 0),
     None, 100, 200, 200, "DesiredWithinRange"),
    ("check that events were not marked 'outdated' for two different policies in the behavior for up", E8129,
     None, 1, 1000, rules(1000, 120, 100, 60, 0), None, 100, 200, 200, "DesiredWithinRange"),
    ("check that events were marked 'outdated' for two different policies in the behavior for up", E8129, None,
     1, 1000, rules(1000, 30, 100, 60, 0), None, 100, 200, 200, "DesiredWithinRange"),
    ("check 'outdated' flag for events for one behavior for down", None, E8129, 1, 1000, None,
     rules(1000, 60, 0, 0, 300), 100, 5, 5, "DesiredWithinRange"),
    ("check that events were not marked 'outdated' for two different policies in the behavior for down", None,
     E8129, 1, 1000, None, rules(1000, 120, 100, 60, 300), 100, 5, 5, "DesiredWithinRange"),
    ("check that events were marked 'outdated' for two different policies in the behavior for down", None, E8129,
     1, 1000, None, rules(1000, 30, 100, 60, 300), 100, 5, 5, "DesiredWithinRange"),
]


@pytest.mark.parametrize("row", SCALING_WITH_RULES, ids=[row[0] for row in SCALING_WITH_RULES])
def test_scaling_with_rules(row: tuple[Any, ...]) -> None:
    """horizontal_test.go TestScalingWithRules, case named by the test id."""
    _, up, down, minimum, maximum, up_rules, down_rules, current, desired, replicas, condition = row
    behavior = HpaBehavior(up_rules or DEFAULT_UP, down_rules or DEFAULT_DOWN)
    up_events = uniform_events(up, 120) if up else []
    down_events = uniform_events(down, 120) if down else []
    assert convert_desired_replicas_with_behavior_rate(
        current, desired, minimum, maximum, behavior, up_events, down_events, NOW) == (replicas, condition)


@pytest.mark.parametrize(("case", "events", "change"), [
    ("empty entries with default behavior", [], 0),
    ("one outdated entry to be kept untouched without behavior", [(NOW - 61, 7)], 0),
    ("one actual entry to be not touched with behavior", [(NOW - 58, 7)], 7),
    ("two entries, one of them to be replaced", [(NOW - 61, 7), (NOW - 59, 6)], 6),
    ("replace one entry, use policies with different periods",
     [(NOW - 29, 8), (NOW - 59, 6), (NOW - 61, 7), (NOW - 61, 9)], 14),
    ("two entries, both actual", [(NOW - 58, 7), (NOW - 59, 6)], 13),
])
def test_store_scale_events_replicas_change_per_period(case: str, events: list[tuple[float, int]],
                                                       change: int) -> None:
    """horizontal_test.go TestStoreScaleEvents, case `case`: its getReplicasChangePerPeriod(60, ...) check."""
    assert replicas_change_per_period(60, events, NOW) == change, case


# ------------------------------------------------------------------------------------------------------------------
# replica_calculator_test.go: the external-metric calculators KEDA's triggers go through

DEFAULT = Tolerances()
UP_1_PERCENT = Tolerances(scale_down=0.1, scale_up=0.01)  # upstream's Tolerances{defaultTestingTolerance, .01}


@pytest.mark.parametrize(("case", "status", "usage", "target", "tolerances", "replicas"), [
    ("replica count overflow saturates to MaxInt32", 1, INT64_MAX, 1, DEFAULT, INT32_MAX),
    ("usage overflow with huge target leaves replicas unchanged", 1, INT64_MAX, INT64_MAX, DEFAULT, 1),
    ("statusReplicas zero does not overflow usage", 0, 20000, 5000, DEFAULT, 4),
    ("statusReplicas zero and metric zero does not underflow", 0, 0, 5000, DEFAULT, 0),
    ("scale up", 3, 8600, 2150, DEFAULT, 4),
    ("scale down", 5, 8600, 2867, DEFAULT, 3),
    ("within default tolerance", 3, 8600, 2900, DEFAULT, 3),
    ("outside configurable 1% tolerance", 3, 8600, 2800, UP_1_PERCENT, 4),
])
def test_replica_calc_external_per_pod_metric(case: str, status: int, usage: int, target: int,
                                              tolerances: Tolerances, replicas: int) -> None:
    """replica_calculator_test.go TestReplicaCalcExternalPerPodMetric, case `case` (AverageValue targets)."""
    assert external_per_pod_metric_replicas(status, target, usage, tolerances) == replicas, case


@pytest.mark.parametrize(("case", "current", "ready", "usage", "target", "tolerances", "replicas"), [
    ("scale down: ignores unready pods (would otherwise scale up)", 3, 1, 8600, 4400, DEFAULT, 2),
    ("scale down", 5, 5, 8600, 14334, DEFAULT, 3),
    ("within default tolerance", 3, 3, 8600, 8888, DEFAULT, 3),
    ("outside configurable 1% tolerance", 3, 3, 8900, 8800, UP_1_PERCENT, 4),
    # Two samples summing past int64: upstream caps the sum at MaxInt64 before the ratio.
    ("usage overflow caps at MaxInt64", 3, 3, min(2 * (INT64_MAX // 2 + 1), INT64_MAX), INT64_MAX, DEFAULT, 3),
])
def test_replica_calc_external_metric(case: str, current: int, ready: int, usage: int, target: int,
                                      tolerances: Tolerances, replicas: int) -> None:
    """replica_calculator_test.go TestReplicaCalcExternalMetric, case `case` (Value targets, ready pods only)."""
    assert external_metric_replicas(current, target, usage, tolerances, ready) == replicas, case


@pytest.mark.parametrize(("ratio", "before_1_33", "from_1_33"), [
    (1.1, False, True),  # the edge: math.Abs(1.0 - 1.1) is 0.10000000000000009
    (0.9, True, True),  # 1.0 - 0.9 is 0.09999999999999998 either way
    (11 / 10, False, True),
    (1.1000001, False, False),
    (1.05, True, True),
])
def test_tolerance_edge_changed_in_1_33(ratio: float, before_1_33: bool, from_1_33: bool) -> None:
    """kubernetes/kubernetes#130797 (1.33, HPA configurable tolerance): replica_calculator.go Tolerances.isWithin,
    (1 - down) <= ratio <= (1 + up), replaced math.Abs(1.0-usageRatio) <= tolerance."""
    assert Tolerances(edge_within=False).is_within(ratio) is before_1_33
    assert Tolerances().is_within(ratio) is from_1_33


# ------------------------------------------------------------------------------------------------------------------
# kedacore/keda pkg/scalers/azure_queue_scaler_test.go TestAzQueueParseMetadata (the rows the simulator reads),
# and what typed_config.go decodes: int64 through encoding/json, enums compared as exact strings.

def trigger_metadata(metadata: dict[str, Any]) -> object:
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "q"},
            "spec": {"scaleTargetRef": {"name": "w"}, "triggers": [{"type": "azure-queue", "metadata": metadata}]}}


CONNECTION = {"connectionFromEnv": "CONNECTION"}


@pytest.mark.parametrize(("name", "metadata", "is_error"), [
    ("nothing passed", {}, True),
    ("properly formed", {**CONNECTION, "queueName": "sample", "queueLength": "5"}, False),
    ("empty queueName", {**CONNECTION, "queueName": ""}, True),
    ("improperly formed queueLength", {**CONNECTION, "queueName": "sample", "queueLength": "AA"}, True),
    ("improperly formed activationQueueLength",
     {**CONNECTION, "queueName": "sample", "queueLength": "1", "activationQueueLength": "AA"}, True),
    ("valid queueLengthStrategy all",
     {**CONNECTION, "queueName": "sample", "queueLength": "5", "queueLengthStrategy": "all"}, False),
    ("valid queueLengthStrategy visibleonly",
     {**CONNECTION, "queueName": "sample", "queueLength": "5", "queueLengthStrategy": "visibleonly"}, False),
    ("invalid queueLengthStrategy",
     {**CONNECTION, "queueName": "sample", "queueLength": "5", "queueLengthStrategy": "invalid"}, True),
    # typed_config.go: an int64 field is decoded with encoding/json, which refuses a fraction.
    ("typed_config.go: queueLength 2.5 is not an int64", {**CONNECTION, "queueName": "sample", "queueLength": "2.5"},
     True),
    # typed_config.go: the enum check compares the trimmed value to "all" and "visibleonly" exactly.
    ("typed_config.go: the enum is case-sensitive",
     {**CONNECTION, "queueName": "sample", "queueLengthStrategy": "VisibleOnly"}, True),
    ("typed_config.go: values are trimmed", {**CONNECTION, "queueName": "sample", "queueLength": " 5 "}, False),
])
def test_az_queue_parse_metadata(name: str, metadata: dict[str, Any], is_error: bool) -> None:
    """azure_queue_scaler_test.go TestAzQueueParseMetadata, row `name` (or the typed_config.go rule it names)."""
    if is_error:
        with pytest.raises(SpecError):
            parse_scaled_object(trigger_metadata(metadata))
    else:
        parse_scaled_object(trigger_metadata(metadata))


@pytest.mark.parametrize(("name", "strategy", "peeked", "total", "count"), [
    ("default strategy (all)", "", 10, 100, 100),
    ("explicit all strategy", "all", 10, 100, 100),
    ("visibleonly strategy with less than 32 messages", "visibleonly", 10, 100, 10),
    ("visibleonly strategy with 32 or more messages", "visibleonly", 35, 100, 100),
])
def test_az_queue_get_message_count(name: str, strategy: str, peeked: int, total: int, count: int) -> None:
    """azure_queue_scaler_test.go TestAzQueueGetMessageCount, case `name`."""
    metadata = {"queueName": "q", **({"queueLengthStrategy": strategy} if strategy else {})}
    world = FakeWorld(count=total, desired=1)
    world.visible_count = peeked
    keda = KedaAutoscaler("keda", parse_scaled_object(trigger_metadata(metadata)), cast(World, world))
    assert keda._count(keda.scaled.triggers[0]) == count


# ------------------------------------------------------------------------------------------------------------------
# kedacore/keda pkg/scaling/executor/scale_scaledobjects_test.go (RequestScale with lastActiveTime nil)

@pytest.mark.parametrize(("test", "spec", "current", "active", "expected"), [
    ("TestScaleToMinReplicasWhenNotActive", {"minReplicaCount": 0}, 10, False, 0),
    ("TestScaleToMinReplicasFromLowerInitialReplicaCount", {"minReplicaCount": 5}, 1, False, 5),
    ("TestScaleFromMinReplicasWhenActive", {"minReplicaCount": 0}, 0, True, 1),
    ("TestScaleToIdleReplicasWhenNotActive", {"minReplicaCount": 5, "idleReplicaCount": 0}, 10, False, 0),
    ("TestScaleFromIdleToMinReplicasWhenActive", {"minReplicaCount": 5, "idleReplicaCount": 0}, 0, True, 5),
])
def test_request_scale(test: str, spec: dict[str, Any], current: int, active: bool, expected: int) -> None:
    """scale_scaledobjects_test.go `test`."""
    doc = cast(dict[str, Any], trigger_metadata({"queueName": "q"}))
    doc["spec"].update(spec)
    world = FakeWorld(count=1 if active else 0, desired=current)
    keda = KedaAutoscaler("keda", parse_scaled_object(doc), cast(World, world))
    keda.keda_poll(0)
    assert world.desired == expected, test
    assert (keda.last_active is not None) is active  # result.LastActiveTime is set when active


def test_the_behavior_defaults_fill_only_what_a_given_behavior_leaves_out() -> None:
    """pkg/apis/autoscaling/v2/defaults.go: SetDefaults_HorizontalPodAutoscalerBehavior fills a behavior only
    when one is given (GenerateHPAScaleUpRules / GenerateHPAScaleDownRules); KEDA's hpa.go passes nil when the
    ScaledObject has none, and the controller then takes the legacy path."""
    plain = parse_scaled_object(trigger_metadata({"queueName": "q"}))
    assert plain.behavior is None
    doc = cast(dict[str, Any], trigger_metadata({"queueName": "q"}))
    doc["spec"]["advanced"] = {"horizontalPodAutoscalerConfig": {"behavior": {"scaleUp": {"selectPolicy": "Min"}}}}
    given = parse_scaled_object(doc).behavior
    assert given == HpaBehavior(replace(DEFAULT_UP, select_policy="Min"), DEFAULT_DOWN)
