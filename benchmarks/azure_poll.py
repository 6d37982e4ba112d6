"""Get Queue Metadata polls per second and CPU per poll from one process, through the real `AzureQueuePoller` on the
operator's HTTP client (`controller.net.http.polling_client`), and what Shared Key signing costs.

    .venv/bin/python -m benchmarks.azure_poll [--seconds 3] [--concurrency 1 8 32] [--server fast azurite]

(benchmarks/http_paths.py compares the HTTP paths at 1,000 and 10,000 rules.)

Polls one queue through the real `AzureQueuePoller` (account-key auth: a Shared Key signature per poll, one shared
client; `oldestAge: off`, so a poll is the one Get Queue Metadata call this measures: the default, `peek`, adds a
second call per poll of a queue that is not empty) for a fixed time per concurrency level and transport, and
reports polls/s, latency and the client process's CPU per poll (`time.process_time`, every thread of this
process; the server runs in another process).
Servers, each started on 127.0.0.1 and a free port and stopped at the end:
- `fast`: the small asyncio queue server of benchmarks/capacity.py, in a process of its own. It
  answers in microseconds, so the client's CPU is what limits the rate: the figure that matters for the operator;
- `azurite`: a real Azurite (Node.js). Slower than the client, so it shows latency more than client cost.
Bounded: it ends by itself after about `seconds` x levels x servers + startup.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks.capacity import DEV_KEY, queue_server
from controller.model.fields import SecretKeyRef
from controller.model.sources.azure_queue import AzureQueueSource
from controller.net.http import polling_client
from controller.sources.azure_auth import SharedKey, format_http_date
from controller.sources.azure_queue import API_VERSION, AzureQueuePoller
from controller.sources.base import SourceContext

QUEUE = "bench"
ACCOUNT = "devstoreaccount1"


@dataclass(frozen=True)
class Endpoint:
    """Where the queue service listens and the account's key."""

    name: str
    url: str  # the account's queue endpoint, e.g. http://127.0.0.1:10001/devstoreaccount1
    account: str
    key: str


@dataclass(frozen=True)
class Run:
    server: str
    concurrency: int
    polls: int
    failures: int
    seconds: float
    cpu_seconds: float
    latencies: list[float]

    @property
    def per_second(self) -> float:
        return self.polls / self.seconds

    @property
    def cpu_per_poll(self) -> float:
        return self.cpu_seconds / max(1, self.polls)

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def poll_for(endpoint: Endpoint, seconds: float, concurrency: int) -> Run:
    spec = AzureQueueSource(type="azure-queue", queue_name=QUEUE, account_name=endpoint.account,
                            endpoint=endpoint.url, account_key_secret_ref=SecretKeyRef("s", "k"), oldest_age="off")

    async def secrets(name: str, key: str) -> str:  # noqa: ARG001  (one secret for every ref)
        return endpoint.key

    latencies: list[float] = []
    failures = 0
    async with polling_client(timeout=5.0, max_connections=concurrency) as http:
        poller = AzureQueuePoller(spec, SourceContext(http, secrets))
        for _ in range(concurrency):  # warm the connections, the session, the caches
            await poller.poll(5.0)
        stop_at = time.monotonic() + seconds

        async def worker() -> None:
            nonlocal failures
            while time.monotonic() < stop_at:
                started = time.perf_counter()
                reading = await poller.poll(5.0)
                latencies.append(time.perf_counter() - started)
                failures += reading.error is not None

        started, cpu_started = time.monotonic(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed, cpu = time.monotonic() - started, time.process_time() - cpu_started
    return Run(endpoint.name, concurrency, len(latencies), failures, elapsed, cpu, latencies)


def signing_cost(endpoint: Endpoint, iterations: int = 20_000) -> tuple[float, float]:
    """Seconds per Shared Key signature, and per full header build (date + signature)."""
    key = SharedKey.from_base64(endpoint.account, endpoint.key, where="bench")
    url = f"{endpoint.url}/{QUEUE}?comp=metadata"
    headers = {"x-ms-date": format_http_date(time.time()), "x-ms-version": API_VERSION}
    started = time.perf_counter()
    for _ in range(iterations):
        key.authorization("GET", url, headers)
    sign = (time.perf_counter() - started) / iterations
    started = time.perf_counter()
    for _ in range(iterations):
        fresh = {"x-ms-date": format_http_date(time.time()), "x-ms-version": API_VERSION}
        fresh["Authorization"] = key.authorization("GET", url, fresh)
    build = (time.perf_counter() - started) / iterations
    return sign, build


@contextmanager
def fast_server() -> Iterator[Endpoint]:
    """benchmarks/capacity.py's Get Queue Metadata server, in a process of its own (its CPU is not ours)."""
    with tempfile.TemporaryDirectory(prefix="azure-poll-") as workdir, queue_server(Path(workdir)) as url:
        yield Endpoint("fast", f"{url}/{ACCOUNT}", ACCOUNT, DEV_KEY)


@contextmanager
def azurite_server() -> Iterator[Endpoint]:
    from azure.storage.queue import QueueServiceClient

    from tests.azurite import Azurite

    with Azurite() as azurite:
        queue = QueueServiceClient.from_connection_string(azurite.connection_string).create_queue(QUEUE)
        for index in range(10):
            queue.send_message(f"m{index}")
        yield Endpoint("azurite", azurite.endpoint, azurite.account, azurite.key)


def report(runs: list[Run]) -> str:
    lines = [
        "Get Queue Metadata through AzureQueuePoller (one process, one shared client, account-key auth)",
        f"{'server':>7}  {'conc':>4}  {'polls':>6}  {'polls/s':>7}  {'CPU us/poll':>11}  {'p50 ms':>6}  {'p99 ms':>6}  "
        f"{'fail':>4}",
    ]
    for run in runs:
        lines.append(
            f"{run.server:>7}  {run.concurrency:>4}  {run.polls:>6}  {run.per_second:>7.0f}  "
            f"{run.cpu_per_poll * 1e6:>11.0f}  {run.percentile(0.5) * 1e3:>6.2f}  {run.percentile(0.99) * 1e3:>6.2f}  "
            f"{run.failures:>4}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=3.0, help="time per level and transport (default 3)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--server", nargs="+", choices=["fast", "azurite"], default=["fast", "azurite"])
    args = parser.parse_args()
    if args.seconds <= 0 or args.seconds > 60 or any(c < 1 or c > 256 for c in args.concurrency):
        parser.error("--seconds must be in (0, 60] and --concurrency in [1, 256]")

    runs: list[Run] = []
    signing: tuple[float, float] | None = None
    for server in args.server:
        with fast_server() if server == "fast" else azurite_server() as endpoint:
            for concurrency in args.concurrency:
                runs.append(asyncio.run(poll_for(endpoint, args.seconds, concurrency)))
            signing = signing or signing_cost(endpoint)

    print(report(runs))
    if signing is not None:
        sign, build = signing
        sequential = min(runs, key=lambda run: run.concurrency)
        per_poll = statistics.fmean(sequential.latencies)
        print(f"Shared Key signature: {sign * 1e6:.1f} us; date + signature: {build * 1e6:.1f} us "
              f"({build / sequential.cpu_per_poll:.0%} of the CPU of one poll, "
              f"{per_poll * 1e3:.2f} ms wall at concurrency {sequential.concurrency} on {sequential.server})")


if __name__ == "__main__":
    main()
