"""Get Queue Metadata polls per second from one process against a local Azurite, and what Shared Key signing costs.

    .venv/bin/python -m benchmarks.azure_poll [--seconds 3] [--concurrency 1 8 32]

Starts its own Azurite on 127.0.0.1 and a free port, polls one queue through the real `AzureQueuePoller`
(account-key auth, one shared httpx.AsyncClient) for a fixed time per concurrency level, times the signing alone
in the same run, and stops Azurite. Bounded: it ends by itself after about `seconds` x levels + startup.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass

import httpx
from azure.storage.queue import QueueServiceClient

from controller.sources.azure_auth import SharedKey, format_http_date
from controller.sources.azure_queue import API_VERSION, AzureQueuePoller, AzureQueueSource
from controller.sources.base import SourceContext
from controller.spec import SecretKeyRef
from tests.azurite import Azurite

QUEUE = "bench"


@dataclass(frozen=True)
class Run:
    concurrency: int
    polls: int
    failures: int
    seconds: float
    latencies: list[float]

    @property
    def per_second(self) -> float:
        return self.polls / self.seconds

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def poll_for(azurite: Azurite, seconds: float, concurrency: int) -> Run:
    spec = AzureQueueSource(type="azure-queue", queue_name=QUEUE, account_name=azurite.account,
                            endpoint=azurite.endpoint, account_key_secret_ref=SecretKeyRef("s", "k"))

    async def secrets(name: str, key: str) -> str:  # noqa: ARG001  (one secret for every ref)
        return azurite.key

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    latencies: list[float] = []
    failures = 0
    async with httpx.AsyncClient(limits=limits) as http:
        poller = AzureQueuePoller(spec, SourceContext(http, secrets))
        await poller.poll(5.0)  # warm the connection
        stop_at = time.monotonic() + seconds

        async def worker() -> None:
            nonlocal failures
            while time.monotonic() < stop_at:
                started = time.perf_counter()
                reading = await poller.poll(5.0)
                latencies.append(time.perf_counter() - started)
                failures += reading.error is not None

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.monotonic() - started
    return Run(concurrency, len(latencies), failures, elapsed, latencies)


async def raw_requests_for(azurite: Azurite, seconds: float) -> float:
    """Baseline: signed GETs per second over bare httpx, one at a time (what the poller adds is the rest)."""
    key = SharedKey.from_base64(azurite.account, azurite.key, where="bench")
    url = f"{azurite.endpoint}/{QUEUE}?comp=metadata"
    async with httpx.AsyncClient() as http:
        requests = 0
        stop_at = time.monotonic() + seconds
        started = time.monotonic()
        while time.monotonic() < stop_at:
            headers = {"x-ms-date": format_http_date(time.time()), "x-ms-version": API_VERSION}
            headers["Authorization"] = key.authorization("GET", url, headers)
            (await http.get(url, headers=headers, timeout=5.0)).raise_for_status()
            requests += 1
        return requests / (time.monotonic() - started)


def signing_cost(azurite: Azurite, iterations: int = 20_000) -> tuple[float, float]:
    """Seconds per Shared Key signature, and per full header build (date + signature)."""
    key = SharedKey.from_base64(azurite.account, azurite.key, where="bench")
    url = f"{azurite.endpoint}/{QUEUE}?comp=metadata"
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=3.0, help="time per concurrency level (default 3)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    args = parser.parse_args()
    if args.seconds <= 0 or args.seconds > 60 or any(c < 1 or c > 256 for c in args.concurrency):
        parser.error("--seconds must be in (0, 60] and --concurrency in [1, 256]")

    with Azurite() as azurite:
        service = QueueServiceClient.from_connection_string(azurite.connection_string)
        queue = service.create_queue(QUEUE)
        for index in range(10):
            queue.send_message(f"m{index}")
        runs = [asyncio.run(poll_for(azurite, args.seconds, c)) for c in args.concurrency]
        baseline = asyncio.run(raw_requests_for(azurite, args.seconds))
        sign, build = signing_cost(azurite)

    print("Get Queue Metadata against Azurite (one process, one shared httpx.AsyncClient, account-key auth)")
    print(f"{'concurrency':>11}  {'polls':>7}  {'polls/s':>8}  {'p50 ms':>7}  {'p99 ms':>7}  {'failures':>8}")
    for run in runs:
        print(f"{run.concurrency:>11}  {run.polls:>7}  {run.per_second:>8.0f}  {run.percentile(0.5) * 1e3:>7.2f}  "
              f"{run.percentile(0.99) * 1e3:>7.2f}  {run.failures:>8}")
    print(f"baseline: bare signed httpx GETs, one at a time: {baseline:.0f}/s")
    sequential = runs[0]
    per_poll = statistics.fmean(sequential.latencies)
    print(f"Shared Key signature: {sign * 1e6:.1f} us; date + signature: {build * 1e6:.1f} us")
    print(f"signing share of one sequential poll ({per_poll * 1e3:.2f} ms at concurrency {sequential.concurrency}): "
          f"{build / per_poll:.1%} (ratio 1:{per_poll / build:.0f})")


if __name__ == "__main__":
    main()
