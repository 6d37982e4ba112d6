"""The simulator's metrics, measured from what a live scenario run really did.

A live run (`queuescale demo --scenario`) records when each message was sent, each delivery (received, by which
worker process, its dequeue count, when its work ended and whether its delete succeeded), each worker process's
lifetime, each scale action, and the ready workers every second. `measure()` turns that into the very `Metrics`
the simulator prints for a policy (`simulate --json`), key for key, so the two can be compared.

The definitions follow docs/simulator.md ("Metrics"), with real times in place of whole steps:
- `worker_seconds`: the worker processes' lifetimes within the run (a process starting, ready or draining costs);
- `busy_worker_seconds`: the time deliveries were worked on (until their delete, or until the process died),
  divided by the concurrency;
- waits: received − sent of each delivery, a redelivery counting again with its longer wait;
- `scale_in_duplicates`: the deliveries again whose previous delivery a scale-in stopped (its process died first,
  or it released the message), not those after work that outlasted its visibility timeout;
- `oldest_message_age_max`, `slo_violation_seconds`: every second, the age of the oldest visible message, where a
  message is visible from its send (plus its initial delay) until it is received, and again from a
  delivery's visibility timeout (or from when its stopping worker released it) until the next delivery when that
  delivery did not delete it (until its late delete when it did).
Only what happened within the scenario's duration counts; the clean-up after it does not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from controller.simulator.run import BurstReaction, Metrics, needed_replicas, outage_reports
from controller.simulator.scenario import ArrivalPlan, Scenario


@dataclass(frozen=True)
class SentMessage:
    """A message the run put on the queue."""

    message: int
    sent: float  # wall clock, just before the send
    delay: float = 0.0  # initial visibility delay, seconds


@dataclass(frozen=True)
class Delivery:
    """One receive of a message by a worker process."""

    message: int
    pid: int
    received: float  # wall clock
    dequeue_count: int
    ended: float | None = None  # its work ended (delete or failed delete); None: the process died first
    deleted: bool = False
    released: float | None = None  # the worker made it visible again at this time as it stopped (scaleIn release)


@dataclass(frozen=True)
class Lifetime:
    """A worker process, from spawn to exit (None: still running when the record was taken)."""

    pid: int
    started: float
    stopped: float | None


@dataclass(frozen=True)
class LiveRecord:
    """Everything a live scenario run recorded; times are wall clock, except `scale_actions` and `ready`."""

    start: float  # wall clock of scenario time 0
    duration: float
    concurrency: int
    visibility_timeout: float
    ttl: float | None
    slo_wait: float
    initial_replicas: int
    sent: tuple[SentMessage, ...]
    deliveries: tuple[Delivery, ...]
    processes: tuple[Lifetime, ...]
    scale_actions: tuple[tuple[float, int, int], ...]  # (seconds since start, from, to)
    ready: tuple[tuple[float, int], ...]  # (seconds since start, ready workers), about once a second
    remaining: int | None = None  # the queue's approximate count at the end


def service_times(record: LiveRecord) -> tuple[float, ...]:
    """How long each delivery the workers finished took (received to done), in the order received: the live run's
    own luck, for a simulation to be given. Deliveries a stopped worker killed or released are left out."""
    return tuple(d.ended - d.received for d in sorted(record.deliveries, key=lambda d: d.received)
                 if d.ended is not None and d.released is None and d.ended >= d.received)


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile, as the simulator's; 0 when there is none."""
    if not sorted_values:
        return 0.0
    return float(sorted_values[max(1, math.ceil(fraction * len(sorted_values))) - 1])


def _overlap(start: float, end: float, window_start: float, window_end: float) -> float:
    return max(0.0, min(end, window_end) - max(start, window_start))


def deliveries_by_message(record: LiveRecord) -> dict[int, list[Delivery]]:
    """Every delivery of the run, by message, in the order recorded."""
    by_message: dict[int, list[Delivery]] = {}
    for delivery in record.deliveries:
        by_message.setdefault(delivery.message, []).append(delivery)
    return by_message


