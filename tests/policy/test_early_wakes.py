"""Work the polls miss: a queue whose producer flushes between polls counts zero at every poll while its replica
works, so a rule goes to zero and finds the work gathered at its next poll. Where a cold start misses the objective,
one such early wake keeps one replica up for a day (docs/policy.md, *Going to zero*)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

import pytest

from benchmarks.policy_suite import our_rule
from controller import policy
from controller.model.readings import Reason, ScalingMemory
from controller.policy import EARLY_WAKE_WINDOW, early_wake_within, remember_early_wake, stays_awake
from controller.simulator.run import Metrics
from tests.policy_helpers import Run, make_spec
from tests.sim_helpers import fidelity_scenario, holdout_scenario, run_rule

# Half-second jobs eight to a pod under a 15 s objective: a cold start (a 10 s poll, a 10 s start-up) misses it.
CHATTY = {"targetWaitSeconds": 15, "serviceTime": "500ms", "messagesPerReplica": 8, "startupTime": "10s"}


def test_an_early_wake_is_work_counted_at_the_first_polls_after_going_to_zero() -> None:
    zero_at_100 = replace(ScalingMemory(), last_scale_down=100.0)
    # Within two 10 s polls (what `early_wake_within` gives a burst).
    assert remember_early_wake(zero_at_100, 110.0, 0, True, 20.0).early_wakes == (110.0,)
    assert remember_early_wake(zero_at_100, 120.0, 0, True, 20.0).early_wakes == (120.0,)
    # Later than two polls: the queue was empty for a while.
    assert remember_early_wake(zero_at_100, 130.0, 0, True, 20.0).early_wakes == ()
    # Not active, or replicas up, or work already seen at zero (a deferred wake): nothing new.
    assert remember_early_wake(zero_at_100, 110.0, 0, False, 20.0).early_wakes == ()
    assert remember_early_wake(zero_at_100, 110.0, 1, True, 20.0).early_wakes == ()
    assert remember_early_wake(replace(zero_at_100, pending_since=105.0), 110.0, 0, True,
                               20.0).early_wakes == ()
    # The last one is kept, and none older than a day.
    one = replace(zero_at_100, early_wakes=(50.0,))
    assert remember_early_wake(one, 110.0, 0, True, 20.0).early_wakes == (110.0,)
    assert remember_early_wake(one, 60.0, 3, False, 20.0).early_wakes == (50.0,)
    assert remember_early_wake(one, 50.0 + EARLY_WAKE_WINDOW, 3, False, 20.0).early_wakes == ()


def test_a_trickle_back_within_the_scale_to_zero_delay_of_going_to_zero_is_an_early_wake() -> None:
    # One message every two minutes on average: after a quiet five minutes the rule goes to zero, and the next
    # message comes a few minutes later. Staying up for another delay would have cost no more than the delay just
    # spent idle, and where a cold start misses the objective that wake made a message late.
    assert early_wake_within(make_spec(policy=CHATTY), 300.0, need=0.2) == 300.0
    zero_at_100 = replace(ScalingMemory(), last_scale_down=100.0)
    assert remember_early_wake(zero_at_100, 340.0, 0, True, 300.0).early_wakes == (340.0,)
    assert remember_early_wake(zero_at_100, 400.0, 0, True, 300.0).early_wakes == (400.0,)
    # A quiet stretch longer than the delay again (a night, a lull between batches) is not.
    assert remember_early_wake(zero_at_100, 410.0, 0, True, 300.0).early_wakes == ()
    # More than a replica's work is a burst, which the rule readies for where it recurs: two polls decide.
    assert early_wake_within(make_spec(policy=CHATTY), 300.0, need=5.0) == 20.0
    assert early_wake_within(make_spec(policy=CHATTY), 5.0, need=0.2) == 20.0


def test_one_early_wake_keeps_a_replica_only_where_a_cold_start_misses_the_objective() -> None:
    wakes = replace(ScalingMemory(), early_wakes=(50.0,))
    assert stays_awake(make_spec(policy=CHATTY), wakes)
    assert not stays_awake(make_spec(policy=CHATTY), replace(wakes, early_wakes=()))
    # A 60 s objective: a cold start fits, and a wake costs a start-up, not a late message.
    assert not stays_awake(make_spec(policy={**CHATTY, "targetWaitSeconds": 60}), wakes)
    # Count mode states no objective.
    assert not stays_awake(make_spec(policy={"targetPerReplica": 5}), wakes)


def test_a_rule_kept_awake_says_why_instead_of_going_to_zero() -> None:
    run = Run(make_spec(policy={**CHATTY, "scaleToZeroDelay": "30s"}), current=1)
    run.memory = replace(run.memory, early_wakes=(50.0,))
    for t in range(100, 200, 10):
        decision = run.tick(float(t), 0, ages=(0.0,))
    assert decision.desired == 1
    assert decision.reason == Reason.HELD_BY_STABILIZATION
    assert ("work was counted soon after going to zero within the last day (within two polls, or less than a "
            "replica's work within the scale-to-zero delay 30s)") in decision.message
    # Without the wakes the same polls go to zero.
    fresh = Run(make_spec(policy={**CHATTY, "scaleToZeroDelay": "30s"}), current=1)
    assert [fresh.tick(float(t), 0, ages=(0.0,)).desired for t in range(100, 200, 10)][-1] == 0


def test_memory_with_early_wakes_round_trips_through_json() -> None:
    memory = replace(ScalingMemory(), early_wakes=(50.5,))
    assert ScalingMemory.from_json(json.loads(json.dumps(memory.to_json()))) == memory
    with pytest.raises(ValueError, match="memory"):
        ScalingMemory.from_json({"earlyWakes": "often"})


def test_the_held_out_chatty_producer_meets_its_objective_once_its_early_wakes_keep_a_replica(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # holdout-chatty-producer: 60 messages flushed every 20 s at :03, :23, :43, worked off within 4 s, so every
    # 10 s poll counts zero. Before, the rule went to zero after each 5 minutes of empty polls and the next poll
    # found 120 waiting for a 10 s start-up: p99 30 s against 15 s.
    awake, before = _meets_only_with_it("holdout-chatty-producer", monkeypatch, "stays_awake", lambda *_, **__: False)
    assert awake.worker_seconds <= 1.1 * before.worker_seconds


def test_the_held_out_tiny_trickle_meets_its_objective_once_a_trickle_wake_keeps_a_replica(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # holdout-tiny-trickle: one request every two minutes (Poisson), 5 s jobs, 90 s start-ups, a 60 s objective.
    # With only two polls to call a wake early, the rule went to zero nine times in three hours and each wake made
    # a request wait a start-up: p99 124 s. A wake within the scale-to-zero delay keeps a replica after it.
    awake, _ = _meets_only_with_it("holdout-tiny-trickle", monkeypatch, "early_wake_within",
                                   lambda spec, *_: 2 * spec.polling_interval)
    # One replica throughout costs 86,400 worker-seconds: the rule now costs about that, no more.
    assert awake.worker_seconds <= 86400


def _meets_only_with_it(
    name: str, monkeypatch: pytest.MonkeyPatch, attribute: str, without: Callable[..., object]
) -> tuple[Metrics, Metrics]:
    """The held-out scenario NAME with the suite's rule as it is, and with controller.policy's `attribute` replaced
    by `without`: the objective met by the first and missed by the second."""
    scenario = holdout_scenario(name)
    rule = our_rule(scenario)
    kept = run_rule(scenario, rule).metrics
    monkeypatch.setattr(policy, attribute, without)
    before = run_rule(scenario, rule).metrics
    assert kept.wait_p99 <= scenario.slo_wait < before.wait_p99
    return kept, before


def test_the_live_fidelity_scenario_of_flushes_stays_awake_after_an_early_wake(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # benchmarks/scenarios/fidelity/fidelity-flush.yaml with its own rule: 20 messages flushed every 10 s from 2 s,
    # worked off within about 2 s, so the 5 s polls count zero; a scale-to-zero delay of 20 s. The rule wakes at
    # 10 s, goes to zero at 40 s, is woken at 50 s (an early wake), and then stays at one replica; without the early
    # wakes it goes to zero every 40 s.
    sc, rule = fidelity_scenario("flush")
    assert run_rule(sc, rule).scale_actions == [(10, 0, 1), (40, 1, 0), (50, 0, 1)]
    monkeypatch.setattr(policy, "stays_awake", lambda *_, **__: False)
    cycling = run_rule(sc, rule).scale_actions
    assert len(cycling) == 11 and cycling[-1] == (210, 0, 1)


def test_the_live_fidelity_scenario_of_a_trickle_stays_awake_after_a_wake_within_the_delay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # benchmarks/scenarios/fidelity/fidelity-trickle.yaml with its own rule: 2 messages a minute from 2 s, a 25 s
    # scale-to-zero delay, 5 s polls. The rule goes to zero at 45 s, and the drip at 62 s is counted 20 s after it,
    # later than two polls: a wake early only as a trickle's (within the delay). After it the rule stays at one
    # replica, and the later drips do not wait a cold start.
    sc, rule = fidelity_scenario("trickle")
    awake = run_rule(sc, rule)
    assert awake.scale_actions == [(10, 0, 1), (45, 1, 0), (70, 0, 1)]
    monkeypatch.setattr(policy, "early_wake_within", lambda spec, *_: 2 * spec.polling_interval)
    cycling = run_rule(sc, rule)
    assert len(cycling.scale_actions) == 14
    assert cycling.wait_histogram == {13: 14}  # every drip waits its wake's poll, the deferral and a start-up
    assert awake.wait_histogram == {13: 4, 0: 10}

