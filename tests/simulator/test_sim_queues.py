"""Several queues in one scenario: each with its own arrivals, consumed by one worker Deployment, read by rules
with several sources (sum or max, weights: controller/policy.py Observation.total) and by KEDA's triggers."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest

from controller.commands.simulate import SimulateRequest, run
from controller.model.fields import SpecError
from controller.model.rule import QueueScaler
from controller.simulator.adapters import RuleAutoscaler, RuleError
from controller.simulator.keda import KedaAutoscaler, parse_scaled_object
from controller.simulator.run import build_world, simulate
from controller.simulator.scenario import Scenario, library, parse_scenario, plan_arrivals
from controller.simulator.world import MultiQueueWorld, World
from tests.policy_helpers import source
from tests.sim_helpers import parse_rule, scenario

TWO_QUEUES = [
    {"name": "orders", "visibilityTimeout": 60, "arrivals": [{"type": "constant", "rate": 3}]},
    {"name": "refunds", "arrivals": [{"type": "burst", "at": 100, "messages": 500, "over": 10}]},
]


def two_queues(**overrides: Any) -> Scenario:
    raw: dict[str, Any] = {
        "duration": 600, "seed": 1, "slo": {"waitSeconds": 30},
        "workers": {"startupDelay": 10, "serviceTime": 2, "concurrency": 1, "maxReplicas": 50},
        "queues": TWO_QUEUES,
    }
    raw.update(overrides)
    return parse_scenario({k: v for k, v in raw.items() if v is not None})


def rule(aggregation: str = "sum", names: tuple[str, ...] = ("orders", "refunds"),
         weights: tuple[float, ...] = (1.0, 1.0)) -> QueueScaler:
    return parse_rule("checkout", maxReplicas=50, pollingInterval=10, aggregation=aggregation,
                      sources=[source(name, weight) for name, weight in zip(names, weights, strict=True)],
                      policy={"targetPerReplica": 5})


def test_each_queue_gets_its_own_arrivals_and_the_plan_adds_them_up() -> None:
    sc = two_queues()
    assert [q.name for q in sc.all_queues] == ["orders", "refunds"]
    assert sc.all_queues[0].params.visibility_timeout == 60
    plan = plan_arrivals(sc)
    orders, refunds = (sum(sum(c) for _, c in plan.streams_of(i)) for i in range(2))
    assert (orders, refunds) == (600 * 3, 500)
    assert plan.total == orders + refunds


@pytest.mark.parametrize(("raw", "field", "words"), [
    ({"arrivals": [{"type": "constant", "rate": 1}]}, "arrivals", "goes under each of `queues`"),
    ({"queues": [TWO_QUEUES[0], TWO_QUEUES[0]]}, "queues[1].name", "earlier queue"),
    ({"queues": [{"name": "a b", "arrivals": [{"type": "constant", "rate": 1}]}]}, "queues[0].name", "letters"),
    ({"queues": [{"name": "a"}]}, "queues[0].arrivals", "is required"),
    ({"queues": [{"name": "a", "arrivals": [{"type": "x"}]}]}, "queues[0].arrivals[0].type", ""),
])
def test_a_bad_queues_list_is_refused_naming_the_field(raw: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        two_queues(**raw)
    assert any(e.path == field and words in e.message for e in caught.value.errors), caught.value.errors


def test_free_slots_go_round_robin_to_the_queues_with_messages() -> None:
    """One pod with 4 slots: 10 orders and 1 refund -> the refund gets its one slot, orders the other three."""
    sc = two_queues(workers={"startupDelay": 0, "serviceTime": 100, "concurrency": 4, "initialReplicas": 1})
    world = build_world(sc, 1)
    assert isinstance(world, MultiQueueWorld)
    world.put(0, 10, 0, 0)
    world.put(0, 1, 0, 1)
    world.step(0)
    orders, refunds = world.queues
    assert (orders.in_flight_active, refunds.in_flight_active) == (3, 1)
    world.put(1, 10, 0, 1)
    world.set_desired(2, 1)
    world.step(1)
    world.step(2)  # the new pod's 4 slots: 2 each
    assert (orders.in_flight_active, refunds.in_flight_active) == (5, 3)


def test_the_deployment_is_paid_once_not_once_per_queue() -> None:
    sc = two_queues(workers={"startupDelay": 0, "serviceTime": 1, "initialReplicas": 3}, duration=100)
    result = simulate(sc, [_static(3)])[0]
    assert result.metrics.worker_seconds == 300
    m = result.metrics
    assert m.messages_arrived == m.messages_processed + m.expired_messages + m.messages_remaining


def _static(replicas: int) -> Any:
    from controller.simulator.adapters import StaticAutoscaler
    from controller.simulator.run import Contender

    return Contender("static", lambda w: StaticAutoscaler("static", replicas, w), initial_replicas=replicas)


@pytest.mark.parametrize(("aggregation", "weights", "expected"), [
    ("sum", (1.0, 1.0), 30 + 12),
    ("sum", (2.0, 0.5), 60 + 6),
    ("max", (1.0, 1.0), 30),
    ("max", (0.1, 1.0), 12),
])
def test_a_multi_source_rule_reads_each_queue_and_aggregates_as_the_policy_does(
        aggregation: str, weights: tuple[float, float], expected: float) -> None:
    world = build_world(two_queues(), 0)
    world.put(0, 30, 0, 0)
    world.put(0, 12, 0, 1)
    world.step(0)
    autoscaler = RuleAutoscaler("checkout", rule(aggregation, weights=weights), world, 0.0)
    asyncio.run(autoscaler.act(1))
    assert autoscaler.recorder.ticks[0].count == pytest.approx(expected)


def test_a_source_naming_no_queue_of_the_scenario_is_refused_with_its_field_path() -> None:
    world = build_world(two_queues(), 0)
    with pytest.raises(RuleError) as caught:
        RuleAutoscaler("checkout", rule(names=("orders", "returns")), world, 0.0)
    assert "spec.sources[1]: queue 'returns' is none of the scenario's queues (orders, refunds)" in str(caught.value)


def test_a_one_source_rule_reads_the_only_queue_whatever_it_names() -> None:
    world = build_world(scenario(), 0)
    assert isinstance(world, World)
    RuleAutoscaler("checkout", rule(names=("anything",), weights=(1.0,)), world, 0.0)


def test_keda_triggers_read_the_queue_of_their_queue_name() -> None:
    so = parse_scaled_object({
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "checkout"},
        "spec": {"scaleTargetRef": {"name": "worker"}, "triggers": [
            {"type": "azure-queue", "metadata": {"queueName": name}} for name in ("refunds", "orders")]},
    })
    world = build_world(two_queues(), 0)
    world.put(0, 30, 0, 0)
    world.put(0, 12, 0, 1)
    keda = KedaAutoscaler("keda", so, world)
    assert [keda._count(t, i) for i, t in enumerate(so.triggers)] == [12, 30]
    wrong = parse_scaled_object({
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "x"},
        "spec": {"scaleTargetRef": {"name": "worker"},
                 "triggers": [{"type": "azure-queue", "metadata": {"queueName": "returns"}}]},
    })
    with pytest.raises(SpecError) as caught:
        KedaAutoscaler("keda", wrong, world)
    assert caught.value.errors[0].path == "x: spec.triggers[0].metadata.queueName"


def test_the_built_in_two_queue_scenario_runs_our_default_rule_keda_and_a_static_count(tmp_path: Path) -> None:
    assert len(library()["checkout-outage"].all_queues) == 2
    keda = tmp_path / "keda.yaml"
    keda.write_text(
        "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: checkout}\n"
        "spec:\n  scaleTargetRef: {name: worker}\n  fallback: {failureThreshold: 3, replicas: 30}\n"
        "  triggers:\n"
        "    - {type: azure-queue, metadata: {queueName: orders, queueLength: '20'}}\n"
        "    - {type: azure-queue, metadata: {queueName: refunds, queueLength: '20'}}\n"
    )
    out, err = io.StringIO(), io.StringIO()
    code = run(SimulateRequest(scenario="checkout-outage", keda=[str(keda)], static=[20], output="json"), out, err)
    assert code == 0, err.getvalue()
    import json

    results = json.loads(out.getvalue())
    assert list(results) == ["queuescale-default", "keda:checkout", "static-20"]
    for metrics in results.values():
        assert metrics["messages_arrived"] == (metrics["messages_processed"] + metrics["expired_messages"]
                                               + metrics["messages_remaining"])
        assert [o["queue"] for o in metrics["outages"]] == ["orders", "refunds"]
    # KEDA's fallback answers 30 replicas' worth for the failing trigger: the HPA goes to at least 30.
    assert results["keda:checkout"]["outages"][0]["replicas_max"] >= 30
    assert results["static-20"]["outage_replicas_min"] == results["static-20"]["outage_replicas_max"] == 20


def test_a_second_counts_once_against_the_slo_when_any_queue_is_late() -> None:
    """No workers: both queues' oldest messages age together; each second over the SLO counts once, not twice."""
    sc = two_queues(duration=200, queues=[
        {"name": "orders", "arrivals": [{"type": "burst", "at": 0, "messages": 5}]},
        {"name": "refunds", "arrivals": [{"type": "burst", "at": 0, "messages": 5}]},
    ])
    result = simulate(sc, [_static(0)])[0]
    assert result.metrics.slo_violation_seconds == 200 - 31  # ages 31..199 are above the 30 s SLO
    assert result.metrics.oldest_message_age_max == 199


def test_drained_pods_holding_both_queues_work_are_paid_until_it_is_done() -> None:
    """One pod with two slots holds one message of each queue (20 s of work): scaled to 0 with drain, it stays
    until both are done, and is paid once: the scale-in's groups on the two queues are the same pod, not two."""
    sc = two_queues(duration=300, workers={"startupDelay": 0, "serviceTime": 20, "concurrency": 2,
                                           "scaleIn": "drain", "terminationGracePeriod": 1000})
    world = build_world(sc, 1)
    assert isinstance(world, MultiQueueWorld)
    world.put(0, 1, 0, 0)
    world.put(0, 1, 0, 1)
    world.step(0)
    world.set_desired(0, 1)
    assert world.draining_pods == 1 and world.pods == 1
    for t in range(1, 19):
        world.step(t)
    assert world.draining_pods == 1
    for t in range(19, 22):
        world.step(t)
    assert world.draining_pods == 0
    assert world.totals().processed == 2
