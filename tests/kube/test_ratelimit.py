"""The client-side token bucket (controller/kube/ratelimit.py): a burst at once, then the rate; first come, first
served; a scale write never waits but its token is paid for by the writes behind it.

client-go's default limiter is the same shape: `flowcontrol.NewTokenBucketRateLimiter(qps, burst)`
(k8s.io/client-go/util/flowcontrol/throttle.go, over golang.org/x/time/rate), which starts full (`burst` tokens)
and whose `Accept` blocks until a token is there; tested upstream in throttle_test.go (TestMultithreadedThrottling,
TestBasicThrottle: `burst` requests pass at once, the next waits).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from controller.kube.ratelimit import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_full_bucket_lets_the_burst_through_then_one_token_per_interval_as_client_go_does() -> None:
    clock = Clock()
    bucket = TokenBucket(8.0, 3, now=clock)  # times in eighths of a second: exact in binary
    assert [bucket.try_take() for _ in range(4)] == [True, True, True, False]
    clock.t += 0.0625  # half a token
    assert not bucket.try_take()
    clock.t += 0.0625
    assert bucket.try_take()
    clock.t += 10  # never more than the burst
    assert [bucket.try_take() for _ in range(4)] == [True, True, True, False]


def test_a_charge_goes_into_debt_that_later_requests_pay() -> None:
    clock = Clock()
    bucket = TokenBucket(8.0, 2, now=clock)
    bucket.charge()
    bucket.charge()
    bucket.charge()  # a scale write with the bucket empty: made at once...
    assert not bucket.try_take()
    clock.t += 0.125
    assert not bucket.try_take()  # ...and the next request waits for the token it took
    clock.t += 0.125
    assert bucket.try_take()


def test_no_rate_is_no_limit() -> None:
    bucket = TokenBucket(0.0, 1)
    assert all(bucket.try_take() for _ in range(1000))


def test_a_burst_of_one_at_least() -> None:
    with pytest.raises(ValueError, match="burst"):
        TokenBucket(5.0, 0)


async def test_waiters_are_served_in_order_at_the_rate() -> None:
    bucket = TokenBucket(50.0, 5)
    served: list[tuple[int, float]] = []
    started = time.monotonic()

    async def request(i: int) -> None:
        await bucket.acquire()
        served.append((i, time.monotonic() - started))

    await asyncio.gather(*(request(i) for i in range(15)))
    assert [i for i, _ in served] == list(range(15))  # first come, first served
    assert all(at < 0.05 for _, at in served[:5])  # the burst at once
    # ...then 10 more at 50 a second: 0.2 s (a timer may fire a little late on a busy machine, never early).
    assert served[-1][1] >= 0.18
    assert served[-1][1] < 2.0
    assert bucket.waited == 10


async def test_a_cancelled_waiter_leaves_its_place_to_the_next() -> None:
    bucket = TokenBucket(20.0, 1)
    assert bucket.try_take()
    cancelled = asyncio.create_task(bucket.acquire())
    behind = asyncio.create_task(bucket.acquire())
    await asyncio.sleep(0)
    cancelled.cancel()
    started = time.monotonic()
    await asyncio.wait_for(behind, 2)
    assert time.monotonic() - started < 0.5  # it got the token the cancelled one would have had (0.05 s)
    with pytest.raises(asyncio.CancelledError):
        await cancelled
