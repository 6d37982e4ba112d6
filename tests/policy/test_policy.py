"""Every rule of the decision policy, with expectations computed by hand."""

from __future__ import annotations

import json

import pytest

from controller.model.readings import Reason, Recommendation, ScaleEvent, ScalingMemory, SourceReading
from controller.policy import decide, effective_bounds, raw_need, sizing
from tests.policy_helpers import MONDAY_0900_UTC, Run, make_spec, seen

NO_WINDOWS = {"scaleDown": {"stabilizationWindow": 0, "delay": 0}}


# ---------------------------------------------------------------------------------------------- thresholds


def test_burst_is_met_in_one_step() -> None:
    d = Run(make_spec(), current=1).tick(0, 1000)
    assert (d.desired, d.reason) == (200, Reason.SCALED_UP)
    assert d.count == 1000 and d.recommended == 200


def test_count_within_tolerance_keeps_current() -> None:
    spec = make_spec()
    # 52 / 5 = 10.4 replicas: 4 % off 10, inside the 10 % band.
    d = Run(spec, current=10).tick(0, 52)
    assert (d.desired, d.reason) == (10, Reason.WITHIN_TOLERANCE)
    # 56 / 5 = 11.2: 12 % off, outside: ceil -> 12.
    assert Run(spec, current=10).tick(0, 56).desired == 12


def test_zero_tolerance_follows_every_change() -> None:
    assert Run(make_spec(policy={"tolerance": 0}), current=10).tick(0, 52).desired == 11


def test_activation_from_zero_needs_more_than_the_threshold() -> None:
    spec = make_spec(policy={"activationThreshold": 10})
    at = Run(spec).tick(0, 10)
    assert (at.desired, at.reason, at.active) == (0, Reason.INACTIVE, False)
    above = Run(spec).tick(0, 11)
    assert (above.desired, above.reason, above.active) == (3, Reason.ACTIVATED_FROM_ZERO, True)


def test_one_message_wakes_a_rule_at_zero() -> None:
    d = Run(make_spec()).tick(0, 1)
    assert (d.desired, d.reason) == (1, Reason.ACTIVATED_FROM_ZERO)


def test_scale_to_zero_waits_for_the_delay() -> None:
    run = Run(make_spec(policy={"scaleToZeroDelay": "5m", **NO_WINDOWS}), current=4)
    first = run.tick(0, 0)
    assert (first.desired, first.reason) == (1, Reason.SCALED_DOWN)
    pending = run.tick(290, 0)
    assert (pending.desired, pending.reason) == (1, Reason.PENDING_SCALE_TO_ZERO)
    assert "scaling to zero in 10s" in pending.message
    gone = run.tick(300, 0)
    assert (gone.desired, gone.reason) == (0, Reason.SCALED_TO_ZERO)


def test_activity_restarts_the_scale_to_zero_delay() -> None:
    run = Run(make_spec(policy={"scaleToZeroDelay": "5m", **NO_WINDOWS}), current=1)
    run.tick(0, 0)
    run.tick(200, 3)  # active again
    run.tick(250, 0)
    assert run.tick(500, 0).desired == 1  # 250 s inactive, not 300
    assert run.tick(550, 0).desired == 0


def test_minimum_above_zero_never_scales_to_zero() -> None:
    run = Run(make_spec(minReplicas=2, policy={"scaleToZeroDelay": 0, **NO_WINDOWS}), current=5)
    assert run.tick(0, 0).desired == 2
    assert run.tick(1000, 0).reason == Reason.AT_MINIMUM


def test_at_maximum() -> None:
    d = Run(make_spec(maxReplicas=50), current=10).tick(0, 1000)
    assert (d.desired, d.reason) == (50, Reason.AT_MAXIMUM)
    again = Run(make_spec(maxReplicas=50), current=50).tick(0, 1000)
    assert (again.desired, again.reason) == (50, Reason.AT_MAXIMUM)


