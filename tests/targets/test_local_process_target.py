"""The local process target with real subprocesses: start, readiness, stop newest first (or, with `inFlight`, the
least busy), SIGKILL, restarts, close."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path

import pytest

from controller.model.rule import InFlightEndpoint
from controller.targets.base import ScaleState, TargetConflict, TargetError
from controller.targets.local_process import IN_FLIGHT_FILE_ENV, LocalProcessTarget
from tests.commandline import alive

# Each worker sets up its SIGTERM handling, then writes its replica number to a file named after its pid (so a
# test knows it is ready for signals) and waits.
POLITE = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
open(os.path.join(sys.argv[1], str(os.getpid())), "w").write(os.environ["QUEUESCALE_REPLICA"])
while True:
    time.sleep(0.05)
"""
STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(os.path.join(sys.argv[1], str(os.getpid())), "w").write(os.environ["QUEUESCALE_REPLICA"])
while True:
    time.sleep(0.05)
"""
CRASHING = "import sys; sys.exit(3)"
# A worker that serves, as a pod does for `inFlight`, the count the test wrote to `count-<replica>` in argv[1]
# (`GET /in-flight` on 127.0.0.1), writes its port where the target said, and says it is ready (a ready file) once
# `ready-<replica>` exists there too, or at once without argv[2]. It notes in `env-<replica>` whether the target
# told it where to write its port.
COUNTING = f"""
import http.server, os, pathlib, signal, sys, time
folder, replica = pathlib.Path(sys.argv[1]), os.environ["QUEUESCALE_REPLICA"]
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))

