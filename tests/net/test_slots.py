"""controller/net/slots.py: the bound on ticks (and requests) in progress."""

from __future__ import annotations

import asyncio

import pytest

from controller.net.slots import Slots


async def test_waiters_are_served_in_turn_and_a_newcomer_cannot_jump_the_queue() -> None:
    slots = Slots(1)
    await slots.take()
    order: list[str] = []

    async def wait(name: str) -> None:
        async with slots:
            order.append(name)
            await asyncio.sleep(0)

    waiting = [asyncio.create_task(wait(name)) for name in "abc"]
    await asyncio.sleep(0)
    assert slots.waiting == 3 and not slots.free()
    slots.give_back()
    late = asyncio.create_task(wait("late"))  # arrives after the release, before "a" has run
    await asyncio.gather(*waiting, late)
    assert order == ["a", "b", "c", "late"]
    assert slots.in_use == 0 and slots.free()


async def test_a_cancelled_waiter_is_passed_over_and_one_cancelled_with_a_slot_passes_it_on() -> None:
    slots = Slots(1)
    await slots.take()
    first = asyncio.create_task(slots.take())
    second = asyncio.create_task(slots.take())
    third = asyncio.create_task(slots.take())
    await asyncio.sleep(0)
    first.cancel()  # gone before a slot came: passed over
    await asyncio.sleep(0)
    slots.give_back()  # to `second`, which is cancelled before it runs: it hands the slot to `third`
    second.cancel()
    await asyncio.wait_for(third, timeout=1)
    assert second.cancelled() and first.cancelled()
    assert slots.in_use == 1  # `third` holds it
    slots.give_back()
    assert slots.in_use == 0 and slots.waiting == 0


async def test_ten_thousand_waiters_all_get_through() -> None:
    slots = Slots(500)
    done = 0

    async def tick() -> None:
        nonlocal done
        async with slots:
            assert slots.in_use <= 500
            await asyncio.sleep(0)
            done += 1

    await asyncio.wait_for(asyncio.gather(*(tick() for _ in range(10_000))), timeout=30)
    assert done == 10_000 and slots.in_use == 0


def test_a_bound_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Slots(0)
