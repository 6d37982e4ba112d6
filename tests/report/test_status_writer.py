"""controller/report/writer.py: status writes off the ticks, bounded, the latest status per rule winning."""

from __future__ import annotations

import asyncio

from controller.report.writer import LatestWins


class SlowServer:
    """Records writes; each takes until released, so the test decides what is in flight."""

    def __init__(self) -> None:
        self.started: list[tuple[str, int]] = []
        self.done: list[tuple[str, int]] = []
        self.in_flight: dict[str, int] = {}
        self.most_at_once = 0
        self.release = asyncio.Event()
        self.fail_on: set[tuple[str, int]] = set()

    async def write(self, item: tuple[str, int]) -> None:
        key, _ = item
        assert key not in self.in_flight, f"two writes at once for {key}"
        self.in_flight[key] = item[1]
        self.started.append(item)
        self.most_at_once = max(self.most_at_once, len(self.in_flight))
        try:
            await self.release.wait()
            if item in self.fail_on:
                raise RuntimeError("the API server broke")
            self.done.append(item)
        finally:
            del self.in_flight[key]


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_at_most_concurrency_writes_are_in_flight_and_all_are_made() -> None:
    server = SlowServer()
    writes = LatestWins(server.write, concurrency=3)
    for i in range(10):
        writes.submit(f"r{i}", (f"r{i}", 1))
    await settle()
    assert len(server.in_flight) == 3
    server.release.set()
    assert await writes.drain(5)
    assert sorted(server.done) == sorted((f"r{i}", 1) for i in range(10))
    assert server.most_at_once == 3
    await writes.close()


async def test_a_newer_status_replaces_a_queued_one_and_keeps_its_place() -> None:
    server = SlowServer()
    writes = LatestWins(server.write, concurrency=1)
    writes.submit("a", ("a", 1))  # in flight
    await settle()
    writes.submit("b", ("b", 1))
    writes.submit("c", ("c", 1))
    writes.submit("b", ("b", 2))  # b had not started: only its latest is written, still before c
    server.release.set()
    assert await writes.drain(5)
    assert server.done == [("a", 1), ("b", 2), ("c", 1)]
    await writes.close()


async def test_a_rule_asking_again_during_its_own_write_waits_for_it_then_sends_the_latest() -> None:
    server = SlowServer()
    writes = LatestWins(server.write, concurrency=4)
    writes.submit("a", ("a", 1))
    await settle()
    writes.submit("a", ("a", 2))
    writes.submit("a", ("a", 3))
    await settle()
    assert server.started == [("a", 1)]  # free writers do not start a second write for the same rule
    server.release.set()
    assert await writes.drain(5)
    assert server.done == [("a", 1), ("a", 3)]
    await writes.close()


async def test_a_failed_write_does_not_stop_the_writers() -> None:
    server = SlowServer()
    server.fail_on = {("a", 1)}
    writes = LatestWins(server.write, concurrency=1)
    writes.submit("a", ("a", 1))
    writes.submit("b", ("b", 1))
    server.release.set()
    assert await writes.drain(5)
    assert server.done == [("b", 1)]
    await writes.close()


async def test_drain_says_when_writes_are_still_waiting_and_forget_drops_a_queued_one() -> None:
    server = SlowServer()
    writes = LatestWins(server.write, concurrency=1)
    writes.submit("a", ("a", 1))
    writes.submit("b", ("b", 1))
    await settle()
    assert not await writes.drain(0.05)
    writes.forget("b")
    assert writes.queued == 0
    server.release.set()
    assert await writes.drain(5)
    assert server.done == [("a", 1)]
    await writes.close()
