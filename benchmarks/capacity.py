"""How many rules one operator process keeps on schedule: N rules at a 10 s polling interval, end to end.

    .venv/bin/python -m benchmarks.capacity [--rules 1000 5000 10000] [--seconds 40] [--warmup 15]

For each N it starts, all on 127.0.0.1:
- the fake API server (tests/fakekube) in a process of its own, preloaded with N Deployments and N QueueScalers;
- a small, fast queue server (asyncio, in a process of its own) that answers Get Queue Metadata for every queue
  with a fixed count, like Azure (`x-ms-approximate-messages-count`), and Peek Messages with one front message put
  a few seconds before, so each poll makes the two calls of the default `oldestAge: peek` (the count, then the
  front message's age). Azurite is not used: at 1,000 polls/s its node
  process, not the operator, would be what is measured (tests/azurite.py's ~1,200 polls/s from one client);
- `queuescale run` (the real operator, a subprocess), whose rules authenticate with a connection string (Shared
  Key signing on every poll) that points at the fast server.

Start-up, fresh (no rule has a status yet) and after a failover (the operator is stopped once measured and a new
one started on the same API server, whose rules carry the statuses the first one wrote): the time until every rule
has ticked once, from the operator's `queuescale_first_ticks_seconds` and `queuescale_leading_since_timestamp_seconds`,
counted from the process's start; the operator's API requests per second (peak second and mean, from the fake's
counts read every second) from its start until every rule is Ready (fresh) or for 20 s (failover), with the
status writes among them; and, fresh, the time until every rule is Ready (the first statuses, written at the
client's --kube-qps).

Once every rule has a status it measures for `--seconds`: tick lateness p50/p99 (interpolated from
`queuescale_tick_lateness_seconds`, as histogram_quantile does) and max (the highest non-empty bucket's upper
bound), operator CPU (share of one core) and RSS, polls/s, API requests/s (counted by the fake), the fake's own
CPU, and the time for a burst on one rule to reach its target while all the others run. Ratios are against the
first N of the run. Every process is stopped at the end, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import email.utils
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import httpx

ROOT = Path(__file__).resolve().parent.parent
NS = "bench"
STEADY_COUNT = 5  # messages in every queue: 1 replica at 10 per replica
BURST_COUNT = 150  # the burst: 15 replicas
TARGET_PER_REPLICA = 10
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------- queue server


class _QueueProtocol(asyncio.Protocol):
    """Just enough HTTP/1.1 (keep-alive, no request bodies) to answer Get Queue Metadata, Peek Messages and a `/_set`
    admin call."""

    counts: ClassVar[dict[str, int]] = {}
    served = 0
    moving = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            target = head.split(b"\r\n", 1)[0].split(b" ")[1].decode()
            url = urlsplit(target)
            if url.path == "/_set":
                query = parse_qs(url.query)
                _QueueProtocol.counts[query["queue"][0]] = int(query["count"][0])
                self.transport.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                continue
            if url.path == "/_stats":
                body = json.dumps({"served": _QueueProtocol.served}).encode()
                self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                continue
            _QueueProtocol.served += 1
            if url.path.endswith("/messages"):
                self.transport.write(_peek_answer(time.time()))
                continue
            queue = url.path.rsplit("/", 1)[-1]
            count = _QueueProtocol.counts.get(queue, STEADY_COUNT)
            if _QueueProtocol.moving and queue not in _QueueProtocol.counts:
                # 5..9: a count that changes on every poll but always asks for 1 replica, so every rule has a
                # count-only status change to write each --status-interval, as busy queues do.
                count += _QueueProtocol.served % 5
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nx-ms-request-id: bench\r\nx-ms-version: 2025-11-05\r\n"
                b"x-ms-approximate-messages-count: %d\r\n\r\n" % count
            )


FRONT_MESSAGE_WAITED = 3  # seconds: what every Peek Messages answer says of the front message


def _peek_answer(now: float) -> bytes:
    """Peek Messages' answer as Azure words it: a `Date` and one message put FRONT_MESSAGE_WAITED seconds before."""
    inserted = email.utils.formatdate(now - FRONT_MESSAGE_WAITED, usegmt=True).encode()
    expires = email.utils.formatdate(now + 604800, usegmt=True).encode()
    body = (b'<?xml version="1.0" encoding="utf-8"?><QueueMessagesList><QueueMessage><MessageId>bench</MessageId>'
            b"<InsertionTime>%s</InsertionTime><ExpirationTime>%s</ExpirationTime><DequeueCount>0</DequeueCount>"
            b"<MessageText>job</MessageText></QueueMessage></QueueMessagesList>" % (inserted, expires))
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: %d\r\nDate: %s\r\n"
            b"x-ms-request-id: bench\r\nx-ms-version: 2025-11-05\r\n\r\n%s"
            % (len(body), email.utils.formatdate(now, usegmt=True).encode(), body))


