"""What a poll reads and what a rule remembers between ticks: the data the policy decides from, in plain values."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from controller.model.rule import QueueScalerSpec


class Reason(StrEnum):
    """Why the desired count is what it is; machine-readable, used in conditions, events and metrics."""

    SCALED_UP = "ScaledUp"
    SCALED_DOWN = "ScaledDown"
    ACTIVATED_FROM_ZERO = "ActivatedFromZero"
    SCALED_TO_ZERO = "ScaledToZero"
    HELD_BY_COOLDOWN = "HeldByCooldown"
    HELD_BY_STABILIZATION = "HeldByStabilization"
    LIMITED_BY_STEP = "LimitedByStep"
    AT_MAXIMUM = "AtMaximum"
    AT_MINIMUM = "AtMinimum"
    WITHIN_TOLERANCE = "WithinTolerance"
    STEADY = "Steady"
    INACTIVE = "Inactive"
    ACTIVATION_DEFERRED = "ActivationDeferred"
    PENDING_SCALE_TO_ZERO = "PendingScaleToZero"
    POLL_FAILED = "PollFailed"
    FALLBACK = "Fallback"
    PAUSED = "Paused"


# How many of a target's last measured start-up times are kept: the policy assumes their lower median.
STARTUP_SAMPLES = 5


@dataclass
class StartupTimes:
    """A target's last measured start-up times (asked -> ready), and the one to assume: their lower median.

    One scale-up can take far longer than a pod's start-up: its pods stuck for an hour (an image that cannot be
    pulled, a quota) until someone fixed it. Taken alone, that hour became every later start-up: a rate-mode rule
    projected its trend over an hour (a rise of 0.1/s asked for three times the replicas) and held idle capacity
    as long. The lower median of the last STARTUP_SAMPLES needs most of them to move: one outlier moves nothing,
    a target that really became slower moves it at its third slow start-up."""

    samples: list[float] = field(default_factory=list)

    def add(self, seconds: float) -> None:
        self.samples.append(max(0.0, seconds))
        del self.samples[:-STARTUP_SAMPLES]

    @property
    def value(self) -> float | None:
        """The lower median of the samples (None until one is measured)."""
        if not self.samples:
            return None
        ordered = sorted(self.samples)
        return ordered[(len(ordered) - 1) // 2]


@dataclass(frozen=True)
class SourceError:
    """Why a source gave no count: `code` is the queue service's own (e.g. Azure's QueueNotFound)."""

    code: str
    message: str
    retryable: bool = True


@dataclass(frozen=True)
class SourceReading:
    """One source's answer to one poll: a count, or an error."""

    count: int | None
    error: SourceError | None = None
    note: str = ""  # e.g. "visible count unknown: 32 or more, used the approximate count"
    # Seconds the oldest waiting message has waited (Azure: Peek Messages' InsertionTime; a job table's oldest due
    # row); 0 when none waits; None when the source does not say.
    oldest_age: float | None = None

    @classmethod
    def of(cls, count: int, note: str = "", *, oldest_age: float | None = None) -> SourceReading:
        return cls(count=count, note=note, oldest_age=oldest_age)

    @classmethod
    def failed(cls, code: str, message: str, *, retryable: bool = True) -> SourceReading:
        return cls(count=None, error=SourceError(code, message, retryable))


@dataclass(frozen=True)
class Observation:
    """Every source's reading at one poll, in the order of `spec.sources`."""

    time: float
    readings: tuple[SourceReading, ...]

    @property
    def failed(self) -> bool:
        return not self.readings or any(r.error is not None for r in self.readings)

    def total(self, spec: QueueScalerSpec) -> float | None:
        """Weighted sum or max over the sources that answered; None when none did."""
        if len(self.readings) == 1:  # the common case, on every tick's trend: no lists
            count = self.readings[0].count
            return None if count is None else count * spec.sources[0].weight
        weighted = [
            r.count * source.weight
            for r, source in zip(self.readings, spec.sources, strict=False)
            if r.count is not None
        ]
        if not weighted:
            return None
        return max(weighted) if spec.aggregation == "max" else sum(weighted)


@dataclass(frozen=True)
class Recommendation:
    """From `since` until the next recommendation, the policy recommended `replicas`."""

    since: float
    replicas: int


@dataclass(frozen=True)
class ScaleEvent:
    time: float
    from_replicas: int
    to_replicas: int


