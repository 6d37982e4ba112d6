"""Scenarios: what arrives on the queue, how the workers behave, and what latency is acceptable.

A scenario is a YAML file (see docs/simulator.md). Parsing goes through the same `Fields` reader as the
QueueScaler spec, so every error names its field path, and all errors are reported at once.
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import itertools
import math
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal, get_args

import numpy as np
import yaml

from controller.model.fields import FieldError, Fields, SpecError, parse_duration
from controller.model.textfmt import duration

DEFAULT_START = "2026-01-05T00:00:00Z"  # a Monday, so weekday schedules line up with day 0
MAX_DURATION = 31 * 86400.0
SERVICE_TABLE_SIZE = 1024

_DAYS = re.compile(r"(\d+(?:\.\d+)?)d(.*)")


# --------------------------------------------------------------------------------------------------------------
# The model


Distribution = Literal["constant", "exponential", "uniform", "lognormal"]


@dataclass(frozen=True)
class ServiceTime:
    """How long one message takes to process, in seconds."""

    distribution: Distribution
    mean: float
    stddev: float = 0.0
    minimum: float = 0.0
    maximum: float = 0.0
    # Service times a live run's workers took (`queuescale demo --scenario`), in the order they took them: when
    # given, they are the distribution, each equally likely, so that a simulation can be given the luck the live
    # run had; `in_order`: taken one a message in that order, not drawn (the same jobs in the same order).
    measured: tuple[float, ...] = ()
    in_order: bool = False

    def quantile(self, u: float) -> float:
        """The service time at cumulative probability u (0 < u < 1)."""
        if self.measured:
            ordered = sorted(self.measured)
            return ordered[min(len(ordered) - 1, int(u * len(ordered)))]
        if self.distribution == "constant":
            return self.mean
        if self.distribution == "exponential":
            return -self.mean * math.log(1.0 - u)
        if self.distribution == "uniform":
            return self.minimum + (self.maximum - self.minimum) * u
        sigma2 = math.log(1.0 + (self.stddev / self.mean) ** 2)
        mu = math.log(self.mean) - sigma2 / 2
        return math.exp(mu + math.sqrt(sigma2) * statistics.NormalDist().inv_cdf(u))

    def table(self, size: int = SERVICE_TABLE_SIZE) -> list[float]:
        """`size` equally likely service times (mid-quantiles): drawing an index uniformly samples the distribution.
        Measured service times are their own table, whatever `size` (in their order when taken in order)."""
        if self.measured:
            return list(self.measured) if self.in_order else sorted(self.measured)
        return [self.quantile((i + 0.5) / size) for i in range(size)]

    @property
    def average(self) -> float:
        if self.measured:
            return statistics.fmean(self.measured)
        if self.distribution == "uniform":
            return (self.minimum + self.maximum) / 2
        return self.mean


@dataclass(frozen=True)
class Workers:
    """The worker Deployment: how pods start, how fast they work, and what scale-in does to their work."""

    startup_delay: float = 30.0
    service_time: ServiceTime = ServiceTime("constant", 1.0)
    concurrency: int = 1
    scale_in: Literal["kill", "drain", "release"] = "kill"
    termination_grace_period: float = 30.0
    max_replicas: int = 100
    initial_replicas: int = 0


@dataclass(frozen=True)
class QueueParams:
    """The Azure Storage queue: how long a dequeued message stays invisible, and how long a message lives."""

    visibility_timeout: float = 30.0
    ttl: float | None = 7 * 86400.0  # Azure's default; None: never expires


@dataclass(frozen=True)
class Arrival:
    """One arrival component; the scenario's arrivals are the sum of its components."""

    type: str
    path: str  # e.g. arrivals[2], for messages about it
    rate: float = 0.0  # messages per second (constant, poisson, ramp start, diurnal mean)
    rate_to: float = 0.0  # ramp end rate
    amplitude: float = 0.0  # diurnal
    period: float = 86400.0  # diurnal period, batch interval
    peak: float = 0.0  # diurnal: seconds into the period when the rate peaks
    at: tuple[float, ...] = ()  # burst start times; batch first time
    messages: int = 0  # burst/batch size
    over: float = 1.0  # burst/batch spread, seconds
    start: float = 0.0
    end: float | None = None
    poisson: bool = False
    delay: float = 0.0  # messages put with an initial visibility delay
    trace: tuple[tuple[float, float], ...] = ()  # (t, arrivals until next row)
    scale: float = 1.0
    repeat: bool = False


