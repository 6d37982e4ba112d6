"""The interface every scale target implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from controller.model.rule import ScaleTargetRef


@dataclass(frozen=True)
class ScaleState:
    """What the target says about itself: the replicas asked for, those ready, and a version for safe writes.

    `watched`: a watch keeps this target's state current, so reading it again costs nothing and shows a change made
    by someone else at once (the reconciler then reads it on every tick instead of trusting what it last read).
    `startup_seconds`: the last measured time from a scale-up this operator asked for to the target's ready
    replicas reaching the count asked (None until one is measured). The policy assumes it when the rule states no
    `startupTime` (policy.startup_time)."""

    replicas: int
    ready_replicas: int | None = None
    version: str | None = None
    watched: bool = False
    startup_seconds: float | None = None


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
