"""The KEDA + HPA baseline: a ScaledObject with azure-queue triggers, emulated number for number.

This is the competitor, not our controller, so it is its own code. Two loops, as in a cluster:

1. KEDA, every `pollingInterval` (kedacore/keda pkg/scaling/executor/scale_scaledobjects.go, RequestScale): a
   trigger is active when its count > activationQueueLength. Active at 0 replicas, or below minReplicaCount with
   an idleReplicaCount: set minReplicaCount (at least 1). Inactive: above idleReplicaCount, or above 0 with
   minReplicaCount 0, once cooled down (lastActiveTime + cooldownPeriod, or, while never active,
   initialCooldownPeriod from the start): go straight to idleReplicaCount, else minReplicaCount. Inactive below
   minReplicaCount without idleReplicaCount: set minReplicaCount.
2. The HPA, every 15 s (kubernetes/kubernetes pkg/controller/podautoscaler/horizontal.go, reconcileAutoscaler),
   minReplicas = max(1, min), maxReplicas = max: nothing at 0 replicas; above max or below min, straight to the
   bound without metrics; otherwise one external metric per trigger (replica_calculator.go), the largest
   recommendation, then either the legacy normalization (KEDA leaves `behavior` nil when the ScaledObject sets
   none: the max of the last 5 minutes of recommendations, scale-up limited to max(2 x current, 4)) or `behavior`
   (stabilization windows, Pods/Percent rate limits with selectPolicy).

The pure functions below carry upstream's names so that tests/simulator/test_keda_upstream.py can transcribe upstream's
test tables onto them. KEDA's metrics server asks the scaler for a fresh count on each HPA request (unless
`useCachedMetrics`, where the HPA sees the count of KEDA's last poll).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

import yaml

from controller.keda.model import (
    DOWNSCALE_STABILIZATION,
    HPA_SYNC,
    HPA_TOLERANCE,
    INT32_MAX,
    Fallback,
    HpaBehavior,
    HpaDirection,
    Trigger,
    read_scaled_object,
)
from controller.model.fields import FieldError, Fields, SpecError
from controller.simulator.world import PEEK_LIMIT, MultiQueueWorld, SimWorld, World

SCALE_UP_LIMIT_FACTOR = 2.0  # horizontal.go scaleUpLimitFactor (its _test.go raises it to 8; production is 2)
SCALE_UP_LIMIT_MINIMUM = 4.0  # horizontal.go scaleUpLimitMinimum

KUBERNETES_VERSION_ANNOTATION = "simulator.queuescale.io/kubernetes-version"
OLDEST_KUBERNETES = (1, 23)  # autoscaling/v2 is GA from 1.23
NEWEST_KUBERNETES = (1, 35)  # what the newest KEDA is built against (go.mod k8s.io/api v0.35)
EDGE_WITHIN_TOLERANCE = (1, 33)  # kubernetes/kubernetes#130797: Tolerances.isWithin replaces math.Abs
CONFIGURABLE_TOLERANCE = (1, 34)  # HPAConfigurableTolerance: alpha (off) in 1.33, beta (on) from 1.34

INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class AzureQueueTrigger:
    """An azure-queue trigger's metadata as KEDA's scaler reads it (pkg/scalers/azure_queue_scaler.go)."""

    queue_name: str
    queue_length: int = 5
    activation_queue_length: int = 0
    strategy: Literal["all", "visibleonly"] = "all"
    metric_type: Literal["AverageValue", "Value"] = "AverageValue"
    use_cached_metrics: bool = False


@dataclass(frozen=True)
class EmulatedScaledObject:
    """A ScaledObject as the emulation runs it: the settings of controller/keda/model.py's ScaledObject, its
    azure-queue triggers read as KEDA's scaler reads them, and the Kubernetes version the HPA behaves as."""

    name: str
    polling_interval: int = 30
    cooldown_period: int = 300
    initial_cooldown_period: int = 0
    min_replicas: int = 0
    max_replicas: int = 100
    idle_replicas: int | None = None
    triggers: tuple[AzureQueueTrigger, ...] = ()
    behavior: HpaBehavior | None = None  # None: KEDA creates the HPA with `behavior: nil` (the legacy path)
    kubernetes_version: tuple[int, int] = NEWEST_KUBERNETES
    fallback: Fallback | None = None


