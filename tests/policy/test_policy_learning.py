"""Issue 18: a rule whose serviceTime is wrong, and a poll where some queues fail.

The throughput a replica really has is learned from drains and from how long the oldest waiting message waited
(docs/policy.md, "A wrong serviceTime"), bounded by what the rule states; a failing queue's last count stands in for it until it answers ("A failed poll").
Expectations are computed by hand from those sections.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import controller.policy
import controller.throughput
from benchmarks.fidelity import SCENARIOS, rule_for
from benchmarks.policy_suite import ROOT, our_rule
from controller.commands.simulate import load_rules
from controller.model.readings import Reason, ScaleEvent, ScalingMemory
from controller.model.rule import QueueScalerSpec
from controller.policy import raw_need, sizing, trend
from controller.reconciler import TickResult
from controller.simulator.adapters import RuleAutoscaler, TickRecorder
from controller.simulator.run import Contender, Metrics, simulate
from controller.simulator.scenario import Scenario, load_scenario
from controller.simulator.world import SimWorld
from controller.throughput import _ready_seconds, learn_throughput, stated_throughput, trusted_throughput
from tests.policy_helpers import Run, make_spec, seen
from tests.sim_helpers import scenario

# One message a second per replica, as stated; a message may wait a minute, so the drain time is 30 s and a
# replica is sized for 1 + 1 x 30 = 31 messages. A drain is read with 1 + 15 = 16 messages or more per replica.
RATE = {"targetWaitSeconds": 60, "serviceTime": "1s", "startupTime": "10s"}
LONG_AGO = ScalingMemory(last_scale_up=-1000.0)


def drained(counts: list[int], current: int = 32, maximum: int = 300, **policy: object) -> Run:
    """A rule at `current` replicas (unchanged for long) seeing `counts`, one poll every 10 s from t=0."""
    run = Run(make_spec(maxReplicas=maximum, policy={**RATE, **policy}), current=current, memory=LONG_AGO)
    for index, count in enumerate(counts):
        run.tick(10.0 * index, count)
    return run


def scaled_then_drained(
    before: list[int], after: list[int], asked: tuple[int, int], memory: ScalingMemory | None = None,
    start: float = 0.0,
) -> ScalingMemory:
    """What the drain reading learns of a rule whose replicas went `asked` (from, to) at t=-10, ready at t=0 (the
    10 s start-up), that saw `before` one poll every 10 s up to `start` - 10 and sees `after` from `start` (the
    replicas left as they are)."""
    spec = make_spec(policy=RATE)
    history = [seen(start - 10.0 * (len(before) - index), count) for index, count in enumerate(before)]
    if memory is None:
        memory = ScalingMemory(scale_events=(ScaleEvent(-10.0, *asked),), last_scale_up=-10.0)
    for index, count in enumerate(after):
        observation = seen(start + 10.0 * index, count)
        history.append(observation)
        slope = trend(spec, history, observation.time)
        memory = learn_throughput(spec, count, slope, asked[1], memory, observation.time, 10.0, 30.0)
    return memory


# Before t=-10, 8 replicas at half the stated speed (4 a second) and 8 arrivals a second: the count rises 4 a
# second. 32 replicas at that speed take 16 a second: it falls 8 a second.
SLOW_BEFORE = [760, 800, 840, 880, 920, 960]
SLOW_AFTER = [1000, 920, 840, 760]


def test_a_drain_that_more_replicas_did_not_speed_up_as_stated_is_learned_and_sizes_the_next_burst() -> None:
    memory = scaled_then_drained(SLOW_BEFORE, SLOW_AFTER, (8, 32))
    # The count fell 240 in 30 s: a lower bound of 240 / (32 x 30) = 0.25 a second a replica, arrivals meanwhile
    # unknown. Even if they went on at the 4 + 8 x 1 = 12 a second the count and the stated speed of the 8 ready
    # replicas showed before, 32 replicas completed (240 + 12 x 30) / (32 x 30) = 0.625 a second each, below
    # 0.8 x stated: proven slow, and learned at 0.4 x stated (the bound is looser than that).
    assert memory.learned_throughput == pytest.approx(0.4)
    run = Run(make_spec(policy=RATE), current=32, memory=memory)
    burst = run.tick(40, 2000)
    # Trusted at no less than half the statement, 0.5/s: 1 + 0.5 x 30 = 16 messages a replica, not the stated 31
    # (which gives 65).
    assert burst.desired == 125
    assert "as drains and waits showed" in burst.message


@pytest.mark.parametrize(("front_age", "learned"), [(None, 0.4), (5.0, 0.4), (0.0, None)])
def test_a_fall_while_peeks_find_nothing_visible_is_no_drain(front_age: float | None, learned: float | None) -> None:
    # The slow drain above, read by `decide` with what each poll's peek found. Where a message waits visibly (or
    # the age is not read) it is learned as before; where every peek found nothing to take, the count is all in
    # flight or invisible (retries scheduled minutes ahead, as on holdout-scheduled-retries, which the approximate
    # count holds and no replica can take yet): no backlog waits behind the slots, so its fall proves no slowness.
    spec = make_spec(policy=RATE)
    memory = ScalingMemory(scale_events=(ScaleEvent(-10.0, 8, 32),), last_scale_up=-10.0)
    ages = () if front_age is None else (front_age,)
    history = [seen(-10.0 * (len(SLOW_BEFORE) - i), count, ages=ages) for i, count in enumerate(SLOW_BEFORE)]
    for index, count in enumerate(SLOW_AFTER):
        observation = seen(10.0 * index, count, ages=ages)
        memory = controller.policy.decide(spec, observation, history, 32, memory, observation.time).memory
        history.append(observation)
    assert memory.learned_throughput == (None if learned is None else pytest.approx(learned))


def test_a_drain_the_arrivals_before_it_explain_is_not_read_as_slow_replicas() -> None:
    # holdout-outage-catchup told its true serviceTime: no replica ready, the count rising 2 a second, then 4
    # replicas at the stated 1/s bring it down 2 a second. Its fall, 60 in 30 s over 4 replicas, is 0.5 a second
    # a replica; with the 2 a second the count showed arriving before, (60 + 60) / (4 x 30) = 1, as stated.
    memory = scaled_then_drained([180, 200, 220, 240, 260, 280], [300, 280, 260, 240], (0, 4))
    assert memory.learned_throughput is None
    assert memory.drain_from == (0.0, 300.0, 2.0)


def test_a_shortfall_chance_explains_is_not_read_as_slow_replicas() -> None:
    # A message a second arriving and no replica ready, then 2 replicas at the stated 1/s: the count should fall
    # a message a second. It fell 20 in 40 s: even with arrivals as before, 60 were completed where 0.8 x 80 = 64
    # would show the statement; 4 short of it is within twice the square root of 60 (15.5): chance, as on
    # holdout-outage-catchup's fourth seed (22 in 50 s under one replica, the morning's arrivals rising).
    memory = scaled_then_drained([100, 110, 120, 130, 140, 150], [160, 155, 150, 145, 140], (0, 2))
    assert memory.drain_from == (0.0, 160.0, 1.0)
    assert memory.learned_throughput is None


def test_a_faster_drain_raises_what_was_learned() -> None:
    memory = scaled_then_drained(SLOW_BEFORE, SLOW_AFTER, (8, 32))
    # A new peak (1,300 at t=40) restarts the drain; the 32 replicas then clear 22 a second: 660 in the 40 s since
    # the peak is a lower bound of 0.52 a replica, faster than what is trusted (0.5), so it is learned, proven
    # slow or not.
    memory = scaled_then_drained(SLOW_AFTER, [1300, 1300, 1080, 860, 640], (8, 32), memory, start=40.0)
    assert memory.learned_throughput == pytest.approx(660 / (32 * 40))


def test_a_drain_under_unchanged_replicas_proves_nothing() -> None:
    # 32 replicas clear 16 messages a second more than arrive, for as long as the polls go back: replicas at half
    # the stated speed with nothing arriving, or at the stated speed with 16 a second arriving. The count cannot
    # tell them apart; a rule told its true serviceTime must not be told it is slow (the waits can tell).
    assert drained([1000, 840, 680, 520, 360]).memory.learned_throughput is None


def test_a_drain_faster_than_stated_is_never_trusted_above_the_stated_throughput() -> None:
    # 32 replicas (all the rule allows) clear 64 messages a second: twice the stated throughput, which may be a
    # lucky run of short messages. The drain starts once the count has a trend (t=10).
    run = drained([4000, 3360, 2720, 2080, 1440], maximum=32)
    learned = run.memory.learned_throughput
    assert learned == pytest.approx(2.0)
    assert sizing(run.spec, learned_throughput=learned).throughput == 1.0
    assert raw_need(run.spec, 4000, 0.0, 32, learned_throughput=learned) == pytest.approx(4000 / 31)
    assert "as drains and waits showed" not in run.tick(50, 4000).message


def test_the_learned_throughput_is_trusted_down_to_half_the_stated_one() -> None:
    spec = make_spec(policy=RATE)
    assert trusted_throughput(spec, 0.1) == 0.5
    assert trusted_throughput(spec, 0.7) == 0.7
    assert trusted_throughput(spec, 3.0) == 1.0
    assert trusted_throughput(spec, None) == 1.0


def test_a_slow_fall_is_arrivals_going_on_not_slow_replicas() -> None:
    # 0.3/s a replica: below 0.4 x stated, so read as arrivals that continue; nothing learned.
    assert drained([1000, 904, 808, 712]).memory.learned_throughput is None


def test_a_count_hovering_above_the_work_in_flight_teaches_nothing() -> None:
    # Falling at the stated rate, but below 16 messages a replica: completions and arrivals of a few messages.
    assert drained([500, 340, 180, 20], current=32).memory.learned_throughput is None


def test_replicas_still_starting_are_not_read_as_slow_ones() -> None:
    run = Run(make_spec(policy=RATE), current=32, memory=ScalingMemory(last_scale_up=0.0))
    for index, count in enumerate([1000, 840, 680]):  # within the 10 s start-up, then only two polls after it
        run.tick(5.0 * index, count)
    assert run.memory.learned_throughput is None


def test_count_mode_learns_nothing() -> None:
    # targetPerReplica keeps its KEDA-like meaning: a count per replica, whatever the replicas do.
    assert drained([1000, 840, 680, 520], targetPerReplica=31).memory.learned_throughput is None


def test_learned_state_round_trips_through_status() -> None:
    memory = scaled_then_drained(SLOW_BEFORE, SLOW_AFTER, (8, 32))
    assert memory.drain_from is not None and memory.learned_throughput is not None
    assert ScalingMemory.from_json(json.loads(json.dumps(memory.to_json()))) == memory
    with pytest.raises(ValueError, match="memory"):
        ScalingMemory.from_json({"drainFrom": [1.0]})
    # A drain an earlier version stored (time, count; no arrivals) restarts; the rest of the memory is kept.
    stored = {**memory.to_json(), "drainFrom": [0.0, 1000.0]}
    assert ScalingMemory.from_json(stored) == replace(memory, drain_from=None)


def test_memory_is_unchanged_while_a_drain_goes_on_without_news() -> None:
    run = drained([1000, 840])
    before = run.memory
    run.tick(20, 830)  # too early to teach, no new peak
    assert run.memory is before


# ------------------------------------------------------------------------------------------------ waits

# At the stated 1/s, 32 replicas hold 32 x 31 = 992 messages and a message waits the 30 s drain time. Replicas at
# half that speed leave the same count steady (arrivals match what they take) but a message waits 60 s.
STEADY = 992


def waited(ages: list[float], counts: list[int] | None = None, current: int = 32, **policy: object) -> Run:
    """A rule at `current` replicas (unchanged for long) seeing `counts` (steady by default) and the oldest
    waiting message's age `ages`, one poll every 10 s from t=0."""
    run = Run(make_spec(policy={**RATE, **policy}), current=current, memory=LONG_AGO)
    for index, age in enumerate(ages):
        run.tick(10.0 * index, STEADY if counts is None else counts[index], ages=[age])
    return run


