"""The interface every queue kind implements, and the registry that builds a source from its spec."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import httpx

from controller.model.readings import SourceReading
from controller.model.secrets import SecretResolver
from controller.model.sources.base import SourceSpec


@dataclass(frozen=True)
class SourceContext:
    """What a source needs from its caller: the shared HTTP client, secrets, the rule's namespace, a clock."""

    http: httpx.AsyncClient
    secrets: SecretResolver
    namespace: str = "default"
    now: Callable[[], float] | None = None  # wall-clock seconds; for caching tokens (None: time.time)


class Source(Protocol):
    """One queue of one rule."""

    @property
    def spec(self) -> SourceSpec: ...

    async def poll(self, budget: float) -> SourceReading:
        """The queue's count, or an error; retries transient failures within `budget` seconds. Never raises."""
        ...

    async def aclose(self) -> None:
        """Release what the source holds (tokens, not the shared HTTP client)."""
        ...
