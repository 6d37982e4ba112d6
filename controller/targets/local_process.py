"""A scale target made of local processes: N copies of a worker command on this machine.

What a Deployment is to the Kubernetes target, a command is to this one: `scale(n)` starts copies (newest last)
or stops the newest ones, and `read()` says how many were asked for and how many are ready. It runs the demo,
and it can scale queue workers on a single VM with no cluster.

- With `in_flight` (a rule's `inFlight`), each process is told in `QUEUESCALE_IN_FLIGHT_FILE` where to write the
  port on 127.0.0.1 that answers its in-flight count (`GET <path>`, the operator's reader:
  controller/kube/inflight.py), and a scale-in stops the processes a ReplicaSet would remove given those counts as
  deletion costs: the ones not ready first, then the least busy ready ones; the newest first among equals. If a
  ready process's count cannot be read, the scale-in stops the newest, as without `in_flight`, and says why.

- A process counts as ready once it has run for `readiness_delay` seconds (0: as soon as it started) and, with
  `ready_file=True`, once it has created the file named in its `QUEUESCALE_READY_FILE` variable (a readiness
  probe: say "ready" when the worker can take work, not when its interpreter starts).
- A process that exits on its own is replaced on the next `read()` or `scale()`, as a ReplicaSet replaces a
  crashed pod, after a back-off that doubles per crash of that slot (1 s up to 30 s).
- Each process gets its replica number in `QUEUESCALE_REPLICA` and the wall-clock time it was spawned in
  `QUEUESCALE_SPAWNED_AT` (a worker that models a pod's start-up delay counts it from there, not from its own
  interpreter's start).
- Stopping is SIGTERM, then SIGKILL after `grace_period` seconds: a worker may finish the message it holds.
  Stops run in the background, so a scale-in does not hold up the caller's loop; `aclose()` waits for them.
- Every process started is stopped by `aclose()` (graceful) or `close()` (synchronous, for `finally` blocks and
  interpreter exit); both may be called any number of times. Processes start in their own session, so a Ctrl-C
  at the terminal reaches the owner, which stops them in order, not the workers directly.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from controller.kube.inflight import least_busy_words, read_counts
from controller.model.rule import InFlightEndpoint, ScaleTargetRef
from controller.targets.base import ScaleState, StartupMeter, TargetConflict, TargetError

REPLICA_ENV = "QUEUESCALE_REPLICA"  # each process gets its own number (1, 2, ...) in this variable
READY_FILE_ENV = "QUEUESCALE_READY_FILE"  # with ready_file=True: create this file when ready for work
# With in_flight: write to this file the port on 127.0.0.1 that answers the in-flight count.
IN_FLIGHT_FILE_ENV = "QUEUESCALE_IN_FLIGHT_FILE"
SPAWNED_AT_ENV = "QUEUESCALE_SPAWNED_AT"  # the wall clock at spawn: a worker's own start-up delay counts from it
FIRST_RESTART_DELAY = 1.0
MAX_RESTART_DELAY = 30.0


@dataclass
class _Replica:
    """One slot of the process set: the process now running in it, and how often it crashed."""

    number: int
    process: subprocess.Popen[bytes]
    started: float  # monotonic
    ready_file: Path | None = None
    in_flight_file: Path | None = None
    crashes: int = 0
    restart_at: float | None = None  # monotonic; set while the slot waits to restart after a crash
    ready_at: float | None = None  # monotonic; when it became ready, once a read has seen it ready


@dataclass(frozen=True)
class ProcessRecord:
    """A process this target started, for whoever must prove it is gone (the demo reports these)."""

    pid: int
    replica: int
    started: float  # wall clock
    stopped: float | None = None
    exit_code: int | None = None
    killed: bool = False  # needed SIGKILL after the grace period


class LocalProcessTarget:
    """Implements `Target` with subprocesses of `command`."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        ref: ScaleTargetRef | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        readiness_delay: float = 0.0,
        ready_file: bool = False,
        grace_period: float = 10.0,
        log_dir: str | Path | None = None,
        in_flight: InFlightEndpoint | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """`in_flight`: the rule's `inFlight`: scale-ins stop the least busy processes (see the module's words)."""
        if not command:
            raise ValueError("command must not be empty")
        self.command = tuple(command)
        self._ref = ref or ScaleTargetRef(name=Path(self.command[0]).name or "worker", api_version="v1",
                                          kind="LocalProcess")
        self.env = dict(os.environ if env is None else env)
        self.cwd = None if cwd is None else str(cwd)
        self.readiness_delay = readiness_delay
        self.ready_file = ready_file
        self.in_flight = in_flight
        # The ready files and in-flight port files of the processes, one of each a spawn.
        self._files_dir = (Path(tempfile.mkdtemp(prefix="queuescale-ready-")) if ready_file or in_flight is not None
                           else None)
        self._spawns = itertools.count(1)
        self.grace_period = grace_period
        self.log_dir = None if log_dir is None else Path(log_dir)
        self._monotonic = monotonic
        self._wall_clock = wall_clock
        self._replicas: list[_Replica] = []
        self._stopping: dict[int, subprocess.Popen[bytes]] = {}
        self._stop_tasks: set[asyncio.Task[None]] = set()
        self._numbers = itertools.count(1)
        self._version = 0
        self._startup = StartupMeter()
        self._records: dict[int, ProcessRecord] = {}
        self._processes: dict[int, subprocess.Popen[bytes]] = {}  # every process ever started, by pid
        self._closed = False
        atexit.register(self.close)

    # ----------------------------------------------------------------------------------------------------------
    # Target

    @property
    def ref(self) -> ScaleTargetRef:
        return self._ref

    async def read(self) -> ScaleState:
        """Replicas asked for, those running for at least the readiness delay (and ready by their file), and the
        last start-up measured as the operator's workload watch measures it: from a scale-up asked for to the ready
        replicas reaching its count."""
        self._replace_exited()
        now = self._monotonic()
        ready_times = sorted(
            ready_at for r in self._replicas if (ready_at := self._ready_at(r, now)) is not None
        )
        startup = self._startup.follow(
            len(self._replicas), lambda n, _since: ready_times[n - 1] if len(ready_times) >= n else None)
        return ScaleState(replicas=len(self._replicas), ready_replicas=len(ready_times), version=str(self._version),
                          startup_seconds=startup)

    def _ready_at(self, replica: _Replica, now: float) -> float | None:
        """When the replica became ready (monotonic), or None while it is not."""
        if replica.restart_at is not None or replica.process.poll() is not None:
            return None
        if replica.ready_at is not None:
            return replica.ready_at
        since = replica.started + self.readiness_delay
        if now < since:
            return None
        if replica.ready_file is not None:
            try:
                written = replica.ready_file.stat().st_mtime
            except OSError:
                return None
            since = max(since, now - max(0.0, self._wall_clock() - written))  # the file's time, on our clock
        replica.ready_at = since
        return since

    async def scale(self, replicas: int, read: ScaleState) -> ScaleState:
        """Start or stop processes to reach `replicas`; TargetConflict if changed since `read`. A scale-in stops the
        newest, or with `in_flight` the not ready and then the least busy."""
        if self._closed:
            raise TargetError("Closed", "the local process target is closed", retryable=False)
        if replicas < 0:
            raise TargetError("Invalid", f"replicas must be >= 0, got {replicas}", retryable=False)
        if read.version is not None and read.version != str(self._version):
            raise TargetConflict()
        counts: dict[int, int] | str | None = None
        if self.in_flight is not None and replicas < len(self._replicas):
            counts = await self._read_counts(self.in_flight)
            if read.version is not None and read.version != str(self._version):
                raise TargetConflict()  # scaled by someone else while the counts were read
        self._replace_exited()
        if replicas > len(self._replicas):
            self._startup.asked(self._monotonic(), replicas)
        removal: tuple[str, bool] | None = None
        if replicas < len(self._replicas):
            stopped, removal = self._choose_stopped(len(self._replicas) - replicas, counts)
            gone = {id(r) for r in stopped}
            self._replicas = [r for r in self._replicas if id(r) not in gone]
            for replica in stopped:
                self._begin_stop(replica)
        while len(self._replicas) < replicas:
            number = next(self._numbers)
            try:
                process, ready_file, in_flight_file = self._spawn(number)
            except OSError as exc:
                self._version += 1
                raise TargetError(
                    "StartFailed", f"cannot start {self.command[0]}: {exc.strerror or exc}", retryable=False
                ) from None
            self._replicas.append(_Replica(number, process, self._monotonic(), ready_file, in_flight_file))
        self._version += 1
        state = await self.read()
        if removal is None:
            return state
        return replace(state, removal=removal[0], removal_failed=removal[1], removal_blind=removal[1])

    # ----------------------------------------------------------------------------------------------------------
    # Choosing what a scale-in stops

    async def _read_counts(self, endpoint: InFlightEndpoint) -> dict[int, int] | str:
        """The in-flight count of every ready process, by pid, read as the operator reads a pod's; or why one of
        them could not be read."""
        now = self._monotonic()
        ready = [r for r in self._replicas if self._ready_at(r, now) is not None]
        pods: list[dict[str, Any]] = []
        for replica in ready:
            port = _port_in(replica.in_flight_file)
            if port is None:
                return (f"worker-{replica.number} (pid {replica.process.pid}) wrote no port to its "
                        f"{IN_FLIGHT_FILE_ENV}")
            pods.append(_as_pod(replica, endpoint, port))
        answers = await read_counts(pods, endpoint)
        counts: dict[int, int] = {}
        for replica, answer in zip(ready, answers, strict=True):
            if isinstance(answer, str):
                return answer
            counts[replica.process.pid] = answer
        return counts

    def _choose_stopped(self, removing: int, counts: dict[int, int] | str | None
                        ) -> tuple[list[_Replica], tuple[str, bool] | None]:
        """The `removing` replicas to stop, the newest first; with `in_flight`, as a ReplicaSet ranks pods whose
        deletion costs are their counts: those not ready first, then the ready ones by count (one ready since the
        counts were read has none: 0, as a pod without a cost), the newest first among equals. Also the words for
        the scale-in's event and whether its counts failed (None: no `in_flight`)."""
        newest_first = self._replicas[::-1]
        if counts is None:
            return newest_first[:removing], None
        if isinstance(counts, str):
            return newest_first[:removing], (f"processes stopped newest first: {counts}", True)
        now = self._monotonic()
        ready = {id(r) for r in newest_first if self._ready_at(r, now) is not None}

        def cost(replica: _Replica) -> int:
            return counts.get(replica.process.pid, 0) if id(replica) in ready else -1

        chosen = sorted(newest_first, key=cost)[:removing]  # a stable sort: the newest first among equals
        ready_chosen = [r for r in chosen if id(r) in ready]
        not_ready = len(chosen) - len(ready_chosen)
        words = (f"{not_ready} not ready and " if not_ready else "") + least_busy_words(
            [cost(r) for r in ready_chosen], list(counts.values()), "processes")
        return chosen, (words, False)

    # ----------------------------------------------------------------------------------------------------------
    # What the owner may want to know

    @property
    def pids(self) -> list[int]:
        """Processes running now, oldest first (those being stopped included)."""
        running = [r.process.pid for r in self._replicas if r.process.poll() is None]
        return running + [p.pid for p in self._stopping.values() if p.poll() is None]

    @property
    def started(self) -> list[ProcessRecord]:
        """Every process this target ever started, with how it ended."""
        self._record_exits()
        return list(self._records.values())

    # ----------------------------------------------------------------------------------------------------------
    # Stopping

    async def aclose(self) -> None:
        """Stop every process (SIGTERM, SIGKILL after the grace period) and wait until all are gone."""
        self._closed = True
        while self._replicas:
            self._begin_stop(self._replicas.pop())
        tasks = list(self._stop_tasks)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self.close()

    def close(self) -> None:
        """Synchronous and idempotent: stop whatever is still running, SIGKILL after the grace period."""
        self._closed = True
        processes = [r.process for r in self._replicas] + list(self._stopping.values())
        self._replicas.clear()
        for process in processes:
            self._signal(process, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_period
        for process in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            if process.poll() is None:
                self._signal(process, signal.SIGKILL)
                process.wait()
                self._mark(process, killed=True)
        self._stopping.clear()
        self._record_exits()
        for task in self._stop_tasks:
            task.cancel()
        if self._files_dir is not None:
            shutil.rmtree(self._files_dir, ignore_errors=True)
        atexit.unregister(self.close)

    async def __aenter__(self) -> LocalProcessTarget:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _begin_stop(self, replica: _Replica) -> None:
        process = replica.process
        if process.poll() is not None:
            self._record_exits()
            return
        self._signal(process, signal.SIGTERM)
        self._stopping[process.pid] = process
        try:
            task = asyncio.get_running_loop().create_task(self._finish_stop(process))
        except RuntimeError:  # no loop: close() will wait for it
            return
        self._stop_tasks.add(task)
        task.add_done_callback(self._stop_tasks.discard)

    async def _finish_stop(self, process: subprocess.Popen[bytes]) -> None:
        deadline = self._monotonic() + self.grace_period
        while process.poll() is None and self._monotonic() < deadline:
            await asyncio.sleep(0.05)
        if process.poll() is None:
            self._signal(process, signal.SIGKILL)
            while process.poll() is None:
                await asyncio.sleep(0.01)
            self._mark(process, killed=True)
        self._stopping.pop(process.pid, None)
        self._record_exits()

    @staticmethod
    def _signal(process: subprocess.Popen[bytes], signum: signal.Signals) -> None:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signum)

    # ----------------------------------------------------------------------------------------------------------
    # Starting and replacing

    def _spawn(self, number: int) -> tuple[subprocess.Popen[bytes], Path | None, Path | None]:
        """A process for replica `number`, with its ready file and its in-flight port file (None: not asked)."""
        env = {**self.env, REPLICA_ENV: str(number), SPAWNED_AT_ENV: repr(self._wall_clock())}
        ready_file = in_flight_file = None
        spawn = next(self._spawns)
        if self._files_dir is not None and self.ready_file:
            ready_file = self._files_dir / f"ready-{spawn}"
            env[READY_FILE_ENV] = str(ready_file)
        if self._files_dir is not None and self.in_flight is not None:
            in_flight_file = self._files_dir / f"in-flight-port-{spawn}"
            env[IN_FLIGHT_FILE_ENV] = str(in_flight_file)
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            with (self.log_dir / f"worker-{number}.log").open("ab") as log:
                process = subprocess.Popen(
                    self.command, env=env, cwd=self.cwd, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True,
                )
        else:
            process = subprocess.Popen(
                self.command, env=env, cwd=self.cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True,
            )
        self._records[process.pid] = ProcessRecord(process.pid, number, self._wall_clock())
        self._processes[process.pid] = process
        return process, ready_file, in_flight_file

    def _replace_exited(self) -> None:
        """Restart replicas whose process exited on its own, each after its back-off."""
        now = self._monotonic()
        for replica in self._replicas:
            if replica.process.poll() is None:
                continue
            if replica.restart_at is None:
                replica.crashes += 1
                delay = min(MAX_RESTART_DELAY, FIRST_RESTART_DELAY * 2 ** (replica.crashes - 1))
                replica.restart_at = now + delay
                self._record_exits()
            if now >= replica.restart_at and not self._closed:
                try:
                    replica.process, replica.ready_file, replica.in_flight_file = self._spawn(replica.number)
                except OSError:
                    replica.restart_at = now + MAX_RESTART_DELAY
                    continue
                replica.started, replica.restart_at, replica.ready_at = now, None, None

    def _record_exits(self) -> None:
        for process in self._processes.values():
            if process.poll() is not None:
                self._mark(process)

    def _mark(self, process: subprocess.Popen[bytes], *, killed: bool = False) -> None:
        record = self._records[process.pid]
        if record.stopped is None:
            record = replace(record, stopped=self._wall_clock(), exit_code=process.returncode)
        if killed:
            record = replace(record, killed=True)
        self._records[process.pid] = record


def _port_in(path: Path | None) -> int | None:
    """The port a process wrote to its in-flight port file, or None while it wrote none."""
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and 0 < int(text) < 65536 else None


def _as_pod(replica: _Replica, endpoint: InFlightEndpoint, port: int) -> dict[str, Any]:
    """The process as the operator's reader sees a ready pod: a name, an IP and the endpoint's named port."""
    return {"metadata": {"name": f"worker-{replica.number}"}, "status": {"podIP": "127.0.0.1"},
            "spec": {"containers": [{"ports": [{"name": endpoint.port, "containerPort": port}]}]}}
