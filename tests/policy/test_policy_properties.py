"""Invariants of decide(), checked on random rules and random sequences of polls (hypothesis)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.model.readings import Observation, ScalingMemory
from controller.model.rule import QueueScalerSpec
from controller.policy import decide
from tests.policy_helpers import MONDAY_0900_UTC, make_spec, seen

durations = st.integers(min_value=0, max_value=300)


@st.composite
def specs(draw: st.DrawFn) -> QueueScalerSpec:
    minimum = draw(st.integers(0, 5))
    maximum = draw(st.integers(max(1, minimum), 60))
    up_policies = draw(st.sampled_from([
        [],
        [{"type": "Pods", "value": draw(st.integers(1, 10)), "period": draw(st.integers(10, 120))}],
    ]))
    down_policies = draw(st.sampled_from([
        [],
        [{"type": "Percent", "value": draw(st.integers(1, 100)), "period": draw(st.integers(10, 120))}],
        [{"type": "Pods", "value": draw(st.integers(1, 10)), "period": draw(st.integers(10, 120))}],
    ]))
    policy: dict[str, Any] = {
        "targetPerReplica": draw(st.integers(1, 50)),
        "activationThreshold": draw(st.integers(0, 20)),
        "tolerance": draw(st.sampled_from([0, 0.05, 0.1, 0.3])),
        "lookahead": draw(st.sampled_from([0, 30])),
        "scaleToZeroDelay": draw(durations),
        "scaleUp": {"cooldown": draw(durations), "stabilizationWindow": draw(durations), "policies": up_policies},
        "scaleDown": {"cooldown": draw(durations), "stabilizationWindow": draw(durations),
                      "delay": draw(durations), "policies": down_policies},
    }
    mode = draw(st.sampled_from(["count", "throughput", "latency"]))
    if mode == "throughput":
        policy["throughputPerReplica"] = draw(st.sampled_from([0.5, 2, 10]))
    elif mode == "latency":
        policy["targetWaitSeconds"] = draw(st.sampled_from([10, 60, 600]))
        policy["serviceTime"] = draw(st.sampled_from([0.2, 2, 40]))
        policy["messagesPerReplica"] = draw(st.integers(1, 8))
        del policy["targetPerReplica"]
    fields: dict[str, Any] = {"minReplicas": minimum, "maxReplicas": maximum, "policy": policy}
    if draw(st.booleans()):
        fields["fallback"] = {"failureThreshold": draw(st.integers(1, 4)), "mode": "fixed",
                              "replicas": draw(st.integers(0, maximum))}
    schedule = draw(st.sampled_from([None, "raise", "cap"]))
    if schedule == "raise":
        fields["schedules"] = [{"name": "raise", "start": "00:00", "end": "24:00",
                                "minReplicas": draw(st.integers(0, maximum))}]
    elif schedule == "cap":
        fields["schedules"] = [{"name": "cap", "start": "00:00", "end": "24:00",
                                "maxReplicas": draw(st.integers(0, maximum))}]
    return make_spec(queues=draw(st.integers(1, 2)), **fields)


polls = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=90),  # seconds since the previous poll
        st.one_of(st.none(), st.integers(0, 2000)),  # a count, or a failed poll
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs(), sequence=polls, start=st.integers(0, 60), paused_at=st.one_of(st.none(), st.integers(0, 39)))
def test_invariants_hold_on_every_tick(
    spec: QueueScalerSpec, sequence: list[tuple[int, int | None]], start: int, paused_at: int | None
) -> None:
    now = MONDAY_0900_UTC
    current = start
    memory = ScalingMemory()
    history: list[Observation] = []
    applied: list[tuple[float, int, int]] = []
    for index, (step, count) in enumerate(sequence):
        now += step
        counts = [count] * len(spec.sources) if count is not None else [None] + [5] * (len(spec.sources) - 1)
        observation = seen(now, *counts)
        paused = index == paused_at
        decision = decide(spec, observation, history, current, memory, now, paused=paused)

        # Same inputs, same output.
        assert decide(spec, observation, history, current, memory, now, paused=paused) == decision
        # The memory survives a trip through JSON (it lives in the rule's status).
        encoded = json.loads(json.dumps(decision.memory.to_json()))
        assert ScalingMemory.from_json(encoded) == decision.memory

        desired, bounds = decision.desired, decision.bounds
        if paused:
            assert desired == current
        else:
            # Within [min, max] after schedules.
            assert bounds.minimum <= desired <= bounds.maximum
            assert spec.min_replicas <= bounds.minimum and bounds.maximum <= max(spec.max_replicas, bounds.minimum)
            # A failed poll never lowers the count (a lowered maximum is a constraint, not a decision).
            if observation.failed:
                assert desired >= min(current, bounds.maximum)
            # Never a scale-down inside the scale-down cooldown (counted from the last scale either way).
            last_scale = memory.last_scale
            if last_scale is not None and now - last_scale < spec.policy.scale_down.cooldown:
                assert desired >= min(current, bounds.maximum)
            # Constraints may raise past cooldowns and step limits: the minimum, and a fixed fallback.
            floor = max(current, bounds.minimum, (spec.fallback.replicas or 0) if decision.fallback else 0)
            # Never a scale-up inside the scale-up cooldown, unless a constraint demands it.
            if memory.last_scale_up is not None and now - memory.last_scale_up < spec.policy.scale_up.cooldown:
                assert desired <= floor
            # Step limits: no more added per period than the policy allows (the minimum may demand more).
            for step_policy in spec.policy.scale_up.policies:
                added = sum(b - a for t, a, b in applied if t > now - step_policy.period and b > a)
                removed = sum(a - b for t, a, b in applied if t > now - step_policy.period and b < a)
                period_start = current - added + removed
                assert desired <= max(period_start + step_policy.value, floor, 1)

        memory = decision.memory.with_scale(now, current, desired)
        if desired != current:
            applied.append((now, current, desired))
        current = desired
        history.append(observation)
