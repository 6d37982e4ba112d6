"""The sources' HTTP path at 1,000 and 10,000 rules: aiohttp called directly (`controller.net.http.HttpClient`)
against the hand-written HTTP/1.1 client it replaced (`StreamTransport.fetch`), in the same run.

    .venv/bin/python -m benchmarks.http_paths [--rules 1000 10000] [--seconds 30] [--warmup 12] [--repeat 2]
        [--paths aiohttp hand-written]

Each rule polls its own queue every 10 s, as the operator's reconciler does: its first poll spread over the first
interval, a late tick started at once and missed ones skipped, at most 500 polls in progress (the operator's
`--max-concurrent-ticks`, with the wait counted as lateness). A poll is the Azure poller's count call: a Get Queue
Metadata GET signed with Shared Key (date, signature, headers), and the count read from the answer, over one
shared client of 200 connections (the default `oldestAge: peek` adds a peek per poll of a queue that is not
empty: not sent here, the paths compared are the same for both calls). The server is benchmarks/capacity.py's
queue server on 127.0.0.1, in a process of its own; its CPU is not counted. Reported per run: polls/s (1,000/s
due at 10,000 rules), the client process's CPU in cores (`time.process_time`), CPU per poll, lateness
p50/p99/max, failures.

The paths alternate (A B A B) so that a noisy neighbour hurts both alike; compare ratios within a run. The rest
of a tick (decision, metrics, status) is the same on both paths and not run here: benchmarks/capacity.py measures
the whole operator. Bounded: (warmup + seconds + start-up) x paths x rule counts x repeats.

`hand-written` needs `controller.net.transport.StreamTransport`; once it is deleted, that path is skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from benchmarks.azure_poll import ACCOUNT, fast_server
from benchmarks.capacity import DEV_KEY
from controller.net.http import polling_client
from controller.net.slots import Slots
from controller.sources.azure_auth import SharedKey, format_http_date

INTERVAL = 10.0
TICK_SLOTS = 500
CONNECTIONS = 200
API_VERSION = "2025-11-05"
COUNT_HEADER = "x-ms-approximate-messages-count"

# method, url, headers, timeout -> (status, count header)
Poll = Callable[[str, dict[str, str], float], Awaitable[tuple[int, str | None]]]


@dataclass(frozen=True)
class Run:
    path: str
    rules: int
    polls: int
    failures: int
    seconds: float
    cpu_seconds: float
    lateness: list[float]

    @property
    def per_second(self) -> float:
        return self.polls / self.seconds

    @property
    def cores(self) -> float:
        return self.cpu_seconds / self.seconds

    @property
    def cpu_per_poll_us(self) -> float:
        return self.cpu_seconds / max(1, self.polls) * 1e6

    def late(self, fraction: float) -> float:
        ordered = sorted(self.lateness)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else float("nan")


class _Paths:
    """Opens the client of a path; the same narrow call on both: GET, URL, headers, timeout -> status, count."""

    @staticmethod
    def available() -> list[str]:
        try:
            importlib.import_module("controller.net.transport").StreamTransport  # noqa: B018
        except (ImportError, AttributeError):
            return ["aiohttp"]
        return ["aiohttp", "hand-written"]

    @staticmethod
    async def run(path: str, body: Callable[[Poll], Awaitable[Run]]) -> Run:
        if path == "aiohttp":
            async with polling_client(timeout=5.0, max_connections=CONNECTIONS) as client:
                async def aiohttp_poll(url: str, headers: dict[str, str], timeout: float) -> tuple[int, str | None]:
                    answer = await client.fetch("GET", url, headers=headers, timeout=timeout)
                    return answer.status, answer.headers.get(COUNT_HEADER)
                return await body(aiohttp_poll)
        import httpx

        transport_module = importlib.import_module("controller.net.transport")
        transport = transport_module.StreamTransport(max_connections=CONNECTIONS)
        urls: dict[str, httpx.URL] = {}  # as the Azure poller kept them

        async def hand_written_poll(url: str, headers: dict[str, str], timeout: float) -> tuple[int, str | None]:
            parsed = urls.get(url) or urls.setdefault(url, httpx.URL(url))
            wire = [(name.encode("ascii"), value.encode("ascii")) for name, value in headers.items()]
            answer = await transport.fetch("GET", parsed, wire, timeout=timeout)
            return answer.status_code, answer.headers.get(COUNT_HEADER)
        try:
            return await body(hand_written_poll)
        finally:
            await transport.aclose()


async def run_rules(path: str, endpoint: str, rules: int, warmup: float, seconds: float) -> Run:
    key = SharedKey.from_base64(ACCOUNT, DEV_KEY, where="bench")
    slots = Slots(TICK_SLOTS)
    lateness: list[float] = []
    counts = {"polls": 0, "failures": 0}
    measuring = asyncio.Event()
    stop = asyncio.Event()

    async def body(poll: Poll) -> Run:
        loop = asyncio.get_running_loop()
        start = loop.time() + 0.5

        async def rule(index: int) -> None:
            url = f"{endpoint}/q{index}?comp=metadata"
            due = start + INTERVAL * index / rules
            while not stop.is_set():
                await asyncio.sleep(max(0.0, due - loop.time()))
                if stop.is_set():
                    return
                async with slots:
                    late = loop.time() - due
                    headers = {"x-ms-date": format_http_date(time.time()), "x-ms-version": API_VERSION,
                               "User-Agent": "queuescale/bench"}
                    headers["Authorization"] = key.authorization("GET", url, headers)
                    try:
                        status, count = await poll(url, headers, 5.0)
                        failed = status != 200 or count is None or not count.isdigit()
                    except Exception:  # a failed poll is counted, as the operator would report it
                        failed = True
                if measuring.is_set():
                    lateness.append(late)
                    counts["polls"] += 1
                    counts["failures"] += failed
                due += INTERVAL
                while due < loop.time():  # missed ticks are skipped, as the reconciler does
                    due += INTERVAL

        tasks = [asyncio.create_task(rule(index)) for index in range(rules)]
        await asyncio.sleep(warmup)
        measuring.set()
        began, cpu_began = time.monotonic(), time.process_time()
        await asyncio.sleep(seconds)
        elapsed, cpu = time.monotonic() - began, time.process_time() - cpu_began
        measuring.clear()
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return Run(path, rules, counts["polls"], counts["failures"], elapsed, cpu, list(lateness))

    return await _Paths.run(path, body)


def report(runs: list[Run]) -> str:
    lines = [f"{'path':>12}  {'rules':>6}  {'polls/s':>7}  {'cores':>5}  {'CPU us/poll':>11}  "
             f"{'late p50 ms':>11}  {'p99 ms':>7}  {'max ms':>7}  {'fail':>4}"]
    for run in runs:
        lines.append(f"{run.path:>12}  {run.rules:>6}  {run.per_second:>7.0f}  {run.cores:>5.2f}  "
                     f"{run.cpu_per_poll_us:>11.0f}  {run.late(0.5) * 1e3:>11.1f}  {run.late(0.99) * 1e3:>7.1f}  "
                     f"{max(run.lateness, default=float('nan')) * 1e3:>7.1f}  {run.failures:>4}")
    by_rules: dict[int, dict[str, list[Run]]] = {}
    for run in runs:
        by_rules.setdefault(run.rules, {}).setdefault(run.path, []).append(run)
    for rules, paths in sorted(by_rules.items()):
        if {"aiohttp", "hand-written"} <= set(paths):
            ratios = [a.cpu_per_poll_us / h.cpu_per_poll_us for a, h in zip(paths["aiohttp"], paths["hand-written"],
                                                                               strict=False)]
            lines.append(f"{rules} rules: aiohttp / hand-written CPU per poll, per repeat: "
                         f"{', '.join(f'x{r:.2f}' for r in ratios)} (mean x{statistics.fmean(ratios):.2f})")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rules", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--seconds", type=float, default=30.0, help="measured time per run (default 30)")
    parser.add_argument("--warmup", type=float, default=12.0, help="time before measuring (default 12)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each path per rule count (default 2)")
    parser.add_argument("--paths", nargs="+", choices=["aiohttp", "hand-written"], default=None)
    args = parser.parse_args()
    if not 0 < args.seconds <= 300 or not 0 <= args.warmup <= 120 or not 1 <= args.repeat <= 5 \
            or any(not 1 <= n <= 20_000 for n in args.rules):
        parser.error("--seconds in (0, 300], --warmup in [0, 120], --repeat in [1, 5], --rules in [1, 20000]")
    paths = args.paths or _Paths.available()
    runs: list[Run] = []
    with fast_server() as endpoint:
        for rules in args.rules:
            for _ in range(args.repeat):
                for path in paths:
                    run = asyncio.run(run_rules(path, endpoint.url, rules, args.warmup, args.seconds))
                    print(report([run]).splitlines()[1], flush=True)
                    runs.append(run)
    print(report(runs))


if __name__ == "__main__":
    main()