OutageFailure = Literal["error", "timeout"]
OUTAGE_FAILURES: tuple[OutageFailure, ...] = get_args(OutageFailure)


@dataclass(frozen=True)
class Outage:
    """A window [start, end) during which every poll of a queue fails: an error with a code, or a timeout."""

    start: float
    end: float
    failure: OutageFailure = "error"
    code: str = "ServerBusy"  # what Azure Storage answers (HTTP 503) when it cannot serve the request

    def covers(self, t: float) -> bool:
        return self.start <= t < self.end


@dataclass(frozen=True)
class ScenarioQueue:
    """One queue of the scenario: its name (what rules' sources and KEDA triggers name), its Azure settings, its
    arrivals and the windows when polling it fails."""

    name: str
    params: QueueParams
    arrivals: tuple[Arrival, ...]
    outages: tuple[Outage, ...] = ()


SINGLE_QUEUE_NAME = "queue"


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    duration: float
    seed: int
    start_epoch: float
    slo_wait: float
    queue: QueueParams  # the first queue's settings (the only queue's, in a one-queue scenario)
    workers: Workers
    arrivals: tuple[Arrival, ...]  # every queue's arrivals
    queues: tuple[ScenarioQueue, ...] = ()  # empty: one queue, `queue` with `arrivals` and no outages

    @property
    def steps(self) -> int:
        return math.ceil(self.duration)

    @property
    def all_queues(self) -> tuple[ScenarioQueue, ...]:
        """The scenario's queues, one at least."""
        return self.queues or (ScenarioQueue(SINGLE_QUEUE_NAME, self.queue, self.arrivals),)

    @property
    def outages(self) -> tuple[tuple[str, Outage], ...]:
        """Every outage with its queue's name, by start time."""
        return tuple(sorted(((q.name, o) for q in self.all_queues for o in q.outages), key=lambda e: e[1].start))


@dataclass(frozen=True)
class Burst:
    """A burst or batch dump: `messages` put from `start` over `spread` seconds."""

    start: float
    messages: int
    spread: float


Streams = tuple[tuple[float, list[int]], ...]


@dataclass(frozen=True)
class ArrivalPlan:
    """Messages arriving in each second, per initial visibility delay (0 for ordinary messages).

    `streams` are all queues' arrivals together; `queue_streams` each queue's, in the scenario's order (empty for
    a one-queue scenario, whose streams are its queue's)."""

    streams: Streams
    bursts: tuple[Burst, ...]
    queue_streams: tuple[Streams, ...] = ()

    def streams_of(self, index: int) -> Streams:
        """The arrivals of the scenario's queue number `index`."""
        return self.queue_streams[index] if self.queue_streams else self.streams

    @property
    def burst_starts(self) -> tuple[float, ...]:
        return tuple(b.start for b in self.bursts)

    @property
    def total(self) -> int:
        return sum(sum(counts) for _, counts in self.streams)

    def per_second(self) -> list[int]:
        """Messages put in each second, whatever their delay."""
        if len(self.streams) == 1:
            return self.streams[0][1]
        return [sum(c) for c in zip(*(counts for _, counts in self.streams), strict=True)]


# --------------------------------------------------------------------------------------------------------------
# Parsing


def _seconds(f: Fields, name: str, default: float | None, *, minimum: float = 0.0) -> float:
    """A duration that may also be written in days ("7d", "1d12h")."""
    value = f.raw.get(name)
    if isinstance(value, str) and (match := _DAYS.fullmatch(value.strip())):
        rest = parse_duration(match.group(2)) if match.group(2) else 0.0
        f.read.add(name)
        if rest is None:
            f.error(name, f'must be a duration, got "{value}" (write 30, "30s", "5m", "1h30m" or "7d")')
            return default or minimum
        seconds = float(match.group(1)) * 86400 + rest
        if seconds < minimum:
            f.error(name, f"must be at least {minimum:g} seconds, got {value}")
        return seconds
    return f.duration(name, default, minimum=minimum)