def test_a_steady_queue_whose_messages_wait_twice_the_drain_time_teaches_half_the_throughput() -> None:
    run = waited([60, 60, 60])
    # (992 - 32 in flight) / (32 replicas x 60 s) = 0.5 a second each.
    assert run.memory.learned_throughput == pytest.approx(0.5)
    # Sized at 0.5/s: 1 + 0.5 x 30 = 16 messages a replica, 992 / 16 = 62 (the stated 31 keeps 32).
    assert run.decisions[-1].desired == 62
    assert "as drains and waits showed" in run.decisions[-1].message


def test_a_fallen_count_does_not_stand_in_for_what_was_ahead_where_the_polls_show_it() -> None:
    # 20 replicas at the stated 1/s each. The front message was put at t=0 behind the 620 counted then; at t=30 it
    # has waited 30 s with 320 counted (the 20 in flight and 300 put behind it). What waits now (300) over 20 x 30
    # replica-seconds would read 0.5/s; what was ahead (620, all taken but the 20 in flight) over the same reads
    # 1/s, as stated. The poll at t=0 shows it, so the settled wait's stand-in is not read.
    run = Run(make_spec(policy=RATE), current=20, memory=LONG_AGO)
    for t, count in ((0, 620), (10, 650), (20, 480), (30, 320)):  # the rise at t=10 restarts the drain: too short
        run.tick(t, count, ages=[t])
    assert run.memory.learned_throughput is None
    # The same wait older than the history of polls: only what waits now can stand in, and it does.
    older = Run(make_spec(policy=RATE), current=20, memory=LONG_AGO)
    for t, count in ((10, 650), (20, 480), (30, 320)):
        older.tick(t, count, ages=[t])
    assert older.memory.learned_throughput == pytest.approx(0.5)


