"""The interface every scale target implements."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from controller.model.readings import StartupTimes
from controller.model.rule import ScaleTargetRef


@dataclass(frozen=True)
class ScaleState:
    """What the target says about itself: the replicas asked for, those ready, and a version for safe writes.

    `watched`: a watch keeps this target's state current, so reading it again costs nothing and shows a change made
    by someone else at once (the reconciler then reads it on every tick instead of trusting what it last read).
    `startup_seconds`: the time from a scale-up this operator asked for to the target's ready replicas reaching the
    count asked, the lower median of the last five measured (StartupTimes; None until one is measured). The policy
    assumes it when the rule states no `startupTime` (policy.startup_time).
    `removal`: after a scale-in, how the pods removed were chosen (the rule's `inFlight`), for its event;
    `removal_failed`: they could not be chosen by their work, and `removal` says why.
    `removal_blind`: they were not the least busy of all the ready ones (the choice failed, or a rollout's
    ReplicaSets each removed its own), so the rule's account of stops counts their share of what is in flight
    (controller/kills.py, `unchosen_stops`)."""

    replicas: int
    ready_replicas: int | None = None
    version: str | None = None
    watched: bool = False
    startup_seconds: float | None = None
    removal: str | None = None
    removal_failed: bool = False
    removal_blind: bool = False


@dataclass
class StartupMeter:
    """Start-up times as the operator's workload watch measures them (controller/kube/workloads.py), for targets
    that see their own pods: from a scale-up asked for to the moment the ready replicas reached its count. An ask
    scaled down below before its pods came is never measured; of several met together, the last asked wins."""

    asks: list[tuple[float, int]] = field(default_factory=list)  # (asked at, replicas), oldest first
    times: StartupTimes = field(default_factory=StartupTimes)

    def asked(self, at: float, replicas: int) -> None:
        self.asks.append((at, replicas))

    def follow(self, replicas: int, reached: Callable[[int, float], float | None]) -> float | None:
        """Move the asks along: `replicas` asked for now; `reached(n, since)` is when the ready replicas reached
        `n` at or after `since` (None: not yet). Returns the start-up to assume (StartupTimes.value)."""
        kept = []
        measured: float | None = None
        for asked_at, wanted in self.asks:
            if replicas < wanted:
                continue
            met = reached(wanted, asked_at)
            if met is None:
                kept.append((asked_at, wanted))
            else:
                measured = met - asked_at  # of several met together, the last asked
        self.asks = kept
        if measured is not None:
            self.times.add(measured)
        return self.times.value


class TargetError(Exception):
    """The target could not be read or scaled. `code` is machine-readable (NotFound, Forbidden, Conflict, ...)."""

    def __init__(self, code: str, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable


class TargetConflict(TargetError):
    """Someone else changed the target since it was read (HTTP 409): read again and decide again."""

    def __init__(self, message: str = "the target changed since it was read") -> None:
        super().__init__("Conflict", message, retryable=True)


class Target(Protocol):
    @property
    def ref(self) -> ScaleTargetRef: ...

    async def read(self) -> ScaleState:
        """The current scale; raises TargetError."""
        ...

    async def scale(self, replicas: int, read: ScaleState) -> ScaleState:
        """Set replicas, only if the target is still as `read` (raises TargetConflict otherwise)."""
        ...