def _times(f: Fields, name: str) -> tuple[float, ...]:
    """One time or a list of times (durations since the start)."""
    value = f.raw.get(name)
    if isinstance(value, list):
        f.read.add(name)
        times: list[float] = []
        for index, item in enumerate(value):
            seconds = parse_duration(item)
            if seconds is None:
                f.error(f"{name}[{index}]", f'must be a time since the start such as 90, "30m" or "2h", got {item!r}')
            else:
                times.append(seconds)
        return tuple(times)
    return (_seconds(f, name, None),)


def _parse_service_time(f: Fields, name: str) -> ServiceTime:
    raw = f.raw.get(name)
    if raw is None or not isinstance(raw, Mapping):
        seconds = f.duration(name, 1.0)
        if seconds <= 0:
            f.error(name, "must be a duration > 0")
            seconds = 1.0
        return ServiceTime("constant", seconds)
    s = f.child(name)
    kind = s.choice("distribution", get_args(Distribution), "constant")
    if kind == "uniform":
        low = s.duration("min")
        high = s.duration("max")
        if high <= low:
            s.error("max", f"must be greater than min ({duration(low)}), got {duration(high)}")
            high = low + 1.0
        s.finish()
        return ServiceTime("uniform", (low + high) / 2, minimum=low, maximum=high)
    mean = s.duration("mean", minimum=0.001)
    stddev = 0.0
    if kind == "lognormal":
        stddev = s.duration("stddev", minimum=0.0)
        if stddev <= 0:
            s.error("stddev", "must be > 0 for a lognormal distribution")
            stddev = mean / 2
    s.finish()
    return ServiceTime(kind, mean, stddev=stddev)


def _parse_workers(f: Fields) -> Workers:
    max_replicas = f.integer("maxReplicas", 100, minimum=1, maximum=100_000)
    workers = Workers(
        startup_delay=_seconds(f, "startupDelay", 30.0),
        service_time=_parse_service_time(f, "serviceTime"),
        concurrency=f.integer("concurrency", 1, minimum=1, maximum=10_000),
        scale_in=f.choice("scaleIn", ("kill", "drain", "release"), "kill"),
        termination_grace_period=_seconds(f, "terminationGracePeriod", 30.0),
        max_replicas=max_replicas,
        initial_replicas=f.integer("initialReplicas", 0, minimum=0, maximum=max_replicas),
    )
    f.finish()
    return workers


def _parse_queue(f: Fields) -> QueueParams:
    ttl_raw = f.raw.get("ttl")
    ttl: float | None
    if ttl_raw in ("never", -1):
        f.read.add("ttl")
        ttl = None
    else:
        ttl = _seconds(f, "ttl", 7 * 86400.0, minimum=1.0)
    queue = QueueParams(visibility_timeout=_seconds(f, "visibilityTimeout", 30.0, minimum=1.0), ttl=ttl)
    f.finish()
    return queue


def _parse_outage(item: object, path: str, errors: list[FieldError], scenario_end: float) -> Outage | None:
    f = Fields(item, path, errors)
    start = _seconds(f, "start", None)
    end = _seconds(f, "end", None)
    if not f.has("start"):
        f.missing("start")
    if not f.has("end"):
        f.missing("end")
    elif end <= start:
        f.error("end", f"must be after start ({duration(start)}), got {duration(end)}")
    failure = f.choice("failure", OUTAGE_FAILURES, "error")
    code = f.string("code", "ServerBusy")
    if failure == "timeout" and f.has("code"):
        f.error("code", 'applies only when failure is "error" (a timeout has no answer, so no code)')
    f.finish()
    if not (f.has("start") and f.has("end")) or end <= start:
        return None
    if start >= scenario_end:
        errors.append(FieldError(f"{path}.start", f"must be before the end of the scenario "
                                                  f"({duration(scenario_end)}), got {duration(start)}"))
    return Outage(start=start, end=end, failure=failure, code=code)


