"""The QueueScaler model: parse and validate a rule into frozen, typed objects. No I/O.

Every invalid field yields a `FieldError` naming its path; `parse_queuescaler` collects all of them and raises
one `SpecError`, so a user sees every mistake at once and never a traceback.

Queue kinds add their own fields: each has a module under `controller.model.sources`, named in its table of kinds,
whose parser reads its fields through the same `Fields` reader, so its errors carry the same paths.
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from controller.model.fields import (
    _DNS_LABEL,
    _DNS_SUBDOMAIN,
    FieldError,
    Fields,
    SpecError,
    _show,
)
from controller.model.sources import SOURCE_KINDS, source_kinds
from controller.model.sources.base import SourceSpec

API_GROUP = "queuescale.io"
API_VERSION = "v1alpha1"
KIND = "QueueScaler"
PAUSED_ANNOTATION = "queuescale.io/paused"

T = TypeVar("T")


# --------------------------------------------------------------------------------------------------------------
# Errors






# --------------------------------------------------------------------------------------------------------------
# Durations







# --------------------------------------------------------------------------------------------------------------
# The field reader








# --------------------------------------------------------------------------------------------------------------
# The model


@dataclass(frozen=True)
class ScaleTargetRef:
    """What gets scaled: any kind with a scale subresource, in the rule's namespace."""

    name: str
    api_version: str = "apps/v1"
    kind: str = "Deployment"






@dataclass(frozen=True)
class StepPolicy:
    """At most `value` pods (or percent of the count at the period's start) per `period` seconds."""

    type: Literal["Pods", "Percent"]
    value: int
    period: float


@dataclass(frozen=True)
class DirectionPolicy:
    """How one direction (up or down) may move. `delay` is for scale-down only."""

    cooldown: float = 0.0
    stabilization_window: float = 0.0
    policies: tuple[StepPolicy, ...] = ()
    select_policy: Literal["Max", "Min", "Disabled"] = "Max"
    delay: float = 0.0


DEFAULT_SCALE_UP = DirectionPolicy(cooldown=0.0, stabilization_window=0.0)
DEFAULT_SCALE_DOWN = DirectionPolicy(cooldown=0.0, stabilization_window=0.0, delay=120.0)


DEFAULT_TARGET_PER_REPLICA = 5.0


@dataclass(frozen=True)
class Policy:
    """How a count becomes a replica count.

    Optional knobs (None) get values that depend on the mode; `controller.policy.sizing` derives them. A rule that
    states `targetWaitSeconds` and `serviceTime` (or `throughputPerReplica`) needs nothing else.
    """

    target_per_replica: float | None = None
    activation_threshold: float = 0.0
    tolerance: float = 0.1
    lookahead: float | None = None
    trend_window: float = 60.0
    throughput_per_replica: float | None = None
    service_time: float | None = None
    messages_per_replica: int | None = None
    target_wait: float | None = None
    drain_time: float | None = None
    startup_time: float | None = None  # how long a new replica takes to be ready; unset: measured, or a default
    scale_to_zero_delay: float | None = None  # unset: derived (controller.policy.scale_to_zero_delay)
    scale_up: DirectionPolicy = DEFAULT_SCALE_UP
    scale_down: DirectionPolicy = DEFAULT_SCALE_DOWN


@dataclass(frozen=True)
class Fallback:
    """What to do after `failure_threshold` consecutive failed polls: hold, or raise to at least `replicas`."""

    failure_threshold: int = 3
    mode: Literal["hold", "fixed"] = "hold"
    replicas: int | None = None


WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


@dataclass(frozen=True)
class Schedule:
    """A weekly time window that raises the minimum and/or caps the maximum. Constraints always win."""

    name: str
    days: frozenset[int]  # 0 = Monday, as datetime.weekday()
    start_minute: int  # minutes after local midnight
    end_minute: int  # 1..1440; a window with end <= start runs past midnight into the next day
    time_zone: str = "UTC"
    min_replicas: int | None = None
    max_replicas: int | None = None

    def is_active(self, now: float) -> bool:
        """Whether `now` (seconds since the epoch) falls inside the window, in the schedule's time zone."""
        local = dt.datetime.fromtimestamp(now, zoneinfo.ZoneInfo(self.time_zone))
        minute = local.hour * 60 + local.minute
        today = local.weekday()
        if self.start_minute < self.end_minute:
            return today in self.days and self.start_minute <= minute < self.end_minute
        yesterday = (today - 1) % 7
        return (today in self.days and minute >= self.start_minute) or (
            yesterday in self.days and minute < self.end_minute
        )