def test_lowered_maximum_is_obeyed_at_once() -> None:
    d = Run(make_spec(maxReplicas=5), current=9).tick(0, 1000)
    assert (d.desired, d.reason) == (5, Reason.AT_MAXIMUM)


# ---------------------------------------------------------------------------------------------- aggregation


def test_sum_and_max_aggregation_with_weights() -> None:
    counts = (10, 30)
    weights = [{"type": "azure-queue", "queueName": "high", "weight": 2, "connectionSecretRef": {"name": "a", "key": "b"}},
               {"type": "azure-queue", "queueName": "low", "connectionSecretRef": {"name": "a", "key": "b"}}]
    total = Run(make_spec(sources=weights)).tick(0, *counts)
    assert total.count == 50  # 2 * 10 + 30
    biggest = Run(make_spec(aggregation="max", sources=weights)).tick(0, *counts)
    assert biggest.count == 30


# ---------------------------------------------------------------------------------------------- growth rate


def test_lookahead_sizes_for_the_projected_backlog() -> None:
    spec = make_spec(policy={"lookahead": "30s"})
    run = Run(spec, current=20)
    run.tick(0, 100)
    run.current = 20  # only the second tick matters here
    d = run.tick(10, 200)
    # slope 10/s, so in 30 s the backlog will be 200 + 300 = 500: 100 replicas at 5 each.
    assert d.trend == pytest.approx(10.0)
    assert d.desired == 100
    plain = Run(make_spec(), current=20)
    plain.tick(0, 100)
    plain.current = 20
    assert plain.tick(10, 200).desired == 40


def test_lookahead_does_not_project_a_draining_queue_down() -> None:
    spec = make_spec(policy={"lookahead": "60s", **NO_WINDOWS})
    run = Run(spec, current=40)
    run.tick(0, 300)
    run.current = 40
    assert run.tick(10, 200).desired == 40  # 200 / 5; a projection would say 0


def test_trend_uses_least_squares_over_the_window() -> None:
    spec = make_spec(policy={"trendWindow": "30s"})
    run = Run(spec, current=100)
    for t, c in ((0, 0), (10, 1000), (20, 1100), (30, 1200), (40, 1300)):
        d = run.tick(t, c)
        run.current = 100
    # Only t=10..40 is inside the 30 s window at t=40: a straight line of slope 10/s.
    assert d.trend == pytest.approx(10.0)


def test_rate_mode_derives_its_target_from_the_wait_objective() -> None:
    # 2 messages at once per replica, 4 s each: 0.5 message/s per replica. targetWaitSeconds 60: a backlog may take
    # half of it, 30 s, so one replica is sized for 2 in flight + 0.5 * 30 = 17 messages.
    spec = make_spec(policy={"targetWaitSeconds": 60, "serviceTime": "4s", "messagesPerReplica": 2})
    size = sizing(spec)
    assert (size.mode, size.per_replica, size.throughput) == ("rate", 2, 0.5)
    assert (size.drain_time, size.target, size.lookahead) == (30.0, 17.0, 30.0)
    assert raw_need(spec, 170, 0.0, 1) == pytest.approx(10.0)
    d = Run(spec, current=1).tick(0, 170)
    assert (d.desired, d.reason) == (10, Reason.SCALED_UP)


def test_an_objective_shorter_than_two_polls_still_drains_within_half_of_it() -> None:
    # A 5 s objective polled every 10 s: the backlog a replica is sized for is 2.5 s of its work, not a poll's.
    # Held at a poll, 16 slots of 300 ms jobs were sized for 16 + 53.3 * 10 = 549 messages, a fixed point whose
    # wait (10 s) is twice the objective (the held-out click-stream: p99 10 s against 5 s).
    spec = make_spec(policy={"targetWaitSeconds": 5, "serviceTime": "300ms", "messagesPerReplica": 16})
    assert spec.polling_interval == 10.0
    size = sizing(spec)
    assert size.drain_time == 2.5
    assert size.target == pytest.approx(16 + 16 / 0.3 * 2.5)
    assert raw_need(spec, 300, 0.0, 1) == pytest.approx(300 / size.target)  # 2.01: three replicas, where 549 kept one