class Count(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = (folder / f"count-{{replica}}").read_text().encode()
        self.send_response(200 if self.path == "/in-flight" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Count)
port_file = os.environ.get("{IN_FLIGHT_FILE_ENV}")
(folder / f"env-{{replica}}").write_text("told" if port_file else "not told")
if port_file:
    pathlib.Path(port_file + ".partial").write_text(str(server.server_address[1]))
    os.replace(port_file + ".partial", port_file)
if len(sys.argv) > 2:
    while not (folder / f"ready-{{replica}}").exists():
        time.sleep(0.02)
    pathlib.Path(os.environ["QUEUESCALE_READY_FILE"]).touch()
server.serve_forever()
"""
IN_FLIGHT = InFlightEndpoint(port="in-flight")


def python(script: str, *args: str) -> list[str]:
    return [sys.executable, "-c", script, *args]


def ready_once(gate: Path) -> list[str]:
    """A worker that says it is ready (its ready file) once `gate` exists."""
    return python(f"""
import os, pathlib, time
while not pathlib.Path({str(gate)!r}).exists():
    time.sleep(0.02)
pathlib.Path(os.environ["QUEUESCALE_READY_FILE"]).touch()
while True:
    time.sleep(0.05)
""")


async def wait_for(condition: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


async def scale(target: LocalProcessTarget, replicas: int) -> ScaleState:
    return await target.scale(replicas, await target.read())


async def test_scale_up_starts_that_many_processes(tmp_path: Path) -> None:
    async with LocalProcessTarget(python(POLITE, str(tmp_path))) as target:
        state = await scale(target, 3)
        assert state.replicas == 3
        assert len(target.pids) == 3
        assert all(alive(pid) for pid in target.pids)
        await wait_for(lambda: len(list(tmp_path.iterdir())) == 3)
        assert sorted(p.read_text() for p in tmp_path.iterdir()) == ["1", "2", "3"]


async def test_ready_only_after_the_readiness_delay(tmp_path: Path) -> None:
    async with LocalProcessTarget(python(POLITE, str(tmp_path)), readiness_delay=0.6) as target:
        await scale(target, 2)
        assert (await target.read()).ready_replicas == 0
        await asyncio.sleep(0.8)
        assert (await target.read()).ready_replicas == 2


async def test_ready_only_once_the_process_says_so_with_a_ready_file(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    async with LocalProcessTarget(ready_once(gate), ready_file=True) as target:
        await scale(target, 2)
        await asyncio.sleep(0.5)
        assert (await target.read()).ready_replicas == 0
        gate.touch()
        deadline = time.monotonic() + 10
        while (await target.read()).ready_replicas != 2:
            assert time.monotonic() < deadline, "never ready"
            await asyncio.sleep(0.05)


async def test_ready_at_once_without_a_readiness_delay(tmp_path: Path) -> None:
    async with LocalProcessTarget(python(POLITE, str(tmp_path))) as target:
        state = await scale(target, 2)
        assert state.ready_replicas == 2


async def test_start_up_is_measured_from_the_scale_up_to_the_ready_replicas_not_to_the_read(tmp_path: Path) -> None:
    # As the operator's workload watch measures it (controller/kube/workloads.py), so a live run decides on the
    # start-up its workers really take, as the operator and the simulator do.
    async with LocalProcessTarget(python(POLITE, str(tmp_path)), readiness_delay=0.6) as target:
        state = await scale(target, 2)
        assert state.startup_seconds is None
        await asyncio.sleep(1.5)  # read late: the replicas were ready at 0.6 s
        measured = (await target.read()).startup_seconds
        assert measured is not None and 0.6 <= measured < 1.2, measured


async def test_start_up_with_a_ready_file_is_when_the_file_was_written(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    async with LocalProcessTarget(ready_once(gate), ready_file=True) as target:
        await scale(target, 1)
        await asyncio.sleep(0.5)
        gate.touch()
        await asyncio.sleep(1.5)  # read a second and a half after the worker said it was ready
        measured = (await target.read()).startup_seconds
        # A file's mtime comes from the kernel's coarse clock, up to a tick (a few ms) behind time.time().
        assert measured is not None and 0.49 <= measured < 1.4, measured


async def test_a_scale_up_undone_before_its_replicas_were_ready_is_not_measured(tmp_path: Path) -> None:
    async with LocalProcessTarget(python(POLITE, str(tmp_path)), readiness_delay=0.6) as target:
        await scale(target, 3)
        await scale(target, 1)
        await asyncio.sleep(1.0)
        assert (await target.read()).startup_seconds is None


async def test_scale_down_stops_the_newest_first(tmp_path: Path) -> None:
    async with LocalProcessTarget(python(POLITE, str(tmp_path))) as target:
        await scale(target, 3)
        first, second, third = target.pids
        await wait_for(lambda: len(list(tmp_path.iterdir())) == 3)  # each has its SIGTERM handler
        state = await scale(target, 1)
        assert state.replicas == 1
        await wait_for(lambda: not alive(second) and not alive(third))
        assert alive(first)
        assert target.pids == [first]
        records = {r.pid: r for r in target.started}
        assert records[third].exit_code == 0 and not records[third].killed


async def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    async with LocalProcessTarget(python(STUBBORN, str(tmp_path)), grace_period=0.5) as target:
        await scale(target, 1)
        (pid,) = target.pids
        await wait_for(lambda: len(list(tmp_path.iterdir())) == 1)
        started = time.monotonic()
        await scale(target, 0)
        await asyncio.sleep(0.2)
        assert alive(pid), "SIGKILL came before the grace period"
        await wait_for(lambda: not alive(pid), timeout=5)
        assert time.monotonic() - started >= 0.5
        (record,) = target.started
        assert record.killed and record.exit_code == -signal.SIGKILL


async def test_scale_in_does_not_wait_for_the_grace_period(tmp_path: Path) -> None:
    async with LocalProcessTarget(python(STUBBORN, str(tmp_path)), grace_period=3) as target:
        await scale(target, 2)
        await wait_for(lambda: len(list(tmp_path.iterdir())) == 2)
        started = time.monotonic()
        state = await scale(target, 0)
        assert time.monotonic() - started < 0.5
        assert state.replicas == 0
        assert len(target.pids) == 2  # still stopping


async def test_a_crashed_process_is_replaced_after_a_back_off() -> None:
    async with LocalProcessTarget(python(CRASHING)) as target:
        await scale(target, 1)
        (first,) = [r.pid for r in target.started]
        await wait_for(lambda: not alive(first))
        state = await target.read()
        assert state.replicas == 1 and state.ready_replicas == 0  # asked for, waiting to restart
        await asyncio.sleep(1.1)
        await target.read()
        assert len(target.started) == 2
        assert target.started[0].exit_code == 3


async def test_a_stale_read_is_a_conflict(tmp_path: Path) -> None:
    async with LocalProcessTarget(python(POLITE, str(tmp_path))) as target:
        stale = await target.read()
        await target.scale(1, stale)
        with pytest.raises(TargetConflict):
            await target.scale(2, stale)
        assert len(target.pids) == 1


async def test_a_missing_command_is_a_target_error(tmp_path: Path) -> None:
    async with LocalProcessTarget([str(tmp_path / "no-such-worker")]) as target:
        with pytest.raises(TargetError) as caught:
            await scale(target, 1)
        assert caught.value.code == "StartFailed"
        assert "no-such-worker" in caught.value.message


async def test_every_process_is_stopped_when_the_owner_fails(tmp_path: Path) -> None:
    target = LocalProcessTarget(python(POLITE, str(tmp_path)), grace_period=1)

    async def fail_while_scaled() -> None:
        async with target:
            await scale(target, 3)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await fail_while_scaled()
    assert [r.pid for r in target.started if alive(r.pid)] == []
    assert len(target.started) == 3
    assert target.pids == []


async def test_close_stops_stubborn_processes_too(tmp_path: Path) -> None:
    target = LocalProcessTarget(python(STUBBORN, str(tmp_path)), grace_period=0.5)
    await scale(target, 2)
    await wait_for(lambda: len(list(tmp_path.iterdir())) == 2)
    target.close()
    assert [r.pid for r in target.started if alive(r.pid)] == []
    assert all(r.killed for r in target.started)
    target.close()  # again: nothing left to do


async def test_no_scale_after_close(tmp_path: Path) -> None:
    target = LocalProcessTarget(python(POLITE, str(tmp_path)))
    await target.aclose()
    with pytest.raises(TargetError) as caught:
        await scale(target, 1)
    assert caught.value.code == "Closed"
    assert target.started == []


async def counting_processes(target: LocalProcessTarget, folder: Path, counts: list[str]) -> list[int]:
    """Scale to one process per count, each serving its count; their pids, oldest first, once each has said where
    (or that it was not told where)."""
    for replica, count in enumerate(counts, start=1):
        (folder / f"count-{replica}").write_text(count)
    await scale(target, len(counts))
    await wait_for(lambda: all((folder / f"env-{n}").exists() for n in range(1, len(counts) + 1)))
    await asyncio.sleep(0.2)  # the port file is written just after
    return target.pids


async def test_with_in_flight_a_scale_in_stops_the_least_busy_process_and_keeps_the_busy_ones(tmp_path: Path) -> None:
    async with LocalProcessTarget(python(COUNTING, str(tmp_path)), in_flight=IN_FLIGHT) as target:
        oldest, idle, newest = await counting_processes(target, tmp_path, ["3", "0", "2"])
        state = await scale(target, 2)
        await wait_for(lambda: not alive(idle))
        assert target.pids == [oldest, newest]  # not the newest, as without inFlight: the idle one
        assert state.removal == "the 1 least busy of 3 ready processes go, holding 0 of the 5 messages in flight"
        assert not state.removal_failed and not state.removal_blind
        state = await scale(target, 1)
        await wait_for(lambda: not alive(newest))
        assert target.pids == [oldest]  # 2 in flight go before 3
        assert state.removal is not None and "holding 2 of the 5" in state.removal


async def test_with_in_flight_the_newest_of_equally_busy_processes_goes_first(tmp_path: Path) -> None:
    async with LocalProcessTarget(python(COUNTING, str(tmp_path)), in_flight=IN_FLIGHT) as target:
        older, newer, busy = await counting_processes(target, tmp_path, ["0", "0", "1"])
        await scale(target, 2)
        await wait_for(lambda: not alive(newer))
        assert target.pids == [older, busy]


async def test_with_in_flight_a_process_not_ready_goes_before_idle_ready_ones(tmp_path: Path) -> None:
    async with LocalProcessTarget(python(COUNTING, str(tmp_path), "gated"), ready_file=True,
                                  in_flight=IN_FLIGHT) as target:
        for replica in (2, 3):
            (tmp_path / f"ready-{replica}").touch()  # replica 1, the oldest, never says it is ready
        starting, idle, also_idle = await counting_processes(target, tmp_path, ["0", "0", "0"])
        deadline = time.monotonic() + 10
        while (await target.read()).ready_replicas != 2:
            assert time.monotonic() < deadline, "never ready"
            await asyncio.sleep(0.05)
        state = await scale(target, 2)
        await wait_for(lambda: not alive(starting))
        assert target.pids == [idle, also_idle]
        assert state.removal == ("1 not ready and the 0 least busy of 2 ready processes go, holding 0 of the 0 "
                                 "messages in flight")


async def test_with_in_flight_a_count_that_cannot_be_read_stops_the_newest_and_says_why(tmp_path: Path) -> None:
    async with LocalProcessTarget(python(COUNTING, str(tmp_path)), in_flight=IN_FLIGHT) as target:
        idle, unreadable, busiest = await counting_processes(target, tmp_path, ["0", "many", "9"])
        state = await scale(target, 2)
        await wait_for(lambda: not alive(busiest))
        assert target.pids == [idle, unreadable]
        assert state.removal_failed and state.removal_blind
        assert state.removal == ("processes stopped newest first: pod worker-2 answered something that is not a "
                                 "count on port 'in-flight'/in-flight")


async def test_without_in_flight_a_scale_in_stops_the_newest_whatever_it_holds(tmp_path: Path) -> None:
    async with LocalProcessTarget(python(COUNTING, str(tmp_path))) as target:
        idle, also_idle, busy = await counting_processes(target, tmp_path, ["0", "0", "5"])
        assert (tmp_path / "env-3").read_text() == "not told"
        state = await scale(target, 2)
        await wait_for(lambda: not alive(busy))
        assert target.pids == [idle, also_idle]
        assert state.removal is None