def test_the_same_count_without_ages_teaches_nothing() -> None:
    # What the count alone shows of this queue: steady, so slow replicas and more traffic look the same.
    run = Run(make_spec(policy=RATE), current=32, memory=LONG_AGO)
    for index in range(3):
        run.tick(10.0 * index, STEADY)
    assert run.memory.learned_throughput is None
    assert run.current == 32


def test_a_wait_within_the_drain_time_teaches_nothing() -> None:
    # 29 s is what the sizing promises (30 s): no news, whatever the bound would say.
    assert waited([29, 29, 29]).memory.learned_throughput is None


def test_a_wait_while_the_count_grows_teaches_nothing() -> None:
    # More arrived than left while the message waited: fewer were ahead of it than wait now.
    assert waited([60, 60, 60], counts=[900, 950, 1000]).memory.learned_throughput is None


def test_a_wait_that_began_before_a_scale_in_teaches_nothing() -> None:
    # More replicas took the messages ahead of it than there are now.
    run = Run(make_spec(policy=RATE), current=32, memory=ScalingMemory(last_scale_down=-30.0))
    for index in range(3):
        run.tick(10.0 * index, STEADY, ages=[60])
    assert run.memory.learned_throughput is None


def test_a_wait_behind_replicas_still_starting_teaches_nothing() -> None:
    # The last scale-up's replicas were ready at t=-40 + 10 = -30; these messages waited since t=-60 and -50.
    run = Run(make_spec(policy=RATE), current=32, memory=ScalingMemory(last_scale_up=-40.0))
    run.tick(0, STEADY, ages=[60])
    run.tick(10, STEADY, ages=[60])
    assert run.memory.learned_throughput is None
    run.tick(20, STEADY, ages=[45])  # since t=-25: all under the replicas there now; 45 s > the 30 s drain time
    assert run.memory.learned_throughput == pytest.approx(960 / (32 * 45))