def test_near_max_replicas_the_usual_load_keeps_no_standing_backlog() -> None:
    # A default drain time keeps a backlog of half the objective, which only replicas to spare can clear. The
    # held-out capped-peak ran 18 of its 25 replicas with a 5-minute backlog, then its peak outran the cap and the
    # backlog grew on top: p99 696 s against 600 s (25 replicas throughout: 409 s). An hour at 20 of 25 busy
    # leaves room for a drain time of 600 s x (1 - 20/25) = 120 s: 3,040 counted ask 3,040 / (2 + 2/3 x 120) = 37,
    # the cap, where half the objective asked 3,040 / 202 = 15 and the 20 busy were held.
    spec = make_spec(maxReplicas=25, policy={"targetWaitSeconds": 600, "serviceTime": "3s", "messagesPerReplica": 2,
                                             "onScaleIn": "drain"})
    near = Run(spec, current=20)
    for t in range(0, 3600, 10):
        assert near.tick(t, 40).desired == 20
    assert near.memory.in_flight_mean is not None and near.memory.in_flight_mean[2] == pytest.approx(40)
    assert near.tick(3600, 3040).desired == 25
    # A usual load of 5 busy leaves room for the whole default drain time: the same count is sized as before.
    light = Run(spec, current=5)
    for t in range(0, 3600, 10):
        light.tick(t, 10)
    assert light.tick(3600, 3040).desired == 16  # 3,040 + the jump's projection over the start-up, / 202


def test_rate_mode_never_sizes_below_the_busy_replicas() -> None:
    # 12 in flight on 6 replicas of 2 slots: 12 / 17 would ask for 1, but six replicas are working.
    spec = make_spec(policy={"targetWaitSeconds": 60, "serviceTime": "4s", "messagesPerReplica": 2})
    assert raw_need(spec, 12, 0.0, 6) == pytest.approx(6.0)
    # Only what the current replicas can hold counts as in flight: 12 messages on 3 replicas, 6 in flight.
    assert raw_need(spec, 12, 0.0, 3) == pytest.approx(3.0)


def test_growth_is_projected_over_the_lookahead() -> None:
    spec = make_spec(policy={"targetWaitSeconds": 60, "serviceTime": "4s", "messagesPerReplica": 2,
                             "lookahead": "20s"})
    # (34 + 1.7/s * 20 s) / 17 = 4
    assert raw_need(spec, 34, 1.7, 1) == pytest.approx(4.0)
    assert raw_need(spec, 34, -5.0, 1) == pytest.approx(2.0)  # a draining queue is not projected down


def test_throughput_per_replica_and_explicit_knobs_override_the_derived_ones() -> None:
    spec = make_spec(policy={"throughputPerReplica": 2, "drainTime": "60s"})
    size = sizing(spec)
    assert (size.per_replica, size.target, size.drain_time) == (1, 1 + 2 * 60, 60.0)
    explicit = make_spec(policy={"targetWaitSeconds": 60, "serviceTime": "4s", "targetPerReplica": 40})
    assert sizing(explicit).target == 40.0


def test_count_mode_with_messages_per_replica_keeps_busy_replicas() -> None:
    # KEDA's formula alone (10 / 5 = 2) would scale 10 busy single-message workers down to 2 (kedacore/keda#636).
    keda_like = make_spec(policy={"targetPerReplica": 5})
    assert raw_need(keda_like, 10, 0.0, 10) == pytest.approx(2.0)
    honest = make_spec(policy={"targetPerReplica": 5, "messagesPerReplica": 1})
    assert raw_need(honest, 10, 0.0, 10) == pytest.approx(10.0)