def _parse_outages(f: Fields, scenario_end: float) -> tuple[Outage, ...]:
    outages = [o for item, path in f.items("outages") if (o := _parse_outage(item, path, f.errors, scenario_end))]
    ordered = sorted(outages, key=lambda o: o.start)
    for earlier, later in itertools.pairwise(ordered):
        if later.start < earlier.end:
            f.error("outages", f"windows overlap: {duration(earlier.start)}-{duration(earlier.end)} and "
                               f"{duration(later.start)}-{duration(later.end)}")
    return tuple(ordered)


_QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")


def _parse_queues(f: Fields, base: Path | None, duration: float) -> tuple[ScenarioQueue, ...]:
    queues: list[ScenarioQueue] = []
    names: set[str] = set()
    for item, path in f.items("queues", min_items=1):
        q = Fields(item, path, f.errors)
        name = q.string("name", required=True)
        if name and not _QUEUE_NAME.fullmatch(name):
            q.error("name", f"must be letters, digits and . _ / - (what a rule's source names), got {name!r}")
        elif name in names:
            q.error("name", f'"{name}" is the name of an earlier queue: each queue needs its own')
        names.add(name)
        settings = Fields(
            {k: v for k, v in q.raw.items() if k in ("visibilityTimeout", "ttl")}, path, f.errors,
        )
        q.read.update(("visibilityTimeout", "ttl"))
        params = _parse_queue(settings)
        arrivals = [
            a for entry, where in q.items("arrivals", min_items=1)
            if (a := _parse_arrival(entry, where, f.errors, base)) is not None
        ]
        if not q.has("arrivals"):
            q.missing("arrivals")
        outages = _parse_outages(q, duration)
        q.finish()
        queues.append(ScenarioQueue(name, params, tuple(arrivals), outages))
    return tuple(queues)


ARRIVAL_TYPES = ("constant", "poisson", "burst", "ramp", "diurnal", "batch", "trace")


def _read_trace(f: Fields, base: Path | None) -> tuple[tuple[float, float], ...]:
    name = f.string("file", required=True)
    if not name:
        return ()
    path = Path(name)
    if not path.is_absolute() and base is not None:
        path = base / path
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        f.error("file", f"cannot read {path}: {exc.strerror or exc}")
        return ()
    rows = list(csv.reader(text.splitlines()))
    if not rows or [c.strip() for c in rows[0]] != ["t", "arrivals"]:
        f.error("file", f'{path}: the first line must be the header "t,arrivals"')
        return ()
    points: list[tuple[float, float]] = []
    for line_number, row in enumerate(rows[1:], start=2):
        if not row or not "".join(row).strip():
            continue
        try:
            t, count = float(row[0]), float(row[1])
        except (ValueError, IndexError):
            f.error("file", f"{path}:{line_number}: expected two numbers t,arrivals, got {','.join(row)!r}")
            return ()
        if t < 0 or count < 0 or not (math.isfinite(t) and math.isfinite(count)):
            f.error("file", f"{path}:{line_number}: t and arrivals must be >= 0")
            return ()
        if points and t <= points[-1][0]:
            f.error("file", f"{path}:{line_number}: t must increase, got {t:g} after {points[-1][0]:g}")
            return ()
        points.append((t, count))
    if not points:
        f.error("file", f"{path}: has no rows after the header")
    return tuple(points)