def test_waits_in_two_queues_of_the_same_replicas_bound_the_throughput_together() -> None:
    run = Run(make_spec(queues=2, policy=RATE), current=32, memory=LONG_AGO)
    for index in range(3):
        run.tick(10.0 * index, 496, 496, ages=[45, 60])
    # (496 + 496 - 32) waiting over the oldest head's 60 s.
    assert run.memory.learned_throughput == pytest.approx(0.5)


def test_waits_in_count_mode_teach_nothing() -> None:
    assert waited([60, 60, 60], targetPerReplica=31).memory.learned_throughput is None


# A burst's first minute: 10 replicas at t=-60, 10 more asked at -50 (ready at -40, the 10 s start-up). The front
# message now waited 55 s: it was put at -55, after the poll at -60, so what waited at -60 was ahead of it and all
# of it was taken since, by 10 x 60 + 10 x 40 = 1,000 replica-seconds.
BURST_EVENTS = ScalingMemory(scale_events=(ScaleEvent(-50.0, 10, 20),), last_scale_up=-50.0)


def waited_since(polls: list[tuple[float, int]], now_count: int, age: float, memory: ScalingMemory = BURST_EVENTS,
                 current: int = 20) -> Run:
    """A rule whose history holds `polls` (time, count), now seeing `now_count` with its front waiting `age`."""
    run = Run(make_spec(policy=RATE), current=current, memory=memory)
    run.history.extend(seen(t, c) for t, c in polls)
    run.tick(0, now_count, ages=[age])
    return run


def test_a_wait_while_replicas_are_still_added_teaches_the_throughput() -> None:
    run = waited_since([(-60, 610), (-50, 600), (-40, 600), (-30, 560), (-20, 500), (-10, 450)], 400, 55)
    # All 610 were taken since, all but the 20 that the 20 replicas there now may hold were completed:
    # 590 / 1,000 replica-seconds = 0.59 a second. Even counting every unseen completion (the count's rise to
    # -50: none; the 10 slots then in flight; what 10 replicas at the stated 1/s could take from -60 to -50:
    # 100), 720 in 1,000 replica-seconds, short of the 800 that 0.8 x stated takes by more than chance
    # (720 + 2 x 27 = 774): slower than stated whatever arrived.
    assert run.memory.learned_throughput == pytest.approx(0.59)
    assert "as drains and waits showed" in run.decisions[-1].message


def test_replicas_removed_by_hand_are_not_counted_as_having_worked() -> None:
    # The burst's first minute as above, but someone scaled the 20 replicas down to 5 by hand, and the reconciler
    # last saw 20 at -40. Counted as 20 from -40, the 610 taken would be 1,000 replica-seconds' work, short of the
    # 800 that 0.8 x stated takes: "slow replicas". Counted as the 5 there were, 10 x 10 + 10 x 10 (the added ones
    # not yet ready) + 5 x 40 = 400: faster than stated, nothing to learn.
    polls: list[tuple[float, int]] = [(-60, 610), (-50, 600), (-40, 600), (-30, 560), (-20, 500), (-10, 450)]
    unknown = waited_since(polls, 400, 55, current=5)
    assert unknown.memory.learned_throughput is not None  # the gap a scale the rule never saw leaves
    by_hand = BURST_EVENTS.with_hand_scale(-40.0, 20, 5)
    assert waited_since(polls, 400, 55, memory=by_hand, current=5).memory.learned_throughput is None


def test_scales_by_hand_round_trip_through_status_and_leave_the_step_limits_alone() -> None:
    memory = BURST_EVENTS.with_hand_scale(-40.0, 20, 5)
    assert ScalingMemory.from_json(json.loads(json.dumps(memory.to_json()))) == memory
    assert ScalingMemory.from_json({"scaleEvents": [[1.0, 1, 3]]}).hand_scales == ()  # stored before they were kept
    assert memory.scale_events == BURST_EVENTS.scale_events and memory.last_scale == BURST_EVENTS.last_scale


def test_a_wait_short_of_the_statement_by_chance_teaches_nothing() -> None:
    # (660 + 10 + 100) = 770 in 1,000 replica-seconds: 0.77 a second, short of 0.8 x stated, but within two square
    # roots (770 + 2 x 28 = 825): a run of long messages in a heavy tail waits as long.
    run = waited_since([(-60, 660), (-50, 650), (-40, 650), (-30, 610), (-20, 550), (-10, 500)], 450, 55)
    assert run.memory.learned_throughput is None