def test_rate_mode_lets_a_trickle_wait_for_company_at_zero() -> None:
    # 1 message, target 17 per replica: too little for a replica; it may wait the 30 s drain time.
    run = Run(make_spec(policy={"targetWaitSeconds": 60, "serviceTime": "4s", "messagesPerReplica": 2}))
    first = run.tick(0, 1)
    assert (first.desired, first.reason) == (0, Reason.ACTIVATION_DEFERRED)
    assert "waking one in 30s" in first.message
    assert run.tick(20, 3).desired == 0
    assert run.tick(30, 3).desired == 1
    # A real burst wakes at once.
    assert Run(make_spec(policy={"targetWaitSeconds": 60, "serviceTime": "4s"})).tick(0, 500).desired >= 1


# ---------------------------------------------------------------------------------------------- windows, cooldowns


def test_scale_down_waits_for_the_stabilization_window() -> None:
    run = Run(make_spec(policy={"scaleDown": {"stabilizationWindow": "60s", "delay": 0}}), current=20)
    assert run.tick(0, 100).desired == 20
    held = run.tick(10, 10)
    assert (held.desired, held.reason, held.recommended) == (20, Reason.HELD_BY_STABILIZATION, 2)
    assert run.tick(65, 10).desired == 20  # the 20-recommendation lasted until t=10, still inside (5, 65]
    down = run.tick(70, 10)
    assert (down.desired, down.reason) == (2, Reason.SCALED_DOWN)


def test_scale_down_takes_the_highest_recommendation_in_the_window() -> None:
    run = Run(make_spec(policy={"scaleDown": {"stabilizationWindow": "60s", "delay": 0}}), current=20)
    run.tick(0, 100)  # 20
    run.tick(10, 50)  # 10
    run.tick(20, 10)  # 2
    assert run.tick(75, 10).desired == 10  # 20 left the window at t=70; 10 is still in it
    assert run.tick(80, 10).desired == 2


def test_scale_down_delay_releases_in_one_step_after_the_delay() -> None:
    # The default: capacity is released once unneeded for 2 minutes, straight to what those 2 minutes needed.
    run = Run(make_spec(), current=20)
    run.tick(0, 100)  # 20
    for t in range(10, 130, 10):
        assert run.tick(t, 30 if t < 60 else 10).desired == 20  # 6, then 2: not below 20 for 2 minutes yet
    held = run.decisions[-1]
    assert held.reason == Reason.HELD_BY_STABILIZATION
    down = run.tick(130, 10)
    assert (down.desired, down.reason) == (6, Reason.SCALED_DOWN)  # the most the last 2 minutes asked for
    assert run.tick(170, 10).desired == 6  # 6 was still wanted at t=60, inside (50, 170]
    assert run.tick(180, 10).desired == 2


def test_a_new_rule_holds_the_replicas_it_finds_for_the_scale_down_delay() -> None:
    # Kubernetes' HPA records the current replicas as its first recommendation (HorizontalController.
    # recordInitialRecommendation), so a new autoscaler does not scale in before its downscale window has seen
    # anything. A rule's first poll of an empty queue used to drop 20 running replicas to 1 at once (the held-out
    # launch-decay: 20 replicas up at the start, 32 asked for ten seconds later).
    run = Run(make_spec(), current=20)
    first = run.tick(0, 0)
    assert (first.desired, first.reason) == (20, Reason.HELD_BY_STABILIZATION)
    assert "scale-down delay" in first.message
    for t in range(10, 120, 10):
        assert run.tick(t, 0).desired == 20
    assert run.tick(120, 0).desired == 1  # two minutes with nothing asked: released in one step
    # Not above: the replicas found hold back no first scale-up, even under a scale-up window.
    up = Run(make_spec(policy={"scaleUp": {"stabilizationWindow": "30s"}}), current=2)
    assert up.tick(0, 100).desired == 20


def test_scale_up_stabilization_takes_the_lowest_recommendation() -> None:
    run = Run(make_spec(policy={"scaleUp": {"stabilizationWindow": "30s"}}), current=2)
    run.tick(0, 10)  # 2
    assert run.tick(10, 100).desired == 2
    assert run.tick(40, 100).desired == 20