def _parse_arrival(item: object, path: str, errors: list[FieldError], base: Path | None) -> Arrival | None:
    f = Fields(item, path, errors)
    kind = f.choice("type", ARRIVAL_TYPES, "")
    if not f.has("type"):
        f.missing("type")
    if not kind:
        f.read.update(f.raw)  # without a known type, its other fields cannot be judged
        return None
    start = _seconds(f, "start", 0.0)
    end = f.raw.get("end")
    end_s = _seconds(f, "end", None) if end is not None else None
    f.read.add("end")
    if end_s is not None and end_s <= start:
        f.error("end", f"must be after start ({duration(start)}), got {duration(end_s)}")
    delay = _seconds(f, "delay", 0.0)
    component = functools.partial(Arrival, type=kind, path=path, start=start, end=end_s, delay=delay)
    arrival: Arrival | None = None
    if kind in ("constant", "poisson"):
        arrival = component(rate=f.number("rate", minimum=0.0),
                            poisson=kind == "poisson" or f.boolean("poisson", False))
    elif kind == "ramp":
        arrival = component(rate=f.number("from", minimum=0.0), rate_to=f.number("to", minimum=0.0),
                            poisson=f.boolean("poisson", False))
        if end_s is None:
            f.missing("end")
    elif kind == "diurnal":
        mean = f.number("mean", minimum=0.0)
        amplitude = f.number("amplitude", minimum=0.0)
        if amplitude > mean:
            f.error("amplitude", f"must be <= mean ({mean:g}) so the rate never goes below zero, got {amplitude:g}")
        arrival = component(rate=mean, amplitude=amplitude, period=_seconds(f, "period", 86400.0, minimum=60.0),
                            peak=_seconds(f, "peak", 14 * 3600.0), poisson=f.boolean("poisson", True))
    elif kind == "burst":
        arrival = component(at=_times(f, "at"), messages=f.integer("messages", minimum=1),
                            over=_seconds(f, "over", 1.0, minimum=1.0))
    elif kind == "batch":
        arrival = component(at=(_seconds(f, "at", 0.0),), period=_seconds(f, "every", 86400.0, minimum=1.0),
                            messages=f.integer("messages", minimum=1), over=_seconds(f, "over", 1.0, minimum=1.0))
    elif kind == "trace":
        arrival = component(trace=_read_trace(f, base), scale=f.number("scale", 1.0, exclusive_minimum=0.0),
                            repeat=f.boolean("repeat", False))
    f.finish()
    return arrival


