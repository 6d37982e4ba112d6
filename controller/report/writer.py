"""Status writes off the rules' ticks: a bounded pool of writers, the latest status per rule wins.

A tick that awaited its own status write would wait on the API server: with thousands of rules and a slow or
throttling server, every rule's next poll would start late, and writes retried on timeout would pile up on the
server that is already slow. Here a tick hands its status over and goes on; at most `concurrency` writes are in
flight, in the order rules asked; a rule that asks again while its write still waits has its newer status sent
instead of the older one (a status is a whole, so only the latest matters).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

Item = TypeVar("Item")


class LatestWins(Generic[Item]):
    """Runs `write(item)` for submitted items, at most `concurrency` at once; a newer item for a key that has not
    been started yet replaces the older one. Writes for one key never overlap."""

    def __init__(self, write: Callable[[Item], Awaitable[object]], *, concurrency: int = 16) -> None:
        self._write = write
        self._concurrency = concurrency
        self._pending: OrderedDict[str, Item] = OrderedDict()
        self._busy: set[str] = set()  # keys with a write in flight
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._workers: list[asyncio.Task[None]] = []

    def submit(self, key: str, item: Item) -> None:
        """Queue `item` for `key` (replacing a queued one, which keeps its place in line)."""
        self._pending[key] = item
        self._idle.clear()
        self._wake.set()
        if not self._workers:
            self._workers = [asyncio.create_task(self._work(), name=f"status writer {i}")
                             for i in range(self._concurrency)]

    def forget(self, key: str) -> None:
        """Drop a queued item (the rule was deleted); a write in flight finishes."""
        self._pending.pop(key, None)

    @property
    def queued(self) -> int:
        return len(self._pending)

    async def drain(self, timeout: float) -> bool:
        """Wait until nothing is queued or in flight (True), or `timeout` passes (False)."""
        try:
            async with asyncio.timeout(timeout):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        for worker in self._workers:
            worker.cancel()
        for worker in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await worker
        self._workers = []

    def _next(self) -> tuple[str, Item] | None:
        for key in self._pending:
            if key not in self._busy:
                return key, self._pending.pop(key)
        return None

    async def _work(self) -> None:
        while True:
            taken = self._next()
            if taken is None:
                if not self._pending and not self._busy:
                    self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            key, item = taken
            self._busy.add(key)
            try:
                await self._write(item)
            except Exception:  # a writer must survive a failed write: the next status is written anyway
                log.exception("status write for %s failed unexpectedly", key)
            finally:
                # Not kept while this worker waits for the next one: the item holds its rule's state, which would
                # outlive the rule's deletion until the worker writes again.
                del taken, item
                self._busy.discard(key)
                if key in self._pending:
                    self._wake.set()  # a newer item for this key waited for this write
