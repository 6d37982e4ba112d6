"""Small builders shared by the policy and reconciler tests: specs, observations, a run of decide(), and a
clock, a source, a target and a reporter in memory for the reconciler."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from controller.model.readings import Observation, ScalingMemory, SourceReading
from controller.model.rule import QueueScaler, QueueScalerSpec, ScaleTargetRef, parse_spec
from controller.model.sources.base import SourceSpec
from controller.policy import Decision, decide
from controller.reconciler import TickResult
from controller.targets.base import ScaleState, TargetConflict, TargetError

MONDAY_0900_UTC = 1_767_603_600.0  # 2026-01-05 09:00:00 UTC, a Monday


def source(name: str = "orders", weight: float = 1) -> dict[str, Any]:
    return {"type": "azure-queue", "queueName": name, "weight": weight,
            "connectionSecretRef": {"name": "q", "key": "conn"}}


def make_spec(*, queues: int = 1, **fields: Any) -> QueueScalerSpec:
    raw: dict[str, Any] = {
        "scaleTargetRef": {"name": "worker"},
        "maxReplicas": 300,
        "sources": [source(f"queue-{i}") for i in range(queues)],
    }
    raw.update(fields)
    return parse_spec(raw)


def seen(time: float, *counts: int | None, ages: Sequence[float | None] = ()) -> Observation:
    """An observation; None stands for a failed source. `ages`: each source's oldest waiting message's age."""
    return Observation(
        time=time,
        readings=tuple(
            SourceReading.of(c, oldest_age=ages[i] if i < len(ages) else None) if c is not None
            else SourceReading.failed("ServerBusy", "throttled")
            for i, c in enumerate(counts)
        ),
    )


@dataclass
class Run:
    """Drives decide() tick after tick, applying each decision as a target would."""

    spec: QueueScalerSpec
    current: int = 0
    memory: ScalingMemory = field(default_factory=ScalingMemory)
    history: list[Observation] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)

    def tick(
        self, time: float, *counts: int | None, paused: bool = False, ages: Sequence[float | None] = ()
    ) -> Decision:
        observation = seen(time, *counts, ages=ages)
        decision = decide(self.spec, observation, self.history, self.current, self.memory, time, paused=paused)
        self.memory = decision.memory.with_scale(time, self.current, decision.desired)
        self.current = decision.desired
        self.history.append(observation)
        self.decisions.append(decision)
        return decision

    def replicas(self, ticks: Sequence[tuple[float, int]]) -> list[int]:
        return [self.tick(t, c).desired for t, c in ticks]


class VirtualClock:
    """A Clock whose sleeps pass at once and are remembered."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.time = start
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.time

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.time += seconds
        await asyncio.sleep(0)


@dataclass
class QueueSource:
    """A source reading a number we set; or an error, or a hang, or a crash."""

    counts: list[int | None]
    hang: bool = False
    crash: bool = False
    spec: SourceSpec = field(default_factory=lambda: make_spec().sources[0])
    oldest_age: float | None = None  # what each answer says of the oldest waiting message

    async def poll(self, budget: float) -> SourceReading:
        if self.crash:
            raise RuntimeError("https://acme.queue.core.windows.net/q?sig=SECRET")
        if self.hang:
            await asyncio.sleep(3600)
        count = self.counts.pop(0) if len(self.counts) > 1 else self.counts[0]
        if count is None:
            return SourceReading.failed("ServerBusy", "throttled")
        return SourceReading.of(count, oldest_age=self.oldest_age)

    async def aclose(self) -> None:
        return None


@dataclass
class MemoryTarget:
    """A Target in memory: its replicas, its resourceVersion, writes refused with a conflict or an error."""

    replicas: int = 1
    version: int = 1
    conflicts: int = 0  # how many writes to refuse with 409, each after someone else set `other_writer`
    other_writer: int | None = None
    broken: TargetError | None = None
    writes: list[int] = field(default_factory=list)
    ref: ScaleTargetRef = field(default_factory=lambda: ScaleTargetRef("worker"))

    async def read(self) -> ScaleState:
        if self.broken:
            raise self.broken
        return ScaleState(self.replicas, self.replicas, str(self.version))

    async def scale(self, replicas: int, read: ScaleState) -> ScaleState:
        if self.conflicts:
            self.conflicts -= 1
            if self.other_writer is not None:
                self.replicas = self.other_writer
            self.version += 1
            raise TargetConflict()
        assert read.version == str(self.version)
        self.replicas = replicas
        self.version += 1
        self.writes.append(replicas)
        return ScaleState(replicas, replicas, str(self.version))


class Collect:
    """A Reporter that keeps every TickResult."""

    def __init__(self) -> None:
        self.results: list[TickResult] = []

    async def report(self, result: TickResult) -> None:
        self.results.append(result)


def rule(**spec: Any) -> QueueScaler:
    """Rule r in namespace ns, with `make_spec(**spec)`."""
    return QueueScaler(name="r", namespace="ns", spec=make_spec(**spec))
