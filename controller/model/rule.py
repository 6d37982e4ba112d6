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
from dataclasses import dataclass, field, replace
from typing import Literal, get_args

from controller.model.fields import FieldError, Fields, SpecError, _show
from controller.model.schema import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    Boolean,
    Choice,
    Duration,
    Integer,
    ListOf,
    Number,
    Object,
    Rule,
    Text,
)
from controller.model.sources import SOURCE, SOURCE_KINDS, SOURCE_TYPE, source_kinds
from controller.model.sources.base import SOURCE_WEIGHT, SourceSpec

API_GROUP = "queuescale.io"
API_VERSION = "v1alpha1"
KIND = "QueueScaler"
PAUSED_ANNOTATION = "queuescale.io/paused"

# The choices of the model's fields, each written once: the parser returns them typed, the CRD lists them.
Aggregation = Literal["sum", "max"]
StepType = Literal["Pods", "Percent"]
SelectPolicy = Literal["Max", "Min", "Disabled"]
FallbackMode = Literal["hold", "fixed"]
ScaleInAction = Literal["kill", "drain", "release"]
RecurringBursts = Literal["ready", "ignore"]
Weekday = Literal["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]

# --------------------------------------------------------------------------------------------------------------
# The model


@dataclass(frozen=True)
class ScaleTargetRef:
    """What gets scaled: any kind with a scale subresource, in the rule's namespace."""

    name: str
    api_version: str = "apps/v1"
    kind: str = "Deployment"


@dataclass(frozen=True)
class InFlightEndpoint:
    """Where each worker pod says how many messages it holds: `GET http://<pod IP>:<port><path>` answers a
    non-negative integer. Before a scale-in the operator writes each pod's count to its
    `controller.kubernetes.io/pod-deletion-cost`, so the ReplicaSet removes the least busy pods first
    (controller/kube/inflight.py)."""

    port: str  # the name of a container port on the pods
    path: str = "/in-flight"


@dataclass(frozen=True)
class StepPolicy:
    """At most `value` pods (or percent of the count at the period's start) per `period` seconds: the HPA's
    HPAScalingPolicy, so the KEDA model (controller/keda/model.py) uses this one too."""

    type: StepType
    value: int
    period: float


@dataclass(frozen=True)
class DirectionPolicy:
    """How one direction (up or down) may move. `delay` is for scale-down only; None: derived
    (controller.policy.scale_down_delay)."""

    cooldown: float = 0.0
    stabilization_window: float = 0.0
    policies: tuple[StepPolicy, ...] = ()
    select_policy: SelectPolicy = "Max"
    delay: float | None = 0.0


DEFAULT_SCALE_UP = DirectionPolicy()
DEFAULT_SCALE_DOWN = DirectionPolicy(delay=None)
# What an unset scaleDown.delay is, unless long jobs call for more (controller.policy.scale_down_delay).
DEFAULT_SCALE_DOWN_DELAY = 120.0


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
    # What a worker does when a scale-in stops it: dies with its messages (kill, assumed when unknown), finishes
    # them first (drain), or hands them back (release). A scale-in that destroys nothing can come sooner.
    on_scale_in: ScaleInAction = "kill"
    # Where a burst on idle capacity misses targetWaitSeconds: start replicas before a burst seen recurring at a
    # steady period (ready), or only react to the count (ignore).
    recurring_bursts: RecurringBursts = "ready"

    @property
    def learns_throughput(self) -> bool:
        """Rate mode with its own target: the policy checks the stated throughput against drains and waits (a
        `targetPerReplica` keeps KEDA's meaning, a count per replica, and learns nothing)."""
        return self.target_per_replica is None and (
            self.service_time is not None or self.throughput_per_replica is not None)


@dataclass(frozen=True)
class Fallback:
    """What to do after `failure_threshold` consecutive failed polls: hold, or raise to at least `replicas`."""

    failure_threshold: int = 3
    mode: FallbackMode = "hold"
    replicas: int | None = None


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
    aggregation: Aggregation = "sum"
    policy: Policy = field(default_factory=Policy)
    fallback: Fallback = field(default_factory=Fallback)
    schedules: tuple[Schedule, ...] = ()
    paused: bool = False
    in_flight: InFlightEndpoint | None = None

    @property
    def history_seconds(self) -> float:
        """How far back the polls kept in the process reach: the trend window, and where the rule learns its
        throughput from waits (`targetWaitSeconds` in rate mode) an objective and a poll, so that a front message
        that waited up to the objective is read against the poll before it was put (docs/policy.md, *A wrong
        serviceTime*)."""
        policy = self.policy
        if policy.learns_throughput and policy.target_wait is not None:
            return max(policy.trend_window, policy.target_wait + self.polling_interval)
        return policy.trend_window


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
# The fields, declared once: the parsers below read them, controller.model.generate writes the CRD and the
# reference tables from them.

TARGET_NAME = Text("name", required=True, max_length=253, pattern=DNS_SUBDOMAIN,
                   pattern_help="must be a DNS subdomain name", note="a DNS subdomain", doc="the target's name")
TARGET_API_VERSION = Text("apiVersion", default=ScaleTargetRef.api_version, max_length=253,
                          pattern=r"([a-z0-9.-]+/)?v[0-9]+((alpha|beta)[0-9]+)?",
                          pattern_help="must be group/version or version", note="`group/version` or `version`",
                          doc="the target's API version")
TARGET_KIND = Text("kind", default=ScaleTargetRef.kind, max_length=63, pattern=r"[A-Z][A-Za-z0-9]*",
                   pattern_help="must be a Kind name", note="CamelCase",
                   doc="the target's kind; the shipped RBAC allows `deployments/scale` and `statefulsets/scale` (see "
                       "[operations.md](operations.md#rbac))")
SCALE_TARGET_REF = Object(
    "scaleTargetRef", required=True, fields=(TARGET_NAME, TARGET_API_VERSION, TARGET_KIND),
    description="What gets scaled - any kind with a scale subresource, in the rule's namespace.",
    doc="what gets scaled: any kind with a scale subresource, in the rule's namespace")

IN_FLIGHT_PORT = Text(
    "port", required=True, max_length=15, pattern=r"[a-z0-9]([-a-z0-9]*[a-z0-9])?",
    pattern_help="must be a container port name (lower-case letters, digits and '-')", note="a container port name",
    doc="the name of a container port on the target's pods (`spec.containers[].ports[].name`) that serves the count")
IN_FLIGHT_PATH = Text("path", default=InFlightEndpoint.path, max_length=256, pattern=r"/[!-~]*",
                      pattern_help="must be a URL path starting with /", note="starts with `/`",
                      doc="the path that answers the pod's in-flight count, a non-negative integer as plain text")
IN_FLIGHT = Object(
    "inFlight", fields=(IN_FLIGHT_PORT, IN_FLIGHT_PATH),
    description="Where each worker pod serves its in-flight count: before a scale-in the operator writes the counts "
                "to controller.kubernetes.io/pod-deletion-cost so the least busy pods are removed.",
    doc="where each of the target's pods answers how many messages it holds (`GET http://<pod IP>:<port><path>`); "
        "before a scale-in the operator writes each count to the pod's `controller.kubernetes.io/pod-deletion-cost`, "
        "so the ReplicaSet removes the least busy pods first. Not for a StatefulSet (it removes its highest "
        "ordinals); needs the chart's `rbac.pods` (get, list and patch on pods; see [policy.md](policy.md), "
        "*Telling the ReplicaSet which pods are idle*)")

MIN_REPLICAS = Integer("minReplicas", default=0, minimum=0, int32=True, note="≤ `maxReplicas`",
                       doc="the floor; 0 allows scaling to zero")
MAX_REPLICAS = Integer("maxReplicas", required=True, minimum=1, int32=True, note="≥ `minReplicas`",
                       doc="the ceiling")
POLLING_INTERVAL = Duration("pollingInterval", default=10.0, minimum=1.0,
                            doc="how often the queues are polled and a decision is made")
SOURCES = ListOf("sources", required=True, items=SOURCE, min_items=1, max_items=16,
                 doc="the queues whose counts drive the rule (below)")
AGGREGATION: Choice[Aggregation] = Choice(
    "aggregation", choices=get_args(Aggregation), default="sum",
    doc="how the sources' weighted counts combine into the rule's count")

TARGET_PER_REPLICA = Number(
    "targetPerReplica", minimum=0, exclusive_minimum=True,
    description="Messages per replica. Default 5 (KEDA's queueLength) without serviceTime or throughputPerReplica; "
                "derived from targetWaitSeconds with them. No schema default: a value written here overrides the "
                "derived one.",
    doc="the count one replica is sized for: the need is `count / targetPerReplica`; 5 when unset in count mode, "
        "derived from `targetWaitSeconds` in rate mode")
ACTIVATION_THRESHOLD = Number("activationThreshold", default=Policy.activation_threshold, minimum=0,
                              doc="at zero replicas, wake only when the count is above this")
TOLERANCE = Number("tolerance", default=Policy.tolerance, minimum=0, maximum=1,
                   doc="no change while the need is within this fraction of the current count")
LOOKAHEAD = Duration(
    "lookahead",
    description="Project a growing backlog this far ahead (pod start-up). Default 0s, or 30s with serviceTime or "
                "throughputPerReplica; no schema default so the mode can choose.",
    doc="project a growing queue this far ahead (e.g. the pods' start-up time); 0s when unset, 30s in rate mode")
TREND_WINDOW = Duration("trendWindow", default=Policy.trend_window, minimum=1.0,
                        doc="the observations the trend (messages/s) is fitted on")
THROUGHPUT_PER_REPLICA = Number(
    "throughputPerReplica", minimum=0, exclusive_minimum=True,
    description="Messages per second one replica completes (or give serviceTime).",
    doc="messages per second one replica completes; switches to rate mode; not with `serviceTime`")
SERVICE_TIME = Duration(
    "serviceTime", minimum=0.001, description="How long one message takes to process, on average.",
    doc="how long one message takes to process; switches to rate mode; not with `throughputPerReplica`")
MESSAGES_PER_REPLICA = Integer(
    "messagesPerReplica", minimum=1, int32=True,
    description="Messages one replica works on at once; its in-flight work keeps it from scale-in.",
    doc="messages one replica works on at once (1 in rate mode); its in-flight work keeps it from scale-in")
TARGET_WAIT = Duration(
    "targetWaitSeconds", minimum=1.0,
    description="How long a message may wait; with serviceTime it is all the policy needs.",
    doc="how long a message may wait; needs `serviceTime` or `throughputPerReplica`, and with them is all a rule "
        "needs (rate mode, see [policy.md](policy.md))")
DRAIN_TIME = Duration(
    "drainTime", minimum=1.0,
    description="Clear a backlog within this time. Default half of targetWaitSeconds, or 1m; no schema default so "
                "it can be derived.",
    doc="rate mode: clear a backlog within this time; half of `targetWaitSeconds` when unset, else 1m")
STARTUP_TIME = Duration(
    "startupTime",
    description="How long a new replica takes to be ready. Unset: what the operator measured (replicas asked to "
                "ready), else 30s. The SLO budget subtracts it.",
    doc="how long a new replica takes to be ready; rate mode with `targetWaitSeconds` subtracts it from the wait "
        "budget; unset: what the operator measured (replicas asked → ready, `status.startupSeconds`), else "
        "`lookahead`, else 30s")
SCALE_TO_ZERO_DELAY = Duration(
    "scaleToZeroDelay",
    description="Inactive this long before going to zero. Default 5m, or in rate mode with targetWaitSeconds, when "
                "a poll, the start-up and one serviceTime fit in what drainTime leaves of it, the start-up time (at "
                "least two polls); no schema default so it can be derived.",
    doc="inactive this long before going to zero (when `minReplicas` is 0); unset: 5m, or in rate mode with "
        "`targetWaitSeconds`, when a poll plus the start-up time plus one `serviceTime` fit in what `drainTime` "
        "leaves of it, the start-up time (at least two polling intervals; see [policy.md](policy.md))")

STEP_TYPE: Choice[StepType] = Choice(
    "type", choices=get_args(StepType), required=True,
    doc="a number of pods, or a percentage of the count at the start of the period")
STEP_VALUE = Integer("value", required=True, minimum=1, int32=True, doc="how many pods, or what percentage")
STEP_PERIOD = Duration("period", required=True, minimum=1.0, doc="the window the limit applies to")
STEP_POLICIES = ListOf(
    "policies", max_items=10, items=Object("", fields=(STEP_TYPE, STEP_VALUE, STEP_PERIOD)),
    doc="step limits, as HPA behavior policies; none means one step to the need")
SELECT_POLICY: Choice[SelectPolicy] = Choice(
    "selectPolicy", choices=get_args(SelectPolicy), default=DirectionPolicy.select_policy,
    doc="take the policy allowing the biggest (`Max`) or smallest (`Min`) change; `Disabled` forbids scaling up")
COOLDOWN = Duration("cooldown", default=DirectionPolicy.cooldown,
                    doc="no scale-up within this time of the last scale-up")
STABILIZATION_WINDOW = Duration("stabilizationWindow", default=DirectionPolicy.stabilization_window,
                                doc="go up only to the lowest recommendation of this window")
SCALE_DOWN_DELAY = Duration(
    "delay",
    description="Release capacity once unneeded this long, in one step. Default 2m; in rate mode with "
                "targetWaitSeconds, two polls when onScaleIn is drain and a cold start fits in targetWaitSeconds, "
                "else one serviceTime when it is longer than what drainTime leaves of it; no schema default so it "
                "can be derived.",
    doc="release capacity only once unneeded this long, then in one step to the most this time asked for; "
        "unset: 2m, or in rate mode with `targetWaitSeconds`: two polling intervals when `onScaleIn` is `drain` "
        "and a poll plus the start-up fit in `targetWaitSeconds` (a released replica can be started again in time, "
        "and stops nothing; see [policy.md](policy.md)), else one `serviceTime` when it is longer than what "
        "`drainTime` leaves of it (a job stopped by a scale-in would then miss the objective)")
ON_SCALE_IN: Choice[ScaleInAction] = Choice(
    "onScaleIn", choices=get_args(ScaleInAction), default=Policy.on_scale_in,
    doc="what a worker does when a scale-in stops it (SIGTERM): `kill`, it dies and its messages wait out their "
        "visibility timeout (assumed: the worst case); `drain`, it takes no new message and finishes the ones it "
        "holds within `terminationGracePeriodSeconds`; `release`, it makes them visible again at once. With "
        "`drain`, capacity is released sooner (`scaleDown.delay`)")
RECURRING_BURSTS: Choice[RecurringBursts] = Choice(
    "recurringBursts", choices=get_args(RecurringBursts), default=Policy.recurring_bursts,
    doc="where a poll, the start-up and one `serviceTime` exceed `targetWaitSeconds` (a burst on idle capacity "
        "misses it): `ready`, bursts seen three times in a row at one period are expected again, and the replicas "
        "that clear the largest within `targetWaitSeconds` are started a start-up and a poll before the next is "
        "due; `ignore`, the rule only reacts to the count (see [policy.md](policy.md), *Bursts that recur*)")
SCALE_UP = Object("scaleUp", defaulted=True, fields=(COOLDOWN, STABILIZATION_WINDOW, STEP_POLICIES, SELECT_POLICY),
                  doc="limits on going up")
# scaleDown's fields are scaleUp's, but for the words of the reference, and delay.
SCALE_DOWN = Object("scaleDown", defaulted=True, doc="limits on going down", fields=(
    replace(COOLDOWN, doc="no scale-down within this time of the last scale in either direction"),
    replace(STABILIZATION_WINDOW, doc="go down only to the highest recommendation of this window"),
    SCALE_DOWN_DELAY,
    replace(STEP_POLICIES, doc="step limits, as for `scaleUp`", items=Object("", fields=(
        replace(STEP_TYPE, doc="as for `scaleUp`"), replace(STEP_VALUE, doc="as for `scaleUp`"),
        replace(STEP_PERIOD, doc="as for `scaleUp`")))),
    replace(SELECT_POLICY, doc="as for `scaleUp`; `Disabled` forbids scaling down"),
))
POLICY = Object(
    "policy", defaulted=True, doc="how a count becomes a replica count (below)",
    fields=(TARGET_WAIT, SERVICE_TIME, MESSAGES_PER_REPLICA, TARGET_PER_REPLICA, ACTIVATION_THRESHOLD, TOLERANCE,
            LOOKAHEAD, TREND_WINDOW, THROUGHPUT_PER_REPLICA, DRAIN_TIME, STARTUP_TIME, SCALE_TO_ZERO_DELAY, SCALE_UP,
            SCALE_DOWN, ON_SCALE_IN, RECURRING_BURSTS),
    rules=(Rule("!(has(self.serviceTime) && has(self.throughputPerReplica))",
                "serviceTime cannot be combined with throughputPerReplica: give one of them", ".serviceTime"),
           Rule("!has(self.targetWaitSeconds) || has(self.serviceTime) || has(self.throughputPerReplica)",
                "targetWaitSeconds needs serviceTime or throughputPerReplica", ".targetWaitSeconds")))

FAILURE_THRESHOLD = Integer(
    "failureThreshold", default=Fallback.failure_threshold, minimum=1, int32=True,
    doc="failed polls in a row before the fallback applies; before it the count is held")
FALLBACK_MODE: Choice[FallbackMode] = Choice(
    "mode", choices=get_args(FallbackMode), default=Fallback.mode,
    doc="`hold` keeps the current count; `fixed` raises to at least `replicas`, never lowers")
FALLBACK_REPLICAS = Integer("replicas", minimum=0, int32=True,
                            note="≤ `maxReplicas`; required with `fixed`, refused with `hold`",
                            doc="the floor while in fallback")
FALLBACK = Object(
    "fallback", defaulted=True, fields=(FAILURE_THRESHOLD, FALLBACK_MODE, FALLBACK_REPLICAS),
    doc="what happens when polls keep failing (below)",
    rules=(Rule("self.mode != 'fixed' || has(self.replicas)", 'replicas is required when mode is "fixed"',
                ".replicas"),
           Rule("self.mode != 'hold' || !has(self.replicas)", 'replicas applies only when mode is "fixed"',
                ".replicas")))

WEEKDAYS: tuple[Weekday, ...] = get_args(Weekday)
_CLOCK = r"(([01][0-9]|2[0-3]):[0-5][0-9]|24:00)"
SCHEDULE_NAME = Text("name", required=True, max_length=63, pattern=DNS_LABEL,
                     pattern_help="must be a lowercase DNS label", note="unique in the rule; a DNS label",
                     doc="names the window in messages")
SCHEDULE_DAYS = ListOf("days", max_items=7, items=Choice[Weekday]("", choices=WEEKDAYS),
                       description="Days the window starts on (all days when absent).",
                       doc="days the window starts on; all days when absent")
SCHEDULE_START = Text("start", required=True, max_length=5, pattern=_CLOCK,
                      pattern_help='must be a time of day "HH:MM" (00:00 to 24:00)',
                      description='Local time of day "HH:MM" (00:00 to 24:00).', note="`HH:MM`, 00:00 to 23:59",
                      doc="local start time")
SCHEDULE_END = replace(SCHEDULE_START, name="end", note="`HH:MM`, 00:00 to 24:00, ≠ `start`",
                       doc="local end time; an end before the start runs past midnight")
SCHEDULE_TIME_ZONE = Text("timeZone", default=Schedule.time_zone, max_length=64,
                          description='An IANA time zone such as "Europe/Paris".', note="an IANA name",
                          doc="e.g. `Europe/Paris`")
SCHEDULE_MIN_REPLICAS = Integer("minReplicas", minimum=0, int32=True,
                                note="≤ the window's `maxReplicas` and the spec's",
                                doc="raises the floor while the window is open")
SCHEDULE_MAX_REPLICAS = Integer("maxReplicas", minimum=0, int32=True, doc="caps the ceiling while the window is open")
SCHEDULES = ListOf(
    "schedules", max_items=32, map_keys=("name",), doc="time windows that raise the floor or cap the ceiling (below)",
    items=Object("", fields=(SCHEDULE_NAME, SCHEDULE_DAYS, SCHEDULE_START, SCHEDULE_END, SCHEDULE_TIME_ZONE,
                             SCHEDULE_MIN_REPLICAS, SCHEDULE_MAX_REPLICAS), rules=(
        Rule("has(self.minReplicas) || has(self.maxReplicas)", "must set minReplicas, maxReplicas or both"),
        Rule("!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
             "minReplicas must be <= maxReplicas", ".minReplicas"),
        Rule("self.start != self.end", "end must differ from start (use 00:00 to 24:00 for a whole day)", ".end"),
        Rule("self.start != '24:00'", "start must be before 24:00", ".start"))))
PAUSED = Boolean("paused", default=QueueScalerSpec.paused,
                 doc='`true`: poll and report, never scale. The annotation `queuescale.io/paused: "true"` does the '
                     "same without touching the spec")

SPEC = Object(
    "spec", required=True,
    fields=(SCALE_TARGET_REF, MIN_REPLICAS, MAX_REPLICAS, POLLING_INTERVAL, SOURCES, AGGREGATION, POLICY, FALLBACK,
            SCHEDULES, PAUSED, IN_FLIGHT),
    rules=(Rule("!has(self.inFlight) || self.scaleTargetRef.kind != 'StatefulSet'",
                "inFlight does not apply to a StatefulSet: it removes its highest ordinals whatever their cost",
                ".inFlight"),
           Rule("self.minReplicas <= self.maxReplicas", "maxReplicas must be >= minReplicas", ".maxReplicas",
                "FieldValueInvalid"),
           Rule("!has(self.fallback.replicas) || self.fallback.replicas <= self.maxReplicas",
                "fallback.replicas must be <= maxReplicas", ".fallback.replicas"),
           Rule("!has(self.schedules) || self.schedules.all(s, !has(s.minReplicas) || s.minReplicas <= "
                "self.maxReplicas)", "a schedule's minReplicas must be <= spec maxReplicas", ".schedules")))
"""The QueueScaler's spec, every field of it: what the CRD's schema is generated from."""


# --------------------------------------------------------------------------------------------------------------
# Parsing

_HH_MM = re.compile(_CLOCK)


def _parse_target_ref(f: Fields) -> ScaleTargetRef:
    ref = ScaleTargetRef(name=f.string(TARGET_NAME), api_version=f.string(TARGET_API_VERSION),
                         kind=f.string(TARGET_KIND))
    f.finish()
    return ref


def _parse_in_flight(f: Fields) -> InFlightEndpoint:
    endpoint = InFlightEndpoint(port=f.string(IN_FLIGHT_PORT), path=f.string(IN_FLIGHT_PATH))
    f.finish()
    return endpoint


def _parse_source(item: object, path: str, errors: list[FieldError]) -> SourceSpec | None:
    f = Fields(item, path, errors)
    type_name = f.string(SOURCE_TYPE.name, required=True)
    weight = f.number(SOURCE_WEIGHT)
    if not type_name:
        return None
    kind = SOURCE_KINDS.get(type_name)
    if kind is None:
        known = ", ".join(source_kinds())
        f.error("type", f'unknown queue kind "{type_name}" (known: {known})')
        return None
    source = kind.parse(f, weight)
    f.finish()
    return source


def _parse_direction(f: Fields, *, allow_delay: bool = False) -> DirectionPolicy:
    policies: list[StepPolicy] = []
    for item, path in f.items(STEP_POLICIES):
        p = Fields(item, path, f.errors)
        kind = p.choice(STEP_TYPE)
        if not p.has(STEP_TYPE):
            p.missing(STEP_TYPE)
        value = p.integer(STEP_VALUE)
        period = p.duration(STEP_PERIOD)
        p.finish()
        policies.append(StepPolicy(type=kind, value=value, period=period))
    direction = DirectionPolicy(
        cooldown=f.duration(COOLDOWN),
        stabilization_window=f.duration(STABILIZATION_WINDOW),
        policies=tuple(policies),
        select_policy=f.choice(SELECT_POLICY),
        delay=f.optional_duration(SCALE_DOWN_DELAY) if allow_delay else 0.0,
    )
    f.finish()
    return direction


def _parse_policy(f: Fields) -> Policy:
    policy = Policy(
        target_per_replica=f.optional_number(TARGET_PER_REPLICA),
        activation_threshold=f.number(ACTIVATION_THRESHOLD),
        tolerance=f.number(TOLERANCE),
        lookahead=f.optional_duration(LOOKAHEAD),
        trend_window=f.duration(TREND_WINDOW),
        throughput_per_replica=f.optional_number(THROUGHPUT_PER_REPLICA),
        service_time=f.optional_duration(SERVICE_TIME),
        messages_per_replica=f.optional_integer(MESSAGES_PER_REPLICA),
        target_wait=f.optional_duration(TARGET_WAIT),
        drain_time=f.optional_duration(DRAIN_TIME),
        startup_time=f.optional_duration(STARTUP_TIME),
        scale_to_zero_delay=f.optional_duration(SCALE_TO_ZERO_DELAY),
        scale_up=_parse_direction(f.child(SCALE_UP)),
        scale_down=_parse_direction(f.child(SCALE_DOWN), allow_delay=True),
        on_scale_in=f.choice(ON_SCALE_IN),
        recurring_bursts=f.choice(RECURRING_BURSTS),
    )
    if policy.service_time is not None and policy.throughput_per_replica is not None:
        f.error("serviceTime", "cannot be combined with throughputPerReplica: give one of them")
    if policy.target_wait is not None and policy.service_time is None and policy.throughput_per_replica is None:
        f.error("targetWaitSeconds", "needs serviceTime or throughputPerReplica: how long a message takes")
    f.finish()
    return policy


def _parse_fallback(f: Fields) -> Fallback:
    fallback = Fallback(
        failure_threshold=f.integer(FAILURE_THRESHOLD),
        mode=f.choice(FALLBACK_MODE),
        replicas=f.optional_integer(FALLBACK_REPLICAS),
    )
    if fallback.mode == "fixed" and fallback.replicas is None:
        f.error("replicas", 'is required when mode is "fixed"')
    if fallback.mode == "hold" and fallback.replicas is not None:
        f.error("replicas", 'applies only when mode is "fixed"')
    f.finish()
    return fallback


def _parse_clock(f: Fields, field: Text) -> int:
    text = f.string(field)
    if not _HH_MM.fullmatch(text):
        return 0
    hours, minutes = text.split(":")
    return int(hours) * 60 + int(minutes)


def _parse_schedule(item: object, path: str, errors: list[FieldError]) -> Schedule:
    f = Fields(item, path, errors)
    name = f.string(SCHEDULE_NAME)
    days: set[int] = set()
    for day, day_path in f.items(SCHEDULE_DAYS):
        if day not in WEEKDAYS:
            errors.append(FieldError(day_path, f"must be one of {', '.join(WEEKDAYS)}, got {_show(day)}"))
        else:
            days.add(WEEKDAYS.index(str(day)))
    if not f.has(SCHEDULE_DAYS):
        days = set(range(7))
    start = _parse_clock(f, SCHEDULE_START)
    end = _parse_clock(f, SCHEDULE_END)
    if start == 24 * 60:
        f.error("start", 'must be before 24:00, got "24:00"')
    if f.has(SCHEDULE_START) and f.has(SCHEDULE_END) and start == end:
        f.error("end", "must differ from start (use 00:00 to 24:00 for a whole day)")
    time_zone = f.string(SCHEDULE_TIME_ZONE)
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
        min_replicas=f.optional_integer(SCHEDULE_MIN_REPLICAS),
        max_replicas=f.optional_integer(SCHEDULE_MAX_REPLICAS),
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
    target = _parse_target_ref(f.child(SCALE_TARGET_REF))
    if not f.has(SCALE_TARGET_REF):
        f.missing(SCALE_TARGET_REF)
    min_replicas = f.integer(MIN_REPLICAS)
    max_replicas = f.integer(MAX_REPLICAS)
    if f.has(MAX_REPLICAS) and f.has(MIN_REPLICAS) and 1 <= max_replicas < min_replicas:
        f.error("maxReplicas", f"must be >= minReplicas ({min_replicas}), got {max_replicas}")
    sources = []
    for item, item_path in f.items(SOURCES):
        source = _parse_source(item, item_path, own_errors)
        if source is not None:
            sources.append(source)
    if not f.has(SOURCES):
        f.missing(SOURCES)
    schedules = [_parse_schedule(item, item_path, own_errors) for item, item_path in f.items(SCHEDULES)]
    names = [s.name for s in schedules]
    for duplicate in sorted({n for n in names if names.count(n) > 1 and n}):
        f.error("schedules", f'has two schedules named "{duplicate}"')
    for index, schedule in enumerate(schedules):
        if schedule.min_replicas is not None and schedule.min_replicas > max_replicas:
            f.error(f"schedules[{index}].minReplicas",
                    f"must be <= spec maxReplicas ({max_replicas}), got {schedule.min_replicas}")
    policy = _parse_policy(f.child(POLICY))
    spec = QueueScalerSpec(
        scale_target_ref=target,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        polling_interval=f.duration(POLLING_INTERVAL),
        # What a source reads may depend on the policy (azure-queue peeks for an age only where it is learned from).
        sources=tuple(source.for_policy(learns_throughput=policy.learns_throughput) for source in sources),
        aggregation=f.choice(AGGREGATION),
        policy=policy,
        fallback=_parse_fallback(f.child(FALLBACK)),
        schedules=tuple(schedules),
        paused=f.boolean(PAUSED),
        in_flight=_parse_in_flight(f.child(IN_FLIGHT)) if f.has(IN_FLIGHT) else None,
    )
    if spec.in_flight is not None and target.kind == "StatefulSet":
        f.error("inFlight", "does not apply to a StatefulSet: it removes its highest ordinals whatever their cost")
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
    name = meta.string("name", required=True, pattern=DNS_SUBDOMAIN, pattern_help="must be a DNS subdomain name",
                       max_length=253)
    namespace = meta.string("namespace", default_namespace, pattern=DNS_LABEL,
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
