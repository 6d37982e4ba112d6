"""The simulator's side of the operator's interfaces: a virtual clock, a source and a target on the simulated world.

With these, the very `Reconciler` (and so `policy.decide`) the operator runs drives the simulated Deployment.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from controller.model.readings import SourceReading
from controller.model.rule import QueueScaler, ScaleTargetRef
from controller.model.sources.base import SourceSpec
from controller.reconciler import Reconciler, TickResult
from controller.simulator.world import PEEK_LIMIT, SimWorld, World
from controller.targets.base import ScaleState, StartupMeter, TargetConflict


class VirtualClock:
    """The reconciler's `Clock`: seconds since the epoch, moved by the simulation, never by the wall clock."""

    def __init__(self, start_epoch: float) -> None:
        self.start_epoch = start_epoch
        self.t = 0.0  # seconds since the start of the run

    def now(self) -> float:
        return self.start_epoch + self.t

    async def sleep(self, seconds: float) -> None:
        self.t += max(0.0, seconds)


_KIND_COUNTS: dict[tuple[str, str | bool | None], Callable[[World], int]] = {
    ("redis-list", None): lambda world: world.visible_count,
    ("redis-list", "pending"): lambda world: world.in_flight_count,
    ("redis-list", "pendingAndLag"): lambda world: world.visible_count + world.in_flight_count,
    ("sql-table", None): lambda world: world.visible_count,
    ("rabbitmq", "ready"): lambda world: world.visible_count,
    ("rabbitmq", "readyAndUnacked"): lambda world: world.visible_count + world.in_flight_count,
    ("aws-sqs", False): lambda world: world.visible_count,
    ("aws-sqs", True): lambda world: world.visible_count + world.in_flight_count,
}


def _count_mode(spec: SourceSpec) -> str | bool | None:
    """Which of its kind's counts a source reads (read by name: the simulator does not import the sources)."""
    if spec.type == "redis-list":
        return getattr(spec, "stream_count", None) if getattr(spec, "stream_name", None) else None
    if spec.type == "rabbitmq":
        return getattr(spec, "count", None)
    if spec.type == "aws-sqs":
        return bool(getattr(spec, "include_in_flight", False))
    return None


def _reports_age(spec: SourceSpec) -> bool:
    """Whether the kind's real poller says how long the oldest waiting message waited (read by name, as above):
    azure-queue peeks its front message unless `oldestAge: off`; a job table with a due-time column has its
    oldest due row. A custom SQL query may return an age too, but what it counts is its own: not simulated."""
    if spec.type == "azure-queue":
        return getattr(spec, "oldest_age", "auto") != "off"
    return spec.type == "sql-table" and getattr(spec, "due_column", None) is not None


class SimulatedSource:
    """The `Source` of a rule, reading the simulated queue the way Azure answers.

    During one of the queue's outages a poll fails: with the outage's error code, or, for a timeout, as the
    reconciler reports a poll that outlasted its budget (the simulated poll answers at once, so the decision is
    not delayed by the budget as it would be in a cluster)."""

    answers_at_once = True  # no I/O: the reconciler skips the poll timer

    def __init__(self, spec: SourceSpec, world: World, clock: VirtualClock | None = None) -> None:
        self._spec = spec
        self.world = world
        self.clock = clock
        # azure-queue's countStrategy "visible" peeks at most 32 messages, then falls back to the approximate count.
        self.visible_only = getattr(spec, "count_strategy", "approximate") == "visible"
        # What the other kinds count (docs/simulator.md, "Queue kinds"): a list's LLEN and a job table's due,
        # unclaimed rows are exactly the visible messages; a stream's pending entries are the in-flight ones.
        self.count_of = _KIND_COUNTS.get((spec.type, _count_mode(spec)))
        self.reports_age = _reports_age(spec)

    @property
    def spec(self) -> SourceSpec:
        return self._spec

    async def poll(self, budget: float) -> SourceReading:
        world = self.world
        if world.outages and self.clock is not None and (outage := world.outage_at(self.clock.t)) is not None:
            label = self._spec.queue_label
            if outage.failure == "timeout":
                # The words sources.base.guarded_poll uses when a poll outlasts its budget.
                return SourceReading.failed("Timeout", f"no answer from queue '{label}' within {budget:g}s")
            return SourceReading.failed(outage.code, f"queue '{label}': the service answered {outage.code} "
                                                     f"(simulated outage)")
        age = world.front_age(int(self.clock.t)) if self.reports_age and self.clock is not None else None
        if self.count_of is not None:
            return SourceReading.of(self.count_of(world), oldest_age=age)
        if self.visible_only and world.visible_count < PEEK_LIMIT:
            return SourceReading.of(world.visible_count, oldest_age=age)
        return SourceReading.of(world.approximate_count, oldest_age=age)

    async def aclose(self) -> None:
        return None


