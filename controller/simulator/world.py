"""The simulated world: one Azure Storage queue and the worker Deployment that consumes it, in 1-second steps.

Messages travel in cohorts (all the messages that share an enqueue second and a delivery count), so a step costs
the same for 1 message or 10,000. Azure semantics kept:

- the approximate count includes invisible messages: delayed ones, and dequeued ones being processed;
- a dequeued message is invisible for the visibility timeout; a message whose processing outlasts it reappears,
  and is delivered again if a free slot takes it before that processing ends (the first worker's delete then
  fails: its pop receipt is no longer the message's); if not, the first worker's delete still succeeds and the
  message is gone. One whose worker was killed reappears too (at once when the worker released it as it stopped:
  `scaleIn: release`) and is delivered again;
- a message expires `ttl` after it was put, unless it is being processed;
- every delivery after the first is a duplicate (dequeue count > 1);
- a message's wait counts from when it was due: its put, or the end of the initial visibility delay it was put
  with (a scheduled message is not waiting while it is scheduled). Peek Messages still shows its InsertionTime,
  so the age a source reads (`front_age`) counts from the put.

Service times come from a table of equally likely values, each message its own: up to `ONE_BY_ONE` messages
dequeued in one step draw one by one, stratified over the step; more draw at once how many end after how many
steps (a multinomial over the table's outcomes), as independent jobs would. Until 2026-11-29 a step's messages
formed at most four groups, each sharing one draw: a stream of 200 half-second jobs a second then counted 0 to 249
in flight (sd 44) where independent jobs count 70 to 138 (sd 10, Poisson). Service times a live run measured can
instead be taken in the order its workers took them (`ServiceTime.in_order`), one a message. A service time s is
rounded to whole steps at random (up with probability frac(s)), so a slot with 0.3-second messages completes 1/0.3
of them per second on average, and the mean is kept (exactly over a step drawn one by one, on average otherwise).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from controller.simulator.scenario import Outage, QueueParams, Workers

# Up to this many messages dequeued in one step draw their service times one by one (stratified over the step);
# more draw how many end after how many steps at once (multinomial), as independent messages would.
ONE_BY_ONE = 4
PEEK_LIMIT = 32  # Azure's Peek Messages returns at most 32: a visible-only count is exact only below it

PENDING = 0
VISIBLE = 1


class Cohort:
    """Messages put in the same second with the same delivery count; `count` is how many are still queued.
    `stopped`: queued again because a scale-in stopped their work (killed, or released as the worker stopped)."""

    __slots__ = ("count", "deliveries", "due", "enqueued", "expires", "state", "stopped")

    def __init__(self, enqueued: int, count: int, deliveries: int, expires: float, state: int,
                 due: int | None = None, stopped: bool = False) -> None:
        self.enqueued = enqueued
        self.due = enqueued if due is None else due  # when it could first be taken: waits count from here
        self.count = count
        self.deliveries = deliveries
        self.expires = expires
        self.state = state
        self.stopped = stopped


# An in-flight group: [count, dequeued_at, enqueued, delivery number, deletes, due]. `deletes`: 1, the messages
# are deleted on completion; -k, their processing outlasted the visibility timeout and `World.copies[k]` holds what
# of them is queued again: on completion the delete succeeds for those no other delivery took meanwhile.
InFlight = list[int]


class Copy:
    """An overrun group's messages queued again (`cohort`: those no delivery took yet), and how many in-flight
    groups still work on them (`parts`: a scale-in's share splits a group)."""

    __slots__ = ("cohort", "parts")

    def __init__(self, cohort: Cohort) -> None:
        self.cohort = cohort
        self.parts = 1


@dataclass
class DrainGroup:
    """Pods removed gracefully: they take no new messages and stop when theirs are done or their grace ends."""

    pods: int
    deadline: int
    buckets: dict[int, list[InFlight]]
    count: int
    scale_in: int = 0  # which scale-in removed the pods: several queues' groups of one scale-in are the same pods


@dataclass
class Sample:
    """One row of the timeline."""

    t: int
    arrivals: int
    visible: int
    approximate_count: int
    in_flight: int
    desired: int
    ready_replicas: int


@dataclass
class Tally:
    """Running totals for the metrics."""

    arrived: int = 0
    processed: int = 0
    expired: int = 0
    duplicates: int = 0
    scale_in_duplicates: int = 0  # the duplicates whose previous delivery a scale-in stopped
    worker_seconds: float = 0.0
    busy_slot_seconds: float = 0.0
    slo_violation_seconds: int = 0
    oldest_age_max: int = 0
    wait_histogram: dict[int, int] = field(default_factory=dict)
    scale_actions: list[tuple[int, int, int]] = field(default_factory=list)  # (t, from, to)


class World:
    """The queue and the Deployment. Controllers read counts and set `desired`; `step(t)` advances one second."""

    def __init__(
        self,
        queue: QueueParams,
        workers: Workers,
        service_table: list[float],
        seed: int,
        *,
        slo_wait: float = math.inf,
        initial_replicas: int = 0,
        name: str = "queue",
        stream: int = 0,
    ) -> None:
        self.name = name
        self.outages: tuple[Outage, ...] = ()  # when polling this queue fails
        self.queue = queue
        self.workers = workers
        self.visibility_timeout = math.ceil(queue.visibility_timeout)
        self.ttl = queue.ttl
        self.table = service_table
        self.table_size = len(service_table)
        self.table_whole = [int(s) for s in service_table]
        self.table_fraction = [s - int(s) for s in service_table]
        # Each queue of a scenario draws its service times from its own stream; the first keeps the one-queue seed.
        self.rng = random.Random(seed * 7919 + 17 + stream * 104729)
        self.np_rng = np.random.default_rng(seed * 7919 + 31 + stream * 104729)
        self.outcomes, self.outcome_odds = service_outcomes(service_table, self.visibility_timeout)
        # Which messages a scale-in takes is its own stream, so that a policy's scale-ins do not shift the service
        # times every contender draws.
        self.scale_in_rng = random.Random(seed * 7919 + 29 + stream * 104729)
        # Measured service times taken in order: the next one for each message dequeued (the table is that order).
        self.in_order = workers.service_time.in_order
        self.next_index = 0
        self.slo_wait = slo_wait

        self.visible: deque[Cohort] = deque()
        self.visible_count = 0
        self.pending: list[tuple[int, int, Cohort]] = []  # (visible at, sequence, cohort)
        self.pending_count = 0
        self.sequence = 0
        self.expiring: deque[Cohort] = deque()  # arrivals, in enqueue order (so in expiry order)
        self.expiring_late: list[tuple[float, int, Cohort]] = []  # redeliveries, by expiry

        self.in_flight: dict[int, list[InFlight]] = {}  # completion step -> groups
        self.in_flight_active = 0  # messages held by ready pods
        self.in_flight_counted = 0  # in-flight messages still in the queue (counted by Azure)
        self.copies: dict[int, Copy] = {}  # an overrun group's messages queued again, by -deletes (see InFlight)
        self.copy_number = 0
        self.drains: list[DrainGroup] = []

        self.desired = initial_replicas
        self.ready = initial_replicas
        self.starting: deque[list[int]] = deque()  # [ready at, pods], oldest first
        self.starting_count = 0
        # When pods became ready and how many were ready then, lately: the simulated target measures start-up
        # times from it as the operator's workload watch does (our scale-up -> ready replicas reaching it).
        self.ready_changes: deque[tuple[int, int]] = deque(maxlen=64)
        self.tally = Tally()
        self.last_direction = 0
        self.reversals = 0
        self.scale_ins = 0

    @property
    def queue_names(self) -> tuple[str, ...]:
        return (self.name,)

    def queue_world(self, index: int) -> World:
        """The queue number `index` (a one-queue world is its own only queue)."""
        if index != 0:
            raise IndexError(index)
        return self

    @property
    def scale_actions(self) -> list[tuple[int, int, int]]:
        return self.tally.scale_actions

    def totals(self) -> Tally:
        """The run's totals."""
        return self.tally

    # ----------------------------------------------------------------------------------------------------------
    # What a controller sees

    @property
    def approximate_count(self) -> int:
        """Azure's x-ms-approximate-messages-count: visible, delayed and in-flight messages."""
        return self.visible_count + self.pending_count + self.in_flight_counted

    @property
    def in_flight_count(self) -> int:
        return self.in_flight_counted

    @property
    def draining_pods(self) -> int:
        conc = self.workers.concurrency
        return sum(min(g.pods, -(-g.count // conc)) for g in self.drains)

    @property
    def pods(self) -> int:
        """Pods that exist (and cost): starting, ready, and draining."""
        return self.ready + self.starting_count + self.draining_pods

    def set_desired(self, replicas: int, t: int, *, least_busy: bool = False, holding: int | None = None) -> None:
        """Scale the Deployment: new pods start now; removed pods are the not-ready ones first, then ready ones:
        any of them (a ReplicaSet's own choice), or the least busy (`least_busy`: the rule wrote the pods' in-flight
        counts to their deletion cost). `holding`: what the ready pods removed hold, where a MultiQueueWorld chose
        them over all its queues."""
        replicas = max(0, replicas)
        before = self.desired
        if replicas == before:
            return
        direction = 1 if replicas > before else -1
        if self.last_direction and direction != self.last_direction:
            self.reversals += 1
        self.last_direction = direction
        self.tally.scale_actions.append((t, before, replicas))
        self.desired = replicas
        if replicas > before:
            self.starting.append([t + math.ceil(self.workers.startup_delay), replicas - before])
            self.starting_count += replicas - before
            return
        remove = before - replicas
        while remove and self.starting:
            newest = self.starting[-1]
            taken = min(remove, newest[1])
            newest[1] -= taken
            self.starting_count -= taken
            remove -= taken
            if newest[1] == 0:
                self.starting.pop()
        if remove:
            if least_busy and holding is None and self.ready:
                holding = least_busy_takes([self.in_flight_active], self.ready, self.workers.concurrency,
                                           min(remove, self.ready), self.scale_in_rng)[0]
            self._remove_ready(remove, t, holding)

    # ----------------------------------------------------------------------------------------------------------
    # Scale-in

    def _take_share(self, pods: int, exactly: int | None = None) -> dict[int, list[InFlight]]:
        """Take the in-flight messages of `pods` of the ready pods: a ReplicaSet picks the pods it removes without
        knowing their work, so each holds, on average, the ready pods' share of it (`pods / ready` of every group).
        The share is taken in whole messages by systematic sampling from a random start: each group gives its share
        rounded up or down, and the total is the exact share rounded at random (up with probability equal to its
        fraction). Rounded down, as it once was, removing 1 of 7 pods with 6 messages in flight never took any.
        `exactly`: this many messages instead (what the least busy pods hold), spread over the groups the same way
        (the running total then ends on it, whatever the random start)."""
        if exactly is not None:
            fraction = exactly / self.in_flight_active if self.in_flight_active else 0.0
        else:
            fraction = pods / self.ready
        taken: dict[int, list[InFlight]] = {}
        carry = self.scale_in_rng.random()
        for step in sorted(self.in_flight):
            for group in self.in_flight[step]:
                exact = group[0] * fraction + carry
                n = int(exact + 1e-9)
                carry = exact - n
                if n:
                    group[0] -= n
                    taken.setdefault(step, []).append([n, *group[1:]])
                    if group[4] < 0:
                        self.copies[-group[4]].parts += 1
        for step in [s for s, groups in self.in_flight.items() if all(g[0] == 0 for g in groups)]:
            for group in self.in_flight.pop(step):
                if group[4] < 0:
                    self._release_copy(group[4])  # all of it taken: only the parts taken work on its copy
        moved = sum(g[0] for groups in taken.values() for g in groups)
        self.in_flight_active -= moved
        return taken

    def _remove_ready(self, pods: int, t: int, holding: int | None = None) -> None:
        pods = min(pods, self.ready)
        if pods <= 0:
            return
        share = self._take_share(pods, holding)
        self.ready -= pods
        self.scale_ins += 1
        if self.workers.scale_in == "kill":
            self._kill(share, t)
        elif self.workers.scale_in == "release":
            self._kill(share, t, released=True)
        elif share:
            grace = math.ceil(self.workers.termination_grace_period)
            count = sum(g[0] for groups in share.values() for g in groups)
            self.drains.append(DrainGroup(pods=pods, deadline=t + grace, buckets=share, count=count,
                                          scale_in=self.scale_ins))

    def _kill(self, buckets: dict[int, list[InFlight]], t: int, *, released: bool = False) -> None:
        """Killed work is lost; the messages reappear when their visibility timeout ends, and are delivered again.
        `released`: the worker made them visible again as it stopped (Update Message, visibilitytimeout=0), so
        they reappear at once; the work done on them is lost all the same."""
        for step, groups in buckets.items():
            for n, dequeued, enqueued, delivery, deletes, due in groups:
                self.tally.busy_slot_seconds -= n * max(0, step - t)
                if deletes < 0:
                    # A copy is already queued (its visibility ran out meanwhile); its work is stopped all the same.
                    self._release_copy(deletes).stopped = True
                    continue
                self.in_flight_counted -= n
                self._requeue(enqueued, n, delivery, t if released else max(t, dequeued + self.visibility_timeout),
                              due, stopped=True)

    def _requeue(self, enqueued: int, n: int, deliveries: int, visible_at: int, due: int, *,
                 stopped: bool = False) -> Cohort:
        expires = enqueued + self.ttl if self.ttl is not None else math.inf
        cohort = Cohort(enqueued, n, deliveries, expires, PENDING, due, stopped)
        self.sequence += 1
        heapq.heappush(self.pending, (visible_at, self.sequence, cohort))
        self.pending_count += n
        if self.ttl is not None:
            heapq.heappush(self.expiring_late, (expires, self.sequence, cohort))
        return cohort

    def _complete(self, group: InFlight) -> None:
        """A group's processing ends: its delete succeeds, unless its visibility ran out meanwhile and another
        delivery took the message (only what of its copy is still queued is deleted, and so processed)."""
        n, deletes = group[0], group[4]
        if deletes > 0:
            self.tally.processed += n
            self.in_flight_counted -= n
            return
        copy = self._release_copy(deletes)
        left = min(copy.count, n)
        if left:
            copy.count -= left
            if copy.state == VISIBLE:
                self.visible_count -= left
            else:
                self.pending_count -= left
            self.tally.processed += left

    def _release_copy(self, deletes: int) -> Cohort:
        """One in-flight group working on an overrun copy ended (completed or killed); the copy's cohort."""
        copy = self.copies[-deletes]
        copy.parts -= 1
        if not copy.parts:
            del self.copies[-deletes]
        return copy.cohort

    # ----------------------------------------------------------------------------------------------------------
    # Arrivals

    def put(self, t: int, n: int, delay: int = 0, queue: int = 0) -> None:  # noqa: ARG002  (one queue)
        """`n` messages put at `t`, invisible for `delay` seconds."""
        self.tally.arrived += n
        expires = t + self.ttl if self.ttl is not None else math.inf
        if delay > 0:
            cohort = Cohort(t, n, 0, expires, PENDING, t + delay)
            self.sequence += 1
            heapq.heappush(self.pending, (t + delay, self.sequence, cohort))
            self.pending_count += n
            if self.ttl is not None:
                heapq.heappush(self.expiring_late, (expires, self.sequence, cohort))
            return
        cohort = Cohort(t, n, 0, expires, VISIBLE)
        self.visible.append(cohort)
        self.visible_count += n
        if self.ttl is not None:
            self.expiring.append(cohort)

    # ----------------------------------------------------------------------------------------------------------
    # One second

    def step(self, t: int) -> None:
        """Advance from t to t+1: completions, pods becoming ready, messages reappearing or expiring, dequeues into
        the free slots, then the second's cost and lateness (a MultiQueueWorld calls the parts one by one)."""
        self.advance(t)
        free = self.ready * self.workers.concurrency - self.in_flight_active
        if free > 0 and self.visible_count:
            self._dequeue(t, free)
        self.account(t)

    def advance(self, t: int) -> None:
        """The first part of a step: completions, pods becoming ready, messages reappearing or expiring."""
        done = self.in_flight.pop(t, None)
        if done is not None:
            for group in done:
                self.in_flight_active -= group[0]
                self._complete(group)
        if self.drains:
            self._step_drains(t)
        starting = self.starting
        became_ready = False
        while starting and starting[0][0] <= t:
            pods = starting.popleft()[1]
            self.ready += pods
            self.starting_count -= pods
            became_ready = True
        if became_ready:
            self.ready_changes.append((t, self.ready))
        pending = self.pending
        while pending and pending[0][0] <= t:
            cohort = heapq.heappop(pending)[2]
            if cohort.count:
                self.pending_count -= cohort.count
                cohort.state = VISIBLE
                self.visible.append(cohort)
                self.visible_count += cohort.count
        if self.ttl is not None:
            self._expire(t)

    def account(self, t: int) -> None:
        """The last part of a step: the pods' cost and the oldest message's age."""
        tally = self.tally
        tally.worker_seconds += self.ready + self.starting_count + (self.draining_pods if self.drains else 0)
        if self.visible_count:
            visible = self.visible
            while not visible[0].count:
                visible.popleft()
            age = t - visible[0].due
            if age > tally.oldest_age_max:
                tally.oldest_age_max = age
            if age > self.slo_wait:
                tally.slo_violation_seconds += 1

    def outage_at(self, t: float) -> Outage | None:
        """The outage under way at `t`, if any: a poll then fails."""
        for outage in self.outages:
            if outage.covers(t):
                return outage
        return None

    def oldest_age(self, t: int) -> int | None:
        """Seconds since the oldest visible message was due (put, or its initial delay over); None when none is
        visible."""
        if not self.visible_count:
            return None
        visible = self.visible
        while not visible[0].count:
            visible.popleft()
        return t - visible[0].due

    def front_age(self, t: int) -> float | None:
        """What Peek Messages tells of the front message: seconds since it was put; 0 when none is visible; None
        when it was delivered before (its age then counts a worker's time, not a wait, and the source says so)."""
        if not self.visible_count:
            return 0.0
        visible = self.visible
        while not visible[0].count:
            visible.popleft()
        head = visible[0]
        return None if head.deliveries else float(t - head.enqueued)

    def _expire(self, t: int) -> None:
        expiring = self.expiring
        while expiring and (not expiring[0].count or expiring[0].expires <= t):
            self._drop(expiring.popleft(), t)
        late = self.expiring_late
        while late and late[0][0] <= t:
            self._drop(heapq.heappop(late)[2], t)

    def _drop(self, cohort: Cohort, t: int) -> None:
        """The cohort expires at `t`. Messages never taken count in the waits as waiting until then: their wait
        ended unserved, and leaving them out would let a policy meet an objective by letting work expire."""
        n = cohort.count
        if not n:
            return
        cohort.count = 0
        self.tally.expired += n
        if not cohort.deliveries and cohort.due <= t:
            self._count_wait(t - cohort.due, n)
        if cohort.state == VISIBLE:
            self.visible_count -= n
        else:
            self.pending_count -= n

    def _dequeue(self, t: int, free: int) -> None:
        tally = self.tally
        visible = self.visible
        rng_random = self.rng.random
        table = self.table
        whole = self.table_whole
        fraction = self.table_fraction
        size = self.table_size
        vt = self.visibility_timeout
        histogram = tally.wait_histogram
        visible_count = self.visible_count
        counted = active = processed = 0
        busy = 0.0
        while free > 0 and visible_count:
            n = free if free < visible_count else visible_count
            visible_count -= n
            left = n
            while not visible[0].count:
                visible.popleft()
            head = visible[0]
            enqueued, delivery, due = head.enqueued, head.deliveries + 1, head.due
            while left:
                cohort = visible[0]
                k = cohort.count
                if k > left:
                    k = left
                cohort.count -= k
                left -= k
                wait = t - cohort.due
                histogram[wait] = histogram.get(wait, 0) + k
                if cohort.deliveries:
                    tally.duplicates += k
                    if cohort.stopped:
                        tally.scale_in_duplicates += k
                if not cohort.count:
                    visible.popleft()
                    while left and not visible[0].count:
                        visible.popleft()
            if n > ONE_BY_ONE and not self.in_order:
                counted_now, immediate, spent = self._draw_counts(t, n, enqueued, delivery, due)
                counted += counted_now
                busy += spent
            else:
                immediate = 0
                by_steps: dict[int, int] = {}
                scale = size / n
                for i in range(n):
                    # One uniform picks the table cell within stratum i of n; its remainder within the cell
                    # (uniform and independent of the cell) rounds the service time up or down to whole steps.
                    if self.in_order:
                        index = self.next_index
                        self.next_index = (index + 1) % size
                        up = rng_random() < fraction[index]
                    else:
                        x = (i + rng_random()) * scale
                        index = int(x)
                        up = x - index < fraction[index]
                    s = table[index]
                    busy += s
                    steps = whole[index] + 1 if up else whole[index]
                    if steps == 0:
                        immediate += 1
                    elif s > vt:
                        self._overrun(t, steps, 1, enqueued, delivery, due)
                    else:
                        by_steps[steps] = by_steps.get(steps, 0) + 1
                for steps, m in by_steps.items():
                    counted += m
                    self._add_in_flight(t + steps, [m, t, enqueued, delivery, 1, due])
            active += n - immediate
            processed += immediate
            free -= n - immediate
        self.visible_count = visible_count
        self.in_flight_counted += counted
        self.in_flight_active += active
        tally.busy_slot_seconds += busy
        tally.processed += processed

    def _draw_counts(self, t: int, n: int, enqueued: int, delivery: int, due: int) -> tuple[int, int, float]:
        """`n` messages dequeued at once, each with its own service time: how many end after how many whole steps
        (and whether past the visibility timeout) is one multinomial draw over `outcomes`. Returns the messages
        put in flight, those done within the step, and their service seconds."""
        counts = self.np_rng.multinomial(n, self.outcome_odds)
        counted = immediate = 0
        spent = 0.0
        for c in np.flatnonzero(counts).tolist():
            k = int(counts[c])
            steps, overrun, mean = self.outcomes[c]
            spent += k * mean
            if steps == 0:
                immediate += k
            elif overrun:
                self._overrun(t, steps, k, enqueued, delivery, due)
            else:
                counted += k
                self._add_in_flight(t + steps, [k, t, enqueued, delivery, 1, due])
        return counted, immediate, spent

    def _overrun(self, t: int, steps: int, k: int, enqueued: int, delivery: int, due: int) -> None:
        """`k` messages whose processing outlasts the visibility timeout: they reappear meanwhile, and this
        delivery's delete fails if another delivery takes them first (`_complete`)."""
        self.copy_number += 1
        self.copies[self.copy_number] = Copy(self._requeue(enqueued, k, delivery, t + self.visibility_timeout, due))
        self._add_in_flight(t + steps, [k, t, enqueued, delivery, -self.copy_number, due])

    def _add_in_flight(self, step: int, entry: InFlight) -> None:
        bucket = self.in_flight.get(step)
        if bucket is None:
            self.in_flight[step] = [entry]
        else:
            bucket.append(entry)

    def _step_drains(self, t: int) -> None:
        for group in list(self.drains):
            done = group.buckets.pop(t, None)
            if done is not None:
                for entry in done:
                    group.count -= entry[0]
                    self._complete(entry)
            if group.count and t >= group.deadline:
                self._kill(group.buckets, t)
                group.buckets = {}
                group.count = 0
            if not group.count:
                self.drains.remove(group)

    # ----------------------------------------------------------------------------------------------------------

    @property
    def remaining(self) -> int:
        """Messages still in the queue at the end (visible, delayed or in flight)."""
        return self.approximate_count

    def count_unserved(self, t: int) -> None:
        """The run ends at `t`: each visible message never taken counts in the waits with its wait so far, a lower
        bound, so that a backlog left at the end is not a backlog that never waited. (A delayed message that was
        never taken is not due yet; one taken before counted when it was.)"""
        for cohort in self.visible:
            if cohort.count and not cohort.deliveries:
                self._count_wait(t - cohort.due, cohort.count)

    def _count_wait(self, wait: int, n: int) -> None:
        histogram = self.tally.wait_histogram
        histogram[wait] = histogram.get(wait, 0) + n

    def sample(self, t: int, arrivals: int) -> Sample:
        draining = sum(g.count for g in self.drains)
        return Sample(
            t=t, arrivals=arrivals, visible=self.visible_count, approximate_count=self.approximate_count,
            in_flight=self.in_flight_active + draining, desired=self.desired, ready_replicas=self.ready,
        )


def least_busy_takes(in_flight: Sequence[int], ready: int, concurrency: int, removed: int,
                     rng: random.Random) -> list[int]:
    """What the `removed` least busy of `ready` pods hold, of each queue's `in_flight` messages, where a pod is
    as busy as the messages it holds. Each message is in a slot drawn at random (a free slot takes the next
    message whichever pod it is on, and jobs end independently, so every placement of so many messages in the
    slots is equally likely); the pods are ranked by their count, as a ReplicaSet ranks them by a deletion cost
    that is their count (ties in the order drawn)."""
    total = sum(in_flight)
    slots = ready * concurrency
    if removed <= 0 or total <= 0 or slots <= 0:
        return [0] * len(in_flight)
    placed = rng.sample(range(slots), min(total, slots))
    per_pod = [[0] * len(in_flight) for _ in range(ready)]
    queue, left = 0, in_flight[0]
    for slot in placed:
        while left == 0:
            queue += 1
            left = in_flight[queue]
        per_pod[slot // concurrency][queue] += 1
        left -= 1
    ranked = sorted(per_pod, key=sum)
    return [sum(pod[q] for pod in ranked[:removed]) for q in range(len(in_flight))]


def service_outcomes(
    table: Sequence[float], visibility_timeout: int
) -> tuple[list[tuple[int, bool, float]], np.ndarray]:
    """The outcomes of one message's service drawn from `table`: (whole steps it takes, whether it outlasts the
    visibility timeout, its mean service seconds given both), and their odds (a table value rounds up to the next
    whole step with the odds of its fraction)."""
    weights: dict[tuple[int, bool], list[float]] = {}
    for value in table:
        whole = int(value)
        for steps, odds in ((whole, 1.0 - (value - whole)), (whole + 1, value - whole)):
            if odds > 0:
                cell = weights.setdefault((steps, value > visibility_timeout), [0.0, 0.0])
                cell[0] += odds
                cell[1] += odds * value
    ordered = sorted(weights.items())
    return ([(steps, overrun, seconds / odds) for (steps, overrun), (odds, seconds) in ordered],
            np.array([odds for _, (odds, _) in ordered]) / len(table))


class MultiQueueWorld:
    """Several queues consumed by one worker Deployment (docs/simulator.md, "Several queues").

    Each queue is a `World` of its own (its messages, visibility timeout, TTL, service-time stream); the pods are
    shared. Each queue's World is told every scale, so all of them hold the same pods; the free slots of a second
    are shared out as workers that poll the queues in turn would take them: an even share for each queue with
    visible messages, what one queue cannot use going to the others (round-robin, starting one queue further on
    each second so no queue is always first). The pods' cost and the SLO are accounted once, for the Deployment.
    """

    def __init__(
        self,
        queues: Sequence[tuple[str, QueueParams]],
        workers: Workers,
        service_table: list[float],
        seed: int,
        *,
        slo_wait: float = math.inf,
        initial_replicas: int = 0,
    ) -> None:
        self.queues = [
            World(params, workers, service_table, seed, slo_wait=slo_wait, initial_replicas=initial_replicas,
                  name=name, stream=index)
            for index, (name, params) in enumerate(queues)
        ]
        self.lead = self.queues[0]
        self.workers = workers
        self.slo_wait = slo_wait
        self.tally = Tally(scale_actions=self.lead.tally.scale_actions)  # the Deployment's: cost, SLO, scaling

    @property
    def queue_names(self) -> tuple[str, ...]:
        return tuple(q.name for q in self.queues)

    def queue_world(self, index: int) -> World:
        return self.queues[index]

    @property
    def scale_actions(self) -> list[tuple[int, int, int]]:
        return self.lead.tally.scale_actions

    @property
    def desired(self) -> int:
        return self.lead.desired

    @property
    def ready(self) -> int:
        return self.lead.ready

    @property
    def ready_changes(self) -> deque[tuple[int, int]]:
        return self.lead.ready_changes

    @property
    def reversals(self) -> int:
        return self.lead.reversals

    @property
    def visible_count(self) -> int:
        return sum(q.visible_count for q in self.queues)

    @property
    def approximate_count(self) -> int:
        return sum(q.approximate_count for q in self.queues)

    @property
    def in_flight_count(self) -> int:
        return sum(q.in_flight_count for q in self.queues)

    @property
    def draining_pods(self) -> int:
        messages: dict[int, int] = {}
        pods: dict[int, int] = {}
        for q in self.queues:
            for group in q.drains:
                messages[group.scale_in] = messages.get(group.scale_in, 0) + group.count
                pods[group.scale_in] = group.pods
        conc = self.workers.concurrency
        return sum(min(pods[event], -(-count // conc)) for event, count in messages.items())

    @property
    def pods(self) -> int:
        return self.lead.ready + self.lead.starting_count + self.draining_pods

    @property
    def remaining(self) -> int:
        return self.approximate_count

    def count_unserved(self, t: int) -> None:
        for q in self.queues:
            q.count_unserved(t)

    def set_desired(self, replicas: int, t: int, *, least_busy: bool = False) -> None:
        lead = self.lead
        removed = max(0, lead.desired - max(0, replicas)) - lead.starting_count
        if not least_busy or removed <= 0 or not lead.ready:
            for q in self.queues:
                q.set_desired(replicas, t)
            return
        # The pods removed are the least busy over every queue's messages, so each queue loses what they hold.
        takes = least_busy_takes([q.in_flight_active for q in self.queues], lead.ready, self.workers.concurrency,
                                 min(removed, lead.ready), lead.scale_in_rng)
        for q, holding in zip(self.queues, takes, strict=True):
            q.set_desired(replicas, t, holding=holding)

    def put(self, t: int, n: int, delay: int = 0, queue: int = 0) -> None:
        self.queues[queue].put(t, n, delay)

    def step(self, t: int) -> None:
        queues = self.queues
        for q in queues:
            q.advance(t)
        lead = self.lead
        free = lead.ready * self.workers.concurrency - sum(q.in_flight_active for q in queues)
        if free > 0:
            for q, share in zip(queues, self._shares(t, free), strict=True):
                if share:
                    q._dequeue(t, share)
        tally = self.tally
        draining = self.draining_pods if any(q.drains for q in queues) else 0
        tally.worker_seconds += lead.ready + lead.starting_count + draining
        ages = [age for q in queues if (age := q.oldest_age(t)) is not None]
        if ages:
            age = max(ages)
            if age > tally.oldest_age_max:
                tally.oldest_age_max = age
            if age > self.slo_wait:
                tally.slo_violation_seconds += 1

    def _shares(self, t: int, free: int) -> list[int]:
        """The free slots each queue gets this second (round-robin over the queues with visible messages)."""
        count = len(self.queues)
        shares = [0] * count
        wanting = [i for i in range(count) if self.queues[i].visible_count]
        first = t % count
        wanting.sort(key=lambda i: (i - first) % count)
        while free and wanting:
            share, extra = divmod(free, len(wanting))
            if not share:
                for i in wanting[:extra]:
                    shares[i] += 1
                break
            still: list[int] = []
            for i in wanting:
                want = self.queues[i].visible_count - shares[i]
                taken = min(share, want)
                shares[i] += taken
                free -= taken
                if want > taken:
                    still.append(i)
            wanting = still
        return shares

    def totals(self) -> Tally:
        """The run's totals: the messages' over every queue, the pods' and the SLO's from the Deployment."""
        merged = Tally(
            worker_seconds=self.tally.worker_seconds, slo_violation_seconds=self.tally.slo_violation_seconds,
            oldest_age_max=self.tally.oldest_age_max, scale_actions=self.lead.tally.scale_actions,
        )
        for q in self.queues:
            tally = q.tally
            merged.arrived += tally.arrived
            merged.processed += tally.processed
            merged.expired += tally.expired
            merged.duplicates += tally.duplicates
            merged.scale_in_duplicates += tally.scale_in_duplicates
            merged.busy_slot_seconds += tally.busy_slot_seconds
            for wait, n in tally.wait_histogram.items():
                merged.wait_histogram[wait] = merged.wait_histogram.get(wait, 0) + n
        return merged

    def sample(self, t: int, arrivals: int) -> Sample:
        samples = [q.sample(t, arrivals) for q in self.queues]
        return Sample(
            t=t, arrivals=arrivals, visible=sum(s.visible for s in samples),
            approximate_count=sum(s.approximate_count for s in samples),
            in_flight=sum(s.in_flight for s in samples), desired=self.desired, ready_replicas=self.ready,
        )


SimWorld = World | MultiQueueWorld
