"""Issue 18: where workers are killed on scale-in, the account of what the scale-ins stopped, and the floor and the
quiet release that keep it within half of what a p99 objective lets be late (controller/kills.py; docs/policy.md,
*Killed workers that stop too much*). Expectations are computed by hand from those formulas.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.policy_suite import our_rule
from controller import kills
from controller.model.readings import Reason, Recommendation, ScalingMemory
from controller.simulator.adapters import RuleAutoscaler
from controller.simulator.run import Contender, Metrics, simulate
from controller.simulator.scenario import load_scenario
from controller.simulator.world import least_busy_takes
from tests.policy_helpers import Run, make_spec
from tests.sim_helpers import holdout_path

# Renders of 40 s, two per pod, a 5-minute objective: 0.05 messages/s a replica, 9.5 messages a replica, a release
# after 2 minutes unneeded. Pods killed on scale-in (the default).
RENDERS = {"targetWaitSeconds": "5m", "serviceTime": "40s", "messagesPerReplica": 2, "startupTime": "45s"}
# An hour's mean of 8 in flight completes 8 x 0.05 / 2 x 3600 = 720 messages an hour; 0.5 % of them is 3.6.
# Twelve replicas asked for until now.
# The hour's mean in flight is 8 (first seen two hours ago), and the scale-ins stopped 10 messages an hour.
SPENT = ScalingMemory(recommendations=(Recommendation(-600.0, 12),), last_scale_up=-600.0,
                      in_flight_mean=(-7200.0, 0.0, 8.0), stopped=(0.0, 10.0))


def test_the_floor_is_the_poisson_quantile_of_the_mean_in_flight() -> None:
    assert kills.poisson_quantile(0.0, 0.99) == 0
    assert kills.poisson_quantile(1.0, 0.99) == 4  # P(X <= 3) = 0.981, P(X <= 4) = 0.996
    assert kills.poisson_quantile(8.0, 0.99) == 15  # P(X <= 14) = 0.983, P(X <= 15) = 0.992
    assert kills.poisson_quantile(400.0, 0.99) == 447  # 400 + 2.326 x 20 = 446.5, normal above 200


def test_a_scale_in_of_killed_workers_counts_its_share_of_what_is_in_flight() -> None:
    spec = make_spec(policy=RENDERS)
    memory = kills.record_scale_in(spec, count=8, current=10, desired=5, per_replica=2, memory=ScalingMemory(),
                                   now=100.0)
    assert memory.stopped == (100.0, 4.0)  # 8 in flight, 5 of 10 pods removed
    # An hour later the account has decayed by e; a second scale-in adds to what is left.
    later = kills.record_scale_in(spec, count=30, current=20, desired=15, per_replica=2, memory=memory, now=3700.0)
    assert later.stopped is not None and later.stopped[1] == pytest.approx(4.0 / math.e + 30 * 5 / 20)
    for action in ("drain", "release"):  # nothing they hold waits out a visibility timeout
        other = make_spec(policy={**RENDERS, "onScaleIn": action})
        assert kills.record_scale_in(other, 8, 10, 5, 2, ScalingMemory(), 100.0) == ScalingMemory()


@pytest.mark.parametrize(("pods", "slots", "held", "removed"), [
    (20, 4, 40, 5), (20, 4, 70, 5), (10, 2, 12, 4), (8, 32, 180, 3), (30, 64, 1200, 10),
])
def test_told_the_pods_counts_a_scale_in_stops_what_the_least_busy_hold_as_the_simulator_draws_it(
    pods: int, slots: int, held: int, removed: int,
) -> None:
    # The referee is the simulator's placement model (every placement of so many messages in the slots as likely,
    # the ReplicaSet removing the pods of fewest): the expectation is within 5 % of the mean of 4,000 draws, and
    # below the removed pods' share that a blind removal stops.
    rng = random.Random(7)
    drawn = sum(least_busy_takes([held], pods, slots, removed, rng)[0] for _ in range(4000)) / 4000
    told = kills.expected_stops(held, pods, pods - removed, slots, least_busy=True)
    assert told == pytest.approx(drawn, rel=0.05)
    assert told < kills.expected_stops(held, pods, pods - removed, slots)


def test_the_least_busy_hold_by_hand() -> None:
    # 1 message on 2 one-slot pods, each taken as busy with the chance 1/2 on its own: the least busy holds one
    # only when both do, 1/4 (with the total fixed it holds none: the estimate's worst case, still half the blind
    # share, 1/2).
    assert kills.least_busy_hold(1.0, pods=2, per_replica=1, removed=1) == pytest.approx(0.25)
    # 2 slots a pod, 2 of 4 busy (1/2 each): the smallest of 2 binomial(2, 1/2) counts is 0 unless both hold 1 or
    # more (P = (3/4)^2), and 2 only when both hold 2 (P = (1/4)^2): 9/16 + 1/16 = 10/16.
    assert kills.least_busy_hold(2.0, pods=2, per_replica=2, removed=1) == pytest.approx(10 / 16)
    assert kills.least_busy_hold(8.0, pods=4, per_replica=2, removed=3) == 6.0  # every slot busy
    assert kills.least_busy_hold(0.0, pods=4, per_replica=2, removed=3) == 0.0
    assert kills.least_busy_hold(3.0, pods=4, per_replica=2, removed=0) == 0.0


def test_the_account_of_a_rule_told_the_pods_counts_takes_what_the_least_busy_hold() -> None:
    spec = make_spec(policy=RENDERS, inFlight={"port": "in-flight"})
    memory = kills.record_scale_in(spec, count=8, current=10, desired=5, per_replica=2, memory=ScalingMemory(),
                                   now=100.0)
    # 8 in flight on 10 pods of 2 slots: the 5 least busy hold about 1.5 of them (1.53 over the simulator's draws),
    # not the blind share of 4.
    assert memory.stopped is not None
    assert memory.stopped[1] == pytest.approx(kills.least_busy_hold(8.0, 10, 2, 5))
    assert memory.stopped[1] == pytest.approx(1.55, abs=0.01)


def test_what_a_scale_in_stops_beyond_the_account_if_its_pods_are_not_the_least_busy_is_the_rest_of_the_share() -> None:
    told = make_spec(policy=RENDERS, inFlight={"port": "in-flight"})
    # 8 in flight on 10 pods of 2 slots, 5 removed: the share is 4, the least busy hold about 1.55.
    assert kills.unchosen_stops(told, count=8, current=10, desired=5, per_replica=2) == pytest.approx(
        4.0 - kills.least_busy_hold(8.0, 10, 2, 5))
    # Nothing where the account counted the share already, or keeps none, or nothing is removed.
    assert kills.unchosen_stops(make_spec(policy=RENDERS), 8, 10, 5, 2) == 0.0
    assert kills.unchosen_stops(make_spec(policy={**RENDERS, "onScaleIn": "drain"}, inFlight={"port": "x"}),
                                8, 10, 5, 2) == 0.0
    assert kills.unchosen_stops(told, 8, 10, 10, 2) == 0.0
    assert kills.unchosen_stops(told, 8, 10, 5, None) == 0.0


def test_the_floor_holds_only_once_the_stops_pass_half_a_percent_of_the_messages_completed() -> None:
    spec = make_spec(policy=RENDERS)
    under = replace(SPENT, stopped=(0.0, 3.5))
    # A release from 12 to 5 replicas with nothing in flight stops nothing: 3.5 is within the 3.6 budget.
    assert kills.stop_floor(spec, under, 0.0, per_replica=2, throughput=0.05, count=0, current=12, asked=5) is None
    floor = kills.stop_floor(spec, SPENT, 0.0, per_replica=2, throughput=0.05, count=0, current=12, asked=5)
    assert floor is not None
    assert floor.replicas == 8 and floor.stopped_per_hour == 10.0 and floor.releasing is None
    assert floor.completed_per_hour == pytest.approx(720.0) and floor.allowance == pytest.approx(3.6)
    # The account decays: after an hour, 10 / e = 3.7 an hour is still over 3.6; after 1 h 5 min it is not.
    assert kills.stop_floor(spec, SPENT, 3600.0, 2, 0.05, 0, 12, 5) is not None
    assert kills.stop_floor(spec, SPENT, 3900.0, 2, 0.05, 0, 12, 5) is None
    # The release at hand counts: with one message in flight, 12 -> 5 stops 7/12 more, and 3.5 + 0.58 is over.
    passing = kills.stop_floor(spec, under, 0.0, 2, 0.05, count=1, current=12, asked=5)
    assert passing is not None and passing.releasing is not None
    assert passing.releasing[0] == 5 and passing.releasing[1] == pytest.approx(7 / 12)
    # So does a first one, with nothing remembered stopped: 12 -> 5 with 8 in flight stops 4.7 of a 3.6 budget.
    assert kills.stop_floor(spec, replace(SPENT, stopped=None), 0.0, 2, 0.05, 8, 12, 5) is not None
    assert kills.stop_floor(spec, replace(SPENT, stopped=None), 0.0, 2, 0.05, 6, 12, 5) is None  # 3.5


def test_a_rule_that_spent_its_budget_releases_to_the_floor_not_to_the_need() -> None:
    run = Run(make_spec(policy=RENDERS), current=12, memory=SPENT)
    # Four in flight: the need is 2 replicas; after the 2-minute delay the release stops at the floor of 8.
    replicas = [run.tick(t, 4).desired for t in range(0, 130, 10)]
    assert replicas == [12] * 12 + [8]
    last = run.decisions[-1]
    assert last.reason == Reason.SCALED_DOWN
    assert "scaled down 12 -> 8 (recommended 2): scale-ins stopped about 10 messages an hour, and releasing to 2 " \
           "would stop 3.3 more, over 0.5% of the 720 completed; not below the 8 replicas that hold the 8.0 " \
           "messages in flight on average 99% of the time" in last.message
    # The release is counted: 4 in flight, 4 of 12 pods removed.
    assert run.memory.stopped is not None and run.memory.stopped[1] == pytest.approx(10.0 * math.exp(-120 / 3600)
                                                                                      + 4 * 4 / 12)


def test_a_rule_that_spent_its_budget_releases_only_at_a_poll_with_no_more_than_the_mean_in_flight() -> None:
    run = Run(make_spec(policy=RENDERS), current=12, memory=SPENT)
    assert [run.tick(t, 10).desired for t in range(0, 140, 10)] == [12] * 14  # 10 in flight, above the mean of 8
    held = run.decisions[-1]
    assert held.reason == Reason.HELD_BY_STABILIZATION
    assert ("a release waits for a poll with at most 8.0 in flight where it stops at most 3.6: keeping 12 "
            "(recommended 5)") in held.message
    assert run.tick(140, 6).desired == 8  # 6 in flight: the release goes, to the floor


def test_a_release_that_stops_more_than_an_hours_budget_waits_though_little_is_in_flight() -> None:
    # 40 replicas of a wave; the floor is 8. With 8 in flight (the mean), 40 -> 8 stops 8 x 32/40 = 6.4 of the
    # hour's budget of 3.6: the release waits. With 4 in flight it stops 3.2, and goes.
    wave = replace(SPENT, recommendations=(Recommendation(-600.0, 40),))
    run = Run(make_spec(policy=RENDERS), current=40, memory=wave)
    assert [run.tick(t, 8).desired for t in range(0, 140, 10)] == [40] * 14
    held = run.decisions[-1]
    assert held.reason == Reason.HELD_BY_STABILIZATION
    assert ("a release waits for a poll with at most 8.0 in flight where it stops at most 3.6: keeping 40 "
            "(recommended 4)") in held.message
    assert run.tick(140, 4).desired == 8


def test_the_release_that_would_pass_the_budget_waits_as_those_after_it() -> None:
    # Nothing stopped yet. 12 -> 5 with 10 in flight would stop 5.8 of a 3.6 budget: it waits, and says what it
    # would stop. With 7 in flight 12 -> 5 would still stop 4.1, and the release goes to the floor of 8 (2.3).
    first = Run(make_spec(policy=RENDERS), current=12, memory=replace(SPENT, stopped=None))
    assert [first.tick(t, 10).desired for t in range(0, 130, 10)] == [12] * 13
    assert ("scale-ins stopped about 0 messages an hour, and releasing to 5 would stop 5.8 more, over 0.5% of the "
            "720 completed") in first.decisions[-1].message
    assert first.tick(130, 7).desired == 8


def test_under_budget_or_with_workers_that_do_not_die_the_release_follows_the_need() -> None:
    # 1.5 stopped (1.45 two minutes later); 12 -> 1 with 2 in flight stops 1.8 more: 3.3, within the 3.6 budget,
    # and the release follows the need.
    under = Run(make_spec(policy=RENDERS), current=12, memory=replace(SPENT, stopped=(0.0, 1.5)))
    assert [under.tick(t, 2).desired for t in range(0, 130, 10)][-1] == 1
    drained = Run(make_spec(policy={**RENDERS, "onScaleIn": "drain"}), current=12, memory=SPENT)
    assert [drained.tick(t, 4).desired for t in range(0, 30, 10)][-1] == 2  # two polls, then to the need


def test_the_account_round_trips_through_status_and_rejects_a_malformed_pair() -> None:
    memory = replace(SPENT, stopped=(12.5, 3.25))
    assert ScalingMemory.from_json(json.loads(json.dumps(memory.to_json()))) == memory
    for bad in ({"inFlightMean": [1.0, 2.0]}, {"stopped": [1.0]}):
        with pytest.raises(ValueError, match="memory is not valid"):
            ScalingMemory.from_json(bad)


def test_the_mean_in_flight_is_a_trimmed_time_average_for_an_hour_then_a_trimmed_exponential_one() -> None:
    spec = make_spec(policy=RENDERS)
    first = kills.remember_in_flight(spec, count=8, current=6, per_replica=2, memory=ScalingMemory(), now=0.0)
    assert first.in_flight_mean == (0.0, 0.0, 8.0)
    # In the first hour, the time average since the first poll, each count standing for the time since the mean
    # was last remembered: 10 s of 12, then 20 s of 2 average 5.33 (a change of a tenth or more is remembered).
    second = kills.remember_in_flight(spec, 12, 6, 2, first, 10.0)
    assert second.in_flight_mean == (0.0, 10.0, 12.0)
    third = kills.remember_in_flight(spec, 2, 6, 2, second, 30.0)
    assert third.in_flight_mean is not None and third.in_flight_mean[2] == pytest.approx((12 * 10 + 2 * 20) / 30)
    # A burst in the first hour is trimmed too: 300 in flight for 10 s enters as 12 + 3 x 3.46 + 1 = 23.4.
    burst = kills.remember_in_flight(spec, 300, 200, 2, second, 20.0).in_flight_mean
    assert burst is not None and burst[2] == pytest.approx(12.0 + (12.0 + 3 * math.sqrt(12.0) + 1.0 - 12.0) / 2)
    # After the hour: 9 in flight for 10 s moves the mean of 8 by 0.003, kept as it was (status is not rewritten).
    warm = replace(ScalingMemory(), in_flight_mean=(-7200.0, 0.0, 8.0))
    assert kills.remember_in_flight(spec, 9, 6, 2, warm, 10.0) is warm
    # A burst of 200 enters only up to 3 standard deviations above the mean: 8 + 3 x 2.83 + 1 = 17.5.
    moved = kills.remember_in_flight(spec, 200, 100, 2, warm, 1800.0).in_flight_mean
    assert moved is not None and moved[:2] == (-7200.0, 1800.0)
    assert moved[2] == pytest.approx(8.0 + (17.49 - 8.0) * (1 - math.exp(-0.5)), abs=0.01)


REPORT_RENDERS = holdout_path("holdout-report-renders")
BUDGET = kills.STOP_BUDGET


LONG_BATCH = holdout_path("holdout-long-batch")


def _run(budget: float, monkeypatch: pytest.MonkeyPatch, scenario: Path = REPORT_RENDERS) -> Metrics:
    monkeypatch.setattr(kills, "STOP_BUDGET", budget)
    sc = load_scenario(str(scenario))
    rule = our_rule(sc)
    return simulate(sc, [Contender("q", lambda w: RuleAutoscaler("q", rule, w, sc.start_epoch))])[0].metrics


def test_held_out_report_renders_meets_its_objective_only_with_the_account(monkeypatch: pytest.MonkeyPatch) -> None:
    # Renders of 40 s with a ten-minute tail, a wave every hour, pods killed with a 15-minute visibility timeout:
    # every render a scale-in stops is late. Without the account 152 of 10,122 messages were delivered again and
    # the p99 wait was the visibility timeout; with it (seed of the suite) 81, and the objective is met.
    sc = load_scenario(str(REPORT_RENDERS))
    without = _run(math.inf, monkeypatch)
    assert without.wait_p99 > sc.slo_wait and without.duplicate_deliveries > 0.01 * without.messages_arrived
    kept = _run(BUDGET, monkeypatch)
    assert kept.wait_p99 <= sc.slo_wait
    assert kept.duplicate_deliveries < 0.01 * kept.messages_arrived


def test_held_out_long_batch_meets_its_objective_releasing_only_what_fits_an_hours_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Re-encodes of 10 to 30 minutes, 60 every four hours and a trickle of about 3 in flight, pods killed with a
    # 40-minute visibility timeout: a batch's 40 replicas released while the trickle runs stop its jobs, each 40
    # minutes late. An hour's budget is 0.5 % of about 10 completions, so a release waits for a poll with nothing
    # in flight. Before a release counted itself and its own budget, 24 of ~540 messages were delivered again
    # and the p99 wait was 3,248 s; now none was, and one since each batch's 60 come evenly over its 5 minutes rather
    # than in its first minute (seed of the suite; the simulator's burst spread, 2026-11-29).
    sc = load_scenario(str(LONG_BATCH))
    without = _run(math.inf, monkeypatch, LONG_BATCH)
    assert without.wait_p99 > sc.slo_wait and without.duplicate_deliveries > 0.01 * without.messages_arrived
    kept = _run(BUDGET, monkeypatch, LONG_BATCH)
    assert kept.wait_p99 <= sc.slo_wait and kept.duplicate_deliveries <= 1 < without.duplicate_deliveries / 10
