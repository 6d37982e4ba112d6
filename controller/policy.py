"""decide(): a pure function from (spec, observations, current replicas, memory, now) to a replica count.

No I/O and no clock of its own. The order of the steps, each documented in docs/policy.md:

1. paused -> keep current;
2. a failed poll -> keep current, or scale up on what is known (the sources that answered, the failing ones'
   last counts), and after `fallback.failureThreshold` failures in a row, the fallback (hold, or raise to a
   fixed count) as a floor;
3. the raw need: count / target, the target being targetPerReplica, or in rate mode messagesPerReplica plus
   throughput x drainTime, the throughput as stated or as drains and waits showed (bounded by the stated one);
   `lookahead` projects a growing backlog forward;
4. tolerance: a need within `tolerance` of current keeps current;
5. activation: wake from zero only above `activationThreshold`; go to zero only after `scaleToZeroDelay` inactive;
   where a burst on idle capacity misses `targetWaitSeconds`, replicas readied for a burst that recurs at a steady
   period, and where a cold start misses it, one replica kept where work was counted soon after going to zero
   (within two polls, or a trickle within the scale-to-zero delay) twice within a day;
6. stabilization windows (HPA semantics: min of recent recommendations going up, max going down); where pods are
   killed and the last hour's scale-ins stopped more than the objective's budget, a release waits for a quiet
   poll and keeps the steady level's replicas (controller/kills.py);
7. cooldowns (no scale-up within scaleUp.cooldown of the last scale-up; no scale-down within scaleDown.cooldown
   of the last scale in either direction);
8. step limits (HPA behavior policies: Pods / Percent per period, selectPolicy);
9. bounds: [minReplicas, maxReplicas] narrowed by active schedules. Constraints always win.

The memory is what must survive a restart (it lives in the rule's status): recommendation runs, scale events,
last scale times, when the queue went inactive, consecutive failures, the throughput drains and waits showed, where the
current drain started, the last counts of failing sources, the bursts seen, and where pods are killed the account
of what scale-ins stopped (the hour's mean in flight, rewritten only when it moved by a tenth), and what stands in
the count held by no replica (polls with nothing visible bound it), and the last early wakes. It changes only
when one of those does, so an operator writes status only when something happened.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from controller import kills
from controller.model import recurring
from controller.model.readings import (
    Observation,
    Reason,
    Recommendation,
    ScaleEvent,
    ScalingMemory,
)
from controller.model.rule import (
    DEFAULT_SCALE_DOWN_DELAY,
    DEFAULT_TARGET_PER_REPLICA,
    DirectionPolicy,
    QueueScalerSpec,
)
from controller.model.textfmt import duration, plural
from controller.throughput import (
    CHANCE,
    DRAIN_MESSAGES,
    LEARNED_FLOOR,
    learn_from_wait,
    learn_throughput,
    ready_seconds_above,
    ready_steps,
    stated_throughput,
    trend_window_polls,
    trusted_throughput,
)

# --------------------------------------------------------------------------------------------------------------
# Observations


# Beyond the trend window the polls kept for reading waits are thinned to about this many (docs/policy.md, *A wrong
# serviceTime*): an objective of an hour polled every 10 s would otherwise keep 360 polls a rule.
OLDER_POLLS_KEPT = 12


def polls_to_keep(spec: QueueScalerSpec, history: Sequence[Observation]) -> list[Observation]:
    """The polls worth keeping, the newest last: every poll of the trend window and the last one before it (the
    trend), and back to `spec.history_seconds` (a front message's wait is read against the poll before it was
    put) one poll in every `(history_seconds - trend_window) / OLDER_POLLS_KEPT` seconds, at least a poll apart.

    A front message read against an earlier poll than the one just before its put, or with the next poll kept
    later than the next one made, gives a lower bound that is looser, never wrong: what that poll counted was
    ahead of the message all the same, and the arrivals the polls did not see are counted at their most."""
    recent = trend_window_polls(history, spec.policy.trend_window)
    older = history[:len(history) - len(recent)]
    start = history[-1].time - spec.history_seconds if history else 0.0
    spacing = max(spec.polling_interval, (spec.history_seconds - spec.policy.trend_window) / OLDER_POLLS_KEPT)
    kept: list[Observation] = []
    for index, poll in enumerate(older):
        if history[index + 1].time < start:
            continue  # older than the horizon, and not the last poll before it
        if not kept or poll.time - kept[-1].time >= spacing:
            kept.append(poll)
    return [*kept, *recent]


def trend(
    spec: QueueScalerSpec, observations: Sequence[Observation], now: float,
    held: Sequence[tuple[int, float, float]] = (),
) -> float | None:
    """The count's slope (messages/s) over the trend window: the median of the pairwise slopes (Theil-Sen).

    Robust to a single jump: a burst that lands between two polls is backlog, not a rate, and must not be
    projected forward as one. Only polls every source answered are points: a partial count is not the same sum,
    and its return would read as growth. None with fewer than two points. While sources fail, `held` (the
    memory's `last_known_counts`: index, time, count) stands in for each: the same held count in every poll is
    the same sum, so the sources still answering show their growth (a burst on one queue while another's polls
    fail is projected as any other).
    """
    start = now - spec.policy.trend_window
    if not held:
        return _median_slope([
            (o.time, total) for o in observations
            if o.time >= start and not o.failed and (total := o.total(spec)) is not None
        ])
    kept = {index: count for index, _, count in held}
    points = []
    for o in observations:
        if o.time < start or len(o.readings) != len(spec.sources):
            continue
        counts = [
            (reading.count if reading.count is not None else kept.get(index), source.weight)
            for index, (reading, source) in enumerate(zip(o.readings, spec.sources, strict=True))
        ]
        weighted = [count * weight for count, weight in counts if count is not None]
        if len(weighted) == len(counts):
            points.append((o.time, max(weighted) if spec.aggregation == "max" else sum(weighted)))
    return _median_slope(points)


def _median_slope(points: Sequence[tuple[float, float]]) -> float | None:
    slopes = sorted(
        (c2 - c1) / (t2 - t1)
        for i, (t1, c1) in enumerate(points)
        for t2, c2 in points[i + 1:]
        if t2 > t1
    )
    if not slopes:
        return None
    middle = len(slopes) // 2
    return slopes[middle] if len(slopes) % 2 else (slopes[middle - 1] + slopes[middle]) / 2


# --------------------------------------------------------------------------------------------------------------
# Memory: the last counts of failing sources

def known_count(
    spec: QueueScalerSpec, observation: Observation, history: Sequence[Observation], memory: ScalingMemory
) -> tuple[float | None, ScalingMemory]:
    """The count with each failing source's last answer in its place, and the memory that keeps those answers.

    A failing queue did not empty: its last count is the best that is known of it, and treating it as zero would
    size the rule for the other queues alone. The count is held as it was: not aged down (workers may have
    drained it, but nothing says they did, and a failed poll does not scale down anyway), nor projected up by its
    trend before the failure (measured: no change on checkout-outage or holdout-outage-catchup, so not worth a
    guess that a burst's slope times a long outage would turn into an invented backlog). None when no source
    answered and nothing is known.
    """
    kept = {index: (time, count) for index, time, count in memory.last_known_counts}
    counts: list[float] = []
    for index, (reading, source) in enumerate(zip(observation.readings, spec.sources, strict=False)):
        if reading.count is not None:
            counts.append(reading.count * source.weight)
            continue
        if index not in kept:
            last = next(
                (o for o in reversed(history) if len(o.readings) > index and o.readings[index].count is not None),
                None,
            )
            if last is None:
                continue
            kept[index] = (last.time, float(last.readings[index].count or 0))
        counts.append(kept[index][1] * source.weight)
    remembered = tuple(sorted((index, time, count) for index, (time, count) in kept.items()))
    if remembered != memory.last_known_counts:
        memory = replace(memory, last_known_counts=remembered)
    if not counts:
        return None, memory
    return (max(counts) if spec.aggregation == "max" else sum(counts)), memory


def arrivals_seen(
    spec: QueueScalerSpec, history: Sequence[Observation], current: int, memory: ScalingMemory,
    measured_startup: float | None = None,
) -> float | None:
    """Messages a second arriving at the last poll every source answered, where the count was growing there: its
    growth over the trend window plus what the busy replicas complete (the count's in-flight part at the rule's
    throughput). None in count mode, or where the count was not growing (the replicas then kept up).

    While a source's polls fail its count is held as it was (`known_count`), but its arrivals go on: replicas
    that did not keep up when it was last seen let its backlog grow for as long as the polls fail, unseen, where
    before the failure the next polls would have sized it. So a failed poll keeps at least the replicas that serve
    these arrivals (`_on_count`; it never scales down). checkout-outage's orders queue, last seen at 122 and
    growing 0.75 a second under 6 busy replicas (4.75 arriving, 4 completed), went unseen for twenty minutes at a
    rising diurnal load held at those 6: its backlog 124 → 422 and p99 107 s against 60 s (8 replicas since: 41 s)."""
    size = sizing(spec, measured_startup, learned_throughput=memory.learned_throughput)
    if size.throughput is None or size.per_replica is None:
        return None
    last = next((o for o in reversed(history) if not o.failed), None)
    count = None if last is None else last.total(spec)
    if last is None or count is None:
        return None
    growth = trend(spec, history, last.time)
    if growth is None or growth <= 0:
        return None
    busy = kills.in_flight(max(0.0, count - (memory.standing or 0.0)), current, size.per_replica)
    return growth + busy / size.per_replica * size.throughput


# --------------------------------------------------------------------------------------------------------------
# Memory: the count's standing part that no replica holds

# A standing part is learned only this long after the rule's last scale-in, or two service times if longer: the
# messages killed workers held come back visible when their visibility timeout ends, which a worker sets longer
# than a job, and counted before that they would read as standing.
STANDING_AFTER_SCALE_IN = 900.0


def remember_standing(
    spec: QueueScalerSpec, count: float, current: int, memory: ScalingMemory, now: float, *, nothing_visible: bool
) -> ScalingMemory:
    """The memory with the count's standing part: messages counted that no replica holds and no peek sees.

    Azure's approximate count includes messages put with a visibility delay (scheduled retries), which nothing
    Azure answers tells from messages in flight. Where the in-flight floor reads them as work, every replica a
    burst raised stays while they stand (holdout-scheduled-retries: 23 replicas for hours of 2 replicas' work). At
    a poll where nothing is visible, the count less every slot of the current replicas is a lower bound of that
    part; the rule keeps the largest such bound seen at polls long enough after the last scale-in, its own or one by
    hand (STANDING_AFTER_SCALE_IN), never above any count since (what is counted holds at least what stands). Only
    the in-flight floor reads it (`raw_need`), and not at a poll where a message waited a poll (`front_waited`:
    every slot is then busy): a standing part read too high can stop busy workers, never leave a backlog unsized.
    Where messagesPerReplica is unknown there is no floor, and nothing is kept."""
    size = sizing(spec, learned_throughput=memory.learned_throughput)
    if size.per_replica is None:
        return memory if memory.standing is None else replace(memory, standing=None)
    level = min(memory.standing or 0.0, count)
    job = size.per_replica / size.throughput if size.throughput else 0.0
    after = max([t for t in (memory.last_scale_down, memory.last_hand_scale_down) if t is not None], default=None)
    if nothing_visible and (after is None or now - after >= max(STANDING_AFTER_SCALE_IN, 2 * job)):
        level = max(level, count - size.per_replica * current)
    standing = float(level) if level > 0 else None
    return memory if standing == memory.standing else replace(memory, standing=standing)


def front_waited(spec: QueueScalerSpec, observation: Observation) -> bool:
    """Whether a peek found a message that waited a polling interval: a free slot would have taken it, so every
    ready replica is busy, and the count's in-flight part is what they hold, whatever part of it stands (a
    standing part may have come due: a wave scheduled hours ahead turns visible with the count unchanged)."""
    return any((r.oldest_age or 0.0) >= spec.polling_interval for r in observation.readings)


# --------------------------------------------------------------------------------------------------------------
# Decision


@dataclass(frozen=True)
class Bounds:
    """Effective [minimum, maximum] at a moment: the spec's, narrowed by active schedules."""

    minimum: int
    maximum: int
    schedules: tuple[str, ...] = ()


@dataclass(frozen=True)
class Decision:
    desired: int
    current: int
    reason: Reason
    message: str
    memory: ScalingMemory
    count: float | None = None  # aggregated count the decision used
    trend: float | None = None  # messages per second
    recommended: int | None = None  # what the count alone asked for, before windows, cooldowns, limits, bounds
    active: bool = False
    fallback: bool = False
    bounds: Bounds = field(default_factory=lambda: Bounds(0, 0))
    # What a scale-in stops beyond what the memory's account counted, if its pods are not the least busy of all
    # (kills.unchosen_stops): the reconciler adds it where the target says they were not.
    unchosen_stops: float = 0.0

    @property
    def direction(self) -> int:
        return (self.desired > self.current) - (self.desired < self.current)


def effective_bounds(spec: QueueScalerSpec, now: float) -> Bounds:
    """Schedules cap the maximum and raise the minimum; a raise wins over a cap (availability first)."""
    active = [s for s in spec.schedules if s.is_active(now)]
    minimum, maximum = spec.min_replicas, spec.max_replicas
    caps = [s.max_replicas for s in active if s.max_replicas is not None]
    raises = [s.min_replicas for s in active if s.min_replicas is not None]
    if caps:
        maximum = min(maximum, *caps)
    if raises:
        minimum = max(minimum, *raises)
    maximum = max(maximum, minimum)
    return Bounds(minimum, maximum, tuple(s.name for s in active))


# Rate mode without an explicit lookahead, startupTime or measured start-up: a typical pod start-up (image
# pulled, process warm).
DEFAULT_RATE_LOOKAHEAD = 30.0
DEFAULT_SCALE_TO_ZERO_DELAY = 300.0
# Rate mode without an explicit drainTime: a backlog may take this share of targetWaitSeconds, less the
# lookahead, to clear (the rest covers the wait a message already had and the error of the estimates). Tuned in
# the simulator on the built-in scenarios (docs/benchmarks.md).
DRAIN_SHARE_OF_TARGET_WAIT = 0.5
DEFAULT_DRAIN_TIME = 60.0
# Capacity released sooner than the defaults (a scale-in of workers that drain, a scale to zero, where a cold
# start fits) is still kept until this many polls in a row found it unneeded: one poll's dip does not stop a
# replica the next poll wants back.
UNNEEDED_POLLS = 2
# Where a scale-in kills jobs shorter than a poll, a burst's capacity may go before the scale-down delay, at a poll
# where the replicas removed are expected to hold at most QUIET_KILLS messages (or no more is in flight than the
# hour's mean: a release after the delay would stop as many), and only when what is kept is at most QUIET_SHARE of
# the replicas (the need fell as a burst ends, not in a dip). See `releases_when_quiet`.
QUIET_KILLS = 1.0
QUIET_SHARE = 1 / 3


@dataclass(frozen=True)
class Sizing:
    """The knobs a decision uses, after the defaults that depend on the mode were applied.

    `target` is the count one replica is sized for. In count mode it is `targetPerReplica` (KEDA's queueLength).
    In rate mode (serviceTime or throughputPerReplica given) it is derived: the messages one replica works on
    (messagesPerReplica) plus the backlog it clears within the drain time (throughput x drainTime, none where one
    job is longer than the drain time: `backlog_per_replica`), so that at the fixed point every replica is busy and
    a new message waits about the drain time.
    """

    mode: str  # "count" or "rate"
    target: float
    per_replica: int | None  # messages one replica works on at once; None: in-flight work is not split out
    throughput: float | None  # messages per second one replica completes
    lookahead: float
    drain_time: float | None


def startup_time(spec: QueueScalerSpec, measured: float | None = None) -> float:
    """How long a new replica takes to be ready, as the policy assumes it: the rule's `startupTime`, else what the
    operator measured (replicas asked -> ready, from the target watch), else the rule's `lookahead`, else 30 s."""
    policy = spec.policy
    for value in (policy.startup_time, measured, policy.lookahead):
        if value is not None:
            return value
    return DEFAULT_RATE_LOOKAHEAD


@dataclass(frozen=True)
class ColdStart:
    """How long a message that finds no free replica waits for a new one: the poll that sees it and the start-up
    (rate mode with `targetWaitSeconds` only). A wait ends when a worker takes the message, so its own service
    time is not part of it."""

    poll: float
    startup: float
    startup_known: bool  # stated (startupTime, lookahead) or measured; False: the 30 s default is assumed
    service: float  # one message's service time, as the rule states it
    target_wait: float

    @property
    def wait(self) -> float:
        return self.poll + self.startup

    @property
    def fits(self) -> bool:
        """Whether a message that finds no free replica still starts within the objective."""
        return self.wait <= self.target_wait

    @property
    def burst_wait(self) -> float:
        """How long a burst on idle capacity waits: each new replica takes one message per slot after the cold
        start, and the next in line waits one service time more."""
        return self.wait + self.service


def cold_start(spec: QueueScalerSpec, measured_startup: float | None = None) -> ColdStart | None:
    """The cold start of `spec`, or None where the rule states no wait objective or no service time."""
    policy = spec.policy
    throughput = stated_throughput(spec)
    if policy.target_wait is None or throughput is None:
        return None
    service = (policy.messages_per_replica or 1) / throughput
    known = any(v is not None for v in (policy.startup_time, measured_startup, policy.lookahead))
    return ColdStart(poll=spec.polling_interval, startup=startup_time(spec, measured_startup), startup_known=known,
                     service=service, target_wait=policy.target_wait)


def cold_start_condition(
    spec: QueueScalerSpec, measured_startup: float | None, kept_ready: int
) -> tuple[bool, str, str] | None:
    """Whether `targetWaitSeconds` can be met by scaling up when work arrives: (fits, reason, message) for the
    rule's ColdStart condition and `check`; None where the rule states no wait objective.

    A message that finds every replica busy waits for a new one at least a poll and a start-up (its wait ends when
    the new replica takes it). Where that is longer than the objective, no policy that reacts to the count meets
    it for a burst beyond the replicas already running: only replicas kept ready (`minReplicas`, schedules) do.
    """
    cold = cold_start(spec, measured_startup)
    if cold is None:
        return None
    startup = duration(cold.startup) + ("" if cold.startup_known else " (assumed: state startupTime)")
    parts = f"a poll ({duration(cold.poll)}) and a start-up ({startup}): {duration(cold.wait)}"
    objective = f"targetWaitSeconds {duration(cold.target_wait)}"
    if cold.fits:
        return True, "ColdStartFits", (
            f"a message that finds no free replica waits for a new one {parts}, within {objective}")
    if kept_ready > 0:
        return True, "ReplicasKeptReady", (
            f"{plural(kept_ready, 'replica')} kept ready take what arrives; beyond them a message waits for a new "
            f"replica {parts}, more than {objective}")
    return False, "ColdStartTooSlow", (
        f"a message that finds no free replica waits for a new one {parts}, more than {objective}: a burst on "
        "idle capacity misses it; keep replicas ready (minReplicas or a schedule) to meet it (bursts seen three times "
        "at one period are readied for on their own)")


def scale_to_zero_delay(spec: QueueScalerSpec, measured_startup: float | None = None) -> float:
    """How long a rule stays inactive before going to zero: the rule's `scaleToZeroDelay`, else derived.

    Going to zero destroys nothing (an inactive count has nothing in flight); what it risks is the next message
    waiting for a replica to start. When that wait (a poll and the start-up) and one service time fit in what the
    drain time leaves of `targetWaitSeconds`, an idle replica kept warm buys no latency, only cost: it is
    kept as long as a restart would cost (the start-up time, the ski-rental break-even), and at least two polls,
    so one empty poll between two messages does not stop it. Otherwise (count mode, no wait objective, or a wait
    objective a cold start and one service time do not fit) the default 5 minutes.
    """
    policy = spec.policy
    if policy.scale_to_zero_delay is not None:
        return policy.scale_to_zero_delay
    cold = cold_start(spec, measured_startup)
    if cold is None:
        return DEFAULT_SCALE_TO_ZERO_DELAY
    # The message that wakes a replica, and what arrives behind it, must still drain within the drain time:
    # the cold start, and the service of the message that woke it, have what the drain time leaves of the
    # objective (the rest absorbs a wrong serviceTime).
    cold_budget = cold.target_wait - (sizing(spec, measured_startup).drain_time or 0.0)
    if cold.burst_wait > cold_budget:
        return DEFAULT_SCALE_TO_ZERO_DELAY
    return min(DEFAULT_SCALE_TO_ZERO_DELAY, max(UNNEEDED_POLLS * spec.polling_interval, cold.startup))


def scale_down_delay(spec: QueueScalerSpec, size: Sizing, measured_startup: float | None = None) -> float:
    """How long capacity must be unneeded before it is released: the rule's `scaleDown.delay`, else derived.

    A scale-in may stop a replica in the middle of a message (a ReplicaSet cannot tell busy pods from idle ones).
    Workers that drain (`onScaleIn: drain`) finish it first, so a scale-in destroys nothing, and where a cold
    start (a poll and the start-up) fits in `targetWaitSeconds`, a replica released too soon can be started again
    in time: idle capacity buys nothing, and is kept only until two polls in a row found it unneeded, so one poll's
    dip does not stop a replica the next poll wants back. (Until 2026-11-30 that also needed a job to fit in what
    the drain time leaves of the objective, as the sizing then counted a fraction of a job per replica, and a
    message queued behind a busy replica waited its job out; `backlog_per_replica` now counts none there.)
    Otherwise a stopped message comes back only when its visibility timeout ends, which a worker sets longer than a
    job: where one service time (at the throughput the sizing trusts) is longer than what the drain time leaves of
    `targetWaitSeconds`, every message so stopped misses the objective, so capacity is kept until the jobs running
    when the need fell could have finished: one service time. Otherwise (short jobs, workers that drain where a
    cold start misses, count mode, no wait objective) 2 minutes.
    """
    return scale_down_delay_why(spec, size, measured_startup)[0]


def scale_down_delay_why(
    spec: QueueScalerSpec, size: Sizing, measured_startup: float | None = None
) -> tuple[float, str]:
    """`scale_down_delay` and why it is what it is, in words for `check`."""
    policy = spec.policy
    if policy.scale_down.delay is not None:
        return policy.scale_down.delay, "stated"
    if size.throughput is None or size.drain_time is None or policy.target_wait is None:
        return DEFAULT_SCALE_DOWN_DELAY, "the default"
    cold = cold_start(spec, measured_startup)
    if policy.on_scale_in == "drain":
        if cold is not None and cold.fits:
            return UNNEEDED_POLLS * spec.polling_interval, (
                "two polls: workers drain, and a cold start fits the objective")
    elif stopped_jobs_miss(spec, size):
        return max(DEFAULT_SCALE_DOWN_DELAY, (size.per_replica or 1) / size.throughput), (
            "one serviceTime: a job a scale-in stops would miss the objective")
    return DEFAULT_SCALE_DOWN_DELAY, "the default"


def stopped_jobs_miss(spec: QueueScalerSpec, size: Sizing) -> bool:
    """Whether a job a scale-in stops misses the objective whatever happens next: one service time (at the
    throughput the sizing trusts) is longer than what the drain time leaves of `targetWaitSeconds`."""
    policy = spec.policy
    if size.throughput is None or size.drain_time is None or policy.target_wait is None:
        return False
    return (size.per_replica or 1) / size.throughput > policy.target_wait - size.drain_time


def releases_when_quiet(spec: QueueScalerSpec, size: Sizing, measured_startup: float | None = None) -> bool:
    """Whether a burst's capacity may go before the scale-down delay, at a quiet poll.

    The 2-minute delay keeps a scale-in from stopping jobs (a ReplicaSet cannot tell busy pods from idle ones), but
    after a burst it holds the burst's replicas idle while a few messages trickle through them. Where the delay is
    that default (not stated, workers that do not drain, jobs not long against the objective), a cold start fits
    the objective (a replica released too soon comes back in time), and one job is shorter than a poll (so what is
    still in flight at a poll is young, and a stopped one is redone for less than a poll's work; longer or
    heavy-tailed jobs still running after the need fell are the long ones), capacity two polls found unneeded
    goes at the first poll where the replicas removed hold, in expectation, at most QUIET_KILLS messages, or
    where no more is in flight than the hour's mean (a steady stream under the burst keeps about that many in
    flight: waiting out the delay would stop as many, and only hold the burst's replicas idle meanwhile). The
    account of stops (controller/kills.py) still gates a release that would pass the hour's budget.
    """
    policy = spec.policy
    if policy.scale_down.delay is not None or policy.on_scale_in == "drain" or size.throughput is None:
        return False
    cold = cold_start(spec, measured_startup)
    if cold is None or not cold.fits:
        return False
    service = (size.per_replica or 1) / size.throughput
    return (service <= spec.polling_interval
            and scale_down_delay(spec, size, measured_startup) == DEFAULT_SCALE_DOWN_DELAY)


def _quiet_release(
    spec: QueueScalerSpec, size: Sizing, memory: ScalingMemory, now: float, current: int, count: float,
    measured_startup: float | None, stabilized: int, delay: float,
) -> tuple[int, float] | None:
    """The replicas to release to at this poll before the scale-down `delay`, and the messages the replicas removed
    are expected to hold (see `releases_when_quiet`); None to hold. `stabilized`: what a stated
    `scaleDown.stabilizationWindow` keeps, at least.

    A ReplicaSet picks the pods it removes without knowing which are busy, so removing `current - kept` of
    `current` replicas stops, in expectation, that share of the messages in flight (the count, at most the
    slots of the current replicas); told the pods' counts (`inFlight`), it removes the least busy, which hold less
    (`kills.expected_stops`)."""
    if not releases_when_quiet(spec, size, measured_startup):
        return None
    kept = max(stabilized, _window(memory.recommendations, now, UNNEEDED_POLLS * spec.polling_interval, max))
    if kept >= current or kept > QUIET_SHARE * current:
        return None
    per_replica = size.per_replica or 1
    stopped = kills.expected_stops(count, current, kept, per_replica, least_busy=spec.in_flight is not None)
    if stopped <= QUIET_KILLS or kills.no_busier_than_usual(spec, memory, now, delay, count, current, per_replica):
        return kept, stopped
    return None


def rising_keep(
    spec: QueueScalerSpec, size: Sizing, count: float, standing: float, slope: float | None, current: int,
    measured_startup: float | None,
) -> tuple[int, float] | None:
    """Where a cold start misses the objective and the count is rising, the replicas a release must keep, and the
    cold start's seconds; None where it need keep none.

    A released replica asked back comes a poll and a start-up later, too late where a cold start does not fit the
    objective, so a release keeps the slots the count in flight will fill by then at this poll's trend (at most the
    current replicas: it holds, never adds). On a stream swinging with a period longer than the scale-down delay,
    capacity unneeded for the whole delay went at the trough's end, as the next rise began (holdout-sms-gateway:
    3 -> 2 replicas at a count of 126 rising, and the peak then waited for a replica 45 s to start)."""
    cold = cold_start(spec, measured_startup)
    if cold is None or cold.fits or slope is None or slope <= 0 or size.per_replica is None:
        return None
    ahead = max(0.0, count - standing) + slope * (cold.poll + cold.startup)
    keep = min(current, math.ceil(kills.in_flight(ahead, current, size.per_replica) / size.per_replica - 1e-9))
    return keep, cold.wait


# Work counted soon after going to zero (`early_wake_within`) this often within EARLY_WAKE_WINDOW keeps one replica up
# where a cold start misses the objective (`stays_awake`). Once: the first early wake has already made a message
# wait a cold start, and on holdout-tiny-trickle waiting for a second let three cold starts catch nine requests on
# one seed of eight (p99 79 s against 60 s); staying up for the day costs at most one replica-day, which a rule
# that wakes early spends anyway. A day: while the replica stays up, nothing the polls count renews the evidence
# (they count zero, as before), so an hour's memory went to zero again each hour.
EARLY_WAKES = 1
EARLY_WAKE_WINDOW = 86400.0


def early_wake_within(spec: QueueScalerSpec, to_zero_delay: float, need: float) -> float:
    """How soon after going to zero work counted makes an early wake: two polls, or for a trickle (less work than a
    replica: `need` below one) the scale-to-zero delay. More work than that is a burst, which `ready_for_burst`
    answers where it recurs."""
    return max(2 * spec.polling_interval, to_zero_delay if need < 1 else 0.0)


def remember_early_wake(
    memory: ScalingMemory, now: float, current: int, active: bool, within: float
) -> ScalingMemory:
    """The memory with this poll among the early wakes if it is the first to count work since the rule went to
    zero and came `within` seconds of it (`early_wake_within`); wakes older than EARLY_WAKE_WINDOW are forgotten,
    and only the last EARLY_WAKES are kept.

    A queue whose work comes between polls (a producer flushing every 20 s, polled every 10 s at moments its
    workers have just emptied it) counts zero at every poll while its replica works, so the rule goes to zero,
    and the next poll counts what gathered since: the work never stopped, the polls missed it. A trickle whose
    gaps are often longer than the scale-to-zero delay goes to zero after one and is woken by the next message a
    few minutes later: had the replica stayed up for another delay it would have cost no more than the wait
    already spent, and where a cold start misses the objective each such wake makes a message late."""
    kept = tuple(t for t in memory.early_wakes if now - t < EARLY_WAKE_WINDOW)
    went = memory.last_scale_down
    if (active and current == 0 and memory.pending_since is None and went is not None
            and now - went <= within):
        kept = (*kept, now)[-EARLY_WAKES:]
    return memory if kept == memory.early_wakes else replace(memory, early_wakes=kept)


def stays_awake(spec: QueueScalerSpec, memory: ScalingMemory, measured_startup: float | None = None) -> bool:
    """Whether an inactive rule keeps one replica instead of going to zero: where a cold start misses the
    objective (each wake makes the work that gathered wait a poll and a start-up) and work was counted at the first
    polls after going to zero at least EARLY_WAKES times within a day (`remember_early_wake`)."""
    cold = cold_start(spec, measured_startup)
    return cold is not None and not cold.fits and len(memory.early_wakes) >= EARLY_WAKES


def readies_bursts(spec: QueueScalerSpec, measured_startup: float | None = None) -> bool:
    """Whether the rule readies replicas for bursts that recur: where a burst on idle capacity misses the
    objective (rate mode with `targetWaitSeconds`; a cold start and one service time, `ColdStart.burst_wait`), so
    that only replicas ready before a burst can meet it, unless the rule says `recurringBursts: ignore`."""
    if spec.policy.recurring_bursts != "ready":
        return False
    cold = cold_start(spec, measured_startup)
    return cold is not None and cold.burst_wait > cold.target_wait


def remember_burst(
    spec: QueueScalerSpec,
    count: float,
    history: Sequence[Observation],
    memory: ScalingMemory,
    now: float,
    measured_startup: float | None = None,
    *,
    current: int,
) -> ScalingMemory:
    """The memory with this poll's rise of the count remembered as (part of) a burst, where the rule readies
    replicas for bursts and the count rose by at least what one replica is sized for (and 20 messages) since the
    last poll. The rise is the count's, net of what the replicas completed meanwhile: a burst landing on another's
    backlog, or taken in part by replicas readied for it, shows smaller (docs/policy.md, *Bursts that recur*).

    A rise within chance is no burst: steady arrivals and the `current` replicas' completions, up to `c` of each a
    poll (`c` the completions at the throughput the sizing trusts), move the count by about `sqrt(2c)` from poll
    to poll, so a rise must also exceed CHANCE such square roots. Without it, a count mostly in flight (up to 9
    replicas of 32 slots, 8 s jobs) rose by a replica's 42 at 54 of 2,055 polls away from its bursts, and three
    chance rises at one period made a series, readied for with all 20 replicas at 99 polls (holdout-image-ai:
    204,500 worker-seconds against 168,440 without them, the same p99)."""
    if not readies_bursts(spec, measured_startup) or not history:
        return memory
    previous = history[-1].total(spec)
    if previous is None:
        return memory
    before = history[-2].total(spec) if len(history) > 1 else None
    size = sizing(spec, measured_startup, learned_throughput=memory.learned_throughput)
    churn = 2 * current * (size.throughput or 0.0) * (now - history[-1].time)
    threshold = max(DRAIN_MESSAGES, size.target, CHANCE * math.sqrt(churn))
    bursts = recurring.remember(
        memory.bursts, now, count - previous, None if before is None else previous - before, threshold)
    return memory if bursts == memory.bursts else replace(memory, bursts=bursts)


def ready_for_burst(
    spec: QueueScalerSpec, memory: ScalingMemory, now: float, size: Sizing, measured_startup: float | None = None
) -> tuple[int, recurring.ExpectedBurst] | None:
    """The replicas to have ready for a burst expected soon, and the burst; None where none is expected.

    A series of bursts at a steady period (three in a row) is expected again one period after its last. From a
    start-up and a poll before it until a poll after it (a burst that comes shows by then), the rule keeps ready
    the replicas that clear the largest burst of the series within `targetWaitSeconds` on their own, at the
    throughput the sizing trusts.
    """
    policy = spec.policy
    if not memory.bursts or size.throughput is None or policy.target_wait is None:
        return None
    if not readies_bursts(spec, measured_startup):
        return None
    poll = spec.polling_interval
    lead = startup_time(spec, measured_startup) + poll
    best: tuple[int, recurring.ExpectedBurst] | None = None
    for burst in recurring.expected(memory.bursts, now, poll):
        if now >= burst.at - lead:
            replicas = min(spec.max_replicas, math.ceil(burst.messages / (size.throughput * policy.target_wait)))
            if best is None or replicas > best[0]:
                best = (replicas, burst)
    return best


def sizing(
    spec: QueueScalerSpec, measured_startup: float | None = None, *, learned_throughput: float | None = None
) -> Sizing:
    """The mode and the knobs of `spec` after the defaults that depend on it; `measured_startup` is the target's
    start-up time as the operator measured it (None: unknown), `learned_throughput` what the drains showed (the
    memory's; bounded by the stated throughput)."""
    policy = spec.policy
    throughput = trusted_throughput(spec, learned_throughput)
    if throughput is None:
        return Sizing(
            mode="count",
            target=policy.target_per_replica or DEFAULT_TARGET_PER_REPLICA,
            per_replica=policy.messages_per_replica,
            throughput=None,
            lookahead=policy.lookahead or 0.0,
            drain_time=None,
        )
    # A growing backlog is projected over the time new replicas take to start.
    lookahead = policy.lookahead if policy.lookahead is not None else startup_time(spec, measured_startup)
    drain = policy.drain_time
    if drain is None:
        if policy.target_wait is not None:
            drain = DRAIN_SHARE_OF_TARGET_WAIT * policy.target_wait
        else:
            drain = DEFAULT_DRAIN_TIME
    per_replica = policy.messages_per_replica or 1
    return Sizing(
        mode="rate",
        target=policy.target_per_replica or per_replica + backlog_per_replica(per_replica, throughput, drain),
        per_replica=per_replica,
        throughput=throughput,
        lookahead=lookahead,
        drain_time=drain,
    )


def backlog_per_replica(per_replica: int, throughput: float, drain: float) -> float:
    """The backlog one replica is sized to clear within `drain` seconds: `throughput x drain`, but none where one
    job (`per_replica / throughput`) is longer than the drain time.

    A waiting message is taken when a slot frees, that is when a job ends. A fraction of a job per replica is right
    for a large pool whose jobs end at scattered moments, one every `job / slots` seconds; but jobs that start
    together (a clump, a burst, replicas started at once) all end about a job later, so the message queued behind
    them waits a whole job, longer than the drain time. Clumps of 6 jobs of 20-40 s under a 20 s objective were
    sized at a third of a job per replica (5 replicas for 6), and one message of each clump waited a job out: p99
    33 s simulated, 36.55 s live (benchmarks/scenarios/fidelity/fidelity-clumps.yaml). Where jobs fit the drain
    time, slots free within it whatever their phase, and the fraction is kept."""
    return 0.0 if per_replica / throughput > drain else throughput * drain


def raw_need(
    spec: QueueScalerSpec,
    count: float,
    slope: float | None,
    current: int,
    measured_startup: float | None = None,
    *,
    learned_throughput: float | None = None,
    starting: float = 0.0,
    busy: int | None = None,
    usual_busy: float | None = None,
    standing: float = 0.0,
) -> float:
    """Replicas the count asks for, unrounded, before tolerance and limits.

    `(count + growth x lookahead) / target`: a growing queue is sized for what new pods will find when they
    start. In rate mode the growth was measured under the replicas that were ready, so what the replicas asked
    for and still starting will take before the lookahead ends (`starting`, replica-seconds of it, see
    `starting_work`) is not projected as backlog: otherwise every poll of a long start-up asks again for the
    growth the replicas on their way will take. They have shown nothing of their speed yet, so they are counted at
    LEARNED_FLOOR x the throughput, the slowest a statement is trusted to be wrong by (a serviceTime told half the
    real one must still meet the objective). The projection never falls below the count. When
    messagesPerReplica is known (and always in rate mode), the approximate count's in-flight part (at most
    messagesPerReplica per current replica, or per `busy` replica where the caller knows which will be busy, see
    `busy_replicas`) keeps its replicas: the need never drops below the replicas that are busy, so a scale-in
    never counts on busy workers being idle; `standing`, the count's part no replica holds (`remember_standing`),
    is not read as in flight. `usual_busy`, the replicas the last hour's mean in flight keeps busy,
    says how close the load runs to maxReplicas (`target_under_cap`).
    """
    size = sizing(spec, measured_startup, learned_throughput=learned_throughput)
    growth = max(0.0, slope or 0.0)
    projected = count + growth * size.lookahead
    if growth > 0 and starting > 0 and size.throughput is not None:
        projected = max(count, projected - LEARNED_FLOOR * size.throughput * starting)
    target = size.target
    if size.per_replica is not None:
        held = current if busy is None else busy
        busy_need = kills.in_flight(max(0.0, count - standing), held, size.per_replica) / size.per_replica
        if usual_busy is not None:
            target = target_under_cap(spec, size, usual_busy)
        return max(projected / target, busy_need)
    return projected / target


def target_under_cap(spec: QueueScalerSpec, size: Sizing, busy: float) -> float:
    """The count one replica is sized for where the load keeps `busy` replicas busy as a rule (the last hour's
    mean in flight, a burst trimmed) and maxReplicas leaves little room beyond them.

    A default drain time keeps a standing backlog (a message waits about the drain time), which is worth keeping
    only while the replicas up to maxReplicas could clear it if arrivals rose: spare replicas `maxReplicas - busy`
    clear the busy replicas' backlog of `drain` seconds within the rest of the objective when
    `busy x drain <= (maxReplicas - busy) x (targetWait - drain)`, so the drain time is at most
    `targetWait x (1 - busy / maxReplicas)`: half the objective up to half the cap, nothing at the cap. A burst
    fills the cap for minutes and leaves, so the usual load decides, not this poll's. A rule that states its
    drainTime or targetPerReplica keeps it."""
    policy = spec.policy
    if (policy.drain_time is not None or policy.target_per_replica is not None or policy.target_wait is None
            or size.throughput is None or size.per_replica is None or size.drain_time is None):
        return size.target
    if size.target == size.per_replica:
        return size.target  # jobs longer than the drain time: no backlog to shorten (`backlog_per_replica`)
    room = max(0.0, 1.0 - busy / spec.max_replicas)
    return size.per_replica + size.throughput * min(size.drain_time, policy.target_wait * room)


def starting_work(
    memory: ScalingMemory, now: float, startup: float, lookahead: float, current: int
) -> tuple[int, float]:
    """The replicas asked for and still starting at this poll that will be ready before `lookahead` ends, and the
    replica-seconds they will work by then: the replicas ready over time (`ready_steps`: a scale-up's replicas
    ready a start-up after it was asked, a scale-down taking replicas still starting first) beyond those ready
    before this poll, whose work the trend already shows."""
    steps = ready_steps(memory, current, startup)
    end = now + lookahead
    before = next(ready for at, ready in reversed(steps) if at < now)
    by_end = next(ready for at, ready in reversed(steps) if at < end)
    return max(0, round(by_end - before)), ready_seconds_above(steps, before, now, end)


def busy_replicas(
    memory: ScalingMemory, now: float, startup: float, count: float, current: int, per_replica: int,
    throughput: float,
) -> int:
    """The replicas the count keeps busy, below which the need never drops: those ready now (`ready_steps`), and
    those still starting for which messages counted now will still be waiting once they are ready, after the
    ready replicas took what they can at `throughput` meanwhile (earlier replicas first).

    A replica still starting holds no message, and a scale-in removes those first, as a ReplicaSet does: removing
    one stops no work. Counted as busy whenever the count covered its slots, they were held after a burst of 12 s
    jobs on pods three minutes to start, whose messages the ready replicas took long before any was ready. Not
    counted at all, they were released between polls of a stream of 5-minute jobs whose messages wait for them
    (holdout-long-jobs: four times the reversals)."""
    steps = ready_steps(memory, current, startup)
    ready = min(float(current), next(replicas for at, replicas in reversed(steps) if at <= now))
    waiting = count - per_replica * ready
    promised = 0.0
    before = ready
    for at, replicas in steps:
        if at <= now:
            continue
        added, before = replicas - before, max(before, replicas)
        if added <= 0:
            continue
        left = waiting - ready * throughput * (at - now) - per_replica * promised
        promised += min(added, max(0.0, left) / per_replica)
    return min(current, math.ceil(ready + promised - 1e-9))


def decide(
    spec: QueueScalerSpec,
    observation: Observation,
    history: Sequence[Observation],
    current: int,
    memory: ScalingMemory,
    now: float,
    *,
    paused: bool = False,
    measured_startup: float | None = None,
) -> Decision:
    """The replica count for this tick, why, and the memory to keep. `history` holds earlier observations.

    `measured_startup`: the seconds the target last took from a scale-up to ready (the operator's target watch);
    used where the rule sets no `startupTime`.
    """
    bounds = effective_bounds(spec, now)
    count = observation.total(spec)
    slope = trend(spec, [*history, observation], now)
    base = Decision(
        desired=current, current=current, reason=Reason.STEADY, message="", memory=memory,
        count=count, trend=slope, bounds=bounds,
    )

    if paused:
        return replace(base, reason=Reason.PAUSED, message=f"paused: holding {plural(current, 'replica')}")

    if observation.failed:
        return _on_failure(spec, observation, history, base, current, memory, now, bounds, slope, measured_startup)

    assert count is not None
    if memory.consecutive_failures or memory.last_known_counts or memory.arrivals_seen is not None:
        memory = replace(memory, consecutive_failures=0, last_known_counts=(), arrivals_seen=None)
    startup = startup_time(spec, measured_startup)
    stated = sizing(spec)  # messagesPerReplica and drainTime depend on the rule only
    drain_time = stated.drain_time or 0.0
    nothing_visible = bool(observation.readings) and all(r.oldest_age == 0.0 for r in observation.readings)
    memory = learn_throughput(spec, count, slope, current, memory, now, startup, drain_time,
                              nothing_visible=nothing_visible)
    memory = learn_from_wait(spec, observation, history, count, slope, current, memory, now, startup, drain_time)
    memory = remember_burst(spec, count, history, memory, now, measured_startup, current=current)
    memory = kills.remember_in_flight(spec, count, current, stated.per_replica, memory, now)
    memory = remember_standing(spec, count, current, memory, now, nothing_visible=nothing_visible)
    return _on_count(spec, base, current, memory, now, bounds, count, slope, measured_startup,
                     standing=0.0 if front_waited(spec, observation) else memory.standing or 0.0)


def _on_failure(
    spec: QueueScalerSpec,
    observation: Observation,
    history: Sequence[Observation],
    base: Decision,
    current: int,
    memory: ScalingMemory,
    now: float,
    bounds: Bounds,
    slope: float | None,
    measured_startup: float | None,
) -> Decision:
    if not memory.consecutive_failures:
        memory = replace(memory, arrivals_seen=arrivals_seen(spec, history, current, memory, measured_startup))
    failures = memory.consecutive_failures + 1
    memory = replace(memory, consecutive_failures=failures)
    count, memory = known_count(spec, observation, history, memory)
    if memory.last_known_counts:
        slope = trend(spec, [*history, observation], now, held=memory.last_known_counts)
    errors = [r.error for r in observation.readings if r.error is not None]
    what = "; ".join(f"{e.code}: {e.message}" for e in errors) or "no source answered"
    fallback = spec.fallback
    # What is known (the sources that answered, the failing ones' last counts) is a lower bound of the need:
    # good enough to scale up on, never down.
    answered = None
    if count is not None:
        answered = _on_count(spec, base, current, memory, now, bounds, count, slope, measured_startup,
                             arrivals=memory.arrivals_seen)
        if answered.desired <= current:
            answered = None
    if failures >= fallback.failure_threshold:
        floor = max(current, fallback.replicas or 0) if fallback.mode == "fixed" else current
        if answered is not None and answered.desired > floor:
            return replace(
                answered, memory=replace(memory, inactive_since=None), fallback=True,
                message=f"{answered.message} (on what is known: the sources that answered and the last counts "
                f"of those failing; {failures} polls in a row failed: {what})",
            )
        desired = _clamp(floor, bounds)
        how = (f"raising to at least {plural(fallback.replicas or 0, 'replica')}" if fallback.mode == "fixed"
               else f"holding {plural(current, 'replica')}")
        return replace(
            base, desired=desired, memory=memory, reason=Reason.FALLBACK, fallback=True,
            message=f"{failures} polls in a row failed ({what}); fallback: {how}",
        )
    if answered is not None:
        return replace(
            answered, memory=replace(memory, inactive_since=None),
            message=f"{answered.message} (on the sources that answered and the last counts of those failing; "
            f"{what})",
        )
    return replace(
        base, desired=_clamp(current, bounds), memory=memory, reason=Reason.POLL_FAILED,
        message=f"poll failed ({what}); holding {current} replicas "
        f"(fallback after {fallback.failure_threshold - failures} more)",
    )


def _on_count(
    spec: QueueScalerSpec,
    base: Decision,
    current: int,
    memory: ScalingMemory,
    now: float,
    bounds: Bounds,
    count: float,
    slope: float | None,
    measured_startup: float | None,
    standing: float = 0.0,
    arrivals: float | None = None,
) -> Decision:
    """The decision on a count. `standing`: the part of it the in-flight floor does not read as busy workers
    (`remember_standing`); none on a failed poll, which never scales down anyway. `arrivals`: on a failed poll,
    the messages a second arriving when every source last answered (`arrivals_seen`)."""
    policy = spec.policy
    learned = memory.learned_throughput
    size = sizing(spec, measured_startup, learned_throughput=learned)
    to_zero_delay = scale_to_zero_delay(spec, measured_startup)
    active = count > policy.activation_threshold
    inactive_since = None if active else (memory.inactive_since if memory.inactive_since is not None else now)
    startup = startup_time(spec, measured_startup)
    starting, work = (starting_work(memory, now, startup, size.lookahead, current)
                      if size.throughput is not None and (slope or 0.0) > 0 else (0, 0.0))
    busy = (busy_replicas(memory, now, startup, count, current, size.per_replica or 1, size.throughput)
            if size.throughput is not None else None)
    usual_busy = (memory.in_flight_mean[2] / size.per_replica
                  if memory.in_flight_mean is not None and size.per_replica else None)
    need = raw_need(spec, count, slope, current, measured_startup, learned_throughput=learned, starting=work,
                    busy=busy, usual_busy=usual_busy, standing=standing)
    serving = arrivals / size.throughput if arrivals is not None and size.throughput else None
    if serving is not None and serving > need:
        need = serving
    else:
        serving = None
    within_tolerance = current > 0 and abs(need / current - 1.0) <= policy.tolerance
    recommended = current if within_tolerance else math.ceil(need - 1e-9)
    to_zero = False
    deferred = False
    pending_since = None
    memory = remember_early_wake(memory, now, current, active, early_wake_within(spec, to_zero_delay, need))
    awake = False
    if active and current == 0:
        # Rate mode knows how long work may wait: a trickle too small for a replica (need < 1) waits, up to the
        # drain time, for company, instead of waking a pod for every message.
        pending_since = memory.pending_since if memory.pending_since is not None else now
        if size.drain_time is not None and policy.target_wait is not None and need < 1:
            deferred = now - pending_since < size.drain_time
    if deferred:
        recommended = 0
    elif active:
        recommended = max(recommended, 1)
    elif current == 0:
        recommended = 0
    elif bounds.minimum == 0 and inactive_since is not None and now - inactive_since >= to_zero_delay:
        awake = stays_awake(spec, memory, measured_startup)
        recommended, to_zero = (max(recommended, 1), False) if awake else (0, True)
    else:
        recommended = max(recommended, 1)
    readying = ready_for_burst(spec, memory, now, size, measured_startup)
    if readying is not None and readying[0] > recommended:
        recommended, to_zero, deferred = readying[0], False, False
    else:
        readying = None

    release_delay = scale_down_delay(spec, size, measured_startup)
    # In rate mode: a wait since a poll of the history reads the replicas back to a start-up before its oldest
    # poll, and the replicas still starting are those asked within a start-up.
    events_kept = spec.history_seconds + spec.polling_interval + startup if size.throughput is not None else 0.0
    memory = _remember(memory, spec, now, current, recommended, inactive_since, release_delay, events_kept)
    if memory.pending_since != pending_since:
        memory = replace(memory, pending_since=pending_since)
    summary = _summary(spec, count, slope, need, size.throughput)
    if standing and size.per_replica is not None and count - standing < size.per_replica * current:
        summary += (f" (about {_n(round(standing))} of the count held by no replica, as polls with nothing "
                    f"visible showed: not counted as in flight)")
    if starting:
        summary += f" (the trend less what {plural(starting, 'replica')} still starting will take)"
    if serving is not None and arrivals is not None:
        summary += (f" (the replicas that serve the {arrivals:.3g} messages a second arriving when every source "
                    "last answered)")
    if readying is not None:
        replicas, burst = readying
        due = f"in {duration(burst.at - now)}" if burst.at > now else "now"
        summary += (f"; readying {plural(replicas, 'replica')} for a burst of about {_n(round(burst.messages))} "
                    f"expected {due} (seen every {duration(burst.period)})")

    # Stabilization windows (HPA): going up takes the smallest recent recommendation, going down the largest.
    up_rec = _window(memory.recommendations, now, policy.scale_up.stabilization_window, min)
    down_rec = _window(memory.recommendations, now, policy.scale_down.stabilization_window, max)
    stabilized = current
    held_by_delay = False
    quiet: tuple[int, float] | None = None
    if current < up_rec:
        stabilized = up_rec
    elif current > down_rec:
        stabilized = down_rec
        if release_delay > 0:
            # Release only capacity unneeded for the whole delay, then in one step to what the last polls
            # want: one large step kills less in-flight work than a ramp of small ones. A burst's capacity may
            # go sooner, at a poll where what it removes holds about nothing.
            if _window(memory.recommendations, now, release_delay, max) >= current:
                quiet = _quiet_release(spec, size, memory, now, current, count, measured_startup, down_rec,
                                       release_delay)
                if quiet is None:
                    stabilized, held_by_delay = current, True
                else:
                    stabilized = quiet[0]
            else:
                stabilized = _window(memory.recommendations, now, release_delay, max)
    rising: tuple[int, float] | None = None
    if stabilized < current and not to_zero:
        rising = rising_keep(spec, size, count, standing, slope, current, measured_startup)
        if rising is not None and rising[0] > stabilized:
            stabilized = rising[0]
        else:
            rising = None
    # Where the last hour's scale-ins of killed workers, with this release, stop more than the objective's budget,
    # the release waits for a poll with no more in flight than the hour's mean where it stops no more than an
    # hour's budget, and keeps the steady level's replicas (controller/kills.py).
    floor = kills.stop_floor(spec, memory, now, size.per_replica, size.throughput, count, current, stabilized)
    if floor is not None:
        if floor.waiting:
            stabilized = current
        elif stabilized < floor.replicas:
            stabilized = min(current, floor.replicas)
        else:
            floor = None
    if to_zero:
        stabilized = 0  # the scale-to-zero delay is this step's own stabilization
    if current == 0 and active and not deferred:
        stabilized = max(stabilized, 1)

    desired = stabilized
    held_by_cooldown = False
    if desired > current and _within(memory.last_scale_up, now, policy.scale_up.cooldown):
        desired, held_by_cooldown = current, True
    if desired < current and _within(memory.last_scale, now, policy.scale_down.cooldown):
        desired, held_by_cooldown = current, True

    limited = False
    if desired > current:
        limit = max(_up_limit(policy.scale_up, memory, now, current), 1 if current == 0 else current)
        if desired > limit:
            desired, limited = limit, True
    elif desired < current and not to_zero:
        limit = _down_limit(policy.scale_down, memory, now, current)
        if desired < limit:
            desired, limited = limit, True

    final = _clamp(desired, bounds)
    memory = kills.record_scale_in(spec, count, current, final, size.per_replica, memory, now)
    reason, message = _explain(
        current=current, final=final, desired=desired, stabilized=stabilized, recommended=recommended,
        bounds=bounds, held_by_cooldown=held_by_cooldown, limited=limited, within_tolerance=within_tolerance,
        active=active, to_zero=to_zero, inactive_since=inactive_since, now=now, spec=spec,
        to_zero_delay=to_zero_delay, release_delay=release_delay if held_by_delay else None,
        deferred_until=(
            pending_since + (size.drain_time or 0.0) if deferred and pending_since is not None else None
        ),
        readying=readying is not None,
        quiet=None if quiet is None else (quiet[1], release_delay),
        floor=None if floor is None or to_zero else floor,
        awake=awake,
        rising=None if rising is None or floor is not None else rising[1],
    )
    return replace(
        base, desired=final, reason=reason, message=f"{summary}; {message}", memory=memory,
        recommended=recommended, active=active,
        unchosen_stops=kills.unchosen_stops(spec, count, current, final, size.per_replica),
    )


def _summary(spec: QueueScalerSpec, count: float, slope: float | None, need: float, throughput: float | None) -> str:
    sources = len(spec.sources)
    what = f"{spec.aggregation} of {sources} queues" if sources > 1 else "queue"
    growth = f", trend {slope:+.2f}/s" if slope is not None else ""
    stated = stated_throughput(spec)
    learned = (
        f" (at {throughput:.3g}/s a replica as drains and waits showed; the rule states {stated:.3g}/s)"
        if throughput is not None and stated is not None and abs(throughput / stated - 1) > 0.01 else ""
    )
    return f"{what} count {_n(count)}{growth} needs {need:.2f} replicas{learned}"


def _explain(
    *,
    current: int,
    final: int,
    desired: int,
    stabilized: int,
    recommended: int,
    bounds: Bounds,
    held_by_cooldown: bool,
    limited: bool,
    within_tolerance: bool,
    active: bool,
    to_zero: bool,
    inactive_since: float | None,
    now: float,
    spec: QueueScalerSpec,
    to_zero_delay: float,
    release_delay: float | None = None,
    deferred_until: float | None = None,
    readying: bool = False,
    quiet: tuple[float, float] | None = None,
    floor: kills.StopFloor | None = None,
    awake: bool = False,
    rising: float | None = None,
) -> tuple[Reason, str]:
    move = f"{current} -> {final}"
    too_late = ("the count is rising, and a replica released now could not be back within the objective (a cold "
                f"start takes {duration(rising)})" if rising is not None else "")
    by_schedule = f" (schedules: {', '.join(bounds.schedules)})" if bounds.schedules else ""
    if final > current:
        if final == bounds.minimum and desired < final:
            return Reason.AT_MINIMUM, f"raised to the minimum {bounds.minimum}{by_schedule}: {move}"
        if final == bounds.maximum and desired > final:
            return Reason.AT_MAXIMUM, f"capped at the maximum {bounds.maximum}{by_schedule}: {move}"
        if limited:
            return Reason.LIMITED_BY_STEP, f"scale-up step limit: {move} (wanted {stabilized})"
        if current == 0:
            return Reason.ACTIVATED_FROM_ZERO, f"above the activation threshold: {move}"
        return Reason.SCALED_UP, f"scaled up {move}"
    if final < current:
        if final == bounds.maximum and desired > final:
            return Reason.AT_MAXIMUM, f"lowered to the maximum {bounds.maximum}{by_schedule}: {move}"
        if final == bounds.minimum and desired < final:
            return Reason.AT_MINIMUM, f"down to the minimum {bounds.minimum}{by_schedule}: {move}"
        if to_zero or final == 0:
            return Reason.SCALED_TO_ZERO, (
                f"inactive for {duration(to_zero_delay)}: {move}"
            )
        if limited:
            return Reason.LIMITED_BY_STEP, f"scale-down step limit: {move} (wanted {stabilized})"
        if quiet is not None:
            stopped, delay = quiet
            return Reason.SCALED_DOWN, (
                f"scaled down {move} before the scale-down delay {duration(delay)}: unneeded for two polls, and the "
                f"replicas removed hold about {stopped:.1f} messages in flight")
        if floor is not None and final == floor.replicas:
            return Reason.SCALED_DOWN, f"scaled down {move} (recommended {recommended}): {floor.why()}"
        if too_late and final == stabilized:
            return Reason.SCALED_DOWN, f"scaled down {move}, not lower (recommended {recommended}): {too_late}"
        return Reason.SCALED_DOWN, f"scaled down {move}"
    # No change: say what held it.
    keep = f"keeping {current}"
    if held_by_cooldown:
        direction = "up" if stabilized > current else "down"
        return Reason.HELD_BY_COOLDOWN, f"scale-{direction} cooldown: {keep} (wanted {stabilized})"
    if limited:
        return Reason.LIMITED_BY_STEP, f"step limit: {keep} (wanted {stabilized})"
    if recommended > current and final == bounds.maximum:
        return Reason.AT_MAXIMUM, f"at the maximum {bounds.maximum}{by_schedule}"
    if recommended < current and final == bounds.minimum:
        return Reason.AT_MINIMUM, f"at the minimum {bounds.minimum}{by_schedule}"
    if readying:
        return Reason.STEADY, f"{keep} ready for it"
    if floor is not None and recommended < current:
        wait = f"; {floor.wait()}" if floor.waiting else ""
        return Reason.HELD_BY_STABILIZATION, f"{floor.why()}{wait}: {keep} (recommended {recommended})"
    if too_late and recommended < current:
        return Reason.HELD_BY_STABILIZATION, f"{too_late}: {keep} (recommended {recommended})"
    if release_delay is not None and recommended < current:
        return Reason.HELD_BY_STABILIZATION, (
            f"unneeded for less than the scale-down delay {duration(release_delay)}: {keep} "
            f"(recommended {recommended})")
    if stabilized == current and recommended != current:
        return Reason.HELD_BY_STABILIZATION, f"stabilization window: {keep} (recommended {recommended})"
    if deferred_until is not None:
        return Reason.ACTIVATION_DEFERRED, (
            f"too little work for a replica yet: it may wait, waking one in {duration(deferred_until - now)}"
        )
    if not active and current == 0:
        return Reason.INACTIVE, f"at or below the activation threshold {_n(spec.policy.activation_threshold)}"
    if awake and final == current:
        return Reason.HELD_BY_STABILIZATION, (
            f"inactive, but work was counted soon after going to zero within the last day (within two "
            f"polls, or less than a replica's work within the scale-to-zero delay {duration(to_zero_delay)}), and a "
            f"cold start misses the objective: {keep}")
    if not active and bounds.minimum == 0 and inactive_since is not None:
        left = to_zero_delay - (now - inactive_since)
        return Reason.PENDING_SCALE_TO_ZERO, f"inactive, scaling to zero in {duration(max(0.0, left))}"
    if within_tolerance:
        return Reason.WITHIN_TOLERANCE, f"within tolerance {_n(spec.policy.tolerance)}: {keep}"
    return Reason.STEADY, keep


def _n(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"


def _clamp(replicas: int, bounds: Bounds) -> int:
    return max(bounds.minimum, min(bounds.maximum, replicas))


def _within(since: float | None, now: float, window: float) -> bool:
    return since is not None and window > 0 and now - since < window


def _remember(
    memory: ScalingMemory, spec: QueueScalerSpec, now: float, current: int, replicas: int,
    inactive_since: float | None, release_delay: float, events_kept: float,
) -> ScalingMemory:
    """Add this tick's recommendation (as a run) and forget what no window or period can still see: scale events
    are kept for the step limits' periods and `events_kept` (what a wait since a poll of the history needs).

    A rule's first recommendation, where it is below the current replicas, follows one of the current replicas,
    as the HPA's recordInitialRecommendation does: the replicas a rule finds (a new rule, or one whose stored
    memory was lost) count as needed until the scale-down windows and delay have seen polls that say otherwise. (Not
    above: a scale-up window would then hold the first scale-up, which the replicas found need not wait for.)"""
    policy = spec.policy
    horizon = max(policy.scale_up.stabilization_window, policy.scale_down.stabilization_window,
                  release_delay, 2 * spec.polling_interval)
    runs = list(memory.recommendations) or ([Recommendation(now, current)] if replicas < current else [])
    if not runs or runs[-1].replicas != replicas:
        runs.append(Recommendation(now, replicas))
    # Run i lasts until run i+1 starts; drop runs that ended before the widest window began.
    cutoff = now - horizon
    first = 0
    while first < len(runs) - 1 and runs[first + 1].since <= cutoff:
        first += 1
    periods = [p.period for d in (policy.scale_up, policy.scale_down) for p in d.policies]
    event_horizon = now - max([events_kept, *periods])
    events, hands = _after(memory.scale_events, event_horizon), _after(memory.hand_scales, event_horizon)
    kept = memory.recommendations if first == 0 and len(runs) == len(memory.recommendations) else tuple(runs[first:])
    if (kept is memory.recommendations and events is memory.scale_events and hands is memory.hand_scales
            and inactive_since == memory.inactive_since):
        return memory  # the usual tick: nothing to remember, nothing to allocate
    return replace(memory, recommendations=kept, scale_events=events, hand_scales=hands,
                   inactive_since=inactive_since)


def _after(events: tuple[ScaleEvent, ...], horizon: float) -> tuple[ScaleEvent, ...]:
    """The events after `horizon`: the same tuple where none is older (the usual tick allocates nothing)."""
    if events and events[0].time <= horizon:
        return tuple(e for e in events if e.time > horizon)
    return events


def _window(runs: Sequence[Recommendation], now: float, window: float, pick: Callable[[list[int]], int]) -> int:
    """min or max of the recommendations whose run reaches into (now - window, now]."""
    cutoff = now - window
    values = [
        run.replicas
        for index, run in enumerate(runs)
        if index == len(runs) - 1 or runs[index + 1].since > cutoff
    ]
    return pick(values)


def _period_start(memory: ScalingMemory, now: float, period: float, current: int) -> int:
    """Replicas at the start of the period: current minus what was added plus what was removed since."""
    added = removed = 0
    for event in memory.scale_events:
        if event.time > now - period:
            change = event.to_replicas - event.from_replicas
            if change > 0:
                added += change
            else:
                removed -= change
    return current - added + removed


def _up_limit(direction: DirectionPolicy, memory: ScalingMemory, now: float, current: int) -> int:
    if direction.select_policy == "Disabled":
        return current
    if not direction.policies:
        return 2**31 - 1
    limits = []
    for step in direction.policies:
        start = _period_start(memory, now, step.period, current)
        if step.type == "Pods":
            limits.append(start + step.value)
        else:
            limits.append(math.ceil(start * (1 + step.value / 100)))
    return max(limits) if direction.select_policy == "Max" else min(limits)


def _down_limit(direction: DirectionPolicy, memory: ScalingMemory, now: float, current: int) -> int:
    if direction.select_policy == "Disabled":
        return current
    if not direction.policies:
        return 0
    limits = []
    for step in direction.policies:
        start = _period_start(memory, now, step.period, current)
        if step.type == "Pods":
            limits.append(start - step.value)
        else:
            limits.append(math.trunc(start * (1 - step.value / 100)))
    # Max selects the largest change, that is the lowest count.
    limit = min(limits) if direction.select_policy == "Max" else max(limits)
    return min(limit, current)