# --------------------------------------------------------------------------------------------------------------
# Reading: the ScaledObject once (controller/keda/model.py), then what only the emulation needs of it

_TRIGGER_METADATA = {
    "queueName", "queueLength", "activationQueueLength", "queueLengthStrategy", "connectionFromEnv", "connection",
    "accountName", "cloud", "endpointSuffix", "metricName", "queueURL", "queueURLFromEnv",
}
_JSON_INTEGER = re.compile(r"-?(0|[1-9][0-9]*)")


def _metadata_string(f: Fields, name: str) -> str | None:
    """A trigger metadata value as KEDA sees it: the CRD types metadata as map[string]string, KEDA trims it."""
    value = f.raw.get(name)
    f.read.add(name)
    if value is None:
        return None
    if not isinstance(value, str):
        f.error(name, f'must be a string (the ScaledObject CRD types metadata values as strings: the API server '
                      f'rejects {value!r} unquoted; write "{value}")')
        return None
    value = value.strip()
    return value or None  # KEDA's typed config treats an empty value as not set


def _metadata_int64(f: Fields, name: str, default: int) -> int:
    """An int64 metadata field: KEDA's typed config decodes it with encoding/json, so only a JSON integer passes."""
    value = _metadata_string(f, name)
    if value is None:
        return default
    if not _JSON_INTEGER.fullmatch(value) or not -INT64_MAX - 1 <= int(value) <= INT64_MAX:
        f.error(name, f'must be a whole number (KEDA reads it as an int64: "2.5", "1e3" or "05" are rejected), '
                      f'got "{value}"')
        return default
    return int(value)


def _azure_queue_trigger(trigger: Trigger, errors: list[FieldError]) -> AzureQueueTrigger | None:
    if trigger.metric_type == "Utilization":
        errors.append(FieldError(f"{trigger.path}.metricType",
                                 "Utilization is not supported by the azure-queue trigger"))
    if trigger.type and trigger.type != "azure-queue":
        errors.append(FieldError(f"{trigger.path}.type",
                                 f'the simulator emulates azure-queue triggers only, got "{trigger.type}"'))
        return None
    m = Fields(trigger.metadata, f"{trigger.path}.metadata", errors)
    queue_name = _metadata_string(m, "queueName")
    if queue_name is None and isinstance(m.raw.get("queueName", ""), str):
        m.missing("queueName")  # absent, empty or blank: KEDA's "missing required parameter"
    queue_length = _metadata_int64(m, "queueLength", 5)
    if queue_length <= 0:
        # KEDA passes it on as the HPA's target, and the API server refuses a target that is not positive.
        m.error("queueLength", f"must be > 0 (the HPA's metric target must be positive), got {queue_length}")
        queue_length = 5
    activation = _metadata_int64(m, "activationQueueLength", 0)
    strategy_text = _metadata_string(m, "queueLengthStrategy") or "all"
    if strategy_text not in ("all", "visibleonly"):
        # KEDA's enum check compares the exact string: "VisibleOnly" is refused.
        m.error("queueLengthStrategy", f'must be "all" or "visibleonly" (lower case), got "{strategy_text}"')
    strategy: Literal["all", "visibleonly"] = "visibleonly" if strategy_text == "visibleonly" else "all"
    for name in m.raw:
        if name not in _TRIGGER_METADATA and name not in m.read:
            m.error(str(name), "unknown field of the azure-queue trigger (KEDA would ignore it: a typo?)")
    return AzureQueueTrigger(
        queue_name=queue_name or "", queue_length=queue_length, activation_queue_length=activation,
        strategy="visibleonly" if strategy == "visibleonly" else "all",
        metric_type="Value" if trigger.metric_type == "Value" else "AverageValue",
        use_cached_metrics=trigger.use_cached_metrics,
    )