def test_a_wait_that_unseen_arrivals_could_explain_teaches_nothing() -> None:
    # The count rose by 200 from -60 to -50: up to 200 put before the front message may have been ahead of it,
    # (610 + 200 + 10 + 100) / 1,000 = 0.92 >= 0.8 x stated.
    run = waited_since([(-60, 610), (-50, 810), (-40, 800), (-30, 700), (-20, 600), (-10, 500)], 400, 55)
    assert run.memory.learned_throughput is None


def test_a_wait_proven_slow_but_loosely_bounded_is_trusted_at_half_the_statement() -> None:
    # (310 - 20) / 1,000 = 0.29 a second, below 0.4 x stated, but (310 + 10 + 100) / 1,000 = 0.42 (0.46 with the
    # chance margin) proves the replicas slower than 0.8 x stated: it stands for 0.4, and the sizing trusts no
    # less than half the statement.
    run = waited_since([(-60, 310), (-50, 300), (-40, 300), (-30, 280), (-20, 250), (-10, 220)], 200, 55)
    assert run.memory.learned_throughput == pytest.approx(0.4)
    assert trusted_throughput(run.spec, run.memory.learned_throughput) == 0.5


def test_a_wait_since_a_poll_outside_the_history_teaches_nothing() -> None:
    # Put at -75, before every poll the history holds: nothing says how many were ahead of it.
    run = waited_since([(-60, 610), (-50, 600), (-40, 600), (-30, 560), (-20, 500), (-10, 450)], 400, 75)
    assert run.memory.learned_throughput is None


def test_replicas_count_as_ready_a_start_up_after_their_scale_up_and_a_scale_in_takes_starting_ones_first() -> None:
    memory = ScalingMemory(scale_events=(ScaleEvent(-50.0, 10, 20), ScaleEvent(-45.0, 20, 15)))
    # 10 throughout; of the 10 asked at -50, the scale-in at -45 took 5 still starting; 5 are ready from -40.
    assert _ready_seconds(memory, 15, 10.0, -60.0, 0.0) == pytest.approx(10 * 60 + 5 * 40)
    # A scale-in of ready replicas stops them at once.
    memory = ScalingMemory(scale_events=(ScaleEvent(-30.0, 10, 4),))
    assert _ready_seconds(memory, 4, 10.0, -60.0, 0.0) == pytest.approx(10 * 30 + 4 * 30)


def test_scale_events_are_kept_as_long_as_a_wait_since_a_poll_reads_them() -> None:
    # The history reaches the objective and a poll back (70 s; a trend window is 60 s), its oldest poll a poll
    # before that (80 s), and replicas a start-up before that (90 s).
    memory = ScalingMemory(scale_events=(ScaleEvent(-90.0, 1, 2), ScaleEvent(-80.0, 2, 3)), last_scale_up=-80.0)
    run = Run(make_spec(policy=RATE), current=3, memory=memory)
    run.tick(0, 3)
    assert [e.time for e in run.memory.scale_events] == [-80.0]
    # A five-minute objective: 310 s, 320 s, 330 s.
    memory = ScalingMemory(scale_events=(ScaleEvent(-330.0, 1, 2), ScaleEvent(-320.0, 2, 3)), last_scale_up=-320.0)
    run = Run(make_spec(policy={**RATE, "targetWaitSeconds": 300}), current=3, memory=memory)
    run.tick(0, 3)
    assert [e.time for e in run.memory.scale_events] == [-320.0]


# ------------------------------------------------------------------------------------------------ a small run


def _batch(slo: float) -> Scenario:
    """A quiet queue that gets 20,000 messages at once; replicas take 2-6 s a message, four at a time."""
    return scenario(
        duration=2400, seed=1, slo={"waitSeconds": slo},
        workers={"startupDelay": 30, "serviceTime": {"distribution": "uniform", "min": 2, "max": 6},
                 "concurrency": 4, "maxReplicas": 200},
        arrivals=[{"type": "batch", "every": 3600, "at": 120, "messages": 20000, "over": 60}],
    )


def _told(sc: Scenario, factor: float) -> Metrics:
    rule = our_rule(sc, factor)
    return simulate(sc, [Contender("q", lambda w: RuleAutoscaler("q", rule, w, sc.start_epoch))])[0].metrics


def test_a_rule_told_half_the_service_time_still_meets_the_target_wait_on_a_batch() -> None:
    # The batch's drain proves nothing: 20,000 messages arrived in the minute before it, and for all the count
    # says they still arrive (until 2026-11-28 it was read as slow replicas, p99 some 20 s shorter). The batch is
    # sized on the statement, and the unspent half of the objective absorbs it.
    assert _told(_batch(500), 0.5).wait_p99 <= 500


def _spread_batch() -> Scenario:
    """30,000 messages put over ten minutes under a five-minute objective; 1-3 s each, four at a time."""
    return scenario(
        duration=2400, seed=1, slo={"waitSeconds": 300},
        workers={"startupDelay": 30, "serviceTime": {"distribution": "uniform", "min": 1, "max": 3},
                 "concurrency": 4, "maxReplicas": 60},
        arrivals=[{"type": "batch", "every": 3600, "at": 120, "messages": 30000, "over": 600}],
    )


