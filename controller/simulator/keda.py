"""The KEDA + HPA baseline: a ScaledObject with azure-queue triggers, emulated number for number.

This is the competitor, not our controller, so it is its own code. Two loops, as in a cluster:

1. KEDA, every `pollingInterval`: a trigger is active when its count > activationQueueLength. Active at 0
   replicas: set max(1, minReplicaCount). Inactive past lastActiveTime + cooldownPeriod (and past
   initialCooldownPeriod from the start): go straight to idleReplicaCount, or to 0 when minReplicaCount is 0.
2. The HPA, every 15 s (minReplicas = max(1, min), maxReplicas = max), on an external metric per trigger with
   target AverageValue = queueLength (or Value): tolerance 0.1, the largest recommendation of the triggers, then
   `behavior`: stabilization windows, Pods/Percent rate limits with selectPolicy, and the bounds. At 0 replicas
   the HPA does nothing (scaling from and to 0 is KEDA's).

KEDA's metrics server asks the scaler for a fresh count on each HPA request (unless `useCachedMetrics`, where
the HPA sees the count of KEDA's last poll).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import yaml

from controller.simulator.world import PEEK_LIMIT, World
from controller.spec import FieldError, Fields, SpecError

HPA_SYNC = 15
HPA_TOLERANCE = 0.1


@dataclass(frozen=True)
class HpaPolicy:
    type: Literal["Pods", "Percent"]
    value: int
    period: int


@dataclass(frozen=True)
class HpaDirection:
    stabilization_window: int
    policies: tuple[HpaPolicy, ...]
    select_policy: Literal["Max", "Min", "Disabled"] = "Max"


DEFAULT_UP = HpaDirection(0, (HpaPolicy("Pods", 4, 15), HpaPolicy("Percent", 100, 15)))
DEFAULT_DOWN = HpaDirection(300, (HpaPolicy("Percent", 100, 15),))


@dataclass(frozen=True)
class AzureQueueTrigger:
    queue_name: str
    queue_length: float = 5.0
    activation_queue_length: float = 0.0
    strategy: Literal["all", "visibleonly"] = "all"
    metric_type: Literal["AverageValue", "Value"] = "AverageValue"
    use_cached_metrics: bool = False


@dataclass(frozen=True)
class ScaledObject:
    name: str
    polling_interval: int = 30
    cooldown_period: int = 300
    initial_cooldown_period: int = 0
    min_replicas: int = 0
    max_replicas: int = 100
    idle_replicas: int | None = None
    triggers: tuple[AzureQueueTrigger, ...] = ()
    scale_up: HpaDirection = DEFAULT_UP
    scale_down: HpaDirection = DEFAULT_DOWN


# --------------------------------------------------------------------------------------------------------------
# Parsing

_TRIGGER_METADATA = {
    "queueName", "queueLength", "activationQueueLength", "queueLengthStrategy", "connectionFromEnv", "connection",
    "accountName", "cloud", "endpointSuffix", "metricName", "queueURL", "queueURLFromEnv",
}


def _metadata_number(f: Fields, name: str, default: float) -> float:
    """KEDA writes metadata values as strings ("5"); accept a number too."""
    value = f.raw.get(name)
    f.read.add(name)
    if value is None:
        return default
    try:
        number = float(value) if isinstance(value, str | int | float) and not isinstance(value, bool) else math.nan
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number < 0:
        f.error(name, f'must be a number >= 0 (KEDA writes it as a string, e.g. "5"), got {value!r}')
        return default
    return number


def _parse_trigger(item: object, path: str, errors: list[FieldError]) -> AzureQueueTrigger | None:
    f = Fields(item, path, errors)
    kind = f.string("type", required=True)
    f.read.update({"name", "authenticationRef"})
    metric_type = f.choice("metricType", ("AverageValue", "Value", "Utilization"), "AverageValue")
    use_cached = f.boolean("useCachedMetrics", False)
    if metric_type == "Utilization":
        f.error("metricType", "Utilization is not supported by the azure-queue trigger")
    if kind and kind != "azure-queue":
        f.error("type", f'the simulator emulates azure-queue triggers only, got "{kind}"')
        f.read.add("metadata")
        f.finish()
        return None
    m = f.child("metadata")
    if not f.has("metadata"):
        f.missing("metadata")
    queue_name = m.string("queueName", required=True)
    queue_length = _metadata_number(m, "queueLength", 5.0)
    if queue_length <= 0:
        m.error("queueLength", f"must be > 0, got {queue_length:g}")
        queue_length = 5.0
    activation = _metadata_number(m, "activationQueueLength", 0.0)
    strategy = str(m.raw.get("queueLengthStrategy", "all")).lower()
    m.read.add("queueLengthStrategy")
    if strategy not in ("all", "visibleonly"):
        m.error("queueLengthStrategy", f'must be "all" or "visibleonly", got {m.raw.get("queueLengthStrategy")!r}')
        strategy = "all"
    for name in m.raw:
        if name not in _TRIGGER_METADATA and name not in m.read:
            m.error(str(name), "unknown field of the azure-queue trigger (KEDA would ignore it: a typo?)")
    m.read.update(m.raw)
    f.finish()
    return AzureQueueTrigger(
        queue_name=queue_name, queue_length=queue_length, activation_queue_length=activation,
        strategy=strategy,  # type: ignore[arg-type]
        metric_type=metric_type,  # type: ignore[arg-type]
        use_cached_metrics=use_cached,
    )


def _parse_direction(f: Fields, default: HpaDirection) -> HpaDirection:
    policies: list[HpaPolicy] = []
    for item, path in f.items("policies", min_items=1 if f.has("policies") else 0):
        p = Fields(item, path, f.errors)
        kind = p.choice("type", ("Pods", "Percent"), "Pods")
        if not p.has("type"):
            p.missing("type")
        value = p.integer("value", minimum=1)
        period = p.integer("periodSeconds", minimum=1, maximum=1800)
        p.finish()
        policies.append(HpaPolicy(kind, value, period))  # type: ignore[arg-type]
    direction = HpaDirection(
        stabilization_window=f.integer("stabilizationWindowSeconds", default.stabilization_window, minimum=0,
                                       maximum=3600),
        policies=tuple(policies) if f.has("policies") else default.policies,
        select_policy=f.choice("selectPolicy", ("Max", "Min", "Disabled"), "Max"),  # type: ignore[arg-type]
    )
    f.finish()
    return direction


def parse_scaled_object(doc: object) -> ScaledObject:
    """A ScaledObject from its YAML document; raises SpecError naming every bad field."""
    errors: list[FieldError] = []
    f = Fields(doc, "", errors)
    api_version = f.string("apiVersion", required=True)
    if api_version and api_version != "keda.sh/v1alpha1":
        f.error("apiVersion", f'must be "keda.sh/v1alpha1", got "{api_version}"')
    kind = f.string("kind", required=True)
    if kind and kind != "ScaledObject":
        f.error("kind", f'must be "ScaledObject", got "{kind}"')
    meta = f.child("metadata")
    name = meta.string("name", required=True)
    meta.read.update(meta.raw)
    s = f.child("spec")
    if not f.has("spec"):
        f.missing("spec")
    target = s.child("scaleTargetRef")
    target.string("name", required=True)
    target.read.update(target.raw)
    if not s.has("scaleTargetRef"):
        s.missing("scaleTargetRef")
    minimum = s.integer("minReplicaCount", 0, minimum=0)
    maximum = s.integer("maxReplicaCount", 100, minimum=1)
    if maximum < minimum:
        s.error("maxReplicaCount", f"must be >= minReplicaCount ({minimum}), got {maximum}")
    idle = s.optional_integer("idleReplicaCount", minimum=0)
    if idle is not None and idle >= minimum:
        s.error("idleReplicaCount", f"must be less than minReplicaCount ({minimum}), got {idle}")
    fallback = s.child("fallback")  # read for validation; the simulated queue never fails, so it never applies
    fallback.integer("failureThreshold", 3, minimum=1)
    fallback.integer("replicas", 0, minimum=0)
    fallback.read.update({"behavior"})
    fallback.finish()
    advanced = s.child("advanced")
    advanced.boolean("restoreToOriginalReplicaCount", False)
    if advanced.has("scalingModifiers"):
        advanced.error("scalingModifiers", "is not supported by the simulator")
    hpa = advanced.child("horizontalPodAutoscalerConfig")
    hpa.string("name", "")
    behavior = hpa.child("behavior")
    scale_up = _parse_direction(behavior.child("scaleUp"), DEFAULT_UP)
    scale_down = _parse_direction(behavior.child("scaleDown"), DEFAULT_DOWN)
    behavior.finish()
    hpa.finish()
    advanced.finish()
    triggers = [
        t for item, path in s.items("triggers", min_items=1) if (t := _parse_trigger(item, path, errors)) is not None
    ]
    if not s.has("triggers"):
        s.missing("triggers")
    scaled = ScaledObject(
        name=name,
        polling_interval=s.integer("pollingInterval", 30, minimum=1),
        cooldown_period=s.integer("cooldownPeriod", 300, minimum=0),
        initial_cooldown_period=s.integer("initialCooldownPeriod", 0, minimum=0),
        min_replicas=minimum, max_replicas=maximum, idle_replicas=idle, triggers=tuple(triggers),
        scale_up=scale_up, scale_down=scale_down,
    )
    s.finish()
    f.read.add("status")
    f.finish()
    if errors:
        raise SpecError(errors)
    return scaled


class ScaledObjectError(Exception):
    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


def load_scaled_objects(path: str) -> list[ScaledObject]:
    """Every ScaledObject in a YAML file (`-`: standard input; other kinds are skipped); raises ScaledObjectError."""
    from controller.rulefiles import read_input

    try:
        docs = list(yaml.safe_load_all(read_input(path)))
    except OSError as exc:
        raise ScaledObjectError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    except yaml.YAMLError:
        raise ScaledObjectError([f"{path}: invalid YAML"]) from None
    found: list[ScaledObject] = []
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
# The emulation


class KedaAutoscaler:
    """KEDA's polling loop and the HPA's sync loop acting on the simulated Deployment."""

    def __init__(self, label: str, scaled: ScaledObject, world: World) -> None:
        self.label = label
        self.scaled = scaled
        self.world = world
        self.hpa_min = max(1, scaled.min_replicas)
        self.hpa_max = scaled.max_replicas
        self.last_active: int | None = None
        self.cached_counts: list[int] = [0] * len(scaled.triggers)
        self.recommendations: list[tuple[int, int]] = []  # (time, raw recommendation)
        self.scale_up_events: list[tuple[int, int]] = []  # (time, pods added)
        self.scale_down_events: list[tuple[int, int]] = []  # (time, pods removed)
        self.keda_next = 0
        self.hpa_next = 0
        self.next_at = 0.0
        self.horizon = max(scaled.scale_up.stabilization_window, scaled.scale_down.stabilization_window)
        self.event_horizon = max(
            (p.period for d in (scaled.scale_up, scaled.scale_down) for p in d.policies), default=0
        )

    def _count(self, trigger: AzureQueueTrigger) -> int:
        world = self.world
        if trigger.strategy == "visibleonly" and world.visible_count < PEEK_LIMIT:
            return world.visible_count
        return world.approximate_count

    async def act(self, t: int) -> None:
        if t >= self.keda_next:
            self.keda_poll(t)
            self.keda_next = t + self.scaled.polling_interval
        if t >= self.hpa_next:
            self.hpa_sync(t)
            self.hpa_next = t + HPA_SYNC
        self.next_at = float(min(self.keda_next, self.hpa_next))

    def keda_poll(self, t: int) -> None:
        scaled = self.scaled
        counts = [self._count(trigger) for trigger in scaled.triggers]
        self.cached_counts = counts
        active = any(c > trigger.activation_queue_length for c, trigger in zip(counts, scaled.triggers, strict=True))
        current = self.world.desired
        if active:
            self.last_active = t
            if current == 0:
                self.world.set_desired(max(1, scaled.min_replicas), t)
            return
        cooled = (self.last_active is None or self.last_active + scaled.cooldown_period < t) and (
            t >= scaled.initial_cooldown_period
        )
        if scaled.idle_replicas is not None:
            if cooled and current > scaled.idle_replicas:
                self.world.set_desired(scaled.idle_replicas, t)
        elif scaled.min_replicas == 0:
            if cooled and current > 0:
                self.world.set_desired(0, t)
        elif current < scaled.min_replicas:
            self.world.set_desired(scaled.min_replicas, t)

    def _metric_proposal(self, trigger: AzureQueueTrigger, total: int, current: int) -> int:
        target = trigger.queue_length
        if trigger.metric_type == "Value":
            ratio = total / target
            if abs(1.0 - ratio) <= HPA_TOLERANCE:
                return current
            return math.ceil(current * ratio)
        ratio = total / (target * current)
        if abs(1.0 - ratio) <= HPA_TOLERANCE:
            return current
        return math.ceil(total / target)

    def hpa_sync(self, t: int) -> None:
        current = self.world.desired
        if current == 0:
            return  # scaling from and to zero is KEDA's
        scaled = self.scaled
        raw = max(
            self._metric_proposal(
                trigger, self.cached_counts[i] if trigger.use_cached_metrics else self._count(trigger), current
            )
            for i, trigger in enumerate(scaled.triggers)
        )
        desired = self.normalize(t, current, raw)
        if desired != current:
            if desired > current:
                self.scale_up_events.append((t, desired - current))
            else:
                self.scale_down_events.append((t, current - desired))
            self.world.set_desired(desired, t)

    def normalize(self, t: int, current: int, raw: int) -> int:
        """The HPA's behavior: stabilization, then rate limits, then the bounds."""
        up, down = self.scaled.scale_up, self.scaled.scale_down
        up_rec = min([raw, *(r for when, r in self.recommendations if when > t - up.stabilization_window)])
        down_rec = max([raw, *(r for when, r in self.recommendations if when > t - down.stabilization_window)])
        self.recommendations = [(w, r) for w, r in self.recommendations if w > t - self.horizon]
        self.recommendations.append((t, raw))
        self.scale_up_events = [e for e in self.scale_up_events if e[0] > t - self.event_horizon]
        self.scale_down_events = [e for e in self.scale_down_events if e[0] > t - self.event_horizon]

        desired = current
        if desired < up_rec:
            desired = up_rec
        if desired > down_rec:
            desired = down_rec
        if desired > current:
            limit = max(self._up_limit(t, current), current)
            desired = min(desired, min(self.hpa_max, limit))
        elif desired < current:
            limit = min(self._down_limit(t, current), current)
            desired = max(desired, max(self.hpa_min, limit))
        return max(self.hpa_min, min(self.hpa_max, desired))

    def _period_start(self, t: int, period: int, current: int) -> int:
        added = sum(n for when, n in self.scale_up_events if when > t - period)
        removed = sum(n for when, n in self.scale_down_events if when > t - period)
        return current - added + removed

    def _up_limit(self, t: int, current: int) -> int:
        direction = self.scaled.scale_up
        if direction.select_policy == "Disabled":
            return current
        limits = []
        for policy in direction.policies:
            start = self._period_start(t, policy.period, current)
            if policy.type == "Pods":
                limits.append(start + policy.value)
            else:
                limits.append(math.ceil(start * (1 + policy.value / 100)))
        return max(limits) if direction.select_policy == "Max" else min(limits)

    def _down_limit(self, t: int, current: int) -> int:
        direction = self.scaled.scale_down
        if direction.select_policy == "Disabled":
            return current
        limits = []
        for policy in direction.policies:
            start = self._period_start(t, policy.period, current)
            if policy.type == "Pods":
                limits.append(start - policy.value)
            else:
                limits.append(math.trunc(start * (1 - policy.value / 100)))
        return min(limits) if direction.select_policy == "Max" else max(limits)