def oldest_ages(record: LiveRecord) -> list[float]:
    """For each second t of the run, the age at t + 0.5 of the oldest visible message (0 when none is visible),
    counted from when it was due (sent, plus the initial delay it was sent with), as the simulator counts it."""
    steps = math.ceil(record.duration)
    oldest = [0.0] * steps
    end = record.start + record.duration
    by_message = deliveries_by_message(record)
    for message in record.sent:
        deliveries = sorted(by_message.get(message.message, ()), key=lambda d: d.received)
        expires = message.sent + record.ttl if record.ttl is not None else math.inf
        visible_from = message.sent + message.delay
        intervals: list[tuple[float, float]] = []
        for delivery in deliveries:
            intervals.append((visible_from, delivery.received))
            if delivery.deleted and delivery.ended is not None:
                # Work that outlasted the visibility timeout left the message visible from then until its delete
                # (which succeeded, so no one received it meanwhile); then it is gone.
                intervals.append((delivery.received + record.visibility_timeout, delivery.ended))
                visible_from = math.inf
                break
            visible_from = delivery.released if delivery.released is not None else (
                delivery.received + record.visibility_timeout)
        intervals.append((visible_from, min(end, expires)))
        for begin, until in intervals:
            if until <= begin:
                continue
            first = max(0, math.ceil(begin - record.start - 0.5))
            last = min(steps, math.ceil(until - record.start - 0.5))
            for t in range(first, last):
                age = t + 0.5 - (message.sent + message.delay - record.start)
                if age > oldest[t]:
                    oldest[t] = age
    return oldest


def scale_in_duplicates(record: LiveRecord, deliveries: Sequence[Delivery]) -> int:
    """Of `deliveries`, those again (dequeue count over 1) whose previous delivery a scale-in stopped: its process
    died first (killed, or past its grace period) or it handed the message back as it stopped (released). The others
    followed work that outlasted its visibility timeout and ended with a failed delete."""
    by_message = deliveries_by_message(record)
    stopped = 0
    for delivery in deliveries:
        if delivery.dequeue_count <= 1:
            continue
        before = [d for d in by_message[delivery.message] if d.received < delivery.received]
        previous = max(before, key=lambda d: d.received, default=None)
        if previous is not None and (previous.released is not None or previous.ended is None):
            stopped += 1
    return stopped


def unserved_waits(record: LiveRecord, received: set[int], end: float) -> list[float]:
    """The waits of the messages sent and never received before `end`, as the simulator counts them: one that
    expired waited until it expired, one still queued waited until the end (a lower bound); one not yet due has
    not waited."""
    waits = []
    for m in record.sent:
        if m.message in received or m.sent >= end:
            continue
        until = end if record.ttl is None else min(end, m.sent + record.ttl)
        if until >= m.sent + m.delay:
            waits.append(until - (m.sent + m.delay))
    return waits