def test_a_batch_put_over_minutes_told_half_the_service_time_is_sized_by_a_wait_since_a_poll() -> None:
    # The drain time (about 150 s) outlasts the trend window, so until the polls were kept back to the objective
    # every front message old enough to read was older than the history, and only a wait under settled replicas
    # could teach, which the replicas added poll after poll through the batch never allowed: sized on the
    # statement, p99 289-316 s over five seeds against 300 s (the fixed point at the objective). Read against
    # the poll before it was put, the first front to wait the drain time proves half the speed.
    assert _told(_spread_batch(), 0.5).wait_p99 < 0.7 * 300


def _trusted(sc: Scenario) -> tuple[set[float | None], float | None]:
    """The throughputs the sizing trusted at each poll of `sc`, the rule told its true serviceTime, and the one
    that rule states."""
    rule = our_rule(sc)
    trusted: list[float | None] = []

    class Trusted(TickRecorder):
        async def report(self, result: TickResult) -> None:
            if result.decision is not None:
                trusted.append(trusted_throughput(rule.spec, result.decision.memory.learned_throughput))

    def build(world: SimWorld) -> RuleAutoscaler:
        autoscaler = RuleAutoscaler("q", rule, world, sc.start_epoch)
        autoscaler.reconciler.reporter = Trusted()
        return autoscaler

    simulate(sc, [Contender("q", build)])
    assert len(trusted) > 2000
    return set(trusted), stated_throughput(rule.spec)


def test_a_rule_told_its_true_service_time_is_not_sized_as_slower() -> None:
    # holdout-outage-catchup on the suite's seed: at 33 minutes no replica is ready while the morning's messages
    # arrive 1.1 a second, then one replica (2/s) brings the count down 0.8 a second. Read as slow replicas until
    # 2026-11-28: 0.4 x the statement, and sized at half its speed for the 5 1/2 hours left.
    trusted, stated = _trusted(load_scenario(str(ROOT / "benchmarks" / "scenarios" / "holdout-outage-catchup.yaml")))
    assert trusted == {stated}


@pytest.mark.parametrize("k", [8, 9, 13])
def test_a_run_of_long_messages_is_not_read_as_slow_replicas(k: int) -> None:
    # holdout-heavy-tail (6 s on average, a few minutes now and then) on three of the seeds benchmarks/seeds.py
    # runs: the front message waited behind a run of long ones, and what was ahead of it went at 0.72-0.78 x the
    # statement (counting all the polls could not see), 92-112 messages in 360-430 replica-seconds. Read as slow
    # replicas until 2026-11-28 (half the statement: 1.12-1.23 x the worker-seconds); within two square roots of
    # what 0.8 x the statement takes, it is chance.
    sc = load_scenario(str(ROOT / "benchmarks" / "scenarios" / "holdout-heavy-tail.yaml"))
    trusted, stated = _trusted(replace(sc, seed=sc.seed + 1000 * k))
    assert trusted == {stated}


def _steady(slo: float) -> Scenario:
    """Five messages a second all hour, 2-6 s each, one at a time: no drain ever, the count steady."""
    return scenario(
        duration=3600, seed=2, slo={"waitSeconds": slo},
        workers={"startupDelay": 20, "serviceTime": {"distribution": "uniform", "min": 2, "max": 6},
                 "concurrency": 1, "maxReplicas": 100},
        arrivals=[{"type": "poisson", "rate": 5}],
    )


def test_steady_traffic_told_half_the_service_time_meets_the_target_wait_by_its_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sc = _steady(60)
    learning = _told(sc, 0.5)
    assert learning.wait_p99 <= 60
    monkeypatch.setattr(controller.policy, "learn_from_wait", lambda *args: args[6])  # the memory, unchanged
    count_only = _told(sc, 0.5)
    # The count alone: one message in twenty waits past the 30 s drain time, and the tail reaches toward the
    # objective (p95 61 s, p99 63 s before the replicas still starting were counted; 48 s and 56 s since, by
    # chance of the steps); sized from the waits, the tail is 20 s shorter or more.
    assert count_only.wait_p95 > 30
    assert learning.wait_p99 < count_only.wait_p99 - 20


def _storms() -> Scenario:
    """A message a second and, every 10 minutes, 300 more within 20 s; 1-3 s each, two at a time; 40 s start-up."""
    return scenario(
        duration=3600, seed=1, slo={"waitSeconds": 60},
        workers={"startupDelay": 40, "serviceTime": {"distribution": "uniform", "min": 1, "max": 3},
                 "concurrency": 2, "maxReplicas": 60},
        arrivals=[{"type": "poisson", "rate": 1},
                  {"type": "burst", "at": [300, 900, 1500, 2100, 2700, 3300], "messages": 300, "over": 20}],
    )


def test_bursts_told_half_the_service_time_meet_the_target_wait_by_the_first_bursts_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sc = _storms()
    learning = _told(sc, 0.5)
    assert learning.wait_p99 <= 60
    # Without reading waits while replicas are added: a burst's backlog is gone before the replicas settle, so no
    # drain or settled wait is seen, and every burst is sized on the statement.
    monkeypatch.setattr(controller.throughput, "_wait_since_poll", lambda *_: None)
    stated_only = _told(sc, 0.5)
    assert stated_only.wait_p99 > 60


