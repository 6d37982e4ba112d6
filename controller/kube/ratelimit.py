"""A client-side limit on the operator's API requests: a token bucket, as client-go's `--kube-api-qps/-burst`.

A real API server does not count requests per second; API Priority and Fairness shares its seats (concurrent
requests) among priority levels, and an operator's service account lands in `workload-low` (the
`service-accounts` FlowSchema of k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap/default.go), queued behind its
own earlier requests and rejected with 429 once its queues are full. What fills them is a burst: 10,000 rules
writing their first status in the same few seconds. The bucket turns such a burst into a steady rate the server
serves without queuing, and the operator waits for its own tokens instead of being told to retry.

Requests wait in the order they asked (FIFO), one timer at a time. A scale write is never made to wait
(`charge`): it is the operator's purpose and rare, so it takes its token at once, even into debt that the
writes queued behind it then pay for.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable


class TokenBucket:
    """At most `burst` requests at once, then `rate` a second on average."""

    def __init__(self, rate: float, burst: int, *, now: Callable[[], float] = time.monotonic) -> None:
        """`rate` <= 0: no limit at all."""
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        self.rate = rate
        self.burst = burst
        self._now = now
        self._tokens = float(burst)
        self._at = now()
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None
        self.waited = 0  # requests that had to wait for a token (a measure of how often the limit bites)

    @property
    def unlimited(self) -> bool:
        return self.rate <= 0

    def _refill(self) -> float:
        now = self._now()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now
        return self._tokens

    def try_take(self) -> bool:
        """Take a token if one is there and nobody waits for it; never waits."""
        if self.unlimited:
            return True
        if not self._waiters and self._refill() >= 1:
            self._tokens -= 1
            return True
        return False

    def charge(self) -> None:
        """Take a token now whether or not there is one (the balance may go below zero, down to -burst)."""
        if self.unlimited:
            return
        self._refill()
        self._tokens = max(-float(self.burst), self._tokens - 1)

    async def acquire(self) -> None:
        """Wait for a token, behind every request that asked before."""
        if self.try_take():
            return
        self.waited += 1
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._schedule()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._tokens += 1  # it was handed a token it will not use
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            self._schedule()
            raise

    def _schedule(self) -> None:
        if self._timer is not None or not self._waiters:
            return
        missing = max(0.0, 1.0 - self._refill())
        self._timer = asyncio.get_running_loop().call_later(missing / self.rate, self._wake)

    def _wake(self) -> None:
        self._timer = None
        self._refill()
        while self._waiters and self._tokens >= 1:
            waiter = self._waiters.popleft()
            if waiter.done():
                continue
            self._tokens -= 1
            waiter.set_result(None)
        self._schedule()