def test_scale_up_cooldown_holds_a_second_scale_up() -> None:
    run = Run(make_spec(policy={"scaleUp": {"cooldown": "60s"}}), current=1)
    assert run.tick(0, 50).desired == 10
    held = run.tick(30, 500)
    assert (held.desired, held.reason) == (10, Reason.HELD_BY_COOLDOWN)
    assert "scale-up cooldown" in held.message
    assert run.tick(60, 500).desired == 100


def test_scale_down_cooldown_counts_from_any_scale() -> None:
    run = Run(make_spec(policy={"scaleDown": {"cooldown": "60s", "stabilizationWindow": 0, "delay": 0}}), current=1)
    run.tick(0, 100)  # up to 20 at t=0
    held = run.tick(30, 10)
    assert (held.desired, held.reason) == (20, Reason.HELD_BY_COOLDOWN)
    assert run.tick(60, 10).desired == 2


def test_scale_up_is_not_blocked_by_the_scale_down_cooldown() -> None:
    run = Run(make_spec(policy={"scaleDown": {"cooldown": "10m", "stabilizationWindow": 0, "delay": 0}}), current=20)
    run.tick(0, 10)  # down to 2
    assert run.tick(5, 1000).desired == 200


# ---------------------------------------------------------------------------------------------- step limits


HPA_DEFAULT_UP = {"policies": [{"type": "Pods", "value": 4, "period": "15s"},
                               {"type": "Percent", "value": 100, "period": "15s"}], "selectPolicy": "Max"}


def test_hpa_style_step_limits_reproduce_the_documented_ramp() -> None:
    run = Run(make_spec(policy={"scaleUp": HPA_DEFAULT_UP}), current=1)
    ramp = [run.tick(15 * i, 1000).desired for i in range(8)]
    assert ramp == [5, 10, 20, 40, 80, 160, 200, 200]
    assert [d.reason for d in run.decisions[:7]] == [Reason.LIMITED_BY_STEP] * 6 + [Reason.SCALED_UP]


def test_min_select_policy_takes_the_smaller_step() -> None:
    up = dict(HPA_DEFAULT_UP, selectPolicy="Min")
    run = Run(make_spec(policy={"scaleUp": up}), current=1)
    assert [run.tick(15 * i, 1000).desired for i in range(4)] == [2, 4, 8, 12]


def test_disabled_direction_never_moves() -> None:
    d = Run(make_spec(policy={"scaleUp": {"selectPolicy": "Disabled"}}), current=3).tick(0, 1000)
    assert (d.desired, d.reason) == (3, Reason.LIMITED_BY_STEP)


def test_step_limit_counts_changes_inside_the_period() -> None:
    up = {"policies": [{"type": "Pods", "value": 4, "period": "60s"}]}
    run = Run(make_spec(policy={"scaleUp": up}), current=1)
    assert run.tick(0, 1000).desired == 5
    assert run.tick(30, 1000).desired == 5  # 4 already added in the last 60 s
    assert run.tick(60, 1000).desired == 9


def test_scale_down_percent_limit_truncates() -> None:
    down = {"stabilizationWindow": 0, "delay": 0, "policies": [{"type": "Percent", "value": 50, "period": "1m"}]}
    run = Run(make_spec(policy={"scaleDown": down}), current=21)
    d = run.tick(0, 10)
    assert (d.desired, d.reason) == (10, Reason.LIMITED_BY_STEP)  # trunc(21 * 0.5)
    assert run.tick(30, 10).desired == 10  # period start is still 21: trunc(10.5) = 10
    assert run.tick(60, 10).desired == 5


def test_scale_to_zero_is_not_step_limited() -> None:
    down = {"stabilizationWindow": 0, "policies": [{"type": "Pods", "value": 1, "period": "1m"}]}
    run = Run(make_spec(policy={"scaleDown": down, "scaleToZeroDelay": 0}), current=1)
    assert run.tick(0, 0).desired == 0