class SimulatedTarget:
    """The `Target` of a rule: the simulated Deployment's scale subresource. `least_busy`: the rule names the pods'
    `inFlight` counts, which the operator writes to their deletion cost before a scale-in, so the ReplicaSet
    removes the least busy pods (controller/kube/inflight.py)."""

    def __init__(self, ref: ScaleTargetRef, world: SimWorld, clock: VirtualClock, *,
                 least_busy: bool = False) -> None:
        self._ref = ref
        self.least_busy = least_busy
        self.world = world
        self.clock = clock
        self.startup = StartupMeter()

    @property
    def ref(self) -> ScaleTargetRef:
        return self._ref

    async def read(self) -> ScaleState:
        world = self.world

        def reached(replicas: int, since: float) -> float | None:
            return next((t for t, ready in world.ready_changes if t >= since and ready >= replicas), None)

        startup = self.startup.follow(world.desired, reached)
        version = str(len(world.scale_actions))
        return ScaleState(replicas=world.desired, ready_replicas=world.ready, version=version,
                          startup_seconds=startup)

    async def scale(self, replicas: int, read: ScaleState) -> ScaleState:
        world = self.world
        if read.replicas != world.desired:
            raise TargetConflict()
        if replicas > world.desired:
            self.startup.asked(self.clock.t, replicas)
        world.set_desired(replicas, int(self.clock.t), least_busy=self.least_busy)
        return await self.read()


@dataclass(frozen=True)
class TickRecord:
    """What one reconciler tick saw and chose."""

    t: float
    count: float | None
    current: int
    desired: int


@dataclass
class TickRecorder:
    """The reconciler's `Reporter`: keeps each tick's count and decision."""

    ticks: list[TickRecord] = field(default_factory=list)

    async def report(self, result: TickResult) -> None:
        decision = result.decision
        if decision is not None:
            self.ticks.append(TickRecord(result.time, decision.count, decision.current, decision.desired))


class RuleError(Exception):
    """A rule the simulator cannot run; the message names the rule and field."""


def queue_index(names: tuple[str, ...], queue: str) -> int | None:
    """Which of the scenario's queues a source or trigger reads: the one of its name (or of its name's last part,
    so "vhost/orders" or an SQS URL's "orders" find "orders"); None when there is none."""
    for candidate in (queue, queue.rstrip("/").rsplit("/", 1)[-1]):
        if candidate in names:
            return names.index(candidate)
    return None


def source_queues(rule: QueueScaler, names: tuple[str, ...]) -> list[int]:
    """The scenario queue each of the rule's sources reads; raises RuleError naming the source that has none.

    In a one-queue scenario a one-source rule reads that queue whatever it names, so any rule can be tried."""
    sources = rule.spec.sources
    if len(names) == 1 and len(sources) == 1:
        return [0]
    found: list[int] = []
    for index, source in enumerate(sources):
        queue = queue_index(names, source.queue_label)
        if queue is None:
            raise RuleError(
                f"{rule.name}: spec.sources[{index}]: queue '{source.queue_label}' is none of the scenario's "
                f"queues ({', '.join(names)}); a rule with several sources needs a scenario with a queue of each "
                f"source's name (docs/simulator.md, \"Several queues\")"
            )
        found.append(queue)
    return found


class RuleAutoscaler:
    """Our controller: the operator's Reconciler, ticking every `pollingInterval` of virtual time."""

    def __init__(self, label: str, rule: QueueScaler, world: SimWorld, start_epoch: float) -> None:
        queues = source_queues(rule, world.queue_names)
        self.label = label
        self.clock = VirtualClock(start_epoch)
        self.recorder = TickRecorder()
        self.reconciler = Reconciler(
            rule,
            [SimulatedSource(source, world.queue_world(queue), self.clock)
             for source, queue in zip(rule.spec.sources, queues, strict=True)],
            SimulatedTarget(rule.spec.scale_target_ref, world, self.clock,
                            least_busy=rule.spec.in_flight is not None),
            self.clock,
            reporter=self.recorder,
        )
        self.interval = rule.spec.polling_interval
        self.next_at = 0.0

    async def act(self, t: int) -> None:
        self.clock.t = float(t)
        await self.reconciler.tick()
        self.next_at += self.interval
        if self.next_at <= t:
            self.next_at = t + self.interval


class StaticAutoscaler:
    """A fixed replica count, set once at the start."""

    def __init__(self, label: str, replicas: int, world: SimWorld) -> None:
        self.label = label
        self.replicas = replicas
        self.world = world
        self.next_at = 0.0

    async def act(self, t: int) -> None:
        self.world.set_desired(self.replicas, t)
        self.next_at = float("inf")


class AwsTargetTracking:
    """AWS-style target tracking on backlog per instance (visible messages / instances).

    Every 60 s (CloudWatch's 1-minute metrics): scale out at once to ceil(visible / target); scale in only when
    the last 15 proposals (target tracking's scale-in alarm wants 15 datapoints) are all below the current count,
    and gradually: to the largest of them, but by at most 10 % (at least 1) per evaluation. Minimum 1.
    """

    EVALUATION = 60
    SCALE_IN_POINTS = 15
    SCALE_IN_STEP = 0.10

    def __init__(self, label: str, target: float, world: SimWorld, max_replicas: int) -> None:
        self.label = label
        self.target = target
        self.world = world
        self.max_replicas = max_replicas
        self.proposals: list[int] = []
        self.next_at = 0.0

    async def act(self, t: int) -> None:
        world = self.world
        proposal = max(1, min(self.max_replicas, math.ceil(world.visible_count / self.target)))
        self.proposals = [*self.proposals[-(self.SCALE_IN_POINTS - 1):], proposal]
        current = world.desired
        if proposal > current or current == 0:
            world.set_desired(max(proposal, 1), t)
        elif len(self.proposals) >= self.SCALE_IN_POINTS and max(self.proposals) < current:
            step = max(1, int(current * self.SCALE_IN_STEP))
            world.set_desired(max(max(self.proposals), current - step), t)
        self.next_at = t + self.EVALUATION
