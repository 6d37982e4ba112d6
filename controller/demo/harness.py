"""What every live run stands on: Azurite, one queue, worker processes, and the operator's own reconciler.

Both live runs (`queuescale demo`, the default bursts, and `queuescale demo --scenario`) start the same things the
same way and stop them the same way: every process they started, by PID, also on Ctrl-C, SIGTERM or an error. They
differ only in what they send, what they record and what they write at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from controller.demo.azurite import AzuriteError, AzuriteQueueService
from controller.demo.outages import OutageProxy
from controller.demo.worker import CONNECTION_ENV
from controller.model.rule import InFlightEndpoint, QueueScaler
from controller.model.secrets import SecretUnavailable
from controller.net.http import polling_client
from controller.reconciler import Reconciler, Reporter, SystemClock
from controller.simulator.scenario import Outage
from controller.sources import build_source
from controller.sources.azure_auth import scrub
from controller.sources.base import Source, SourceContext
from controller.targets.local_process import LocalProcessTarget

QUEUE_NAME = "demo-jobs"
SECRET = ("demo-queue", "connection-string")
EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130
SENDERS = 16  # threads sending messages: the emulator takes a burst faster from several


class DemoSecrets:
    """The rule's SecretResolver: the one connection string, never shown."""

    def __init__(self, connection_string: str) -> None:
        self._value = connection_string

    def __repr__(self) -> str:
        return "DemoSecrets(1 secret)"

    async def __call__(self, name: str, key: str) -> str:
        if (name, key) != SECRET:
            raise SecretUnavailable("SecretNotFound", f"Secret '{name}' key '{key}' is not the demo's")
        return self._value


