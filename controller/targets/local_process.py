"""A scale target made of local processes: N copies of a worker command on this machine.

What a Deployment is to the Kubernetes target, a command is to this one: `scale(n)` starts copies (newest last)
or stops the newest ones, and `read()` says how many were asked for and how many are ready. It runs the demo,
and it can scale queue workers on a single VM with no cluster.

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

from controller.model.rule import ScaleTargetRef
from controller.targets.base import ScaleState, StartupMeter, TargetConflict, TargetError

REPLICA_ENV = "QUEUESCALE_REPLICA"  # each process gets its own number (1, 2, ...) in this variable
READY_FILE_ENV = "QUEUESCALE_READY_FILE"  # with ready_file=True: create this file when ready for work
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
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if not command:
            raise ValueError("command must not be empty")
        self.command = tuple(command)
        self._ref = ref or ScaleTargetRef(name=Path(self.command[0]).name or "worker", api_version="v1",
                                          kind="LocalProcess")
        self.env = dict(os.environ if env is None else env)
        self.cwd = None if cwd is None else str(cwd)
        self.readiness_delay = readiness_delay
        self._ready_dir = Path(tempfile.mkdtemp(prefix="queuescale-ready-")) if ready_file else None
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
        """Start or stop processes (the newest first) to reach `replicas`; TargetConflict if changed since `read`."""
        if self._closed:
            raise TargetError("Closed", "the local process target is closed", retryable=False)
        if replicas < 0:
            raise TargetError("Invalid", f"replicas must be >= 0, got {replicas}", retryable=False)
        if read.version is not None and read.version != str(self._version):
            raise TargetConflict()
        self._replace_exited()
        if replicas > len(self._replicas):
            self._startup.asked(self._monotonic(), replicas)
        while len(self._replicas) > replicas:
            self._begin_stop(self._replicas.pop())
        while len(self._replicas) < replicas:
            number = next(self._numbers)
            try:
                process, ready_file = self._spawn(number)
            except OSError as exc:
                self._version += 1
                raise TargetError(
                    "StartFailed", f"cannot start {self.command[0]}: {exc.strerror or exc}", retryable=False
                ) from None
            self._replicas.append(_Replica(number, process, self._monotonic(), ready_file))
        self._version += 1
        return await self.read()

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
        if self._ready_dir is not None:
            shutil.rmtree(self._ready_dir, ignore_errors=True)
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

    def _spawn(self, number: int) -> tuple[subprocess.Popen[bytes], Path | None]:
        env = {**self.env, REPLICA_ENV: str(number), SPAWNED_AT_ENV: repr(self._wall_clock())}
        ready_file = None
        if self._ready_dir is not None:
            ready_file = self._ready_dir / f"ready-{next(self._spawns)}"
            env[READY_FILE_ENV] = str(ready_file)
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
        return process, ready_file

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
                    replica.process, replica.ready_file = self._spawn(replica.number)
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
