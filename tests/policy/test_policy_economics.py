"""Issue 18, policy economics: the start-up time the policy assumes, and the scale-to-zero delay derived from it.

Expectations are computed by hand from docs/policy.md ("Start-up time" and "Going to zero").
"""

from __future__ import annotations

import pytest

from controller.model.fields import SpecError
from controller.model.readings import Reason
from controller.policy import decide, scale_to_zero_delay, sizing, startup_time
from tests.policy_helpers import Run, make_spec, seen

# A message takes 2 s; a new message may wait a minute; polls every 10 s (the default).
RATE = {"targetWaitSeconds": 60, "serviceTime": "2s", "scaleDown": {"delay": 0}}


def test_the_rules_startup_time_wins_over_the_measured_one_and_the_lookahead() -> None:
    stated = make_spec(policy={**RATE, "startupTime": "45s", "lookahead": "20s"})
    assert startup_time(stated, measured=12.0) == 45.0
    unstated = make_spec(policy={**RATE, "lookahead": "20s"})
    assert startup_time(unstated, measured=12.0) == 12.0  # the operator's measurement, replicas asked -> ready
    assert startup_time(unstated) == 20.0
    assert startup_time(make_spec(policy=RATE)) == 30.0  # nothing known: a typical start-up


def test_rate_mode_projects_growth_over_the_startup_time() -> None:
    # The lookahead exists to size for what new pods find when they are ready: without one, the start-up time.
    assert sizing(make_spec(policy={**RATE, "startupTime": "90s"})).lookahead == 90.0
    assert sizing(make_spec(policy=RATE), measured_startup=75.0).lookahead == 75.0
    assert sizing(make_spec(policy={**RATE, "lookahead": "5s", "startupTime": "90s"})).lookahead == 5.0


def test_startup_time_is_parsed_as_a_duration_and_checked() -> None:
    assert make_spec(policy={**RATE, "startupTime": "2m"}).policy.startup_time == 120.0
    with pytest.raises(SpecError) as caught:
        make_spec(policy={**RATE, "startupTime": "-5s"})
    assert "policy.startupTime" in str(caught.value)


def test_scale_to_zero_waits_only_the_startup_when_a_cold_start_still_meets_the_wait() -> None:
    # 5 s poll + 18 s start-up + 2 s service = 25 s: within what the 30 s drain time (half of targetWaitSeconds)
    # leaves of the 60 s objective. A replica woken from zero meets the wait, so an idle one is kept only as long
    # as a restart costs (18 s), not five minutes.
    spec = make_spec(pollingInterval=5, policy={**RATE, "startupTime": "18s"})
    assert scale_to_zero_delay(spec) == 18.0
    run = Run(spec, current=1)
    run.tick(0, 0)
    pending = run.tick(10, 0)
    assert (pending.desired, pending.reason) == (1, Reason.PENDING_SCALE_TO_ZERO)
    assert "scaling to zero in 8s" in pending.message
    gone = run.tick(20, 0)
    assert (gone.desired, gone.reason) == (0, Reason.SCALED_TO_ZERO)
    assert "inactive for 18s" in gone.message


def test_the_derived_delay_is_at_least_two_polls() -> None:
    # A 5 s start-up: one empty poll between two messages must not stop the replica.
    assert scale_to_zero_delay(make_spec(policy={**RATE, "startupTime": "5s"})) == 20.0


def test_scale_to_zero_keeps_five_minutes_when_a_cold_start_would_miss_the_wait() -> None:
    # 10 s poll + 20 s start-up + 2 s service = 32 s > 60 s - 30 s drain time: a warm replica is what meets the
    # wait once the backlog behind the first message has drained.
    assert scale_to_zero_delay(make_spec(policy={**RATE, "startupTime": "20s"})) == 300.0
    # The same from what the operator measured, when the rule states no start-up time.
    assert scale_to_zero_delay(make_spec(policy=RATE), measured_startup=20.0) == 300.0
    assert scale_to_zero_delay(make_spec(policy=RATE), measured_startup=15.0) == 20.0
    # A longer drain time leaves less of the objective to a cold start.
    assert scale_to_zero_delay(make_spec(policy={**RATE, "drainTime": "50s"}), measured_startup=15.0) == 300.0


def test_decide_uses_the_measured_startup_for_the_scale_to_zero_delay() -> None:
    spec = make_spec(policy=RATE)
    memory = Run(spec, current=1).tick(0, 0).memory  # inactive since 0
    slow = decide(spec, seen(40, 0), [seen(0, 0)], 1, memory, 40.0, measured_startup=25.0)
    fast = decide(spec, seen(40, 0), [seen(0, 0)], 1, memory, 40.0, measured_startup=15.0)
    assert (slow.desired, slow.reason) == (1, Reason.PENDING_SCALE_TO_ZERO)
    assert (fast.desired, fast.reason) == (0, Reason.SCALED_TO_ZERO)


def test_count_mode_and_a_stated_delay_keep_their_meaning() -> None:
    # targetPerReplica rules are KEDA-like: no wait objective, the default five minutes (KEDA's cooldownPeriod
    # is its own, but nothing is derived for a rule that states no latency).
    assert scale_to_zero_delay(make_spec(policy={"targetPerReplica": 5, "startupTime": "10s"})) == 300.0
    assert scale_to_zero_delay(make_spec(policy={**RATE, "startupTime": "5s", "scaleToZeroDelay": "7m"})) == 420.0
    assert scale_to_zero_delay(make_spec(policy={**RATE, "startupTime": "5s", "scaleToZeroDelay": 0})) == 0.0
