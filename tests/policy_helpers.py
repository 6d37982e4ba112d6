"""Small builders shared by the policy tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from controller.model.readings import Observation, ScalingMemory, SourceReading
from controller.model.rule import QueueScalerSpec, parse_spec
from controller.policy import Decision, decide

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


def seen(time: float, *counts: int | None) -> Observation:
    """An observation; None stands for a failed source."""
    return Observation(
        time=time,
        readings=tuple(
            SourceReading.of(c) if c is not None else SourceReading.failed("ServerBusy", "throttled") for c in counts
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

    def tick(self, time: float, *counts: int | None, paused: bool = False) -> Decision:
        observation = seen(time, *counts)
        decision = decide(self.spec, observation, self.history, self.current, self.memory, time, paused=paused)
        self.memory = decision.memory.with_scale(time, self.current, decision.desired)
        self.current = decision.desired
        self.history.append(observation)
        self.decisions.append(decision)
        return decision

    def replicas(self, ticks: Sequence[tuple[float, int]]) -> list[int]:
        return [self.tick(t, c).desired for t, c in ticks]