def _kubernetes_version(annotations: Mapping[str, object], errors: list[FieldError]) -> tuple[int, int]:
    value = annotations.get(KUBERNETES_VERSION_ANNOTATION)
    if value is None:
        return NEWEST_KUBERNETES
    match = re.fullmatch(r"v?1\.(\d+)(?:\.\d+)?", str(value).strip())
    version = (1, int(match.group(1))) if match else None
    if version is None or not OLDEST_KUBERNETES <= version <= NEWEST_KUBERNETES:
        errors.append(FieldError(
            f"metadata.annotations.{KUBERNETES_VERSION_ANNOTATION}",
            f'must be a Kubernetes version from 1.{OLDEST_KUBERNETES[1]} to 1.{NEWEST_KUBERNETES[1]} '
            f'(e.g. "1.32"), got {value!r}'))
        return NEWEST_KUBERNETES
    return version


def parse_scaled_object(doc: object) -> EmulatedScaledObject:
    """A ScaledObject from its YAML document, as the emulation runs it; raises SpecError naming every bad field."""
    errors: list[FieldError] = []
    scaled = read_scaled_object(doc, errors)
    version = _kubernetes_version(scaled.annotations, errors)
    fallback = scaled.fallback
    if fallback is not None and fallback.behavior == "scalingModifiers":
        errors.append(FieldError("spec.fallback.behavior", "scalingModifiers is not supported by the simulator"))
        fallback = replace(fallback, behavior="static")
    if scaled.scaling_modifiers:
        errors.append(FieldError("spec.advanced.scalingModifiers", "is not supported by the simulator"))
    triggers = tuple(t for trigger in scaled.triggers if (t := _azure_queue_trigger(trigger, errors)) is not None)
    if errors:
        raise SpecError(errors)
    return EmulatedScaledObject(
        name=scaled.name,
        polling_interval=scaled.polling_interval,
        cooldown_period=scaled.cooldown_period,
        initial_cooldown_period=scaled.initial_cooldown_period,
        min_replicas=scaled.min_replica_count, max_replicas=scaled.max_replica_count,
        idle_replicas=scaled.idle_replica_count, triggers=triggers,
        behavior=scaled.behavior,
        kubernetes_version=version,
        fallback=fallback,
    )


class ScaledObjectError(Exception):
    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


def load_scaled_objects(path: str) -> list[EmulatedScaledObject]:
    """Every ScaledObject in a YAML file (`-`: standard input; other kinds are skipped); raises ScaledObjectError."""
    from controller.model.loading import read_input

    try:
        docs = list(yaml.safe_load_all(read_input(path)))
    except OSError as exc:
        raise ScaledObjectError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    except yaml.YAMLError:
        raise ScaledObjectError([f"{path}: invalid YAML"]) from None
    found: list[EmulatedScaledObject] = []
    lines: list[str] = []
    for doc in docs:
        if not isinstance(doc, Mapping) or doc.get("kind") not in ("ScaledObject", None):
            continue
        try:
            found.append(parse_scaled_object(doc))
        except SpecError as exc:
            lines.extend(f"{path}: {error}" for error in exc.errors)
    if lines:
        raise ScaledObjectError(lines)
    if not found:
        raise ScaledObjectError([f"{path}: no ScaledObject in this file"])
    return found

# --------------------------------------------------------------------------------------------------------------
# The HPA's arithmetic, as upstream's pure functions (times are seconds; `now` is the sync's time)


