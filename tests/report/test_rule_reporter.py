"""When the operator writes a rule's status: at once for what matters, counts at most every status interval
(stretched when there are many rules), a heartbeat otherwise, and nothing for a tick that changed nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controller.kube.errors import KubeError
from controller.kube.events import EventRecorder, ObjectRef
from controller.model.fields import FieldError
from controller.model.rule import API_GROUP, API_VERSION, KIND, QueueScaler
from controller.operator.options import OperatorOptions
from controller.operator.runner import Operator
from controller.operator.state import RuleState
from controller.reconciler import Reconciler
from controller.report.metrics import Metrics
from controller.report.reporter import ReportedRule, Reporting, RuleReporter
from controller.report.status import Status
from tests.policy_helpers import MemoryTarget, QueueSource, VirtualClock, make_spec


class RecordingApi:
    """Answers status patches (or fails them while `failing`), and records them."""

    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []
        self.failing = False
        self.api_client = None

    async def request_with_retries(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        if self.failing:
            raise KubeError(500, "InternalError", "etcd is sad")
        if path.endswith("/status"):
            self.patches.append(kwargs["body"]["status"])
        return {}

    async def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        return {}  # events


async def setup(counts: list[int | None], *, rules: int = 1, **options: Any) -> tuple[
        Reconciler, RecordingApi, VirtualClock, Operator]:
    api, clock = RecordingApi(), VirtualClock()
    operator = Operator(api, None, OperatorOptions(**options), clock=clock)  # type: ignore[arg-type]
    rule = QueueScaler(name="r", namespace="ns", spec=make_spec(pollingInterval="10s",
                                                                policy={"targetPerReplica": 10}))
    state = RuleState(key="ns/r", obj={"metadata": {"name": "r", "namespace": "ns"}}, rule=rule)
    operator.rules = {f"ns/r{i}": RuleState(key=f"ns/r{i}", obj={}) for i in range(1, rules)}
    operator.rules[state.key] = state
    reconciler = Reconciler(rule, [QueueSource(counts)], MemoryTarget(replicas=1), clock,
                            RuleReporter(operator.reporting, state))
    return reconciler, api, clock, operator


async def ticks(reconciler: Reconciler, clock: VirtualClock, operator: Operator, n: int) -> None:
    for _ in range(n):
        await reconciler.tick()
        assert await operator.status_writes.drain(5)
        clock.time += 10


async def test_a_quiet_rule_is_written_then_only_as_a_heartbeat() -> None:
    reconciler, api, clock, operator = await setup([5], status_heartbeat=300.0)
    await ticks(reconciler, clock, operator, 30)  # 0 .. 290 s
    # At 0 s, and at 30 s when the message first gives the trend (a count-only change); then nothing...
    assert [p["lastPollTime"][-9:] for p in api.patches] == ["00:16:40Z", "00:17:10Z"]
    await ticks(reconciler, clock, operator, 3)  # 300 .. 320 s
    assert len(api.patches) == 2
    await ticks(reconciler, clock, operator, 1)  # 330 s: ...until the heartbeat, 300 s after the last write
    assert len(api.patches) == 3 and api.patches[2]["lastPollTime"][-9:] == "00:22:10Z"
    await operator.status_writes.close()


async def test_counts_alone_wait_for_the_status_interval() -> None:
    reconciler, api, clock, operator = await setup([2, 3, 4, 5, 6, 2, 3, 4, 5, 6], status_interval=30.0)
    await ticks(reconciler, clock, operator, 7)  # 0 .. 60 s, a new count (same replicas) every tick
    assert [p["queueLength"] for p in api.patches] == [2, 5, 3]  # at 0, 30 and 60 s
    await operator.status_writes.close()


async def test_many_rules_stretch_the_count_interval_to_the_status_rate() -> None:
    # 1,000 rules at 10 writes/s: each rule's counts are written every 100 s, not every 30 s.
    reconciler, api, clock, operator = await setup([2, 3, 4, 5, 6] * 4, rules=1000, status_interval=30.0,
                                                   status_rate=10.0)
    await ticks(reconciler, clock, operator, 12)  # 0 .. 110 s
    assert [p["queueLength"] for p in api.patches] == [2, 2]  # at 0 and 100 s
    await operator.status_writes.close()


async def test_what_matters_is_written_at_once_whatever_the_rate() -> None:
    reconciler, api, clock, operator = await setup([5, 5, 500], rules=1000, status_rate=1.0)
    await ticks(reconciler, clock, operator, 3)
    assert [p["desiredReplicas"] for p in api.patches] == [1, 50]
    await operator.status_writes.close()


async def test_a_failed_write_is_made_again_by_the_next_tick_that_sees_the_same() -> None:
    reconciler, api, clock, operator = await setup([5, 500])
    assert isinstance(reconciler.reporter, RuleReporter)
    reporter, reconciler.reporter = reconciler.reporter, None
    first, burst = await reconciler.tick(), await reconciler.tick()
    await reporter.report(first)
    assert await operator.status_writes.drain(5) and len(api.patches) == 1
    api.failing = True
    await reporter.report(burst)
    assert await operator.status_writes.drain(5) and len(api.patches) == 1
    api.failing = False
    clock.time += 10
    await reporter.report(burst)  # the very same tick result: only the failure makes it worth a write
    assert await operator.status_writes.drain(5)
    assert [p["desiredReplicas"] for p in api.patches] == [1, 50]
    await operator.status_writes.close()


@dataclass
class Reported:
    """A rule as a reporter sees it, with no operator behind it."""

    key: str = "ns/r"
    last_status: Status | None = None
    last_write: float = 0.0
    submitted: tuple[object, ...] | None = None
    ticked: bool = False

    def ref(self) -> ObjectRef:
        return ObjectRef(f"{API_GROUP}/{API_VERSION}", KIND, "r", "ns", "uid-r")


@dataclass(frozen=True)
class Pacing:
    status_interval: float = 30.0
    status_heartbeat: float = 300.0
    status_rate: float = 50.0


async def test_a_reporter_knows_only_the_reporting_it_is_given() -> None:
    """report/ sits below operator/: a reporter writes to what the operator hands it, and nothing else."""
    clock, sent = VirtualClock(), []
    submitted: list[tuple[ReportedRule, Status, float]] = []
    first_ticks: list[str] = []
    invalidated: list[str] = []
    may_write = [True]

    async def send(namespace: str, body: dict[str, Any]) -> None:
        sent.append((namespace, body["reason"]))

    async def write(state: ReportedRule, status: Status, now: float) -> bool:
        raise AssertionError("a tick's status is submitted, never written in the tick")

    reporting = Reporting(
        metrics=Metrics(), events=EventRecorder(send, "test"), pacing=Pacing(), now=clock.now,
        may_write=lambda: may_write[0], submit_status=lambda rule, status, now: submitted.append((rule, status, now)),
        write_status=write, rule_count=lambda: 1, first_tick=first_ticks.append,
        invalidate_secrets=invalidated.append)
    rule = QueueScaler(name="r", namespace="ns", spec=make_spec(policy={"targetPerReplica": 10}))
    state = Reported()
    reconciler = Reconciler(rule, [QueueSource([50])], MemoryTarget(replicas=1), clock,
                            RuleReporter(reporting, state))
    await reconciler.tick()
    assert first_ticks == ["ns/r"] and state.ticked
    assert [(rule, status["desiredReplicas"]) for rule, status, _ in submitted] == [(state, 5)]
    assert sent == [("ns", "ScaledUp")] and not invalidated
    may_write[0] = False  # no longer leading: nothing is reported
    clock.time += 10
    await reconciler.tick()
    assert len(submitted) == 1 and len(sent) == 1 and first_ticks == ["ns/r"]


async def test_an_invalid_rule_is_reported_only_by_a_replica_that_may_write_its_event_included() -> None:
    """The status write checks the lease itself; the Warning event after it went out regardless, so a leader woken
    from a freeze (still `leading`, its lease stale) wrote InvalidSpec events next to the new leader."""
    clock, sent = VirtualClock(), []
    written: list[Status] = []
    may_write = [False]

    async def send(namespace: str, body: dict[str, Any]) -> None:
        sent.append((namespace, body["reason"]))

    async def write(state: ReportedRule, status: Status, now: float) -> bool:
        if not may_write[0]:
            return False  # as the operator's own write does
        written.append(status)
        return True

    reporting = Reporting(
        metrics=Metrics(), events=EventRecorder(send, "test"), pacing=Pacing(), now=clock.now,
        may_write=lambda: may_write[0], submit_status=lambda *_: None, write_status=write, rule_count=lambda: 1,
        first_tick=lambda _: None, invalidate_secrets=lambda _: None)
    state = Reported()
    reporter = RuleReporter(reporting, state)
    errors = [FieldError("spec.pollingInterval", "must be at least 1s")]
    await reporter.invalid("r", 3, errors)
    assert written == [] and sent == []
    may_write[0] = True
    await reporter.invalid("r", 3, errors)
    assert len(written) == 1 and sent == [("ns", "InvalidSpec")]


async def test_the_oldest_waiting_messages_age_is_exported_when_the_source_says_it() -> None:
    clock = VirtualClock()
    metrics = Metrics()
    reporting = Reporting(
        metrics=metrics, events=EventRecorder(lambda *_: _nothing(), "test"), pacing=Pacing(),
        now=clock.now, may_write=lambda: True, submit_status=lambda *_: None,
        write_status=_never_written, rule_count=lambda: 1, first_tick=lambda _: None,
        invalidate_secrets=lambda _: None)
    spec = make_spec(queues=2, policy={"targetPerReplica": 10})
    rule = QueueScaler(name="r", namespace="ns", spec=spec)
    sources = [QueueSource([50], spec=spec.sources[0], oldest_age=42.0), QueueSource([7], spec=spec.sources[1])]
    state = Reported()  # held here: a reporter keeps only a weak reference to its rule's state
    await Reconciler(rule, sources, MemoryTarget(replicas=1), clock, RuleReporter(reporting, state)).tick()
    value = metrics.registry.get_sample_value
    labels = {"namespace": "ns", "rule": "r", "source": "azure-queue"}
    assert value("queuescale_oldest_message_age_seconds", {**labels, "queue": "queue-0"}) == 42.0
    # A source that does not say has no series (not a 0 that would read as "nothing waits").
    assert value("queuescale_oldest_message_age_seconds", {**labels, "queue": "queue-1"}) is None
    assert value("queuescale_queue_length", {**labels, "queue": "queue-1"}) == 7


async def _nothing() -> None:
    return None


async def _never_written(state: ReportedRule, status: Status, now: float) -> bool:
    raise AssertionError("a tick's status is submitted, never written in the tick")
