"""Source outages in the simulator: a queue's polls fail for a window, and each policy's fallback is exercised.

KEDA's side is transcribed from kedacore/keda: pkg/fallback/fallback.go (GetMetricsWithFallback, doFallback) and
its fallback_test.go cases, pkg/scaling/executor/scale_scaledobjects.go (RequestScale with isError), and the HPA's
kubernetes/kubernetes pkg/controller/podautoscaler/horizontal.go computeReplicasForMetrics (an invalid metric).
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from controller.model.fields import SpecError
from controller.model.rule import QueueScaler
from controller.simulator.adapters import SimulatedSource, VirtualClock
from controller.simulator.keda import EmulatedScaledObject, KedaAutoscaler, parse_scaled_object
from controller.simulator.run import Contender, RunResult, rule_contender, simulate
from controller.simulator.scenario import Outage, QueueParams, Workers
from controller.simulator.world import World
from tests.policy_helpers import source
from tests.sim_helpers import FakeWorld, parse_rule, scenario

OUTAGE = [{"start": 600, "end": 1200}]


def outage_scenario(outages: list[dict[str, Any]] | None = None, **overrides: Any) -> Any:
    return scenario(
        duration=1800,
        workers={"startupDelay": 10, "serviceTime": 2, "concurrency": 1, "maxReplicas": 50, "initialReplicas": 4},
        arrivals=[{"type": "constant", "rate": 2}],
        outages=OUTAGE if outages is None else outages,
        **overrides,
    )


def rule(fallback: dict[str, Any] | None = None) -> QueueScaler:
    return parse_rule("orders", minReplicas=1, maxReplicas=50, pollingInterval=10, sources=[source("orders")],
                      policy={"targetPerReplica": 5}, **({"fallback": fallback} if fallback else {}))


def run_rule(sc: Any, fallback: dict[str, Any] | None = None) -> RunResult:
    return simulate(sc, [rule_contender("rule", rule(fallback), sc.start_epoch)])[0]


def keda_object(spec: dict[str, Any] | None = None, queue_length: str = "10") -> EmulatedScaledObject:
    return parse_scaled_object({
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "orders"},
        "spec": {"scaleTargetRef": {"name": "worker"}, "minReplicaCount": 1,
                 "triggers": [{"type": "azure-queue", "metadata": {"queueName": "orders",
                                                                   "queueLength": queue_length}}],
                 **(spec or {})},
    })


def run_keda(sc: Any, so: EmulatedScaledObject) -> RunResult:
    return simulate(sc, [Contender("keda", lambda w: KedaAutoscaler("keda", so, w))])[0]


# ------------------------------------------------------------------------------------------------------------------
# The scenario format


def test_an_outage_window_is_read_with_its_failure_and_code() -> None:
    sc = outage_scenario([{"start": "10m", "end": "20m", "code": "AuthenticationFailed"},
                          {"start": "25m", "end": "26m", "failure": "timeout"}])
    assert [o for _, o in sc.outages] == [Outage(600, 1200, "error", "AuthenticationFailed"),
                                          Outage(1500, 1560, "timeout")]


@pytest.mark.parametrize(("outages", "field", "words"), [
    ([{"start": 600, "end": 500}], "outages[0].end", "must be after start"),
    ([{"start": 600}], "outages[0].end", "is required"),
    ([{"start": 100, "end": 300}, {"start": 200, "end": 400}], "outages", "windows overlap"),
    ([{"start": 100, "end": 300, "failure": "timeout", "code": "X"}], "outages[0].code", "applies only"),
    ([{"start": 100, "end": 300, "failure": "crash"}], "outages[0].failure", ""),
    ([{"start": 5000, "end": 6000}], "outages[0].start", "before the end of the scenario"),
])
def test_a_bad_outage_is_refused_naming_its_field(outages: list[dict[str, Any]], field: str, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        outage_scenario(outages)
    assert any(e.path == field and words in e.message for e in caught.value.errors), caught.value.errors


def test_a_simulated_poll_fails_during_the_window_as_the_reconciler_reports_errors_and_timeouts() -> None:
    world = World(QueueParams(), Workers(), [1.0], 1)
    world.outages = (Outage(100, 200, "error", "ServerBusy"), Outage(300, 400, "timeout"))
    clock = VirtualClock(0.0)
    source = SimulatedSource(rule().spec.sources[0], world, clock)
    world.put(0, 7)

    def poll_at(t: float) -> Any:
        clock.t = t
        return asyncio.run(source.poll(10.0))

    assert poll_at(99).count == 7 and poll_at(200).count == 7
    busy = poll_at(100)
    assert busy.count is None and busy.error is not None and busy.error.code == "ServerBusy"
    timeout = poll_at(399)
    # controller/reconciler.py _poll_one: what a poll that outlasts its budget reads as.
    assert timeout.error is not None and timeout.error.code == "Timeout"
    assert timeout.error.message == "no answer from queue 'orders' within 10s"


# ------------------------------------------------------------------------------------------------------------------
# Our fallback (docs/policy.md "Fallback"; controller/policy.py _on_failure)


def test_our_rule_holds_its_replicas_through_an_outage_by_default() -> None:
    result = run_rule(outage_scenario())
    (outage,) = result.metrics.outages
    assert outage.replicas_min == outage.replicas_max == outage.replicas_at_start
    assert outage.first_scale is None
    start = outage_scenario().start_epoch
    during = [t for t in result.ticks if 600 <= t.t - start < 1200]
    assert len(during) == 60  # one tick every 10 s: none of them saw a count, none changed the replicas
    assert all(t.count is None and t.desired == t.current for t in during)
    after = [t for t in result.ticks if t.t - start >= 1200]
    assert after[0].count is not None


def test_our_fixed_fallback_raises_the_replicas_after_failure_threshold_failed_polls() -> None:
    result = run_rule(outage_scenario(), {"mode": "fixed", "replicas": 20, "failureThreshold": 3})
    (outage,) = result.metrics.outages
    assert outage.replicas_max == 20 and result.metrics.outage_replicas_max == 20
    # Polls at 600, 610, 620 fail: the third reaches the threshold and raises to 20.
    assert outage.first_scale == 20
    assert (620, outage.replicas_at_start, 20) in result.scale_actions


def test_a_timeout_outage_triggers_our_fallback_as_an_error_does() -> None:
    sc = outage_scenario([{"start": 600, "end": 1200, "failure": "timeout"}])
    result = run_rule(sc, {"mode": "fixed", "replicas": 20, "failureThreshold": 2})
    assert (610, result.metrics.outages[0].replicas_at_start, 20) in result.scale_actions


# ------------------------------------------------------------------------------------------------------------------
# KEDA's fallback: pkg/fallback/fallback_test.go, case by case (target 10 = createMetricSpec(10))


def keda_on(world: FakeWorld, spec: dict[str, Any] | None = None) -> KedaAutoscaler:
    return KedaAutoscaler("keda", keda_object(spec), cast(World, world))


class FailingWorld(FakeWorld):
    """A FakeWorld whose queue cannot be read for its first 10,000 seconds."""

    outages = (Outage(0, 10_000),)

    def outage_at(self, t: float) -> Outage | None:
        return self.outages[0] if self.outages[0].covers(t) else None


FALLBACK = {"fallback": {"failureThreshold": 3, "replicas": 10}}


def test_keda_bumps_the_number_of_failures_when_the_metrics_call_fails() -> None:
    """fallback_test.go "should bump the number of failures when metrics call fails": 0 -> 1, error passed on."""
    keda = keda_on(FakeWorld(0, 1), FALLBACK)
    assert keda.metric_with_fallback(0, None) == (None, False)
    assert keda.failures[0] == 1


def test_keda_returns_a_normalised_metric_when_failures_are_beyond_the_threshold() -> None:
    """fallback_test.go "should return a normalised metric when number of failures are beyond threshold": from 3
    failures at threshold 3, the 4th answers 10 replicas x target 10 = 100 (in milli-units here)."""
    keda = keda_on(FakeWorld(0, 5), FALLBACK)
    keda.failures[0] = 3
    assert keda.metric_with_fallback(0, None) == (100_000, True)
    assert keda.failures[0] == 4


def test_keda_resets_the_health_when_the_scaler_answers_again() -> None:
    """fallback_test.go "should reset the health status when scaler metrics are available when fallback is
    enabled": 5 failures, then an answer: the metric as is, and 0 failures."""
    keda = keda_on(FakeWorld(0, 1), FALLBACK)
    keda.failures[0] = 5
    assert keda.metric_with_fallback(0, 6_000) == (6_000, False)
    assert keda.failures[0] == 0