@dataclass(frozen=True)
class Tolerances:
    """replica_calculator.go Tolerances: how far the usage ratio may stray from 1 before the HPA acts."""

    scale_down: float = HPA_TOLERANCE
    scale_up: float = HPA_TOLERANCE
    edge_within: bool = True  # Kubernetes >= 1.33: a ratio exactly at 1 +- tolerance is within

    def is_within(self, usage_ratio: float) -> bool:
        if self.edge_within:
            return 1.0 - self.scale_down <= usage_ratio <= 1.0 + self.scale_up
        # Before 1.33 one tolerance, compared as |1 - ratio| <= tolerance: in floating point |1 - 1.1| is
        # 0.10000000000000009, so a ratio of exactly 1.1 counted as outside.
        return abs(1.0 - usage_ratio) <= self.scale_up


def _ratio(usage: float, target: float) -> float:
    """Go's float division: x/0 is +Inf (or NaN for 0/0) where Python raises."""
    if target == 0:
        return math.inf if usage > 0 else math.nan
    return usage / target


def _to_int32(value: float) -> int:
    return INT32_MAX if value > INT32_MAX else int(value)


def external_per_pod_metric_replicas(status_replicas: int, target_per_pod: int, usage: int,
                                     tolerances: Tolerances) -> int:
    """GetExternalPerPodMetricReplicas: an AverageValue target, over the pods that exist (status.replicas)."""
    ratio = _ratio(float(usage), float(target_per_pod) * float(status_replicas))
    if tolerances.is_within(ratio):
        return status_replicas
    return _to_int32(math.ceil(_ratio(float(usage), float(target_per_pod))))


def external_metric_replicas(current_replicas: int, target: int, usage: int, tolerances: Tolerances,
                             ready_pods: int) -> int:
    """GetExternalMetricReplicas (getUsageRatioReplicaCount): a Value target, scaled over the ready pods only."""
    ratio = _ratio(float(usage), float(target))
    if current_replicas == 0:
        return _to_int32(math.ceil(ratio))
    if tolerances.is_within(ratio):
        return current_replicas
    return _to_int32(math.ceil(ratio * float(ready_pods)))


def calculate_scale_up_limit(current_replicas: int) -> int:
    """The legacy path's ceiling per sync: max(2 x current, 4)."""
    return int(max(SCALE_UP_LIMIT_FACTOR * current_replicas, SCALE_UP_LIMIT_MINIMUM))


def stabilize_recommendation(recommendations: list[tuple[float, int]], now: float, window: float,
                             desired: int) -> tuple[int, list[tuple[float, int]]]:
    """The legacy path's stabilizeRecommendation: the max of `desired` and the recommendations in the window.

    Returns the stabilized count and the log with `desired` recorded (the oldest stale entry reused, as upstream).
    """
    cutoff = now - window
    stabilized = desired
    stale = -1
    for i, (when, recommendation) in enumerate(recommendations):
        if when < cutoff:
            stale = i
        elif recommendation > stabilized:
            stabilized = recommendation
    return stabilized, _recorded(recommendations, stale, now, desired)


def _recorded(recommendations: list[tuple[float, int]], stale: int, now: float,
              desired: int) -> list[tuple[float, int]]:
    """The log with `desired` recorded now, in the oldest stale entry's place when there is one (as upstream reuses
    it rather than growing the slice)."""
    log = list(recommendations)
    if stale >= 0:
        log[stale] = (now, desired)
    else:
        log.append((now, desired))
    return log


def convert_desired_replicas_with_rules(current_replicas: int, desired: int, min_replicas: int,
                                        max_replicas: int) -> tuple[int, str]:
    """convertDesiredReplicasWithRules: the bounds, and at most max(2 x current, 4); the condition's reason."""
    scale_up_limit = calculate_scale_up_limit(current_replicas)
    if max_replicas > scale_up_limit:
        maximum, reason = scale_up_limit, "ScaleUpLimit"
    else:
        maximum, reason = max_replicas, "TooManyReplicas"
    if desired < min_replicas:
        return min_replicas, "TooFewReplicas"
    if desired > maximum:
        return maximum, reason
    return desired, "DesiredWithinRange"