@dataclass(frozen=True)
class QueueScalerSpec:
    scale_target_ref: ScaleTargetRef
    max_replicas: int
    sources: tuple[SourceSpec, ...]
    min_replicas: int = 0
    polling_interval: float = 10.0
    aggregation: Literal["sum", "max"] = "sum"
    policy: Policy = field(default_factory=Policy)
    fallback: Fallback = field(default_factory=Fallback)
    schedules: tuple[Schedule, ...] = ()
    paused: bool = False


@dataclass(frozen=True)
class QueueScaler:
    """A whole rule: identity plus spec."""

    name: str
    namespace: str
    spec: QueueScalerSpec
    generation: int = 0
    uid: str = ""
    paused_by_annotation: bool = False

    @property
    def paused(self) -> bool:
        return self.spec.paused or self.paused_by_annotation

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


# --------------------------------------------------------------------------------------------------------------
# Queue kinds

# --------------------------------------------------------------------------------------------------------------
# Parsing

_HH_MM = re.compile(r"([01]\d|2[0-3]):([0-5]\d)|24:00")


def _parse_target_ref(f: Fields) -> ScaleTargetRef:
    ref = ScaleTargetRef(
        name=f.string("name", required=True, pattern=_DNS_SUBDOMAIN, pattern_help="must be a DNS subdomain name",
                      max_length=253),
        api_version=f.string("apiVersion", "apps/v1", pattern=r"([a-z0-9.-]+/)?v\d+((alpha|beta)\d+)?",
                             pattern_help="must be group/version or version"),
        kind=f.string("kind", "Deployment", pattern=r"[A-Z][A-Za-z0-9]*", pattern_help="must be a Kind name"),
    )
    f.finish()
    return ref


def _parse_source(item: object, path: str, errors: list[FieldError]) -> SourceSpec | None:
    f = Fields(item, path, errors)
    type_name = f.string("type", required=True)
    weight = f.number("weight", 1.0, exclusive_minimum=0.0)
    if not type_name:
        return None
    parse = SOURCE_KINDS.get(type_name)
    if parse is None:
        known = ", ".join(source_kinds())
        f.error("type", f'unknown queue kind "{type_name}" (known: {known})')
        return None
    source = parse(f, weight)
    f.finish()
    return source


def _parse_direction(f: Fields, default: DirectionPolicy, *, allow_delay: bool = False) -> DirectionPolicy:
    policies: list[StepPolicy] = []
    for item, path in f.items("policies", max_items=10):
        p = Fields(item, path, f.errors)
        kind = p.choice("type", ("Pods", "Percent"), "Pods")
        if not p.has("type"):
            p.missing("type")
        value = p.integer("value", minimum=1)
        period = p.duration("period", minimum=1.0)
        p.finish()
        policies.append(StepPolicy(type=kind, value=value, period=period))  # type: ignore[arg-type]
    direction = DirectionPolicy(
        cooldown=f.duration("cooldown", default.cooldown),
        stabilization_window=f.duration("stabilizationWindow", default.stabilization_window),
        policies=tuple(policies) if f.has("policies") else default.policies,
        select_policy=f.choice("selectPolicy", ("Max", "Min", "Disabled"), default.select_policy),  # type: ignore[arg-type]
        delay=f.duration("delay", default.delay) if allow_delay else 0.0,
    )
    f.finish()
    return direction