def worker_environ() -> dict[str, str]:
    """The workers' environment: ours, minus any other connection strings or queuescale secrets."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("QUEUESCALE_SECRET_", "AZURE_STORAGE_"))}


class LiveHarness:
    """One live run's processes and their clean-up. `run(main)` runs `main` with everything stopped after it;
    `close()` is the synchronous last resort (idempotent)."""

    def __init__(self, out_dir: Path, out: TextIO, err: TextIO) -> None:
        self.out_dir = out_dir
        self.workers_dir = out_dir / "workers"
        self.out = out
        self.err = err
        self.azurite: AzuriteQueueService | None = None
        self.target: LocalProcessTarget | None = None
        self.outage_proxy: OutageProxy | None = None  # between the rule's source and Azurite, when outages are asked
        self.stop = asyncio.Event()  # set by Ctrl-C, SIGTERM, or the run when it is over
        self.interrupted = False
        self._service_client: Any = None
        self._main: asyncio.Task[Any] | None = None

    def run(self, main: Callable[[], Awaitable[int]]) -> int:
        """Run `main` in a fresh event loop; returns its exit status. Every process started is stopped before this
        returns, whatever happened."""
        try:
            return asyncio.run(self._guarded(main))
        except KeyboardInterrupt:
            print("demo: interrupted", file=self.err)
            return EXIT_INTERRUPTED
        except BrokenPipeError:
            raise  # the reader of our output went away (`| head`): the command line ends quietly; clean-up still runs
        except Exception as exc:  # e.g. Azurite died under us; everything started is still stopped below
            first_line = (str(exc).splitlines() or [""])[0]
            print(f"demo: failed: {type(exc).__name__}: {scrub(first_line)[:300]}", file=self.err)
            return EXIT_FAILED
        finally:
            self.close()

    def close(self) -> None:
        """Stop every process still running, whatever happened before. Idempotent."""
        if self.target is not None:
            self.target.close()
        if self.azurite is not None:
            self.azurite.stop()

    async def _guarded(self, main: Callable[[], Awaitable[int]]) -> int:
        try:
            from azure.storage.queue import QueueServiceClient
        except ImportError:
            print("the demo's workers need the Azure Storage Queue SDK: pip install 'queuescale[demo]' "
                  "(or run `bash scripts/bootstrap`)", file=self.err)
            return EXIT_FAILED
        self._service_client = QueueServiceClient
        loop = asyncio.get_running_loop()
        self._main = asyncio.current_task()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self._on_signal)
        try:
            return await main()
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)

    def _on_signal(self) -> None:
        if self.interrupted and self._main is not None:
            self._main.cancel()  # a second Ctrl-C: stop waiting for graceful ends (clean-up still runs)
        self.interrupted = True
        self.stop.set()

    def clear_worker_logs(self) -> None:
        """The output folder, without the worker logs of an earlier run (the run reads every log in it)."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for old in self.workers_dir.glob("*.log") if self.workers_dir.exists() else []:
            old.unlink()

    async def start_queue(self) -> Any | None:
        """Start Azurite and create the demo's queue; its queue client, or None when Azurite could not start (said
        on err)."""
        self.azurite = AzuriteQueueService()
        print(f"starting Azurite on 127.0.0.1:{self.azurite.port} ...", file=self.out, flush=True)
        try:
            await asyncio.to_thread(self.azurite.start)
        except AzuriteError as exc:
            print(f"demo: {exc}", file=self.err)
            return None
        service = self._service_client.from_connection_string(self.azurite.connection_string)
        return await asyncio.to_thread(service.create_queue, QUEUE_NAME)

    def start_workers(self, worker_arguments: Sequence[str], grace_period: float, *,
                      in_flight: InFlightEndpoint | None = None) -> LocalProcessTarget:
        """The local process target that runs `controller.demo.worker` on the demo's queue, one process a replica
        (none yet: the reconciler starts them). `in_flight`: the rule's `inFlight`: each worker serves its count on
        the endpoint's path, and a scale-in stops the least busy."""
        assert self.azurite is not None, "start_queue() first"
        serving = [] if in_flight is None else ["--in-flight-path", in_flight.path]
        self.target = LocalProcessTarget(
            [sys.executable, "-m", "controller.demo.worker", "--queue", QUEUE_NAME, *worker_arguments, *serving],
            env={**worker_environ(), CONNECTION_ENV: self.azurite.connection_string},
            ready_file=True,
            grace_period=grace_period,
            log_dir=self.workers_dir,
            in_flight=in_flight,
        )
        return self.target

    @contextlib.asynccontextmanager
    async def reconciling(self, rule: QueueScaler, reporter: Reporter,
                          outages: Sequence[Outage] = ()) -> AsyncIterator[float]:
        """The rule's reconciler scaling the workers from the real azure-queue source, until the block ends; yields
        the wall-clock time it started. `outages`: windows (from that time) when the source's polls fail, through an
        `OutageProxy` between it and Azurite (the workers still reach Azurite directly). On the way out: the
        reconciler, the proxy, the workers and Azurite are stopped."""
        assert self.azurite is not None and self.target is not None, "start_queue() and start_workers() first"
        connection = self.azurite.connection_string
        try:
            if outages:
                self.outage_proxy = OutageProxy(f"http://127.0.0.1:{self.azurite.port}", outages)
                await self.outage_proxy.start()
                connection = self.azurite.connection_string_via(f"{self.outage_proxy.url}/{self.azurite.account}")
                print(f"outage proxy for the rule's polls on 127.0.0.1:{self.outage_proxy.port}", file=self.out,
                      flush=True)
            async with polling_client(timeout=5.0) as http:
                source: Source = build_source(rule.spec.sources[0], SourceContext(
                    http=http, secrets=DemoSecrets(connection), namespace=rule.namespace))
                reconciler = Reconciler(rule, [source], self.target, SystemClock(), reporter=reporter)
                started = time.time()
                if self.outage_proxy is not None:
                    self.outage_proxy.begin(started)
                loop_task = asyncio.create_task(reconciler.run(self.stop))
                try:
                    yield started
                finally:
                    self.stop.set()
                    await finish(loop_task)
                    await source.aclose()
        finally:
            if self.outage_proxy is not None:
                await self.outage_proxy.stop()
            await self.target.aclose()
            self.azurite.stop()

    def processes(self, started: float) -> list[dict[str, object]]:
        """Every worker process the run started, with its times since `started`, for the summary."""
        assert self.target is not None
        return [
            {"pid": p.pid, "replica": p.replica, "started": round(p.started - started, 2),
             "stopped": None if p.stopped is None else round(p.stopped - started, 2),
             "exit_code": p.exit_code, "killed": p.killed}
            for p in self.target.started
        ]


async def finish(*tasks: asyncio.Task[Any]) -> None:
    """Wait for each task to end; what it raised or a cancellation is its own business, the clean-up goes on."""
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
