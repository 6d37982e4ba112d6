"""The demo worker against a real Azurite: what a stopped worker leaves in the queue, and the in-flight count it
serves (with the local process target, a scale-in then stops the idle worker and keeps the busy one)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.queue import QueueClient

from controller.demo.worker import CONNECTION_ENV
from controller.model.rule import InFlightEndpoint
from controller.targets.local_process import IN_FLIGHT_FILE_ENV, LocalProcessTarget
from tests.azurite import ROOT, Azurite
from tests.commandline import alive


@pytest.fixture
def queue(azurite: Azurite) -> Iterator[QueueClient]:
    client = QueueClient.from_connection_string(azurite.connection_string, f"w{uuid.uuid4().hex[:12]}")
    client.create_queue()
    try:
        yield client
    finally:
        client.delete_queue()
        client.close()


def start_worker(azurite: Azurite, queue: QueueClient, *args: str, env: dict[str, str] | None = None
                 ) -> subprocess.Popen[str]:
    """`python -m controller.demo.worker` on `queue` with `args`, its events on stdout."""
    process = subprocess.Popen(
        [sys.executable, "-m", "controller.demo.worker", "--queue", queue.queue_name, *args],
        env={**os.environ, CONNECTION_ENV: azurite.connection_string, "PYTHONPATH": str(ROOT), **(env or {})},
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    return process


def worker_holding_one_message(azurite: Azurite, queue: QueueClient, scale_in: str) -> subprocess.Popen[str]:
    """A worker with a 60 s job and a 120 s visibility timeout, once it has received the one message sent."""
    queue.send_message(json.dumps({"n": 1, "sent": time.time()}))
    process = start_worker(azurite, queue, "--work-time", "60", "--scale-in", scale_in, "--visibility-timeout", "120")
    assert process.stdout is not None
    deadline = time.monotonic() + 20
    for line in process.stdout:
        if json.loads(line)["event"] == "received" or time.monotonic() > deadline:
            break
    return process


def stop(process: subprocess.Popen[str]) -> list[dict[str, Any]]:
    """SIGTERM, then its remaining events; SIGKILL if it did not end within 10 s."""
    process.send_signal(signal.SIGTERM)
    try:
        out, _ = process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_a_released_message_is_taken_again_at_once_not_after_its_visibility_timeout(
    azurite: Azurite, queue: QueueClient
) -> None:
    process = worker_holding_one_message(azurite, queue, "release")
    try:
        stopped = time.monotonic()
        events = stop(process)
        assert process.returncode == 0
        assert time.monotonic() - stopped < 5  # it did not finish its 60 s job
        assert [e["event"] for e in events] == ["released", "stopped"], events
        again = list(queue.receive_messages(max_messages=1, visibility_timeout=30))
        assert [m.dequeue_count for m in again] == [2]  # visible now, 118 s before its visibility timeout
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_killed_worker_leaves_its_message_invisible_for_the_visibility_timeout(
    azurite: Azurite, queue: QueueClient
) -> None:
    process = worker_holding_one_message(azurite, queue, "kill")
    try:
        events = stop(process)
        assert process.returncode == -signal.SIGTERM  # the default action: no handler, no clean-up
        assert events == []
        assert list(queue.receive_messages(max_messages=1, visibility_timeout=30)) == []
        assert queue.get_queue_properties().approximate_message_count == 1  # still there, invisible
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_done_message_says_the_work_it_slept_and_the_delete_takes_the_rest_of_its_time(
    azurite: Azurite, queue: QueueClient
) -> None:
    queue.send_message(json.dumps({"n": 7, "sent": time.time()}))
    process = start_worker(azurite, queue, "--work-time", "0.5", "--scale-in", "drain", "--visibility-timeout", "30")
    assert process.stdout is not None
    try:
        deadline = time.monotonic() + 20
        done: dict[str, Any] = {}
        for line in process.stdout:
            event = json.loads(line)
            if event["event"] == "done" or time.monotonic() > deadline:
                done = event
                break
        assert done["event"] == "done" and done["message"] == 7
        assert done["work"] == 0.5
        assert 0.5 <= done["done"] - done["received"] < 5.0
        assert queue.get_queue_properties().approximate_message_count == 0  # deleted
    finally:
        stop(process)


def test_a_delete_after_the_visibility_timeout_fails_only_once_another_receive_took_the_message(
    queue: QueueClient,
) -> None:
    # What the simulator keeps of Azure (controller/simulator/world.py): work that outlasts its visibility timeout
    # leaves the message visible again, but the first worker's pop receipt stays good until another Get Messages
    # takes it ("If deletion fails using this popreceipt then the message has been dequeued by another client").
    queue.send_message("overrun, nobody else takes it")
    first = next(iter(queue.receive_messages(max_messages=1, visibility_timeout=1)))
    time.sleep(2.5)  # visible again, not taken
    queue.delete_message(first.id, first.pop_receipt)  # still good: the message is gone, once
    assert queue.get_queue_properties().approximate_message_count == 0
    assert list(queue.peek_messages(max_messages=1)) == []

    queue.send_message("overrun, another worker takes it")
    mine = next(iter(queue.receive_messages(max_messages=1, visibility_timeout=1)))
    time.sleep(2.5)
    theirs = next(iter(queue.receive_messages(max_messages=1, visibility_timeout=30)))
    assert (theirs.id, theirs.dequeue_count) == (mine.id, 2)
    with pytest.raises(HttpResponseError) as failed:
        queue.delete_message(mine.id, mine.pop_receipt)  # the first worker's delete fails: a duplicate
    assert failed.value.status_code == 400 and "ErrorCode:PopReceiptMismatch" in str(failed.value)
    queue.delete_message(theirs.id, theirs.pop_receipt)
    assert queue.get_queue_properties().approximate_message_count == 0


def next_events(stdout: IO[str], wanted: str, n: int = 1, timeout: float = 20) -> list[dict[str, Any]]:
    """Read the worker's events until `n` of kind `wanted` came (or the deadline passed); those."""
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(found) < n and time.monotonic() < deadline:
        line = stdout.readline()
        if not line:
            break
        event = json.loads(line)
        if event["event"] == wanted:
            found.append(event)
    return found