def _parse_policy(f: Fields) -> Policy:
    policy = Policy(
        target_per_replica=f.optional_number("targetPerReplica", exclusive_minimum=0.0),
        activation_threshold=f.number("activationThreshold", Policy.activation_threshold, minimum=0.0),
        tolerance=f.number("tolerance", Policy.tolerance, minimum=0.0, maximum=1.0),
        lookahead=f.optional_duration("lookahead"),
        trend_window=f.duration("trendWindow", Policy.trend_window, minimum=1.0),
        throughput_per_replica=f.optional_number("throughputPerReplica", exclusive_minimum=0.0),
        service_time=f.optional_duration("serviceTime", minimum=0.001),
        messages_per_replica=f.optional_integer("messagesPerReplica", minimum=1),
        target_wait=f.optional_duration("targetWaitSeconds", minimum=1.0),
        drain_time=f.optional_duration("drainTime", minimum=1.0),
        startup_time=f.optional_duration("startupTime"),
        scale_to_zero_delay=f.optional_duration("scaleToZeroDelay"),
        scale_up=_parse_direction(f.child("scaleUp"), DEFAULT_SCALE_UP),
        scale_down=_parse_direction(f.child("scaleDown"), DEFAULT_SCALE_DOWN, allow_delay=True),
    )
    if policy.service_time is not None and policy.throughput_per_replica is not None:
        f.error("serviceTime", "cannot be combined with throughputPerReplica: give one of them")
    if policy.target_wait is not None and policy.service_time is None and policy.throughput_per_replica is None:
        f.error("targetWaitSeconds", "needs serviceTime or throughputPerReplica: how long a message takes")
    f.finish()
    return policy


def _parse_fallback(f: Fields) -> Fallback:
    mode = f.choice("mode", ("hold", "fixed"), "hold")
    fallback = Fallback(
        failure_threshold=f.integer("failureThreshold", Fallback.failure_threshold, minimum=1),
        mode=mode,  # type: ignore[arg-type]
        replicas=f.optional_integer("replicas", minimum=0),
    )
    if mode == "fixed" and fallback.replicas is None:
        f.error("replicas", 'is required when mode is "fixed"')
    if mode == "hold" and fallback.replicas is not None:
        f.error("replicas", 'applies only when mode is "fixed"')
    f.finish()
    return fallback


def _parse_clock(f: Fields, name: str) -> int:
    text = f.string(name, required=True)
    if not text:
        return 0
    if not _HH_MM.fullmatch(text):
        f.error(name, f'must be a time of day "HH:MM" (00:00 to 24:00), got {_show(text)}')
        return 0
    hours, minutes = text.split(":")
    return int(hours) * 60 + int(minutes)