def test_activation_from_zero_with_a_percent_limit_starts_at_one() -> None:
    up = {"policies": [{"type": "Percent", "value": 100, "period": "15s"}]}
    d = Run(make_spec(policy={"scaleUp": up})).tick(0, 1000)
    assert (d.desired, d.reason) == (1, Reason.LIMITED_BY_STEP)


# ---------------------------------------------------------------------------------------------- schedules


OFFICE = {"name": "office", "days": ["Mon", "Tue", "Wed", "Thu", "Fri"], "start": "08:00", "end": "18:00",
          "minReplicas": 5}
NIGHT_CAP = {"name": "night", "days": ["Mon"], "start": "22:00", "end": "06:00", "maxReplicas": 3}


def test_schedule_raises_the_minimum_inside_its_window() -> None:
    spec = make_spec(schedules=[OFFICE])
    d = Run(spec).tick(MONDAY_0900_UTC, 0)
    assert (d.desired, d.reason) == (5, Reason.AT_MINIMUM)
    assert "office" in d.message
    sunday = MONDAY_0900_UTC - 24 * 3600
    assert Run(spec).tick(sunday, 0).desired == 0


def test_schedule_window_past_midnight_belongs_to_the_day_it_starts() -> None:
    spec = make_spec(schedules=[NIGHT_CAP])
    monday_2300 = MONDAY_0900_UTC + 14 * 3600
    tuesday_0200 = MONDAY_0900_UTC + 17 * 3600
    tuesday_2300 = MONDAY_0900_UTC + 38 * 3600
    assert effective_bounds(spec, monday_2300).maximum == 3
    assert effective_bounds(spec, tuesday_0200).maximum == 3
    assert effective_bounds(spec, tuesday_2300).maximum == 300


def test_schedule_time_zone() -> None:
    tokyo = dict(OFFICE, timeZone="Asia/Tokyo")  # 09:00 UTC is 18:00 in Tokyo: the window has just closed
    assert effective_bounds(make_spec(schedules=[tokyo]), MONDAY_0900_UTC).minimum == 0
    assert effective_bounds(make_spec(schedules=[tokyo]), MONDAY_0900_UTC - 60).minimum == 5


def test_a_raise_wins_over_a_cap() -> None:
    both = [dict(OFFICE, minReplicas=8), {"name": "cap", "start": "00:00", "end": "24:00", "maxReplicas": 4}]
    bounds = effective_bounds(make_spec(schedules=both), MONDAY_0900_UTC)
    assert (bounds.minimum, bounds.maximum) == (8, 8)


def test_schedule_minimum_overrides_cooldown_and_step_limits() -> None:
    spec = make_spec(schedules=[OFFICE], policy={"scaleUp": {"cooldown": "1h", "selectPolicy": "Disabled"}})
    run = Run(spec, current=1, memory=ScalingMemory(last_scale_up=MONDAY_0900_UTC - 10))
    assert run.tick(MONDAY_0900_UTC, 0).desired == 5


# ---------------------------------------------------------------------------------------------- failures


def test_failed_poll_holds_then_falls_back() -> None:
    run = Run(make_spec(fallback={"failureThreshold": 3}), current=6)
    first, second, third = (run.tick(t, None) for t in (0, 10, 20))
    assert [d.reason for d in (first, second, third)] == [Reason.POLL_FAILED, Reason.POLL_FAILED, Reason.FALLBACK]
    assert [d.desired for d in (first, second, third)] == [6, 6, 6]
    assert "ServerBusy: throttled" in first.message and "fallback after 2 more" in first.message
    assert third.fallback and run.memory.consecutive_failures == 3
    recovered = run.tick(30, 30)
    assert recovered.memory.consecutive_failures == 0 and not recovered.fallback


def test_fixed_fallback_raises_but_never_lowers() -> None:
    spec = make_spec(fallback={"failureThreshold": 1, "mode": "fixed", "replicas": 4})
    assert Run(spec, current=2).tick(0, None).desired == 4
    assert Run(spec, current=9).tick(0, None).desired == 9


