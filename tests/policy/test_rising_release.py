"""A release where a cold start misses the objective keeps what the rising count will fill before a replica could
be back (controller/policy.py, `rising_keep`; docs/policy.md, *Releasing capacity*)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from benchmarks.policy_suite import our_rule
from controller import policy
from controller.model.readings import Reason
from tests.policy_helpers import Run, make_spec
from tests.sim_helpers import holdout_scenario, run_rule

# 400 ms sends, 64 to a pod, 45 s start-ups: a cold start (a 10 s poll, the start-up) takes 55 s.
SENDS: dict[str, Any] = {"serviceTime": "400ms", "messagesPerReplica": 64, "startupTime": "45s",
                         "targetWaitSeconds": 10}


def ramp(run: Run, until: int = 160) -> list[int]:
    """A count in flight rising 0.8 a second from 20 (two replicas' slots, 128, until about 135 s) on 3 replicas:
    unneeded for the 2-minute delay at 120 s, when the count (116) will fill the third replica's slots within a
    cold start."""
    return [run.tick(float(t), int(20 + 0.8 * t), ages=(0.0,)).desired for t in range(0, until, 10)]


def test_a_release_into_a_rising_count_keeps_what_it_will_fill_where_a_cold_start_misses_the_objective() -> None:
    held = Run(make_spec(policy=SENDS), current=3)
    assert ramp(held)[12:] == [3, 3, 3, 3]
    at_release = held.decisions[12]
    assert at_release.reason == Reason.HELD_BY_STABILIZATION
    assert ("the count is rising, and a replica released now could not be back within the objective (a cold start "
            "takes 55s): keeping 3 (recommended 2)") in at_release.message
    # A 60 s objective: a cold start fits, a replica released too soon comes back in time, and the release goes.
    fits = Run(make_spec(policy={**SENDS, "targetWaitSeconds": 60}), current=3)
    assert ramp(fits)[12:] == [2, 2, 2, 2]
    # A flat count releases as before.
    flat = Run(make_spec(policy=SENDS), current=3)
    assert [flat.tick(float(t), 100, ages=(0.0,)).desired for t in range(0, 160, 10)][12:] == [2, 2, 2, 2]


def test_a_partial_release_says_it_kept_what_the_rise_will_fill() -> None:
    run = Run(make_spec(policy=SENDS), current=5)
    assert ramp(run, 130)[12] == 3
    decision = run.decisions[12]
    assert decision.reason == Reason.SCALED_DOWN
    assert "scaled down 5 -> 3, not lower (recommended 2): the count is rising" in decision.message


def test_the_held_out_sms_gateway_keeps_its_swing_capacity_for_fewer_worker_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # holdout-sms-gateway's first hour: sends swinging 100 to 400 a second every three minutes on pods 45 s to
    # start. Before, capacity unneeded for the 2-minute delay went at the trough's end as the next rise began, and
    # the peak waited for a replica: 3 -> 2 -> 4 every cycle.
    scenario = replace(holdout_scenario("holdout-sms-gateway"), duration=3600.0)
    rule = our_rule(scenario)
    held = run_rule(scenario, rule).metrics
    monkeypatch.setattr(policy, "rising_keep", lambda *_, **__: None)
    before = run_rule(scenario, rule).metrics
    assert held.direction_reversals * 3 < before.direction_reversals
    assert held.worker_seconds < before.worker_seconds
    assert held.wait_p99 <= before.wait_p99