@dataclass(frozen=True)
class ScalingMemory:
    """What a rule remembers between ticks; round-trips through plain JSON."""

    recommendations: tuple[Recommendation, ...] = ()
    scale_events: tuple[ScaleEvent, ...] = ()
    last_scale_up: float | None = None
    last_scale_down: float | None = None
    inactive_since: float | None = None
    pending_since: float | None = None  # at zero replicas, when work first waited (rate mode defers waking)
    consecutive_failures: int = 0
    # Messages/s one replica was seen to complete (the fastest drain per busy replica; the policy bounds it).
    learned_throughput: float | None = None
    # (source index, time, count): the last count of each source failing now, held in its place until it answers.
    last_known_counts: tuple[tuple[int, float, float], ...] = ()
    # (time, count, arrivals) where the current drain was first seen (every slot busy, replicas unchanged since),
    # and the most messages a second that could have been arriving then (controller/throughput.py).
    drain_from: tuple[float, float, float] | None = None
    # (time, messages): the bursts seen, oldest first (a run of polls each rising by a replica's worth or more:
    # when it began, and by how much the count rose). Kept only where a cold start misses the objective.
    bursts: tuple[tuple[float, float], ...] = ()
    # Where workers are killed on scale-in (controller/kills.py): (first poll, time, the hour's mean in flight) and
    # (time, the messages the scale-ins stopped, exponentially weighted over the hour).
    in_flight_mean: tuple[float, float, float] | None = None
    stopped: tuple[float, float] | None = None
    # Scales someone else made (`kubectl scale`, another controller) as the reconciler noticed them, oldest first.
    # Only for counting the replicas that worked (controller/throughput.py); the step limits and cooldowns count
    # the rule's own scales, as the HPA counts its own.
    hand_scales: tuple[ScaleEvent, ...] = ()
    # When someone else last removed replicas: kept past `hand_scales`' short reach, as `last_scale_down` is for the
    # rule's own, since what killed workers held stays invisible for their visibility timeout.
    last_hand_scale_down: float | None = None
    # Messages of the approximate count that no replica holds and no peek sees (messages put with a visibility
    # delay: scheduled retries), learned at polls where nothing was visible (controller/policy.py,
    # `remember_standing`); None when none was seen.
    standing: float | None = None
    # Times when work was counted at the first polls after the rule went to zero (controller/policy.py,
    # `remember_early_wake`): the last one within a day.
    early_wakes: tuple[float, ...] = ()
    # Messages a second arriving at the last poll every source answered, where the count was growing there (its
    # growth plus what the busy replicas completed); kept while a source's polls fail, so that the replicas serving
    # those arrivals are kept (controller/policy.py, `arrivals_seen`). None otherwise.
    arrivals_seen: float | None = None

    def with_scale(self, now: float, from_replicas: int, to_replicas: int) -> ScalingMemory:
        """The memory after the target was really scaled (call only once the write succeeded)."""
        if to_replicas == from_replicas:
            return self
        event = ScaleEvent(now, from_replicas, to_replicas)
        if to_replicas > from_replicas:
            return replace(self, scale_events=(*self.scale_events, event), last_scale_up=now)
        return replace(self, scale_events=(*self.scale_events, event), last_scale_down=now)

    def with_hand_scale(self, time: float, from_replicas: int, to_replicas: int) -> ScalingMemory:
        """The memory after the target was seen scaled by someone else: a drain under way ends there."""
        event = ScaleEvent(time, from_replicas, to_replicas)
        removed = time if to_replicas < from_replicas else self.last_hand_scale_down
        return replace(self, hand_scales=(*self.hand_scales, event), drain_from=None, last_hand_scale_down=removed)

    @property
    def replica_events(self) -> tuple[ScaleEvent, ...]:
        """Every scale, the rule's and anyone else's, in time order: what the replicas were. At the same time, an
        addition by hand comes before the rule's scale (it was seen at the read before the rule's write), a
        removal by hand after it (it is dated back to the rule's last read or write)."""
        if not self.hand_scales:
            return self.scale_events
        order = [(e.time, 1, e) for e in self.scale_events]
        order += [(e.time, 0 if e.to_replicas > e.from_replicas else 2, e) for e in self.hand_scales]
        return tuple(event for _, _, event in sorted(order, key=lambda row: row[:2]))

    @property
    def last_scale(self) -> float | None:
        times = [t for t in (self.last_scale_up, self.last_scale_down) if t is not None]
        return max(times) if times else None

    def to_json(self) -> dict[str, object]:
        return {
            "recommendations": [[r.since, r.replicas] for r in self.recommendations],
            "scaleEvents": [[e.time, e.from_replicas, e.to_replicas] for e in self.scale_events],
            "lastScaleUp": self.last_scale_up,
            "lastScaleDown": self.last_scale_down,
            "inactiveSince": self.inactive_since,
            "pendingSince": self.pending_since,
            "consecutiveFailures": self.consecutive_failures,
            "learnedThroughput": self.learned_throughput,
            "lastKnownCounts": [[i, t, c] for i, t, c in self.last_known_counts],
            "drainFrom": None if self.drain_from is None else list(self.drain_from),
            "bursts": [[t, n] for t, n in self.bursts],
            "inFlightMean": None if self.in_flight_mean is None else list(self.in_flight_mean),
            "stopped": None if self.stopped is None else list(self.stopped),
            "handScales": [[e.time, e.from_replicas, e.to_replicas] for e in self.hand_scales],
            "lastHandScaleDown": self.last_hand_scale_down,
            "standing": self.standing,
            "earlyWakes": list(self.early_wakes),
            "arrivalsSeen": self.arrivals_seen,
        }

    @classmethod
    def from_json(cls, data: object) -> ScalingMemory:
        """Rebuild from `to_json()` output; raises ValueError on anything else."""
        if not isinstance(data, Mapping):
            raise ValueError("memory must be an object")
        try:
            return cls(
                recommendations=tuple(
                    Recommendation(_number(since), _whole(replicas))
                    for since, replicas in _rows(data.get("recommendations"), 2)
                ),
                scale_events=_events(data.get("scaleEvents")),
                last_scale_up=_time(data.get("lastScaleUp")),
                last_scale_down=_time(data.get("lastScaleDown")),
                inactive_since=_time(data.get("inactiveSince")),
                pending_since=_time(data.get("pendingSince")),
                consecutive_failures=_whole(data.get("consecutiveFailures", 0)),
                learned_throughput=_time(data.get("learnedThroughput")),
                last_known_counts=tuple(
                    (_whole(i), _number(t), _number(c)) for i, t, c in _rows(data.get("lastKnownCounts"), 3)
                ),
                drain_from=_drain(data.get("drainFrom")),
                bursts=tuple((_number(t), _number(n)) for t, n in _rows(data.get("bursts"), 2)),
                in_flight_mean=_triple(data.get("inFlightMean")),
                stopped=_pair(data.get("stopped")),
                hand_scales=_events(data.get("handScales")),
                last_hand_scale_down=_time(data.get("lastHandScaleDown")),
                standing=_time(data.get("standing")),
                early_wakes=tuple(_number(t) for t in _list(data.get("earlyWakes"))),
                arrivals_seen=_time(data.get("arrivalsSeen")),
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"memory is not valid: {exc}") from None