def test_failed_poll_never_scales_down_even_after_the_delay() -> None:
    run = Run(make_spec(policy={"scaleToZeroDelay": 0, **NO_WINDOWS}), current=5)
    assert run.tick(0, None).desired == 5


def test_partial_failure_may_scale_up_but_not_down() -> None:
    spec = make_spec(queues=2)
    up = Run(spec, current=2).tick(0, 1000, None)
    assert (up.desired, up.reason) == (200, Reason.SCALED_UP)
    assert "on the sources that answered" in up.message
    held = Run(spec, current=50).tick(0, 0, None)
    assert (held.desired, held.reason) == (50, Reason.POLL_FAILED)


def test_failed_poll_still_obeys_a_lowered_maximum() -> None:
    assert Run(make_spec(maxReplicas=3), current=7).tick(0, None).desired == 3


def test_paused_rule_keeps_current_and_memory() -> None:
    memory = ScalingMemory(consecutive_failures=2)
    d = decide(make_spec(), seen(0, 1000), [], 3, memory, 0, paused=True)
    assert (d.desired, d.reason, d.memory) == (3, Reason.PAUSED, memory)


# ---------------------------------------------------------------------------------------------- memory


def test_memory_round_trips_through_json() -> None:
    memory = ScalingMemory(
        recommendations=(Recommendation(1.5, 3), Recommendation(12.25, 7)),
        scale_events=(ScaleEvent(2.0, 1, 3),),
        last_scale_up=2.0, last_scale_down=None, inactive_since=99.5, consecutive_failures=2,
    )
    assert ScalingMemory.from_json(json.loads(json.dumps(memory.to_json()))) == memory


@pytest.mark.parametrize(
    "bad",
    [[], {"recommendations": [[1, 2, 3]]}, {"scaleEvents": "x"}, {"consecutiveFailures": -1},
     {"lastScaleUp": "yesterday"}, {"recommendations": [[1, 2.5]]}],
)
def test_memory_rejects_what_it_did_not_write(bad: object) -> None:
    with pytest.raises(ValueError, match="memory"):
        ScalingMemory.from_json(bad)


def test_memory_is_unchanged_while_nothing_happens() -> None:
    # Status is written only when something changed: a steady queue must leave the memory alone.
    run = Run(make_spec(), current=10)
    run.tick(0, 50)
    before = run.memory
    for t in range(10, 200, 10):
        run.tick(t, 50)
    assert run.memory == before


def test_old_recommendations_and_events_are_forgotten() -> None:
    spec = make_spec(policy={"scaleDown": {"stabilizationWindow": "60s",
                                           "policies": [{"type": "Pods", "value": 100, "period": "30s"}]}})
    run = Run(spec, current=1)
    for t, c in ((0, 100), (10, 50), (20, 10)):
        run.tick(t, c)
    run.tick(500, 10)  # scales 20 -> 2: one event
    assert len(run.memory.scale_events) == 1
    run.tick(600, 10)
    assert [r.replicas for r in run.memory.recommendations] == [2]
    assert len(run.memory.scale_events) == 0


def test_same_inputs_same_decision() -> None:
    spec = make_spec(policy={"lookahead": "20s"})
    history = [seen(0, 10), seen(10, 40)]
    memory = ScalingMemory(recommendations=(Recommendation(0, 2),))
    first = decide(spec, seen(20, 90), history, 2, memory, 20)
    assert decide(spec, seen(20, 90), history, 2, memory, 20) == first


def test_reading_notes_do_not_change_counts() -> None:
    spec = make_spec()
    d = decide(spec, seen(0, 40), [], 1, ScalingMemory(), 0)
    noted = decide(
        spec,
        type(seen(0))(time=0, readings=(SourceReading.of(40, note="visible count unknown"),)),
        [], 1, ScalingMemory(), 0,
    )
    assert d == noted