async def _serve_queues(port_file: Path, moving: bool) -> None:
    _QueueProtocol.moving = moving
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_QueueProtocol, "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    port_file.write_text(str(port))
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    server.close()


@contextlib.contextmanager
def queue_server(folder: Path) -> Iterator[str]:
    """This module's queue server in a process of its own (its CPU is not the operator's); yields its URL and stops
    it by its PID. Every queue holds 5 messages, and it answers the count and a peek."""
    port_file = folder / "queue-port"
    process = subprocess.Popen([sys.executable, "-m", "benchmarks.capacity", "_queues", str(port_file)], cwd=ROOT,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        _wait("the queue server", lambda: port_file.exists() and port_file.read_text().strip() != "", 10)
        yield f"http://127.0.0.1:{port_file.read_text().strip()}"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


# ---------------------------------------------------------------------------------------------- fake API server


def _rule(i: int, queue_endpoint: str, oldest_age: str = "auto") -> dict[str, Any]:
    """A count-mode rule: with the default `oldestAge: auto` its source makes one call per poll."""
    del queue_endpoint
    return {
        "apiVersion": "queuescale.io/v1alpha1", "kind": "QueueScaler",
        "metadata": {"name": f"r{i}", "namespace": NS},
        "spec": {
            "scaleTargetRef": {"name": f"w{i}"}, "minReplicas": 0, "maxReplicas": 20, "pollingInterval": "10s",
            "sources": [{"type": "azure-queue", "queueName": f"q{i:05d}",
                         "connectionSecretRef": {"name": "queue", "key": "connection"}, "oldestAge": oldest_age}],
            "policy": {"targetPerReplica": TARGET_PER_REPLICA, "tolerance": 0},
        },
    }


def _deployment(i: int) -> dict[str, Any]:
    name = f"w{i}"
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "worker", "image": "worker:1"}]}}},
    }


def _serve_fake(rules: int, queue_endpoint: str, kubeconfig: Path, oldest_age: str) -> None:
    import threading

    import yaml

    from tests.fakekube.server import FakeKube

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # history_limit: a status write per rule per interval must not expire the operator's watch at once.
    fake = FakeKube(history_limit=max(1000, 4 * rules), bookmark_interval=5.0)
    fake.create(yaml.safe_load((ROOT / "manifests" / "crd.yaml").read_text()))
    fake.ensure_namespace(NS)
    connection = (f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={DEV_KEY};"
                  f"QueueEndpoint={queue_endpoint}")
    fake.create({"apiVersion": "v1", "kind": "Secret",
                 "metadata": {"name": "queue", "namespace": NS, "annotations": {"queuescale.io/allowed-rules": "*"}},
                 "data": {"connection": base64.b64encode(connection.encode()).decode()}})
    for i in range(rules):
        fake.create(_deployment(i))
        fake.create(_rule(i, queue_endpoint, oldest_age))
    fake.start()
    partial = kubeconfig.with_suffix(".partial")
    fake.write_kubeconfig(partial, NS)
    os.replace(partial, kubeconfig)
    try:
        stop.wait()
    finally:
        fake.stop()


# ---------------------------------------------------------------------------------------------- measuring


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


_SAMPLE = re.compile(r'^([a-z_]+)(?:\{([^}]*)\})? ([0-9.eE+-]+|NaN|\+Inf)$')