def in_flight(port: int, path: str = "/in-flight") -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5, trust_env=False)


def test_the_in_flight_endpoint_answers_the_messages_the_worker_holds_now(
    azurite: Azurite, queue: QueueClient, tmp_path: Path
) -> None:
    port_file = tmp_path / "port"
    process = start_worker(azurite, queue, "--work-time", "4", "--concurrency", "4", "--visibility-timeout", "60",
                           env={IN_FLIGHT_FILE_ENV: str(port_file)})
    assert process.stdout is not None
    try:
        assert next_events(process.stdout, "ready")
        port = int(port_file.read_text())  # written before it said it was ready
        idle = in_flight(port)
        assert (idle.status_code, idle.text) == (200, "0\n")
        for n in range(3):
            queue.send_message(json.dumps({"n": n, "sent": time.time()}))
        assert len(next_events(process.stdout, "received", 3)) == 3
        assert in_flight(port).text == "3\n"  # each job takes 4 s
        assert in_flight(port, "/elsewhere").status_code == 404
        assert len(next_events(process.stdout, "done", 3)) == 3
        assert in_flight(port).text == "0\n"  # deleted: none held
    finally:
        stop(process)


async def test_a_scale_in_with_in_flight_stops_the_idle_worker_and_keeps_the_busy_newest_one(
    azurite: Azurite, queue: QueueClient, tmp_path: Path
) -> None:
    # Without inFlight the newest would go, the one holding the message.
    target = LocalProcessTarget(
        [sys.executable, "-m", "controller.demo.worker", "--queue", queue.queue_name, "--work-time", "60",
         "--scale-in", "kill", "--visibility-timeout", "120"],
        env={**os.environ, CONNECTION_ENV: azurite.connection_string, "PYTHONPATH": str(ROOT)},
        cwd=ROOT, ready_file=True, grace_period=2, log_dir=tmp_path, in_flight=InFlightEndpoint(port="in-flight"))
    async with target:
        await target.scale(2, await target.read())
        deadline = time.monotonic() + 30
        while (await target.read()).ready_replicas != 2:
            assert time.monotonic() < deadline, "never ready"
            await asyncio.sleep(0.1)
        idle, busy = target.pids
        os.kill(idle, signal.SIGSTOP)  # so that the newest takes the message
        try:
            await asyncio.sleep(0.5)  # a receive it had asked for has been answered
            queue.send_message(json.dumps({"n": 1, "sent": time.time()}))
            log = tmp_path / "worker-2.log"
            while '"received"' not in (log.read_text() if log.exists() else ""):
                assert time.monotonic() < deadline + 20, "the newest worker never took the message"
                await asyncio.sleep(0.1)
        finally:
            os.kill(idle, signal.SIGCONT)
        state = await target.scale(1, await target.read())
        assert state.removal == "the 1 least busy of 2 ready processes go, holding 0 of the 1 messages in flight"
        deadline = time.monotonic() + 10
        # Until the target has reaped it, a stopped worker still counts among its pids (as one being stopped).
        while alive(idle) or target.pids != [busy]:
            assert time.monotonic() < deadline, f"the idle worker was not stopped (pids {target.pids})"
            await asyncio.sleep(0.05)
        assert alive(busy) and target.pids == [busy]
