"""What one replica completes a second: as the rule states it, as drains and waits showed it, and what the
sizing trusts of the two.

Pure, like the policy that calls it (docs/policy.md, *A wrong serviceTime*): each poll's count and front messages
may leave a lower bound of the replicas' real throughput in the memory; `trusted_throughput` bounds what is
learned by the statement. `drain_time` is the sizing's (the policy's `sizing`): what a backlog may take to clear.
The readings count the replica-seconds that worked from `ready_steps`, the one account of when replicas are ready,
which the policy also reads for the replicas still starting.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from controller.model.readings import Observation, ScalingMemory
from controller.model.rule import QueueScalerSpec
from controller.model.textfmt import duration

# How far a learned throughput is trusted, as multiples of the stated one. Down to half: a serviceTime guessed
# x0.5 must still meet the objective; below that the rule is wrong, not the guess. Never above: a drain faster
# than stated may be a lucky run of short messages, and trusting it spends the margin the objective keeps; a
# serviceTime guessed too long only costs worker-seconds (measured: a ceiling of 1.5 gained nothing on the
# built-in scenarios).
LEARNED_FLOOR = 0.5
LEARNED_CEILING = 1.0
# A drain at least this share of the stated throughput confirms it: drains are lower bounds (arrivals during a
# drain slow it), and a backlog cleared at 80 % of the stated speed is as likely arrivals as slower replicas.
CONSISTENT_DRAIN = 0.8
# A drain slower than this share of the stated throughput reads as arrivals that go on, not as slow replicas:
# a count that falls slowly proves nothing about how fast replicas work.
INFORMATIVE_DRAIN = 0.4
# Polls a drain must span before it teaches anything: one interval is noise.
DRAIN_POLLS = 3
# Messages a drain must clear before it teaches anything: a few completions more or less (service times vary)
# would swing a small drain's rate by half.
DRAIN_MESSAGES = 20.0
# Completions and arrivals over a drain are counts of chance events: a shortfall within this many square roots of
# what was completed is read as chance.
CHANCE = 2.0
# A drain is read only with a backlog behind every slot of at least this share of the drain time's worth: a count
# that hovers just above the work in flight falls and rises with single completions and arrivals.
BACKLOG_SHARE = 0.5


def learn_throughput(
    spec: QueueScalerSpec, count: float, slope: float | None, current: int, memory: ScalingMemory, now: float,
    startup: float, drain_time: float, *, nothing_visible: bool = False,
) -> ScalingMemory:
    """The memory after this poll's count: where the current drain started, and the throughput drains showed.

    A drain is a stretch of polls with the replicas unchanged (the new ones given their start-up time) and a
    backlog behind every slot (the count at least `messagesPerReplica` plus half the drain time's worth per
    replica), so that replicas complete `current x throughput` messages a second. The count's change is arrivals
    minus completions, so its fall since the drain started, per replica and second, is a lower bound of the real
    throughput whatever arrived meanwhile. A drain counts once it spans DRAIN_POLLS polls and DRAIN_MESSAGES
    messages. One at CONSISTENT_DRAIN x the statement or faster confirms it. A slower one proves slow replicas only
    where the arrivals cannot explain it: at its start the memory keeps the most that could have been arriving then
    (the trend plus what the replicas ready over the trend window complete at the stated speed), and the drain
    teaches only if, with that many arriving all along, the replicas still completed less than CONSISTENT_DRAIN x
    the statement by more than chance (CHANCE square roots of it); it is then learned at its bound, or at
    INFORMATIVE_DRAIN x stated where the bound is looser. Under replicas unchanged for a trend window that never
    happens: replicas at half speed with nothing arriving and at full speed with as many arriving fall alike. Once
    a throughput is learned, any faster drain raises it. The sizing trusts it only within [LEARNED_FLOOR,
    LEARNED_CEILING] x the stated throughput.

    `nothing_visible`: every source peeked and found no message to take, so the count is all in flight or
    invisible (scheduled, or hidden by a worker): whatever it holds, no backlog waits behind the slots, and the
    stretch is no drain. Counted as one, the retries a queue schedules minutes ahead, which the approximate count
    holds and no replica can take yet, made a wave's capacity look half as fast as stated (holdout-scheduled-
    retries).
    """
    stated = learnable(spec, current)
    if stated is None:
        return memory
    per_replica = spec.policy.messages_per_replica or 1
    settled = max(
        (memory.last_scale_up or -math.inf) + startup,
        (memory.last_scale_down or -math.inf) + max(startup, spec.polling_interval),
    )
    backlog = BACKLOG_SHARE * stated * drain_time
    if now < settled or count < (per_replica + backlog) * current or nothing_visible:
        return memory if memory.drain_from is None else replace(memory, drain_from=None)
    start = memory.drain_from
    if start is None or start[0] < settled or count >= start[1] + DRAIN_MESSAGES:
        # A drain is measured from its peak: a count that rose since the drain started would hide its speed.
        if slope is None:
            return memory if start is None else replace(memory, drain_from=None)
        window = spec.policy.trend_window
        ready = _ready_seconds(memory, current, startup, now - window, now) / window
        return replace(memory, drain_from=(now, count, max(0.0, slope + stated * ready)))
    since, first, arrivals = start
    fallen = first - count
    seconds = now - since
    if seconds < DRAIN_POLLS * spec.polling_interval or fallen < DRAIN_MESSAGES:
        return memory
    bound = fallen / (current * seconds)
    if bound >= CONSISTENT_DRAIN * stated or memory.learned_throughput is not None:
        return _remember_bound(spec, memory, stated, bound)  # confirms the statement, or raises what was learned
    most = fallen + arrivals * seconds  # the most completed, if arrivals went on as before the drain
    if most + CHANCE * math.sqrt(most) >= CONSISTENT_DRAIN * stated * current * seconds:
        return memory  # the arrivals the count showed before the drain, or chance, may explain it
    return _remember_bound(spec, memory, stated, max(bound, INFORMATIVE_DRAIN * stated))


def learn_from_wait(
    spec: QueueScalerSpec, observation: Observation, history: Sequence[Observation], count: float,
    slope: float | None, current: int, memory: ScalingMemory, now: float, startup: float, drain_time: float,
) -> ScalingMemory:
    """The memory after this poll's front messages: how long they waited bounds the throughput from below.

    First in, first out: while a queue's front message waited `age` seconds, every message ahead of it was taken
    by the replicas. Read only when the oldest waited at least the drain time (and a poll): a shorter wait says
    the sizing keeps its promise, and its bound, divided by a small age, is mostly noise. Two readings, each a
    lower bound, with the same thresholds and trust as drains (see `learn_throughput`), the tighter one kept:
    where the history of polls (back to the objective, `polls_to_keep`) reaches to when each front message was put,
    the wait since that poll (`_wait_since_poll`), which counts what was ahead of it then and learns only what
    arrivals the polls missed cannot explain; where a front message is older than a trend window's polls, the wait
    under settled replicas (`_settled_wait`), which takes what waits now for what was ahead then. Read within a
    trend window, that stand-in made a rule told its true serviceTime learn half of it from a count that fell
    while its front message waited (checkout-outage, 23 waiting after 30 s on 2 replicas: 0.38/s of a stated
    0.67/s). A front message put before a poll that found nothing visible proves no wait (`proven_waits`).
    """
    stated = learnable(spec, current)
    if stated is None:
        return memory
    observation = proven_waits(observation, history)
    ages = [reading.oldest_age for reading in observation.readings]
    if not ages or None in ages:
        return memory
    age = max(a or 0.0 for a in ages)
    if age <= 0 or age < max(spec.polling_interval, drain_time):
        return memory
    bounds = []
    fronts = _polls_before_fronts(observation, history, now)
    if fronts is not None:
        bounds.append(_wait_since_poll(spec, observation, fronts, current, memory, now, startup, stated))
    if _polls_before_fronts(observation, trend_window_polls(history, spec.policy.trend_window), now) is None:
        bounds.append(_settled_wait(spec, count, slope, current, memory, now, startup, stated, age, drain_time))
    bound = max((b for b in bounds if b is not None), default=None)
    return memory if bound is None else _remember_bound(spec, memory, stated, bound)


def proven_waits(observation: Observation, history: Sequence[Observation]) -> Observation:
    """The observation without the front messages' ages that prove no wait: those put before a poll whose peek of
    the same source found nothing visible.

    A peek gives a front message's age since it was put (Azure: InsertionTime), which for a message put with a
    visibility delay counts the delay: a retry scheduled eight minutes ahead shows eight minutes the moment it
    turns visible. A poll since its put that found nothing visible proves it was not visible then, so it turned
    visible at some moment since, which nothing tells: its age bounds its wait from above and proves none.
    `learn_from_wait` reads an age as a wait during which every slot was busy; read from retries come due, under
    replicas that completed a fraction of what a wait that long would have taken, it taught the rule 1.6 messages a
    second of a stated 4 (holdout-backoff-retries). The policy's `front_waited` keeps the age since the put: there
    the error holds replicas, which costs and never stops work."""
    readings = []
    for index, reading in enumerate(observation.readings):
        age = reading.oldest_age
        if age and _found_nothing_since(history, index, observation.time - age):
            reading = replace(reading, oldest_age=None)
        readings.append(reading)
    return replace(observation, readings=tuple(readings))


def _found_nothing_since(history: Sequence[Observation], index: int, since: float) -> bool:
    """Whether a poll of the history after `since` found nothing visible in source `index` (newest first)."""
    for o in reversed(history):
        if o.time <= since:
            return False
        if len(o.readings) > index and o.readings[index].oldest_age == 0.0:
            return True
    return False


def trend_window_polls(history: Sequence[Observation], trend_window: float) -> Sequence[Observation]:
    """The polls of `history` within a trend window of its last one, and the one before that window: what the
    trend reads, and the history there was before it reached back to the objective (a settled wait is not read
    for a front message put within it)."""
    if not history:
        return history
    horizon = history[-1].time - trend_window
    first = 0
    while first + 1 < len(history) and history[first + 1].time < horizon:
        first += 1
    return history[first:]


def _polls_before_fronts(
    observation: Observation, history: Sequence[Observation], now: float
) -> tuple[list[Observation], list[Observation]] | None:
    """The polls of the history every source answered, and for each queue the last of them made before its front
    message was put; None where the history does not reach back that far for some queue."""
    polls = [o for o in history if not o.failed and len(o.readings) == len(observation.readings)]
    befores = []
    for reading in observation.readings:
        arrived = now - (reading.oldest_age or 0.0)
        before = next((o for o in reversed(polls) if o.time <= arrived), None)
        if before is None:
            return None
        befores.append(before)
    return polls, befores


def _settled_wait(
    spec: QueueScalerSpec, count: float, slope: float | None, current: int, memory: ScalingMemory, now: float,
    startup: float, stated: float, age: float, drain_time: float,
) -> float | None:
    """The bound from a wait under settled replicas: `waiting / (current x age)`, or None.

    When the count did not grow meanwhile (the trend is not rising, so at least as many were ahead of the oldest
    as wait now) and no replica was added or removed during its wait, each replica takes at least that many
    messages a second, `waiting` being the count less the slots in flight. Unlike a drain this needs no falling
    count: steady traffic that a too-short serviceTime keeps waiting twice the drain time shows it, where the
    count alone cannot tell slow replicas from more traffic. Several queues served by the same replicas: each
    head saw the messages ahead of it taken within the oldest head's wait, so the sum of what waits over the
    oldest wait is still a lower bound. It needs a backlog behind every slot, as a drain does.
    """
    if slope is None or slope > 0:
        return None
    # The whole wait under the replicas there now, the last ones added given their start-up.
    if now - age < max((memory.last_scale_up or -math.inf) + startup, memory.last_scale_down or -math.inf):
        return None
    waiting = count - (spec.policy.messages_per_replica or 1) * current
    if waiting < max(DRAIN_MESSAGES, BACKLOG_SHARE * stated * drain_time * current):
        return None
    return waiting / (current * age)


def _wait_since_poll(
    spec: QueueScalerSpec, observation: Observation, fronts: tuple[list[Observation], list[Observation]],
    current: int, memory: ScalingMemory, now: float, startup: float, stated: float,
) -> float | None:
    """The bound from a wait under any replicas: what waited at the poll before each front message arrived, over
    the replica-seconds ready since, or None.

    Each queue's messages counted at the last poll before its front message was put were ahead of it, so all
    were taken since, and all but those still in flight now (at most the slots of the replicas there now) were
    completed: a lower bound of the completions, whether the count held the messages in flight then or not,
    while new replicas fill their slots. The replicas ready
    meanwhile are known from the scale events: one added counts from a start-up after its scale-up, one removed
    stops at once; pods slower to start than that only lower the bound. This reads a burst's first minute,
    while replicas are still being added, where neither a drain nor a settled wait exists yet: with a
    serviceTime told x0.5, the next bursts are sized on what the first one showed. What the polls cannot see is
    what arrived between that poll and the front message (ahead of it, and taken too: the bound is lower than
    the truth by that much), so it is read only when even counting all of it, at most the count's rise to the
    next poll plus what the replicas could complete at the stated speed meanwhile, and every slot in flight, the
    replicas were slower than CONSISTENT_DRAIN x the statement by more than chance (CHANCE square roots of it, as
    for a drain): arrivals the polls missed cannot explain it, nor a run of long messages in a heavy tail.
    """
    per_slot = spec.policy.messages_per_replica or 1
    polls, befores = fronts
    counted = unseen = 0.0
    start = now
    for index, (reading, source, before) in enumerate(zip(observation.readings, spec.sources, befores,
                                                          strict=False)):
        arrived = now - (reading.oldest_age or 0.0)
        after = next((o for o in polls if o.time > arrived), observation)
        then = _replicas_at(memory, current, before.time)
        count = (before.readings[index].count or 0) * source.weight
        counted += count
        rise = max(0.0, (after.readings[index].count or 0) * source.weight - count)
        unseen += rise + per_slot * then + stated * _ready_seconds(memory, current, startup, before.time, after.time)
        start = min(start, before.time)
    seconds = _ready_seconds(memory, current, startup, start, now)
    # Everything counted then was taken since; what is still in flight now (at most the slots of the replicas
    # there now) is not yet completed.
    completed = counted - per_slot * current
    if completed < DRAIN_MESSAGES or seconds <= 0:
        return None
    most = counted + unseen  # the most taken since, had every arrival the polls missed been ahead of the front
    if most + CHANCE * math.sqrt(most) >= CONSISTENT_DRAIN * stated * seconds:
        return None  # unseen arrivals, or chance, may explain it
    # Proven slower than the statement: a bound under INFORMATIVE_DRAIN is the unseen arrivals, not replicas at
    # a fifth of their speed, and what is trusted is at least LEARNED_FLOOR x stated either way.
    return max(completed / seconds, INFORMATIVE_DRAIN * stated)


def _replicas_at(memory: ScalingMemory, current: int, time: float) -> int:
    """The replicas asked for at `time`, before a scale made then: `current` less the scale events since."""
    replicas = current
    for event in reversed(memory.replica_events):
        if event.time < time:
            break
        replicas = event.from_replicas
    return replicas


def ready_steps(memory: ScalingMemory, current: int, startup: float) -> list[tuple[float, float]]:
    """The replicas ready over time, from the scale events (`current` after the last): steps (from, ready), oldest
    first, the first from -inf. Before the first event kept, every replica counts as ready; a replica added is
    ready a start-up after its scale-up (what the policy assumes everywhere); a removal takes replicas still
    starting first, as a ReplicaSet does, then ready ones. Scales made by someone else count too, as the
    reconciler noticed them (a removal as of when it last saw the replicas, an addition as of when it saw it:
    never more replica-seconds than there were)."""
    events = memory.replica_events
    ready = float(events[0].from_replicas if events else current)
    steps = [(-math.inf, ready)]
    starting: list[list[float]] = []  # [ready at, replicas], oldest first

    def become_ready(until: float) -> None:
        nonlocal ready
        while starting and starting[0][0] <= until:
            at, replicas = starting.pop(0)
            ready += replicas
            steps.append((at, ready))

    for event in events:
        become_ready(event.time)
        change = event.to_replicas - event.from_replicas
        if change > 0:
            starting.append([event.time + startup, float(change)])
            continue
        removed = float(-change)
        while removed and starting:
            taken = min(removed, starting[-1][1])
            starting[-1][1] -= taken
            removed -= taken
            if not starting[-1][1]:
                starting.pop()
        if removed and ready:
            ready = max(0.0, ready - removed)
            steps.append((event.time, ready))
    become_ready(math.inf)
    return steps


def ready_seconds_above(steps: Sequence[tuple[float, float]], base: float, start: float, end: float) -> float:
    """Replica-seconds within [start, end) of the replicas `steps` (see `ready_steps`) has ready beyond `base`."""
    ends = [*(at for at, _ in steps[1:]), math.inf]
    return sum(max(0.0, ready - base) * max(0.0, min(until, end) - max(at, start))
               for (at, ready), until in zip(steps, ends, strict=True))


def _ready_seconds(memory: ScalingMemory, current: int, startup: float, start: float, end: float) -> float:
    """Replica-seconds ready within [start, end], from the scale events (see `ready_steps`)."""
    return ready_seconds_above(ready_steps(memory, current, startup), 0.0, start, end)


def learnable(spec: QueueScalerSpec, current: int) -> float | None:
    """The stated throughput when there is something to learn about it: rate mode with its own target, some
    replicas, and queues whose counts add up (a max over queues says nothing of the replicas' speed)."""
    if not spec.policy.learns_throughput or current <= 0 or (len(spec.sources) > 1 and spec.aggregation != "sum"):
        return None
    return stated_throughput(spec)


def _remember_bound(spec: QueueScalerSpec, memory: ScalingMemory, stated: float, bound: float) -> ScalingMemory:
    """The memory with a new lower bound of the throughput, kept when it is informative and moves what is trusted.

    Bounds below INFORMATIVE_DRAIN x stated teach nothing (a count falling slowly is arrivals going on); the
    fastest bound seen is kept. Only a bound that moves the trusted value is remembered: status is written when
    memory changes.
    """
    if bound < INFORMATIVE_DRAIN * stated:
        return memory
    known = trusted_throughput(spec, memory.learned_throughput)
    if known is not None and memory.learned_throughput is not None and (
        (trusted_throughput(spec, bound) or 0.0) <= 1.02 * known
    ):
        return memory
    return replace(memory, learned_throughput=bound)




def stated_throughput(spec: QueueScalerSpec) -> float | None:
    """Messages per second one replica completes, as the rule states it (rate mode); None in count mode."""
    policy = spec.policy
    if policy.throughput_per_replica is not None:
        return policy.throughput_per_replica
    if policy.service_time is not None:
        return (policy.messages_per_replica or 1) / policy.service_time
    return None


def trusted_throughput(spec: QueueScalerSpec, learned: float | None) -> float | None:
    """The throughput the sizing uses: the learned one, bounded by the stated one (see `learn_throughput`)."""
    stated = stated_throughput(spec)
    if stated is None or learned is None or learned >= CONSISTENT_DRAIN * stated:
        return stated
    return min(LEARNED_CEILING * stated, max(LEARNED_FLOOR * stated, learned))


def service_time_condition(spec: QueueScalerSpec, learned: float | None) -> tuple[bool, str, str] | None:
    """What drains and waits showed of the stated speed: (as stated, reason, message) for the rule's ServiceTime
    condition; None where the rule learns nothing (count mode, or an explicit targetPerReplica).

    False where the fastest drain or wait seen ran below CONSISTENT_DRAIN x the statement, so the sizing uses a
    slower speed than the rule states. What a drain or wait shows is a lower bound (arrivals meanwhile hide
    completions), so the message says so: the replicas may be that slow (the serviceTime is too short, and only a
    correct one sizes the first burst of a new rule right: what is learned lives in this rule's status), or
    traffic grew while it was read (a right serviceTime, sized with more replicas than it needs until a drain or
    wait shows the stated speed).
    """
    stated = stated_throughput(spec)
    trusted = trusted_throughput(spec, learned)
    if not spec.policy.learns_throughput or stated is None or trusted is None:
        return None
    policy = spec.policy
    per_replica = policy.messages_per_replica or 1
    said = (f"serviceTime {duration(policy.service_time)}" if policy.service_time is not None
            else f"throughputPerReplica {stated:.3g}")
    said += f" ({stated:.3g}/s a replica)"
    if learned is None:
        return True, "AsStated", f"no drain or wait has shown replicas slower than the stated {said}"
    seen = f"the fastest drain or wait seen ran at {learned:.3g}/s a replica"
    if trusted >= stated:
        return True, "Confirmed", f"{seen}, at least {CONSISTENT_DRAIN:.0%} of the stated {said}: sized as stated"
    floor = (f" (no less than {LEARNED_FLOOR:.0%} of the statement is trusted)"
             if learned < LEARNED_FLOOR * stated else "")
    return False, "SlowerThanStated", (
        f"{seen}, below the stated {said}: sized at {trusted:.3g}/s a replica{floor} until one shows the stated "
        "speed (what the count shows is a lower bound: arrivals meanwhile hide completions); if replicas are that "
        f"slow, state serviceTime of about {duration(per_replica / learned)} so that a new rule sizes its first "
        "burst right")