def test_keda_propagates_the_error_and_counts_nothing_without_a_fallback() -> None:
    """fallback_test.go "should propagate the error when fallback is disabled"."""
    keda = keda_on(FakeWorld(0, 1))
    for _ in range(10):
        assert keda.metric_with_fallback(0, None) == (None, False)
    assert keda.failures[0] == 0


@pytest.mark.parametrize(("case", "behavior", "current", "expected"), [
    ("should use fallback replicas when current replicas is lower when behavior is 'currentReplicasIfHigher'",
     "currentReplicasIfHigher", 4, 100),
    ("should use current replicas when behavior is 'currentReplicas'", "currentReplicas", 6, 60),
    ("should ignore current replicas when behavior is 'static'", "static", 15, 100),
    ("(doFallback) currentReplicasIfLower takes the current count when it is lower", "currentReplicasIfLower", 4, 40),
])
def test_keda_fallback_behaviors(case: str, behavior: str, current: int, expected: int) -> None:
    """fallback_test.go `case` (doFallback's switch on fallback.behavior)."""
    keda = keda_on(FakeWorld(0, current), {"fallback": {"failureThreshold": 3, "replicas": 10, "behavior": behavior}})
    keda.failures[0] = 3
    assert keda.metric_with_fallback(0, None) == (expected * 1000, True), case


