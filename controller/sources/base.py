"""The interface every queue kind implements, and the registry that builds a source from its spec."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import httpx

from controller.policy import SourceReading
from controller.spec import SourceSpec


class SecretUnavailable(Exception):
    """A secret a rule names cannot be read. `code` is machine-readable (SecretNotFound, KeyNotFound, Forbidden).

    The message names the secret and key, never a value.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class SecretResolver(Protocol):
    """Reads one key of a Secret in the rule's namespace."""

    async def __call__(self, name: str, key: str) -> str: ...


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


SourceFactory = Callable[[SourceSpec, SourceContext], Source]
_FACTORIES: dict[str, SourceFactory] = {}


def register_source_factory(type_name: str, factory: SourceFactory) -> None:
    _FACTORIES[type_name] = factory


def build_source(spec: SourceSpec, context: SourceContext) -> Source:
    """A live source for `spec`; raises KeyError for a kind with no poller (a bug: the spec parser knew it)."""
    return _FACTORIES[spec.type](spec, context)
