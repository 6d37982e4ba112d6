"""The QueueScaler model: parse and validate a rule into frozen, typed objects. No I/O.

Every invalid field yields a `FieldError` naming its path; `parse_queuescaler` collects all of them and raises
one `SpecError`, so a user sees every mistake at once and never a traceback.

Queue kinds add their own fields: a module under `controller.sources` calls `register_source_kind` with a parser
that reads its fields through the same `Fields` reader, so its errors carry the same paths.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import zoneinfo
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

API_GROUP = "queuescale.io"
API_VERSION = "v1alpha1"
KIND = "QueueScaler"
PAUSED_ANNOTATION = "queuescale.io/paused"

T = TypeVar("T")


# --------------------------------------------------------------------------------------------------------------
# Errors


@dataclass(frozen=True)
class FieldError:
    """One invalid field: where it is and what is wrong, in words a user can act on."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class SpecError(Exception):
    """A rule that cannot be used, with every field error found."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        self.errors = tuple(errors)
        super().__init__("; ".join(str(e) for e in self.errors))


# --------------------------------------------------------------------------------------------------------------
# Durations

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(value: object) -> float | None:
    """Seconds for `30`, `2.5`, `"30"`, `"30s"`, `"5m"`, `"1h30m"`, `"250ms"`; None when it is not a duration >= 0."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) and value >= 0 else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return float(text)
    if not text or _DURATION_PART.sub("", text):
        return None
    return sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text))


def format_duration(seconds: float) -> str:
    """The short form a user would write: 90 -> "1m30s", 0.5 -> "500ms". For values written into a rule and for
    echoing a field's own value back; everything else printed goes through controller.textfmt.duration."""
    if seconds < 1 and seconds != 0:
        return f"{round(seconds * 1000)}ms"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "", f"{secs}s" if secs else ""]
    return "".join(parts) or "0s"


# --------------------------------------------------------------------------------------------------------------
# The field reader


def _show(value: object) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return str(value)