def stabilize_recommendation_with_behaviors(
    recommendations: list[tuple[float, int]], now: float, current_replicas: int, desired: int,
    up_window: float, down_window: float,
) -> tuple[int, list[tuple[float, int]]]:
    """stabilizeRecommendationWithBehaviors: between the min of the scale-up window and the max of the scale-down
    window, starting from the current count; returns it and the log with `desired` recorded."""
    up_cutoff, down_cutoff = now - up_window, now - down_window
    up_recommendation = down_recommendation = desired
    stale = -1
    for i, (when, recommendation) in enumerate(recommendations):
        if when > up_cutoff:
            up_recommendation = min(recommendation, up_recommendation)
        if when > down_cutoff:
            down_recommendation = max(recommendation, down_recommendation)
        if when < up_cutoff and when < down_cutoff:
            stale = i
    stabilized = current_replicas
    if stabilized < up_recommendation:
        stabilized = up_recommendation
    if stabilized > down_recommendation:
        stabilized = down_recommendation
    return stabilized, _recorded(recommendations, stale, now, desired)


def replicas_change_per_period(period: float, events: Iterable[tuple[float, int]], now: float) -> int:
    """getReplicasChangePerPeriod: the pods added (or removed) by the events of the last `period` seconds."""
    return sum(change for when, change in events if when > now - period)


def convert_desired_replicas_with_behavior_rate(
    current_replicas: int, desired: int, min_replicas: int, max_replicas: int, behavior: HpaBehavior,
    up_events: list[tuple[float, int]], down_events: list[tuple[float, int]], now: float,
) -> tuple[int, str]:
    """convertDesiredReplicasWithBehaviorRate: the rate limits and the bounds; the condition's reason."""
    if desired > current_replicas:
        limit = max(current_replicas, calculate_scale_up_limit_with_scaling_rules(
            current_replicas, up_events, down_events, behavior.scale_up, now))
        maximum, reason = (limit, "ScaleUpLimit") if max_replicas > limit else (max_replicas, "TooManyReplicas")
        if desired > maximum:
            return maximum, reason
    elif desired < current_replicas:
        limit = min(current_replicas, calculate_scale_down_limit_with_behaviors(
            current_replicas, up_events, down_events, behavior.scale_down, now))
        minimum, reason = (limit, "ScaleDownLimit") if min_replicas < limit else (min_replicas, "TooFewReplicas")
        if desired < minimum:
            return minimum, reason
    return desired, "DesiredWithinRange"


def calculate_scale_up_limit_with_scaling_rules(current_replicas: int, up_events: list[tuple[float, int]],
                                                down_events: list[tuple[float, int]], rules: HpaDirection,
                                                now: float) -> int:
    """calculateScaleUpLimitWithScalingRules: the most replicas the scale-up policies allow now."""
    return _policies_limit(current_replicas, up_events, down_events, rules, now, up=True)


def calculate_scale_down_limit_with_behaviors(current_replicas: int, up_events: list[tuple[float, int]],
                                              down_events: list[tuple[float, int]], rules: HpaDirection,
                                              now: float) -> int:
    """calculateScaleDownLimitWithBehaviors: the fewest replicas the scale-down policies allow now."""
    return _policies_limit(current_replicas, up_events, down_events, rules, now, up=False)