def _events(value: object) -> tuple[ScaleEvent, ...]:
    """Scale events stored as [[time, from, to], ...]."""
    return tuple(ScaleEvent(_number(t), _whole(a), _whole(b)) for t, a, b in _rows(value, 3))


def _numbers(value: object, width: int) -> list[float] | None:
    """One row of `width` numbers, or None."""
    return None if value is None else [_number(x) for x in _rows([value], width)[0]]


def _pair(value: object) -> tuple[float, float] | None:
    row = _numbers(value, 2)
    return None if row is None else (row[0], row[1])


def _drain(value: object) -> tuple[float, float, float] | None:
    """A drain's start; one stored by an earlier version (time and count, without the arrivals) restarts."""
    if isinstance(value, list) and len(value) == 2:
        _numbers(value, 2)
        return None
    return _triple(value)


def _triple(value: object) -> tuple[float, float, float] | None:
    row = _numbers(value, 3)
    return None if row is None else (row[0], row[1], row[2])


def _list(value: object) -> list[object]:
    """A stored list; None (an earlier version's memory) is an empty one."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError("expected a list")
    return value


def _rows(value: object, width: int) -> list[list[object]]:
    rows = _list(value)
    checked = [row for row in rows if isinstance(row, list) and len(row) == width]
    if len(checked) != len(rows):
        raise ValueError(f"expected a list of {width}-item lists")
    return checked


def _whole(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not float(value).is_integer() or value < 0:
        raise ValueError(f"expected a whole number >= 0, got {value!r}")
    return int(value)


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"expected a time in seconds, got {value!r}")
    return float(value)


def _time(value: object) -> float | None:
    return None if value is None else _number(value)