def test_the_live_fidelity_scenario_learns_from_its_first_bursts_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    # benchmarks/scenarios/fidelity/fidelity-learn.yaml, run live by benchmarks/fidelity.py with its own rule: a
    # message a second and 150 more at 40 s, 2-second jobs two at a time, the rule told 1 second.
    scenario_file = SCENARIOS / "fidelity-learn.yaml"
    scenario = load_scenario(str(scenario_file))
    [rule] = load_rules([str(rule_for(scenario_file))])

    def desired() -> dict[int, int]:
        result = simulate(scenario, [Contender("q", lambda w: RuleAutoscaler("q", rule, w, scenario.start_epoch))],
                          record_timeline=True)[0]
        return {point.t: point.desired for point in result.timeline}

    learning = desired()
    # Each reading alone shows the replicas at half the stated speed 40 s into the burst, and 4 replicas become 5.
    # The wait since a poll: at 75 s the front message has waited the 30 s drain time, and the 40 counted ahead of
    # it then, with the most the polls could not see (82), are 122 taken in 80 replica-seconds, short of the 128
    # that 0.8 x the statement takes but not by more than chance (122 + 2 x 11 = 144): read at 80 s, with 160 due.
    assert (learning[75], learning[79], learning[80]) == (4, 4, 5)
    monkeypatch.setattr(controller.policy, "learn_throughput", lambda *args, **_: args[4])  # the memory, unchanged
    assert desired() == learning  # the wait alone
    # The drain under those 4 replicas: the burst rose within two polls, which the trend's median reads mostly as
    # a jump (1.8 a second at the drain's start at 60 s, not the burst's 15), so even with 2.5 a second arriving
    # the 4 replicas completed at most 106 in 20 s, short of the 128 that 0.8 x the statement completes by more
    # than chance.
    monkeypatch.setattr(controller.policy, "learn_throughput", learn_throughput)
    monkeypatch.setattr(controller.throughput, "_wait_since_poll", lambda *_: None)
    assert desired() == learning  # the drain alone
    monkeypatch.setattr(controller.policy, "learn_throughput", lambda *args, **_: args[4])
    stated_only = desired()
    assert (stated_only[75], stated_only[80]) == (4, 4)