def _samples(text: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            found[f"{match.group(1)}{{{match.group(2) or ''}}}"] = float(match.group(3))
    return found


def _buckets(samples: dict[str, float]) -> list[tuple[float, float]]:
    out = []
    for key, value in samples.items():
        match = re.fullmatch(r'queuescale_tick_lateness_seconds_bucket\{le="([^"]+)"\}', key)
        if match:
            out.append((float(match.group(1)), value))
    return sorted(out)


def _quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """histogram_quantile over cumulative (upper bound, count) pairs."""
    total = buckets[-1][1] if buckets else 0
    if total <= 0:
        return float("nan")
    rank = q * total
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if upper == float("inf"):
                return lower
            return lower + (upper - lower) * ((rank - below) / max(count - below, 1e-9))
        lower, below = upper, count
    return lower


@dataclass
class Figures:
    rules: int
    startup_s: float
    p50: float
    p99: float
    max_le: float
    cpu: float  # share of one core
    rss_mb: float
    polls_s: float
    api_s: float
    fake_cpu: float
    burst_s: float
    ticks: float
    api_kinds: dict[str, float]  # the operator's requests/s by method and resource
    gc: dict[str, float]  # the operator's cores spent in the cyclic garbage collector, by generation
    first_ticks_s: float = float("nan")  # from the operator's start until every rule had ticked once
    startup_api: tuple[float, float] = (float("nan"), float("nan"))  # requests/s from start to all Ready: peak, mean
    failover_first_ticks_s: float = float("nan")
    failover_api: tuple[float, float] = (float("nan"), float("nan"))  # peak, mean over the first 20 s
    failover_status_writes: float = float("nan")  # status PATCHes the new operator made in those 20 s
    startup_kinds: dict[str, float] | None = None  # the operator's requests by kind from its start to all Ready
    failover_kinds: dict[str, float] | None = None  # ...and the new operator's in its first 20 s


class Run:
    """One N: the three processes, started and stopped together."""

    def __init__(self, rules: int, workdir: Path, operator_args: list[str], ready_timeout: float = 180.0,
                 moving: bool = False, oldest_age: str = "auto") -> None:
        self.rules = rules
        self.moving = moving
        self.oldest_age = oldest_age
        self.ready_timeout = ready_timeout
        self.workdir = workdir
        self.operator_args = operator_args
        self.processes: list[subprocess.Popen[bytes]] = []

    def _spawn(self, args: list[str], log: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with (self.workdir / log).open("ab") as out:
            process = subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.processes.append(process)
        return process

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)

    def measure(self, seconds: float, warmup: float) -> Figures:
        me = [sys.executable, "-m", "benchmarks.capacity"]
        port_file = self.workdir / "queue-port"
        self._spawn([*me, "_queues", str(port_file), *(["moving"] if self.moving else [])], "queues.log")
        _wait("the queue server", lambda: port_file.exists() and port_file.read_text().strip() != "", 10)
        queues = f"http://127.0.0.1:{port_file.read_text().strip()}"
        kubeconfig = self.workdir / "kubeconfig"
        fake = self._spawn([*me, "_fake", str(self.rules), f"{queues}/devstoreaccount1", str(kubeconfig),
                            self.oldest_age], "fake.log")
        _wait("the fake API server", kubeconfig.exists, 600)
        server = _server_of(kubeconfig)
        from tests.azurite import free_port
        from tests.fakekube.tls import client_context_from_kubeconfig

        metrics_port, health_port = free_port(), free_port()
        started, started_at = time.monotonic(), time.time()
        operator = self._operator(kubeconfig, metrics_port, health_port)
        client = httpx.Client(timeout=30, verify=client_context_from_kubeconfig(kubeconfig))  # the fake is HTTPS
        requests = _RequestRate(client, server)

        def scrape() -> dict[str, float]:
            return _samples(client.get(f"http://127.0.0.1:{metrics_port}/metrics").text)

        scraped = [0.0]

        def all_reporting() -> bool:
            requests.sample()
            if time.monotonic() - scraped[0] < max(1.0, self.rules / 1000):
                return False
            scraped[0] = time.monotonic()
            if operator.poll() is not None:
                raise RuntimeError(f"the operator exited with {operator.returncode}; see {self.workdir}")
            try:
                samples = scrape()
            except httpx.HTTPError:
                return False
            return samples.get('queuescale_rules{state="ready"}', 0) >= self.rules

        try:
            # Scraped no more often than Prometheus would: rendering 10,000 rules' series costs the operator some
            # 0.35 s of CPU, and a scrape a second was a third of a core of the start-up measured (start-up
            # figures are to within this interval).
            _wait(f"all {self.rules} rules to be Ready", all_reporting, self.ready_timeout, every=1.0)
            startup = time.monotonic() - started
        except TimeoutError:
            startup = float("nan")  # it did not keep up: measure what it does anyway
            print(f"N={self.rules}: not every rule Ready after {self.ready_timeout:g}s; measuring anyway",
                  file=sys.stderr, flush=True)
        startup_api = requests.rates()
        startup_kinds = requests.kinds()
        first_ticks = _first_ticks(scrape(), started_at)
        time.sleep(warmup)

        before, cpu0, fake0 = scrape(), _cpu_seconds(operator.pid), _cpu_seconds(fake.pid)
        api0 = client.get(f"{server}/_fake/stats").json()["operator"]
        t0 = time.monotonic()
        time.sleep(seconds / 3)
        burst_rule = self.rules // 2
        client.get(f"{queues}/_set", params={"queue": f"q{burst_rule:05d}", "count": BURST_COUNT})
        burst_at = time.monotonic()
        wanted = BURST_COUNT // TARGET_PER_REPLICA
        burst = float("nan")
        while time.monotonic() - t0 < seconds or burst != burst:
            scale = client.get(f"{server}/apis/apps/v1/namespaces/{NS}/deployments/w{burst_rule}/scale",
                               headers={"Authorization": "Bearer fake-token"}).json()
            if burst != burst and scale["spec"]["replicas"] == wanted:
                burst = time.monotonic() - burst_at
            if time.monotonic() - burst_at > 40 and burst != burst:
                break
            time.sleep(0.1)
        elapsed = time.monotonic() - t0
        after, cpu1, fake1 = scrape(), _cpu_seconds(operator.pid), _cpu_seconds(fake.pid)
        api1 = client.get(f"{server}/_fake/stats").json()["operator"]
        rss = _rss_mb(operator.pid)
        failover = self._failover(kubeconfig, operator, client, server)
        client.close()

        delta = [(le, count - dict(_buckets(before)).get(le, 0)) for le, count in _buckets(after)]
        top = max((le for le, count in delta if count > 0 and (le == delta[0][0] or count > dict(delta).get(
            _below(le, delta), 0))), default=0.0)
        polls = sum(v for k, v in after.items() if k.startswith("queuescale_poll_duration_seconds_count")) - sum(
            v for k, v in before.items() if k.startswith("queuescale_poll_duration_seconds_count"))
        ticks = delta[-1][1] if delta else 0
        return Figures(
            rules=self.rules, startup_s=startup, p50=_quantile(0.5, delta), p99=_quantile(0.99, delta), max_le=top,
            cpu=(cpu1 - cpu0) / elapsed, rss_mb=rss, polls_s=polls / elapsed,
            api_s=sum(api1.values()) / elapsed - sum(api0.values()) / elapsed,
            api_kinds={kind: round((count - api0.get(kind, 0)) / elapsed, 1) for kind, count in sorted(api1.items())
                       if count > api0.get(kind, 0)},
            fake_cpu=(fake1 - fake0) / elapsed, burst_s=burst, ticks=ticks,
            gc={generation: round((after.get(f'queuescale_gc_pause_seconds_total{{generation="{generation}"}}', 0)
                                   - before.get(f'queuescale_gc_pause_seconds_total{{generation="{generation}"}}', 0))
                                  / elapsed, 3) for generation in "012"},
            first_ticks_s=first_ticks, startup_api=startup_api, failover_first_ticks_s=failover[0],
            failover_api=failover[1], failover_status_writes=failover[2], startup_kinds=startup_kinds,
            failover_kinds=failover[3],
        )

    def _operator(self, kubeconfig: Path, metrics_port: int, health_port: int) -> subprocess.Popen[bytes]:
        return self._spawn([
            sys.executable, "-m", "controller", "run", "--kubeconfig", str(kubeconfig), "--bind-address",
            "127.0.0.1", "--metrics-port", str(metrics_port), "--health-port", str(health_port), "--log-level",
            "warning", *self.operator_args,
        ], "operator.log")

    def _failover(self, kubeconfig: Path, operator: subprocess.Popen[bytes], client: httpx.Client,
                  server: str) -> tuple[float, tuple[float, float], float, dict[str, float]]:
        """Stop the operator and start another on the same API server, as a new leader would take over (less the
        lease's expiry, which a graceful stop does not wait for): the time until every rule has ticked once, and
        the API requests a second over its first 20 s."""
        from tests.azurite import free_port

        operator.send_signal(signal.SIGTERM)
        operator.wait(timeout=60)
        metrics_port = free_port()
        requests = _RequestRate(client, server)
        requests.sample()
        writes0 = _status_writes(client, server)
        started_at, started = time.time(), time.monotonic()
        successor = self._operator(kubeconfig, metrics_port, free_port())
        first_ticks = float("nan")
        scraped = started
        while time.monotonic() - started < 20 or first_ticks != first_ticks:
            if time.monotonic() - started > 120:
                break
            requests.sample()
            # A scrape of N rules' series costs the operator CPU: as seldom as while waiting for Ready.
            if first_ticks != first_ticks and time.monotonic() - scraped >= max(3.0, self.rules / 1000):
                scraped = time.monotonic()
                with contextlib.suppress(httpx.HTTPError):
                    first_ticks = _first_ticks(_samples(client.get(f"http://127.0.0.1:{metrics_port}/metrics").text),
                                               started_at)
            time.sleep(1.0 - (time.monotonic() - started) % 1.0)
        writes = _status_writes(client, server) - writes0
        del successor  # stopped with the others
        return first_ticks, requests.rates(), writes, requests.kinds()


def _below(le: float, delta: list[tuple[float, float]]) -> float:
    bounds = [b for b, _ in delta if b < le]
    return bounds[-1] if bounds else le


def _server_of(kubeconfig: Path) -> str:
    import yaml

    config = yaml.safe_load(kubeconfig.read_text())
    return str(config["clusters"][0]["cluster"]["server"])


def _wait(what: str, check: Any, timeout: float, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")


class _RequestRate:
    """The operator's API requests a second, from the fake's counts read about once a second."""

    def __init__(self, client: httpx.Client, server: str) -> None:
        self.client = client
        self.server = server
        self.points: list[tuple[float, float]] = []
        self.first: dict[str, float] | None = None
        self.last: dict[str, float] = {}

    def sample(self) -> bool:
        """Read the count if a second has passed since the last reading; always True."""
        now = time.monotonic()
        if self.points and now - self.points[-1][0] < 0.95:
            return True
        counts = self.client.get(f"{self.server}/_fake/stats").json()["operator"]
        if self.first is None:
            self.first = dict(counts)
        self.last = counts
        self.points.append((now, float(sum(counts.values()))))
        return True

    def kinds(self) -> dict[str, float]:
        """Requests by method and resource between the first reading and the last."""
        first = self.first or {}
        return {k: v - first.get(k, 0) for k, v in sorted(self.last.items()) if v > first.get(k, 0)}

    def rates(self) -> tuple[float, float]:
        """(the busiest second's rate, the mean rate) over the readings."""
        if len(self.points) < 2:
            return float("nan"), float("nan")
        steps = [(c1 - c0) / (t1 - t0) for (t0, c0), (t1, c1) in zip(self.points, self.points[1:], strict=False)]
        (t_first, c_first), (t_last, c_last) = self.points[0], self.points[-1]
        return max(steps), (c_last - c_first) / (t_last - t_first)


def _status_writes(client: httpx.Client, server: str) -> float:
    counts = client.get(f"{server}/_fake/stats").json()["operator"]
    return float(sum(v for k, v in counts.items() if k == "PATCH queuescalers/status"))


def _first_ticks(samples: dict[str, float], started_at: float) -> float:
    """Seconds from `started_at` (the process's start, wall clock) until every rule had ticked once."""
    since = samples.get("queuescale_leading_since_timestamp_seconds{}", float("nan"))
    took = samples.get("queuescale_first_ticks_seconds{}", float("nan"))
    return since + took - started_at


def _table(results: list[Figures]) -> str:
    base = results[0]
    lines = [
        "| rules | all Ready s | lateness p50 / p99 / max s | CPU (cores) | RSS MB | polls/s | API req/s | "
        "fake CPU | burst to target s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        startup = "not all Ready" if r.startup_s != r.startup_s else f"{r.startup_s:.0f}"
        lines.append(
            f"| {r.rules} | {startup} | {r.p50:.3f} / {r.p99:.3f} / <={r.max_le:g} | {r.cpu:.2f} "
            f"(x{r.cpu / max(base.cpu, 1e-9):.1f}) | {r.rss_mb:.0f} (x{r.rss_mb / base.rss_mb:.1f}) | "
            f"{r.polls_s:.0f} (x{r.polls_s / max(base.polls_s, 1e-9):.1f}) | {r.api_s:.0f} | {r.fake_cpu:.2f} | "
            f"{r.burst_s:.1f} |"
        )
    lines += [
        "",
        "| rules | first ticks s (fresh / failover) | API req/s during start-up, peak / mean (fresh) | "
        "(failover, first 20 s) | status writes (failover, first 20 s) |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.rules} | {r.first_ticks_s:.1f} / {r.failover_first_ticks_s:.1f} | {r.startup_api[0]:.0f} / "
            f"{r.startup_api[1]:.0f} | {r.failover_api[0]:.0f} / {r.failover_api[1]:.0f} | "
            f"{r.failover_status_writes:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "_queues":
        asyncio.run(_serve_queues(Path(args[1]), moving=args[2:] == ["moving"]))
        return 0
    if args and args[0] == "_fake":
        _serve_fake(int(args[1]), args[2], Path(args[3]), args[4] if len(args) > 4 else "auto")
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.capacity", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rules", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--seconds", type=float, default=40.0, help="measuring window per N")
    parser.add_argument("--warmup", type=float, default=15.0, help="wait after every rule is Ready")
    parser.add_argument("--keep", action="store_true", help="keep the logs folder")
    parser.add_argument("--ready-timeout", type=float, default=180.0,
                        help="give up waiting for every rule to be Ready after this long, and measure anyway")
    parser.add_argument("--operator-arg", action="append", default=[], help="extra `queuescale run` argument")
    parser.add_argument("--moving", action="store_true",
                        help="queue counts change on every poll (5-9: still 1 replica), so every rule has status to "
                             "write each --status-interval; default: steady counts")
    parser.add_argument("--oldest-age", choices=("auto", "peek", "off"), default="auto",
                        help="every rule's azure-queue oldestAge; the rules are in count mode, where auto does not "
                             "peek: `peek` measures two calls per poll (the count, then the front message's age)")
    options = parser.parse_args(args)
    results: list[Figures] = []
    with tempfile.TemporaryDirectory(prefix="queuescale-capacity-") as tmp:
        for rules in options.rules:
            workdir = Path(tmp) / str(rules)
            workdir.mkdir()
            run = Run(rules, workdir, options.operator_arg, options.ready_timeout, options.moving,
                      options.oldest_age)
            try:
                figures = run.measure(options.seconds, options.warmup)
            finally:
                run.stop()
            results.append(figures)
            print(f"N={rules}: {figures}", file=sys.stderr, flush=True)
        if options.keep:
            kept = Path(tempfile.mkdtemp(prefix="queuescale-capacity-logs-"))
            subprocess.run(["cp", "-r", tmp + "/.", str(kept)], check=False)
            print(f"logs kept in {kept}", file=sys.stderr)
    print(f"machine: {os.cpu_count()} CPUs, {_cpu_model()}, Python {sys.version.split()[0]}")
    print(_table(results))
    for r in results:
        print(f"N={r.rules} operator API requests/s: " + ", ".join(f"{k} {v:g}" for k, v in r.api_kinds.items()))
        print(f"N={r.rules} operator API requests from its start until every rule was Ready: "
              + ", ".join(f"{k} {v:g}" for k, v in (r.startup_kinds or {}).items()))
        print(f"N={r.rules} the new operator's API requests in its first 20 s after the failover: "
              + ", ".join(f"{k} {v:g}" for k, v in (r.failover_kinds or {}).items()))
        print(f"N={r.rules} operator cores in the garbage collector by generation: "
              + ", ".join(f"{k}: {v:g}" for k, v in r.gc.items()))
    return 0


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


if __name__ == "__main__":
    raise SystemExit(main())
