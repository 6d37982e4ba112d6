"""What the scale-ins of workers that are killed stop, and the floor that keeps it within the objective's budget.

A ReplicaSet removes pods without knowing which are busy, so removing k of n replicas stops, in expectation, k/n
of the messages in flight. A worker that is killed (`onScaleIn: kill`) leaves its messages invisible until their
visibility timeout ends, which the policy cannot see and assumes is the worst case: each message so stopped is
late. A p99 objective lets 1 % of the messages be late; STOP_BUDGET, half of that, may go to scale-ins. Where the
scale-ins of the last hour, with the release at hand, stop more, the release waits for a poll where it stops no
more than an hour's budget, and the rule keeps a floor: the replicas that hold what is in flight at the steady
level 99 % of the time (in flight is Poisson for Poisson arrivals, whatever the job lengths), so that a need that
wanders below it does not release, and stop, at every dip. See docs/policy.md, *Killed workers that stop too
much*.

The same hour's mean tells a burst's capacity when a poll is no busier than usual (controller/policy.py,
`releases_when_quiet`).

Pure functions of the rule, the count and the memory; the memory changes only when a scale-in stopped something
or the hour's mean in flight moved by a tenth or more, so that a steady queue does not rewrite status each poll.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import NormalDist

from controller.model.readings import ScalingMemory
from controller.model.rule import QueueScalerSpec

# The share of the messages completed that scale-ins may stop: half the 1 % a p99 objective lets be late.
STOP_BUDGET = 0.005
# Seconds over which the stops and the messages in flight are averaged (exponentially).
STOP_WINDOW = 3600.0
# The floor holds what is in flight this often, at the hour's mean.
FLOOR_QUANTILE = 0.99
# A count more than this many standard deviations above the mean in flight is a burst, not the steady level: it
# enters the mean only up to there.
BURST_SIGMAS = 3.0
# The remembered mean moves only when it changed by this share (of one message, below one).
MEAN_STEP = 0.1


@dataclass(frozen=True)
class StopFloor:
    """The floor in force, and the figures that put it there (for the decision's message)."""

    replicas: int
    stopped_per_hour: float
    completed_per_hour: float
    in_flight: float
    releasing: tuple[int, float] | None = None  # the release asked for, and what it would stop, where it counts
    waiting: bool = False  # a release waits for a poll with no more than `in_flight` in flight and `allowance` stops

    @property
    def allowance(self) -> float:
        """The most a release may stop: the budget of an hour's completions."""
        return STOP_BUDGET * self.completed_per_hour

    def why(self) -> str:
        asked = ("" if self.releasing is None else
                 f", and releasing to {self.releasing[0]} would stop {self.releasing[1]:.1f} more")
        return (f"scale-ins stopped about {self.stopped_per_hour:.0f} messages an hour{asked}, over "
                f"{STOP_BUDGET:.1%} of the {self.completed_per_hour:.0f} completed; not below the "
                f"{self.replicas} replicas that hold the {self.in_flight:.1f} messages in flight on average "
                f"{FLOOR_QUANTILE:.0%} of the time")

    def wait(self) -> str:
        return (f"a release waits for a poll with at most {self.in_flight:.1f} in flight where it stops at most "
                f"{self.allowance:.1f}")


def counts_stops(spec: QueueScalerSpec) -> bool:
    """Whether the rule keeps the account: workers killed on scale-in, and a wait objective to spend."""
    return spec.policy.on_scale_in == "kill" and spec.policy.target_wait is not None


def in_flight(count: float, current: int, per_replica: int) -> float:
    """What the approximate count holds in flight: at most every slot of the current replicas."""
    return min(count, float(per_replica * current))


def no_busier_than_usual(
    spec: QueueScalerSpec, memory: ScalingMemory, now: float, span: float, count: float, current: int,
    per_replica: int,
) -> bool:
    """Whether this poll has no more in flight than the hour's mean, where the rule keeps the account and has kept
    it for at least `span` seconds: the mean is what a steady stream keeps in flight, so what a release at a later
    poll would expect to find. A mean younger than that was kept mostly over the burst the rule began in (a count
    is trimmed only against the mean before it), not over the stream."""
    if not counts_stops(spec) or memory.in_flight_mean is None or now - memory.in_flight_mean[0] < span:
        return False
    return in_flight(count, current, per_replica) <= memory.in_flight_mean[2]


def expected_stops(count: float, current: int, kept: int, per_replica: int) -> float:
    """The messages a scale-in from `current` to `kept` replicas stops in expectation: the removed pods' share of
    what is in flight (a ReplicaSet cannot tell busy pods from idle ones)."""
    return in_flight(count, current, per_replica) * (current - kept) / current


def _decay(since: float, now: float) -> float:
    return math.exp(-max(0.0, now - since) / STOP_WINDOW)


def mean_in_flight(memory: ScalingMemory, now: float, sample: float) -> float:
    """The hour's mean in flight with this poll's `sample` in it; the sample where nothing was remembered yet.

    In the first hour, the time average since the first poll; after it, an exponential average over the hour. In
    both, a count more than BURST_SIGMAS (Poisson standard deviations) above the mean enters only up to there: a
    burst moves it little."""
    if memory.in_flight_mean is None:
        return sample
    started, since, mean = memory.in_flight_mean
    trimmed = min(sample, mean + BURST_SIGMAS * math.sqrt(mean) + 1.0)
    if now - started < STOP_WINDOW:
        return mean + (trimmed - mean) * (now - since) / (now - started) if now > started else mean
    return mean + (trimmed - mean) * (1.0 - _decay(since, now))


def remember_in_flight(
    spec: QueueScalerSpec, count: float, current: int, per_replica: int | None, memory: ScalingMemory, now: float
) -> ScalingMemory:
    """The memory with this poll in the hour's mean in flight, where the rule has a wait objective (the account of
    stops reads it, and the sizing near maxReplicas) and the mean moved by MEAN_STEP of itself (of one message,
    below one) or more since it was remembered."""
    if spec.policy.target_wait is None or per_replica is None:
        return memory
    sample = in_flight(count, current, per_replica)
    if memory.in_flight_mean is None:
        return replace(memory, in_flight_mean=(now, now, sample))
    started, _, remembered = memory.in_flight_mean
    mean = mean_in_flight(memory, now, sample)
    if abs(mean - remembered) < MEAN_STEP * max(1.0, remembered):
        return memory
    return replace(memory, in_flight_mean=(started, now, mean))


def stopped_now(memory: ScalingMemory, now: float) -> float:
    """The messages the scale-ins stopped, exponentially weighted over STOP_WINDOW, as of `now`."""
    if memory.stopped is None:
        return 0.0
    since, stopped = memory.stopped
    return stopped * _decay(since, now)


def record_scale_in(
    spec: QueueScalerSpec, count: float, current: int, desired: int, per_replica: int | None,
    memory: ScalingMemory, now: float,
) -> ScalingMemory:
    """The memory after a scale-in from `current` to `desired`, with the messages it is expected to stop."""
    if not counts_stops(spec) or per_replica is None or desired >= current or current == 0:
        return memory
    expected = expected_stops(count, current, desired, per_replica)
    if expected <= 0.0:
        return memory
    return replace(memory, stopped=(now, stopped_now(memory, now) + expected))


def stop_floor(
    spec: QueueScalerSpec, memory: ScalingMemory, now: float, per_replica: int | None, throughput: float | None,
    count: float, current: int, asked: int,
) -> StopFloor | None:
    """The floor a release from `current` to `asked` replicas keeps, where the last hour's scale-ins with this
    release would stop more than STOP_BUDGET of the messages completed (the mean in flight at the throughput the
    sizing trusts); None otherwise. Counting the release at hand gates the one that would pass the budget, not
    only those after it. The release waits (`waiting`) at a poll with more in flight than the hour's mean, or where
    it (to the floor at least) would stop more than an hour's budget."""
    if (not counts_stops(spec) or per_replica is None or throughput is None
            or memory.in_flight_mean is None or asked >= current):
        return None
    mean = memory.in_flight_mean[2]
    releasing = expected_stops(count, current, asked, per_replica)
    stopped = stopped_now(memory, now) * 3600.0 / STOP_WINDOW
    completed = mean * throughput / per_replica * 3600.0
    if stopped + releasing * 3600.0 / STOP_WINDOW <= STOP_BUDGET * completed:
        return None
    floor = StopFloor(
        replicas=math.ceil(poisson_quantile(mean, FLOOR_QUANTILE) / per_replica),
        stopped_per_hour=stopped, completed_per_hour=completed, in_flight=mean,
        releasing=(asked, releasing) if releasing > 0.0 else None,
    )
    kept = max(asked, min(current, floor.replicas))
    waiting = (in_flight(count, current, per_replica) > mean
               or expected_stops(count, current, kept, per_replica) > floor.allowance)
    return replace(floor, waiting=waiting)


def poisson_quantile(mean: float, q: float) -> int:
    """The smallest k with P(X <= k) >= q for X Poisson with `mean` (the normal approximation above 200)."""
    if mean <= 0.0:
        return 0
    if mean > 200.0:
        return math.ceil(mean + NormalDist().inv_cdf(q) * math.sqrt(mean))
    k, term = 0, math.exp(-mean)
    total = term
    while total < q:
        k += 1
        term *= mean / k
        total += term
    return k