class Fields:
    """Reads typed fields of one object, recording an error (with its path) for each bad one.

    An accessor always returns a usable value (the default or a placeholder) so parsing goes on and finds every
    error; the caller raises once at the end. `finish()` reports fields nobody read: usually a typo.
    """

    def __init__(self, raw: object, path: str, errors: list[FieldError]) -> None:
        self.path = path
        self.errors = errors
        self.read: set[str] = set()
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            self.error("", f"must be an object, got {_show(raw)}")
            raw = {}
        self.raw: Mapping[str, object] = raw

    def at(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def error(self, name: str, message: str) -> None:
        self.errors.append(FieldError(self.at(name) if name else self.path, message))

    def has(self, name: str) -> bool:
        return self.raw.get(name) is not None

    def _get(self, name: str) -> object:
        self.read.add(name)
        return self.raw.get(name)

    def missing(self, name: str) -> None:
        self.error(name, "is required")

    def string(
        self,
        name: str,
        default: str | None = None,
        *,
        required: bool = False,
        pattern: str | None = None,
        pattern_help: str = "",
        max_length: int | None = None,
    ) -> str:
        value = self._get(name)
        if value is None:
            if required:
                self.missing(name)
            return default if default is not None else ""
        if not isinstance(value, str):
            self.error(name, f"must be a string, got {_show(value)}")
            return default or ""
        if required and not value:
            self.error(name, "must not be empty")
        elif max_length is not None and len(value) > max_length:
            self.error(name, f"must be at most {max_length} characters, got {len(value)}")
        elif pattern is not None and value and not re.fullmatch(pattern, value):
            self.error(name, f"{pattern_help or 'is not valid'}, got {_show(value)}")
        return value

    def optional_string(self, name: str, **kwargs: object) -> str | None:
        if self.raw.get(name) is None:
            self.read.add(name)
            return None
        return self.string(name, **kwargs)  # type: ignore[arg-type]

    def choice(self, name: str, choices: Sequence[str], default: str) -> str:
        value = self._get(name)
        if value is None:
            return default
        if value not in choices:
            self.error(name, f"must be one of {', '.join(choices)}, got {_show(value)}")
            return default
        assert isinstance(value, str)
        return value

    def boolean(self, name: str, default: bool) -> bool:
        value = self._get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.error(name, f"must be true or false, got {_show(value)}")
            return default
        return value

    def integer(
        self, name: str, default: int | None = None, *, minimum: int | None = None, maximum: int | None = None
    ) -> int:
        value = self._get(name)
        if value is None:
            if default is None:
                self.missing(name)
                return minimum or 0
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                self.error(name, f"must be an integer, got {_show(value)}")
                return default if default is not None else (minimum or 0)
        if minimum is not None and value < minimum:
            self.error(name, f"must be >= {minimum}, got {value}")
        elif maximum is not None and value > maximum:
            self.error(name, f"must be <= {maximum}, got {value}")
        return value

    def optional_integer(self, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int | None:
        if self.raw.get(name) is None:
            self.read.add(name)
            return None
        return self.integer(name, minimum=minimum, maximum=maximum)

    def number(
        self,
        name: str,
        default: float | None = None,
        *,
        minimum: float | None = None,
        exclusive_minimum: float | None = None,
        maximum: float | None = None,
    ) -> float:
        value = self._get(name)
        fallback = default if default is not None else (minimum or exclusive_minimum or 0.0)
        if value is None:
            if default is None:
                self.missing(name)
            return fallback
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            self.error(name, f"must be a number, got {_show(value)}")
            return fallback
        number = float(value)
        if minimum is not None and number < minimum:
            self.error(name, f"must be >= {_num(minimum)}, got {_num(number)}")
        elif exclusive_minimum is not None and number <= exclusive_minimum:
            self.error(name, f"must be > {_num(exclusive_minimum)}, got {_num(number)}")
        elif maximum is not None and number > maximum:
            self.error(name, f"must be <= {_num(maximum)}, got {_num(number)}")
        return number

    def optional_number(
        self, name: str, *, minimum: float | None = None, exclusive_minimum: float | None = None
    ) -> float | None:
        if self.raw.get(name) is None:
            self.read.add(name)
            return None
        return self.number(name, minimum=minimum, exclusive_minimum=exclusive_minimum)

    def duration(self, name: str, default: float | None = None, *, minimum: float = 0.0) -> float:
        value = self._get(name)
        if value is None:
            if default is None:
                self.missing(name)
                return minimum
            return default
        seconds = parse_duration(value)
        if seconds is None or seconds < minimum:
            bound = ">= 0" if minimum == 0 else f">= {format_duration(minimum)}"
            self.error(name, f'must be a duration {bound}, got {_show(value)} (write 30, "30s", "5m" or "1h30m")')
            return default if default is not None else minimum
        return seconds

    def optional_duration(self, name: str, *, minimum: float = 0.0) -> float | None:
        if self.raw.get(name) is None:
            self.read.add(name)
            return None
        return self.duration(name, minimum=minimum)

    def secret_ref(self, name: str) -> SecretKeyRef | None:
        """`{name, key}` of a Secret in the rule's namespace, or None when the field is absent."""
        if self.raw.get(name) is None:
            self.read.add(name)
            return None
        ref = self.child(name)
        secret = ref.string("name", required=True, pattern=_DNS_SUBDOMAIN,
                            pattern_help="must be a Secret name (DNS subdomain)", max_length=253)
        key = ref.string("key", required=True, pattern=r"[-._a-zA-Z0-9]+",
                         pattern_help="must be a Secret key (letters, digits, '-', '_', '.')", max_length=253)
        ref.finish()
        return SecretKeyRef(secret, key)

    def child(self, name: str) -> Fields:
        """The nested object `name` (empty when absent, so its defaults apply)."""
        return Fields(self._get(name), self.at(name), self.errors)

    def items(self, name: str, *, min_items: int = 0, max_items: int | None = None) -> Iterator[tuple[object, str]]:
        """Each element of the list `name` with its path, e.g. `spec.sources[0]`."""
        value = self._get(name)
        if value is None:
            value = []
        if not isinstance(value, list):
            self.error(name, f"must be a list, got {_show(value)}")
            return
        if len(value) < min_items:
            self.error(name, f"must have at least {min_items} item{'s' if min_items > 1 else ''}")
        if max_items is not None and len(value) > max_items:
            self.error(name, f"must have at most {max_items} items, got {len(value)}")
        for index, item in enumerate(value):
            yield item, f"{self.at(name)}[{index}]"

    def finish(self) -> None:
        """Report every field that was given but never read."""
        for name in self.raw:
            if name not in self.read:
                self.error(str(name), "unknown field")


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


# --------------------------------------------------------------------------------------------------------------
# The model


@dataclass(frozen=True)
class ScaleTargetRef:
    """What gets scaled: any kind with a scale subresource, in the rule's namespace."""

    name: str
    api_version: str = "apps/v1"
    kind: str = "Deployment"


@dataclass(frozen=True)
class SecretKeyRef:
    """One key of a Secret in the rule's namespace."""

    name: str
    key: str


@dataclass(frozen=True, kw_only=True)
class SourceSpec:
    """One queue. Queue kinds subclass this with their own fields."""

    type: str
    weight: float = 1.0

    @property
    def queue_label(self) -> str:
        """A short name for the queue, for printer columns, metrics labels and messages."""
        return self.type


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
    scale_to_zero_delay: float = 300.0
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

SourceParser = Callable[[Fields, float], SourceSpec]
_SOURCE_KINDS: dict[str, SourceParser] = {}


def register_source_kind(type_name: str, parse: SourceParser) -> None:
    """Make `type: <type_name>` valid in `spec.sources`; `parse` reads the kind's own fields (weight is read)."""
    _SOURCE_KINDS[type_name] = parse


def source_kinds() -> tuple[str, ...]:
    return tuple(sorted(_SOURCE_KINDS))


# --------------------------------------------------------------------------------------------------------------
# Parsing

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"
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
    parse = _SOURCE_KINDS.get(type_name)
    if parse is None:
        known = ", ".join(source_kinds()) or "none registered"
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
        scale_to_zero_delay=f.duration("scaleToZeroDelay", Policy.scale_to_zero_delay),
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
