"""Issue 18, a burst the cold start cannot meet: bursts that recur at a steady period are expected again, and
replicas are readied before them (docs/policy.md, *Bursts that recur*). Expectations are worked by hand."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

import controller.policy as policy
from benchmarks.fidelity import SCENARIOS, rule_for
from benchmarks.policy_suite import our_rule
from controller.commands.simulate import load_rules
from controller.model import recurring
from controller.model.fields import SpecError
from controller.model.readings import Reason, ScalingMemory
from controller.model.rule import RecurringBursts
from controller.simulator.adapters import RuleAutoscaler
from controller.simulator.run import Contender, Metrics, simulate
from controller.simulator.scenario import load_scenario
from tests.policy_helpers import Run, make_spec, seen
from tests.sim_helpers import holdout_scenario, run_rule

# Eight slices at once per pod, half a second each (16 a second a replica); a slice may wait 30 s; a pod starts
# in 20 s. A cold start is a poll, a start-up and a slice, 30.5 s: more than the objective.
SLOW_COLD = {"targetWaitSeconds": 30, "serviceTime": "500ms", "messagesPerReplica": 8, "startupTime": "20s"}
SEVEN_MINUTES = 420.0


def test_a_burst_is_a_run_of_polls_each_rising_by_the_threshold() -> None:
    bursts = recurring.remember((), 100.0, 5.0, None, threshold=88.0)
    assert bursts == ()  # a trickle is no burst
    bursts = recurring.remember(bursts, 110.0, 300.0, 5.0, threshold=88.0)
    bursts = recurring.remember(bursts, 120.0, 250.0, 300.0, threshold=88.0)  # still rising: the same burst
    assert bursts == ((110.0, 550.0),)
    bursts = recurring.remember(bursts, 130.0, -400.0, 250.0, threshold=88.0)
    bursts = recurring.remember(bursts, 140.0, 90.0, -400.0, threshold=88.0)  # fell between: a new one
    assert bursts == ((110.0, 550.0), (140.0, 90.0))


def test_only_the_newest_bursts_are_kept() -> None:
    bursts: tuple[recurring.Burst, ...] = ()
    for i in range(recurring.BURSTS_KEPT + 5):
        bursts = recurring.remember(bursts, 1000.0 * i, 100.0, None, threshold=10.0)
    assert len(bursts) == recurring.BURSTS_KEPT
    assert bursts[0][0] == 5000.0


def test_three_beats_at_one_period_expect_a_fourth_and_two_do_not() -> None:
    two = ((100.0, 2400.0), (520.0, 2300.0))
    assert recurring.expected(two, 600.0, tolerance=10.0) == []
    three = (*two, (945.0, 2100.0))  # five seconds off the beat: within a poll
    [burst] = recurring.expected(three, 1000.0, tolerance=10.0)
    assert (burst.at, burst.period, burst.messages) == (1370.0, 425.0, 2400.0)


def test_a_series_whose_next_beat_passed_without_a_burst_has_ended() -> None:
    three = ((100.0, 2400.0), (520.0, 2400.0), (940.0, 2400.0))
    assert [b.at for b in recurring.expected(three, 1370.0, tolerance=10.0)] == [1360.0]
    assert recurring.expected(three, 1371.0, tolerance=10.0) == []


def test_two_series_at_different_periods_are_both_expected() -> None:
    # Slices every 7 minutes from minute 2, a large mosaic every 23 minutes from minute 11 (photo-mosaic).
    times = sorted([(120.0 + 420.0 * k, 2400.0) for k in range(8)] + [(660.0 + 1380.0 * k, 6000.0) for k in range(3)])
    expected = recurring.expected(tuple(times), 3400.0, tolerance=10.0)
    by_period = {b.period: b for b in expected}
    assert by_period[420.0].at == 3480.0 and by_period[420.0].messages == 2400.0
    assert by_period[1380.0].at == 4800.0 and by_period[1380.0].messages == 6000.0


def _bursts_every_seven_minutes(run: Run, beats: int, until: float) -> None:
    burst_at = [100.0 + SEVEN_MINUTES * k for k in range(beats)]
    t = 0.0
    while t <= until:
        run.tick(t, 2400 if t in burst_at else 0)
        t += 10.0


def test_replicas_are_readied_a_startup_and_a_poll_before_the_expected_burst() -> None:
    spec = make_spec(policy=SLOW_COLD)
    run = Run(spec)
    _bursts_every_seven_minutes(run, beats=3, until=1320.0)
    assert [t for t, _ in run.memory.bursts] == [100.0, 520.0, 940.0]
    assert run.current == 0  # gone to zero after the third burst
    # The fourth beat is due at 1360 s: from 1330 s (20 s start-up and a 10 s poll before), 2400 slices cleared
    # within 30 s at 16 a second a replica ask for 5 replicas.
    ready = run.tick(1330.0, 0)
    assert ready.desired == 5
    assert "readying 5 replicas for a burst of about 2400 expected in 30s (seen every 7m)" in ready.message
    for t in (1340.0, 1350.0, 1360.0, 1370.0):
        held = run.tick(t, 0)
        assert held.desired == 5
        # Held for the burst, not on the way to zero (the count is 0, the rule inactive).
        assert held.reason is Reason.STEADY and held.message.endswith("keeping 5 ready for it"), held.message
    # No burst came: a poll past the beat the series has ended and nothing is readied any more.
    after = run.tick(1380.0, 0)
    assert "readying" not in after.message


def test_a_rule_whose_cold_start_meets_the_objective_remembers_no_burst() -> None:
    # 60 s to wait: a cold start (30.5 s) meets it, so reacting is enough and nothing is kept ready.
    spec = make_spec(policy={**SLOW_COLD, "targetWaitSeconds": 60})
    assert not policy.readies_bursts(spec)
    run = Run(spec)
    _bursts_every_seven_minutes(run, beats=4, until=1400.0)
    assert run.memory.bursts == ()
    assert all("readying" not in d.message for d in run.decisions)


def test_a_rule_told_to_ignore_recurring_bursts_only_reacts() -> None:
    spec = make_spec(policy={**SLOW_COLD, "recurringBursts": "ignore"})
    assert not policy.readies_bursts(spec)
    run = Run(spec)
    _bursts_every_seven_minutes(run, beats=3, until=1320.0)
    assert run.memory.bursts == ()
    assert run.tick(1330.0, 0).desired == 0


def test_an_unknown_recurring_bursts_action_names_the_field() -> None:
    with pytest.raises(SpecError) as caught:
        make_spec(policy={**SLOW_COLD, "recurringBursts": "predict"})
    assert "policy.recurringBursts" in str(caught.value) and "ignore" in str(caught.value)


def test_the_bursts_survive_a_restart_in_the_memory() -> None:
    memory = ScalingMemory(bursts=((100.0, 2400.0), (520.0, 2300.5)))
    assert ScalingMemory.from_json(memory.to_json()) == memory
    with pytest.raises(ValueError, match="memory is not valid"):
        ScalingMemory.from_json({"bursts": [[100.0]]})


def _photo_mosaic(bursts: RecurringBursts) -> Metrics:
    scenario = load_scenario("photo-mosaic")
    rule = our_rule(scenario)
    rule = replace(rule, spec=replace(rule.spec, policy=replace(rule.spec.policy, recurring_bursts=bursts)))
    return simulate(scenario, [Contender("q", lambda w: RuleAutoscaler("q", rule, w, scenario.start_epoch))])[0].metrics


def test_photo_mosaic_costs_less_with_its_bursts_readied_and_waits_no_longer() -> None:
    # Its slices come every 7 and every 23 minutes; a cold start is 0.5 s too slow for the 30 s objective.
    readied = _photo_mosaic("ready")
    reacting = _photo_mosaic("ignore")
    # 87,530 against 103,612 worker-seconds (0.84x) while every poll of a start-up asked again for the growth its
    # replicas on their way would take; 86,181 against 90,473 (0.95x) since: reacting alone asks less meanwhile.
    assert readied.worker_seconds <= 0.97 * reacting.worker_seconds
    assert readied.wait_p99 <= reacting.wait_p99


def test_the_live_fidelity_scenario_has_replicas_ready_from_its_fourth_burst() -> None:
    # benchmarks/scenarios/fidelity/fidelity-recurring.yaml, run live by benchmarks/fidelity.py with the rule of its
    # own: a burst of 60 every minute from 10 s; a cold start (5 s + 10 s + 0.5 s) misses the 12 s objective.
    scenario_file = SCENARIOS / "fidelity-recurring.yaml"
    assert rule_for(scenario_file) == SCENARIOS / "rule-recurring.yaml"
    assert rule_for(SCENARIOS / "fidelity-burst-drain.yaml") == SCENARIOS / "rule.yaml"
    scenario = load_scenario(str(scenario_file))
    [rule] = load_rules([str(rule_for(scenario_file))])

    def ready_at_bursts(bursts: RecurringBursts) -> list[int]:
        told = replace(rule, spec=replace(rule.spec, policy=replace(rule.spec.policy, recurring_bursts=bursts)))
        result = simulate(scenario, [Contender("q", lambda w: RuleAutoscaler("q", told, w, scenario.start_epoch))],
                          record_timeline=True)[0]
        ready = {point.t: point.ready_replicas for point in result.timeline}
        return [ready[t] for t in (10, 70, 130, 190, 250, 310)]

    # Three bursts seen, the next three readied for: ceil(60 / (2 a second x 12 s)) = 3 replicas, ready when the
    # burst lands. Reacting only, the trickle's one replica is all there is.
    assert ready_at_bursts("ready") == [0, 1, 1, 3, 3, 3]
    assert ready_at_bursts("ignore") == [0, 1, 1, 1, 1, 1]


# Image tagging (holdout-image-ai's rule): 8 s jobs thirty-two to a pod (4 a second a replica) under a 5 s
# objective on pods a minute to start; a replica is sized for 32 + 4 x 2.5 = 42 messages.
IMAGE_AI = {"targetWaitSeconds": 5, "serviceTime": "8s", "messagesPerReplica": 32, "startupTime": "1m"}


def _rise(current: int, rise: float) -> tuple[recurring.Burst, ...]:
    spec = make_spec(policy=IMAGE_AI, maxReplicas=20)
    history = [seen(0.0, 280), seen(10.0, 280)]
    return policy.remember_burst(spec, 280 + rise, history, ScalingMemory(), 20.0, current=current).bursts


def test_a_rise_within_chance_of_the_replicas_completions_is_no_burst() -> None:
    # 9 replicas complete up to 9 x 4 x 10 = 360 a poll: with as many arriving, the count swings by about
    # sqrt(720) = 27 from poll to poll, and a rise must pass 2 x 27 = 54, not only a replica's 42.
    assert _rise(9, 50.0) == ()
    assert _rise(9, 250.0) == ((20.0, 250.0),)
    # With no replica completing, the same rise is no chance swing of completions: a burst.
    assert _rise(0, 50.0) == ((20.0, 50.0),)


def test_image_ai_readies_little_for_chance_rises(monkeypatch: pytest.MonkeyPatch) -> None:
    # Its three bursts of 500 come 1 h 45 min apart, too few for a series within its six hours; the series found
    # before the chance guard were the count's swings, readied for with all 20 replicas at 99 polls (45 since each
    # simulated message draws its own service time, which narrowed the swings). With the guard, coincidences
    # of rises just past it on the suite's seed: one series readied for at 9 polls, and two at 18 polls since its
    # 8 s jobs, longer than its 2.5 s drain time, are sized a slot each (policy.backlog_per_replica, 2026-11-30),
    # against 552 polls and 84 series without the guard. Since then the guard no longer saves worker-seconds here
    # (232,790 against 227,410 without it: readying ahead of chance rises costs less than the slot each it saves),
    # so what is checked is what it is for: it readies for the bursts that recur, not for the count's swings.
    scenario = holdout_scenario("holdout-image-ai")
    rule = our_rule(scenario)
    readying = policy.ready_for_burst
    readied: list[float] = []

    def counted(*args: Any, **kwargs: Any) -> tuple[int, recurring.ExpectedBurst] | None:
        ready = readying(*args, **kwargs)
        if ready is not None:
            readied.append(ready[1].at)
        return ready

    monkeypatch.setattr(policy, "ready_for_burst", counted)
    guarded = run_rule(scenario, rule).metrics
    once = list(readied)
    assert len(set(once)) <= 2 and len(once) <= 20
    readied.clear()
    monkeypatch.setattr(policy, "CHANCE", 0.0)
    unguarded = run_rule(scenario, rule).metrics
    assert len(readied) > 20 * len(once) and len(set(readied)) > 20 * len(set(once))
    assert guarded.wait_p99 <= scenario.slo_wait and unguarded.wait_p99 <= scenario.slo_wait