def _parse_schedule(item: object, path: str, errors: list[FieldError]) -> Schedule:
    f = Fields(item, path, errors)
    name = f.string("name", required=True, pattern=_DNS_LABEL, pattern_help="must be a lowercase DNS label",
                    max_length=63)
    days: set[int] = set()
    for day, day_path in f.items("days", max_items=7):
        if day not in WEEKDAYS:
            errors.append(FieldError(day_path, f"must be one of {', '.join(WEEKDAYS)}, got {_show(day)}"))
        else:
            days.add(WEEKDAYS.index(str(day)))
    if not f.has("days"):
        days = set(range(7))
    start = _parse_clock(f, "start")
    end = _parse_clock(f, "end")
    if start == 24 * 60:
        f.error("start", 'must be before 24:00, got "24:00"')
    if f.has("start") and f.has("end") and start == end:
        f.error("end", "must differ from start (use 00:00 to 24:00 for a whole day)")
    time_zone = f.string("timeZone", "UTC")
    try:
        zoneinfo.ZoneInfo(time_zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        f.error("timeZone", f'must be an IANA time zone such as "Europe/Paris", got {_show(time_zone)}')
        time_zone = "UTC"
    schedule = Schedule(
        name=name,
        days=frozenset(days),
        start_minute=start,
        end_minute=end,
        time_zone=time_zone,
        min_replicas=f.optional_integer("minReplicas", minimum=0),
        max_replicas=f.optional_integer("maxReplicas", minimum=0),
    )
    if schedule.min_replicas is None and schedule.max_replicas is None:
        f.error("", "must set minReplicas, maxReplicas or both")
    if (
        schedule.min_replicas is not None
        and schedule.max_replicas is not None
        and schedule.min_replicas > schedule.max_replicas
    ):
        f.error("minReplicas", f"must be <= maxReplicas ({schedule.max_replicas}), got {schedule.min_replicas}")
    f.finish()
    return schedule


def parse_spec(raw: object, path: str = "spec", errors: list[FieldError] | None = None) -> QueueScalerSpec:
    """Parse the `spec` of a QueueScaler; raises SpecError with every problem found."""
    own_errors: list[FieldError] = [] if errors is None else errors
    f = Fields(raw, path, own_errors)
    target = _parse_target_ref(f.child("scaleTargetRef"))
    if not f.has("scaleTargetRef"):
        f.missing("scaleTargetRef")
    min_replicas = f.integer("minReplicas", 0, minimum=0)
    max_replicas = f.integer("maxReplicas", minimum=1)
    if f.has("maxReplicas") and f.has("minReplicas") and 1 <= max_replicas < min_replicas:
        f.error("maxReplicas", f"must be >= minReplicas ({min_replicas}), got {max_replicas}")
    sources = []
    for item, item_path in f.items("sources", min_items=1, max_items=16):
        source = _parse_source(item, item_path, own_errors)
        if source is not None:
            sources.append(source)
    if not f.has("sources"):
        f.missing("sources")
    schedules = [_parse_schedule(item, item_path, own_errors) for item, item_path in f.items("schedules", max_items=32)]
    names = [s.name for s in schedules]
    for duplicate in sorted({n for n in names if names.count(n) > 1 and n}):
        f.error("schedules", f'has two schedules named "{duplicate}"')
    for index, schedule in enumerate(schedules):
        if schedule.min_replicas is not None and schedule.min_replicas > max_replicas:
            f.error(f"schedules[{index}].minReplicas",
                    f"must be <= spec maxReplicas ({max_replicas}), got {schedule.min_replicas}")
    spec = QueueScalerSpec(
        scale_target_ref=target,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        polling_interval=f.duration("pollingInterval", 10.0, minimum=1.0),
        sources=tuple(sources),
        aggregation=f.choice("aggregation", ("sum", "max"), "sum"),  # type: ignore[arg-type]
        policy=_parse_policy(f.child("policy")),
        fallback=_parse_fallback(f.child("fallback")),
        schedules=tuple(schedules),
        paused=f.boolean("paused", False),
    )
    if spec.fallback.replicas is not None and spec.fallback.replicas > max_replicas:
        f.error("fallback.replicas", f"must be <= maxReplicas ({max_replicas}), got {spec.fallback.replicas}")
    f.finish()
    if errors is None and own_errors:
        raise SpecError(own_errors)
    return spec


def parse_queuescaler(doc: object, *, default_namespace: str = "default") -> QueueScaler:
    """Parse a whole QueueScaler object (as read from YAML or the API); raises SpecError with every problem."""
    if not isinstance(doc, Mapping):
        raise SpecError([FieldError("document", f"must be a {KIND} object, got {_show(doc)}")])
    errors: list[FieldError] = []
    f = Fields(doc, "", errors)
    api_version = f.string("apiVersion", required=True)
    if api_version and api_version != f"{API_GROUP}/{API_VERSION}":
        f.error("apiVersion", f'must be "{API_GROUP}/{API_VERSION}", got {_show(api_version)}')
    kind = f.string("kind", required=True)
    if kind and kind != KIND:
        f.error("kind", f'must be "{KIND}", got {_show(kind)}')
    meta = f.child("metadata")
    name = meta.string("name", required=True, pattern=_DNS_SUBDOMAIN, pattern_help="must be a DNS subdomain name",
                       max_length=253)
    namespace = meta.string("namespace", default_namespace, pattern=_DNS_LABEL,
                            pattern_help="must be a DNS label", max_length=63)
    annotations = meta.raw.get("annotations")
    paused_by_annotation = isinstance(annotations, Mapping) and annotations.get(PAUSED_ANNOTATION) == "true"
    generation = meta.raw.get("generation")
    uid = meta.raw.get("uid")
    meta.read.update(meta.raw)  # the rest of metadata belongs to Kubernetes
    f.read.add("status")
    spec = parse_spec(f.child("spec").raw, "spec", errors) if f.has("spec") else None
    f.read.add("spec")
    if spec is None:
        f.missing("spec")
    f.finish()
    if errors or spec is None:
        raise SpecError(errors)
    return QueueScaler(
        name=name,
        namespace=namespace,
        spec=spec,
        generation=generation if isinstance(generation, int) else 0,
        uid=uid if isinstance(uid, str) else "",
        paused_by_annotation=paused_by_annotation,
    )


def rule_label(doc: object) -> str:
    """The best name for a document that may not parse: `metadata.name`, or "<unnamed>"."""
    if isinstance(doc, Mapping):
        meta = doc.get("metadata")
        if isinstance(meta, Mapping) and isinstance(meta.get("name"), str) and meta["name"]:
            return str(meta["name"])
    return "<unnamed>"