def test_keda_refuses_a_fallback_without_its_required_fields() -> None:
    """apis/keda/v1alpha1 Fallback: failureThreshold and replicas are int32 without omitempty (required in the
    CRD), minimum 0; behavior is an enum."""
    with pytest.raises(SpecError) as caught:
        keda_object({"fallback": {"behavior": "sometimes"}})
    paths = {e.path for e in caught.value.errors}
    assert {"spec.fallback.failureThreshold", "spec.fallback.replicas", "spec.fallback.behavior"} <= paths


def test_keda_does_not_scale_to_zero_while_a_trigger_fails_and_a_fallback_is_set() -> None:
    """scale_scaledobjects.go RequestScale: inactive with isError and fallback.replicas != 0: no scale to zero
    (the HPA brings the fallback); with fallback.replicas 0 the scale to zero goes ahead after the cooldown."""
    world = FailingWorld(0, 3)
    keda = keda_on(world, {"minReplicaCount": 0, "cooldownPeriod": 0, **FALLBACK})
    keda.keda_poll(0)
    assert world.desired == 3
    zero = keda_on(world, {"minReplicaCount": 0, "cooldownPeriod": 0,
                           "fallback": {"failureThreshold": 3, "replicas": 0}})
    zero.keda_poll(0)
    assert world.desired == 0


def test_the_hpa_keeps_the_replicas_while_its_only_metric_fails() -> None:
    """horizontal.go computeReplicasForMetrics: every metric invalid -> an error, no scale, no recommendation."""
    world = FailingWorld(0, 7)
    keda = keda_on(world)
    for t in range(0, 600, 15):
        keda.hpa_sync(t)
    assert world.desired == 7 and world.changes == []


def test_keda_holds_through_an_outage_without_a_fallback() -> None:
    result = run_keda(outage_scenario(), keda_object())
    (outage,) = result.metrics.outages
    assert outage.replicas_min == outage.replicas_max == outage.replicas_at_start
    assert outage.first_scale is None


def test_keda_goes_to_the_fallback_replicas_once_failures_exceed_the_threshold() -> None:
    """Each KEDA poll (every 30 s) and each HPA read (every 15 s) counts a failure; from 600 s: HPA 600 (KEDA's
    poll at 600 first: 1, then the HPA: 2), HPA 615 (3), poll 630 (4 > 3: fallback) and the HPA at 630 scales."""
    result = run_keda(outage_scenario(), keda_object(FALLBACK))
    (outage,) = result.metrics.outages
    assert outage.replicas_max == 10 and outage.replicas_at_end == 10
    assert outage.first_scale == 30
    # Afterwards the real count comes back: the fallback ends with the first good read.
    assert any(t >= 1200 and to != 10 for t, _, to in result.scale_actions)
