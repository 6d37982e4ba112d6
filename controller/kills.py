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


def expected_stops(count: float, current: int, kept: int, per_replica: int, *, least_busy: bool = False) -> float:
    """The messages a scale-in from `current` to `kept` replicas stops in expectation: the removed pods' share of
    what is in flight (a ReplicaSet cannot tell busy pods from idle ones), or, where the rule writes the pods'
    in-flight counts to their deletion cost (`least_busy`, `spec.inFlight`), what the least busy hold."""
    held = in_flight(count, current, per_replica)
    if least_busy:
        return least_busy_hold(held, current, per_replica, current - kept)
    return held * (current - kept) / current


def least_busy_hold(held: float, pods: int, per_replica: int, removed: int) -> float:
    """What the `removed` least busy of `pods` pods hold in expectation, `held` messages in flight in their
    `per_replica` slots each.

    A free slot takes the next message whichever pod it is on and jobs end independently, so every placement is as
    likely (the simulator's model, controller/simulator/world.py `least_busy_takes`); each pod's count is taken as
    binomial, `per_replica` slots each busy with the chance `held / (pods x per_replica)`, independently of the
    others. The sum of the k smallest of n counts is the sum over x below `per_replica` of how many of the k are
    above x: `sum_x E[(k - B_x)+]`, B_x the pods with x or fewer, binomial over n with P(count <= x). Against the
    simulator's draws of placements of the fixed total it is within 5 % where the removed hold several messages
    (tests/policy/test_kill_floor.py); where they hold about none it says a little more (1 message on 2 one-slot pods:
    0.25, where the least busy holds none), independent counts varying more than counts of a fixed total. Never
    more than the removed pods' share (`expected_stops` blind): the k smallest are at most the mean."""
    if removed <= 0 or pods <= 0 or held <= 0.0:
        return 0.0
    removed = min(removed, pods)
    busy = min(1.0, held / (pods * per_replica))
    if busy >= 1.0:
        return float(removed * per_replica)
    total = 0.0
    at_most = 0.0  # P(count <= x), x = 0, 1, ...
    for x in range(per_replica):
        at_most += math.comb(per_replica, x) * busy**x * (1.0 - busy) ** (per_replica - x)
        if at_most >= 1.0 - 1e-12:
            break  # every pod holds x or fewer: none of the k is above x, or above any larger x
        total += _short_of(removed, pods, at_most)
    return total


def _short_of(k: int, n: int, q: float) -> float:
    """E[(k - B)+] for B binomial over n trials of chance q: by how much fewer than k of n succeed."""
    if q >= 1.0:
        return 0.0
    if q <= 0.0:
        return float(k)
    log_q, log_rest = math.log(q), math.log1p(-q)
    short = 0.0
    # Below 12 standard deviations under the mean the binomial's terms are nothing a float keeps.
    first = max(0, math.floor(n * q - 12.0 * math.sqrt(n * q * (1.0 - q))))
    for b in range(first, k):
        log_pmf = math.lgamma(n + 1) - math.lgamma(b + 1) - math.lgamma(n - b + 1) + b * log_q + (n - b) * log_rest
        short += (k - b) * math.exp(log_pmf)
    return short


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
    return add_stops(memory, now,
                     expected_stops(count, current, desired, per_replica, least_busy=spec.in_flight is not None))


def unchosen_stops(
    spec: QueueScalerSpec, count: float, current: int, desired: int, per_replica: int | None
) -> float:
    """What the scale-in from `current` to `desired` stops beyond what `record_scale_in` counted, should its pods
    not be the least busy of all after all (a rule with `inFlight` whose counts could not be read, or a rollout's
    ReplicaSets each removing its own least busy): the removed pods' share of what is in flight, less what the
    least busy hold. The reconciler adds it once the target says so (ScaleState.removal_blind). The share is what
    a ReplicaSet choosing blind stops in expectation; in a rollout each ReplicaSet still removes its own least
    busy, so it counts a little more than they stop, never less."""
    if (not counts_stops(spec) or spec.in_flight is None or per_replica is None or desired >= current
            or current == 0):
        return 0.0
    return max(0.0, expected_stops(count, current, desired, per_replica)
               - expected_stops(count, current, desired, per_replica, least_busy=True))


def add_stops(memory: ScalingMemory, now: float, stopped: float) -> ScalingMemory:
    """The memory with `stopped` more messages stopped as of `now`."""
    if stopped <= 0.0:
        return memory
    return replace(memory, stopped=(now, stopped_now(memory, now) + stopped))


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
    least_busy = spec.in_flight is not None
    releasing = expected_stops(count, current, asked, per_replica, least_busy=least_busy)
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
               or expected_stops(count, current, kept, per_replica, least_busy=least_busy) > floor.allowance)
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