def _policies_limit(current_replicas: int, up_events: list[tuple[float, int]], down_events: list[tuple[float, int]],
                    rules: HpaDirection, now: float, *, up: bool) -> int:
    """Both upstream functions, which differ only in the sign of a policy and in which proposal `Min` picks: each
    policy proposes from the replicas at its period's start (current, minus the pods added in the period, plus the
    pods removed)."""
    if rules.select_policy == "Disabled":
        return current_replicas
    proposals = []
    for policy in rules.policies:
        start = (current_replicas - replicas_change_per_period(policy.period, up_events, now)
                 + replicas_change_per_period(policy.period, down_events, now))
        if policy.type == "Pods":
            proposals.append(start + policy.value if up else start - policy.value)
        elif up:
            # Rounded up, or a small Percent could never add a pod.
            proposals.append(_to_int32(math.ceil(start * (1 + policy.value / 100))))
        else:
            proposals.append(int(start * (1 - policy.value / 100)))  # Go's int32(): toward zero
    # `Min` picks the smallest change: the lowest proposal going up, the highest going down.
    lowest = (rules.select_policy == "Min") == up
    return min(proposals) if lowest else max(proposals)


# --------------------------------------------------------------------------------------------------------------
# The emulation


def _trigger_queues(scaled: EmulatedScaledObject, world: SimWorld) -> list[World]:
    """The queue each trigger reads: by its queueName when the scenario has several; raises SpecError."""
    if not isinstance(world, MultiQueueWorld):
        return [world] * len(scaled.triggers)  # one queue: every trigger reads it
    names = world.queue_names
    found: list[World] = []
    errors: list[FieldError] = []
    for index, trigger in enumerate(scaled.triggers):
        if trigger.queue_name in names:
            found.append(world.queue_world(names.index(trigger.queue_name)))
        else:
            errors.append(FieldError(
                f"{scaled.name}: spec.triggers[{index}].metadata.queueName",
                f"'{trigger.queue_name}' is none of the scenario's queues ({', '.join(names)})",
            ))
    if errors:
        raise SpecError(errors)
    return found


