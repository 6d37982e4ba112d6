"""The demo worker's scale-in behaviours against a real Azurite: what a stopped worker leaves in the queue."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.queue import QueueClient

from controller.demo.worker import CONNECTION_ENV
from tests.azurite import ROOT, Azurite


@pytest.fixture
def queue(azurite: Azurite) -> Iterator[QueueClient]:
    client = QueueClient.from_connection_string(azurite.connection_string, f"w{uuid.uuid4().hex[:12]}")
    client.create_queue()
    try:
        yield client
    finally:
        client.delete_queue()
        client.close()


def worker_holding_one_message(azurite: Azurite, queue: QueueClient, scale_in: str) -> subprocess.Popen[str]:
    """A worker with a 60 s job and a 120 s visibility timeout, once it has received the one message sent."""
    queue.send_message(json.dumps({"n": 1, "sent": time.time()}))
    env = {**os.environ, CONNECTION_ENV: azurite.connection_string, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "controller.demo.worker", "--queue", queue.queue_name, "--work-time", "60",
         "--scale-in", scale_in, "--visibility-timeout", "120"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
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
    env = {**os.environ, CONNECTION_ENV: azurite.connection_string, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "controller.demo.worker", "--queue", queue.queue_name, "--work-time", "0.5",
         "--scale-in", "drain", "--visibility-timeout", "30"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
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