def parse_scenario(raw: object, *, base: Path | None = None, name: str = "") -> Scenario:
    """A scenario from its YAML document; raises SpecError naming every bad field."""
    errors: list[FieldError] = []
    f = Fields(raw, "", errors)
    scenario_name = f.string("name", name or "scenario")
    description = f.string("description", "")
    duration = _seconds(f, "duration", None, minimum=1.0)
    if duration > MAX_DURATION:
        f.error("duration", f"must be at most 31 days, got {duration / 86400:.1f} days")
        duration = MAX_DURATION
    seed = f.integer("seed", 1, minimum=0)
    start_text = f.string("start", DEFAULT_START)
    try:
        start_epoch = dt.datetime.fromisoformat(start_text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        f.error("start", f'must be an ISO 8601 date and time such as "{DEFAULT_START}", got "{start_text}"')
        start_epoch = dt.datetime.fromisoformat(DEFAULT_START.replace("Z", "+00:00")).timestamp()
    slo = f.child("slo")
    slo_wait = slo.duration("waitSeconds", 60.0)
    slo.finish()
    workers = _parse_workers(f.child("workers"))
    queues: tuple[ScenarioQueue, ...] = ()
    if f.has("queues"):
        for single in ("queue", "arrivals", "outages"):
            if f.has(single):
                f.error(single, "goes under each of `queues` when the scenario declares several queues")
                f.read.add(single)
        queues = _parse_queues(f, base, duration)
        queue = queues[0].params if queues else QueueParams()
        arrivals = [a for q in queues for a in q.arrivals]
    else:
        queue = _parse_queue(f.child("queue"))
        arrivals = [
            a for item, path in f.items("arrivals", min_items=1)
            if (a := _parse_arrival(item, path, errors, base)) is not None
        ]
        if not f.has("arrivals"):
            f.missing("arrivals")
        outages = _parse_outages(f, duration)
        if outages:
            queues = (ScenarioQueue(SINGLE_QUEUE_NAME, queue, tuple(arrivals), outages),)
    f.finish()
    if errors:
        raise SpecError(errors)
    return Scenario(
        name=scenario_name, description=description, duration=duration, seed=seed, start_epoch=start_epoch,
        slo_wait=slo_wait, queue=queue, workers=workers, arrivals=tuple(arrivals), queues=queues,
    )


# --------------------------------------------------------------------------------------------------------------
# Files and the built-in library


class ScenarioError(Exception):
    """A scenario that cannot be used: every line names the file and the field."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


def library() -> dict[str, Scenario]:
    """The built-in scenarios, by name."""
    folder = resources.files("controller.simulator") / "scenarios"
    found: dict[str, Scenario] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            name = entry.name.removesuffix(".yaml")
            found[name] = parse_scenario(yaml.safe_load(entry.read_text(encoding="utf-8")), name=name)
    return found


def load_scenario(name_or_file: str) -> Scenario:
    """A built-in scenario by name, or a scenario file; raises ScenarioError."""
    path = Path(name_or_file)
    if not path.exists() and not name_or_file.endswith((".yaml", ".yml")):
        builtin = library()
        if name_or_file in builtin:
            return builtin[name_or_file]
        raise ScenarioError([f"{name_or_file}: no such scenario file or built-in scenario "
                             f"(built-in: {', '.join(builtin)})"])
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError([f"{name_or_file}: cannot read: {exc.strerror or exc}"]) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ScenarioError([f"{name_or_file}: invalid YAML{where}"]) from None
    try:
        return parse_scenario(raw, base=path.parent, name=path.stem)
    except SpecError as exc:
        raise ScenarioError([f"{name_or_file}: {error}" for error in exc.errors]) from None


# --------------------------------------------------------------------------------------------------------------
# Arrivals


def _rates(a: Arrival, t: np.ndarray) -> np.ndarray | None:
    """Messages per second at times `t` for a rate component; None for the others."""
    if a.type in ("constant", "poisson"):
        return np.full(t.shape, a.rate)
    if a.type == "ramp":
        end = a.end if a.end is not None else a.start + 1
        return a.rate + (a.rate_to - a.rate) * np.clip((t - a.start) / (end - a.start), 0.0, 1.0)
    if a.type == "diurnal":
        return a.rate + a.amplitude * np.cos(2 * np.pi * (t - a.peak) / a.period)
    return None


def plan_arrivals(scenario: Scenario) -> ArrivalPlan:
    """Messages per second for the whole run, from the components; the same seed gives the same plan."""
    rng = np.random.default_rng(scenario.seed)
    bursts: dict[float, Burst] = {}
    if len(scenario.all_queues) == 1:
        return ArrivalPlan(streams=_plan_streams(scenario.arrivals, scenario.steps, rng, bursts),
                           bursts=tuple(bursts[start] for start in sorted(bursts)))
    # One generator drawn queue after queue: the same seed gives every queue the same arrivals.
    per_queue = tuple(_plan_streams(q.arrivals, scenario.steps, rng, bursts) for q in scenario.all_queues)
    combined: dict[float, list[int]] = {}
    for streams in per_queue:
        for delay, counts in streams:
            total = combined.get(delay)
            combined[delay] = list(counts) if total is None else [a + b for a, b in zip(total, counts, strict=True)]
    return ArrivalPlan(streams=tuple(sorted(combined.items())), bursts=tuple(bursts[start] for start in sorted(bursts)),
                       queue_streams=per_queue)


def _plan_streams(arrivals: tuple[Arrival, ...], steps: int, rng: np.random.Generator,
                  bursts: dict[float, Burst]) -> Streams:
    """One queue's messages per second, per delay; its bursts are added to `bursts`."""
    streams: dict[float, np.ndarray] = {}
    for a in arrivals:
        counts = streams.setdefault(a.delay, np.zeros(steps))
        first = max(0, int(a.start))
        last = min(steps, math.ceil(a.end) if a.end is not None else steps)
        if first >= last:
            continue
        rates = _rates(a, np.arange(first, last) + 0.5)
        if rates is not None:
            rates = np.maximum(rates, 0.0)
            counts[first:last] += rng.poisson(rates) if a.poisson else rates
        elif a.type in ("burst", "batch"):
            starts = list(a.at)
            if a.type == "batch":
                starts = [float(s) for s in np.arange(a.at[0], steps, a.period)]
            for s in starts:
                begin = int(s)
                if not first <= begin < last:
                    continue
                width = max(1, int(a.over))
                _add_burst(bursts, begin, a.messages, width)
                # Evenly over the width, the first at `at`: second i gets ceil((i + 1) m / w) - ceil(i m / w), so
                # 25 over 180 s come one every 7 or 8 s, not one a second for the first 25 (the remainder once went
                # first, a message a second).
                spread = np.diff(-(-np.arange(width + 1) * a.messages // width)).astype(float)
                stop = min(last, begin + width)
                counts[begin:stop] += spread[: stop - begin]
        elif a.type == "trace":
            _add_trace(a, counts, first, last, bursts)
    plan = []
    for delay, values in sorted(streams.items()):
        # Fractional rates become whole messages by carrying the remainder: the totals stay exact.
        cumulative = np.floor(np.cumsum(values) + 1e-9)
        whole = np.diff(cumulative, prepend=0.0).astype(np.int64)
        plan.append((delay, [int(n) for n in whole.tolist()]))
    return tuple(plan)


def _add_burst(bursts: dict[float, Burst], begin: int, messages: int, spread: float) -> None:
    """A burst of `messages` over `spread` seconds from `begin`, merged with any other starting then."""
    earlier = bursts.get(float(begin))
    size = messages + (earlier.messages if earlier else 0)
    bursts[float(begin)] = Burst(float(begin), size, max(spread, earlier.spread if earlier else 0))


def _add_trace(a: Arrival, counts: np.ndarray, first: int, last: int, bursts: dict[float, Burst]) -> None:
    """Each row's arrivals spread evenly from its t until the next row's t (the last row lasts one second). Runs of
    rows at TRACE_BURST_FACTOR times the trace's usual rate or more are added to `bursts` (`trace_bursts`)."""
    rows = list(a.trace)
    if not rows:
        return
    length = rows[-1][0] + 1.0
    spans = _row_spans(rows, length)
    loud = trace_bursts(rows, spans)
    offset = float(first)
    while offset < last:
        for (t, n), span in zip(rows, spans, strict=True):
            begin = offset + t
            width = max(1, int(begin + span) - int(begin))
            low, high = max(first, int(begin)), min(last, int(begin) + width)
            if low < high:
                counts[low:high] += n * a.scale / width
        for start, stop, messages in loud:
            begin = int(offset + start)
            if first <= begin < last and messages * a.scale >= 1:
                _add_burst(bursts, begin, round(messages * a.scale), stop - start)
        if not a.repeat:
            break
        offset += length


# A trace row is part of a burst when its rate is at least this many times the trace's usual rate (the median
# over time), as a burst or batch component is one by its type.
TRACE_BURST_FACTOR = 5.0


def _row_spans(rows: list[tuple[float, float]], length: float) -> list[float]:
    """How long each trace row lasts: until the next row's t, the last one until `length`."""
    return [(rows[i + 1][0] if i + 1 < len(rows) else length) - t for i, (t, _) in enumerate(rows)]


def trace_bursts(rows: list[tuple[float, float]], spans: list[float]) -> list[tuple[float, float, float]]:
    """The bursts of a trace: (start, end, messages) of each run of consecutive rows whose rate (arrivals over
    the row's span, `_row_spans`) is positive and at least TRACE_BURST_FACTOR times the median rate a second of the
    trace sees."""
    rates = [n / span if span > 0 else 0.0 for (_, n), span in zip(rows, spans, strict=True)]
    by_rate = sorted(zip(rates, spans, strict=True))
    half, seen, usual = sum(spans) / 2.0, 0.0, 0.0
    for rate, span in by_rate:
        seen += span
        if seen >= half:
            usual = rate
            break
    found: list[tuple[float, float, float]] = []
    for (t, n), span, rate in zip(rows, spans, rates, strict=True):
        if rate <= 0 or rate < TRACE_BURST_FACTOR * usual:
            continue
        if found and found[-1][1] == t:
            start, _, messages = found[-1]
            found[-1] = (start, t + span, messages + n)
        else:
            found.append((t, t + span, n))
    return found