class KedaAutoscaler:
    """KEDA's polling loop and the HPA's sync loop acting on the simulated Deployment."""

    def __init__(self, label: str, scaled: EmulatedScaledObject, world: SimWorld) -> None:
        self.label = label
        self.scaled = scaled
        self.world = world
        self.trigger_queues = _trigger_queues(scaled, world)
        self.hpa_min = max(1, scaled.min_replicas)
        self.hpa_max = scaled.max_replicas
        self.last_active: int | None = None
        # useCachedMetrics: each trigger's record of KEDA's last poll, a metric (milli-units) or None for an error
        self.cached: list[int | None] = [0] * len(scaled.triggers)
        # status.health[metric].numberOfFailures, kept only with a fallback (fallback.go GetMetricsWithFallback)
        self.failures: list[int] = [0] * len(scaled.triggers)
        self.fallback_active = False
        self.recommendations: list[tuple[float, int]] | None = None  # None until the HPA's first sync
        self.scale_up_events: list[tuple[float, int]] = []  # (time, pods added)
        self.scale_down_events: list[tuple[float, int]] = []  # (time, pods removed)
        self.keda_next = 0
        self.hpa_next = 0
        self.next_at = 0.0
        behavior = scaled.behavior
        version = scaled.kubernetes_version
        honoured = behavior is not None and version >= CONFIGURABLE_TOLERANCE
        up = behavior.scale_up.tolerance if honoured and behavior is not None else None
        down = behavior.scale_down.tolerance if honoured and behavior is not None else None
        self.tolerances = Tolerances(
            scale_down=HPA_TOLERANCE if down is None else down, scale_up=HPA_TOLERANCE if up is None else up,
            edge_within=version >= EDGE_WITHIN_TOLERANCE,
        )
        self.event_horizon = max(
            (p.period for d in (behavior.scale_up, behavior.scale_down) for p in d.policies), default=0
        ) if behavior is not None else 0

    def _count(self, trigger: AzureQueueTrigger, index: int = 0, t: int | None = None) -> int | None:
        """The trigger's queue count (GetAzureQueueLength); None when the read fails (an outage at `t`)."""
        world = self.trigger_queues[index]
        if t is not None and getattr(world, "outages", None) and world.outage_at(t) is not None:
            return None  # an error or a timeout: either way the scaler returns an error
        if trigger.strategy == "visibleonly" and world.visible_count < PEEK_LIMIT:
            return world.visible_count
        return world.approximate_count

    def metric_with_fallback(self, index: int, usage: int | None) -> tuple[int | None, bool]:
        """fallback.go GetMetricsWithFallback for trigger `index`: the metric (milli-units) or None for the error
        passed on, and whether the fallback answered. Each call counts: KEDA's polls and the HPA's reads both
        go through it (scale_handler.go getScalerState and GetScaledObjectMetrics)."""
        fallback = self.scaled.fallback
        if usage is not None:
            if fallback is not None:
                self.failures[index] = 0  # UpdateHealthStatus: Happy, numberOfFailures 0
            return usage, False
        if fallback is None:
            return None, False
        self.failures[index] += 1  # IncrementFailure
        if self.failures[index] <= fallback.failure_threshold:
            return None, False
        current = self.world.desired  # resolver.GetCurrentReplicas: the scale subresource's spec.replicas
        replicas: float = fallback.replicas
        if fallback.behavior == "currentReplicas":
            replicas = current
        elif fallback.behavior == "currentReplicasIfHigher":
            replicas = max(current, fallback.replicas)
        elif fallback.behavior == "currentReplicasIfLower":
            replicas = min(current, fallback.replicas)
        trigger = self.scaled.triggers[index]
        if trigger.metric_type == "Value":
            ready = self.world.ready  # getReadyReplicasCount
            if ready == 0:
                return None, False  # "readyReplicas is zero, cannot do fallback": an error
            replicas /= ready
        return int(trigger.queue_length * 1000 * replicas), True

    async def act(self, t: int) -> None:
        if t >= self.keda_next:
            self.keda_poll(t)
            self.keda_next = t + self.scaled.polling_interval
        if t >= self.hpa_next:
            self.hpa_sync(t)
            self.hpa_next = t + HPA_SYNC
        self.next_at = float(min(self.keda_next, self.hpa_next))

    def _cooled_down(self, t: int) -> bool:
        """scaleToZeroOrIdle's test. lastActiveTime and creationTimestamp are stored to the whole second and the
        comparing poll runs a few milliseconds after its tick, so "passed" holds from the exact second on."""
        if self.last_active is None:
            return self.scaled.initial_cooldown_period <= t  # the ScaledObject is created at t = 0
        return self.last_active + self.scaled.cooldown_period <= t

    def keda_poll(self, t: int) -> None:
        """scale_handler.go checkScalers -> getScaledObjectState, then executor RequestScale."""
        scaled = self.scaled
        active = error = fallback_active = False
        for index, trigger in enumerate(scaled.triggers):
            count = self._count(trigger, index, t)
            metric, answered_by_fallback = self.metric_with_fallback(index, None if count is None else count * 1000)
            self.cached[index] = metric
            if metric is None:
                error = True
            elif answered_by_fallback or (count is not None and count > trigger.activation_queue_length):
                active = True  # getScalerState: a trigger answered by the fallback counts as active
            fallback_active = fallback_active or answered_by_fallback
        self.fallback_active = fallback_active
        current = self.world.desired
        idle = scaled.idle_replicas
        if active:
            if (idle is not None and current < scaled.min_replicas) or current == 0:
                self.world.set_desired(scaled.min_replicas if scaled.min_replicas > 0 else 1, t)
                self.last_active = t
            elif not error:
                self.last_active = t  # with a trigger in error ("PartialTriggerError") lastActiveTime stays
            return
        if error and (scaled.fallback is None or scaled.fallback.replicas != 0):
            return  # no scale to zero or idle on an error: the fallback (if any) is left to the HPA
        if (idle is not None and current > idle) or (current > 0 and scaled.min_replicas == 0):
            if self._cooled_down(t):
                self.world.set_desired(idle if idle is not None else scaled.min_replicas, t)
        elif idle is None and current < scaled.min_replicas:
            self.world.set_desired(scaled.min_replicas, t)

    def _metric_proposal(self, trigger: AzureQueueTrigger, usage: int, current: int) -> int:
        # KEDA reports the count in milli-units and its target as a whole quantity: both go to the HPA in milli.
        target = trigger.queue_length * 1000
        if trigger.metric_type == "Value":
            return external_metric_replicas(current, target, usage, self.tolerances, self.world.ready)
        # status.replicas counts the pods that exist, starting ones included: in the simulator, the desired count.
        return external_per_pod_metric_replicas(current, target, usage, self.tolerances)

    def hpa_sync(self, t: int) -> None:
        current = self.world.desired
        if self.recommendations is None:
            self.recommendations = [(t, current)]  # recordInitialRecommendation
        if current == 0:
            return  # scaling from and to zero is KEDA's
        if current > self.hpa_max:
            desired = self.hpa_max  # no metrics are read, no recommendation recorded
        elif current < self.hpa_min:
            desired = self.hpa_min
        else:
            proposals: list[int] = []
            for index, trigger in enumerate(self.scaled.triggers):
                if trigger.use_cached_metrics:
                    usage = self.cached[index]  # the record of KEDA's last poll, run through the fallback again
                else:
                    count = self._count(trigger, index, t)
                    usage = None if count is None else count * 1000
                metric, _ = self.metric_with_fallback(index, usage)
                if metric is not None:
                    proposals.append(self._metric_proposal(trigger, metric, current))
            raw = max(proposals, default=0)
            # horizontal.go computeReplicasForMetrics: with every metric invalid, or some invalid and the valid
            # ones proposing fewer replicas, the sync fails: no recommendation is kept and nothing is scaled.
            invalid = len(self.scaled.triggers) - len(proposals)
            if invalid == len(self.scaled.triggers) or (invalid and raw < current):
                return
            desired = self.normalize(t, current, raw)
        if desired == current:
            return
        if self.scaled.behavior is not None:  # storeScaleEvent keeps nothing without a behavior
            if desired > current:
                self.scale_up_events.append((t, desired - current))
            else:
                self.scale_down_events.append((t, current - desired))
        self.world.set_desired(desired, t)

    def normalize(self, t: int, current: int, raw: int) -> int:
        """normalizeDesiredReplicas (behavior nil) or normalizeDesiredReplicasWithBehaviors."""
        assert self.recommendations is not None
        behavior = self.scaled.behavior
        if behavior is None:
            # A cluster's sync period is 15 s plus the sync's own duration, so the recommendation 20 syncs back
            # is always just older than 300 s and falls out; on exact 15 s ticks a window 1 s shorter does that.
            window = DOWNSCALE_STABILIZATION - 1
            stabilized, log = stabilize_recommendation(self.recommendations, t, window, raw)
            # Upstream reuses one stale slot per sync; dropping them all changes nothing it would read.
            self.recommendations = [(w, r) for w, r in log if w >= t - window]
            return convert_desired_replicas_with_rules(current, stabilized, self.hpa_min, self.hpa_max)[0]
        stabilized, log = stabilize_recommendation_with_behaviors(
            self.recommendations, t, current, raw, behavior.scale_up.stabilization_window,
            behavior.scale_down.stabilization_window,
        )
        horizon = max(behavior.scale_up.stabilization_window, behavior.scale_down.stabilization_window)
        self.recommendations = [(w, r) for w, r in log if w > t - horizon or w == t]
        self.scale_up_events = [e for e in self.scale_up_events if e[0] > t - self.event_horizon]
        self.scale_down_events = [e for e in self.scale_down_events if e[0] > t - self.event_horizon]
        return convert_desired_replicas_with_behavior_rate(
            current, stabilized, self.hpa_min, self.hpa_max, behavior, self.scale_up_events,
            self.scale_down_events, t,
        )[0]