def test_the_live_fidelity_scenario_with_a_long_objective_learns_from_a_wait_since_a_poll(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # benchmarks/scenarios/fidelity/fidelity-long-wait.yaml with its own rule: 4 messages a second from 20 s to
    # 200 s, 2-second jobs two at a time, the rule told 1 second under a 3-minute objective (a 90 s drain time).
    # Woken at 60 s with 160 counted, 2 replicas ready from 70 s take 2 a second: at 155 s the front message, put at
    # about 62 s, has waited the drain time, and the 160 counted at 60 s (with the 20 the polls could not see) were
    # taken in 170 replica-seconds, far short of the 272 that 0.8 x the statement takes: 0.92 a second a replica,
    # trusted at half the statement, and 2 replicas become 5.
    scenario_file = SCENARIOS / "fidelity-long-wait.yaml"
    sc = load_scenario(str(scenario_file))
    [rule] = load_rules([str(rule_for(scenario_file))])
    assert rule.spec.history_seconds == 185 > rule.spec.policy.trend_window

    def run() -> tuple[list[tuple[int, int, int]], Metrics]:
        result = simulate(sc, [Contender("q", lambda w: RuleAutoscaler("q", rule, w, sc.start_epoch))])[0]
        return result.scale_actions, result.metrics

    actions, learning = run()
    assert (155, 2, 5) in actions and learning.peak_replicas == 5
    # With a trend window of polls, as before 2026-11-29, the front is older than the history: sized as stated.
    monkeypatch.setattr(QueueScalerSpec, "history_seconds", property(lambda spec: spec.policy.trend_window))
    _, stated = run()
    assert stated.peak_replicas == 3
    assert learning.wait_p99 < stated.wait_p99 - 30


# ------------------------------------------------------------------------------------------------ failures


def test_a_failing_queue_keeps_its_last_count() -> None:
    run = Run(make_spec(queues=2, policy={"scaleDown": {"delay": 0}}), current=104)
    run.tick(0, 500, 20)  # 520 / 5 = 104
    up = run.tick(10, None, 1000)
    # 500 (the last count of queue-0) + 1000 = 1500 / 5 = 300; the sources that answered alone would give 200.
    assert (up.desired, up.reason) == (300, Reason.SCALED_UP)
    assert run.memory.last_known_counts == ((0, 0.0, 500.0),)
    held = run.tick(20, None, 0)
    assert (held.desired, held.reason) == (300, Reason.POLL_FAILED)  # 500 known, but never down on a failure
    back = run.tick(30, 10, 0)
    assert back.memory.last_known_counts == () and back.desired == 2


def test_a_failed_poll_keeps_the_replicas_that_serve_what_was_arriving_when_it_was_last_seen() -> None:
    # RATE: 1 message a second a replica, sized for 31. 10 replicas, every slot busy, the count rising 2 a second:
    # (320 + 2 x 10) / 31 = 10.97, within tolerance of 10, so the answered polls keep 10 and let it grow.
    run = drained([280, 300, 320], current=10)
    assert run.current == 10
    # Its polls fail: the count is held at 320, but 2 + 10 x 1 = 12 a second go on arriving.
    failed = run.tick(30, None)
    assert (failed.desired, failed.reason) == (12, Reason.SCALED_UP)
    assert run.memory.arrivals_seen == pytest.approx(12.0)
    assert "serve the 12 messages a second arriving when every source last answered" in failed.message
    # No more at the next failed polls: the same arrivals, served.
    assert run.tick(40, None).desired == 12
    assert run.tick(50, None).desired == 12
    # Answered again, the count decides, and what was arriving then is forgotten.
    back = run.tick(60, 300)
    assert back.memory.arrivals_seen is None


def test_a_failed_poll_after_a_count_that_did_not_grow_holds_as_before() -> None:
    run = drained([320, 310, 300], current=10)
    held = run.tick(30, None)
    assert (held.desired, held.reason) == (10, Reason.POLL_FAILED)
    assert run.memory.arrivals_seen is None


def test_a_failed_poll_in_count_mode_keeps_no_arrivals() -> None:
    # targetPerReplica with no serviceTime: nothing says what a replica completes, so nothing says what arrives.
    run = Run(make_spec(policy={"targetPerReplica": 10}), current=10, memory=LONG_AGO)
    for t, count in ((0, 90), (10, 95), (20, 100)):
        run.tick(t, count)
    held = run.tick(30, None)
    assert (held.desired, held.reason) == (10, Reason.POLL_FAILED)
    assert run.memory.arrivals_seen is None


def test_the_arrivals_seen_round_trip_through_the_memory_json() -> None:
    memory = ScalingMemory(arrivals_seen=4.75, consecutive_failures=3)
    assert ScalingMemory.from_json(json.loads(json.dumps(memory.to_json()))) == memory


def test_the_fallback_still_scales_up_on_what_is_known() -> None:
    run = Run(make_spec(queues=2, fallback={"failureThreshold": 1}), current=104)
    run.tick(0, 500, 20)
    up = run.tick(10, None, 1000)
    assert up.fallback and up.desired == 300
    assert "last counts" in up.message


def test_the_last_count_survives_the_history_window() -> None:
    # A 20-minute outage outlives the observation history (the trend window): memory keeps the count.
    spec = make_spec(queues=2)
    run = Run(spec, current=104)
    run.tick(0, 500, 20)
    run.tick(10, None, 20)
    run.history.clear()  # what the reconciler keeps after a minute of failures holds no answer from queue-0
    assert run.tick(1200, None, 1000).desired == 300


def test_the_trend_ignores_polls_where_a_queue_failed() -> None:
    spec = make_spec(queues=2)
    polls = [seen(0, 100, 100), seen(10, None, 100), seen(20, None, 100), seen(30, 100, 100)]
    # The partial sums (100) against the full ones (200) would read as a rise of 10/s on recovery.
    assert trend(spec, polls, 30) == 0.0
    # While queue-0 fails, its held count stands in for it: the same sum, and queue-1's rise is the trend.
    rising = [seen(0, 100, 100), seen(10, None, 150), seen(20, None, 200), seen(30, None, 250)]
    assert trend(spec, rising, 30) is None  # one full poll: no trend from partial sums
    assert trend(spec, rising, 30, held=((0, 0.0, 100.0),)) == 5.0


def test_a_burst_on_a_queue_that_answers_is_projected_while_another_fails() -> None:
    # checkout-outage: a refund run on the refunds queue while the orders queue's polls fail. Rate mode: a
    # replica is sized for 1 + 0.5 x 30 = 16 messages; the 30 s start-up is the lookahead.
    run = Run(make_spec(queues=2, policy={"targetWaitSeconds": 60, "serviceTime": "2s"}), current=5,
              memory=ScalingMemory(last_scale_up=-600.0))
    run.tick(0, 60, 20)  # 80 / 16 = 5
    up = run.tick(10, None, 40)
    # 60 held + 40 = 100, rising 2/s with the held count in place: (100 + 2 x 30) / 16 = 10 (on the count
    # alone, 100 / 16 = 6.25: 7).
    assert (up.desired, up.reason) == (10, Reason.SCALED_UP)
    assert "count 100, trend +2.00/s needs 10.00 replicas" in up.message
    # At 20 s the five asked at 10 s are still starting, ready at 40 s: they work 50 replica-seconds before the
    # lookahead ends, counted at half the stated 0.5/s (docs/policy.md): 12.5 of the growth, (120 + 60 - 12.5) / 16
    # = 10.47, within tolerance of the 10 asked, so the failed poll holds them ((120 + 60) / 16 = 11.25: 12, before
    # they were counted).
    again = run.tick(20, None, 60)
    assert (again.desired, again.reason) == (10, Reason.POLL_FAILED)
