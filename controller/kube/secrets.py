"""Secrets a rule names, read from the rule's namespace only, cached briefly so key rotation takes effect."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Awaitable, Callable
from typing import Any

from controller.sources.base import SecretResolver, SecretUnavailable

# (namespace, name) -> the Secret's `data` (base64 values); raises ApiLikeError with .status
SecretReader = Callable[[str, str], Awaitable[dict[str, Any]]]


class SecretCache:
    """get(namespace, name, key) with a short TTL; `invalidate` forces a re-read (e.g. after a 403 from Azure).

    Only single Secrets are read (get), never listed: the operator needs no cluster-wide access to Secrets.
    """

    def __init__(self, read: SecretReader, *, ttl: float = 30.0, now: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self.ttl = ttl
        self._now = now
        self._cache: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        # One read in flight per Secret: a thousand rules sharing a Secret that expire together read it once.
        self._inflight: dict[tuple[str, str], asyncio.Future[tuple[float, dict[str, Any]]]] = {}
        self.reads = 0

    def resolver(self, namespace: str) -> SecretResolver:
        return _Resolver(self, namespace)

    def invalidate(self, namespace: str, name: str | None = None) -> None:
        for cached in [k for k in self._cache if k[0] == namespace and (name is None or k[1] == name)]:
            del self._cache[cached]

    async def get(self, namespace: str, name: str, key: str) -> str:
        entry = self._cache.get((namespace, name))
        if entry is None or self._now() - entry[0] > self.ttl:
            entry = await self._fetch(namespace, name)
        data = entry[1]
        if key not in data or data[key] is None:
            keys = ", ".join(sorted(data)) or "none"
            raise SecretUnavailable(
                "SecretKeyNotFound", f"Secret '{name}' in namespace '{namespace}' has no key '{key}' (keys: {keys})"
            )
        try:
            return base64.b64decode(str(data[key]), validate=True).decode("utf-8").strip()
        except (ValueError, UnicodeDecodeError):
            raise SecretUnavailable(
                "SecretKeyInvalid", f"Secret '{name}' key '{key}' in namespace '{namespace}' is not UTF-8 text"
            ) from None


    async def _fetch(self, namespace: str, name: str) -> tuple[float, dict[str, Any]]:
        """Read the Secret, or wait for the read already in flight; failures are not cached."""
        key = (namespace, name)
        pending = self._inflight.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._read_and_store(namespace, name))
            self._inflight[key] = pending
            pending.add_done_callback(lambda done: self._forget_inflight(key, done))
        try:
            return await asyncio.shield(pending)
        except SecretUnavailable:
            raise
        except Exception as exc:
            raise _unavailable(exc, namespace, name) from None

    def _forget_inflight(self, key: tuple[str, str], done: asyncio.Future[Any]) -> None:
        if self._inflight.get(key) is done:
            del self._inflight[key]
        if not done.cancelled():
            done.exception()  # retrieved: a failure nobody waits for any more is not "never retrieved"

    async def _read_and_store(self, namespace: str, name: str) -> tuple[float, dict[str, Any]]:
        try:
            data = await self._read(namespace, name)
        except Exception as exc:
            raise _unavailable(exc, namespace, name) from None
        self.reads += 1
        entry = (self._now(), data)
        self._cache[(namespace, name)] = entry
        return entry


def _unavailable(exc: Exception, namespace: str, name: str) -> SecretUnavailable:
    status = getattr(exc, "status", None)
    if status == 404:
        return SecretUnavailable("SecretNotFound", f"Secret '{name}' not found in namespace '{namespace}'")
    if status == 403:
        return SecretUnavailable(
            "SecretForbidden", f"the operator may not read Secret '{name}' in namespace '{namespace}' (RBAC)"
        )
    what = f"HTTP {status}" if status else type(exc).__name__
    return SecretUnavailable("SecretUnavailable", f"could not read Secret '{name}' in namespace '{namespace}': {what}")


class _Resolver:
    """A rule's view of the cache: Secrets of its own namespace only. (A class made once: one per rule would
    cost a class object per rule, some 2 KB each.)"""

    __slots__ = ("cache", "namespace")

    def __init__(self, cache: SecretCache, namespace: str) -> None:
        self.cache = cache
        self.namespace = namespace

    async def __call__(self, name: str, key: str) -> str:
        return await self.cache.get(self.namespace, name, key)

    def __repr__(self) -> str:
        return f"SecretResolver(namespace={self.namespace!r})"
