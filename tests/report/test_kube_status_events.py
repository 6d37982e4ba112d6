"""What the status, events and secret cache say, without an API server."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from dataclasses import replace
from typing import Any

import pytest

from controller.kube.events import EventLimiter, EventRecorder, ObjectRef
from controller.kube.secrets import SecretCache
from controller.kube.timestamps import rfc3339
from controller.model.fields import FieldError
from controller.model.readings import Observation, ScaleEvent, ScalingMemory, SourceReading
from controller.model.rule import QueueScaler
from controller.model.secrets import SecretUnavailable
from controller.operator.logs import JsonFormatter
from controller.policy import decide
from controller.reconciler import TickResult
from controller.report.status import invalid_status, significant, tick_status
from controller.targets.base import ScaleState, TargetError
from tests.operator_harness import RULES_API
from tests.policy_helpers import make_spec

NOW = 1_800_000_000.0


def result(count: int | None, current: int = 1, *, target_error: TargetError | None = None,
           scaled: bool = True, **spec: Any) -> TickResult:
    rule = QueueScaler(name="orders", namespace="shop", spec=make_spec(**spec), generation=3)
    reading = SourceReading.of(count) if count is not None else SourceReading.failed(
        "QueueNotFound", "queue 'queue-0' not found in account 'acme'", retryable=False)
    observation = Observation(NOW, (reading,))
    decision = decide(rule.spec, observation, [], current, ScalingMemory(), NOW)
    moved = scaled and decision.desired != current and target_error is None
    return TickResult(
        rule=rule, time=NOW, observation=observation,
        decision=None if target_error and target_error.code == "NotFound" else decision,
        state=None if target_error else ScaleState(decision.desired if moved else current, 1, "7"),
        scaled=ScaleEvent(NOW, current, decision.desired) if moved else None,
        target_error=target_error, memory=decision.memory,
    )


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_a_good_tick_says_ready_active_and_the_counts() -> None:
    status = tick_status(result(1000), None, NOW)
    assert status["observedGeneration"] == 3
    assert status["queueLength"] == 1000 and status["desiredReplicas"] == 200 and status["currentReplicas"] == 200
    assert status["sources"] == [{"type": "azure-queue", "queue": "queue-0", "count": 1000}]
    assert status["lastScaleTime"] == rfc3339(NOW)
    found = conditions(status)
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("True", "Polling")
    assert (found["Active"]["status"], found["Active"]["reason"]) == ("True", "ScaledUp")
    assert (found["Fallback"]["status"], found["Paused"]["status"]) == ("False", "False")
    assert all(c["observedGeneration"] == 3 for c in status["conditions"])
    json.dumps(status)  # must be plain JSON for the API


def test_a_missing_queue_is_ready_false_with_the_azure_code() -> None:
    status = tick_status(result(None), None, NOW)
    ready = conditions(status)["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "QueueNotFound")
    assert ready["message"] == "queue 'queue-0': queue 'queue-0' not found in account 'acme'"
    assert status["sources"][0]["error"]["code"] == "QueueNotFound"
    assert conditions(status)["Active"]["status"] == "Unknown"


def test_a_missing_target_is_ready_false() -> None:
    error = TargetError("NotFound", "deployments.apps 'worker' not found in namespace 'shop'", retryable=False)
    status = tick_status(result(10, target_error=error), None, NOW)
    ready = conditions(status)["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "TargetNotFound")
    assert "Deployment 'worker'" in ready["message"]


def test_transition_time_moves_only_when_the_status_does() -> None:
    first = tick_status(result(1000), None, NOW)
    later = tick_status(result(2000, current=200), first, NOW + 60)
    assert conditions(later)["Ready"]["lastTransitionTime"] == rfc3339(NOW)
    broken = tick_status(result(None, current=200), later, NOW + 120)
    assert conditions(broken)["Ready"]["lastTransitionTime"] == rfc3339(NOW + 120)


def test_counts_alone_are_not_significant_but_reasons_are() -> None:
    first = tick_status(result(1000, current=200), None, NOW)
    more = tick_status(result(1010, current=200), first, NOW + 10)
    assert more != first
    assert significant(more) == significant(first)
    broken = tick_status(result(None, current=200), first, NOW + 20)
    assert significant(broken) != significant(first)


def test_invalid_rule_status_lists_every_error_and_keeps_memory() -> None:
    errors = [FieldError("spec.maxReplicas", "is required"), FieldError("spec.sources", "is required")]
    previous = {"memory": {"lastScaleUp": 5.0}}
    status = invalid_status("orders", 4, errors, previous, NOW)
    ready = conditions(status)["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert ready["message"] == "rule 'orders' is not valid: spec.maxReplicas: is required; spec.sources: is required"
    assert status["memory"] == {"lastScaleUp": 5.0}


# ---------------------------------------------------------------------------------------------- events


def test_warnings_are_said_once_per_interval_and_bursts_are_capped() -> None:
    limiter = EventLimiter(burst=3, refill_every=10, repeat_after=300)
    assert limiter.allow("r", "Warning", "QueueNotFound", 0)
    assert not limiter.allow("r", "Warning", "QueueNotFound", 100)
    assert limiter.allow("r", "Warning", "QueueNotFound", 300)
    assert limiter.allow("r", "Normal", "ScaledUp", 300)
    assert limiter.allow("r", "Normal", "ScaledUp", 300)
    assert not limiter.allow("r", "Normal", "ScaledUp", 300)  # the bucket of 3 is empty
    assert limiter.allow("other", "Normal", "ScaledUp", 300)  # each rule has its own
    assert limiter.allow("r", "Normal", "ScaledUp", 310)  # one token back after 10 s


def test_an_overall_budget_holds_back_a_storm_and_the_rules_say_it_later() -> None:
    limiter = EventLimiter(burst=10, refill_every=30, repeat_after=300, total_burst=3, total_per_second=1)
    allowed = [limiter.allow(f"rule-{i}", "Warning", "ServerBusy", 0) for i in range(10)]
    assert allowed == [True] * 3 + [False] * 7 and limiter.over_budget == 7
    # Held back by the budget, not by its own limits: rule-3's Warning is said once the budget has a token again.
    assert not limiter.allow("rule-3", "Warning", "ServerBusy", 0.5)
    assert limiter.allow("rule-3", "Warning", "ServerBusy", 1.6)
    assert not limiter.allow("rule-3", "Warning", "ServerBusy", 100)  # ... and then not again for 300 s


async def test_recorder_builds_a_core_event_and_survives_failures() -> None:
    sent: list[tuple[str, dict[str, Any]]] = []

    async def send(namespace: str, body: dict[str, Any]) -> None:
        sent.append((namespace, body))

    recorder = EventRecorder(send, "op-1")
    ref = ObjectRef(RULES_API, "QueueScaler", "orders", "shop", "uid-1")
    assert await recorder.record(ref, "Normal", "ScaledUp", "1 -> 5: ScaledUp", NOW)
    namespace, body = sent[0]
    assert namespace == "shop"
    assert body["involvedObject"] == {"apiVersion": RULES_API, "kind": "QueueScaler",
                                      "name": "orders", "namespace": "shop", "uid": "uid-1"}
    assert (body["reason"], body["type"], body["count"]) == ("ScaledUp", "Normal", 1)
    assert body["metadata"]["name"].startswith("orders.")

    async def failing(namespace: str, body: dict[str, Any]) -> None:
        raise OSError("connection refused")

    assert not await EventRecorder(failing, "op-1").record(ref, "Normal", "ScaledUp", "x", NOW)


# ---------------------------------------------------------------------------------------------- secrets


class ApiLike(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


async def test_secret_cache_reads_once_per_ttl_and_names_what_is_missing() -> None:
    clock = [0.0]
    reads: list[tuple[str, str]] = []
    store = {("shop", "orders-queue"): {"conn": base64.b64encode(b"AccountName=a;AccountKey=k").decode()}}

    async def read(namespace: str, name: str) -> dict[str, Any]:
        reads.append((namespace, name))
        if (namespace, name) not in store:
            raise ApiLike(404)
        return {"data": store[(namespace, name)]}

    cache = SecretCache(read, ttl=30, now=lambda: clock[0], access="namespace")
    resolve = cache.resolver("shop", "orders")
    assert await resolve("orders-queue", "conn") == "AccountName=a;AccountKey=k"
    assert await resolve("orders-queue", "conn") == "AccountName=a;AccountKey=k"
    assert len(reads) == 1
    clock[0] = 31
    store[("shop", "orders-queue")] = {"conn": base64.b64encode(b"rotated").decode()}
    assert await resolve("orders-queue", "conn") == "rotated"
    with pytest.raises(SecretUnavailable) as missing_key:
        await resolve("orders-queue", "key")
    assert missing_key.value.code == "SecretKeyNotFound"
    assert "has no key 'key' (keys: conn)" in missing_key.value.message
    with pytest.raises(SecretUnavailable) as missing:
        await resolve("nope", "conn")
    assert (missing.value.code, missing.value.message) == ("SecretNotFound", "Secret 'nope' not found in namespace 'shop'")
    cache.invalidate("shop")
    await resolve("orders-queue", "conn")
    assert reads.count(("shop", "orders-queue")) == 3
    assert "rotated" not in repr(resolve)


def test_json_logs_are_one_object_per_line() -> None:
    record = logging.LogRecord("controller.operator.runner", logging.WARNING, __file__, 1, "rule %s failed", ("shop/a",), None)
    entry = json.loads(JsonFormatter().format(record))
    assert (entry["level"], entry["logger"], entry["message"]) == ("warning", "controller.operator.runner", "rule shop/a failed")
    assert entry["time"].endswith("Z")


async def test_secret_cache_reads_a_secret_once_when_many_rules_miss_it_together() -> None:
    reads: list[str] = []
    gate = asyncio.Event()

    async def read(namespace: str, name: str) -> dict[str, Any]:
        reads.append(name)
        await gate.wait()
        if name == "gone":
            raise ApiLike(404)
        return {"data": {"conn": base64.b64encode(b"UseDevelopmentStorage=true").decode()},
                "metadata": {"annotations": {"queuescale.io/allowed-rules": "*"}}}

    cache = SecretCache(read, ttl=30)
    resolve = cache.resolver("shop", "orders")
    waiting = [asyncio.ensure_future(resolve("queue", "conn")) for _ in range(200)]
    missing = [asyncio.ensure_future(resolve("gone", "conn")) for _ in range(50)]
    await asyncio.sleep(0)
    gate.set()
    assert set(await asyncio.gather(*waiting)) == {"UseDevelopmentStorage=true"}
    failures = await asyncio.gather(*missing, return_exceptions=True)
    assert all(isinstance(f, SecretUnavailable) and f.code == "SecretNotFound" for f in failures)
    assert sorted(reads) == ["gone", "queue"]
    with pytest.raises(SecretUnavailable):
        await resolve("gone", "conn")
    assert reads.count("gone") == 2


async def test_the_recorder_tells_each_events_outcome() -> None:
    outcomes: list[str] = []

    async def send(namespace: str, body: dict[str, Any]) -> None:
        if body["reason"] == "Broken":
            raise OSError("connection refused")

    limiter = EventLimiter(burst=10, total_burst=2, total_per_second=0.001)
    recorder = EventRecorder(send, "op-1", limiter, counted=outcomes.append)
    ref = ObjectRef(RULES_API, "QueueScaler", "orders", "shop", "uid-1")
    await recorder.record(ref, "Warning", "QueueNotFound", "x", NOW)
    await recorder.record(ref, "Warning", "QueueNotFound", "x", NOW + 1)  # the same Warning again: its rule's limit
    await recorder.record(ref, "Normal", "Broken", "x", NOW + 2)
    await recorder.record(ref, "Normal", "ScaledUp", "x", NOW + 3)  # the overall budget of 2 is spent
    assert outcomes == ["sent", "limited", "failed", "over_budget"]


def test_a_rule_whose_objective_a_cold_start_cannot_meet_says_so_in_wait_objective() -> None:
    policy = {"targetWaitSeconds": 30, "serviceTime": "500ms", "startupTime": "25s"}
    found = conditions(tick_status(result(1000, policy=policy), None, NOW))["ColdStart"]
    assert (found["status"], found["reason"]) == ("False", "ColdStartTooSlow")
    assert "a poll (10s) and a start-up (25s): 35s, more than targetWaitSeconds 30s" in found["message"]
    kept = conditions(tick_status(result(1000, policy=policy, minReplicas=4), None, NOW))["ColdStart"]
    assert (kept["status"], kept["reason"]) == ("True", "ReplicasKeptReady")
    fits = conditions(tick_status(result(1000, policy={**policy, "targetWaitSeconds": 60}), None, NOW))
    assert (fits["ColdStart"]["status"], fits["ColdStart"]["reason"]) == ("True", "ColdStartFits")
    # A count-mode rule states no wait: no such condition.
    assert "ColdStart" not in conditions(tick_status(result(1000), None, NOW))


def service_time(learned: float | None, **spec: Any) -> dict[str, Any]:
    """The ServiceTime condition after a tick whose memory holds `learned` (messages/s a replica)."""
    tick = result(1000, **spec)
    tick = replace(tick, memory=replace(tick.memory, learned_throughput=learned))
    return conditions(tick_status(tick, None, NOW))["ServiceTime"]


def test_a_rule_whose_replicas_drained_slower_than_stated_is_told_the_service_time_they_showed() -> None:
    policy = {"targetWaitSeconds": 60, "serviceTime": "1s"}
    slow = service_time(0.5, policy=policy)
    assert (slow["status"], slow["reason"]) == ("False", "SlowerThanStated")
    assert slow["message"] == (
        "the fastest drain or wait seen ran at 0.5/s a replica, below the stated serviceTime 1s (1/s a replica): "
        "sized at 0.5/s a replica until one shows the stated speed (what the count shows is a lower bound: "
        "arrivals meanwhile hide completions); if replicas are that slow, state serviceTime of about 2s so that a "
        "new rule sizes its first burst right")
    # Below half the statement: the sizing trusts half, and says so.
    slower = service_time(0.25, policy=policy)
    assert "sized at 0.5/s a replica (no less than 50% of the statement is trusted)" in slower["message"]
    assert "state serviceTime of about 4s" in slower["message"]
    confirmed = service_time(0.9, policy=policy)
    assert (confirmed["status"], confirmed["reason"]) == ("True", "Confirmed")
    unseen = service_time(None, policy=policy)
    assert (unseen["status"], unseen["reason"]) == ("True", "AsStated")
    # Count mode learns nothing: no such condition.
    assert "ServiceTime" not in conditions(tick_status(result(1000), None, NOW))