def measure(record: LiveRecord, scenario: Scenario, plan: ArrivalPlan) -> Metrics:
    """The simulator's `Metrics` for this live run."""
    start, end = record.start, record.start + record.duration
    pids_stopped = {p.pid: p.stopped for p in record.processes}
    worker_seconds = sum(_overlap(p.started, p.stopped if p.stopped is not None else end, start, end)
                         for p in record.processes)
    deliveries = [d for d in record.deliveries if start <= d.received < end]
    due_at = {m.message: m.sent + m.delay for m in record.sent}  # a scheduled message waits once it is due
    waits = [max(0.0, d.received - due_at[d.message]) for d in deliveries if d.message in due_at]
    received_messages = {d.message for d in record.deliveries if d.received < end}
    waits += unserved_waits(record, received_messages, end)
    waits.sort()
    busy = 0.0
    for d in deliveries:
        until = d.ended if d.ended is not None else pids_stopped.get(d.pid) or end
        busy += _overlap(d.received, until, start, end)
    busy /= record.concurrency
    processed = sum(1 for d in record.deliveries if d.deleted and d.ended is not None and start <= d.ended < end)
    expired = 0
    if record.ttl is not None:
        expired = sum(1 for m in record.sent if m.message not in received_messages and m.sent + record.ttl <= end)
    arrived = sum(1 for m in record.sent if m.sent < end)
    remaining = record.remaining if record.remaining is not None else max(0, arrived - processed - expired)

    actions = sorted(a for a in record.scale_actions if a[0] < record.duration)
    reversals, direction = 0, 0
    for _, before, after in actions:
        turn = 1 if after > before else -1
        if direction and turn != direction:
            reversals += 1
        direction = turn
    ages = oldest_ages(record)
    reactions = _burst_reactions(record, scenario, plan, actions)
    outs = [r.first_scale_out for r in reactions if r.first_scale_out is not None]
    caps = [r.enough_capacity for r in reactions if r.enough_capacity is not None]
    # The replicas set during each outage, as the simulator reports them (it acts at whole seconds).
    outages = outage_reports(scenario, record.initial_replicas, [(math.floor(t), b, a) for t, b, a in actions])
    return Metrics(
        worker_seconds=round(worker_seconds, 1),
        busy_worker_seconds=round(busy, 3),
        efficiency=round(busy / worker_seconds, 4) if worker_seconds else 0.0,
        wait_p50=round(percentile(waits, 0.50), 2),
        wait_p95=round(percentile(waits, 0.95), 2),
        wait_p99=round(percentile(waits, 0.99), 2),
        wait_max=round(waits[-1], 2) if waits else 0.0,
        wait_mean=round(sum(waits) / len(waits), 3) if waits else 0.0,
        oldest_message_age_max=round(max(ages, default=0.0), 1),
        slo_violation_seconds=sum(1 for age in ages if age > record.slo_wait),
        scale_actions=len(actions),
        direction_reversals=reversals,
        duplicate_deliveries=sum(1 for d in deliveries if d.dequeue_count > 1),
        scale_in_duplicates=scale_in_duplicates(record, deliveries),
        expired_messages=expired,
        messages_arrived=arrived,
        messages_processed=processed,
        messages_remaining=remaining,
        peak_replicas=max([record.initial_replicas, *(after for _, _, after in actions)]),
        mean_replicas=round(worker_seconds / record.duration, 3) if record.duration else 0.0,
        burst_first_scale_out_mean=round(sum(outs) / len(outs), 1) if outs else None,
        burst_enough_capacity_mean=round(sum(caps) / len(caps), 1) if caps else None,
        bursts_short_of_capacity=sum(1 for r in reactions if r.enough_capacity is None),
        bursts=tuple(reactions),
        outage_replicas_min=min((o.replicas_min for o in outages), default=None),
        outage_replicas_max=max((o.replicas_max for o in outages), default=None),
        outages=outages,
    )


def _burst_reactions(record: LiveRecord, scenario: Scenario, plan: ArrivalPlan,
                     actions: Sequence[tuple[float, int, int]]) -> list[BurstReaction]:
    """Per burst, as the simulator counts them (controller/simulator/run.py), from the ready samples."""
    starts = list(plan.burst_starts)
    needed = {b.start: needed_replicas(scenario, b) for b in plan.bursts}
    enough: dict[float, float] = {}
    index = 0
    for t, ready in sorted(record.ready):
        if index >= len(starts):
            break
        if t < starts[index]:
            continue
        if ready >= needed[starts[index]]:
            enough[starts[index]] = round(t - starts[index], 1)
            index += 1
        elif index + 1 < len(starts) and t >= starts[index + 1]:
            index += 1  # the next burst began before this one was absorbed
    reactions = []
    for i, begin in enumerate(starts):
        until = starts[i + 1] if i + 1 < len(starts) else math.inf
        first_out = next((t for t, before, after in actions if begin <= t < until and after > before), None)
        reactions.append(BurstReaction(
            start=begin, needed_replicas=needed[begin],
            first_scale_out=None if first_out is None else round(first_out - begin, 1),
            enough_capacity=enough.get(begin),
        ))
    return reactions
